//! The openb trace (Alibaba cluster-trace-gpu-v2023, Weng et al., ATC'23) as a scenario: its nodes as node groups,
//! its tasks as timed VMs whose claim templates order their GPUs. docs/import.md gives every choice and why.
//!
//! - A task with `num_gpu` = n whole GPUs orders n units of the passthrough class of its `gpu_spec` (`gpu-any`
//!   without one, `gpu-<model>` for one model, `gpu-<m1>.<m2>…` for alternatives).
//! - A task sharing a GPU (`gpu_milli` < 1000) orders one vGPU of the smallest profile that gives it its share
//!   (eighth, quarter, half or full GPU), class `vgpu-<profile>-<set>`; or, with [`SharedGpus::Whole`], one
//!   passthrough GPU.
//! - A task without GPUs is a VM without GPUs.
//! - GPU nodes are split per model between passthrough and the vGPU profiles, in proportion to what the imported
//!   tasks ask of each (GPU-time), as gpu-operator configures a node's mode and profile per node.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::nodes::{Pool, Profile, TraceNode, group_nodes, passthrough_class, read_openb, vgpu_class};
use super::{ImportError, Imported, Table, TenantOut, VmOut, parse_seconds, slug};

/// What a task sharing a GPU becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedGpus {
    /// One vGPU of the smallest profile giving its share.
    Vgpu,
    /// One whole passthrough GPU (the share rounded up).
    Whole,
}

/// `gpuclaim import openb`'s options.
#[derive(Clone, Debug)]
pub struct OpenbOptions {
    pub nodes: PathBuf,
    pub pods: PathBuf,
    /// Virtual time per trace time (0.001: a trace day in 86.4 s).
    pub time_scale: f64,
    /// The trace seconds kept: tasks created in `[start, end)`, and those created before and still running at
    /// `start` (they start at 0). `None`: to the end of the trace.
    pub window: (u64, Option<u64>),
    /// Keep one task in `sample` (1: all): every k-th row, or, with `sample_seed`, the tasks whose name hashes
    /// (SHA-256 with the seed) to 0 modulo k.
    pub sample: u64,
    pub sample_seed: Option<u64>,
    pub shared: SharedGpus,
    /// Tasks never end (the FGD simulator's reading of the trace: arrivals fill the cluster).
    pub ignore_deletion: bool,
    /// The scenario's name (else from the pods file's name).
    pub name: Option<String>,
}

impl OpenbOptions {
    pub fn new(nodes: impl Into<PathBuf>, pods: impl Into<PathBuf>) -> Self {
        OpenbOptions {
            nodes: nodes.into(),
            pods: pods.into(),
            time_scale: 1.0,
            window: (0, None),
            sample: 1,
            sample_seed: None,
            shared: SharedGpus::Vgpu,
            ignore_deletion: false,
            name: None,
        }
    }
}

/// `START..END` or `START..` in trace time (`86400`, `1d`, `36h`…).
pub fn parse_window(text: &str) -> Result<(u64, Option<u64>), ImportError> {
    let bad = |reason: String| ImportError::Options(format!("--window {text:?}: {reason}"));
    let (start, end) = text.split_once("..").ok_or_else(|| bad("write START..END or START..".to_owned()))?;
    let start = if start.trim().is_empty() { 0 } else { parse_seconds(start).map_err(bad)? };
    let end = if end.trim().is_empty() { None } else { Some(parse_seconds(end).map_err(bad)?) };
    if end.is_some_and(|end| end <= start) {
        return Err(bad("the end must come after the start".to_owned()));
    }
    Ok((start, end))
}

/// One task as read.
#[derive(Clone, Debug)]
struct Task {
    name: String,
    tenant: String,
    cpu_millis: u64,
    memory_mib: u64,
    num_gpu: u64,
    gpu_milli: u64,
    /// The models `gpu_spec` allows, sorted and distinct (`None`: any).
    set: Option<Vec<String>>,
    creation: u64,
    deletion: Option<u64>,
}

/// The columns of a pod list; only the first five are required.
struct PodColumns {
    name: usize,
    cpu: usize,
    memory: usize,
    num_gpu: usize,
    gpu_milli: usize,
    gpu_spec: Option<usize>,
    qos: Option<usize>,
    phase: Option<usize>,
    creation: Option<usize>,
    deletion: Option<usize>,
    scheduled: Option<usize>,
}

