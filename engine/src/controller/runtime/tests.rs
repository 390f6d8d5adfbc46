//! The loop, step by step: the event filter, when passes run and over what, confirmation, retries, the resync.

use std::collections::VecDeque;

use super::*;
use crate::fixtures::{self, gated_launcher, held_claim, vmi};
use crate::model::VmiPhase;

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

/// Two H100 nodes (8 and 4 units), one class, one tenant with budget 8.
fn world() -> View {
    fixtures::two_node_cluster()
}

/// Reconciles and applies until nothing is left to do.
fn settle(view: &mut View, now: Time) {
    for _ in 0..8 {
        let actions = crate::controller::reconcile(view, now);
        if actions.is_empty() {
            return;
        }
        crate::controller::apply(view, &actions, now).expect("the pass's own writes apply");
    }
    panic!("reconcile did not settle in 8 passes");
}

fn claim_at(view: &mut View, mut claim: crate::model::Claim, seconds: i64) {
    claim.created = at(seconds);
    view.upsert_claim(claim);
}

#[test]
fn a_vmi_key_is_needed_only_where_a_pass_would_decide_something_new() {
    let mut view = world();
    let scheduled = vmi("tenant-a", "vm-1", VmiPhase::Scheduled, Some("gpu-1"));
    let running = vmi("tenant-a", "vm-1", VmiPhase::Running, Some("gpu-1"));
    assert!(!vmi_key_needed(&view, Some(&scheduled), &running), "no claim names the run: nothing to visit");
    view.upsert_claim(fixtures::attached(held_claim("tenant-a", "held", "h100", 2), "gpu-1", "vm-1"));
    view.upsert_vmi(scheduled.clone());
    assert!(vmi_key_needed(&view, None, &scheduled), "a run its claims name");
    assert!(!vmi_key_needed(&view, Some(&scheduled), &running), "running where its claims are: nothing follows");
    let mut migrated = running.clone();
    migrated.node_name = Some("gpu-2".into());
    assert!(vmi_key_needed(&view, Some(&running), &migrated), "running elsewhere: its claims follow");
    let ended = vmi("tenant-a", "vm-1", VmiPhase::Succeeded, Some("gpu-1"));
    assert!(vmi_key_needed(&view, Some(&running), &ended), "ended: its claims are released");
    let mut another_run = running.clone();
    another_run.uid = "uid-another-run".into();
    assert!(vmi_key_needed(&view, Some(&running), &another_run), "another run under the same name");
    assert!(!vmi_key_needed(&view, Some(&scheduled), &scheduled), "nothing read changed");
}

#[test]
fn the_echo_of_a_pass_needs_a_pass_only_while_something_waits() {
    let mut view = world();
    assert!(!echo_needs_pass(&view), "nothing waits");
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":2}]"#, H100, 2, at(0)));
    assert!(echo_needs_pass(&view), "a pod at the gate");
    settle(&mut view, at(1));
    assert!(!echo_needs_pass(&view), "placed and ungated: nothing waits");
    claim_at(&mut view, held_claim("tenant-a", "train-a", "h100", 1), 2);
    assert!(echo_needs_pass(&view), "a held claim pending");
    settle(&mut view, at(3));
    assert!(!echo_needs_pass(&view), "bound: nothing waits");
}

#[test]
fn a_pod_change_wakes_a_pass_at_the_gate_and_when_it_has_just_ended() {
    use crate::model::PodPhase;
    let mut pod = gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(0));
    assert!(pod_change_wakes(None, &pod), "a new pod at the gate");
    pod.scheduling_gates.clear();
    pod.node_name = Some("gpu-1".into());
    assert!(!pod_change_wakes(Some(PodPhase::Pending), &pod), "bound where it was pinned");
    pod.phase = PodPhase::Running;
    assert!(!pod_change_wakes(Some(PodPhase::Pending), &pod), "running");
    pod.phase = PodPhase::Succeeded;
    assert!(pod_change_wakes(Some(PodPhase::Running), &pod), "just ended: its units are free");
    assert!(!pod_change_wakes(Some(PodPhase::Succeeded), &pod), "ended before: nothing new");
    assert!(!pod_deletion_wakes(&pod), "deleted after it ended");
    pod.phase = PodPhase::Running;
    assert!(pod_deletion_wakes(&pod), "deleted while running: its units come free now");
}

