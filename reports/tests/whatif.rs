//! What-if studies end to end on tiny scenarios: the summary adds up the runs, the charts are real images with
//! labelled axes, the same study gives the same bytes, compaction finds a known answer, bad studies are named.

use std::path::{Path, PathBuf};

use gpuclaim_reports::render::{runs_csv, summary_json, write_report};
use gpuclaim_reports::stats::spread;
use gpuclaim_reports::study::load_study;
use gpuclaim_reports::{Report, run_study};
use gpuclaim_scenarios::scenario::scenario_from_tree;
use gpuclaim_sim::log::EventLog;

/// One class of 8-unit nodes; VMs ordering 2 or 8 units through templates, and held claims of 4.
const SCENARIO: &str = r#"
name: tiny
duration: 2h
cluster:
  classes:
  - {name: gpu, resourceName: example.com/gpu, mode: Passthrough, maxCount: 8}
  nodes:
  - {prefix: gpu-, count: 2, cpu: "64", memory: 512Gi, devices: {example.com/gpu: 8}}
  tenants:
  - {name: team, budgets: {gpu: 12}}
workloads:
- {tenant: team, prefix: small, arrivalsPerHour: 6, meanLifetime: 30m, cpu: "4", memory: 16Gi,
   gpus: [{claimTemplate: {class: gpu, count: 2}}]}
- {tenant: team, prefix: big, arrivalsPerHour: 1, meanLifetime: 40m, cpu: "4", memory: 16Gi,
   gpus: [{claimTemplate: {class: gpu, count: 8}}]}
- {tenant: team, prefix: held, arrivalsPerHour: 2, meanLifetime: 20m, cpu: "4", memory: 16Gi,
   heldClaim: {class: gpu, count: 4}}
"#;

const STUDY: &str = r#"
name: tiny-study
description: Two more nodes, a bigger budget.
scenario: tiny.yaml
warmup: 10m
seeds: 3
samples: 12
slo: {metric: startWaitP90, max: 60s}
variants:
- name: base
- name: plus-2
  nodes: {gpu: "+2"}
- name: budget-x2
  budgets: {team: {gpu: "x2"}}
  workloads: {small: {arrivalsPerHour: "x1.5", meanLifetime: "x2"}}
"#;

/// A fresh directory under the target directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn study_in(dir: &Path, scenario: &str, study: &str) -> PathBuf {
    std::fs::write(dir.join("tiny.yaml"), scenario).unwrap();
    let path = dir.join("study.yaml");
    std::fs::write(&path, study).unwrap();
    path
}

fn report(dir: &Path, jobs: usize) -> Report {
    let study = load_study(&study_in(dir, SCENARIO, STUDY)).unwrap();
    run_study(&study, jobs, &|_| {}).unwrap()
}

#[test]
fn summary_figures_are_the_runs_statistics() {
    let dir = scratch("summary");
    let report = report(&dir, 2);
    assert_eq!(report.runs.len(), 9);
    for variant in &report.variants {
        let runs: Vec<_> = report.runs.iter().filter(|r| r.variant == variant.name).collect();
        assert_eq!(runs.len(), 3);
        for (name, figure) in &variant.metrics {
            let values: Vec<f64> = runs.iter().map(|r| r.scalars.get(name).copied().unwrap_or(0.0)).collect();
            assert_eq!(figure, &spread(&values), "{} {name}", variant.name);
        }
        assert!(variant.metrics["vm_starts"].min > 0.0, "{}: VMs started", variant.name);
    }
    // One run's figures are the world's own: the same scenario and seed, run straight through without a warm-up.
    let text = std::fs::read_to_string(dir.join("study.yaml")).unwrap().replace("warmup: 10m", "warmup: 0s");
    let path = dir.join("no-warmup.yaml");
    std::fs::write(&path, text).unwrap();
    let study = load_study(&path).unwrap();
    let report = run_study(&study, 2, &|_| {}).unwrap();
    let run = &report.runs[0];
    let scenario = scenario_from_tree(&study.variants[0].scenario).unwrap();
    let mut world = scenario.build(run.seed, EventLog::new(None)).unwrap();
    world.set_variant(study.variants[0].engine);
    world.run(scenario.duration.0, 1_000_000_000).unwrap();
    assert_eq!(run.scalars["vm_starts"], world.vm_starts() as f64);
    assert_eq!(run.events, world.events());
    let mut waits = world.metrics().start_wait_samples().to_vec();
    waits.extend(world.waiting_to_start());
    let p = gpuclaim_sim::metrics::percentiles(&mut waits);
    assert_eq!(run.scalars["start_wait_p90_s"], p.p90_ms as f64 / 1_000.0);
    assert_eq!(run.scalars["start_wait_count"], p.count as f64);
    let gate = world.metrics().gate_wait_samples();
    let mean = gate.iter().sum::<u64>() as f64 / gate.len() as f64 / 1_000.0;
    assert!((run.scalars["gate_wait_mean_s"] - mean).abs() < 1e-9);
    let refused: u64 =
        world.stats().refusals.iter().filter(|(k, _)| k.starts_with("OrderRefused:")).map(|(_, n)| n).sum();
    assert_eq!(run.scalars["orders_refused"], refused as f64);
    assert_eq!(run.refusals, world.stats().refusals);
}

