//! The trace importers (docs/import.md) on small CSVs written here: every column, bad rows with their exact error,
//! `gpu_spec` alternatives, shared GPUs, tasks without GPUs, window, time scale and sampling, node lists; the
//! emitted YAML parses and the world it builds runs. Then the public traces in `../shared/traces/` when present
//! (skipped, with a note, when absent): they are never copied into the repository.

#[path = "../../tests/support/traces.rs"]
mod traces;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuclaim_scenarios::import::nodes::{NodesOptions, import_nodes};
use gpuclaim_scenarios::import::openb::{OpenbOptions, SharedGpus, import_openb};
use gpuclaim_scenarios::import::{ImportError, Imported, VmOut};
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::World;

fn write(dir: impl AsRef<Path>, name: &str, text: &str) -> PathBuf {
    let path = dir.as_ref().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n-cpu,32000,262144,0,
n-t4-0,96000,393216,4,T4
n-t4-1,96000,393216,4,T4
n-t4-2,96000,393216,4,T4
n-t4-3,96000,393216,4,T4
n-t4-4,96000,393216,4,T4
n-t4-5,96000,393216,4,T4
n-v16-0,64000,262144,8,V100M16
n-v32-0,96000,786432,8,V100M32
";

const HEADER: &str =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

/// One task of each kind, every column given.
const PODS: &str = "p-whole,12000,16384,1,1000,,LS,Running,0,3600,0
p-multi,32000,65536,8,1000,V100M32|V100M16|V100M32,BE,Succeeded,60,660,61
p-shared,6000,12288,1,460,,LS,Running,120,,120
p-t4,4000,8192,2,1000,T4,Guaranteed,Pending,180,300,
p-cpu,2000,4096,0,0,,Burstable,Failed,240,840,250
";

fn import(nodes: &str, pods: &str, tune: impl FnOnce(&mut OpenbOptions)) -> Result<Imported, ImportError> {
    let dir = tempfile::tempdir().unwrap();
    let mut options = OpenbOptions::new(write(&dir, "nodes.csv", nodes), write(&dir, "pods.csv", pods));
    tune(&mut options);
    import_openb(&options)
}

fn vm(
    at_ms: u64,
    tenant: &str,
    name: &str,
    cpu: u64,
    memory: u64,
    lifetime: Option<u64>,
    gpu: Option<(&str, u32)>,
) -> VmOut {
    VmOut {
        at_ms,
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        cpu_millis: cpu,
        memory_mib: memory,
        lifetime_ms: lifetime,
        gpu: gpu.map(|(class, count)| (class.to_owned(), count)),
    }
}

/// Parses the emitted YAML, builds the world and runs it until `until`: the VMs that started.
fn run(imported: &Imported, until: Millis) -> (World, u64) {
    let yaml = imported.to_yaml();
    let scenario = parse_scenario(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(scenario.vms.len(), imported.vms.len());
    assert_eq!(scenario.duration.0, Millis(imported.duration_ms));
    let mut world = scenario.build(1, EventLog::new(None)).unwrap_or_else(|e| panic!("{e}"));
    world.run(until, 50_000_000).unwrap();
    let starts = world.vm_starts();
    (world, starts)
}

/// A class as compared: name, resource, mode, maxCount, node selector.
type ClassRow<'a> = (&'a str, &'a str, &'a str, u32, Vec<(&'a str, &'a str)>);

#[test]
fn every_column_maps_onto_vms_classes_and_nodes() {
    let imported = import(NODES, &format!("{HEADER}{PODS}"), |_| {}).unwrap();
    assert_eq!(
        imported.vms,
        vec![
            vm(0, "openb-ls", "p-whole", 12_000, 16_384, Some(3_600_000), Some(("gpu-any", 1))),
            vm(60_000, "openb-be", "p-multi", 32_000, 65_536, Some(600_000), Some(("gpu-v100m16.v100m32", 8))),
            vm(120_000, "openb-ls", "p-shared", 6_000, 12_288, None, Some(("vgpu-half-any", 1))),
            vm(180_000, "openb-guaranteed", "p-t4", 4_000, 8_192, Some(120_000), Some(("gpu-t4", 2))),
            vm(240_000, "openb-burstable", "p-cpu", 2_000, 4_096, Some(600_000), None),
        ]
    );
    // The last trace time (3600 s) and an hour for the stragglers.
    assert_eq!(imported.duration_ms, 7_200_000);
    let classes: Vec<ClassRow> = imported
        .classes
        .iter()
        .map(|c| {
            let selector = c.node_selector.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            (c.name.as_str(), c.resource_name.as_str(), c.mode, c.max_count, selector)
        })
        .collect();
    assert_eq!(
        classes,
        vec![
            ("gpu-any", "nvidia.com/passthrough-gpu", "Passthrough", 1, vec![]),
            ("gpu-t4", "nvidia.com/passthrough-gpu", "Passthrough", 2, vec![("nvidia.com/gpu.product", "T4")]),
            (
                "gpu-v100m16.v100m32",
                "nvidia.com/passthrough-gpu",
                "Passthrough",
                8,
                vec![("sets.gpu.cozystack.io/v100m16.v100m32", "true")]
            ),
            ("vgpu-half-any", "nvidia.com/vgpu-half", "VGPU", 1, vec![]),
        ]
    );
    // Shared GPU-time: (7200 - 120) s of half a GPU; whole: 3600 + 8 x 600 + 2 x 120. Of eight GPU nodes, the T4s
    // (the first model with more than one node) give two to the half-GPU profile; each V100 stays passthrough.
    let groups: Vec<(&str, u32, BTreeMap<String, u64>)> =
        imported.nodes.iter().map(|g| (g.prefix.as_str(), g.count, g.devices.clone())).collect();
    let devices = |resource: &str, units: u64| BTreeMap::from([(resource.to_owned(), units)]);
    assert_eq!(
        groups,
        vec![
            ("cpu-g0-", 1, BTreeMap::new()),
            ("t4-pt-g1-", 4, devices("nvidia.com/passthrough-gpu", 4)),
            ("t4-vgpu-half-g2-", 2, devices("nvidia.com/vgpu-half", 8)),
            ("v100m16-pt-g3-", 1, devices("nvidia.com/passthrough-gpu", 8)),
            ("v100m32-pt-g4-", 1, devices("nvidia.com/passthrough-gpu", 8)),
        ]
    );
    let labels = |n: usize| imported.nodes[n].labels.clone();
    assert_eq!(labels(0), BTreeMap::new());
    assert_eq!(labels(1).get("nvidia.com/gpu.product").map(String::as_str), Some("T4"));
    assert_eq!(labels(1).get("sets.gpu.cozystack.io/v100m16.v100m32"), None, "a T4 is not in the V100 set");
    assert_eq!(labels(2).get("nvidia.com/gpu.workload.config").map(String::as_str), Some("vm-vgpu"));
    assert_eq!(labels(2).get("nvidia.com/vgpu.config").map(String::as_str), Some("half"));
    for v100 in [3, 4] {
        assert_eq!(labels(v100).get("sets.gpu.cozystack.io/v100m16.v100m32").map(String::as_str), Some("true"));
        assert_eq!(labels(v100).get("nvidia.com/gpu.workload.config").map(String::as_str), Some("vm-passthrough"));
    }
    let tenants: Vec<(&str, bool)> = imported.tenants.iter().map(|t| (t.name.as_str(), t.vgpu_entitled)).collect();
    assert_eq!(
        tenants,
        vec![("openb-be", true), ("openb-burstable", true), ("openb-guaranteed", true), ("openb-ls", true)]
    );
    let summary = &imported.summary;
    assert_eq!(summary["rows"], 5);
    assert_eq!(summary["vms_whole_gpus"], 3);
    assert_eq!(summary["vms_vgpu_half"], 1);
    assert_eq!(summary["vms_cpu_only"], 1);
    assert_eq!(summary["vms_running_to_the_end"], 1);
    assert_eq!(summary["trace_phase_pending"], 1);

    // The scenario parses, builds, and every VM starts (the V100 set on either V100 node, the T4 task on a T4).
    // Checked at 250 s, while the T4 task (180 s to about 315 s) still holds its claim.
    let (mut world, _) = run(&imported, Millis::seconds(250));
    let store = world.store();
    let claim_node = |namespace: &str| {
        store.claims().find(|c| c.namespace == namespace).and_then(|c| c.node.clone()).unwrap_or_default()
    };
    assert!(claim_node("openb-be").starts_with("v100"), "{}", claim_node("openb-be"));
    assert!(claim_node("openb-guaranteed").starts_with("t4-pt-"), "{}", claim_node("openb-guaranteed"));
    assert!(claim_node("openb-ls").starts_with("t4-"), "{}", claim_node("openb-ls"));
    world.run(Millis::seconds(600), 1_000_000).unwrap();
    assert_eq!(world.vm_starts(), 5);

    // The JSON form is the same scenario, its header kept as notes: the same event log.
    let json = imported.to_json();
    let from_json = parse_scenario(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(from_json.notes, imported.header);
    let from_yaml = parse_scenario(&imported.to_yaml()).unwrap();
    assert_eq!(
        format!("{:?}", (&from_json.cluster, &from_json.vms)),
        format!("{:?}", (&from_yaml.cluster, &from_yaml.vms))
    );
    let hash = |scenario: &gpuclaim_scenarios::scenario::Scenario| {
        let mut world = scenario.build(1, EventLog::new(None)).unwrap();
        world.run(Millis::seconds(600), 1_000_000).unwrap();
        world.log_hash()
    };
    assert_eq!(hash(&from_json), hash(&from_yaml));
}

#[test]
fn bad_rows_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = write(&dir, "nodes.csv", NODES);
    let check = |name: &str, pods: &str, expected: &str| {
        let pods = write(&dir, name, &format!("{HEADER}{pods}"));
        let error = import_openb(&OpenbOptions::new(&nodes, &pods)).unwrap_err().to_string();
        assert_eq!(error, format!("{}{expected}", pods.display()), "{name}");
    };
    let good = "p1,1000,1024,1,1000,,LS,Running,0,10,0\n";
    check(
        "number.csv",
        &format!("{good}p2,lots,1024,1,1000,,LS,Running,0,10,0\n"),
        r#":3: column 2 (cpu_milli): "lots" is not a whole number"#,
    );
    check(
        "negative.csv",
        "p1,1000,-5,1,1000,,LS,Running,0,10,0\n",
        r#":2: column 3 (memory_mib): "-5" is not a whole number"#,
    );
    check("fields.csv", &format!("{good}p2,1000,1024\n"), ":3: 3 fields where the header has 11");
    check(
        "share.csv",
        "p1,1000,1024,2,460,,LS,Running,0,10,0\n",
        ":2: column 5 (gpu_milli): gpu_milli 460 with 2 GPUs: only a one-GPU task may share its GPU",
    );
    check(
        "milli.csv",
        "p1,1000,1024,1,1500,,LS,Running,0,10,0\n",
        ":2: column 5 (gpu_milli): gpu_milli 1500 is more than one GPU (1000)",
    );
    check(
        "zero.csv",
        "p1,1000,1024,2,0,,LS,Running,0,10,0\n",
        ":2: column 5 (gpu_milli): gpu_milli 0 for a task with 2 GPUs (whole GPUs are 1000)",
    );
    check(
        "cpu.csv",
        "p1,1000,1024,0,500,,LS,Running,0,10,0\n",
        ":2: column 5 (gpu_milli): gpu_milli 500 for a task without GPUs",
    );
    check("spec.csv", "p1,1000,1024,1,1000,|,LS,Running,0,10,0\n", r#":2: column 6 (gpu_spec): "|" names no model"#);
    check(
        "order.csv",
        "p1,1000,1024,1,1000,,LS,Running,10,5,0\n",
        ":2: column 10 (deletion_time): deletion_time 5 is before creation_time 10",
    );
    check(
        "time.csv",
        "p1,1000,1024,1,1000,,LS,Running,,5,0\n",
        r#":2: column 9 (creation_time): "" is not a whole number"#,
    );
    check(
        "scheduled.csv",
        "p1,1000,1024,1,1000,,LS,Running,0,5,soon\n",
        r#":2: column 11 (scheduled_time): "soon" is not a whole number"#,
    );
    check("twice.csv", &format!("{good}{good}"), r#":3: column 1 (name): task "p1" again (first on line 2)"#);
    check("name.csv", ",1000,1024,1,1000,,LS,Running,0,10,0\n", ":2: column 1 (name): empty task name");

    let pods = write(&dir, "columns.csv", "name,cpu_milli,memory_mib,gpu_milli\np1,1,1,0\n");
    let error = import_openb(&OpenbOptions::new(&nodes, &pods)).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}: the header has no column \"num_gpu\" (it has: name, cpu_milli, memory_mib, gpu_milli)",
            pods.display()
        )
    );
    let pods = write(&dir, "good.csv", &format!("{HEADER}{good}"));
    let bad_nodes = write(&dir, "bad-nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,2,\n");
    let error = import_openb(&OpenbOptions::new(&bad_nodes, &pods)).unwrap_err().to_string();
    assert_eq!(error, format!("{}:2: column 5 (model): empty model for a node with 2 GPUs", bad_nodes.display()));
    let twice = write(&dir, "twice-nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,\nn0,1,1,0,\n");
    let error = import_openb(&OpenbOptions::new(&twice, &pods)).unwrap_err().to_string();
    assert_eq!(error, format!("{}:3: column 1 (sn): node \"n0\" again (first on line 2)", twice.display()));
    let missing = dir.path().join("absent.csv");
    match import_openb(&OpenbOptions::new(&missing, &pods)).unwrap_err() {
        ImportError::File { file, reason } => {
            assert_eq!(file, missing.display().to_string());
            assert!(reason.contains("No such file"), "{reason}");
        }
        other => panic!("{other}"),
    }
    let mut options = OpenbOptions::new(&nodes, &pods);
    options.time_scale = 0.0;
    assert_eq!(import_openb(&options).unwrap_err().to_string(), "--time-scale 0 must be a positive number");
    options.time_scale = 1.0;
    options.sample = 0;
    assert_eq!(import_openb(&options).unwrap_err().to_string(), "--sample must be at least 1");
}