#[test]
fn the_watch_wakes_the_controller_only_for_what_a_pass_reads() {
    use crate::model::PodPhase;
    let mut cache = world();
    let mut revision = 0;
    let mut upsert = |cache: &mut View, mut object: Object| {
        revision += 1;
        match &mut object {
            Object::Vmi(vmi) => vmi.resource_version = revision.to_string().into(),
            Object::Pod(pod) => pod.resource_version = revision.to_string().into(),
            Object::Claim(claim) => claim.resource_version = revision.to_string().into(),
            _ => unreachable!("VMIs, pods and claims only"),
        }
        observe(cache, Change::Upsert(object)).expect("a newer revision")
    };
    // A run with no claims yet: its key would bring nothing into a pass.
    let mut run = vmi("tenant-a", "a", VmiPhase::Scheduling, None);
    assert_eq!(upsert(&mut cache, Object::Vmi(run.clone())), Touched::Quiet, "a new run with no claims");
    let claim = fixtures::attached(held_claim("tenant-a", "c", "h100", 2), "gpu-1", "a");
    assert_eq!(upsert(&mut cache, Object::Claim(claim)), Touched::Claim("tenant-a".into(), "c".into()));
    run.phase = VmiPhase::Scheduled;
    run.node_name = Some("gpu-1".into());
    assert_eq!(upsert(&mut cache, Object::Vmi(run.clone())), Touched::Quiet, "scheduled: nothing a pass reads");
    run.phase = VmiPhase::Running;
    assert_eq!(upsert(&mut cache, Object::Vmi(run.clone())), Touched::Quiet, "running where its claim is");
    run.node_name = Some("gpu-2".into());
    assert_eq!(upsert(&mut cache, Object::Vmi(run.clone())), Touched::Vmi("tenant-a".into(), "a".into()), "moved");
    // Its launcher: gated, bound (quiet), ended (frees what it took), updated once ended, deleted.
    let mut pod = gated_launcher("tenant-a", "a", "[]", H100, 2, at(0));
    assert_eq!(upsert(&mut cache, Object::Pod(pod.clone())), Touched::Waiters, "at the gate");
    pod.scheduling_gates = Default::default();
    pod.node_name = Some("gpu-1".into());
    assert_eq!(upsert(&mut cache, Object::Pod(pod.clone())), Touched::Quiet, "bound");
    pod.phase = PodPhase::Succeeded;
    assert_eq!(upsert(&mut cache, Object::Pod(pod.clone())), Touched::Waiters, "ended: its units are free");
    assert_eq!(upsert(&mut cache, Object::Pod(pod.clone())), Touched::Quiet, "ended before: nothing new is free");
    let gone = |kind, name: &str, revision: u64| Change::Delete {
        kind,
        namespace: "tenant-a".into(),
        name: name.into(),
        revision: revision.to_string().into(),
    };
    assert_eq!(observe(&mut cache, gone(Kind::Pod, &pod.name, 100)), Some(Touched::Quiet), "an ended pod's deletion");
    let mut running = gated_launcher("tenant-a", "b", "[]", H100, 2, at(0));
    running.scheduling_gates = Default::default();
    running.node_name = Some("gpu-2".into());
    running.phase = PodPhase::Running;
    upsert(&mut cache, Object::Pod(running.clone()));
    assert_eq!(
        observe(&mut cache, gone(Kind::Pod, &running.name, 101)),
        Some(Touched::Waiters),
        "a running pod's deletion"
    );
    // A raw-device VM's launcher (no claims cover its GPUs): bound, its devices take units the classes publish.
    let mut raw = gated_launcher("tenant-a", "raw", "[]", H100, 2, at(0));
    raw.labels = Default::default();
    raw.scheduling_gates = Default::default();
    assert_eq!(upsert(&mut cache, Object::Pod(raw.clone())), Touched::Quiet, "not bound yet: it takes nothing");
    raw.node_name = Some("gpu-2".into());
    assert_eq!(upsert(&mut cache, Object::Pod(raw.clone())), Touched::Waiters, "bound: fewer free units to publish");
    raw.phase = PodPhase::Running;
    assert_eq!(upsert(&mut cache, Object::Pod(raw.clone())), Touched::Quiet, "running: nothing moved");
    // The run's deletion: its key while a claim names it, quiet once none does.
    assert_eq!(observe(&mut cache, gone(Kind::Vmi, "a", 102)), Some(Touched::Vmi("tenant-a".into(), "a".into())));
    upsert(&mut cache, Object::Vmi(vmi("tenant-a", "z", VmiPhase::Scheduling, None)));
    assert_eq!(observe(&mut cache, gone(Kind::Vmi, "z", 103)), Some(Touched::Quiet), "a run with no claims");
}

