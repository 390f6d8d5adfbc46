//! Remote admission held to the compiled-in chain: the chart's webhook configurations stored, every call carried
//! by an in-memory transport that answers with the engine's review code (what `gpuclaim review` and the live
//! webhook run), and the same writes admitted, patched and refused as in process, with the same reasons, codes and
//! messages. Outages under `failurePolicy: Fail` give the API server's very text; under `Ignore` the write goes on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use gpuclaim_engine::convert::{pod_from_json, vmi_from_json};
use gpuclaim_engine::fixtures::{self, held_claim, launcher_pod_json};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Pod, View, Vmi};
use gpuclaim_engine::review::{Webhook, answer_review};
use gpuclaim_sim::apiserver::admission::chart::{POLICY_FILES, RELEASE, WEBHOOK_FILES, chart_binding};
use gpuclaim_sim::apiserver::admission::crd::CrdRules;
use gpuclaim_sim::apiserver::admission::remote::{CallFailure, WebhookCall, WebhookTransport};
use gpuclaim_sim::apiserver::{ApiError, ApiServer};
use gpuclaim_sim::users;
use serde_json::{Value, json};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const NAMESPACE: &str = keys::DEFAULT_CONTROLLER_NAMESPACE;
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// The webhooks as the controller serves them: the engine's review code on its view, unless the Service has no
/// ready endpoint. Every call is kept.
struct EngineWebhooks {
    view: View,
    down: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<WebhookCall>>>,
}

impl WebhookTransport for EngineWebhooks {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure> {
        self.calls.lock().unwrap().push(call.clone());
        if self.down.load(Ordering::SeqCst) {
            return Err(CallFailure::new(format!("no endpoints available for service {:?}", call.service.name)));
        }
        let (answer, _) = answer_review(&self.view, &call.body).map_err(|e| CallFailure::new(e.to_string()))?;
        Ok(answer)
    }
}

/// The chart's admission objects as helm renders them (`templates/webhooks.yaml`, `templates/policies.yaml`) for
/// the release in the controller's namespace.
fn chart_documents() -> Vec<Value> {
    let mut configurations: Vec<(&str, &str, Vec<Value>)> = vec![
        ("MutatingWebhookConfiguration", "vmi", Vec::new()),
        ("MutatingWebhookConfiguration", "pod", Vec::new()),
        ("ValidatingWebhookConfiguration", "order", Vec::new()),
    ];
    for (stem, webhook, text) in WEBHOOK_FILES {
        let mut entry: Value = gpuclaim_engine::yaml::from_str(text).unwrap();
        let mutating = webhook != Webhook::Order;
        entry["name"] = format!("{stem}.{}", keys::GROUP).into();
        entry["admissionReviewVersions"] = json!(["v1"]);
        entry["sideEffects"] = "None".into();
        entry["matchPolicy"] = "Equivalent".into();
        entry["timeoutSeconds"] = 10.into();
        if mutating {
            entry["reinvocationPolicy"] = "IfNeeded".into();
        }
        entry["clientConfig"] = json!({
            "service": {"name": "gpuclaim-webhook", "namespace": NAMESPACE, "path": webhook.path(), "port": 443},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(CA),
        });
        entry["namespaceSelector"] = json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}
        ]});
        let configuration = configurations.iter_mut().find(|(_, name, _)| *name == webhook.name()).unwrap();
        configuration.2.push(entry);
    }
    let mut documents: Vec<Value> = configurations
        .into_iter()
        .map(|(kind, name, webhooks)| {
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": format!("{RELEASE}-{name}")}, "webhooks": webhooks,
            })
        })
        .collect();
    for (stem, text) in POLICY_FILES {
        let name = format!("{RELEASE}-{stem}");
        let spec: Value = gpuclaim_engine::yaml::from_str(text).unwrap();
        documents.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec,
        }));
        documents.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": chart_binding(&name, NAMESPACE),
        }));
    }
    documents
}

/// The engine's platform fixture with the chart's settings (KubeVirt and the controller trusted by the policies).
fn platform() -> View {
    let mut view = fixtures::platform();
    view.settings.controller_user = Some(users::gpu_controller(NAMESPACE).username);
    view
}

struct Remote {
    api: ApiServer,
    down: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<WebhookCall>>>,
}

impl Remote {
    fn calls(&self) -> Vec<WebhookCall> {
        self.calls.lock().unwrap().clone()
    }
}

