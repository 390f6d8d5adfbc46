//! Studies over imported clusters (docs/whatif.md): node counts by label selector (totals split over the matching
//! groups in proportion to their counts), a compaction over a selector against an SLO on one class's VMs, a base
//! imported in memory from openb CSVs named relative to the study file, and the example study on the public trace
//! when `../shared/traces/` is present (skipped, saying so, when it is not: traces are never committed).

#[path = "../../tests/support/traces.rs"]
mod traces;

use std::path::{Path, PathBuf};

use gpuclaim_reports::run_study;
use gpuclaim_reports::study::{Study, load_study};
use serde_json::Value;

/// Two models over four node groups (a model's nodes split between passthrough and vGPU, as the importer does),
/// and three timed VMs of one unit of model A, deleted after an hour whether they ran or not.
const SCENARIO: &str = r#"
name: models
duration: 30m
cluster:
  classes:
  - {name: gpu-a, resourceName: example.com/gpu, mode: Passthrough, maxCount: 1, nodeSelector: {model: A}}
  - {name: gpu-b, resourceName: example.com/gpu, mode: Passthrough, maxCount: 1, nodeSelector: {model: B}}
  nodes:
  - {prefix: a-pt-, count: 6, cpu: "16", memory: 64Gi, devices: {example.com/gpu: 1}, labels: {model: A, mode: pt}}
  - {prefix: b-pt-, count: 2, cpu: "16", memory: 64Gi, devices: {example.com/gpu: 1}, labels: {model: B, mode: pt}}
  - {prefix: a-vgpu-, count: 3, cpu: "16", memory: 64Gi, devices: {example.com/vgpu: 2}, labels: {model: A, mode: vgpu}}
  - {prefix: a-old-, count: 1, cpu: "16", memory: 64Gi, devices: {example.com/gpu: 1}, labels: {model: A, mode: pt}}
  tenants:
  - {name: team}
vms:
- {at: 0s, tenant: team, name: a1, cpu: "1", memory: 1Gi, gpus: [{claimTemplate: {class: gpu-a, count: 1}}], stopAt: 1h}
- {at: 0s, tenant: team, name: a2, cpu: "1", memory: 1Gi, gpus: [{claimTemplate: {class: gpu-a, count: 1}}], stopAt: 1h}
- {at: 0s, tenant: team, name: a3, cpu: "1", memory: 1Gi, gpus: [{claimTemplate: {class: gpu-a, count: 1}}], stopAt: 1h}
- {at: 0s, tenant: team, name: b1, cpu: "1", memory: 1Gi, gpus: [{claimTemplate: {class: gpu-b, count: 1}}], stopAt: 1h}
"#;

/// A fresh directory under the target directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("import-study-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn study_over_scenario(name: &str, body: &str) -> (PathBuf, Result<Study, String>) {
    let dir = scratch(name);
    std::fs::write(dir.join("models.yaml"), SCENARIO).unwrap();
    let path = dir.join("study.yaml");
    std::fs::write(&path, format!("name: {name}\nscenario: models.yaml\n{body}")).unwrap();
    let study = load_study(&path).map_err(|e| e.to_string());
    (path, study)
}

/// Node counts of the variant's groups, by prefix, in file order.
fn counts(study: &Study, variant: &str) -> Vec<(String, u64)> {
    let variant = study.variants.iter().find(|v| v.name == variant).unwrap();
    variant.scenario["cluster"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["prefix"].as_str().unwrap().to_owned(), g["count"].as_u64().unwrap()))
        .collect()
}

fn named(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(p, n)| (p.to_string(), *n)).collect()
}

