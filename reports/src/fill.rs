//! The fill protocol (Weng et al., *Beware of Fragmentation*, ATC'23, §6): the scenario's VMs arrive one by one in a
//! seeded shuffled order and never leave, resampled with replacement until the units they request reach a multiple
//! of the cluster's (`protocol: {fill: {resampleTo: 1.3}}`); a run records the share of the cluster's units
//! allocated at every 1% of arrived demand. Where the curve leaves the diagonal, VMs wait although the cluster has
//! room in total: how a placement policy packs shows there.
//!
//! The population is the scenario's timed VMs (a trace's tasks: each arrives once, in shuffled order, before any is
//! drawn again) and its workloads (each weighted by the arrivals it would make over the scenario's duration); once
//! the timed VMs are used, draws are with replacement, by weight. A VM keeps its tenant, `gpus`, CPU, memory and disk;
//! its lifetime and deletion go (it never leaves); a workload's held claim becomes a claim template of the same
//! class and count (a held claim is one object, and a draw orders a new one). Units are the devices of the resources
//! the classes publish: a VM requests the units of its claim templates and one per raw device name; the cluster
//! has the units its node groups publish at the start.

use std::collections::BTreeSet;

use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::rng::actor_stream;
use rand::RngExt;
use serde_json::{Map, Value};

use gpuclaim_scenarios::scenario::scenario_from_tree;

/// When the first VM arrives: the controller's first leader is elected and has published capacity well before.
pub const FILL_START: Millis = Millis(60_000);
/// Time between arrivals: long enough that each VM is placed (or set waiting) before the next arrives, so the
/// queue's order is the arrivals' and each sample sees every earlier VM decided (a placement takes a few seconds of
/// virtual time: the VMI, the launcher, the gate, a pass).
pub const FILL_SPACING: Millis = Millis(10_000);
/// The most VMs a fill may make (a bound, not a target: openb at 1.3× makes about 10,000).
pub const FILL_ARRIVALS_MAX: usize = 1_000_000;
/// The weight of one timed VM in a draw, in whole numbers (a workload's is its expected arrivals times this).
const WEIGHT_PER_VM: u64 = 1_000;

/// One kind of VM the fill draws: its scenario entry (without time or name) and the units it requests.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    pub template: Map<String, Value>,
    pub units: u64,
    /// How often it is drawn, relative to the others.
    pub weight: u64,
    /// A timed VM (arrives once before draws with replacement begin).
    pub timed: bool,
}

/// What a fill run samples: the cluster's units, and per point x = 1, 2, … % of them arrived, when to sample
/// (just before the next VM arrives) and the units arrived by then.
#[derive(Clone, Debug, PartialEq)]
pub struct FillPlan {
    pub cluster_units: u64,
    /// (sample time, units arrived by then), for x = 1..=points.len().
    pub points: Vec<(Millis, u64)>,
    /// VMs that arrive.
    pub arrivals: usize,
}