/// An API server in remote mode over `view`, the chart's configuration stored when `configured`.
fn remote(view: View, configured: bool) -> Remote {
    let (down, calls) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let mut api = ApiServer::new(view.clone(), 100);
    let transport = EngineWebhooks { view, down: Arc::clone(&down), calls: Arc::clone(&calls) };
    api.admission.go_remote(Box::new(transport));
    if configured {
        let problems = api.admission.configure_remote(&chart_documents(), CrdRules::generated());
        assert_eq!(problems, Vec::<String>::new(), "the chart's configuration compiles");
    }
    Remote { api, down, calls }
}

fn launcher(namespace: &str, vm: &str, attachments: &str) -> Pod {
    let mut pod = pod_from_json(&launcher_pod_json(namespace, vm, attachments, H100, 1), namespace).unwrap();
    pod.name = format!("virt-launcher-{vm}-abcde").into();
    pod.uid = format!("uid-pod-{vm}").into();
    pod
}

fn vmi(references: &str) -> Vmi {
    let mut vmi = vmi_from_json(&fixtures::vmi_json("tenant-a", "vm-1", references), "tenant-a").unwrap();
    vmi.uid = "uid-vmi-vm-1".into();
    vmi
}

/// What a client sees of a refusal: reason, code and message.
fn seen(error: ApiError) -> (String, u16, String) {
    (error.reason().to_owned(), error.code(), error.to_string())
}

const ATTACHMENTS: &str = r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":1}]"#;

#[test]
fn a_launcher_is_gated_by_the_remote_pod_webhook_exactly_as_in_process() {
    let mut local = ApiServer::new(platform(), 100);
    let mut remote = remote(platform(), true);
    let kubevirt = users::kubevirt_controller();
    let expected = local.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &kubevirt).unwrap().clone();
    let got = remote.api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &kubevirt).unwrap().clone();
    assert!(expected.scheduling_gates.iter().any(|g| g.as_str() == keys::GATE_PLACEMENT), "the rule gated it");
    assert_eq!(got, expected, "the patch read back is the in-process rule's result");
    let calls = remote.calls();
    assert_eq!(calls.len(), 1, "called once: no later webhook changed the pod");
    let call = &calls[0];
    assert_eq!(call.url(), format!("https://gpuclaim-webhook.{NAMESPACE}.svc:443/mutate-pod?timeout=10s"));
    assert_eq!(call.ca_bundle, CA.as_bytes());
    let request = &call.body["request"];
    assert_eq!(request["uid"], "00000000-0000-4000-8000-000000000001");
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["userInfo"]["username"], kubevirt.username.as_str());
    assert_eq!(request["options"], json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}));
    assert_eq!(request["dryRun"], false);
}

#[test]
fn a_vmi_is_admitted_by_the_remote_vmi_webhook_exactly_as_in_process() {
    let mut local = ApiServer::new(platform(), 100);
    let mut remote = remote(platform(), true);
    let kubevirt = users::kubevirt_controller();
    let references = r#"[{"claim":"train-b"}]"#;
    let expected = local.create_vmi(vmi(references), &kubevirt).unwrap().clone();
    let got = remote.api.create_vmi(vmi(references), &kubevirt).unwrap().clone();
    assert!(expected.annotations.contains_key(keys::ANNOTATION_ATTACHMENTS), "the rule recorded the start");
    assert_eq!(got, expected);
}

#[test]
fn a_vmi_the_rule_refuses_is_refused_remotely_with_the_same_reason_code_and_message() {
    let mut local = ApiServer::new(platform(), 100);
    let mut remote = remote(platform(), true);
    let kubevirt = users::kubevirt_controller();
    let references = r#"[{"claim":"busy"}]"#;
    let expected = seen(local.create_vmi(vmi(references), &kubevirt).unwrap_err());
    let got = seen(remote.api.create_vmi(vmi(references), &kubevirt).unwrap_err());
    assert!(expected.2.starts_with("admission webhook \"vmi.gpu.cozystack.io\" denied the request: "), "{expected:?}");
    assert_eq!(got, expected);
}

#[test]
fn an_order_over_budget_is_refused_remotely_with_the_same_reason_code_and_message() {
    let mut local = ApiServer::new(platform(), 100);
    let mut remote = remote(platform(), true);
    let tenant = users::tenant("tenant-a");
    let expected = seen(local.create_claim(held_claim("tenant-a", "big", "h100", 6), &tenant).unwrap_err());
    let got = seen(remote.api.create_claim(held_claim("tenant-a", "big", "h100", 6), &tenant).unwrap_err());
    assert_eq!(expected.0, "BudgetExceeded", "the refusal counts as OrderRefused:BudgetExceeded: {expected:?}");
    assert_eq!(got, expected);
    let calls = remote.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].url(), format!("https://gpuclaim-webhook.{NAMESPACE}.svc:443/validate-order?timeout=10s"));
}