#[test]
fn a_selector_sets_the_total_of_the_matching_groups_in_proportion() {
    let (_, study) = study_over_scenario(
        "selector",
        r#"variants:
- name: base
- name: a-5
  nodes: {"model=A": 5}
- name: a-plus-5
  nodes: {"model=A": "+5"}
- name: a-minus-8
  nodes: {"model=A": "-8"}
- name: a-half
  nodes: {"model=A": "x0.5"}
- name: a-pt-zero
  nodes: {"model=A,mode=pt": 0}
- name: b-plus-1
  nodes: {"model=B": "+1"}
"#,
    );
    let study = study.unwrap();
    assert_eq!(counts(&study, "base"), named(&[("a-pt-", 6), ("b-pt-", 2), ("a-vgpu-", 3), ("a-old-", 1)]));
    // 5 over 6:3:1 → 3, 1.5, 0.5: floors 3, 1, 0; the one left goes to the larger remainder, tie to the earlier.
    assert_eq!(counts(&study, "a-5"), named(&[("a-pt-", 3), ("b-pt-", 2), ("a-vgpu-", 2), ("a-old-", 0)]));
    // 15 over 6:3:1 → 9, 4.5, 1.5: floors 9, 4, 1; one left, remainders tie, the earlier group wins.
    assert_eq!(counts(&study, "a-plus-5"), named(&[("a-pt-", 9), ("b-pt-", 2), ("a-vgpu-", 5), ("a-old-", 1)]));
    // 2 over 6:3:1 → 1.2, 0.6, 0.2: floors 1, 0, 0; the one left to the largest remainder (0.6).
    assert_eq!(counts(&study, "a-minus-8"), named(&[("a-pt-", 1), ("b-pt-", 2), ("a-vgpu-", 1), ("a-old-", 0)]));
    // x0.5 of 10 → 5, split as `a-5`.
    assert_eq!(counts(&study, "a-half"), counts(&study, "a-5"));
    assert_eq!(counts(&study, "a-pt-zero"), named(&[("a-pt-", 0), ("b-pt-", 2), ("a-vgpu-", 3), ("a-old-", 0)]));
    assert_eq!(counts(&study, "b-plus-1"), named(&[("a-pt-", 6), ("b-pt-", 3), ("a-vgpu-", 3), ("a-old-", 1)]));
}

