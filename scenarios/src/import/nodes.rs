//! Node lists: the openb list (`sn, cpu_milli, memory_mib, gpu, model`) and the spot-GPU 2026 list (`node_name,
//! gpu_model, gpu_capacity_num, cpu_num`, no memory), told apart by their header; equal nodes grouped into one node
//! group. `gpuclaim import nodes` turns a list alone into a scenario with one passthrough class per model and one
//! admitting any model, for what-if studies on a real cluster shape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use super::{
    ClassOut, ImportError, Imported, LABEL_PRODUCT, LABEL_VGPU_CONFIG, LABEL_WORKLOAD, NodeGroupOut,
    PASSTHROUGH_RESOURCE, Table, label_value, set_label, slug,
};

/// A vGPU profile: a fixed fraction of one GPU (one vGPU per VM, as NVIDIA's time-sliced profiles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Profile {
    Full,
    Half,
    Quarter,
    Eighth,
}

impl Profile {
    /// Largest first.
    pub const ALL: [Profile; 4] = [Profile::Full, Profile::Half, Profile::Quarter, Profile::Eighth];

    /// vGPUs of this profile one GPU holds.
    pub fn per_gpu(self) -> u64 {
        match self {
            Profile::Full => 1,
            Profile::Half => 2,
            Profile::Quarter => 4,
            Profile::Eighth => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Half => "half",
            Profile::Quarter => "quarter",
            Profile::Eighth => "eighth",
        }
    }

    /// The share of a GPU in thousandths.
    pub fn milli(self) -> u64 {
        1_000 / self.per_gpu()
    }

    /// The smallest profile giving at least `gpu_milli` thousandths of a GPU.
    pub fn fitting(gpu_milli: u64) -> Profile {
        Profile::ALL.into_iter().rev().find(|p| p.milli() >= gpu_milli).unwrap_or(Profile::Full)
    }

    /// The extended resource the vGPUs of this profile are published as (every model's mediated-device type of
    /// this size mapped to it).
    pub fn resource(self) -> String {
        format!("nvidia.com/vgpu-{}", self.name())
    }
}

/// The mode a GPU node's GPUs are in (gpu-operator configures it per node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pool {
    Passthrough,
    Vgpu(Profile),
}

impl Pool {
    fn short(self) -> String {
        match self {
            Pool::Passthrough => "pt".to_owned(),
            Pool::Vgpu(profile) => format!("vgpu-{}", profile.name()),
        }
    }
}

/// One node of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceNode {
    pub name: String,
    pub cpu_millis: u64,
    pub memory_mib: u64,
    pub gpus: u64,
    /// `None` for a node without GPUs.
    pub model: Option<String>,
}

/// Which list a header belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeFormat {
    Openb,
    SpotGpu,
}

/// Reads a node list of either format; `memory_per_cpu_mib` is what a spot-GPU node gets per CPU (its list has no
/// memory).
pub fn read_nodes(path: &Path, memory_per_cpu_mib: u64) -> Result<(NodeFormat, Vec<TraceNode>), ImportError> {
    let mut table = Table::open(path)?;
    if table.column("sn").is_some() {
        Ok((NodeFormat::Openb, read_openb(&mut table)?))
    } else if table.column("node_name").is_some() && table.column("gpu_model").is_some() {
        Ok((NodeFormat::SpotGpu, read_spot(&mut table, memory_per_cpu_mib)?))
    } else {
        Err(ImportError::File {
            file: table.file().to_owned(),
            reason: "not a node list: expected the columns sn, cpu_milli, memory_mib, gpu, model (openb) or \
                     node_name, gpu_model, gpu_capacity_num, cpu_num (spot-gpu)"
                .to_owned(),
        })
    }
}

/// The openb node list (`sn, cpu_milli, memory_mib, gpu, model`).
pub(crate) fn read_openb(table: &mut Table) -> Result<Vec<TraceNode>, ImportError> {
    let [sn, cpu, memory, gpu, model] =
        ["sn", "cpu_milli", "memory_mib", "gpu", "model"].map(|name| table.require(name));
    let (sn, cpu, memory, gpu, model) = (sn?, cpu?, memory?, gpu?, model?);
    let mut nodes = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    while table.next_row()? {
        let name = table.text(sn).to_owned();
        if name.is_empty() {
            return Err(table.cell_error(sn, "empty node name"));
        }
        if let Some(first) = seen.insert(name.clone(), table.line()) {
            return Err(table.cell_error(sn, format!("node {name:?} again (first on line {first})")));
        }
        let gpus = table.whole(gpu)?;
        let model_name = table.text(model).to_owned();
        if gpus > 0 && model_name.is_empty() {
            return Err(table.cell_error(model, format!("empty model for a node with {gpus} GPUs")));
        }
        nodes.push(TraceNode {
            name,
            cpu_millis: table.whole(cpu)?,
            memory_mib: table.whole(memory)?,
            gpus,
            model: (gpus > 0).then_some(model_name),
        });
    }
    Ok(nodes)
}

