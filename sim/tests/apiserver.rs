//! The API server's rules, one by one, with the messages a client reads: revisions and conflicts, AlreadyExists
//! and NotFound, finalizers, ownerReference garbage collection, the admission chain's failure policy, the gated-pod
//! rules on the controller's writes, and the watch (order, lag, stale events ignored).

use gpuclaim_engine::controller::runtime::{Change, Object, ObjectKey, observe};
use gpuclaim_engine::controller::{Action, ClaimStatus, ObjectRef};
use gpuclaim_engine::fixtures::{self, gated_launcher, held_claim};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{ClaimPhase, PodPhase, Time, Usage, View, Vmi, VmiRef};
use gpuclaim_sim::apiserver::{ApiError, ApiServer, Kind};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::users::{self, User};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const CONTROLLER: &str = "system:serviceaccount:cozy-gpuclaim:gpuclaim";

fn controller() -> User {
    users::gpu_controller(keys::DEFAULT_CONTROLLER_NAMESPACE)
}

fn kubevirt() -> User {
    users::kubevirt_controller()
}

fn now() -> Time {
    Time::from_second(1_800_000_000).unwrap()
}

fn server() -> ApiServer {
    let mut view = fixtures::two_node_cluster();
    view.settings.controller_user = Some(CONTROLLER.to_owned());
    ApiServer::new(view, 100)
}

fn vmi(name: &str) -> Vmi {
    Vmi { namespace: "tenant-a".into(), name: name.into(), uid: format!("uid-vmi-{name}").into(), ..Vmi::default() }
}

fn template_claim_action(vmi: &str) -> Action {
    Action::CreateClaim {
        claim: ObjectRef::new("tenant-a", format!("{vmi}-gpu-0")),
        class: "h100".into(),
        count: 2,
        owner: VmiRef { name: vmi.into(), uid: format!("uid-vmi-{vmi}").into() },
        status: ClaimStatus { phase: ClaimPhase::Pending, node: None, attached_to: None, pending: None },
    }
}

#[test]
fn every_write_takes_the_next_revision_of_the_whole_store() {
    let mut api = server();
    assert_eq!(api.create_vmi(vmi("a"), &kubevirt()).unwrap().resource_version, "101");
    api.create_claim(held_claim("tenant-a", "held", "h100", 1), &users::tenant("tenant-a")).unwrap_err(); // nothing published: refused
    assert_eq!(
        api.create_vmi(vmi("b"), &kubevirt()).unwrap().resource_version,
        "102",
        "a refused create takes no revision"
    );
    api.update_vmi("tenant-a", "a", &kubevirt(), |v| v.node_name = Some("gpu-1".into())).unwrap();
    assert_eq!(api.store().vmi("tenant-a", "a").unwrap().resource_version, "103");
}