#[test]
fn bad_selectors_name_the_file_the_field_and_the_reason() {
    let cases = [
        (r#"{"model=C": 4}"#, r#"field variants[0].nodes.model=C: no node group has the labels "model=C""#),
        (
            r#"{"model=A,mode": 4}"#,
            r#"field variants[0].nodes.model=A,mode: "model=A,mode" is not a label selector: "mode" is not <label>=<value>"#,
        ),
        (r#"{"=A": 4}"#, r#"field variants[0].nodes.=A: "=A" is not a label selector: "=A" has no label name"#),
        (
            r#"{"model=A,model=B": 4}"#,
            r#"field variants[0].nodes.model=A,model=B: "model=A,model=B" is not a label selector: label "model" is named twice"#,
        ),
        (r#"{"model=A": "-11"}"#, r#"field variants[0].nodes.model=A: 10 nodes "-11" is below zero"#),
        (r#"{"model=A": "x-1"}"#, r#"field variants[0].nodes.model=A: "x-1": the factor must be a finite number ≥ 0"#),
        (
            r#"{"model=A": "ten"}"#,
            r#"field variants[0].nodes.model=A: "ten" is not a node count, "+n", "-n" or "x<factor>""#,
        ),
        (
            r#"{"gpu-a": 4}"#,
            "field variants[0].nodes.gpu-a: 3 node groups have example.com/gpu (a-pt-, b-pt-, a-old-): select them by \
             label (`\"<label>=<value>\": n`) or set their counts with `set`",
        ),
    ];
    for (index, (nodes, expected)) in cases.iter().enumerate() {
        let (path, study) =
            study_over_scenario(&format!("bad-{index}"), &format!("variants: [{{name: v, nodes: {nodes}}}]\n"));
        assert_eq!(study.unwrap_err(), format!("{}: {expected}", path.display()), "case {index}");
    }
    let slo = "slo: {metric: startWaitP90, max: 60s}\nvariants: [{name: v}]\n";
    let compactions = [
        (
            "{class: \"model=A\", min: 0, max: 4}",
            "field compaction.class: \"model=A\" is a label selector: write it as `nodes: \"model=A\"`",
        ),
        (
            "{nodes: gpu-a, min: 0, max: 4}",
            "field compaction.nodes: \"gpu-a\" is not a label selector (k=v,...): a class goes in `class:`",
        ),
        ("{nodes: \"model=C\", min: 0, max: 4}", "field compaction.nodes: no node group has the labels \"model=C\""),
        ("{class: gpu-a, nodes: \"model=A\", min: 0, max: 4}", "field compaction: `class` or `nodes`, not both"),
        ("{min: 0, max: 4}", "field compaction: what to count: `class: <class>` or `nodes: <label selector>`"),
    ];
    for (index, (compaction, expected)) in compactions.iter().enumerate() {
        let (path, study) =
            study_over_scenario(&format!("bad-compaction-{index}"), &format!("{slo}compaction: {compaction}\n"));
        assert_eq!(study.unwrap_err(), format!("{}: {expected}", path.display()), "compaction case {index}");
    }
    let slos = [
        (
            "{metric: startWaitP90, max: 60s, classes: [gpu-c]}",
            "field slo.classes: the scenario has no class \"gpu-c\"",
        ),
        (
            "{metric: gateWaitP90, max: 60s, classes: [gpu-a]}",
            "field slo.classes: only start waits are measured per class (startWaitP50|P90|P99)",
        ),
    ];
    for (index, (slo, expected)) in slos.iter().enumerate() {
        let (path, study) =
            study_over_scenario(&format!("bad-slo-{index}"), &format!("slo: {slo}\nvariants: [{{name: v}}]\n"));
        assert_eq!(study.unwrap_err(), format!("{}: {expected}", path.display()), "slo case {index}");
    }
}

#[test]
fn compaction_over_a_selector_meets_an_slo_on_one_class_of_vms() {
    // Three VMs need a unit of model A at once; model B's VM is elsewhere and does not count.
    let (_, study) = study_over_scenario(
        "compaction",
        r#"seeds: 2
samples: 3
slo: {metric: startWaitP90, max: 60s, classes: [gpu-a]}
variants:
- name: base
- name: one-a
  nodes: {"model=A": 1}
compaction: {nodes: "model=A", variant: base, min: 0, max: 10}
"#,
    );
    let study = study.unwrap();
    let report = run_study(&study, 2, &|_| {}).unwrap();
    let compaction = report.compaction.as_ref().unwrap();
    assert_eq!(compaction.target, "model=A");
    // At 3 the selector gives the passthrough groups 2 + 0 nodes and vGPU 1 (6:3:1 of 3 → 1.8, 0.9, 0.3): two units
    // for gpu-a. At 4: 2.4, 1.2, 0.4 → 3, 1, 0 (the tie of 0.4 to the earlier group): three units.
    assert_eq!(compaction.nodes, Some(4), "{compaction:#?}");
    let one = report.variants.iter().find(|v| v.name == "one-a").unwrap();
    // One A node (passthrough): one VM starts, two wait until the run ends (30 min), counted with that wait.
    assert_eq!(one.metrics["start_wait_count:gpu-a"].p50, 3.0);
    assert_eq!(one.metrics["vms_not_started:gpu-a"].p50, 2.0);
    assert_eq!(one.metrics["start_wait_max_s:gpu-a"].p50, 1_800.0);
    assert!(!one.slo.as_ref().unwrap().met);
    let base = &report.variants[0];
    assert_eq!(base.metrics["vms_not_started:gpu-a"].max, 0.0);
    assert!(base.metrics["start_wait_p90_s:gpu-a"].max < 60.0, "{:?}", base.metrics["start_wait_p90_s:gpu-a"]);
    assert!(base.slo.as_ref().unwrap().met);
}

const NODES_CSV: &str = "sn,cpu_milli,memory_mib,gpu,model
n-cpu,32000,262144,0,
n-t4-0,96000,393216,4,T4
n-t4-1,96000,393216,4,T4
n-t4-2,96000,393216,4,T4
n-v32-0,96000,786432,8,V100M32
";

const PODS_CSV: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p-whole,12000,16384,1,1000,,LS,Running,0,3600,0
p-t4,4000,8192,2,1000,T4,Guaranteed,Running,180,900,180
p-t4-late,4000,8192,1,1000,T4,BE,Running,90000,93600,90000
p-cpu,2000,4096,0,0,,Burstable,Running,240,840,250
";

/// A study in `<dir>/studies/` naming CSVs in `<dir>/traces/`: paths resolve from the study file, not from where
/// the test runs.
fn import_study(name: &str, import: &str, rest: &str) -> (PathBuf, Result<Study, String>) {
    let dir = scratch(name);
    std::fs::create_dir_all(dir.join("studies")).unwrap();
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    std::fs::write(dir.join("traces/nodes.csv"), NODES_CSV).unwrap();
    std::fs::write(dir.join("traces/pods.csv"), PODS_CSV).unwrap();
    let path = dir.join("studies/study.yaml");
    std::fs::write(&path, format!("name: {name}\n{import}\n{rest}")).unwrap();
    let study = load_study(&path).map_err(|e| e.to_string());
    (path, study)
}

#[test]
fn a_study_imports_its_base_in_memory_relative_to_the_study_file() {
    let (path, study) = import_study(
        "import",
        "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv, window: 0..1d, timeScale: 0.5}}",
        "variants:\n- name: base\n- name: one-t4\n  nodes: {\"nvidia.com/gpu.product=T4\": 1}\n",
    );
    let study = study.unwrap();
    let base = &study.variants[0].scenario;
    let vms: Vec<&str> = base["vms"].as_array().unwrap().iter().map(|vm| vm["name"].as_str().unwrap()).collect();
    assert_eq!(vms, ["p-whole", "p-t4", "p-cpu"], "the window keeps the first day's tasks");
    // A day at half time is 12 h of virtual time.
    assert_eq!(study.duration.0, 12 * 3_600_000);
    let t4_total = |variant: usize| -> u64 {
        study.variants[variant].scenario["cluster"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["labels"]["nvidia.com/gpu.product"] == "T4")
            .map(|g| g["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!((t4_total(0), t4_total(1)), (3, 1));
    // Nothing is written next to the study or the traces.
    let mut files: Vec<String> = std::fs::read_dir(path.parent().unwrap().parent().unwrap().join("traces"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["nodes.csv", "pods.csv"]);
    let report = run_study(&study, 1, &|_| {}).unwrap();
    assert_eq!(report.runs.len(), 8);
}

#[test]
fn bad_imports_name_the_file_the_field_and_the_reason() {
    let variants = "variants: [{name: v}]\n";
    let cases = [
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/missing.csv}}",
            "field import.openb.pods: no file {dir}/studies/../traces/missing.csv (relative to the study file)",
        ),
        (
            "import: {openb: {nodes: nodes.csv, pods: ../traces/pods.csv}}",
            "field import.openb.nodes: no file {dir}/studies/nodes.csv (relative to the study file)",
        ),
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv, window: 2d..1d}}",
            "field import.openb.window: \"2d..1d\": the end must come after the start",
        ),
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv, timeScale: 0}}",
            "field import.openb.timeScale: 0 is not a positive number",
        ),
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv, sample: 0}}",
            "field import.openb.sample: keep one task in at least 1",
        ),
        (
            "import: {openb: {nodes: ../traces/pods.csv, pods: ../traces/pods.csv}}",
            "field import.openb: {dir}/studies/../traces/pods.csv: the header has no column \"sn\"",
        ),
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv, colour: blue}}",
            "field import.openb.colour: unknown field `colour`, expected one of `nodes`, `pods`, `timeScale`, `window`, \
             `sample`, `sampleSeed`, `sharedAsWhole`, `ignoreDeletion`",
        ),
        (
            "scenario: x.yaml\nimport: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv}}",
            "field import: the base is a scenario or an import, not both: drop one",
        ),
        ("description: none", "field scenario: no base: name a scenario file (`scenario:`) or a trace (`import:`)"),
        (
            "import: {openb: {nodes: ../traces/nodes.csv, pods: ../traces/pods.csv}}\nslo: {metric: startWaitP90, max: 60s, classes: [gpu-a100]}",
            "field slo.classes: the scenario has no class \"gpu-a100\"",
        ),
    ];
    for (index, (import, expected)) in cases.iter().enumerate() {
        let (path, study) = import_study(&format!("bad-import-{index}"), import, variants);
        let dir = path.parent().unwrap().parent().unwrap().display().to_string();
        let error = study.unwrap_err();
        let expected = format!("{}: {}", path.display(), expected.replace("{dir}", &dir));
        assert!(error.starts_with(&expected), "case {index}:\n{error}\nwanted:\n{expected}");
    }
}