#[test]
fn an_order_within_budget_is_admitted_remotely() {
    let mut remote = remote(platform(), true);
    remote.api.create_claim(held_claim("tenant-a", "small", "h100", 2), &users::tenant("tenant-a")).unwrap();
    assert_eq!(remote.calls().len(), 1);
}

#[test]
fn an_outage_fails_a_create_closed_with_the_api_servers_text_as_in_process() {
    let mut local = ApiServer::new(platform(), 100);
    local.admission.ready_replicas = 0;
    let mut remote = remote(platform(), true);
    remote.down.store(true, Ordering::SeqCst);
    let kubevirt = users::kubevirt_controller();
    let expected = seen(local.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &kubevirt).unwrap_err());
    let got = seen(remote.api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &kubevirt).unwrap_err());
    assert_eq!(
        got.2,
        format!(
            "Internal error occurred: failed calling webhook \"pod.gpu.cozystack.io\": failed to call webhook: Post \
             \"https://gpuclaim-webhook.{NAMESPACE}.svc:443/mutate-pod?timeout=10s\": no endpoints available for \
             service \"gpuclaim-webhook\""
        )
    );
    assert_eq!(got, expected);
}

#[test]
fn an_outage_under_ignore_lets_a_claim_update_through_after_trying() {
    let mut remote = remote(platform(), true);
    remote.down.store(true, Ordering::SeqCst);
    remote.api.update_claim("tenant-a", "train-a", "", &users::tenant("tenant-a"), |_| {}).unwrap();
    let calls = remote.calls();
    assert_eq!(calls.len(), 1, "order-update was called and failed open");
    assert_eq!(calls[0].body["request"]["operation"], "UPDATE");
    assert_eq!(calls[0].body["request"]["options"]["kind"], "UpdateOptions");
}

#[test]
fn nothing_is_called_until_a_configuration_is_stored() {
    let mut remote = remote(platform(), false);
    let pod = remote.api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &users::kubevirt_controller()).unwrap();
    assert!(pod.scheduling_gates.is_empty(), "no webhook gated it");
    remote.api.create_claim(held_claim("tenant-a", "big", "h100", 6), &users::tenant("tenant-a")).unwrap();
    assert!(remote.calls().is_empty());
}

#[test]
fn a_namespace_the_selector_leaves_out_is_not_called() {
    let mut view = platform();
    view.set_vgpu_entitled(NAMESPACE, false);
    let mut remote = remote(view, true);
    remote.api.create_pod(launcher(NAMESPACE, "vm-1", ATTACHMENTS), &users::kubevirt_controller()).unwrap();
    assert!(remote.calls().is_empty(), "the release's own namespace is excluded");
}

/// A transport answering every review with `answer(uid)`.
struct Answering(fn(&str) -> Value);

impl WebhookTransport for Answering {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure> {
        Ok((self.0)(call.body["request"]["uid"].as_str().unwrap()))
    }
}

fn answering(answer: fn(&str) -> Value) -> ApiServer {
    let mut api = ApiServer::new(platform(), 100);
    api.admission.go_remote(Box::new(Answering(answer)));
    assert_eq!(api.admission.configure_remote(&chart_documents(), CrdRules::generated()), Vec::<String>::new());
    api
}

#[test]
fn an_answer_for_another_review_fails_the_call_with_the_api_servers_text() {
    let mut api = answering(
        |_| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": true}}),
    );
    let error = api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &users::kubevirt_controller()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Internal error occurred: failed calling webhook \"pod.gpu.cozystack.io\": received invalid webhook \
         response: expected response.uid=\"00000000-0000-4000-8000-000000000001\", got \"x\""
    );
    assert_eq!((error.reason(), error.code()), ("InternalError", 500));
}

#[test]
fn a_denial_without_a_message_says_so_and_defaults_to_forbidden() {
    let mut api = answering(
        |uid| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": false}}),
    );
    let error = api.create_claim(held_claim("tenant-a", "big", "h100", 1), &users::tenant("tenant-a")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "admission webhook \"order.gpu.cozystack.io\" denied the request without explanation"
    );
    assert_eq!((error.reason(), error.code()), ("Forbidden", 403));
}

/// The engine's webhooks, and a second mutating webhook (`/label`) that labels every pod it sees.
struct WithLabeler {
    engine: EngineWebhooks,
}

