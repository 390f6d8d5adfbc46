//! One loop, two drivers (docs/controller.md, "The loop"): the same inputs — the cluster's objects, watch events,
//! a write some else's change made stale, an API server failing, the time — through the twin's GPU controller
//! (sim's driver of the engine's runtime, writing through the twin's API server) and the live reconciler (the
//! adapter's driver, writing over HTTP to the fake API server). They make the same writes, in the same order, with
//! the same outcomes, and ask to run again after the same delays; and what they measure (`controller::metrics`) is
//! the same: the live metrics and the twin's readings count the same gate waits in the same buckets.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::StatusCode;
use gpuclaim_adapter::cache::read_logged;
use gpuclaim_adapter::metrics::exposition;
use gpuclaim_adapter::reconciler::{Attempt, Turn};
use gpuclaim_adapter::writer::action_name;
use gpuclaim_engine::controller::Action;
use gpuclaim_engine::controller::runtime::{Change, Kind, ObjectKey, Outcome, target};
use gpuclaim_engine::model::{Time, View, VmiPhase};
use gpuclaim_engine::objects::load_objects;
use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::apiserver::ApiServer;
use gpuclaim_sim::gpu_controller::{Cluster, GpuController};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::users::{self, User};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::controller::{Controller, cluster_objects};
use crate::fake_store::{FakeStore, rest_path};

const TRAIN_A: &str = "/apis/gpu.cozystack.io/v1alpha1/namespaces/tenant-a/gpuclaims/train-a";
const TRAINER: &str = "/apis/kubevirt.io/v1/namespaces/tenant-a/virtualmachineinstances/trainer";

/// The twin's side: its API server, and one controller process driven by sim's driver.
struct Twin {
    api: ApiServer,
    controller: GpuController,
    /// The next write is refused so (the API server failing).
    refuse: Option<Outcome>,
}

/// The twin's API server as the controller's cluster, recording its writes as the live reconciler does.
struct TwinCluster<'t> {
    api: &'t mut ApiServer,
    refuse: &'t mut Option<Outcome>,
    now: Time,
    attempts: Vec<Attempt>,
}

impl Cluster for TwinCluster<'_> {
    type Error = Infallible;

    fn write(&mut self, action: &Action, user: &User) -> Result<Outcome, Infallible> {
        let outcome = match self.refuse.take() {
            Some(refused) => refused,
            None => self.api.write(action, self.now, user).map_or_else(|error| error.outcome(), Outcome::Written),
        };
        let word = match &outcome {
            Outcome::Written(_) => "ok",
            Outcome::Stale => "stale",
            Outcome::Failed => "error",
            Outcome::NotSent => "not_sent",
        };
        self.attempts.push(Attempt { action: action_name(action), object: target(action), outcome: word });
        Ok(outcome)
    }

    fn read_node(&mut self, node: &str, cache: &View) -> Vec<Change> {
        self.api.read_node(node, cache)
    }

    fn read(&mut self, object: &ObjectKey) -> Option<Change> {
        self.api.get(object)
    }

    fn node_refreshed(&mut self, _node: &str, _objects: usize) -> Result<(), Infallible> {
        Ok(())
    }
}

impl Twin {
    fn new(objects: &[Value]) -> Twin {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string();
        let view = load_objects(&list, "cozy-gpuclaim").expect("the example objects load").view;
        let api = ApiServer::new(view, 1_000);
        // The settings name the chart's service account.
        let user = User::service_account("cozy-gpuclaim", "gpuclaim-controller");
        let mut controller = GpuController::new(api.store().clone(), user, Variant::SHIPPED);
        controller.lead(Time::now());
        Twin { api, controller, refuse: None }
    }

    /// The loop at `now`, as the live reconciler's turn: its writes, and the delay until it asks to run again.
    fn turn(&mut self, now: Time) -> (Vec<Attempt>, Option<Duration>) {
        let mut cluster = TwinCluster { api: &mut self.api, refuse: &mut self.refuse, now, attempts: Vec::new() };
        let Ok(wake_at) = self.controller.wake(now, &mut cluster);
        let after = wake_at.map(|at| Duration::try_from(at.duration_since(now)).unwrap());
        (cluster.attempts, after)
    }

    /// What the twin's watch has brought, into the controller's cache.
    fn deliver_watch(&mut self) {
        for change in self.api.watch().deliver(Millis(u64::MAX)).collect::<Vec<_>>() {
            self.controller.observe(change);
        }
    }
}

/// The live side's watch event for the object at `path` as the fake API server holds it.
fn watched_vmi(store: &FakeStore, path: &str) -> Change {
    let object: DynamicObject = serde_json::from_value(store.get(path).unwrap()).unwrap();
    Change::Upsert(read_logged(&object).expect("a VMI the cache reads"))
}