/// `../shared/traces/` from the workspace, if it holds what these tests read.
fn traces() -> Option<PathBuf> {
    traces::traces("openb-2023/openb_pod_list_gpuspec33.csv")
}

#[test]
fn the_openb_example_study_loads_and_a_slice_of_it_runs() {
    if traces().is_none() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/openb-g3.yaml");
    let mut study = load_study(&path).unwrap();
    let g3_nodes = |scenario: &Value| -> u64 {
        scenario["cluster"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["labels"]["nvidia.com/gpu.product"] == "G3")
            .map(|g| g["count"].as_u64().unwrap())
            .sum()
    };
    let names: Vec<&str> = study.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["as-is", "g3-2", "g3-1"]);
    let g3: Vec<u64> = study.variants.iter().map(|v| g3_nodes(&v.scenario)).collect();
    assert_eq!(g3, [39, 2, 1]);
    assert_eq!(study.compaction.as_ref().unwrap().target, "nvidia.com/gpu.product=G3");
    // A slice: the first 1.5 days of the window (the first G3 task arrives 0.9 days in), one seed, no compaction.
    for variant in &mut study.variants {
        variant.scenario["duration"] = Value::from("36h");
    }
    study.duration = gpuclaim_sim::kernel::Millis(36 * 3_600_000);
    study.seeds = vec![1];
    study.samples = 2;
    study.compaction = None;
    let report = run_study(&study, 2, &|_| {}).unwrap();
    for variant in &report.variants {
        assert!(variant.metrics["start_wait_count:gpu-g3"].p50 >= 1.0, "{}", variant.name);
        assert!(variant.metrics["vm_starts"].p50 > 100.0, "{}", variant.name);
    }
}

