//! Faults by rate and by time: the twin keeps its promises under them (every VM still starts, no node holds more
//! units than it has, the same seed gives the same log), and each fault does what it says.

use gpuclaim_engine::fixtures;
use gpuclaim_engine::model::{View, VmiPhase};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{Event, Faults, Timing, Workload, World, template_vm};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn busy_world(seed: u64, faults: Faults) -> World {
    let mut store = fixtures::two_node_cluster();
    store.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 12)].into());
    let mut world = World::new(seed, store, Timing::default(), EventLog::new(None));
    world.set_faults(faults).unwrap();
    let template = template_vm("tenant-a", "vm", "h100", 2);
    world.add_workload(Workload::new(template, 12.0, Millis::seconds(600))).unwrap();
    world
}

/// No node holds more units of a resource than it has (claims bound there).
fn no_node_overbooked(view: &View) {
    for node in view.nodes() {
        let held: u64 = view.claims_on_node(&node.name).map(|c| u64::from(c.count)).sum();
        assert!(held <= node.devices.get(H100).copied().unwrap_or(0), "{} holds {held}", node.name);
    }
}

#[test]
fn injected_conflicts_are_refused_retried_and_everything_still_starts() {
    let mut world = busy_world(1, Faults { conflict_rate: 0.3, ..Faults::default() });
    world.run(Millis::seconds(6 * 3600), 1_000_000).unwrap();
    let stats = world.stats().clone();
    assert!(stats.refusals.get("WriteRefused:Conflict").copied().unwrap_or(0) > 10, "{stats:?}");
    let calm = {
        let mut world = busy_world(1, Faults::default());
        world.run(Millis::seconds(6 * 3600), 1_000_000).unwrap();
        world.vm_starts()
    };
    assert!(world.vm_starts() >= calm * 9 / 10, "{} of {calm} started under conflicts", world.vm_starts());
    no_node_overbooked(world.store());
}

#[test]
fn a_watch_lag_drawn_per_change_is_the_same_for_the_same_seed() {
    let faults = Faults { watch_lag_max: Some(Millis::seconds(3)), ..Faults::default() };
    let run = |seed| {
        let mut world = busy_world(seed, faults.clone());
        world.run(Millis::seconds(3 * 3600), 1_000_000).unwrap();
        no_node_overbooked(world.store());
        (world.log_hash(), world.vm_starts())
    };
    let (first, starts) = run(3);
    assert!(starts > 0);
    assert_eq!(run(3).0, first, "same seed, same log");
    assert_ne!(run(4).0, first);
}

#[test]
fn controller_crashes_at_a_rate_hand_leadership_over_and_vms_still_start() {
    let faults = Faults { controller_crash_every: Some(Millis::seconds(1800)), ..Faults::default() };
    let mut world = busy_world(5, faults);
    world.run(Millis::seconds(12 * 3600), 1_000_000).unwrap();
    assert!(world.deployment().elections > 2, "elections: {}", world.deployment().elections);
    assert!(world.vm_starts() > 50, "{}", world.vm_starts());
    no_node_overbooked(world.store());
}

#[test]
fn a_failed_device_lowers_allocatable_and_placement_follows() {
    let mut store = fixtures::two_node_cluster();
    store.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 16)].into());
    let mut world = World::new(6, store, Timing::default(), EventLog::new(None));
    world
        .schedule_at(Millis::seconds(1), Event::DeviceFailure { node: "gpu-1".into(), resource: H100.into(), units: 1 })
        .unwrap();
    // 8 units fit nowhere now (gpu-1 has 7 healthy, gpu-2 4): the VM waits at the gate.
    world.schedule_at(Millis::seconds(2), Event::CreateVm(template_vm("tenant-a", "big", "h100", 8).into())).unwrap();
    world.schedule_at(Millis::seconds(3), Event::CreateVm(template_vm("tenant-a", "seven", "h100", 7).into())).unwrap();
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert_eq!(world.store().node("gpu-1").unwrap().devices[H100], 7);
    let waiting = world.store().vmi_pods("tenant-a", "big").next().unwrap().waiting.clone().unwrap();
    assert_eq!(waiting.reason, "NeverFits", "no node has 8 healthy units any more");
    assert_eq!(world.store().vmi("tenant-a", "seven").unwrap().phase, VmiPhase::Running);
}

#[test]
fn with_every_fault_on_the_run_is_the_same_for_the_same_seed_and_keeps_its_invariants() {
    let all = Faults {
        conflict_rate: 0.1,
        watch_lag_max: Some(Millis::seconds(2)),
        controller_crash_every: Some(Millis::seconds(3_600)),
        node_loss_every: Some(Millis::seconds(4 * 3_600)),
        node_loss_duration: Some(Millis::seconds(900)),
        device_failure_every: Some(Millis::seconds(6 * 3_600)),
    };
    let run = |seed| {
        let mut world = busy_world(seed, all.clone());
        world.run(Millis::seconds(24 * 3_600), 2_000_000).unwrap();
        no_node_overbooked(world.store());
        for pod in world.store().pods().filter(|p| p.scheduling_gates.is_empty() && p.node_name.is_some()) {
            let pinned = pod.required_terms().and_then(gpuclaim_engine::scheduling::is_pinned_to);
            if gpuclaim_engine::model::is_claims_pod(pod) {
                assert_eq!(pinned, pod.node_name.as_deref(), "a claims pod runs where it was pinned");
            }
        }
        assert!(world.vm_starts() > 100, "{}", world.vm_starts());
        (world.log_hash(), world.stats().clone())
    };
    let (first, stats) = run(11);
    assert!(stats.refusals.contains_key("WriteRefused:Conflict"), "{stats:?}");
    assert_eq!(run(11).0, first, "same seed, every fault on: the same log");
}
