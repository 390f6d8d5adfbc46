//! The live controller against a fake API server holding a small cluster (the example objects, and the VM
//! "trainer" with its launcher pod as our webhooks admitted them): the caches fill the view, readiness waits for
//! them, a pass writes every action with its precondition (pin-and-ungate as one request), a conflict reads the
//! object again and the retry succeeds, and a failure backs off (the runtime's policy; engine's runtime tests hold
//! its exact figures).

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use gpuclaim_adapter::cache::{CacheKind, Caches};
use gpuclaim_adapter::health::Tasks;
use gpuclaim_adapter::leader::Leadership;
use gpuclaim_adapter::metrics::Metrics;
use gpuclaim_adapter::reconciler::{Reconciler, Turn};
use gpuclaim_adapter::shared::SharedView;
use gpuclaim_adapter::writer::{WriteError, Writer};
use gpuclaim_engine::keys;
use gpuclaim_engine::review::answer_review;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fake_store::{FakeStore, rest_path};
use crate::support::{self, FakeApi};

const POD: &str = "/api/v1/namespaces/tenant-a/pods/virt-launcher-trainer-x7k2p";
const TRAIN_A: &str = "/apis/gpu.cozystack.io/v1alpha1/namespaces/tenant-a/gpuclaims/train-a";
const VMI_UID: &str = "5c1e3f0a-8d2b-4b7e-9f61-2a4d7c9e1b30";