// ---- The loop, driven against a perfect API server (`controller::apply` on a store) with scripted refusals. ----

/// A perfect API server over `store` that refuses the next writes as scripted, recording what it wrote.
struct FakeCluster {
    store: View,
    refusals: VecDeque<Outcome>,
    written: Vec<Action>,
}

impl FakeCluster {
    fn new(store: View) -> Self {
        FakeCluster { store, refusals: VecDeque::new(), written: Vec::new() }
    }

    fn write(&mut self, action: &Action, now: Time) -> Outcome {
        if let Some(refused) = self.refusals.pop_front() {
            return refused;
        }
        if crate::controller::apply(&mut self.store, std::slice::from_ref(action), now).is_err() {
            return Outcome::Stale;
        }
        self.written.push(action.clone());
        if let Action::Event { .. } = action {
            return Outcome::Written(Vec::new());
        }
        Outcome::Written(self.read(&target(action)).into_iter().collect())
    }

    fn read(&self, object: &ObjectKey) -> Option<Change> {
        let (namespace, name) = (&object.namespace, &object.name);
        let live = match object.kind {
            Kind::Claim => self.store.claim(namespace, name).cloned().map(Object::Claim),
            Kind::Pod => self.store.pod(namespace, name).cloned().map(Object::Pod),
            Kind::Usage => self.store.usage(namespace, name).cloned().map(Object::Usage),
            Kind::Class => self.store.class(name).cloned().map(Object::Class),
            Kind::Node => self.store.node(name).cloned().map(Object::Node),
            _ => return None,
        };
        Some(live.map(Change::Upsert).unwrap_or_else(|| Change::Delete {
            kind: object.kind,
            namespace: namespace.clone(),
            name: name.clone(),
            revision: Default::default(),
        }))
    }

    fn read_node(&self, node: &str) -> Vec<Change> {
        let node_now = self.store.node(node).cloned().map(|n| Change::Upsert(Object::Node(n)));
        let pods = self.store.pods_on_node(node).map(|p| Change::Upsert(Object::Pod(p.clone())));
        node_now.into_iter().chain(pods).collect()
    }
}

/// One controller process: its cache, queue and loop.
struct Process {
    cache: View,
    queue: WorkQueue,
    runtime: Runtime,
    /// What each poll asked for, in short (`write PinAndUngate tenant-a/virt-launcher-vm-1-abcde`, `confirm gpu-2`).
    asked: Vec<String>,
}

impl Process {
    fn leading(cache: View) -> Self {
        let mut runtime = Runtime::new(Variant::SHIPPED);
        runtime.set_leading(true, Time::MIN);
        Process { cache, queue: WorkQueue::default(), runtime, asked: Vec::new() }
    }

    /// Drives the loop at `now` until it is idle; returns when it wants to run again.
    fn run(&mut self, cluster: &mut FakeCluster, now: Time) -> Option<Time> {
        for _ in 0..1_000 {
            match self.runtime.poll(&self.cache, &mut self.queue, now) {
                Poll::Idle { wake_at } => return wake_at,
                Poll::Confirm(nodes) => {
                    for node in nodes {
                        self.asked.push(format!("confirm {node}"));
                        let live = cluster.read_node(&node);
                        self.runtime.read_live(&mut self.cache, &mut self.queue, &node, Some(live), now);
                    }
                }
                Poll::Refresh(object) => {
                    self.asked.push(format!("refresh {object}"));
                    let live = cluster.read(&object);
                    self.runtime.refreshed(&mut self.cache, &mut self.queue, live);
                }
                Poll::Write(action) => {
                    self.asked.push(format!("write {}", target(&action)));
                    let outcome = cluster.write(&action, now);
                    self.runtime.wrote(&mut self.cache, &mut self.queue, &action, outcome, now);
                }
            }
        }
        panic!("the loop did not go idle: {:#?}", self.asked);
    }