#[test]
fn shared_gpus_take_the_smallest_profile_that_fits_or_a_whole_gpu() {
    // Enough nodes for each profile to get some of its own: 32 one-GPU nodes.
    let nodes: String = std::iter::once("sn,cpu_milli,memory_mib,gpu,model\n".to_owned())
        .chain((0..32).map(|n| format!("n{n},64000,262144,1,A10\n")))
        .collect();
    let pods = format!(
        "{HEADER}s-eighth,1000,1024,1,110,,LS,Running,0,,\ns-quarter,1000,1024,1,250,,LS,Running,0,,\n\
         s-half,1000,1024,1,460,,LS,Running,0,,\ns-full,1000,1024,1,810,,LS,Running,0,,\nw,1000,1024,1,1000,,LS,Running,0,,\n"
    );
    let imported = import(&nodes, &pods, |_| {}).unwrap();
    let classes: Vec<&str> = imported.vms.iter().map(|vm| vm.gpu.as_ref().unwrap().0.as_str()).collect();
    assert_eq!(classes, ["vgpu-eighth-any", "vgpu-quarter-any", "vgpu-half-any", "vgpu-full-any", "gpu-any"]);
    // GPU-time asked: 1/8, 1/4, 1/2, 1 and 1 (of 2.875): of 32 nodes, 1.39 eighth, 2.78 quarter, 5.57 half, 11.13
    // full and 11.13 passthrough, as near as whole nodes go.
    let pools: BTreeMap<&str, u32> = imported
        .nodes
        .iter()
        .map(|g| (g.labels.get("nvidia.com/vgpu.config").map_or("passthrough", String::as_str), g.count))
        .fold(BTreeMap::new(), |mut pools, (pool, count)| {
            *pools.entry(pool).or_insert(0) += count;
            pools
        });
    assert_eq!(pools, BTreeMap::from([("eighth", 1), ("full", 11), ("half", 6), ("passthrough", 11), ("quarter", 3)]));
    let (_, starts) = run(&imported, Millis::seconds(300));
    assert_eq!(starts, 5);

    // A profile too small a share to get one node is folded into the next larger one.
    let few: String = std::iter::once("sn,cpu_milli,memory_mib,gpu,model\n".to_owned())
        .chain((0..2).map(|n| format!("n{n},64000,262144,1,A10\n")))
        .collect();
    let imported = import(&few, &pods, |_| {}).unwrap();
    let classes: Vec<&str> = imported.vms.iter().map(|vm| vm.gpu.as_ref().unwrap().0.as_str()).collect();
    assert_eq!(classes, ["vgpu-full-any", "vgpu-full-any", "vgpu-full-any", "vgpu-full-any", "gpu-any"]);
    assert_eq!(imported.summary["profile_eighth_folded_into_larger"], 1);
    assert_eq!(imported.summary["profile_half_folded_into_larger"], 1);

    // As whole GPUs: every GPU task takes one passthrough GPU; no vGPU class, tenants not entitled.
    let imported = import(&nodes, &pods, |o| o.shared = SharedGpus::Whole).unwrap();
    assert!(imported.vms.iter().all(|vm| vm.gpu == Some(("gpu-any".to_owned(), 1))));
    assert_eq!(imported.classes.len(), 1);
    assert_eq!(imported.summary["vms_shared_as_whole_gpu"], 4);
    assert!(imported.tenants.iter().all(|t| !t.vgpu_entitled));
    assert!(imported.nodes.iter().all(|g| g.devices.contains_key("nvidia.com/passthrough-gpu")));
}