/// The kinds of VM the scenario tree holds, with the units each requests, or why it cannot be filled.
pub fn arrivals_of(tree: &Value) -> Result<Vec<Arrival>, String> {
    let scenario = scenario_from_tree(tree)?;
    let hours = scenario.duration.0.0 as f64 / 3_600_000.0;
    let mut arrivals = Vec::new();
    let vms = tree["vms"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (vm, entry) in scenario.vms.iter().zip(vms) {
        let units = units_of(&vm.gpu_entries(), &vm.name)?;
        let mut template = entry.as_object().cloned().unwrap_or_default();
        for key in ["at", "name", "lifetime", "stopAt"] {
            template.remove(key);
        }
        arrivals.push(Arrival { template, units, weight: WEIGHT_PER_VM, timed: true });
    }
    let workloads = tree["workloads"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (workload, entry) in scenario.workloads.iter().zip(workloads) {
        let mut gpus = workload.gpus.clone();
        if let Some(held) = &workload.held_claim {
            gpus.push(gpuclaim_engine::references::GpuEntry::ClaimTemplate(held.clone()));
        }
        let units = units_of(&gpus, &workload.prefix)?;
        let mut template = Map::new();
        template.insert("tenant".into(), entry["tenant"].clone());
        template.insert("gpus".into(), serde_json::to_value(&gpus).map_err(|e| e.to_string())?);
        for key in ["cpu", "memory", "wffcVolume"] {
            if let Some(value) = entry.get(key) {
                template.insert(key.into(), value.clone());
            }
        }
        let weight = (workload.arrivals_per_hour * hours * WEIGHT_PER_VM as f64).round() as u64;
        if weight > 0 {
            arrivals.push(Arrival { template, units, weight, timed: false });
        }
    }
    if arrivals.iter().all(|a| a.units == 0) {
        return Err("the fill needs VMs that request GPU units: the scenario's VMs and workloads request none".into());
    }
    Ok(arrivals)
}

/// Units a VM's `gpus` request: a claim template's count, one per raw device name. A held claim is refused: it is
/// one object, and a fill orders the same VM many times.
fn units_of(gpus: &[gpuclaim_engine::references::GpuEntry], vm: &str) -> Result<u64, String> {
    use gpuclaim_engine::references::GpuEntry;
    let mut units = 0;
    for entry in gpus {
        units += match entry {
            GpuEntry::ClaimTemplate(template) => u64::from(template.count),
            GpuEntry::Name(_) => 1,
            GpuEntry::Claim(claim) => {
                return Err(format!(
                    "VM {vm:?} uses held claim {claim:?}: a fill orders each VM many times, so it needs claim templates"
                ));
            }
        };
    }
    Ok(units)
}

/// The units the cluster's node groups publish for the classes' resources.
pub fn cluster_units(tree: &Value) -> u64 {
    let resources: BTreeSet<&str> = tree["cluster"]["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|class| class["resourceName"].as_str())
        .collect();
    let groups = tree["cluster"]["nodes"].as_array().into_iter().flatten();
    groups
        .map(|group| {
            let per_node: u64 = resources.iter().filter_map(|r| group["devices"][*r].as_u64()).sum();
            group["count"].as_u64().unwrap_or(0) * per_node
        })
        .sum()
}

/// The variant's scenario as a fill on `seed`: its VMs and workloads replaced by the arrivals (named `fill-<i>`,
/// [`FILL_SPACING`] apart from [`FILL_START`]), its duration set to the last arrival plus one spacing; and where to
/// sample it.
pub fn fill_scenario(tree: &Value, seed: u64, resample_to: f64) -> Result<(Value, FillPlan), String> {
    let arrivals = arrivals_of(tree)?;
    let cluster = cluster_units(tree);
    if cluster == 0 {
        return Err("the cluster has no units of any class to fill".to_owned());
    }
    let target = (resample_to * cluster as f64).ceil() as u64;
    let order = draw(&arrivals, seed, target)?;
    let mut vms = Vec::with_capacity(order.len());
    let mut arrived = Vec::with_capacity(order.len());
    let mut total = 0;
    for (i, &kind) in order.iter().enumerate() {
        let mut vm = arrivals[kind].template.clone();
        vm.insert("at".into(), Value::String(format!("{}ms", at(i).0)));
        vm.insert("name".into(), Value::String(format!("fill-{i}")));
        vms.push(Value::Object(vm));
        total += arrivals[kind].units;
        arrived.push(total);
    }
    let points_max = (resample_to * 100.0).floor() as u64;
    let mut points = Vec::new();
    let mut next = 0;
    for x in 1..=points_max {
        let needed = (x * cluster).div_ceil(100);
        while next < arrived.len() && arrived[next] < needed {
            next += 1;
        }
        let Some(units) = arrived.get(next) else { break };
        points.push((Millis(at(next).0 + FILL_SPACING.0 - 1), *units));
    }
    let mut scenario = tree.clone();
    scenario["vms"] = Value::Array(vms);
    scenario["workloads"] = Value::Array(Vec::new());
    scenario["duration"] = Value::String(format!("{}ms", at(order.len()).0));
    Ok((scenario, FillPlan { cluster_units: cluster, points, arrivals: order.len() }))
}

/// When arrival `i` comes.
fn at(i: usize) -> Millis {
    Millis(FILL_START.0 + i as u64 * FILL_SPACING.0)
}

/// The kinds of the arrivals, in order: the timed VMs once each in a shuffled order, then draws with replacement by
/// weight, until the units requested reach `target` (a prefix, when the timed VMs alone reach it).
fn draw(arrivals: &[Arrival], seed: u64, target: u64) -> Result<Vec<usize>, String> {
    let mut rng = actor_stream(seed, "fill");
    let mut timed: Vec<usize> = (0..arrivals.len()).filter(|&i| arrivals[i].timed).collect();
    // Fisher–Yates, from the last place down.
    for i in (1..timed.len()).rev() {
        let j = rng.random_range(0..=i);
        timed.swap(i, j);
    }
    let mut order = Vec::new();
    let mut units = 0;
    for kind in timed {
        if units >= target {
            return Ok(order);
        }
        order.push(kind);
        units += arrivals[kind].units;
    }
    let total_weight: u64 = arrivals.iter().map(|a| a.weight).sum();
    while units < target {
        if order.len() >= FILL_ARRIVALS_MAX {
            return Err(format!("more than {FILL_ARRIVALS_MAX} VMs would arrive before the fill's target"));
        }
        let mut pick = rng.random_range(0..total_weight);
        let kind = arrivals.iter().position(|a| {
            if pick < a.weight {
                return true;
            }
            pick -= a.weight;
            false
        });
        let kind = kind.expect("a pick below the total weight falls on some kind");
        order.push(kind);
        units += arrivals[kind].units;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> Value {
        serde_json::json!({
            "name": "f",
            "duration": "1h",
            "cluster": {
                "classes": [{"name": "h100", "resourceName": "nvidia.com/H100", "mode": "Passthrough", "maxCount": 8}],
                "nodes": [{"prefix": "gpu-", "count": 2, "cpu": "64", "memory": "512Gi",
                           "devices": {"nvidia.com/H100": 8}}],
                "tenants": [{"name": "t"}]
            },
            "vms": [
                {"at": "0s", "tenant": "t", "name": "a", "cpu": "4", "memory": "16Gi", "lifetime": "1h",
                 "gpus": [{"claimTemplate": {"class": "h100", "count": 4}}]},
                {"at": "5s", "tenant": "t", "name": "b", "cpu": "4", "memory": "16Gi", "stopAt": "1h",
                 "gpus": [{"claimTemplate": {"class": "h100", "count": 1}}]},
                {"at": "9s", "tenant": "t", "name": "c", "cpu": "4", "memory": "16Gi", "gpus": []}
            ]
        })
    }

    #[test]
    fn timed_vms_arrive_once_shuffled_then_are_drawn_again_until_the_target() {
        let (scenario, plan) = fill_scenario(&tree(), 1, 1.3).unwrap();
        assert_eq!(plan.cluster_units, 16);
        let vms = scenario["vms"].as_array().unwrap();
        let units: Vec<u64> = vms
            .iter()
            .map(|vm| {
                vm["gpus"].as_array().unwrap().iter().map(|g| g["claimTemplate"]["count"].as_u64().unwrap()).sum()
            })
            .collect();
        // The three VMs once each (5 units), then draws until 21 units (1.3 × 16, rounded up).
        let mut first: Vec<u64> = units[..3].to_vec();
        first.sort();
        assert_eq!(first, [0, 1, 4]);
        assert!(units.iter().sum::<u64>() >= 21);
        assert!(units[..units.len() - 1].iter().sum::<u64>() < 21, "no arrival past the target");
        assert_eq!(vms[0]["at"], "60000ms");
        assert_eq!(vms[1]["at"], "70000ms");
        assert_eq!(vms[1]["name"], "fill-1");
        assert!(vms.iter().all(|vm| vm.get("lifetime").is_none() && vm.get("stopAt").is_none()), "never leave");
        assert_eq!(scenario["duration"], format!("{}ms", 60_000 + 10_000 * vms.len()));
        // One point per 1% up to 130%: each when the first VM whose units reach it has had its spacing.
        assert_eq!(plan.points.len(), 130);
        let (when, arrived) = plan.points[99];
        assert!(arrived >= 16);
        assert_eq!((when.0 + 1 - 60_000) % 10_000, 0);
        // The same seed draws the same fill; another seed another order.
        assert_eq!(fill_scenario(&tree(), 1, 1.3).unwrap().0, scenario);
        let orders: BTreeSet<Vec<u64>> = (1..8)
            .map(|seed| {
                let (s, _) = fill_scenario(&tree(), seed, 1.3).unwrap();
                s["vms"].as_array().unwrap().iter().map(|vm| vm["gpus"].as_array().unwrap().len() as u64).collect()
            })
            .collect();
        assert!(orders.len() > 1, "seeds shuffle differently");
    }

    #[test]
    fn held_claims_cannot_be_filled() {
        let mut tree = tree();
        tree["vms"][0]["gpus"] = serde_json::json!([{"claim": "mine"}]);
        tree["cluster"]["tenants"][0]["claims"] = serde_json::json!([{"name": "mine", "class": "h100", "count": 1}]);
        let error = fill_scenario(&tree, 1, 1.3).unwrap_err();
        assert_eq!(
            error,
            r#"VM "a" uses held claim "mine": a fill orders each VM many times, so it needs claim templates"#
        );
    }
}