    /// A watch event reaches the cache; returns whether it woke the queue.
    fn watch(&mut self, change: Change) -> bool {
        self.queue.observe(&mut self.cache, change)
    }
}

fn ms(millis: i64) -> Time {
    at(0).checked_add(k8s_openapi::jiff::SignedDuration::from_millis(millis)).unwrap()
}

/// The two-node world with VM `vm` waiting at the gate for `units` units of a template claim.
fn waiting_world(vms: &[(&str, u64)]) -> View {
    let mut view = world();
    for (vm, units) in vms {
        view.upsert_vmi(vmi("tenant-a", vm, VmiPhase::Scheduling, None));
        let attachments = format!(r#"[{{"template":0,"class":"h100","count":{units}}}]"#);
        view.upsert_pod(gated_launcher("tenant-a", vm, &attachments, H100, *units, at(0)));
    }
    view
}

/// A leading process and the API server, both holding [`waiting_world`].
fn started(vms: &[(&str, u64)]) -> (FakeCluster, Process) {
    let store = waiting_world(vms);
    (FakeCluster::new(store.clone()), Process::leading(store))
}

const POD_1: &str = "Pod tenant-a/virt-launcher-vm-1-abcde";

#[test]
fn a_replica_reconciles_only_while_it_leads_and_a_new_leader_passes_over_everything_at_once() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    process.runtime.set_leading(false, ms(0));
    assert_eq!(process.run(&mut cluster, ms(0)), None, "a standby waits for leadership");
    assert!(process.asked.is_empty());
    process.runtime.set_leading(true, ms(0));
    let wake_at = process.run(&mut cluster, ms(0));
    assert_eq!(process.asked.first().map(String::as_str), Some("confirm gpu-2"), "best fit, confirmed first");
    assert!(process.asked.contains(&format!("write {POD_1}")), "{:#?}", process.asked);
    assert_eq!(process.runtime.stats().passes, 1);
    assert_eq!(wake_at, Some(after(ms(0), RESYNC_PERIOD)), "nothing waits: the resync is the next wake");
    assert!(cluster.store.gated_pods().next().is_none(), "placed");
}

#[test]
fn a_refused_write_stops_the_pass_and_is_tried_again_after_its_objects_backoff() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    cluster.refusals.extend([Outcome::Failed, Outcome::Failed]);
    let first = process.run(&mut cluster, ms(0));
    assert_eq!(first, Some(ms(5)), "5 ms after the first refusal of that object");
    assert!(cluster.written.is_empty(), "the pass stopped at its first write");
    assert_eq!(process.run(&mut cluster, ms(4)), Some(ms(5)), "not before its backoff");
    assert_eq!(process.run(&mut cluster, ms(5)), Some(ms(15)), "refused again: 10 ms more");
    process.run(&mut cluster, ms(15));
    assert!(cluster.store.gated_pods().next().is_none(), "the third try placed the pod");
    let stats = process.runtime.stats();
    assert_eq!((stats.passes, stats.refused), (3, 2));
    let writes = process.asked.iter().filter(|a| a.starts_with("write")).count();
    assert_eq!(writes, 2 + cluster.written.len(), "{:#?}", process.asked);
}

#[test]
fn a_stale_write_reads_its_object_again_before_the_retry() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    // Someone else changed the pod after the cache read it: the pin is refused as stale.
    cluster.store.edit_pod("tenant-a", "virt-launcher-vm-1-abcde", |pod| pod.resource_version = "7".into());
    let wake_at = process.run(&mut cluster, ms(0));
    let refresh = process.asked.iter().position(|a| *a == format!("refresh {POD_1}")).expect("read again");
    assert_eq!(process.asked[refresh - 1], format!("write {POD_1}"), "right after the stale write");
    assert_eq!(process.cache.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap().resource_version, "7");
    assert_eq!(wake_at, Some(ms(5)));
    process.run(&mut cluster, ms(5));
    assert!(cluster.store.gated_pods().next().is_none(), "the retry, on the object read again, lands");
}