#[test]
fn creating_an_existing_name_and_touching_a_missing_one_are_refused() {
    let mut api = server();
    api.create_vmi(vmi("a"), &kubevirt()).unwrap();
    let error = api.create_vmi(vmi("a"), &kubevirt()).unwrap_err();
    assert_eq!(error.to_string(), r#"virtualmachineinstances.kubevirt.io "a" already exists"#);
    assert_eq!((error.reason(), error.code()), ("AlreadyExists", 409));
    let error = api.delete_pod("tenant-a", "nope").unwrap_err();
    assert_eq!(error.to_string(), r#"pods "nope" not found"#);
    let error = api.update_vmi("tenant-a", "nope", &kubevirt(), |_| {}).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("NotFound", 404));
}

#[test]
fn a_write_with_a_stale_resource_version_is_a_conflict() {
    let mut api = server();
    api.write(&template_claim_action("a"), now(), &controller()).unwrap();
    let claim = api.store().claim("tenant-a", "a-gpu-0").unwrap().clone();
    let update = |precondition: &str| Action::UpdateClaim {
        claim: ObjectRef::new("tenant-a", "a-gpu-0"),
        precondition: precondition.into(),
        finalizer: None,
        status: Some(ClaimStatus {
            phase: ClaimPhase::Bound,
            node: Some("gpu-1".into()),
            attached_to: None,
            pending: None,
        }),
    };
    let error = api.write(&update("1"), now(), &controller()).unwrap_err();
    assert_eq!(
        error.to_string(),
        r#"Operation cannot be fulfilled on gpuclaims.gpu.cozystack.io "a-gpu-0": the object has been modified; please apply your changes to the latest version and try again"#
    );
    assert_eq!((error.reason(), error.code()), ("Conflict", 409));
    assert_eq!(api.store().claim("tenant-a", "a-gpu-0").unwrap(), &claim, "nothing written");
    api.write(&update(&claim.resource_version), now(), &controller()).unwrap();
    let written = api.store().claim("tenant-a", "a-gpu-0").unwrap();
    assert_eq!(written.node.as_deref(), Some("gpu-1"));
    assert!(written.resource_version.parse::<u64>().unwrap() > claim.resource_version.parse::<u64>().unwrap());
}

#[test]
fn a_claim_with_a_finalizer_waits_for_it_and_takes_its_usage_records_along() {
    let mut api = server();
    api.write(&template_claim_action("a"), now(), &controller()).unwrap();
    let usage = Usage {
        namespace: "tenant-a".into(),
        name: "a-gpu-0-1234".into(),
        claim: "a-gpu-0".into(),
        class: "h100".into(),
        count: 2,
        node: "gpu-1".into(),
        ..Usage::default()
    };
    api.write(&Action::OpenUsage { usage }, now(), &controller()).unwrap();
    let uid = api.store().claim("tenant-a", "a-gpu-0").unwrap().uid.clone();
    let error = api.delete_claim("tenant-a", "a-gpu-0", Some("other-uid")).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("Conflict", 409), "a uid precondition names another object");
    api.delete_claim("tenant-a", "a-gpu-0", Some(&uid)).unwrap();
    let deleting = api.store().claim("tenant-a", "a-gpu-0").unwrap().clone();
    assert!(deleting.deleting && deleting.finalizer, "held by its finalizer");
    let release = Action::UpdateClaim {
        claim: ObjectRef::new("tenant-a", "a-gpu-0"),
        precondition: deleting.resource_version,
        finalizer: Some(false),
        status: None,
    };
    let changes = api.write(&release, now(), &controller()).unwrap();
    assert!(api.store().claim("tenant-a", "a-gpu-0").is_none(), "gone with its finalizer");
    assert!(api.store().usage("tenant-a", "a-gpu-0-1234").is_none(), "its usage record collected");
    let kinds: Vec<Kind> = changes
        .iter()
        .map(|c| match c {
            Change::Delete { kind, .. } => *kind,
            Change::Upsert(_) => panic!("only deletions"),
        })
        .collect();
    assert_eq!(kinds, [Kind::Claim, Kind::Usage]);
}

#[test]
fn deleting_a_vmi_collects_its_pods_and_template_claims_only() {
    let mut api = server();
    api.create_vmi(vmi("a"), &kubevirt()).unwrap();
    api.write(&template_claim_action("a"), now(), &controller()).unwrap();
    // A claim ordered for an earlier run of the same name (another uid) is not this VMI's dependent.
    let mut earlier = template_claim_action("a");
    if let Action::CreateClaim { claim, owner, .. } = &mut earlier {
        claim.name = "a-gpu-9".into();
        owner.uid = "uid-of-an-earlier-run".into();
    }
    api.write(&earlier, now(), &controller()).unwrap();
    let mut pod = gated_launcher("tenant-a", "a", "[]", H100, 2, now());
    pod.owner_vmi = Some(VmiRef { name: "a".into(), uid: "uid-vmi-a".into() });
    api.create_pod(pod.clone(), &kubevirt()).unwrap();
    api.delete_vmi("tenant-a", "a").unwrap();
    assert!(api.store().pod("tenant-a", &pod.name).is_none(), "its launcher collected");
    assert!(api.store().claim("tenant-a", "a-gpu-0").unwrap().deleting, "its template claim deleted (finalizer)");
    assert!(!api.store().claim("tenant-a", "a-gpu-9").unwrap().deleting, "another run's claim untouched");
}