#[test]
fn charts_are_svg_and_png_with_labelled_axes() {
    let dir = scratch("charts");
    let report = report(&dir, 2);
    let out = dir.join("out");
    write_report(&report, &out, "gpuclaim whatif study.yaml --out out").unwrap();
    for file in ["report.html", "report.md", "summary.json", "runs.csv"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let names = ["utilisation-gpu", "gate-queue", "start-wait", "gate-wait", "fragmentation-gpu", "crash-loop"];
    for name in names {
        let svg = std::fs::read_to_string(out.join(format!("charts/{name}.svg"))).unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}.svg: {e}"));
        assert_eq!(document.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = document.descendants().filter_map(|n| n.text()).map(str::trim).collect();
        let x_label = if name.ends_with("wait") { "variant" } else { "time (hours)" };
        assert!(texts.contains(&x_label), "{name}: x axis label in {texts:?}");
        assert!(texts.iter().any(|t| ["units in use (%)", "pods at the gate", "seconds", "units", "VMs"].contains(t)));
        assert!(texts.contains(&"base") && texts.contains(&"plus-2"), "{name}: legend or labels name variants");
        let png = std::fs::File::open(out.join(format!("charts/{name}.png"))).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(png)).read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut pixels).unwrap();
        assert_eq!((info.width, info.height), gpuclaim_reports::charts::SIZE);
        assert!(pixels.iter().any(|p| *p < 128), "{name}.png: something is drawn");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("gpuclaim whatif study.yaml --out out"));
    assert!(html.contains("@font-face") && html.contains("scenario: tiny.yaml"), "self-contained, with the study");
}

#[test]
fn the_same_study_twice_gives_the_same_bytes_whatever_the_jobs() {
    let first = report(&scratch("same-1"), 1);
    let second = report(&scratch("same-2"), 3);
    assert_eq!(summary_json(&first), summary_json(&second));
    assert_eq!(runs_csv(&first), runs_csv(&second));
    let a = scratch("same-out-a");
    let b = scratch("same-out-b");
    write_report(&first, &a, "cmd").unwrap();
    write_report(&second, &b, "cmd").unwrap();
    for file in
        ["summary.json", "runs.csv", "report.md", "report.html", "charts/start-wait.svg", "charts/gate-queue.png"]
    {
        assert_eq!(std::fs::read(a.join(file)).unwrap(), std::fs::read(b.join(file)).unwrap(), "{file}");
    }
}

/// Four VMs of a whole node each, created at one minute, running to the end: with n nodes min(n, 4) start in
/// seconds and the rest wait the whole run. The p90 of four waits is the largest, so the SLO holds from 4 nodes on.
const COMPACTION_SCENARIO: &str = r#"
name: four-whole-nodes
duration: 20m
cluster:
  classes: [{name: gpu, resourceName: example.com/gpu, mode: Passthrough, maxCount: 8}]
  nodes: [{prefix: gpu-, count: 1, cpu: "64", memory: 512Gi, devices: {example.com/gpu: 8}}]
  tenants: [{name: team}]