#[test]
fn a_watch_event_the_filter_keeps_cuts_a_backoff_short_and_a_quiet_one_does_not() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    cluster.refusals.extend([Outcome::Failed]);
    assert_eq!(process.run(&mut cluster, ms(0)), Some(ms(5)));
    let passes = process.runtime.stats().passes;
    // A run on its way to Running, with no claim bound to it yet: nothing a pass reads.
    let mut scheduled = vmi("tenant-a", "vm-1", VmiPhase::Scheduled, None);
    scheduled.resource_version = "50".into();
    assert!(!process.watch(Change::Upsert(Object::Vmi(scheduled))));
    assert_eq!(process.run(&mut cluster, ms(1)), Some(ms(5)), "a quiet event leaves the backoff as it was");
    assert_eq!(process.runtime.stats().passes, passes);
    // A second VM at the gate wakes a pass at once.
    let run = vmi("tenant-a", "vm-2", VmiPhase::Scheduling, None);
    let attachments = r#"[{"template":0,"class":"h100","count":1}]"#;
    let pod = gated_launcher("tenant-a", "vm-2", attachments, H100, 1, at(0));
    cluster.store.upsert_vmi(run.clone());
    cluster.store.upsert_pod(pod.clone());
    process.watch(Change::Upsert(Object::Vmi(run)));
    assert!(process.watch(Change::Upsert(Object::Pod(pod))), "a pod at the gate wakes the queue");
    process.run(&mut cluster, ms(1));
    assert_eq!(process.runtime.stats().passes, passes + 1, "before the backoff ran out");
    assert!(cluster.store.gated_pods().next().is_none(), "both placed: {:#?}", process.asked);
}

#[test]
fn the_echo_of_own_writes_is_served_after_the_echo_delay_only_while_something_waits() {
    // Nothing fits vm-2 (9 units on nodes of 8 and 4) until vm-1 ends, so it waits; its waiting condition is an
    // own write that wakes the filter, and something still waits: the echo is served 100 ms later.
    let (mut cluster, mut process) = started(&[("vm-1", 3), ("vm-2", 9)]);
    let wake_at = process.run(&mut cluster, ms(0));
    assert_eq!(wake_at, Some(after(ms(0), ECHO_DELAY)), "{:#?}", process.asked);
    let passes = process.runtime.stats().passes;
    assert_eq!(process.run(&mut cluster, after(ms(0), ECHO_DELAY)), Some(after(ms(0), RESYNC_PERIOD)));
    assert_eq!(process.runtime.stats().passes, passes + 1, "the echo's pass, which writes nothing");
    // With nothing waiting, own writes need no echo: the next wake is the resync.
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    assert_eq!(process.run(&mut cluster, ms(0)), Some(after(ms(0), RESYNC_PERIOD)));
}

#[test]
fn pins_are_confirmed_before_anything_is_written_and_a_node_that_moved_takes_the_pass_again() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    // kube-scheduler bound a raw-device pod on gpu-2 that the cache has not seen: 2 of its 4 units are taken.
    let mut raw = gated_launcher("tenant-b", "raw", "[]", H100, 2, at(0));
    std::sync::Arc::make_mut(&mut raw.labels).clear();
    raw.scheduling_gates.clear();
    raw.node_name = Some("gpu-2".into());
    cluster.store.upsert_pod(raw);
    process.run(&mut cluster, ms(0));
    assert_eq!(process.asked[..2], ["confirm gpu-2".to_owned(), "confirm gpu-1".to_owned()], "{:#?}", process.asked);
    assert_eq!(process.runtime.stats().pins_rechecked, 1);
    let placed = cluster.store.claim("tenant-a", "vm-1-gpu-0").expect("created");
    assert_eq!(placed.node.as_deref(), Some("gpu-1"), "placed where the units are free");
    // The counterfactual writes from its cache alone.
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    process.runtime.set_variant(Variant { unconfirmed_pins: true, ..Variant::SHIPPED });
    process.run(&mut cluster, ms(0));
    assert!(process.asked.iter().all(|a| !a.starts_with("confirm")), "{:#?}", process.asked);
}