#[test]
fn with_no_ready_webhook_replica_selected_creates_fail_closed() {
    let mut api = server();
    api.admission.ready_replicas = 0;
    let pod = gated_launcher("tenant-a", "a", "[]", H100, 2, now());
    let error = api.create_pod(pod.clone(), &kubevirt()).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("InternalError", 500));
    assert_eq!(
        error.to_string(),
        r#"Internal error occurred: failed calling webhook "pod.gpu.cozystack.io": failed to call webhook: Post "https://gpuclaim-webhook.cozy-gpuclaim.svc:443/mutate-pod?timeout=10s": no endpoints available for service "gpuclaim-webhook""#
    );
    let error = api.write(&template_claim_action("a"), now(), &controller()).unwrap_err();
    assert!(error.to_string().contains(r#"failed calling webhook "order.gpu.cozystack.io""#), "{error}");
    // A pod the webhooks do not select is created all the same.
    let mut plain = pod.clone();
    plain.name = "plain".into();
    std::sync::Arc::make_mut(&mut plain.labels).remove(keys::LABEL_CLAIMS);
    plain.scheduling_gates.clear();
    api.create_pod(plain, &kubevirt()).unwrap();
    api.admission.ready_replicas = 1;
    api.create_pod(pod, &kubevirt()).unwrap();
}

#[test]
fn a_webhook_denial_carries_the_webhook_name_and_the_rule_reason() {
    let mut api = server();
    let error = api.create_claim(held_claim("tenant-a", "held", "h100", 2), &users::tenant("tenant-a")).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("NoCapacity", 403), "the webhook's answer's own code");
    assert_eq!(
        error.to_string(),
        r#"admission webhook "order.gpu.cozystack.io" denied the request: spec.count 2 is more than the 0 free units of GPU class "h100" on any one node"#
    );
    // The template mark from a tenant: the chart's policy refuses it first, the webhook behind it as a second line.
    let error = api.write(&template_claim_action("a"), now(), &users::tenant("tenant-a")).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("Forbidden", 403));
    assert_eq!(
        error.to_string(),
        "ValidatingAdmissionPolicy 'gpuclaim-template-mark' with binding 'gpuclaim-template-mark' denied request: the \
         label gpu.cozystack.io/template-claim marks the claims the GPU controller orders for one VM run; only \
         system:serviceaccount:cozy-gpuclaim:gpuclaim may set, change or remove it"
    );
    api.admission.variant.unguarded_writes = true;
    let error = api.write(&template_claim_action("a"), now(), &users::tenant("tenant-a")).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("TemplateMarkForbidden", 403));
}

#[test]
fn the_controller_may_not_add_a_second_node_affinity_term_while_a_pod_is_gated() {
    let mut api = server();
    let pod = gated_launcher("tenant-a", "a", "[]", H100, 2, now());
    let stored = api.create_pod(pod.clone(), &kubevirt()).unwrap().clone();
    let mut terms = stored.required_terms().map(<[_]>::to_vec).unwrap_or_default();
    terms.push(terms.first().cloned().unwrap_or_default());
    terms.push(Default::default());
    let pin = Action::PinAndUngate {
        pod: ObjectRef::new("tenant-a", &pod.name),
        precondition: stored.resource_version.clone(),
        node: "gpu-1".into(),
        terms: terms.into(),
    };
    let error = api.write(&pin, now(), &controller()).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("Invalid", 422), "{error}");
    assert!(error.to_string().contains("nodeSelectorTerms"), "{error}");
    assert_eq!(api.store().pod("tenant-a", &pod.name).unwrap(), &stored, "nothing written");
}

#[test]
fn the_watch_delivers_in_revision_order_after_its_lag_and_caches_skip_what_they_hold() {
    let mut api = server();
    api.watch().lag = Millis(100);
    api.watch().tick(Millis(0));
    api.create_vmi(vmi("a"), &kubevirt()).unwrap();
    api.watch().tick(Millis(50));
    api.update_vmi("tenant-a", "a", &kubevirt(), |v| v.node_name = Some("gpu-1".into())).unwrap();
    assert_eq!(api.watch().delivery_due(), Some(Millis(100)));
    assert_eq!(api.watch().delivery_due(), None, "scheduled once");
    let first: Vec<Change> = api.watch().deliver(Millis(100)).collect();
    assert_eq!(first.len(), 1, "only what is due");
    let mut cache = View::default();
    for change in first {
        observe(&mut cache, change);
    }
    assert_eq!(cache.vmi("tenant-a", "a").unwrap().node_name, None, "the cache lags");
    let second: Vec<Change> = api.watch().deliver(Millis(150)).collect();
    let Change::Upsert(Object::Vmi(newer)) = &second[0] else { panic!("a VMI update") };
    assert_eq!(newer.node_name.as_deref(), Some("gpu-1"));
    assert!(observe(&mut cache, second[0].clone()).is_some());
    assert!(observe(&mut cache, second[0].clone()).is_none(), "the same revision again changes nothing");
    // A deletion older than what the cache holds (a re-creation it already saw) is ignored.
    let stale =
        Change::Delete { kind: Kind::Vmi, namespace: "tenant-a".into(), name: "a".into(), revision: "1".into() };
    assert!(observe(&mut cache, stale).is_none());
    assert!(cache.vmi("tenant-a", "a").is_some());
}