vms:
- {at: 1m, tenant: team, name: a, cpu: "4", memory: 16Gi, gpus: [{claimTemplate: {class: gpu, count: 8}}]}
- {at: 1m, tenant: team, name: b, cpu: "4", memory: 16Gi, gpus: [{claimTemplate: {class: gpu, count: 8}}]}
- {at: 1m, tenant: team, name: c, cpu: "4", memory: 16Gi, gpus: [{claimTemplate: {class: gpu, count: 8}}]}
- {at: 1m, tenant: team, name: d, cpu: "4", memory: 16Gi, gpus: [{claimTemplate: {class: gpu, count: 8}}]}
"#;

#[test]
fn compaction_finds_the_fewest_nodes_meeting_the_slo() {
    let dir = scratch("compaction");
    let study = r#"
name: compaction
scenario: tiny.yaml
seeds: 2
samples: 4
slo: {metric: startWaitP90, max: 60s}
variants: [{name: base}]
compaction: {class: gpu, min: 1, max: 8}
"#;
    let study = load_study(&study_in(&dir, COMPACTION_SCENARIO, study)).unwrap();
    let report = run_study(&study, 2, &|_| {}).unwrap();
    let compaction = report.compaction.as_ref().unwrap();
    assert_eq!(compaction.nodes, Some(4), "{compaction:#?}");
    let tried: Vec<u32> = compaction.probes.iter().map(|p| p.nodes).collect();
    assert_eq!(tried, [2, 3, 4, 8], "bisection from the top");
    for probe in &compaction.probes {
        assert_eq!(probe.verdict.met, probe.nodes >= 4, "{probe:?}");
    }
    assert!(!report.variants[0].slo.as_ref().unwrap().met, "one node misses it");
    let out = dir.join("out");
    write_report(&report, &out, "cmd").unwrap();
    assert!(out.join("charts/compaction.svg").is_file());
    assert!(std::fs::read_to_string(out.join("report.md")).unwrap().contains("**4**"));
}

fn error_of(study: &str) -> String {
    let dir = scratch(&format!("bad-{:x}", study.len() * 31 + study.bytes().map(usize::from).sum::<usize>()));
    load_study(&study_in(&dir, SCENARIO, study)).unwrap_err().to_string()
}

#[test]
fn bad_studies_name_the_file_the_field_and_the_reason() {
    let head = "name: bad\nscenario: tiny.yaml\n";
    let cases = [
        (
            format!("{head}variants: [{{name: a, nodes: {{tpu: 4}}}}]"),
            "field variants[0].nodes.tpu: the scenario has no class \"tpu\"",
        ),
        (
            format!("{head}variants: [{{name: a, nodes: {{gpu: \"*4\"}}}}]"),
            "field variants[0].nodes.gpu: \"*4\" is not a node count",
        ),
        (
            format!("{head}variants: [{{name: a, budgets: {{nobody: {{gpu: 4}}}}}}]"),
            "field variants[0].budgets.nobody.gpu: the scenario has no tenant \"nobody\"",
        ),
        (
            format!("{head}variants: [{{name: a, workloads: {{train: {{arrivalsPerHour: 2}}}}}}]"),
            "field variants[0].workloads.train: the scenario has no workload with this prefix",
        ),
        (
            format!("{head}variants: [{{name: a, workloads: {{small: {{meanLifetime: 5x}}}}}}]"),
            "field variants[0]: the scenario it gives: field workloads[0].meanLifetime",
        ),
        (
            format!("{head}variants: [{{name: a, set: {{duration: 1h, colour: blue}}}}]"),
            "field variants[0]: the scenario it gives: field colour: unknown field `colour`",
        ),
        (
            format!("{head}variants: [{{name: a, engine: fast}}]"),
            "field variants[0].engine: unknown engine variant \"fast\"; known: shipped,",
        ),
        (
            format!("{head}variants: [{{name: a, engine: {{gateMigrationTargets: true, fast: true}}}}]"),
            "field variants[0].engine: unknown field `fast`",
        ),
        (format!("{head}variants: [{{name: a}}, {{name: a}}]"), "field variants[1].name: \"a\" is used twice"),
        (format!("{head}variants: []"), "field variants: between 1 and 256 variants"),
        (format!("{head}seeds: 0\nvariants: [{{name: a}}]"), "field seeds: at least one seed"),
        (format!("{head}warmup: 3h\nvariants: [{{name: a}}]"), "field warmup: 10800000 ms is not shorter than the run"),
        (
            format!("{head}variants: [{{name: a}}]\nslo: {{metric: startWaitP42, max: 60s}}"),
            "field slo.metric: unknown variant `startWaitP42`",
        ),
        (
            format!("{head}variants: [{{name: a}}]\ncompaction: {{class: gpu, min: 1, max: 4}}"),
            "field compaction: needs an slo to meet",
        ),
        (
            format!(
                "{head}variants: [{{name: a}}]\nslo: {{metric: startWaitP90, max: 60s}}\ncompaction: {{class: gpu, variant: b, min: 1, max: 4}}"
            ),
            "field compaction.variant: no variant named \"b\"",
        ),
        (
            format!("{head}variants: [{{name: a}}]\nmetrics: [startWait, joy]"),
            "field metrics[1]: unknown variant `joy`",
        ),
        (format!("{head}variants: [{{name: a}}]\nvariant: []"), "unknown field `variant`"),
        ("name: bad\nscenario: missing.yaml\nvariants: [{name: a}]".to_owned(), "failed to read"),
        ("name: [bad\n".to_owned(), "field (study): not valid YAML"),
    ];
    for (study, expected) in cases {
        let error = error_of(&study);
        assert!(error.contains(expected), "{study}\n  gave: {error}\n  want: {expected}");
        assert!(error.contains("study.yaml") || error.contains("missing.yaml"), "names the file: {error}");
    }
}

