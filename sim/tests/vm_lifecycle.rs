//! KubeVirt's VM lifecycle in the twin, against `../shared/kubevirt/13-kubevirt-vm-start-failure-backoff.yaml`: a
//! launcher deleted while its VMI waits at the gate fails the VMI, the VM counts a start failure and waits
//! `10·n²` s (+ up to half again, at most 300 s) in `CrashLoopBackOff` before the next VMI; reaching Running clears
//! the count. And a node lost: NotReady after the grace period, its pods evicted 300 s later, the VM started again
//! elsewhere (no start failure: it had run).

mod common;

use common::Lines;
use gpuclaim_engine::fixtures;
use gpuclaim_engine::model::VmiPhase;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{Event, Timing, VmSpec, World, template_vm};

fn world(seed: u64, lines: &Lines) -> World {
    World::new(seed, fixtures::two_node_cluster(), Timing::default(), EventLog::new(Some(Box::new(lines.clone()))))
}

/// The table's bounds (seconds) for the delay after the n-th consecutive failure.
const TABLE: [(u64, u64); 6] = [(10, 15), (40, 60), (90, 135), (160, 240), (250, 300), (300, 300)];

/// Deletes the launcher pod of tenant-a's VM `vm` at `at`.
fn delete_launcher_at(world: &mut World, at: Millis, vm: &str) {
    world.schedule_at(at, Event::DeleteLauncher { namespace: "tenant-a".into(), vm: vm.into() }).unwrap();
}

#[test]
fn a_vm_whose_launcher_keeps_disappearing_backs_off_as_kubevirt_does() {
    for seed in 1..=8 {
        let lines = Lines::default();
        let mut world = world(seed, &lines);
        // `holder` takes the tenant's whole budget of 8; `waiter` (2 units) stays at the gate.
        world
            .schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "holder", "h100", 8).into()))
            .unwrap();
        world
            .schedule_at(Millis::seconds(2), Event::CreateVm(template_vm("tenant-a", "waiter", "h100", 2).into()))
            .unwrap();
        // Delete the waiter's launcher every 400 s: each time a VMI exists at the gate (the longest backoff is 300 s).
        for k in 0..6u64 {
            let at = Millis::seconds(30 + 400 * k);
            delete_launcher_at(&mut world, at, "waiter");
        }
        world.run(Millis::seconds(2_700), 1_000_000).unwrap();
        drop(world.take_log());
        let records = lines.records();
        let failed: Vec<u64> = records
            .iter()
            .filter(|(_, object, what)| object == "VirtualMachineInstance tenant-a/waiter" && what == "Failed")
            .map(|(t, _, _)| *t)
            .collect();
        let created: Vec<u64> = records
            .iter()
            .filter(|(_, object, what)| object == "VirtualMachineInstance tenant-a/waiter" && what == "Created")
            .map(|(t, _, _)| *t)
            .collect();
        assert_eq!(failed.len(), 6, "seed {seed}: one failure per deletion");
        assert_eq!(created.len(), 7, "seed {seed}: the first VMI and one after each failure");
        for (n, (fail, next)) in failed.iter().zip(&created[1..]).enumerate() {
            let waited = (next - fail) / 1_000;
            let (low, high) = TABLE[n];
            assert!((low..=high).contains(&waited), "seed {seed}: failure {} waited {waited} s", n + 1);
        }
        let crash_loops =
            records.iter().filter(|(_, o, w)| o == "VirtualMachine tenant-a/waiter" && w == "CrashLoopBackOff");
        assert_eq!(crash_loops.count(), 6, "seed {seed}: the VM shows CrashLoopBackOff while it waits");
    }
}

