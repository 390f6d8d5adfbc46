//! The fill protocol (docs/whatif.md, "The fill protocol") and placement policies as variants: on small clusters
//! whose curve is known, and the openb policy study when `../shared/traces/` is present (skipped, saying so, when it
//! is not: traces are never committed).

#[path = "../../tests/support/traces.rs"]
mod traces;

use std::path::{Path, PathBuf};

use gpuclaim_reports::run::RunResult;
use gpuclaim_reports::run_study;
use gpuclaim_reports::study::{Study, load_study};
use serde_json::Value;

/// Two nodes of 4 units and one kind of VM: one unit, a little CPU.
const ONES: &str = r#"
name: ones
duration: 1h
cluster:
  classes:
  - {name: gpu, resourceName: example.com/gpu, mode: Passthrough, maxCount: 8}
  nodes:
  - {prefix: n-, count: 2, cpu: "16", memory: 64Gi, devices: {example.com/gpu: 4}}
  tenants:
  - {name: team}
vms:
- {at: 0s, tenant: team, name: one, cpu: "1", memory: 1Gi, gpus: [{claimTemplate: {class: gpu, count: 1}}]}
"#;

/// Two nodes of 8 units; VMs of 1 unit (three in four arrivals) and of 8 units (one in four), from workloads.
const MIXED: &str = r#"
name: mixed
duration: 1h
cluster:
  classes:
  - {name: gpu, resourceName: example.com/gpu, mode: Passthrough, maxCount: 8}
  nodes:
  - {prefix: n-, count: 2, cpu: "64", memory: 256Gi, devices: {example.com/gpu: 8}}
  tenants:
  - {name: team}
workloads:
- {tenant: team, prefix: small, arrivalsPerHour: 3, meanLifetime: 1h, cpu: "1", memory: 1Gi,
   gpus: [{claimTemplate: {class: gpu, count: 1}}]}
- {tenant: team, prefix: big, arrivalsPerHour: 1, meanLifetime: 1h, cpu: "1", memory: 1Gi,
   gpus: [{claimTemplate: {class: gpu, count: 8}}]}
"#;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fill-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn study(name: &str, scenario: &str, body: &str) -> Result<Study, String> {
    let dir = scratch(name);
    std::fs::write(dir.join("scenario.yaml"), scenario).unwrap();
    let path = dir.join("study.yaml");
    std::fs::write(&path, format!("name: {name}\nscenario: scenario.yaml\n{body}")).unwrap();
    load_study(&path).map_err(|e| e.to_string())
}

fn figure(report: &gpuclaim_reports::Report, variant: &str, name: &str) -> f64 {
    let variant = report.variants.iter().find(|v| v.name == variant).unwrap();
    variant.metrics[name].p50
}

#[test]
fn a_fill_of_one_unit_vms_allocates_every_unit_until_the_cluster_is_full() {
    let study =
        study("ones", ONES, "protocol: {fill: {resampleTo: 1.3}}\nseeds: 1\nvariants: [{name: best-fit}]\n").unwrap();
    let report = run_study(&study, 1, &|_| {}).unwrap();
    let curve = report.variants[0].fill.as_ref().unwrap();
    // 8 units, 11 VMs of one (1.3 × 8, rounded up): each point x is sampled once the VM reaching x% has had its
    // turn; up to 100% every arrived unit is allocated, after it none more.
    assert_eq!(curve.arrived_pct.len(), 130);
    let allocated: Vec<f64> = curve.allocated_p50.iter().map(|share| share * 8.0).collect();
    let expected: Vec<f64> = (1..=130_u64).map(|x| (x * 8).div_ceil(100).min(8) as f64).collect();
    assert_eq!(allocated, expected);
    assert_eq!(figure(&report, "best-fit", "fill_allocated_pct_at_100"), 100.0);
    assert_eq!(figure(&report, "best-fit", "fill_first_short_pct"), 101.0);
    assert_eq!(figure(&report, "best-fit", "fill_arrivals"), 11.0);
    // Three VMs wait at the end, for units the class does not have.
    assert_eq!(figure(&report, "best-fit", "fill_waiting_at_end:NoCapacity"), 3.0);
    // A shard writes each run as JSON and the merge reads it back: the curve comes back exactly.
    let run = &report.runs[0];
    let back: RunResult = serde_json::from_str(&serde_json::to_string(run).unwrap()).unwrap();
    assert_eq!((&back, back.fill.len(), back.fill_waiting.len()), (run, 130, 130));
}

#[test]
fn spread_strands_the_large_vms_sooner_than_best_fit_and_fragmentation_aware() {
    let variants = "variants:\n- {name: best-fit}\n- {name: spread, engine: {placement: Spread}}\n\
                    - {name: fragmentation-aware, engine: {placement: {gpu: FragmentationAware}}}\n";
    let study =
        study("mixed", MIXED, &format!("protocol: {{fill: {{resampleTo: 1.0}}}}\nseeds: 3\n{variants}")).unwrap();
    let placement: Vec<Value> =
        study.variants.iter().map(|v| v.scenario["cluster"]["classes"][0]["placement"].clone()).collect();
    assert_eq!(placement, [Value::Null, Value::from("Spread"), Value::from("FragmentationAware")]);
    let report = run_study(&study, 2, &|_| {}).unwrap();
    let at_100: Vec<f64> = ["best-fit", "spread", "fragmentation-aware"]
        .iter()
        .map(|v| figure(&report, v, "fill_allocated_pct_at_100"))
        .collect();
    let first_short: Vec<f64> = ["best-fit", "spread", "fragmentation-aware"]
        .iter()
        .map(|v| figure(&report, v, "fill_first_short_pct"))
        .collect();
    // Seeds' medians. Spread puts the small VMs on both nodes, so the first 8-unit VM after them finds no node whole
    // (a third of the way in); the others pack the small ones on one node until the second 8-unit VM meets a node
    // the small ones began.
    assert_eq!((at_100, first_short), (vec![81.25, 31.25, 81.25], vec![82.0, 32.0, 82.0]));
    // The same study, the same bytes of summary, whatever the jobs.
    let again = run_study(&study, 1, &|_| {}).unwrap();
    assert_eq!(gpuclaim_reports::render::summary_json(&again), gpuclaim_reports::render::summary_json(&report));
}