#[test]
fn overrides_edit_the_scenario_tree_before_it_is_parsed() {
    let dir = scratch("overrides");
    let study = format!("{STUDY}- name: engine-and-set\n  set: {{duration: 1h, cluster: {{claimsEnabled: false}}}}\n");
    let path = study_in(&dir, SCENARIO, &study);
    let study = load_study(&path).unwrap();
    let tree = |name: &str| study.variants.iter().find(|v| v.name == name).unwrap().scenario.clone();
    assert_eq!(tree("plus-2")["cluster"]["nodes"][0]["count"], 4);
    assert_eq!(tree("budget-x2")["cluster"]["tenants"][0]["budgets"]["gpu"], 24);
    assert_eq!(tree("budget-x2")["workloads"][0]["arrivalsPerHour"], 9.0);
    assert_eq!(tree("budget-x2")["workloads"][0]["meanLifetime"], "3600000ms");
    assert_eq!(tree("budget-x2")["workloads"][1], tree("base")["workloads"][1], "other workloads untouched");
    let merged = tree("engine-and-set");
    assert_eq!((merged["duration"].as_str(), merged["cluster"]["claimsEnabled"].as_bool()), (Some("1h"), Some(false)));
    assert_eq!(merged["cluster"]["classes"], tree("base")["cluster"]["classes"], "a deep merge keeps siblings");
    let scenario = scenario_from_tree(&merged).unwrap();
    assert!(!scenario.cluster.claims_enabled);
}

#[test]
fn engine_options_name_a_variant_or_change_the_shipped_rules() {
    let dir = scratch("engine");
    let study = "name: e\nscenario: tiny.yaml\nvariants:\n- name: shipped\n- name: named\n  engine: two-update-pin\n- name: options\n  engine: {gateMigrationTargets: true, noClassTolerations: true}\n";
    let study = load_study(&study_in(&dir, SCENARIO, study)).unwrap();
    let engines: Vec<_> = study.variants.iter().map(|v| v.engine).collect();
    assert_eq!(engines[0], gpuclaim_engine::variant::Variant::SHIPPED);
    assert!(engines[1].two_update_pin && !engines[1].gate_migration_targets);
    assert!(engines[2].gate_migration_targets && engines[2].no_class_tolerations && !engines[2].two_update_pin);
}

#[test]
fn a_run_that_breaks_an_invariant_fails_the_study_naming_it() {
    let dir = scratch("invariant");
    let study = r#"
name: broken-engine
scenario: tiny.yaml
seeds: 1
samples: 4
variants:
- name: two-updates
  engine: two-update-pin
"#;
    let study = load_study(&study_in(&dir, SCENARIO, study)).unwrap();
    let error = run_study(&study, 1, &|_| {}).unwrap_err().to_string();
    assert!(error.contains("two-updates"), "{error}");
    assert!(error.contains("invariant UngatedWithoutPin broken after event "), "{error}");
}