impl PodColumns {
    fn of(table: &Table) -> Result<PodColumns, ImportError> {
        Ok(PodColumns {
            name: table.require("name")?,
            cpu: table.require("cpu_milli")?,
            memory: table.require("memory_mib")?,
            num_gpu: table.require("num_gpu")?,
            gpu_milli: table.require("gpu_milli")?,
            gpu_spec: table.column("gpu_spec"),
            qos: table.column("qos"),
            phase: table.column("pod_phase"),
            creation: table.column("creation_time"),
            deletion: table.column("deletion_time"),
            scheduled: table.column("scheduled_time"),
        })
    }
}

/// Reads the current row of a pod list. Without a `creation_time` column tasks arrive one second apart in file
/// order (`row`, 0-based).
fn read_task(table: &Table, columns: &PodColumns, row: u64) -> Result<Task, ImportError> {
    let name = table.text(columns.name).to_owned();
    if name.is_empty() {
        return Err(table.cell_error(columns.name, "empty task name"));
    }
    let num_gpu = table.whole(columns.num_gpu)?;
    let gpu_milli = table.whole(columns.gpu_milli)?;
    if num_gpu == 0 && gpu_milli != 0 {
        return Err(table.cell_error(columns.gpu_milli, format!("gpu_milli {gpu_milli} for a task without GPUs")));
    }
    if gpu_milli > 1_000 {
        return Err(table.cell_error(columns.gpu_milli, format!("gpu_milli {gpu_milli} is more than one GPU (1000)")));
    }
    if num_gpu > 0 && gpu_milli == 0 {
        return Err(table.cell_error(
            columns.gpu_milli,
            format!("gpu_milli 0 for a task with {num_gpu} GPUs (whole GPUs are 1000)"),
        ));
    }
    if num_gpu > 1 && gpu_milli < 1_000 {
        return Err(table.cell_error(
            columns.gpu_milli,
            format!("gpu_milli {gpu_milli} with {num_gpu} GPUs: only a one-GPU task may share its GPU"),
        ));
    }
    if num_gpu > u64::from(u32::MAX) {
        return Err(table.cell_error(columns.num_gpu, format!("{num_gpu} GPUs is too many")));
    }
    let set = match columns.gpu_spec.map(|c| table.text(c)).filter(|spec| !spec.is_empty()) {
        None => None,
        Some(spec) => {
            let models: BTreeSet<String> =
                spec.split('|').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect();
            if models.is_empty() {
                return Err(table.cell_error(columns.gpu_spec.unwrap_or(0), format!("{spec:?} names no model")));
            }
            Some(models.into_iter().collect())
        }
    };
    let tenant = match columns.qos.map(|c| table.text(c)).filter(|q| !q.is_empty()) {
        Some(qos) => format!("openb-{}", slug(qos)),
        None => "openb".to_owned(),
    };
    let creation = match columns.creation {
        Some(column) => table.whole(column)?,
        None => row,
    };
    let deletion = match columns.deletion {
        Some(column) => table.optional_whole(column)?,
        None => None,
    };
    if let (Some(deletion), Some(column)) = (deletion, columns.deletion)
        && deletion < creation
    {
        return Err(table.cell_error(column, format!("deletion_time {deletion} is before creation_time {creation}")));
    }
    if let Some(column) = columns.scheduled {
        table.optional_whole(column)?;
    }
    Ok(Task {
        name,
        tenant,
        cpu_millis: table.whole(columns.cpu)?,
        memory_mib: table.whole(columns.memory)?,
        num_gpu,
        gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli },
        set: if num_gpu == 0 { None } else { set },
        creation,
        deletion,
    })
}

/// Whether the task of row `row` named `name` is in the sample.
fn sampled(options: &OpenbOptions, row: u64, name: &str) -> bool {
    if options.sample <= 1 {
        return true;
    }
    match options.sample_seed {
        None => row.is_multiple_of(options.sample),
        Some(seed) => {
            let mut hasher = Sha256::new();
            hasher.update(seed.to_le_bytes());
            hasher.update(name.as_bytes());
            let digest = hasher.finalize();
            let value = u64::from_le_bytes(digest[..8].try_into().expect("eight bytes"));
            value.is_multiple_of(options.sample)
        }
    }
}