#[test]
fn window_time_scale_and_sampling() {
    let pods = format!(
        "{HEADER}t0,1000,1024,0,0,,LS,Running,0,120,0\nt1,1000,1024,0,0,,LS,Running,100,500,100\n\
         t2,1000,1024,1,1000,,LS,Running,200,260,200\nt3,1000,1024,0,0,,BE,Running,300,,300\n\
         t4,1000,1024,0,0,,LS,Running,400,450,400\n"
    );
    let imported = import(NODES, &pods, |o| {
        o.window = (150, Some(350));
        o.time_scale = 0.5;
    })
    .unwrap();
    let timed: Vec<(&str, u64, Option<u64>)> =
        imported.vms.iter().map(|vm| (vm.name.as_str(), vm.at_ms, vm.lifetime_ms)).collect();
    // t0 ended before the window, t4 came after it; t1 was running at its start and starts at 0 for what is left.
    assert_eq!(timed, [("t1", 0, Some(175_000)), ("t2", 25_000, Some(30_000)), ("t3", 75_000, None)]);
    assert_eq!(imported.duration_ms, 100_000);
    assert_eq!(imported.summary["dropped_by_window"], 2);
    assert_eq!(imported.summary["running_at_window_start"], 1);
    let (_, starts) = run(&imported, Millis(imported.duration_ms));
    assert_eq!(starts, 3);

    // Deletions ignored (the FGD simulator's reading): every task runs to the end.
    let imported = import(NODES, &pods, |o| o.ignore_deletion = true).unwrap();
    assert!(imported.vms.iter().all(|vm| vm.lifetime_ms.is_none()));
    assert_eq!(imported.summary["vms_running_to_the_end"], 5);
    assert_eq!(imported.duration_ms, 4_000_000, "the last creation (400 s) and an hour");

    // Every second row, from the first.
    let imported = import(NODES, &pods, |o| o.sample = 2).unwrap();
    let names: Vec<&str> = imported.vms.iter().map(|vm| vm.name.as_str()).collect();
    assert_eq!(names, ["t0", "t2", "t4"]);
    assert_eq!(imported.summary["dropped_by_sample"], 2);

    // Seeded: by name, the same for the same seed, about one in k.
    let many: String = std::iter::once(HEADER.to_owned())
        .chain((0..400).map(|n| format!("m{n},1000,1024,0,0,,LS,Running,{n},,\n")))
        .collect();
    let seeded = |seed: u64| -> Vec<String> {
        let imported = import(NODES, &many, |o| {
            o.sample = 4;
            o.sample_seed = Some(seed);
        })
        .unwrap();
        imported.vms.iter().map(|vm| vm.name.clone()).collect()
    };
    let first = seeded(7);
    assert_eq!(first, seeded(7));
    assert_ne!(first, seeded(8));
    assert!((60..140).contains(&first.len()), "{}", first.len());
}