/// The spot-GPU 2026 node list (`node_name, gpu_model, gpu_capacity_num, cpu_num`).
fn read_spot(table: &mut Table, memory_per_cpu_mib: u64) -> Result<Vec<TraceNode>, ImportError> {
    let [name, model, capacity, cpu] =
        ["node_name", "gpu_model", "gpu_capacity_num", "cpu_num"].map(|name| table.require(name));
    let (name, model, capacity, cpu) = (name?, model?, capacity?, cpu?);
    let mut nodes = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    while table.next_row()? {
        let node = table.text(name).to_owned();
        if node.is_empty() {
            return Err(table.cell_error(name, "empty node name"));
        }
        if let Some(first) = seen.insert(node.clone(), table.line()) {
            return Err(table.cell_error(name, format!("node {node:?} again (first on line {first})")));
        }
        let gpus = table.whole(capacity)?;
        let model_name = table.text(model).to_owned();
        if gpus > 0 && model_name.is_empty() {
            return Err(table.cell_error(model, format!("empty model for a node with {gpus} GPUs")));
        }
        let cpus = table.whole(cpu)?;
        let cpu_millis = cpus.checked_mul(1_000).ok_or_else(|| table.cell_error(cpu, "too large"))?;
        let memory_mib = cpus.checked_mul(memory_per_cpu_mib).ok_or_else(|| table.cell_error(cpu, "too large"))?;
        nodes.push(TraceNode { name: node, cpu_millis, memory_mib, gpus, model: (gpus > 0).then_some(model_name) });
    }
    Ok(nodes)
}

/// What makes nodes equal: model, CPU, memory, GPUs, pool.
type GroupKey<'a> = (Option<&'a str>, u64, u64, u64, Option<Pool>);

/// Equal nodes (model, CPU, memory, GPUs, pool) as one group each, in the order they first appear; `pools[i]` is
/// node `i`'s pool (ignored for nodes without GPUs). GPU nodes carry their model, their mode, their vGPU profile and
/// the label of every set in `sets` (of two models or more) that holds their model.
pub(crate) fn group_nodes(nodes: &[TraceNode], pools: &[Pool], sets: &BTreeSet<Vec<String>>) -> Vec<NodeGroupOut> {
    let mut groups: Vec<NodeGroupOut> = Vec::new();
    let mut index: HashMap<GroupKey, usize> = HashMap::new();
    for (n, node) in nodes.iter().enumerate() {
        let pool = node.model.as_ref().map(|_| pools.get(n).copied().unwrap_or(Pool::Passthrough));
        let key = (node.model.as_deref(), node.cpu_millis, node.memory_mib, node.gpus, pool);
        if let Some(&at) = index.get(&key) {
            groups[at].count += 1;
            continue;
        }
        let number = groups.len();
        let mut devices = BTreeMap::new();
        let mut labels = BTreeMap::new();
        let prefix = match (&node.model, pool) {
            (Some(model), Some(pool)) => {
                let resource = match pool {
                    Pool::Passthrough => PASSTHROUGH_RESOURCE.to_owned(),
                    Pool::Vgpu(profile) => profile.resource(),
                };
                let per_gpu = match pool {
                    Pool::Passthrough => 1,
                    Pool::Vgpu(profile) => profile.per_gpu(),
                };
                devices.insert(resource, node.gpus * per_gpu);
                labels.insert(LABEL_PRODUCT.to_owned(), label_value(model));
                let mode = if pool == Pool::Passthrough { "vm-passthrough" } else { "vm-vgpu" };
                labels.insert(LABEL_WORKLOAD.to_owned(), mode.to_owned());
                if let Pool::Vgpu(profile) = pool {
                    labels.insert(LABEL_VGPU_CONFIG.to_owned(), profile.name().to_owned());
                }
                for set in sets.iter().filter(|set| set.len() > 1 && set.contains(model)) {
                    labels.insert(set_label(set), "true".to_owned());
                }
                format!("{}-{}-g{number}-", slug(model), pool.short())
            }
            _ => format!("cpu-g{number}-"),
        };
        index.insert(key, number);
        groups.push(NodeGroupOut {
            prefix,
            count: 1,
            cpu_millis: node.cpu_millis,
            memory_mib: node.memory_mib,
            devices,
            labels,
        });
    }
    groups
}

/// The passthrough class of a model set (`None`: any model).
pub(crate) fn passthrough_class(set: Option<&[String]>, max_count: u32) -> ClassOut {
    let (name, node_selector) = selector(set);
    ClassOut {
        name: format!("gpu-{name}"),
        resource_name: PASSTHROUGH_RESOURCE.to_owned(),
        mode: "Passthrough",
        max_count: max_count.max(1),
        node_selector,
    }
}