impl WebhookTransport for WithLabeler {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure> {
        if call.service.path != "/label" {
            return self.engine.call(call);
        }
        self.engine.calls.lock().unwrap().push(call.clone());
        let patch = json!([{"op": "add", "path": "/metadata/labels/labelled", "value": "yes"}]);
        let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
        let uid = &call.body["request"]["uid"];
        let response = json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch});
        Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
    }
}

#[test]
fn a_later_webhooks_change_calls_the_pod_webhook_again_and_its_rule_adds_nothing_twice() {
    let mut documents = chart_documents();
    documents.push(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "zz-labeler"},
        "webhooks": [{
            "name": "labeler.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "labeler", "namespace": "default", "path": "/label"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        }],
    }));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let engine = EngineWebhooks { view: platform(), down: Arc::new(AtomicBool::new(false)), calls: Arc::clone(&calls) };
    let mut api = ApiServer::new(platform(), 100);
    api.admission.go_remote(Box::new(WithLabeler { engine }));
    assert_eq!(api.admission.configure_remote(&documents, CrdRules::generated()), Vec::<String>::new());
    let pod = api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &users::kubevirt_controller()).unwrap();
    assert_eq!(pod.labels.get("labelled").map(String::as_str), Some("yes"));
    let gates: Vec<&str> = pod.scheduling_gates.iter().map(|g| g.as_str()).collect();
    assert_eq!(gates, [keys::GATE_PLACEMENT], "gated once");
    let paths: Vec<String> = calls.lock().unwrap().iter().map(|c| c.service.path.clone()).collect();
    assert_eq!(paths, ["/mutate-pod", "/label", "/mutate-pod"], "configurations in name order, then the reinvocation");
    let last = &calls.lock().unwrap()[2];
    assert_eq!(last.body["request"]["object"]["metadata"]["labels"]["labelled"], "yes", "it sees the labelled pod");
    assert_eq!(last.url(), "https://gpuclaim-webhook.cozy-gpuclaim.svc:443/mutate-pod?timeout=10s");
}

/// The chart's configuration and one more validating webhook on claims, reached by `clientConfig.url`.
fn with_url_webhook(failure_policy: &str) -> ApiServer {
    let mut documents = chart_documents();
    documents.push(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "elsewhere"},
        "webhooks": [{
            "name": "elsewhere.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": failure_policy, "clientConfig": {"url": "https://example.com/check"},
            "rules": [{"apiGroups": ["gpu.cozystack.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                       "resources": ["gpuclaims"]}],
        }],
    }));
    let Remote { mut api, .. } = remote(platform(), false);
    assert_eq!(api.admission.configure_remote(&documents, CrdRules::generated()), Vec::<String>::new());
    api
}

#[test]
fn a_url_client_config_is_not_served_and_fails_under_its_policy() {
    let tenant = users::tenant("tenant-a");
    let error = with_url_webhook("Fail").create_claim(held_claim("tenant-a", "small", "h100", 1), &tenant).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Internal error occurred: failed calling webhook \"elsewhere.example.com\": failed to call webhook: Post \
         \"https://example.com/check?timeout=10s\": the twin calls webhooks through a Service only: clientConfig.url \
         is not served"
    );
    with_url_webhook("Ignore").create_claim(held_claim("tenant-a", "small", "h100", 1), &tenant).unwrap();
}

#[test]
fn a_patch_that_cannot_be_applied_is_an_internal_error_whatever_the_policy() {
    let mut api = answering(|uid| {
        let patch = json!([{"op": "remove", "path": "/metadata/nothing"}]);
        let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
        let response = json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch});
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    });
    let error = api.create_pod(launcher("tenant-a", "vm-1", ATTACHMENTS), &users::kubevirt_controller()).unwrap_err();
    assert!(error.to_string().starts_with("Internal error occurred: "), "{error}");
    assert!(error.to_string().contains("/metadata/nothing"), "{error}");
    assert_eq!((error.reason(), error.code()), ("InternalError", 500));
}

#[test]
fn a_validating_webhook_may_not_patch() {
    let mut api = answering(|uid| {
        let patch = base64::engine::general_purpose::STANDARD.encode("[]");
        let response = json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch});
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    });
    let error = api.create_claim(held_claim("tenant-a", "small", "h100", 1), &users::tenant("tenant-a")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Internal error occurred: failed calling webhook \"order.gpu.cozystack.io\": received invalid webhook \
         response: validating webhook may not return response.patch"
    );
}