#[test]
fn errors_name_their_kind_in_the_api_servers_words() {
    let error = ApiError::NotFound { kind: Kind::Usage, name: "u".into() };
    assert_eq!(error.to_string(), r#"gpuusages.gpu.cozystack.io "u" not found"#);
}

#[test]
fn the_journal_holds_every_write_with_its_revision_and_pods_the_controller_does_not_watch_too() {
    let mut api = server();
    let mut plain = gated_launcher("tenant-a", "plain", "[]", H100, 2, now());
    std::sync::Arc::make_mut(&mut plain.labels).remove(keys::LABEL_CLAIMS);
    plain.scheduling_gates.clear();
    api.create_pod(plain.clone(), &kubevirt()).unwrap();
    assert!(api.watch().take_journal(Vec::new()).is_empty(), "no journal unless one is kept");

    api.watch().keep_journal();
    let name = plain.name.clone();
    api.update_pod("tenant-a", &name, &kubevirt(), |pod| {
        std::sync::Arc::make_mut(&mut pod.labels).insert("team".into(), "a".into());
    })
    .unwrap();
    api.update_pod_status("tenant-a", &name, |pod| pod.phase = PodPhase::Failed).unwrap();
    api.create_vmi(vmi("a"), &kubevirt()).unwrap();
    api.delete_pod("tenant-a", &name).unwrap();
    api.delete_vmi("tenant-a", "a").unwrap();
    let pod = ObjectKey { kind: Kind::Pod, namespace: "tenant-a".into(), name: name.clone() };
    let vmi_a = ObjectKey { kind: Kind::Vmi, namespace: "tenant-a".into(), name: "a".into() };
    let journal = api.watch().take_journal(Vec::new());
    assert_eq!(
        journal,
        [(pod.clone(), 102), (pod.clone(), 103), (vmi_a.clone(), 104), (pod, 105), (vmi_a.clone(), 106)],
        "every write in order, at the revision it took"
    );
    assert!(api.watch().take_journal(journal).is_empty(), "taken once");
    // The controller's watch carries only what it watches: the VMI, not the unbound pod without the claims label.
    let delivered: Vec<(ObjectKey, u64)> = api.watch().deliver(Millis(1)).map(|c| (c.key(), c.revision())).collect();
    assert_eq!(delivered, [(vmi_a.clone(), 104), (vmi_a, 106)]);
}

/// The writes the served API makes for clients (issue 39): each takes the next revision, is journaled at it, and
/// reaches the controller's cache through the watch as the controller expects (its cache ends equal to the store).
#[test]
fn class_quota_settings_usage_writes_and_touches_are_journaled_and_reach_the_controllers_cache() {
    let mut api = server();
    api.write(&template_claim_action("a"), now(), &controller()).unwrap(); // 101
    let mut cache = api.store().clone();
    api.watch().keep_journal();
    let key = |kind, namespace: &str, name: &str| ObjectKey { kind, namespace: namespace.into(), name: name.into() };

    let h100 = api.store().class("h100").unwrap().clone();
    let mut l4 = h100.clone();
    (l4.name, l4.max_count, l4.published) = ("l4".into(), 4, Default::default());
    assert_eq!(api.put_class(l4).resource_version, "102");
    let mut narrower = h100.clone();
    (narrower.max_count, narrower.published) = (2, Default::default());
    let stored = api.put_class(narrower);
    assert_eq!((stored.max_count, &stored.published), (2, &h100.published), "the status stays the controller's");
    let usage = Usage {
        namespace: "tenant-a".into(),
        name: "a-gpu-0-1".into(),
        claim: "a-gpu-0".into(),
        class: "h100".into(),
        count: 2,
        node: "gpu-1".into(),
        ..Usage::default()
    };
    assert_eq!(api.create_usage(usage.clone(), &controller()).unwrap().resource_version, "104");
    let error = api.create_usage(usage, &controller()).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("AlreadyExists", 409));
    assert_eq!(api.put_quota("tenant-a", "gpus", [("h100".to_owned(), 4)].into()), "105");
    assert_eq!(api.touch(Kind::Claim, "tenant-a", "a-gpu-0").unwrap(), "106");
    assert_eq!(api.store().claim("tenant-a", "a-gpu-0").unwrap().resource_version, "106", "a new revision only");
    assert_eq!(api.touch(Kind::Quota, "tenant-a", "gpus").unwrap(), "107");
    let error = api.touch(Kind::Pod, "tenant-a", "nope").unwrap_err();
    assert_eq!((error.reason(), error.code()), ("NotFound", 404));
    assert_eq!(api.put_settings(Some(users::chart_settings("system:serviceaccount:x:y"))), "108");
    assert_eq!(api.store().settings.controller_user.as_deref(), Some("system:serviceaccount:x:y"));
    api.delete_quota("tenant-a", "gpus").unwrap();
    assert_eq!(api.delete_quota("tenant-a", "gpus").unwrap_err().code(), 404);
    api.delete_class("l4").unwrap();
    assert_eq!(api.put_settings(None), "111");
    assert_eq!(api.store().settings.controller_user, None);

    let journal = api.watch().take_journal(Vec::new());
    let expected = [
        (key(Kind::Class, "", "l4"), 102),
        (key(Kind::Class, "", "h100"), 103),
        (key(Kind::Usage, "tenant-a", "a-gpu-0-1"), 104),
        (key(Kind::Quota, "tenant-a", "gpus"), 105),
        (key(Kind::Claim, "tenant-a", "a-gpu-0"), 106),
        (key(Kind::Quota, "tenant-a", "gpus"), 107),
        (key(Kind::Settings, "", ""), 108),
        (key(Kind::Quota, "tenant-a", "gpus"), 109),
        (key(Kind::Class, "", "l4"), 110),
        (key(Kind::Settings, "", ""), 111),
    ];
    assert_eq!(journal, expected);
    // The watch carries the same writes (the quota's touch changes nothing the controller reads: journal only).
    let delivered: Vec<Change> = api.watch().deliver(Millis(1)).collect();
    assert_eq!(delivered.len(), expected.len() - 1);
    for change in delivered {
        observe(&mut cache, change);
    }
    assert_eq!(cache.class("h100"), api.store().class("h100"));
    assert_eq!(cache.class("l4"), None);
    assert_eq!(cache.usage("tenant-a", "a-gpu-0-1"), api.store().usage("tenant-a", "a-gpu-0-1"));
    assert_eq!(cache.claim("tenant-a", "a-gpu-0"), api.store().claim("tenant-a", "a-gpu-0"));
    let quotas = |view: &View| view.tenant("tenant-a").unwrap().quotas().map(|(name, _)| name.to_owned()).collect();
    let (cached, stored): (Vec<String>, Vec<String>) = (quotas(&cache), quotas(api.store()));
    assert_eq!(cached, stored);
    assert!(!stored.contains(&"gpus".to_owned()), "deleted");
    assert_eq!(cache.settings, api.store().settings);
}