/// The vGPU class of a profile on a model set (`None`: any model).
pub(crate) fn vgpu_class(profile: Profile, set: Option<&[String]>) -> ClassOut {
    let (name, node_selector) = selector(set);
    ClassOut {
        name: format!("vgpu-{}-{name}", profile.name()),
        resource_name: profile.resource(),
        mode: "VGPU",
        max_count: 1,
        node_selector,
    }
}

/// A class's name part and node selector: `any` and none; one model's slug and its product label; a set's slug
/// and its set label.
fn selector(set: Option<&[String]>) -> (String, BTreeMap<String, String>) {
    match set {
        None => ("any".to_owned(), BTreeMap::new()),
        Some([model]) => (slug(model), BTreeMap::from([(LABEL_PRODUCT.to_owned(), label_value(model))])),
        Some(models) => (super::set_slug(models), BTreeMap::from([(set_label(models), "true".to_owned())])),
    }
}

/// `gpuclaim import nodes`: a node list alone.
#[derive(Clone, Debug)]
pub struct NodesOptions {
    pub nodes: PathBuf,
    /// Memory a spot-GPU node gets per CPU, in MiB (its list has none).
    pub memory_per_cpu_mib: u64,
    /// The scenario's duration, in ms.
    pub duration_ms: u64,
    pub name: Option<String>,
}

impl NodesOptions {
    pub fn new(nodes: impl Into<PathBuf>) -> Self {
        NodesOptions { nodes: nodes.into(), memory_per_cpu_mib: 8_192, duration_ms: 86_400_000, name: None }
    }
}

/// A scenario of the cluster a node list describes: every GPU in passthrough; a class per model (`gpu-<model>`,
/// maxCount the model's largest node) and `gpu-any`; no tenants, no VMs.
pub fn import_nodes(options: &NodesOptions) -> Result<Imported, ImportError> {
    if options.duration_ms == 0 {
        return Err(ImportError::Options("the duration must be positive".to_owned()));
    }
    let (format, nodes) = read_nodes(&options.nodes, options.memory_per_cpu_mib)?;
    let mut largest: BTreeMap<String, u64> = BTreeMap::new();
    for node in &nodes {
        if let Some(model) = &node.model {
            let entry = largest.entry(model.clone()).or_insert(0);
            *entry = (*entry).max(node.gpus);
        }
    }
    let clamp = |units: u64| u32::try_from(units).unwrap_or(u32::MAX);
    let mut classes = vec![passthrough_class(None, clamp(largest.values().copied().max().unwrap_or(1)))];
    for (model, units) in &largest {
        classes.push(passthrough_class(Some(std::slice::from_ref(model)), clamp(*units)));
    }
    let pools = vec![Pool::Passthrough; nodes.len()];
    let groups = group_nodes(&nodes, &pools, &BTreeSet::new());
    let file_name = options.nodes.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned());
    let format_name = match format {
        NodeFormat::Openb => "openb",
        NodeFormat::SpotGpu => "spot-gpu",
    };
    let mut imported = Imported {
        name: options.name.clone().unwrap_or_else(|| format!("{format_name}-nodes")),
        header: vec![
            format!("Imported by `gpuclaim import nodes` from {file_name} ({format_name} node list): a cluster shape."),
            "Trace data is for study or research only (see the trace's terms); do not commit imported scenarios."
                .into(),
        ],
        description: format!("{} nodes of {file_name}, {} GPU models", nodes.len(), largest.len()),
        duration_ms: options.duration_ms,
        classes,
        nodes: groups,
        ..Imported::default()
    };
    if format == NodeFormat::SpotGpu {
        imported
            .header
            .push(format!("Memory is not in the list: {} MiB per CPU (--memory-per-cpu).", options.memory_per_cpu_mib));
    }
    imported.count("nodes", nodes.len() as u64);
    imported.count("gpu_nodes", nodes.iter().filter(|n| n.gpus > 0).count() as u64);
    imported.count("gpus", nodes.iter().map(|n| n.gpus).sum());
    imported.count("node_groups", imported.nodes.len() as u64);
    imported.count("classes", imported.classes.len() as u64);
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_fit_the_share_asked() {
        assert_eq!(Profile::fitting(50), Profile::Eighth);
        assert_eq!(Profile::fitting(125), Profile::Eighth);
        assert_eq!(Profile::fitting(126), Profile::Quarter);
        assert_eq!(Profile::fitting(460), Profile::Half);
        assert_eq!(Profile::fitting(810), Profile::Full);
        assert_eq!(Profile::Eighth.resource(), "nvidia.com/vgpu-eighth");
    }
}
