//! Who may write what (DESIGN.md §3): every write a tenant could use to get around the rules, refused with the
//! API server's exact words, and the writes the controller, KubeVirt, the garbage collector, platform
//! administrators and tenants must still make, allowed. Each case runs against the admission configuration the
//! twin compiles in and, with helm at hand, against the chart as the real helm renders it (policies, bindings,
//! webhook registrations and CRDs), with the CEL of its policies and CRDs executed.

use std::sync::Arc;

use gpuclaim_engine::controller::{Action, ClaimStatus, ObjectRef};
use gpuclaim_engine::fixtures::{self, gated_launcher, held_claim};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, ClaimPhase, Time, Usage, View, Vmi, VmiRef};
use gpuclaim_sim::apiserver::admission::chart::AdmissionConfig;
use gpuclaim_sim::apiserver::admission::crd::CrdRules;
use gpuclaim_sim::apiserver::{ApiError, ApiServer};
use gpuclaim_sim::users::{self, User};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

#[path = "../../tests/support/helm.rs"]
mod helm;

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const ATTACHMENTS: &str = r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":1}]"#;

fn now() -> Time {
    Time::from_second(1_800_000_000).unwrap()
}

fn controller() -> User {
    users::gpu_controller(keys::DEFAULT_CONTROLLER_NAMESPACE)
}

fn tenant() -> User {
    users::tenant("tenant-a")
}

fn vmi_ref(name: &str) -> VmiRef {
    VmiRef { name: name.into(), uid: format!("uid-vmi-{name}").into() }
}

