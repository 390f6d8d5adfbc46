//! A scenario builds the world it describes: its VMs stopped at their trace times, its faults, its workloads' held
//! claims and windows; and bad values are refused naming the field.

use std::collections::BTreeMap;

use gpuclaim_engine::model::VmiPhase;
use gpuclaim_scenarios::scenario::{Scenario, parse_scenario};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::World;

#[test]
fn a_vm_stopped_at_its_trace_time_goes_whether_it_ran_or_not() {
    let text = "name: s\nduration: 2h\ncluster:\n  classes: [{name: h100, resourceName: nvidia.com/H100, mode: Passthrough, maxCount: 8}]\n  \
                nodes: [{prefix: n, count: 1, cpu: '64', memory: 256Gi, devices: {nvidia.com/H100: 8}}]\n\
                vms:\n- {at: 1s, tenant: t, name: big, gpus: [{claimTemplate: {class: h100, count: 8}}], cpu: '4', memory: 8Gi, stopAt: 1h}\n\
                - {at: 2s, tenant: t, name: waits, gpus: [{claimTemplate: {class: h100, count: 8}}], cpu: '4', memory: 8Gi, stopAt: 30m}\n";
    let scenario = parse_scenario(text).unwrap();
    let mut world = scenario.build(1, EventLog::new(None)).unwrap();
    world.run(Millis::seconds(1_700), 100_000).unwrap();
    assert_eq!(world.store().vmi("t", "waits").unwrap().phase, VmiPhase::Scheduling, "gated behind big");
    world.run(Millis::seconds(1_900), 100_000).unwrap();
    assert!(world.store().vmi("t", "waits").is_none(), "deleted at 30 min without ever running");
    assert!(world.store().claim("t", "waits-gpu-0").is_none());
    world.run(Millis::seconds(3_700), 100_000).unwrap();
    assert!(world.store().vmi("t", "big").is_none(), "stopped at 1 h");
    assert_eq!(world.vm_starts(), 1);
    let bad = parse_scenario(&text.replace("stopAt: 30m", "stopAt: 1s")).unwrap();
    let error = bad.build(1, EventLog::new(None)).err().unwrap();
    assert_eq!(error.to_string(), "field vms[1].stopAt: is before `at`");
}

#[test]
fn a_scenario_switches_faults_on_and_bad_rates_are_named() {
    let text = "name: f\nduration: 1h\ncluster: {classes: [], nodes: [{prefix: n, count: 2, cpu: '8', memory: 8Gi}]}\n\
                faults: {conflictRate: 0.1, watchLagMax: 2s, nodeLossEvery: 20m, nodeLossDuration: 5m}\n";
    let scenario = parse_scenario(text).unwrap();
    let mut world = scenario.build(1, EventLog::new(None)).unwrap();
    world.run(scenario.duration.0, 100_000).unwrap();
    let bad = parse_scenario(&text.replace("0.1", "1.5")).unwrap().build(1, EventLog::new(None)).err().unwrap();
    assert_eq!(bad.to_string(), "field faults.conflictRate: must be a probability in [0, 1]");
    let bad = parse_scenario(&text.replace("20m", "0s")).unwrap().build(1, EventLog::new(None)).err().unwrap();
    assert_eq!(bad.to_string(), "field faults.nodeLossEvery: must be at least 1s");
}

/// A 3-hour scenario of two nodes with `units` of one GPU class and a tenant `team` whose one workload of 1-CPU VMs
/// is `workload` (its rate, lifetime, window and GPUs), built at seed 1.
fn team_world(units: u32, workload: &str) -> (Scenario, World) {
    let text = format!(
        "name: team\nduration: 3h\ncluster:\n  classes: [{{name: gpu, resourceName: example.com/gpu, mode: Passthrough, \
         maxCount: 1}}]\n  nodes: [{{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: {{example.com/gpu: \
         {units}}}}}]\n  tenants: [{{name: team}}]\nworkloads:\n- {{tenant: team, prefix: vm, cpu: '1', memory: 1Gi, \
         {workload}}}\n"
    );
    let scenario = parse_scenario(&text).unwrap();
    let world = scenario.build(1, EventLog::new(None)).unwrap();
    (scenario, world)
}

#[test]
fn the_first_leader_publishes_capacity_so_held_claims_can_be_ordered_before_any_claim_moves() {
    let workload = "arrivalsPerHour: 2, meanLifetime: 30m, heldClaim: {class: gpu, count: 1}";
    let (scenario, mut world) = team_world(5, workload);
    world.run(scenario.duration.0, 1_000_000).unwrap();
    assert!(world.vm_starts() > 0, "orders went through");
    assert_eq!(world.stats().refusals.get("OrderRefused:NoCapacity"), None, "{:?}", world.stats().refusals);
}

#[test]
fn a_workload_with_a_window_creates_vms_only_within_it() {
    let workload =
        "arrivalsPerHour: 60, meanLifetime: 1m, from: 1h, until: 2h, gpus: [{claimTemplate: {class: gpu, count: 1}}]";
    let (scenario, mut world) = team_world(8, workload);
    // When each VMI was first seen.
    let mut seen = BTreeMap::new();
    world
        .run_observed(scenario.duration.0, 1_000_000, |world| {
            let now = world.now();
            for vmi in world.store().vmis() {
                seen.entry(vmi.name.to_string()).or_insert(now);
            }
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    assert!(seen.len() > 30, "about 60 arrive in the hour: {}", seen.len());
    let (first, last) = (seen.values().min().unwrap(), seen.values().max().unwrap());
    assert!(*first >= Millis::seconds(3_600), "none before `from`: {first:?}");
    assert!(*last <= Millis::seconds(7_200), "none after `until`: {last:?}");
    assert_eq!(world.vm_starts(), seen.len() as u64, "each started");
}

#[test]
fn the_twins_dashboard_counts_every_ungate_across_failovers() {
    use gpuclaim_engine::controller::metrics::GateOutcome;
    // Two controller crashes: three processes lead in turn, and the run's readings sum what each measured.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/suite/07-controller-failover.yaml");
    let scenario = parse_scenario(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut world = scenario.build(1, EventLog::new(None)).unwrap();
    world.run(scenario.duration.0, 10_000_000).unwrap();
    assert_eq!(world.deployment().elections, 3);
    // The twin's own record of each ungate (the API server's pod, at the controller's write) is the reference.
    let samples = world.metrics().gate_wait_samples();
    let placed = world.readings().gate_waits_of(Some("h100"), Some(GateOutcome::Ungated));
    assert!(samples.len() > 20, "{}", samples.len());
    assert_eq!(placed.count(), samples.len() as u64);
    let seconds: f64 = samples.iter().map(|ms| *ms as f64 / 1_000.0).sum();
    assert!((placed.sum_seconds() - seconds).abs() < 1e-6, "{} / {seconds}", placed.sum_seconds());
    let held = world.readings().units_bound_seconds;
    assert!(held.keys().all(|(_, class)| class == "h100"), "{held:?}");
    assert!(held[&("tenant-a".into(), "h100".into())] > 0.0 && held[&("tenant-b".into(), "h100".into())] > 0.0);
}
