//! The loop, step by step: the event filter, when passes run and over what, confirmation, retries, the resync.

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