/// The pool a GPU task's units come from, and the units it orders there.
fn pool_of(task: &Task, shared: SharedGpus) -> Option<(Pool, u64)> {
    match (task.num_gpu, task.gpu_milli) {
        (0, _) => None,
        (1, milli) if milli < 1_000 && shared == SharedGpus::Vgpu => Some((Pool::Vgpu(Profile::fitting(milli)), 1)),
        (n, _) => Some((Pool::Passthrough, n)),
    }
}

/// Imports the openb trace: reads both lists row by row, keeps the sampled tasks in the window, and maps them.
pub fn import_openb(options: &OpenbOptions) -> Result<Imported, ImportError> {
    if !(options.time_scale.is_finite() && options.time_scale > 0.0) {
        return Err(ImportError::Options(format!("--time-scale {} must be a positive number", options.time_scale)));
    }
    if options.sample == 0 {
        return Err(ImportError::Options("--sample must be at least 1".to_owned()));
    }
    let (start, end) = options.window;
    if end.is_some_and(|end| end <= start) {
        return Err(ImportError::Options("the window's end must come after its start".to_owned()));
    }
    let nodes = read_openb(&mut Table::open(&options.nodes)?)?;
    let mut imported = Imported::default();

    // Tasks, row by row: every row checked, then sampled and windowed.
    let mut table = Table::open(&options.pods)?;
    let columns = PodColumns::of(&table)?;
    let mut tasks: Vec<Task> = Vec::new();
    let mut names: HashMap<String, u64> = HashMap::new();
    while table.next_row()? {
        let row = table.rows - 1;
        let mut task = read_task(&table, &columns, row)?;
        if options.ignore_deletion {
            task.deletion = None;
        }
        if let Some(first) = names.insert(task.name.clone(), table.line()) {
            return Err(table.cell_error(columns.name, format!("task {:?} again (first on line {first})", task.name)));
        }
        if let Some(phase) = columns.phase.map(|c| table.text(c)).filter(|p| !p.is_empty()) {
            imported.count(&format!("trace_phase_{}", slug(phase)), 1);
        }
        if !sampled(options, row, &task.name) {
            imported.count("dropped_by_sample", 1);
            continue;
        }
        let after_end = end.is_some_and(|end| task.creation >= end);
        let ended_before = task.creation < start && task.deletion.is_some_and(|d| d <= start);
        if after_end || ended_before {
            imported.count("dropped_by_window", 1);
            continue;
        }
        if task.creation < start {
            imported.count("running_at_window_start", 1);
        }
        tasks.push(task);
    }
    imported.count("rows", table.rows);

    let scale = |seconds: u64| (seconds as f64 * 1_000.0 * options.time_scale).round() as u64;
    let duration_ms = match end {
        Some(end) => scale(end - start),
        None => {
            let last = tasks.iter().map(|t| t.deletion.unwrap_or(t.creation).max(t.creation)).max().unwrap_or(start);
            scale(last.saturating_sub(start)) + 3_600_000
        }
    }
    .max(1_000);

    // What each pool is asked (GPU-milliseconds); a vGPU profile too small a share of the cluster to get one GPU
    // node of its own is folded into the next larger one (a full-GPU profile into passthrough).
    let timing = |task: &Task| {
        let from = task.creation.max(start);
        let at_ms = scale(from - start);
        (at_ms, task.deletion.map(|d| scale(d - from)))
    };
    let gpu_time = |pool: Pool, units: u64, at_ms: u64, lifetime_ms: Option<u64>| {
        let runs = lifetime_ms.unwrap_or(duration_ms.saturating_sub(at_ms)).max(1) as f64;
        match pool {
            Pool::Passthrough => units as f64 * runs,
            Pool::Vgpu(profile) => runs / profile.per_gpu() as f64,
        }
    };
    let mut demand: BTreeMap<Pool, f64> = BTreeMap::new();
    for task in &tasks {
        if let Some((pool, units)) = pool_of(task, options.shared) {
            let (at_ms, lifetime_ms) = timing(task);
            *demand.entry(pool).or_insert(0.0) += gpu_time(pool, units, at_ms, lifetime_ms);
        }
    }
    let gpu_nodes = nodes.iter().filter(|n| n.model.is_some()).count() as f64;
    let mut folded: BTreeMap<Pool, Pool> = BTreeMap::new();
    for (profile, larger) in [
        (Profile::Eighth, Pool::Vgpu(Profile::Quarter)),
        (Profile::Quarter, Pool::Vgpu(Profile::Half)),
        (Profile::Half, Pool::Vgpu(Profile::Full)),
        (Profile::Full, Pool::Passthrough),
    ] {
        let total: f64 = demand.values().sum();
        let Some(&asked) = demand.get(&Pool::Vgpu(profile)) else { continue };
        if asked / total * gpu_nodes >= 1.0 {
            continue;
        }
        // The same tasks on a profile `per_gpu` times as large ask that much more GPU-time.
        let growth = match larger {
            Pool::Vgpu(larger) => profile.per_gpu() as f64 / larger.per_gpu() as f64,
            Pool::Passthrough => 1.0,
        };
        demand.remove(&Pool::Vgpu(profile));
        *demand.entry(larger).or_insert(0.0) += asked * growth;
        folded.insert(Pool::Vgpu(profile), larger);
        imported.count(&format!("profile_{}_folded_into_larger", profile.name()), 1);
    }
    let fold = |mut pool: Pool| {
        while let Some(&larger) = folded.get(&pool) {
            pool = larger;
        }
        pool
    };

    // Timed VMs.
    let mut max_units: BTreeMap<(Pool, Option<Vec<String>>), u64> = BTreeMap::new();
    let mut vms = Vec::with_capacity(tasks.len());
    let mut tenants = BTreeSet::new();
    for task in &tasks {
        let (at_ms, lifetime_ms) = timing(task);
        let placed = pool_of(task, options.shared).map(|(pool, units)| (fold(pool), units));
        let gpu = placed.map(|(pool, units)| {
            let most = max_units.entry((pool, task.set.clone())).or_insert(0);
            *most = (*most).max(units);
            let class = match pool {
                Pool::Passthrough => passthrough_class(task.set.as_deref(), 1).name,
                Pool::Vgpu(profile) => vgpu_class(profile, task.set.as_deref()).name,
            };
            (class, units as u32)
        });
        match placed {
            None => imported.count("vms_cpu_only", 1),
            Some((Pool::Vgpu(profile), _)) => imported.count(&format!("vms_vgpu_{}", profile.name()), 1),
            Some(_) if task.gpu_milli < 1_000 => imported.count("vms_shared_as_whole_gpu", 1),
            Some(_) => imported.count("vms_whole_gpus", 1),
        }
        if lifetime_ms.is_none() {
            imported.count("vms_running_to_the_end", 1);
        }
        tenants.insert(task.tenant.clone());
        vms.push(VmOut {
            at_ms,
            tenant: task.tenant.clone(),
            name: task.name.clone(),
            cpu_millis: task.cpu_millis,
            memory_mib: task.memory_mib,
            lifetime_ms,
            gpu,
        });
    }
    vms.sort_by_key(|vm| vm.at_ms);

    // Nodes: each model's GPU nodes split between the pools in proportion to their demand, interleaved so that
    // every node shape of a model is spread over the pools alike.
    let total: f64 = demand.values().sum();
    let shares: Vec<(Pool, f64)> = if total > 0.0 {
        demand.iter().filter(|(_, d)| **d > 0.0).map(|(p, d)| (*p, d / total)).collect()
    } else {
        vec![(Pool::Passthrough, 1.0)]
    };
    let pools = assign_pools(&nodes, &shares);
    let sets: BTreeSet<Vec<String>> = max_units.keys().filter_map(|(_, set)| set.clone()).collect();
    imported.nodes = group_nodes(&nodes, &pools, &sets);
    let models: BTreeSet<&str> = nodes.iter().filter_map(|n| n.model.as_deref()).collect();
    let missing = sets.iter().flatten().filter(|m| !models.contains(m.as_str())).collect::<BTreeSet<_>>().len();
    if missing > 0 {
        imported.count("gpu_spec_models_without_nodes", missing as u64);
    }

    for ((pool, set), units) in &max_units {
        let class = match pool {
            Pool::Passthrough => passthrough_class(set.as_deref(), u32::try_from(*units).unwrap_or(u32::MAX)),
            Pool::Vgpu(profile) => vgpu_class(*profile, set.as_deref()),
        };
        imported.classes.push(class);
    }
    let vgpu = max_units.keys().any(|(pool, _)| *pool != Pool::Passthrough);
    imported.tenants = tenants.into_iter().map(|name| TenantOut { name, vgpu_entitled: vgpu }).collect();

    for (n, node) in nodes.iter().enumerate() {
        let key = match (&node.model, pools[n]) {
            (None, _) => "nodes_cpu_only".to_owned(),
            (Some(_), Pool::Passthrough) => "nodes_passthrough".to_owned(),
            (Some(_), Pool::Vgpu(profile)) => format!("nodes_vgpu_{}", profile.name()),
        };
        imported.count(&key, 1);
    }
    imported.count("tasks", tasks.len() as u64);
    imported.count("node_groups", imported.nodes.len() as u64);
    imported.count("classes", imported.classes.len() as u64);
    imported.vms = vms;
    imported.duration_ms = duration_ms;

    let file = |path: &PathBuf| path.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let stem = options.pods.file_stem().map_or_else(|| "openb".to_owned(), |s| slug(&s.to_string_lossy()));
    imported.name = options.name.clone().unwrap_or(stem);
    let window = match end {
        Some(end) => format!("{start}..{end}"),
        None => format!("{start}.."),
    };
    let sample = match options.sample_seed {
        Some(seed) => format!("1 in {} (seed {seed})", options.sample),
        None => format!("every {}", options.sample),
    };
    imported.header = vec![
        format!("Imported by `gpuclaim import openb` from {} and {}.", file(&options.nodes), file(&options.pods)),
        format!(
            "Options: time scale {}, window {window} (trace seconds), sample {sample}, shared GPUs as {}{}.",
            options.time_scale,
            match options.shared {
                SharedGpus::Vgpu => "vGPU profiles",
                SharedGpus::Whole => "whole GPUs",
            },
            if options.ignore_deletion { ", deletions ignored" } else { "" }
        ),
        "Trace: Alibaba cluster-trace-gpu-v2023 (Weng et al., ATC'23); for study or research only, cite the paper;"
            .to_owned(),
        "do not commit imported scenarios. The mapping: docs/import.md.".to_owned(),
    ];
    imported.description =
        format!("{} tasks of {} on {} nodes (openb trace)", tasks.len(), file(&options.pods), nodes.len());
    Ok(imported)
}