#[test]
fn a_fill_made_by_two_shards_merges_into_the_one_process_report() {
    use gpuclaim_reports::shard::{Merged, Shard, merge, run_shard};
    let variants = "variants:\n- {name: best-fit}\n- {name: spread, engine: {placement: Spread}}\n";
    let study =
        study("sharded", MIXED, &format!("protocol: {{fill: {{resampleTo: 1.0}}}}\nseeds: 2\n{variants}")).unwrap();
    let whole = run_study(&study, 1, &|_| {}).unwrap();
    let out = scratch("sharded-out");
    let shards = [Shard { number: 1, count: 2 }, Shard { number: 2, count: 2 }];
    for shard in shards {
        run_shard(&study, &out, 0, shard, 1, &|_| {}).unwrap();
    }
    let dirs: Vec<PathBuf> = shards.iter().map(|shard| shard.dir(&out)).collect();
    let Merged::Report(merged) = merge(&study, &out, &dirs).unwrap() else { panic!("a fill has no compaction round") };
    // Every run's curve came back through its JSON: the same runs, the same summary.
    assert!(merged.runs.iter().all(|run| run.fill.len() == 100), "a curve per run");
    assert_eq!(merged.runs, whole.runs);
    assert_eq!(gpuclaim_reports::render::summary_json(&merged), gpuclaim_reports::render::summary_json(&whole));
}

#[test]
fn a_fill_refuses_what_it_cannot_measure() {
    let bad = |body: &str| study("bad", ONES, &format!("{body}\nvariants: [{{name: a}}]\n")).unwrap_err();
    assert!(
        bad("protocol: {fill: {resampleTo: 0}}")
            .ends_with("field protocol.fill.resampleTo: 0 is not a share of the cluster's units in (0, 4]"),
        "{}",
        bad("protocol: {fill: {resampleTo: 0}}")
    );
    let slo = bad("protocol: {fill: {resampleTo: 1.3}}\nslo: {metric: startWaitP90, max: 60s}");
    assert!(
        slo.ends_with("field protocol.fill: a fill has no start waits to bound: drop `slo` and `compaction`"),
        "{slo}"
    );
    let held = ONES
        .replace("gpus: [{claimTemplate: {class: gpu, count: 1}}]", "gpus: [{claim: mine}]")
        .replace("  - {name: team}", "  - {name: team, claims: [{name: mine, class: gpu, count: 1}]}");
    let error = study("held", &held, "protocol: {fill: {resampleTo: 1.3}}\nvariants: [{name: a}]\n").unwrap_err();
    assert!(
        error.ends_with(
            r#"field variants[0] (protocol.fill): VM "one" uses held claim "mine": a fill orders each VM many times, so it needs claim templates"#
        ),
        "{error}"
    );
    let policy = study("policy", ONES, "variants: [{name: a, engine: {placement: Tidy}}]\n").unwrap_err();
    assert!(
        policy.ends_with(r#"field variants[0].engine.placement: "Tidy" is not a placement policy (BestFit, Spread, FragmentationAware)"#),
        "{policy}"
    );
    let class = study("class", ONES, "variants: [{name: a, engine: {placement: {h100: Spread}}}]\n").unwrap_err();
    assert!(
        class.ends_with("field variants[0].engine.placement.h100: the scenario has no class of this name"),
        "{class}"
    );
}

/// `../shared/traces/` from the workspace, if it holds what these tests read.
fn traces() -> Option<PathBuf> {
    traces::traces("openb-2023/openb_pod_list_default.csv")
}

#[test]
fn the_openb_policy_study_loads_and_a_fifth_of_its_fill_runs() {
    if traces().is_none() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/openb-policies.yaml");
    let mut study = load_study(&path).unwrap();
    let policies: Vec<(&str, Value)> = study
        .variants
        .iter()
        .map(|v| {
            let gpu_any = v.scenario["cluster"]["classes"].as_array().unwrap().iter().find(|c| c["name"] == "gpu-any");
            (v.name.as_str(), gpu_any.unwrap()["placement"].clone())
        })
        .collect();
    assert_eq!(
        policies,
        [
            ("best-fit", Value::from("BestFit")),
            ("spread", Value::from("Spread")),
            ("fragmentation-aware", Value::from("FragmentationAware"))
        ]
    );
    assert_eq!((study.fill, study.seeds.len()), (Some(1.3), 10));
    // A fifth of the fill, one seed: every VM arrived by then is placed under each policy but Spread, which strands
    // an 8-GPU task before.
    study.fill = Some(0.2);
    study.seeds = vec![1];
    let report = run_study(&study, 2, &|_| {}).unwrap();
    for variant in &report.variants {
        assert_eq!(variant.fill.as_ref().unwrap().arrived_pct.len(), 20, "{}", variant.name);
    }
    let first_short: Vec<f64> = ["best-fit", "spread", "fragmentation-aware"]
        .iter()
        .map(|v| figure(&report, v, "fill_first_short_pct"))
        .collect();
    assert_eq!(first_short, [21.0, 12.0, 21.0]);
}