#[test]
fn without_times_tasks_arrive_a_second_apart_and_run_to_the_end() {
    // multigpu50's columns: no gpu_spec, qos, phase or times.
    let pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,1000\nb,1000,1024,2,1000\nc,1000,1024,0,0\n";
    let imported = import(NODES, pods, |_| {}).unwrap();
    let timed: Vec<(&str, &str, u64, Option<u64>)> =
        imported.vms.iter().map(|vm| (vm.name.as_str(), vm.tenant.as_str(), vm.at_ms, vm.lifetime_ms)).collect();
    assert_eq!(timed, [("a", "openb", 0, None), ("b", "openb", 1_000, None), ("c", "openb", 2_000, None)]);
    assert_eq!(imported.duration_ms, 3_602_000);
    let (_, starts) = run(&imported, Millis::seconds(120));
    assert_eq!(starts, 3);
}

#[test]
fn node_lists_alone_give_a_cluster_shape() {
    let dir = tempfile::tempdir().unwrap();
    let spot = write(
        &dir,
        "node_info_df.csv",
        "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,1,128,0\nA100-SXM4-80GB,8,128,1\nA10,1,128,2\nA10,1,126,3\n",
    );
    let imported = import_nodes(&NodesOptions::new(&spot)).unwrap();
    let groups: Vec<(&str, u32, u64, u64)> =
        imported.nodes.iter().map(|g| (g.prefix.as_str(), g.count, g.cpu_millis, g.memory_mib)).collect();
    // No memory in the list: 8 GiB per CPU.
    assert_eq!(
        groups,
        [
            ("a10-pt-g0-", 2, 128_000, 1_048_576),
            ("a100-sxm4-80gb-pt-g1-", 1, 128_000, 1_048_576),
            ("a10-pt-g2-", 1, 126_000, 1_032_192)
        ]
    );
    let classes: Vec<(&str, u32)> = imported.classes.iter().map(|c| (c.name.as_str(), c.max_count)).collect();
    assert_eq!(classes, [("gpu-any", 8), ("gpu-a10", 1), ("gpu-a100-sxm4-80gb", 8)]);
    assert_eq!(imported.summary["gpus"], 11);
    let (world, starts) = run(&imported, Millis::seconds(60));
    assert_eq!(starts, 0);
    assert_eq!(world.store().nodes().count(), 4);

    // The openb list, told by its header; a list of neither kind is named.
    let openb = write(&dir, "openb.csv", NODES);
    assert_eq!(import_nodes(&NodesOptions::new(&openb)).unwrap().summary["nodes"], 9);
    let other = write(&dir, "other.csv", "host,gpus\nh,1\n");
    let error = import_nodes(&NodesOptions::new(&other)).unwrap_err().to_string();
    assert!(error.starts_with(&format!("{}: not a node list", other.display())), "{error}");
    let bad = write(&dir, "bad.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\nA10,one,128,0\n");
    let error = import_nodes(&NodesOptions::new(&bad)).unwrap_err().to_string();
    assert_eq!(error, format!("{}:2: column 2 (gpu_capacity_num): \"one\" is not a whole number", bad.display()));
}