/// tenant-a's world: held claim `train-a` attached to VMI `train` on gpu-1 with its open usage record, template
/// claim `serve-gpu-0` of VMI `serve`, the VMI `train` with its attachments, and the gated launcher of `wait`.
fn store() -> View {
    let mut view = fixtures::two_node_cluster();
    view.settings.controller_user = Some(controller().username);
    view.upsert_claim(fixtures::attached(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1", "train"));
    let mut template = fixtures::bound(held_claim("tenant-a", "serve-gpu-0", "h100", 2), "gpu-2");
    template.template = true;
    template.owner_vmi = Some(vmi_ref("serve"));
    view.upsert_claim(template);
    view.upsert_usage(Usage {
        namespace: "tenant-a".into(),
        name: "train-a-1".into(),
        resource_version: "1".into(),
        claim: "train-a".into(),
        claim_uid: "uid-tenant-a-train-a".into(),
        class: "h100".into(),
        resource_name: H100.into(),
        count: 1,
        vmi: vmi_ref("train"),
        node: "gpu-1".into(),
        start: now(),
        end: None,
    });
    let mut vmi =
        Vmi { namespace: "tenant-a".into(), name: "train".into(), uid: "uid-vmi-train".into(), ..Vmi::default() };
    vmi.resource_version = "1".into();
    Arc::make_mut(&mut vmi.labels).insert(keys::LABEL_CLAIMS.into(), keys::TRUE.into());
    Arc::make_mut(&mut vmi.annotations).insert(keys::ANNOTATION_ATTACHMENTS.into(), ATTACHMENTS.into());
    view.upsert_vmi(vmi);
    view.upsert_pod(gated_launcher("tenant-a", "wait", "[]", H100, 1, now()));
    view
}

/// The chart as helm renders it (CRDs included), once per test run; `None` without helm.
fn rendered() -> Option<&'static [serde_json::Value]> {
    static RENDERED: std::sync::OnceLock<Option<Vec<serde_json::Value>>> = std::sync::OnceLock::new();
    RENDERED
        .get_or_init(|| helm::helm().map(|helm| helm::render(&helm, &["--include-crds"], &["gpu.enabled=true"])))
        .as_deref()
}

/// The configurations to judge by: the twin's, and the chart as helm renders it when there is a helm.
fn servers() -> Vec<(&'static str, ApiServer)> {
    let mut servers = vec![("compiled in", ApiServer::new(store(), 100))];
    if let Some(documents) = rendered() {
        let config = AdmissionConfig::from_rendered(documents).expect("the rendered chart's admission reads");
        let crds: Vec<CustomResourceDefinition> = helm::of_kind(documents, "CustomResourceDefinition")
            .into_iter()
            .map(|crd| serde_json::from_value(crd.clone()).unwrap())
            .collect();
        assert_eq!(crds.len(), 3, "the chart installs our three CRDs");
        let mut server = ApiServer::new(store(), 100);
        server.admission.configure(config, CrdRules::of(&crds));
        let rendered = helm::of_kind(documents, "ConfigMap")
            .into_iter()
            .find(|c| c["metadata"]["name"] == keys::SETTINGS_CONFIGMAP)
            .map(|c| serde_json::from_value(c["data"].clone()).unwrap());
        assert_eq!(rendered.as_ref(), server.admission.settings(), "the twin's settings are the chart's defaults");
        servers.push(("rendered by helm", server));
    }
    servers
}

/// `write` against every configuration: refused with `reason` and exactly `message`.
fn refused(write: impl Fn(&mut ApiServer) -> Result<(), ApiError>, reason: &str, message: &str) {
    for (config, mut server) in servers() {
        let error = write(&mut server).expect_err(config);
        assert_eq!((error.reason(), error.to_string().as_str()), (reason, message), "{config}");
    }
}

/// `write` against every configuration: allowed.
fn allowed(write: impl Fn(&mut ApiServer) -> Result<(), ApiError>) {
    for (config, mut server) in servers() {
        write(&mut server).unwrap_or_else(|e| panic!("{config}: {e}"));
    }
}

fn policy(name: &str, message: &str) -> String {
    format!("ValidatingAdmissionPolicy 'gpuclaim-{name}' with binding 'gpuclaim-{name}' denied request: {message}")
}

const STATUS: &str =
    "the status of a GPUClaim (phase, node, attachment, conditions) is written by the GPU controller only";
const USAGE: &str = "GPUUsage records are written by the GPU controller only, and deleted with their claim";
const ANNOTATION: &str = "the annotation gpu.cozystack.io/attachments is written by the VMI webhook and copied by \
                          KubeVirt onto the launcher; nobody else may set or change it";

// ---- refused -------------------------------------------------------------------------------------------------

#[test]
fn raising_a_bound_claims_count_is_refused_by_the_crds_rule() {
    refused(
        |api| api.update_claim("tenant-a", "train-a", "", &tenant(), |c| c.count = 8),
        "Invalid",
        &format!(
            "GPUClaim.gpu.cozystack.io \"train-a\" is invalid: spec: Forbidden: {}",
            gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE
        ),
    );
}

#[test]
fn switching_a_claims_class_is_refused_by_the_crds_rule_and_else_by_the_order_webhook() {
    refused(
        |api| api.update_claim("tenant-a", "train-a", "", &tenant(), |c| c.class = "a100-40c".into()),
        "Invalid",
        &format!(
            "GPUClaim.gpu.cozystack.io \"train-a\" is invalid: spec: Forbidden: {}",
            gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE
        ),
    );
}

#[test]
fn removing_the_template_mark_is_refused_whatever_value_replaces_it() {
    let message = policy(
        "template-mark",
        "the label gpu.cozystack.io/template-claim marks the claims the GPU controller orders for one VM run; only \
         system:serviceaccount:cozy-gpuclaim:gpuclaim may set, change or remove it",
    );
    refused(
        |api| api.update_claim("tenant-a", "serve-gpu-0", "", &tenant(), |c| c.template = false),
        "Forbidden",
        &message,
    );
    let mut marked = held_claim("tenant-a", "sneaky", "h100", 8);
    marked.template = true;
    refused(|api| api.create_claim(marked.clone(), &tenant()).map(|_| ()), "Forbidden", &message);
}

#[test]
fn a_tenant_writing_a_claims_status_is_refused() {
    // Detaching its claim from the VMI using it would let a second VM attach it too.
    refused(
        |api| {
            api.update_claim("tenant-a", "train-a", "status", &tenant(), |c| {
                c.phase = ClaimPhase::Bound;
                c.attached_to = None;
            })
        },
        "Forbidden",
        &policy("controller-writes", STATUS),
    );
}

#[test]
fn a_tenant_removing_the_release_finalizer_is_refused() {
    refused(
        |api| api.update_claim("tenant-a", "train-a", "", &tenant(), |c| c.finalizer = false),
        "Forbidden",
        &policy(
            "controller-writes",
            "the finalizer gpu.cozystack.io/release is removed by the GPU controller only, once the claim's VMI has \
             let go of it",
        ),
    );
}

#[test]
fn a_tenant_editing_or_deleting_a_usage_record_is_refused() {
    let message = policy("controller-writes", USAGE);
    refused(|api| api.update_usage("tenant-a", "train-a-1", &tenant(), |u| u.end = Some(now())), "Forbidden", &message);
    refused(|api| api.delete_usage("tenant-a", "train-a-1", &tenant()), "Forbidden", &message);
}

#[test]
fn a_tenant_removing_the_placement_gate_is_refused() {
    refused(
        |api| api.update_pod("tenant-a", "virt-launcher-wait-abcde", &tenant(), |p| p.scheduling_gates.clear()),
        "Forbidden",
        &policy(
            "controller-writes",
            "the scheduling gate gpu.cozystack.io/placement is removed by the GPU controller only, when it pins the \
             pod to the node its GPU claims fit on",
        ),
    );
}

#[test]
fn a_tenant_changing_the_attachments_annotation_on_a_pod_or_a_vmi_is_refused() {
    let forged = r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":8}]"#;
    let message = policy("controller-writes", ANNOTATION);
    refused(
        |api| {
            api.update_pod("tenant-a", "virt-launcher-wait-abcde", &tenant(), |p| {
                Arc::make_mut(&mut p.annotations).insert(keys::ANNOTATION_ATTACHMENTS.into(), forged.into());
            })
        },
        "Forbidden",
        &message,
    );
    refused(
        |api| {
            api.update_vmi("tenant-a", "train", &tenant(), |v| {
                Arc::make_mut(&mut v.annotations).insert(keys::ANNOTATION_ATTACHMENTS.into(), forged.into());
            })
        },
        "Forbidden",
        &message,
    );
    // A pod of the tenant's own carrying it, to be placed as if the VMI webhook had resolved it.
    let mut pod = gated_launcher("tenant-a", "forged", forged, H100, 8, now());
    pod.scheduling_gates.clear();
    refused(|api| api.create_pod(pod.clone(), &tenant()).map(|_| ()), "Forbidden", &message);
}

#[test]
fn a_tenant_labelling_its_namespace_vgpu_entitled_is_refused() {
    refused(
        |api| api.label_namespace("tenant-a", &tenant(), true),
        "Forbidden",
        &policy(
            "vgpu-entitlement",
            "the label gpu.cozystack.io/vgpu-entitled entitles a namespace to vGPU classes; only members of \
             system:masters may set, change or remove it",
        ),
    );
}

// ---- allowed -------------------------------------------------------------------------------------------------

fn template_claim_action() -> Action {
    Action::CreateClaim {
        claim: ObjectRef::new("tenant-a", "run-gpu-0"),
        class: "h100".into(),
        count: 2,
        owner: vmi_ref("run"),
        status: ClaimStatus { phase: ClaimPhase::Pending, node: None, attached_to: None, pending: None },
    }
}

fn claim_of(api: &ApiServer, name: &str) -> Claim {
    api.store().claim("tenant-a", name).unwrap().clone()
}

#[test]
fn the_controller_creates_marked_claims_writes_their_status_and_removes_their_finalizer() {
    allowed(|api| {
        api.write(&template_claim_action(), now(), &controller())?;
        let claim = claim_of(api, "run-gpu-0");
        let status = ClaimStatus {
            phase: ClaimPhase::Bound,
            node: Some("gpu-1".into()),
            attached_to: Some(vmi_ref("run")),
            pending: None,
        };
        let update = |precondition, finalizer, status| Action::UpdateClaim {
            claim: ObjectRef::new("tenant-a", "run-gpu-0"),
            precondition,
            finalizer,
            status,
        };
        api.write(&update(claim.resource_version.clone(), None, Some(status)), now(), &controller())?;
        let claim = claim_of(api, "run-gpu-0");
        api.write(&update(claim.resource_version.clone(), Some(false), None), now(), &controller())?;
        assert!(!claim_of(api, "run-gpu-0").finalizer);
        Ok(())
    });
}

#[test]
fn the_controller_writes_usage_records_and_pins_and_ungates() {
    allowed(|api| {
        let usage = Usage { name: "train-a-2".into(), ..api.store().usage("tenant-a", "train-a-1").unwrap().clone() };
        api.write(&Action::OpenUsage { usage }, now(), &controller())?;
        let version = api.store().usage("tenant-a", "train-a-1").unwrap().resource_version.clone();
        let close =
            Action::CloseUsage { usage: ObjectRef::new("tenant-a", "train-a-1"), precondition: version, end: now() };
        api.write(&close, now(), &controller())?;
        let pod = api.store().pod("tenant-a", "virt-launcher-wait-abcde").unwrap().clone();
        let terms = gpuclaim_engine::scheduling::pin_terms(pod.required_terms(), "gpu-1");
        let pin = Action::PinAndUngate {
            pod: ObjectRef::new("tenant-a", &pod.name),
            precondition: pod.resource_version.clone(),
            node: "gpu-1".into(),
            terms: Arc::new(terms),
        };
        api.write(&pin, now(), &controller())?;
        Ok(())
    });
}

#[test]
fn kubevirt_creates_launchers_with_the_annotation_and_updates_vmis() {
    allowed(|api| {
        let mut pod = gated_launcher("tenant-a", "train", ATTACHMENTS, H100, 1, now());
        pod.scheduling_gates.clear();
        api.create_pod(pod, &users::kubevirt_controller())?;
        api.update_vmi("tenant-a", "train", &users::kubevirt_handler(), |v| {
            v.phase = gpuclaim_engine::model::VmiPhase::Running;
            Arc::make_mut(&mut v.labels).insert("kubevirt.io/nodeName".into(), "gpu-1".into());
        })?;
        Ok(())
    });
}

#[test]
fn the_garbage_collector_takes_usage_records_and_template_claims_whose_owners_are_gone() {
    allowed(|api| {
        api.delete_usage("tenant-a", "train-a-1", &users::garbage_collector())?;
        api.delete_claim("tenant-a", "serve-gpu-0", None)?;
        Ok(())
    });
}

#[test]
fn a_tenant_deletes_its_own_claim_and_makes_writes_that_touch_nothing_guarded() {
    allowed(|api| {
        api.delete_claim("tenant-a", "train-a", None)?;
        assert!(claim_of(api, "train-a").deleting, "its finalizer keeps it until the controller releases it");
        api.update_vmi("tenant-a", "train", &tenant(), |v| {
            Arc::make_mut(&mut v.labels).insert("team".into(), "vision".into());
        })?;
        Ok(())
    });
}

#[test]
fn a_platform_administrator_grants_the_entitlement_and_repairs_a_stuck_finalizer() {
    allowed(|api| {
        api.label_namespace("tenant-a", &users::platform_admin(), true)?;
        assert!(api.store().tenant("tenant-a").unwrap().vgpu_entitled);
        api.update_claim("tenant-a", "train-a", "", &users::platform_admin(), |c| c.finalizer = false)?;
        Ok(())
    });
}

#[test]
fn a_status_write_keeps_the_spec_and_a_claim_write_keeps_the_status() {
    let mut api = ApiServer::new(store(), 100);
    api.update_claim("tenant-a", "train-a", "status", &users::platform_admin(), |c| {
        c.count = 5;
        c.node = Some("gpu-2".into());
    })
    .unwrap();
    let claim = claim_of(&api, "train-a");
    assert_eq!((claim.count, claim.node.as_deref()), (1, Some("gpu-2")), "the status subresource ignores the spec");
    api.update_claim("tenant-a", "train-a", "", &users::platform_admin(), |c| c.node = None).unwrap();
    assert_eq!(claim_of(&api, "train-a").node.as_deref(), Some("gpu-2"), "the claim itself ignores its status");
}

#[test]
fn without_the_settings_the_controllers_guarded_writes_are_refused_and_the_others_pass() {
    let mut view = store();
    view.settings.controller_user = None;
    let mut api = ApiServer::new(view, 100);
    assert!(api.admission.settings().is_none(), "no settings ConfigMap");
    let error = api.write(&template_claim_action(), now(), &controller()).unwrap_err();
    assert!(error.to_string().contains("only the user named by controllerUser in the gpu-claims-settings ConfigMap"));
    let claim = claim_of(&api, "train-a");
    let status = Action::UpdateClaim {
        claim: ObjectRef::new("tenant-a", "train-a"),
        precondition: claim.resource_version.clone(),
        finalizer: None,
        status: Some(ClaimStatus {
            phase: ClaimPhase::Bound,
            node: Some("gpu-1".into()),
            attached_to: None,
            pending: None,
        }),
    };
    assert_eq!(
        api.write(&status, now(), &controller()).unwrap_err().reason(),
        "Forbidden",
        "nobody is known to be the controller"
    );
    // A write the policies do not guard: the finalizer added back to a claim.
    api.update_claim("tenant-a", "serve-gpu-0", "", &controller(), |c| c.finalizer = true).unwrap();
}

#[test]
fn no_rule_of_the_chart_selects_the_schedulers_or_the_kubelets_writes() {
    use gpuclaim_sim::apiserver::admission::request::{self, Operation, Request};
    for (_, mut api) in servers() {
        let kubelet = User::person("system:node:gpu-1", &["system:nodes"]);
        for subresource in ["binding", "status"] {
            let head = Request::head(Operation::Update, request::PODS, subresource, "tenant-a", "p", &kubelet);
            assert!(!api.admission.needs_objects(&head).unwrap(), "pods/{subresource}");
        }
        let head = Request::head(Operation::Delete, request::PODS, "", "tenant-a", "p", &kubelet);
        assert!(!api.admission.needs_objects(&head).unwrap(), "pod deletes");
    }
}

/// An object given as JSON, for writes the compact model cannot hold (a label with another value).
struct Raw(serde_json::Value, std::collections::BTreeMap<String, String>);

impl gpuclaim_sim::apiserver::admission::request::Served for Raw {
    fn json(&self) -> serde_json::Value {
        self.0.clone()
    }

    fn labels(&self) -> std::borrow::Cow<'_, std::collections::BTreeMap<String, String>> {
        std::borrow::Cow::Borrowed(&self.1)
    }
}

#[test]
fn the_template_marks_value_is_compared_not_only_its_presence() {
    use gpuclaim_sim::apiserver::admission::request::{self, Operation, Request};
    let claim = |value: &str| {
        let labels = std::collections::BTreeMap::from([(keys::LABEL_TEMPLATE_CLAIM.to_owned(), value.to_owned())]);
        let json = serde_json::json!({
            "metadata": {"name": "serve-gpu-0", "namespace": "tenant-a", "labels": labels},
            "spec": {"className": "h100", "count": 2},
        });
        Raw(json, labels)
    };
    let (old, new) = (claim("true"), claim("false"));
    for (config, mut api) in servers() {
        let user = tenant();
        let request = Request {
            operation: Operation::Update,
            resource: request::CLAIMS,
            subresource: "",
            namespace: "tenant-a",
            name: "serve-gpu-0",
            user: &user,
            object: Some(&new),
            old_object: Some(&old),
        };
        let error = api.admission.validate(&request).expect_err(config);
        assert!(error.to_string().contains("'gpuclaim-template-mark'"), "{config}: {error}");
        let same = Request { object: Some(&old), ..request };
        assert!(api.admission.validate(&same).is_ok(), "{config}: the mark untouched passes");
    }
}