/// An admission review's object with our webhook's patch applied: what the API server stores.
fn admitted(file: &str) -> Value {
    let review = support::example_reviews().into_iter().find(|(name, _)| name == file).unwrap().1;
    let (response, _) = answer_review(&support::example_view().read().unwrap(), &review).unwrap();
    let mut object = review["request"]["object"].clone();
    if let Some(patch) = response["response"]["patch"].as_str() {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    object
}

/// The example cluster's objects, with the VMI "trainer" and its gated launcher pod as our webhooks admitted them.
pub fn cluster_objects() -> Vec<Value> {
    let mut objects = Vec::new();
    let text = std::fs::read_to_string(support::repo_root().join("examples/objects.yaml")).unwrap();
    for document in gpuclaim_engine::yaml::documents(&text) {
        let mut object = document.unwrap();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{name}"));
        }
        if object["kind"] == "Node" {
            // The examples serve the webhooks, which never look at readiness; the reconciler places on Ready nodes.
            object["status"]["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
        }
        objects.push(object);
    }
    let mut vmi = admitted("vmi-trainer.json");
    vmi["metadata"]["namespace"] = json!("tenant-a");
    vmi["metadata"]["uid"] = json!(VMI_UID);
    vmi["status"] = json!({"phase": "Scheduling"});
    objects.push(vmi);
    let mut pod = admitted("pod-launcher-trainer.json");
    pod["metadata"]["name"] = json!("virt-launcher-trainer-x7k2p");
    pod["metadata"]["namespace"] = json!("tenant-a");
    pod["metadata"]["uid"] = json!("uid-launcher-trainer");
    pod["metadata"]["creationTimestamp"] = json!("2025-03-03T10:00:00Z");
    pod["status"] = json!({"phase": "Pending"});
    assert!(pod["spec"]["schedulingGates"].to_string().contains(keys::GATE_PLACEMENT), "the pod webhook gated it");
    objects.push(pod);
    objects
}

/// The example cluster in a fake API server, with the VMI "trainer" and its gated launcher pod.
fn cluster() -> FakeStore {
    let store = FakeStore::default();
    for object in cluster_objects() {
        store.put(&rest_path(&object), object);
    }
    store
}

/// A raw-GPU VM's launcher holding all eight H100s of gpu-h100-1 (where train-a, held, fixes the trainer's node),
/// bound and running.
fn put_raw_gpu_pod(store: &FakeStore) {
    let mut raw =
        gpuclaim_engine::fixtures::launcher_pod_json("tenant-b", "raw-gpu", "[]", "nvidia.com/GH100_H100_SXM5_80GB", 8);
    raw["metadata"]["name"] = json!("virt-launcher-raw-gpu-abcde");
    raw["metadata"]["uid"] = json!("uid-raw-gpu");
    raw["metadata"]["labels"].as_object_mut().unwrap().remove(keys::LABEL_CLAIMS);
    raw["spec"]["nodeName"] = json!("gpu-h100-1");
    raw["status"] = json!({"phase": "Running"});
    store.put("/api/v1/namespaces/tenant-b/pods/virt-launcher-raw-gpu-abcde", raw);
}

pub struct Controller {
    pub store: FakeStore,
    pub metrics: Arc<Metrics>,
    pub caches: Arc<Caches>,
    reconciler: Reconciler,
    /// The last lease renewal the writer sees.
    renewed: watch::Sender<Option<Instant>>,
    /// Whether the elector says this replica leads.
    leading: watch::Sender<bool>,
    _tasks: Arc<Tasks>,
    _api: FakeApi,
}

impl Controller {
    /// Starts the caches on `store` and waits for them to sync; the writer's calls are bounded as in production.
    pub async fn start(store: FakeStore) -> Controller {
        Controller::start_with(store, gpuclaim_adapter::writer::CALL_TIMEOUT, Duration::from_secs(3600)).await
    }

    /// As [`Controller::start`], with the writer's call timeout and the lease's renew deadline given.
    async fn start_with(store: FakeStore, call_timeout: Duration, renew_deadline: Duration) -> Controller {
        let api = FakeApi::start(store.router()).await;
        let caches = Caches::new(SharedView::default());
        let tasks = Tasks::new();
        for (name, watch) in caches.watches(&api.client, keys::DEFAULT_CONTROLLER_NAMESPACE) {
            tasks.spawn(name, watch);
        }
        let mut synced = caches.synced();
        tokio::time::timeout(Duration::from_secs(10), synced.wait_for(|s| s.len() == CacheKind::ALL.len()))
            .await
            .unwrap()
            .unwrap();
        let metrics = Arc::new(Metrics::new());
        let reporter = Reporter { controller: "gpuclaim-controller".to_owned(), instance: Some("test".to_owned()) };
        let recorder = Recorder::new(api.client.clone(), reporter);
        let (renewed, lease) = watch::channel(Some(Instant::now()));
        let leadership = Leadership::following(lease, renew_deadline);
        let writer = Writer::new(api.client.clone(), caches.view.clone(), recorder, metrics.clone(), leadership)
            .with_call_timeout(call_timeout);
        let (leading, elected) = watch::channel(true);
        let reconciler = Reconciler::new(caches.clone(), writer, metrics.clone(), elected);
        Controller { store, metrics, caches, reconciler, renewed, leading, _tasks: tasks, _api: api }
    }

    /// One turn of the loop.
    pub async fn turn(&mut self) -> Turn {
        self.reconciler.turn().await.expect("the view is not poisoned")
    }

    /// A turn once the retry the last one asked for is due.
    async fn turn_after(&mut self, last: &Turn) -> Turn {
        tokio::time::sleep(last.retry_after.expect("a retry was asked for") + Duration::from_millis(2)).await;
        self.turn().await
    }

    /// A new leader's first pass, over everything: leadership lost and won again.
    async fn first_pass_of_a_new_leader(&mut self) -> Turn {
        self.leading.send(false).unwrap();
        let idle = self.turn().await;
        assert_eq!((idle.written(), idle.retry_after), (0, None), "a replica that does not lead waits: {idle:?}");
        self.leading.send(true).unwrap();
        self.turn().await
    }

    /// Requests that changed something, events aside.
    fn writes(&self) -> Vec<crate::fake_store::Recorded> {
        self.store
            .requests()
            .into_iter()
            .filter(|r| r.method != Method::GET && !r.path.starts_with("/apis/events.k8s.io/"))
            .collect()
    }
}

#[tokio::test]
async fn readiness_waits_for_the_caches_the_webhooks_read_and_the_view_holds_the_cluster() {
    let store = cluster();
    let api = FakeApi::start(store.router()).await;
    let caches = Caches::new(SharedView::default());
    let tasks = Tasks::new();
    let address = support::serve_probes(caches.clone(), tasks.clone()).await;
    let get = |path: &'static str| support::get_plain(address, path);
    assert_eq!(get("/healthz").await, (200, "ok\n".to_owned()));
    assert_eq!(
        get("/readyz").await,
        (
            503,
            "waiting for caches to sync: gpuclasses, gpuclaims, resourcequotas, namespaces, settings configmap\n"
                .to_owned()
        )
    );

    for (name, watch) in caches.watches(&api.client, keys::DEFAULT_CONTROLLER_NAMESPACE) {
        tasks.spawn(name, watch);
    }
    let mut synced = caches.synced();
    tokio::time::timeout(Duration::from_secs(10), synced.wait_for(|s| s.len() == CacheKind::ALL.len()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(get("/readyz").await, (200, "ok\n".to_owned()));

    let view = caches.view.read().unwrap();
    assert_eq!(view.claims().count(), 3);
    assert_eq!(view.gated_pods().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["virt-launcher-trainer-x7k2p"]);
    assert_eq!(view.vmi("tenant-a", "trainer").map(|v| v.uid.as_str()), Some(VMI_UID));
    assert_eq!(view.node_count(), 3);
    assert!(view.settings.controller_user.is_some(), "the settings ConfigMap is read");
}

#[tokio::test]
async fn a_pass_writes_every_action_with_its_precondition_and_pins_and_ungates_in_one_request() {
    let mut controller = Controller::start(cluster()).await;
    let pod_version = controller.store.get(POD).unwrap()["metadata"]["resourceVersion"].clone();
    let turn = controller.turn().await;
    assert!(turn.written() > 0 && turn.refused.is_none(), "{turn:?}");

    let writes = controller.writes();
    let pod_writes: Vec<_> = writes.iter().filter(|r| r.path.starts_with(POD)).collect();
    assert_eq!(pod_writes.len(), 1, "the pod is written once: {pod_writes:#?}");
    let pin = pod_writes[0];
    assert_eq!((pin.method.as_str(), pin.path.as_str()), ("PATCH", POD));
    assert_eq!(pin.content_type, "application/merge-patch+json");
    assert_eq!(pin.body["metadata"]["resourceVersion"], pod_version);
    assert_eq!(pin.body["spec"]["schedulingGates"], json!([]), "the gate goes in the same request as the pin");
    let terms = pin.body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .unwrap();
    assert_eq!(terms.len(), 1, "KubeVirt's one term gains the pin rather than a second term");
    assert_eq!(terms[0]["matchExpressions"][0]["key"], "node-labeller.kubevirt.io/obsolete-host-model");
    assert_eq!(terms[0]["matchFields"], json!([{"key": "metadata.name", "operator": "In", "values": ["gpu-h100-1"]}]));

    for write in &writes {
        match write.method.as_str() {
            "PATCH" => assert!(!write.body["metadata"]["resourceVersion"].is_null(), "no precondition: {write:?}"),
            "DELETE" => assert!(!write.body["preconditions"]["uid"].is_null(), "no uid precondition: {write:?}"),
            _ => {}
        }
    }
    let pin_index = writes.iter().position(|w| w.path == POD).unwrap();
    let train_a = writes.iter().position(|w| w.path == format!("{TRAIN_A}/status")).unwrap();
    assert!(train_a < pin_index, "the claim is written before the pod is pinned to its node");

    // What the API server now holds.
    let pod = controller.store.get(POD).unwrap();
    assert_eq!(pod["spec"]["schedulingGates"], json!([]));
    let claim = controller.store.get(TRAIN_A).unwrap();
    assert_eq!(claim["status"]["phase"], "Attached");
    assert_eq!(claim["status"]["attachedTo"], json!({"name": "trainer", "uid": VMI_UID}));
    let template = controller
        .store
        .get("/apis/gpu.cozystack.io/v1alpha1/namespaces/tenant-a/gpuclaims/trainer-gpu-0")
        .expect("the template claim is created");
    assert_eq!(template["metadata"]["labels"][keys::LABEL_TEMPLATE_CLAIM], keys::TRUE);
    assert_eq!(template["metadata"]["finalizers"], json!([keys::FINALIZER_RELEASE]));
    assert_eq!(template["metadata"]["ownerReferences"][0]["uid"], VMI_UID);
    assert_eq!(template["status"]["phase"], "Attached");
    let usages: Vec<Value> = controller
        .store
        .0
        .lock()
        .unwrap()
        .objects
        .iter()
        .filter(|(path, _)| path.contains("/gpuusages/trainer-gpu-0-"))
        .map(|(_, usage)| usage.clone())
        .collect();
    assert_eq!(usages.len(), 1, "the new claim's usage record is written");
    assert_eq!(usages[0]["metadata"]["ownerReferences"][0]["uid"], template["metadata"]["uid"]);

    // The pod's event, and the figures the pass leaves.
    let events: Vec<Value> = controller
        .store
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::POST && r.path == "/apis/events.k8s.io/v1/namespaces/tenant-a/events")
        .map(|r| r.body)
        .collect();
    let placed = events.iter().find(|e| e["regarding"]["name"] == "virt-launcher-trainer-x7k2p").unwrap();
    assert_eq!(placed["reason"], "Placed");
    assert_eq!(placed["type"], "Normal");
    assert_eq!(placed["regarding"]["uid"], "uid-launcher-trainer");
    assert_eq!(placed["reportingController"], "gpuclaim-controller");
    let exposition = controller.metrics.encode();
    // train-a and the template claim attached; infer-a released (its VMI is gone) and train-b, both kept bound; the
    // trainer's launcher left the gate, ungated; nothing waits there now (no series).
    let lines = [
        r#"gpuclaim_claims{class="h100",phase="Attached"} 2"#,
        r#"gpuclaim_claims{class="h100",phase="Bound"} 1"#,
        r#"gpuclaim_claims{class="h100",phase="Pending"} 0"#,
        r#"gpuclaim_claims{class="a100-40c",phase="Bound"} 1"#,
        r#"gpuclaim_gate_wait_seconds_count{class="h100",outcome="ungated"} 1"#,
        "# TYPE gpuclaim_gated_pods gauge",
    ];
    for line in lines {
        assert!(exposition.contains(&format!("\n{line}\n")), "{line} missing from\n{exposition}");
    }
    assert!(!exposition.contains("gpuclaim_gated_pods{"), "{exposition}");
    assert!(exposition.contains("gpuclaim_writes_total{action=\"PinAndUngate\",result=\"ok\"} 1"), "{exposition}");

    // Read-your-writes: the view holds what was written, so even a pass over everything writes nothing.
    let again = controller.first_pass_of_a_new_leader().await;
    assert_eq!(again.written(), 0, "{again:?}");
}

#[tokio::test]
async fn a_conflict_refreshes_the_object_and_the_next_pass_writes_it() {
    let mut controller = Controller::start(cluster()).await;
    // Someone else changes train-a after the cache read it.
    let mut changed = controller.store.get(TRAIN_A).unwrap();
    changed["metadata"]["labels"] = json!({"team": "ml"});
    let version = controller.store.put(TRAIN_A, changed);

    let turn = controller.turn().await;
    let Some(WriteError::Stale { object, code, .. }) = &turn.refused else { panic!("expected a stale view: {turn:?}") };
    assert_eq!((object.name.as_str(), *code), ("train-a", 409));
    assert!(turn.retry_after.is_some_and(|after| after <= Duration::from_millis(5)), "the object backs off 5 ms");
    assert!(controller.store.get(POD).unwrap()["spec"]["schedulingGates"].to_string().contains(keys::GATE_PLACEMENT));
    let refreshed =
        controller.caches.view.read().unwrap().claim("tenant-a", "train-a").unwrap().resource_version.clone();
    assert_eq!(refreshed, version, "the conflicting claim was read again");

    let retried = controller.turn_after(&turn).await;
    assert!(retried.written() > 0 && retried.refused.is_none(), "{retried:?}");
    assert_eq!(controller.store.get(TRAIN_A).unwrap()["status"]["phase"], "Attached");
    assert_eq!(controller.store.get(TRAIN_A).unwrap()["metadata"]["labels"], json!({"team": "ml"}));
    assert_eq!(controller.store.get(POD).unwrap()["spec"]["schedulingGates"], json!([]));
}

#[tokio::test]
async fn a_failing_api_server_gets_exponential_backoff_and_nothing_is_pinned() {
    let mut controller = Controller::start(cluster()).await;
    // 500, not 503: kube's client retries 503 on its own before the reconciler sees the error.
    controller.store.set_failing(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let mut turn = controller.turn().await;
    let mut delays = Vec::new();
    for expected in [5, 10, 20] {
        assert!(matches!(turn.refused, Some(WriteError::Failed { .. })), "expected a failure: {turn:?}");
        let after = turn.retry_after.expect("a retry is asked for");
        assert!(after <= Duration::from_millis(expected), "{after:?} > {expected} ms");
        delays.push(after);
        turn = controller.turn_after(&turn).await;
    }
    assert!(delays.windows(2).all(|pair| pair[1] > pair[0]), "the same object backs off longer each time: {delays:?}");
    assert!(controller.store.get(POD).unwrap()["spec"]["schedulingGates"].to_string().contains(keys::GATE_PLACEMENT));
    controller.store.set_failing(None);
    let healed = controller.turn_after(&turn).await;
    assert!(healed.written() > 0 && healed.refused.is_none(), "{healed:?}");
}

#[tokio::test]
async fn a_replica_that_does_not_lead_writes_nothing() {
    let mut controller = Controller::start(cluster()).await;
    controller.renewed.send(None).unwrap();
    let turn = controller.turn().await;
    assert_eq!(turn.written(), 0, "{turn:?}");
    assert!(controller.writes().is_empty());
}

#[tokio::test]
async fn a_pod_outside_claims_takes_its_devices_so_the_launcher_waits() {
    let store = cluster();
    put_raw_gpu_pod(&store);

    let mut controller = Controller::start(store).await;
    assert!(controller.caches.view.read().unwrap().pod("tenant-b", "virt-launcher-raw-gpu-abcde").is_some());
    let turn = controller.turn().await;
    assert!(turn.refused.is_none(), "{turn:?}");
    let pod = controller.store.get(POD).unwrap();
    assert!(pod["spec"]["schedulingGates"].to_string().contains(keys::GATE_PLACEMENT), "not pinned to a full node");
    let waiting = &pod["status"]["conditions"][0];
    assert_eq!(
        (waiting["type"].as_str(), waiting["status"].as_str()),
        (Some(keys::CONDITION_PLACEMENT), Some("False"))
    );
    assert_eq!(waiting["reason"], "NodeUnfit", "{waiting}");
    assert_eq!(
        waiting["message"],
        "node \"gpu-h100-1\" holds the claims but cannot take the pod: fewer than the 2 units of h100 it needs are free"
    );
}

#[tokio::test]
async fn a_pin_is_confirmed_against_the_api_server_so_a_pod_the_watch_has_not_brought_is_seen() {
    let mut controller = Controller::start(cluster()).await;
    // kube-scheduler binds the raw-GPU launcher after the caches synced: the watch has not brought it (the fake's
    // watch never does).
    put_raw_gpu_pod(&controller.store);
    assert!(controller.caches.view.read().unwrap().pod("tenant-b", "virt-launcher-raw-gpu-abcde").is_none());

    let turn = controller.turn().await;
    assert!(turn.refused.is_none(), "{turn:?}");
    let lists: Vec<String> = controller
        .store
        .requests()
        .into_iter()
        .filter(|r| r.method == Method::GET && r.path == "/api/v1/nodes/gpu-h100-1")
        .map(|r| r.path)
        .collect();
    assert_eq!(lists.len(), 1, "the pin's node is read live once");
    assert!(controller.caches.view.read().unwrap().pod("tenant-b", "virt-launcher-raw-gpu-abcde").is_some());
    let pod = controller.store.get(POD).unwrap();
    assert!(pod["spec"]["schedulingGates"].to_string().contains(keys::GATE_PLACEMENT), "not pinned to a full node");
    assert_eq!(pod["status"]["conditions"][0]["reason"], "NodeUnfit", "{}", pod["status"]["conditions"][0]);
    assert!(controller.writes().iter().all(|w| w.path != POD || w.body["spec"].is_null()), "no pin written");
    let exposition = controller.metrics.encode();
    assert!(exposition.contains("\ngpuclaim_pins_rechecked_total 1\n"), "{exposition}");

    // Nothing new behind the watch: a pass over everything reads nothing more into the view and writes nothing.
    let again = controller.first_pass_of_a_new_leader().await;
    assert_eq!(again.written(), 0, "{again:?}");
}

#[tokio::test]
async fn a_write_the_api_server_never_answers_is_given_up_after_the_call_timeout() {
    let mut controller = Controller::start_with(cluster(), Duration::from_millis(300), Duration::from_secs(3600)).await;
    controller.store.set_hanging_writes(true);
    let started = Instant::now();
    let turn = tokio::time::timeout(Duration::from_secs(10), controller.turn())
        .await
        .expect("a hung write does not stall the pass");
    let took = started.elapsed();
    let Some(WriteError::Timeout { after, .. }) = turn.refused else { panic!("{turn:?}") };
    assert_eq!(after, Duration::from_millis(300));
    assert!(turn.retry_after.is_some_and(|after| after <= Duration::from_millis(5)), "backs off like any failure");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "gave up after {took:?}");
    assert_eq!(controller.writes().len(), 1, "the pass stopped at the write that hung");
    let exposition = controller.metrics.encode();
    assert!(exposition.contains(r#"result="timeout"} 1"#), "{exposition}");
}

#[tokio::test]
async fn a_hung_write_is_given_up_when_the_lease_runs_out_before_the_call_timeout() {
    let renew_deadline = Duration::from_millis(500);
    let mut controller = Controller::start_with(cluster(), Duration::from_secs(60), renew_deadline).await;
    controller.store.set_hanging_writes(true);
    controller.renewed.send(Some(Instant::now())).unwrap();
    let started = Instant::now();
    let turn = tokio::time::timeout(Duration::from_secs(10), controller.turn()).await.unwrap();
    let took = started.elapsed();
    assert!(matches!(turn.refused, Some(WriteError::Timeout { .. })), "{turn:?}");
    assert!(took < Duration::from_secs(2), "the write waited {took:?}, past what was left of the lease (500 ms)");
    let writes = controller.writes().len();
    let turn = controller.turn_after(&turn).await;
    assert_eq!((turn.written(), turn.refused.is_none()), (0, true), "{turn:?}");
    assert_eq!(controller.writes().len(), writes, "nothing more is sent once the lease lapsed");
}

#[tokio::test]
async fn a_replica_whose_last_renewal_is_older_than_the_renew_deadline_sends_no_write() {
    let renew_deadline = Duration::from_millis(100);
    let mut controller = Controller::start_with(cluster(), Duration::from_secs(10), renew_deadline).await;
    controller.renewed.send(Some(Instant::now())).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let turn = controller.turn().await;
    assert_eq!(turn.written(), 0, "{turn:?}");
    assert!(controller.writes().is_empty(), "{:#?}", controller.writes());

    tokio::time::sleep(turn.retry_after.expect("tried again after a while")).await;
    controller.renewed.send(Some(Instant::now())).unwrap();
    let turn = controller.turn().await;
    assert!(turn.written() > 0, "renewed again: {turn:?}");
}