#[test]
fn reaching_running_clears_the_start_failures() {
    let lines = Lines::default();
    let mut world = world(3, &lines);
    let holder = VmSpec { lifetime: Some(Millis::seconds(100)), ..template_vm("tenant-a", "holder", "h100", 8) };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(holder.into())).unwrap();
    world
        .schedule_at(Millis::seconds(2), Event::CreateVm(template_vm("tenant-a", "waiter", "h100", 2).into()))
        .unwrap();
    delete_launcher_at(&mut world, Millis::seconds(30), "waiter");
    delete_launcher_at(&mut world, Millis::seconds(60), "waiter");
    world.run(Millis::seconds(400), 1_000_000).unwrap();
    // Two failures (the second VMI came after 10–15 s, the third after 40–60 s), then the holder stopped at ~115 s
    // and the waiter ran.
    assert_eq!(world.store().vmi("tenant-a", "waiter").unwrap().phase, VmiPhase::Running);
    // A failure now counts from one again: its delay is the first row's.
    delete_launcher_at(&mut world, Millis::seconds(400), "waiter");
    world.run(Millis::seconds(500), 1_000_000).unwrap();
    drop(world.take_log());
    let records = lines.records();
    let last_failed =
        records.iter().rfind(|(_, o, w)| o == "VirtualMachineInstance tenant-a/waiter" && w == "Failed").unwrap().0;
    let last_created =
        records.iter().rfind(|(_, o, w)| o == "VirtualMachineInstance tenant-a/waiter" && w == "Created").unwrap().0;
    assert_eq!(last_created, last_failed, "it had run: no start failure, a new VMI at once");
}

#[test]
fn a_lost_node_evicts_its_vm_which_starts_again_on_another_node() {
    let lines = Lines::default();
    let mut world = world(4, &lines);
    // 4 units: best fit puts it on gpu-2 (4 units).
    world.schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 4).into())).unwrap();
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().node_name.as_deref(), Some("gpu-2"));
    world.schedule_at(Millis::seconds(100), Event::NodeLost { node: "gpu-2".into() }).unwrap();
    world.run(Millis::seconds(149), 100_000).unwrap();
    assert!(world.store().node("gpu-2").unwrap().ready, "within the grace period");
    world.run(Millis::seconds(151), 100_000).unwrap();
    assert!(!world.store().node("gpu-2").unwrap().ready, "NotReady 50 s after the last heartbeat");
    world.run(Millis::seconds(449), 100_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running, "pods tolerate 300 s");
    world.run(Millis::seconds(520), 100_000).unwrap();
    let vmi = world.store().vmi("tenant-a", "vm").unwrap();
    assert_eq!((vmi.phase, vmi.node_name.as_deref()), (VmiPhase::Running, Some("gpu-1")), "started again elsewhere");
    drop(world.take_log());
    let records = lines.records();
    assert!(
        records
            .iter()
            .any(|(t, o, w)| *t == 450_000 && o.starts_with("Pod tenant-a/virt-launcher-vm") && w == "Evicted")
    );
    assert!(!records.iter().any(|(_, _, w)| w == "CrashLoopBackOff"), "it had run: no start failure");
}

#[test]
fn a_vm_started_again_waits_for_its_previous_template_claim_and_the_release_echo_places_it() {
    let lines = Lines::default();
    let mut world = world(5, &lines);
    world.schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 2).into())).unwrap();
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running);
    // The running launcher goes: the VMI fails and the VM creates the next one at once (it had run), whose template
    // claim takes the name `vm-gpu-0` the previous run's claim holds until its release lands.
    delete_launcher_at(&mut world, Millis::seconds(100), "vm");
    world.run(Millis::seconds(130), 100_000).unwrap();
    assert!(
        world.metrics().counts().get("Waiting:PreviousRunReleasing").is_some_and(|n| *n >= 1),
        "the new launcher waited for the name: {:?}",
        world.metrics().counts()
    );
    // The pass that lets the old claim go leaves a pod at the gate, so its writes' echo wakes the pass that
    // creates the new run's claim and places it: nothing else would wake the controller.
    let vmi = world.store().vmi("tenant-a", "vm").unwrap();
    assert_eq!(vmi.phase, VmiPhase::Running, "started again within the half minute");
    let claim = world.store().claim("tenant-a", "vm-gpu-0").unwrap();
    assert_eq!(claim.attached_to.as_ref().map(|run| run.uid.clone()), Some(vmi.uid.clone()));
}