/// `../shared/traces/` from the workspace, if it holds what these tests read.
fn traces() -> Option<PathBuf> {
    traces::traces("openb-2023/openb_pod_list_default.csv")
}

#[test]
fn the_openb_default_trace_replays_to_the_end() {
    let Some(traces) = traces() else { return };
    let openb = traces.join("openb-2023");
    let options =
        OpenbOptions::new(openb.join("openb_node_list_all_node.csv"), openb.join("openb_pod_list_default.csv"));
    let imported = import_openb(&options).unwrap();
    assert_eq!(imported.vms.len(), 8_152);
    assert_eq!(imported.summary["nodes_cpu_only"] + imported.summary["nodes_passthrough"], 1_337);
    let (world, starts) = run(&imported, Millis(imported.duration_ms));
    assert_eq!(world.now(), Millis(imported.duration_ms), "the replay ran to its end");
    assert!(starts > 7_000, "{starts} of 8152 VMs started");
}

#[test]
fn the_other_public_lists_import_and_build() {
    let Some(traces) = traces() else { return };
    let openb = traces.join("openb-2023");
    for pods in ["openb_pod_list_gpuspec33.csv", "openb_pod_list_multigpu50.csv"] {
        let options = OpenbOptions::new(openb.join("openb_node_list_gpu_node.csv"), openb.join(pods));
        let imported = import_openb(&options).unwrap();
        let (_, starts) = run(&imported, Millis::seconds(600));
        assert!(starts > 0, "{pods}");
        if pods.contains("gpuspec33") {
            assert!(imported.classes.iter().any(|c| c.name == "gpu-v100m16.v100m32"));
        }
    }
    let imported = import_nodes(&NodesOptions::new(traces.join("spot-gpu-2026/node_info_df.csv"))).unwrap();
    assert_eq!(imported.summary["nodes"], 4_278);
    assert_eq!(imported.classes.len(), 7, "six models and any");
    run(&imported, Millis::seconds(1));
}
