//! `scenario shrink` on a scenario built to fail: the two-update pin under a busy, faulty cluster. What comes out
//! is smaller, still fails the same way, and is the same every time.

use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::run_checked;
use gpuclaim_scenarios::check::shrink::{Failure, shrink};
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::log::EventLog;

const NOISY: &str = r#"
name: noisy
seed: 1
duration: 6h
cluster:
  classes:
  - {name: h100, resourceName: nvidia.com/GH100_H100_SXM5_80GB, mode: Passthrough, maxCount: 8}
  nodes:
  - {prefix: gpu-a-, count: 4, cpu: "64", memory: 512Gi, devices: {nvidia.com/GH100_H100_SXM5_80GB: 8}}
  - {prefix: gpu-b-, count: 3, cpu: "64", memory: 512Gi, devices: {nvidia.com/GH100_H100_SXM5_80GB: 8}}
  tenants:
  - {name: tenant-a, budgets: {h100: 32}}
  - {name: tenant-b, budgets: {h100: 32}}
workloads:
- {tenant: tenant-b, prefix: bg, arrivalsPerHour: 20, meanLifetime: 30m, cpu: "4", memory: 16Gi,
   gpus: [{name: nvidia.com/GH100_H100_SXM5_80GB}]}
vms:
- {at: 1h, tenant: tenant-a, name: db, cpu: "4", memory: 16Gi, gpus: [{claimTemplate: {class: h100, count: 2}}]}
- {at: 10m, tenant: tenant-b, name: other, cpu: "4", memory: 16Gi, gpus: [{name: nvidia.com/GH100_H100_SXM5_80GB}]}
events:
- {at: 20m, cordon: gpu-b-0002}
- {at: 30m, uncordon: gpu-b-0002}
- {at: 2h, webhookReplicas: 1}
faults: {watchLagMax: 2s}
expect:
- {says: the VM runs, by: 2h, vm: tenant-a/db, phase: Running}
"#;

fn shrunk() -> gpuclaim_scenarios::check::shrink::Shrunk {
    let value = gpuclaim_engine::yaml::from_str(NOISY).unwrap();
    let two_update = Variant::named("two-update-pin").unwrap();
    let mut steps = 0;
    let shrunk = shrink(&value, 1, two_update, "shipped", None, &mut |_| steps += 1).unwrap();
    assert_eq!(steps, shrunk.runs - 1, "a progress line per run after the first");
    shrunk
}

#[test]
fn a_failing_scenario_comes_out_smaller_and_still_failing_the_same_way() {
    let shrunk = shrunk();
    assert_eq!(shrunk.failure, Failure::Invariant("UngatedWithoutPin".into()));
    let scenario = &shrunk.scenario;
    assert!(scenario.get("workloads").is_none() && scenario.get("events").is_none(), "{scenario:#}");
    assert_eq!(scenario["vms"].as_array().unwrap().len(), 1, "only the VM whose pod is placed: {scenario:#}");
    assert_eq!(scenario["cluster"]["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(scenario["cluster"]["nodes"][0]["count"], 1);
    assert_eq!(scenario["duration"], "1h1m100ms", "a minute past the failure");
    // It reads, and replays the failure on its own.
    let parsed = parse_scenario(&scenario.to_string()).unwrap();
    let run =
        run_checked(&parsed, Variant::named("two-update-pin").unwrap(), "shipped", 1, EventLog::new(None)).unwrap();
    assert_eq!(run.stop.unwrap().violation.invariant.to_string(), "UngatedWithoutPin");
}

#[test]
fn the_same_input_shrinks_to_the_same_scenario() {
    assert_eq!(shrunk().scenario, shrunk().scenario);
}

#[test]
fn a_passing_scenario_has_nothing_to_shrink() {
    let value = gpuclaim_engine::yaml::from_str(NOISY).unwrap();
    let error = shrink(&value, 1, Variant::SHIPPED, "shipped", None, &mut |_| {}).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the scenario passes with seed 1 under variant shipped: there is no failure to shrink"
    );
}