/// Each GPU node's pool: per model, node by node, the pool furthest behind its share.
fn assign_pools(nodes: &[TraceNode], shares: &[(Pool, f64)]) -> Vec<Pool> {
    let mut assigned: HashMap<&str, Vec<u64>> = HashMap::new();
    nodes
        .iter()
        .map(|node| {
            let Some(model) = node.model.as_deref() else { return Pool::Passthrough };
            let counts = assigned.entry(model).or_insert_with(|| vec![0; shares.len()]);
            let seen = counts.iter().sum::<u64>() as f64 + 1.0;
            let mut best = 0;
            let mut best_gap = f64::NEG_INFINITY;
            for (i, (_, share)) in shares.iter().enumerate() {
                let gap = share * seen - counts[i] as f64;
                if gap > best_gap + 1e-12 {
                    best = i;
                    best_gap = gap;
                }
            }
            counts[best] += 1;
            shares[best].0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_both_ends() {
        assert_eq!(parse_window("1d..2d").unwrap(), (86_400, Some(172_800)));
        assert_eq!(parse_window("3600..").unwrap(), (3_600, None));
        assert_eq!(parse_window("..1h").unwrap(), (0, Some(3_600)));
        assert!(parse_window("2d..1d").unwrap_err().to_string().contains("after the start"));
        assert!(parse_window("1d").is_err());
    }

    #[test]
    fn pools_follow_their_shares_per_model() {
        let node = |model: &str| TraceNode {
            name: String::new(),
            cpu_millis: 1,
            memory_mib: 1,
            gpus: 1,
            model: Some(model.to_owned()),
        };
        let nodes: Vec<TraceNode> = (0..10).map(|_| node("a")).chain((0..2).map(|_| node("b"))).collect();
        let shares = [(Pool::Passthrough, 0.7), (Pool::Vgpu(Profile::Half), 0.3)];
        let pools = assign_pools(&nodes, &shares);
        assert_eq!(pools[..10].iter().filter(|p| **p == Pool::Passthrough).count(), 7);
        assert_eq!(pools[10..], [Pool::Passthrough, Pool::Vgpu(Profile::Half)]);
    }
}