/// The writes, with a usage record's name cut before its hash: the hash covers the record's start, the time of
/// the pass, which each side reads from its own clock.
fn writes(attempts: &[Attempt]) -> Vec<Attempt> {
    let mut attempts = attempts.to_vec();
    for attempt in &mut attempts {
        if attempt.object.kind == gpuclaim_engine::controller::runtime::Kind::Usage
            && let Some((claim, _hash)) = attempt.object.name.rsplit_once('-')
        {
            attempt.object.name = claim.into();
        }
    }
    attempts
}

/// The same writes with the same outcomes, and the same wait before the next run (the live one measured from its
/// last poll, so a little shorter).
fn assert_same(step: &str, twin: &(Vec<Attempt>, Option<Duration>), live: &Turn) {
    assert_eq!(writes(&twin.0), writes(&live.attempts), "{step}: the writes differ");
    match (twin.1, live.retry_after) {
        (None, None) => {}
        (Some(twin), Some(live)) => {
            assert!(live <= twin && twin - live < Duration::from_secs(1), "{step}: run again after {twin:?} / {live:?}")
        }
        (twin, live) => panic!("{step}: run again after {twin:?} (twin) / {live:?} (live)"),
    }
}

#[tokio::test]
async fn the_twins_driver_and_the_live_driver_make_the_same_writes_from_the_same_inputs() {
    let objects = cluster_objects();
    let mut twin = Twin::new(&objects);
    let store = FakeStore::default();
    for object in &objects {
        store.put(&rest_path(object), object.clone());
    }
    let mut live = Controller::start(store).await;

    // Someone else labels train-a after both caches read it: its first write is stale, read again, and retried.
    let mut labelled = live.store.get(TRAIN_A).unwrap();
    labelled["metadata"]["labels"] = json!({"team": "ml"});
    live.store.put(TRAIN_A, labelled);
    let admin = users::platform_admin();
    // (The twin's claims keep no labels: the same update, read as the controller reads it, changes only the
    // resourceVersion.)
    twin.api.update_claim("tenant-a", "train-a", "", &admin, |_| {}).expect("an administrator may label a claim");
    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    assert_same("the first pass", &twin_turn, &live_turn);
    assert!(live_turn.attempts.iter().any(|a| a.object.name == "train-a" && a.outcome == "stale"), "{live_turn:?}");
    assert_eq!(twin_turn.1, Some(Duration::from_millis(5)), "train-a's first backoff");

    tokio::time::sleep(Duration::from_millis(10)).await;
    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    assert_same("the retry", &twin_turn, &live_turn);
    assert!(live_turn.written() > 0 && live_turn.refused.is_none(), "{live_turn:?}");

    // The trainer's run ends while the API server fails: the release is refused, then retried once it is back.
    twin.deliver_watch();
    twin.api
        .update_vmi("tenant-a", "trainer", &users::kubevirt_controller(), |vmi| vmi.phase = VmiPhase::Succeeded)
        .unwrap();
    twin.deliver_watch();
    let mut ended = live.store.get(TRAINER).unwrap();
    ended["status"]["phase"] = json!("Succeeded");
    live.store.put(TRAINER, ended);
    live.caches.apply([watched_vmi(&live.store, TRAINER)]).unwrap();
    twin.refuse = Some(Outcome::Failed);
    live.store.set_failing(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    assert_same("the release, refused", &twin_turn, &live_turn);
    assert_eq!(live_turn.attempts.len(), 1, "the pass stops at its first refused write: {live_turn:?}");

    live.store.set_failing(None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    assert_same("the release, retried", &twin_turn, &live_turn);
    assert!(live_turn.attempts.iter().any(|a| a.action == "DeleteClaim"), "the template claim goes: {live_turn:?}");
    assert!(live_turn.refused.is_none(), "{live_turn:?}");
}

/// Another VM of tenant-a at the gate, beside the trainer: its VMI (Scheduling) and its launcher, as the webhooks
/// admitted the trainer's, ordering `units` of h100 through one claim template, the launcher created at `created`.
fn another_run(objects: &[Value], vm: &str, units: u32, created: Time) -> [Value; 2] {
    let of_kind = |kind: &str| objects.iter().find(|o| o["kind"] == kind && o["metadata"]["namespace"] == "tenant-a");
    let uid = format!("uid-vmi-{vm}");
    let attachments = json!([{"template": 0, "class": "h100", "count": units}]).to_string();
    let references = json!([{"claimTemplate": {"class": "h100", "count": units}}]).to_string();
    let mut vmi = of_kind("VirtualMachineInstance").expect("the trainer's VMI").clone();
    vmi["metadata"]["name"] = json!(vm);
    vmi["metadata"]["uid"] = json!(uid);
    vmi["metadata"]["annotations"]["gpu.cozystack.io/attachments"] = json!(attachments);
    vmi["metadata"]["annotations"]["gpu.cozystack.io/claims"] = json!(references);
    let mut pod = of_kind("Pod").expect("the trainer's launcher").clone();
    pod["metadata"]["name"] = json!(format!("virt-launcher-{vm}-abcde"));
    pod["metadata"]["uid"] = json!(format!("uid-launcher-{vm}"));
    pod["metadata"]["creationTimestamp"] = json!(created.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    pod["metadata"]["labels"]["kubevirt.io/created-by"] = json!(uid);
    pod["metadata"]["labels"]["vm.kubevirt.io/name"] = json!(vm);
    pod["metadata"]["ownerReferences"][0]["name"] = json!(vm);
    pod["metadata"]["ownerReferences"][0]["uid"] = json!(uid);
    pod["metadata"]["annotations"]["gpu.cozystack.io/attachments"] = json!(attachments);
    pod["metadata"]["annotations"]["gpu.cozystack.io/claims"] = json!(references);
    [vmi, pod]
}

/// The gate-wait histograms' bucket and count series of an exposition, by series (the sums differ by the moment
/// each side read its clock).
fn gate_wait_series(exposition: &str) -> std::collections::BTreeMap<String, u64> {
    exposition
        .lines()
        .filter(|line| {
            line.starts_with("gpuclaim_gate_wait_seconds_bucket")
                || line.starts_with("gpuclaim_gate_wait_seconds_count")
        })
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn the_live_metrics_and_the_twins_readings_count_the_same_gate_waits() {
    // At the gate: the trainer (gated since 2025: past every bucket), a VM of one unit gated 7 s ago (placed by the
    // first pass), and one of 8 units gated 100 s ago, which no node has free: it waits until its pod is deleted.
    let now = Time::now();
    let ago = |seconds: i64| now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(seconds)).unwrap();
    let mut objects = cluster_objects();
    for quota in objects.iter_mut().filter(|o| o["kind"] == "ResourceQuota" && o["metadata"]["namespace"] == "tenant-a")
    {
        quota["spec"]["hard"]["requests.gpu.cozystack.io/h100"] = json!("32"); // capacity, not the budget, holds it
    }
    let small = another_run(&objects, "small", 1, ago(7));
    let huge = another_run(&objects, "huge", 8, ago(100));
    objects.extend(small.into_iter().chain(huge));
    let mut twin = Twin::new(&objects);
    let store = FakeStore::default();
    for object in &objects {
        store.put(&rest_path(object), object.clone());
    }
    let mut live = Controller::start(store).await;

    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    assert_same("the first pass", &twin_turn, &live_turn);
    let ungated: Vec<&str> =
        live_turn.attempts.iter().filter(|a| a.action == "PinAndUngate").map(|a| a.object.name.as_str()).collect();
    assert_eq!(ungated, ["virt-launcher-trainer-x7k2p", "virt-launcher-small-abcde"], "first come, first served");

    // The huge VM's launcher is deleted while gated (its VM stopped).
    let huge_pod = "virt-launcher-huge-abcde";
    twin.api.delete_pod("tenant-a", huge_pod).unwrap();
    twin.deliver_watch();
    live.store.delete(&format!("/api/v1/namespaces/tenant-a/pods/{huge_pod}")).unwrap();
    let deleted =
        Change::Delete { kind: Kind::Pod, namespace: "tenant-a".into(), name: huge_pod.into(), revision: "".into() };
    live.caches.apply([deleted]).unwrap();
    let twin_turn = twin.turn(Time::now());
    let live_turn = live.turn().await;
    // (Each side's resync is due 10 h after its own first pass: the live one's came a little later.)
    assert_eq!(writes(&twin_turn.0), writes(&live_turn.attempts), "after the deletion");

    let at = Time::now();
    let twin_exposition = exposition(&twin.controller.figures().readings(at), at);
    let twin_series = gate_wait_series(&twin_exposition);
    assert_eq!(twin_series, gate_wait_series(&live.metrics.encode()), "the twin's:\n{twin_exposition}");
    let count = |outcome: &str| {
        twin_series[&format!(r#"gpuclaim_gate_wait_seconds_count{{class="h100",outcome="{outcome}"}}"#)]
    };
    assert_eq!((count("ungated"), count("deleted")), (2, 1));
    let bucket = |le: &str, outcome: &str| {
        twin_series[&format!(r#"gpuclaim_gate_wait_seconds_bucket{{le="{le}",class="h100",outcome="{outcome}"}}"#)]
    };
    let ungated = ["5.0", "10.0", "21600.0", "+Inf"].map(|le| bucket(le, "ungated"));
    assert_eq!(ungated, [0, 1, 1, 2], "the small VM's 7 s, and the trainer's wait since 2025");
    assert_eq!((bucket("60.0", "deleted"), bucket("120.0", "deleted")), (0, 1));
}