#[test]
fn a_namespace_created_is_journaled_and_reaches_the_controllers_cache_and_its_label_is_the_administrators() {
    let mut api = server();
    let mut cache = api.store().clone();
    api.watch().keep_journal();
    let error = api.create_namespace("tenant-b", &users::tenant("tenant-b"), true).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("Forbidden", 403), "{error}");
    assert_eq!(api.create_namespace("tenant-b", &users::platform_admin(), true).unwrap(), "101");
    assert_eq!(api.create_namespace("tenant-c", &users::tenant("tenant-c"), false).unwrap(), "102");
    let error = api.create_namespace("tenant-c", &users::platform_admin(), false).unwrap_err();
    assert_eq!((error.reason(), error.code()), ("AlreadyExists", 409));
    assert!(api.store().tenant("tenant-b").unwrap().vgpu_entitled);
    assert!(!api.store().tenant("tenant-c").unwrap().vgpu_entitled);
    let namespace = |name: &str| ObjectKey { kind: Kind::Namespace, namespace: "".into(), name: name.into() };
    assert_eq!(api.watch().take_journal(Vec::new()), [(namespace("tenant-b"), 101), (namespace("tenant-c"), 102)]);
    for change in api.watch().deliver(Millis(1)).collect::<Vec<_>>() {
        observe(&mut cache, change);
    }
    assert!(cache.tenant("tenant-b").unwrap().vgpu_entitled, "the controller sees the entitlement");
}