#[test]
fn an_slo_over_classes_refuses_a_class_that_workloads_order() {
    let dir = scratch("slo-workloads");
    let scenario = SCENARIO.replace(
        "vms:\n",
        "workloads:\n- {tenant: team, prefix: train, arrivalsPerHour: 2, meanLifetime: 10m, cpu: \"1\", memory: 1Gi,\n   \
         gpus: [{claimTemplate: {class: gpu-b, count: 1}}]}\nvms:\n",
    );
    std::fs::write(dir.join("models.yaml"), scenario).unwrap();
    let path = dir.join("study.yaml");
    let study = |classes: &str| {
        std::fs::write(
            &path,
            format!(
                "name: s\nscenario: models.yaml\nslo: {{metric: startWaitP90, max: 60s, classes: {classes}}}\nvariants: [{{name: v}}]\n"
            ),
        )
        .unwrap();
        load_study(&path).map_err(|e| e.to_string())
    };
    assert_eq!(
        study("[gpu-a, gpu-b]").unwrap_err(),
        format!(
            "{}: field slo.classes: workload \"train\" orders class \"gpu-b\": per-class start waits count timed VMs \
             (`vms:`) only",
            path.display()
        )
    );
    let loaded = study("[gpu-a]").unwrap();
    assert_eq!(loaded.slo.unwrap().scalar(), "start_wait_p90_s:gpu-a");
}