#[test]
fn the_resync_passes_over_everything_every_resync_period() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    assert_eq!(process.run(&mut cluster, ms(0)), Some(after(ms(0), RESYNC_PERIOD)));
    let due = after(ms(0), RESYNC_PERIOD);
    assert_eq!(process.run(&mut cluster, ms(1_000)), Some(due), "nothing happens before it");
    assert_eq!(process.runtime.stats().passes, 1);
    assert_eq!(process.run(&mut cluster, due), Some(after(due, RESYNC_PERIOD)), "and the next one is set");
    assert_eq!(process.runtime.stats().passes, 2, "the resync's pass");
}

#[test]
fn a_write_not_sent_drops_the_pass_and_tries_again_in_full() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    cluster.refusals.extend([Outcome::NotSent]);
    assert_eq!(process.run(&mut cluster, ms(0)), Some(after(ms(0), NOT_LEADING_RETRY)));
    assert_eq!(process.runtime.stats().refused, 0, "not a refusal: nothing was sent");
    process.run(&mut cluster, after(ms(0), NOT_LEADING_RETRY));
    assert!(cluster.store.gated_pods().next().is_none());
}

#[test]
fn a_deletion_of_the_controllers_own_keeps_older_states_out_until_its_stream_has_passed_it() {
    let claim = |name: &str, revision: &str| {
        let mut claim = held_claim("tenant-a", name, "h100", 1);
        claim.resource_version = revision.into();
        Change::Upsert(Object::Claim(claim))
    };
    let deleted = |name: &str, revision: &str| Change::Delete {
        kind: Kind::Claim,
        namespace: "tenant-a".into(),
        name: name.into(),
        revision: revision.into(),
    };
    let node_at = |revision: &str| {
        let mut node = fixtures::gpu_node("gpu-9", H100, 8);
        node.resource_version = revision.into();
        Change::Upsert(Object::Node(node))
    };
    for watches in [Watches::One, Watches::PerKind] {
        let mut cache = world();
        let mut queue = WorkQueue::new(watches);
        queue.bury(ObjectKey::new(Kind::Claim, "tenant-a", "c"), 10);
        assert!(!queue.observe(&mut cache, claim("c", "9")), "{watches:?}: an older state stays out");
        assert!(cache.claim("tenant-a", "c").is_none());
        // A node's event at a later revision: the one stream has passed the deletion, a claim stream has not.
        queue.observe(&mut cache, node_at("11"));
        let kept = usize::from(watches == Watches::PerKind);
        assert_eq!(queue.tombstones_kept(), kept, "{watches:?}");
        // The claims' own stream passing it drops it either way, and keeping them costs nothing per event.
        queue.observe(&mut cache, claim("d", "12"));
        assert_eq!(queue.tombstones_kept(), 0, "{watches:?}");
        assert!(queue.observe(&mut cache, claim("c", "13")), "{watches:?}: a new claim of the name is taken");
        queue.observe(&mut cache, deleted("c", "14"));
        assert!(cache.claim("tenant-a", "c").is_none());
    }
}

// ---- What the loop measures (`controller::metrics`). ----

fn gate_wait(process: &Process, outcome: crate::controller::metrics::GateOutcome, now: Time) -> (u64, f64) {
    let readings = process.runtime.figures().readings(now);
    let histogram = readings.gate_waits_of(Some("h100"), Some(outcome));
    (histogram.count(), histogram.sum_seconds())
}

#[test]
fn the_loop_measures_each_pod_leaving_the_gate_while_it_leads() {
    use crate::controller::metrics::GateOutcome::{Deleted, Ungated};
    // Both gated at 0 s; vm-1 placed at 2.5 s, vm-2 (9 units: no node has them) waits and is deleted at 40 s.
    let (mut cluster, mut process) = started(&[("vm-1", 3), ("vm-2", 9)]);
    process.run(&mut cluster, ms(2_500));
    assert_eq!(gate_wait(&process, Ungated, ms(2_500)), (1, 2.5), "the ungate, measured when it was written");
    assert_eq!(gate_wait(&process, Deleted, ms(2_500)), (0, 0.0));
    let deleted = |name: &str, revision: &str| Change::Delete {
        kind: Kind::Pod,
        namespace: "tenant-a".into(),
        name: name.into(),
        revision: revision.into(),
    };
    assert!(process.watch(deleted("virt-launcher-vm-2-abcde", "")), "a gated pod's deletion wakes the loop");
    process.run(&mut cluster, ms(40_000));
    assert_eq!(gate_wait(&process, Deleted, ms(40_000)), (1, 40.0), "measured at the wake it brought");
    let readings = process.runtime.figures().readings(ms(40_000));
    let buckets = readings.gate_waits_of(Some("h100"), None).cumulative();
    let le = |bound: f64| buckets.iter().find(|(b, _)| *b == bound).unwrap().1;
    assert_eq!((le(1.0), le(2.5), le(30.0), le(60.0), le(f64::INFINITY)), (0, 1, 1, 2, 2));

    // A standby's cache sees pods leave the gate too (the leader's ungates, deletions): it measures none of them.
    let (mut cluster, mut process) = started(&[("vm-1", 9)]);
    process.runtime.set_leading(false, ms(0));
    process.run(&mut cluster, ms(0));
    process.watch(deleted("virt-launcher-vm-1-abcde", ""));
    process.run(&mut cluster, ms(1_000));
    assert_eq!(gate_wait(&process, Deleted, ms(1_000)), (0, 0.0));
}

#[test]
fn the_loop_accrues_the_units_claims_hold_until_it_stops_leading() {
    let (mut cluster, mut process) = started(&[("vm-1", 3)]);
    process.run(&mut cluster, ms(0));
    let held = |process: &Process, now: Time| {
        let readings = process.runtime.figures().readings(now);
        readings.units_bound_seconds.get(&("tenant-a".into(), "h100".into())).copied()
    };
    assert_eq!(held(&process, ms(0)), Some(0.0), "the template claim bound by the pass");
    assert_eq!(held(&process, ms(10_000)), Some(30.0), "3 units for 10 s, read between passes");
    process.runtime.set_leading(false, ms(20_000));
    assert_eq!(held(&process, ms(50_000)), Some(60.0), "nothing accrues once it no longer leads");
    // Leading again 40 s later (sooner than the loop's longest time between accruals), its first pass writes no
    // claim: it reads what the claims hold all the same.
    process.runtime.set_leading(true, ms(60_000));
    process.run(&mut cluster, ms(60_000));
    assert_eq!(held(&process, ms(70_000)), Some(90.0), "3 units again from 60 s");
}

#[test]
fn a_pod_waiting_through_many_passes_gets_one_waiting_event() {
    // vm-2's launcher tolerates no GPU node's taint: every node refuses it, and it waits while passes come and go.
    let mut store = waiting_world(&[("vm-2", 1)]);
    store
        .edit_pod("tenant-a", "virt-launcher-vm-2-abcde", |pod| std::sync::Arc::make_mut(&mut pod.tolerations).clear());
    let (mut cluster, mut process) = (FakeCluster::new(store.clone()), Process::leading(store));
    for second in 1..=5 {
        // A VM of one unit at the gate wakes a pass every second, and is placed.
        let vm = format!("small-{second}");
        let run = vmi("tenant-a", &vm, VmiPhase::Scheduling, None);
        let pod = gated_launcher("tenant-a", &vm, r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, ms(0));
        cluster.store.upsert_vmi(run.clone());
        cluster.store.upsert_pod(pod.clone());
        process.watch(Change::Upsert(Object::Vmi(run)));
        process.watch(Change::Upsert(Object::Pod(pod)));
        process.run(&mut cluster, ms(second * 1_000));
    }
    process.run(&mut cluster, after(ms(0), RESYNC_PERIOD));
    assert_eq!(process.runtime.stats().passes, 6, "a pass per second's VM, and the resync over everything");
    let events: Vec<(&str, &str)> = cluster
        .written
        .iter()
        .filter_map(|action| match action {
            Action::Event { reason, object, .. } if object.name.starts_with("virt-launcher-vm-2") => {
                Some((*reason, object.name.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(events, [("Waiting", "virt-launcher-vm-2-abcde")], "one event, when the condition was first set");
    let waiting = cluster.store.pod("tenant-a", "virt-launcher-vm-2-abcde").unwrap().waiting.clone().unwrap();
    assert_eq!(waiting.reason, "NoCapacity");
    let placed = cluster.written.iter().filter(|a| matches!(a, Action::Event { reason: "Placed", .. })).count();
    assert_eq!(placed, 5, "every small VM placed beside it");
}
