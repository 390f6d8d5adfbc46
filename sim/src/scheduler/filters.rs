//! kube-scheduler's filters and choice, for the twin: gates, nodeSelector, required node affinity, taints,
//! cordons, and resources (CPU, memory, extended resources counted from the pods bound to each node, never
//! overcommitted). A pod that fits nowhere gets `PodScheduled=False` with reason `Unschedulable` and the
//! scheduler's message (`0/3 nodes are available: 1 Insufficient nvidia.com/GH100, 2 node(s) had untolerated
//! taint {...}.`); a gated pod gets `SchedulingGated`.
//!
//! The scheduler counts pods, not claims: it is Kubernetes', not ours.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use gpuclaim_engine::model::{Node, Pod};
use gpuclaim_engine::scheduling::{matches_node_selector, matches_required_terms, untolerated_taint};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// `PodScheduled=False` reasons (k8s.io/api/core/v1).
pub const REASON_SCHEDULING_GATED: &str = "SchedulingGated";
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// The API server's message while a pod is gated.
pub const MESSAGE_SCHEDULING_GATED: &str = "Scheduling is blocked due to non-empty scheduling gates";

/// Extended resource names as small numbers, so that filtering a node compares integers rather than names that
/// share long prefixes (`devices.kubevirt.io/…`, `nvidia.com/…`). A name keeps its number for the whole run: what
/// each node's pods request is counted by it.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    ids: BTreeMap<String, usize>,
}

impl Resources {
    /// The number of `name`, given it now if it has none.
    pub fn id(&mut self, name: &str) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.ids.len();
        self.ids.insert(name.to_owned(), id);
        id
    }

    /// The number of `name`, if it has one (a resource without one is requested by no pod counted so far).
    pub fn get(&self, name: &str) -> Option<usize> {
        self.ids.get(name).copied()
    }

    /// Units per resource number.
    fn units(&mut self, devices: &BTreeMap<String, u64>) -> Vec<u64> {
        let mut units = Vec::new();
        for (name, count) in devices {
            *slot(&mut units, self.id(name)) = *count;
        }
        units
    }
}

/// Resource number `id`'s entry in a list of units by number, the list grown to hold it.
fn slot(units: &mut Vec<u64>, id: usize) -> &mut u64 {
    if units.len() <= id {
        units.resize(id + 1, 0);
    }
    &mut units[id]
}

/// What the pods bound to a node request; extended resources by their [`Resources`] number.
#[derive(Clone, Debug, Default)]
pub struct Requested {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    devices: Vec<u64>,
}

impl Requested {
    pub fn add(&mut self, pod: &Pod, resources: &mut Resources) {
        self.cpu_millis += pod.cpu_millis;
        self.memory_bytes += pod.memory_bytes;
        for (resource, units) in pod.devices.iter() {
            self.add_units(resources.id(resource), *units);
        }
    }

    pub fn remove(&mut self, pod: &Pod, resources: &Resources) {
        self.cpu_millis = self.cpu_millis.checked_sub(pod.cpu_millis).expect("a pod is uncounted once");
        self.memory_bytes = self.memory_bytes.checked_sub(pod.memory_bytes).expect("a pod is uncounted once");
        for (resource, units) in pod.devices.iter() {
            let id = resources.get(resource).expect("a pod is uncounted once");
            let total = self.devices.get_mut(id).expect("a pod is uncounted once");
            *total = total.checked_sub(*units).expect("a pod is uncounted once");
        }
    }

    /// Counts `units` more of resource number `id`.
    pub fn add_units(&mut self, id: usize, units: u64) {
        *slot(&mut self.devices, id) += units;
    }

    /// Units of resource number `id` requested.
    fn units(&self, id: Option<usize>) -> u64 {
        id.and_then(|id| self.devices.get(id)).copied().unwrap_or(0)
    }
}

/// What each node's bound pods request, kept where a search reads it by the node's position in the list it
/// walks: a search filters hundreds of nodes, and looking each one's requests up by name was a hashed string
/// lookup per node. Each node name has a slot that never moves; the position → slot table is taken again when the
/// node list changes (the same signal the cached verdicts use).
#[derive(Clone, Debug, Default)]
pub struct NodeRequests {
    slots: Vec<Requested>,
    by_name: std::collections::HashMap<String, usize, foldhash::fast::FixedState>,
    /// Position in the node list → slot, for the list as of `synced`.
    at: Vec<usize>,
    synced: Option<(u64, usize)>,
}

impl NodeRequests {
    /// What the pods bound to `node` request, if any were counted there.
    pub fn get(&self, node: &str) -> Option<&Requested> {
        self.by_name.get(node).map(|&slot| &self.slots[slot])
    }

    pub fn get_mut(&mut self, node: &str) -> Option<&mut Requested> {
        self.by_name.get(node).map(|&slot| &mut self.slots[slot])
    }

    /// The requests of `node`, counted from zero when first seen.
    pub fn entry(&mut self, node: &str) -> &mut Requested {
        let slot = self.slot(node);
        &mut self.slots[slot]
    }

    fn slot(&mut self, node: &str) -> usize {
        if let Some(&slot) = self.by_name.get(node) {
            return slot;
        }
        self.slots.push(Requested::default());
        self.by_name.insert(node.to_owned(), self.slots.len() - 1);
        self.slots.len() - 1
    }

    /// Takes the position table again if the node list changed since (`nodes_written` moved or its length did).
    pub fn sync(&mut self, nodes: &[&Node], nodes_written: u64) {
        if self.synced == Some((nodes_written, nodes.len())) {
            return;
        }
        let at: Vec<usize> = nodes.iter().map(|node| self.slot(&node.name)).collect();
        self.at = at;
        self.synced = Some((nodes_written, nodes.len()));
    }

    /// What the pods bound to the node at `position` of the list last synced request.
    pub fn at(&self, position: usize) -> &Requested {
        &self.slots[self.at[position]]
    }
}

/// One extended resource a pod requests: its number (none if no node or pod has named it yet), name and units.
#[derive(Clone, Copy, Debug)]
struct Want<'a> {
    id: Option<usize>,
    name: &'a str,
    units: u64,
}

/// Why one node does not take a pod, as the scheduler's filter plugins word it. It borrows from the pod and the
/// node: most nodes a search filters are misfits, and naming one must not cost an allocation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit<'a> {
    /// NodeUnschedulable.
    Cordoned,
    /// The node is not Ready (its `not-ready` taint, which pods do not tolerate for scheduling).
    NotReady,
    /// NodeAffinity (nodeSelector or required terms).
    Selector,
    /// TaintToleration.
    Taint { key: &'a str, value: Option<&'a str>, effect: &'a str },
    /// NodeResourcesFit.
    Insufficient { resource: &'a str },
    /// VolumeBinding: the pod's volume is bound to a local volume on another node.
    VolumeNodeAffinity,
    /// InterPodAffinity: a pod the anti-affinity terms select runs there.
    AntiAffinity,
}

impl fmt::Display for Misfit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Cordoned => write!(f, "node(s) were unschedulable"),
            Misfit::NotReady => write!(f, "node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}"),
            Misfit::Selector => write!(f, "node(s) didn't match Pod's node affinity/selector"),
            Misfit::Taint { key, value, .. } => {
                write!(f, "node(s) had untolerated taint {{{key}: {}}}", value.unwrap_or_default())
            }
            Misfit::Insufficient { resource } => write!(f, "Insufficient {resource}"),
            Misfit::VolumeNodeAffinity => write!(f, "node(s) had volume node affinity conflict"),
            Misfit::AntiAffinity => write!(f, "node(s) didn't match pod anti-affinity rules"),
        }
    }
}

/// Runs the filters in kube-scheduler's order; the first that fails names the misfit. `placed` is what the filters
/// that read other objects say of the node (VolumeBinding, InterPodAffinity: the last ones).
pub fn filter<'a>(
    pod: &'a Pod,
    node: &'a Node,
    requested: &Requested,
    placed: Option<Misfit<'a>>,
    resources: &Resources,
) -> Result<(), Misfit<'a>> {
    match node_verdict(pod, node).misfit(node) {
        Some(misfit) => Err(misfit),
        None => {
            let allocatable = |want: &Want| node.devices.get(want.name).copied().unwrap_or(0);
            fits_resources(pod, wants(pod, |name| resources.get(name)), allocatable, node, requested, placed)
        }
    }
}

/// The extended resources `pod` requests, in name order, numbered by `id`.
fn wants<'a>(pod: &'a Pod, mut id: impl FnMut(&str) -> Option<usize>) -> impl Iterator<Item = Want<'a>> {
    pod.devices.iter().map(move |(name, units)| Want { id: id(name), name, units: *units })
}

/// What the filters that read only the pod's spec and the node say (NodeUnschedulable, NodeAffinity, the not-ready
/// taint, TaintToleration): the same for every pod of one shape until the node changes.
fn node_verdict(pod: &Pod, node: &Node) -> NodeVerdict {
    if node.unschedulable {
        return NodeVerdict::Cordoned;
    }
    if !matches_node_selector(&pod.node_selector, &node.labels)
        || pod.required_terms.as_ref().is_some_and(|terms| !matches_required_terms(terms, &node.name, &node.labels))
    {
        return NodeVerdict::Selector;
    }
    if !node.ready {
        return NodeVerdict::NotReady;
    }
    match untolerated_taint(&pod.tolerations, &node.taints) {
        Some(taint) => {
            let index = node.taints.iter().position(|t| std::ptr::eq(t, taint)).expect("the taint is the node's");
            NodeVerdict::Taint(index)
        }
        None => NodeVerdict::Passes,
    }
}

/// The filters after [`node_verdict`]'s: NodeResourcesFit on what the node's pods request (`wants`, the pod's
/// extended resources; `allocatable`, the node's units of one), then `placed`.
fn fits_resources<'a>(
    pod: &Pod,
    wants: impl IntoIterator<Item = Want<'a>>,
    allocatable: impl Fn(&Want) -> u64,
    node: &Node,
    requested: &Requested,
    placed: Option<Misfit<'a>>,
) -> Result<(), Misfit<'a>> {
    if requested.cpu_millis + pod.cpu_millis > node.cpu_millis {
        return Err(Misfit::Insufficient { resource: "cpu" });
    }
    if requested.memory_bytes + pod.memory_bytes > node.memory_bytes {
        return Err(Misfit::Insufficient { resource: "memory" });
    }
    for want in wants {
        if requested.units(want.id) + want.units > allocatable(&want) {
            return Err(Misfit::Insufficient { resource: want.name });
        }
    }
    match placed {
        Some(misfit) => Err(misfit),
        None => Ok(()),
    }
}

/// [`node_verdict`]'s answer, kept without borrowing the node (a taint by its index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeVerdict {
    Passes,
    Cordoned,
    Selector,
    NotReady,
    Taint(usize),
}

impl NodeVerdict {
    fn misfit(self, node: &Node) -> Option<Misfit<'_>> {
        match self {
            NodeVerdict::Passes => None,
            NodeVerdict::Cordoned => Some(Misfit::Cordoned),
            NodeVerdict::Selector => Some(Misfit::Selector),
            NodeVerdict::NotReady => Some(Misfit::NotReady),
            NodeVerdict::Taint(index) => {
                let taint = &node.taints[index];
                Some(Misfit::Taint { key: &taint.key, value: taint.value.as_deref(), effect: &taint.effect })
            }
        }
    }
}

/// Each node's [`node_verdict`] for the pod shapes searched lately: launchers of VMs without GPUs all share one
/// nodeSelector, affinity and tolerations, and filtering their label rules on every node of a large cluster for every
/// pod was most of the scheduler's time. A shape is the pod's nodeSelector, required node-affinity terms and
/// tolerations compared by value; every verdict is dropped when any node changes (`nodes_written` moves). Only what
/// the filters cost changes, never what they say: the verdicts are the filters' own.
///
/// Each node's allocatable extended resources are kept the same way, by resource number, so the resource filter
/// reads integers; the numbers themselves ([`Resources`]) are kept for the run.
#[derive(Debug, Default)]
pub struct NodeVerdicts {
    nodes_written: u64,
    shapes: Vec<(Shape, Vec<NodeVerdict>)>,
    /// Units per resource number, per node position.
    allocatable: Vec<Vec<u64>>,
    resources: Resources,
}

/// The pod fields [`node_verdict`] reads.
#[derive(Debug, PartialEq)]
struct Shape {
    node_selector: Arc<BTreeMap<String, String>>,
    required_terms: Option<Arc<Vec<k8s_openapi::api::core::v1::NodeSelectorTerm>>>,
    tolerations: Arc<Vec<k8s_openapi::api::core::v1::Toleration>>,
}

impl Shape {
    fn of(pod: &Pod) -> Self {
        Shape {
            node_selector: pod.node_selector.clone(),
            required_terms: pod.required_terms.clone(),
            tolerations: pod.tolerations.clone(),
        }
    }

    fn is_of(&self, pod: &Pod) -> bool {
        // Launchers share these with each other (see `LauncherParts`): the same allocation is the same value. (`Arc`'s
        // own equality looks at the address first only for `Eq` contents; the Kubernetes types are `PartialEq`.)
        fn same<T: PartialEq + ?Sized>(mine: &Arc<T>, its: &Arc<T>) -> bool {
            Arc::ptr_eq(mine, its) || mine == its
        }
        let terms = match (&self.required_terms, &pod.required_terms) {
            (Some(mine), Some(its)) => same(mine, its),
            (None, None) => true,
            _ => false,
        };
        same(&self.node_selector, &pod.node_selector) && terms && same(&self.tolerations, &pod.tolerations)
    }
}

impl NodeVerdicts {
    /// Shapes kept at once: a bound on the memory (each holds a verdict per node); the oldest goes first.
    const SHAPES_MAX: usize = 8;

    /// The verdicts of `nodes` (the store's nodes, in name order) for `pod`'s shape, after `nodes_written` node
    /// writes. A different node count also drops them: verdicts are by position, so a list that changed without a
    /// counted write must not be read against the old one.
    fn of(&mut self, pod: &Pod, nodes: &[&Node], nodes_written: u64) -> (&[NodeVerdict], &[Vec<u64>]) {
        // Every shape's verdicts are as long as the allocatable list: one length says whether the positions hold.
        let stale = self.allocatable.len() != nodes.len();
        if nodes_written != self.nodes_written || stale {
            self.shapes.clear();
            self.nodes_written = nodes_written;
            let resources = &mut self.resources;
            self.allocatable = nodes.iter().map(|node| resources.units(&node.devices)).collect();
        }
        let index = match self.shapes.iter().position(|(shape, _)| shape.is_of(pod)) {
            Some(index) => index,
            None => {
                if self.shapes.len() == Self::SHAPES_MAX {
                    self.shapes.remove(0);
                }
                let verdicts = nodes.iter().map(|node| node_verdict(pod, node)).collect();
                self.shapes.push((Shape::of(pod), verdicts));
                self.shapes.len() - 1
            }
        };
        (&self.shapes[index].1, &self.allocatable)
    }

    /// The resource numbers what nodes' pods request is counted by.
    pub fn resources(&self) -> &Resources {
        &self.resources
    }

    pub fn resources_mut(&mut self) -> &mut Resources {
        &mut self.resources
    }
}

/// The scheduler's verdict for a pod that fits nowhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub message: String,
}

/// kube-scheduler stops filtering once it has found this many feasible nodes, or `percentage` of them
/// (`numFeasibleNodesToFind` in pkg/scheduler/schedule_one.go: `minFeasibleNodesToFind` = 100 and, with
/// `percentageOfNodesToScore` unset as it is by default, an adaptive `50 - nodes/125` percent, at least
/// `minFeasibleNodesPercentageToFind` = 5). Large clusters are searched only in part, which is why the next
/// search starts where this one stopped.
pub fn feasible_nodes_to_find(nodes: usize) -> usize {
    const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
    const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
    if nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return nodes;
    }
    let percentage = 50usize.saturating_sub(nodes / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Where one search started and how many nodes it filtered: the next search starts after them
/// (`nextStartNodeIndex`), so successive pods see the whole cluster in turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    pub start: usize,
    pub processed: usize,
}

impl Sweep {
    /// The index the next search starts at, in a cluster of `nodes`.
    pub fn next_start(self, nodes: usize) -> usize {
        if nodes == 0 { 0 } else { (self.start + self.processed) % nodes }
    }
}

/// Picks a node for `pod`: nodes are filtered from `start` on, wrapping around, until
/// [`feasible_nodes_to_find`] of them fit or every node was filtered; among those that fit, the least requested
/// (CPU and memory shares averaged, as NodeResourcesFit's LeastAllocated scores) wins, ties broken at random from
/// the scheduler's stream, as kube-scheduler samples among equal scores. A gated pod is not scheduled. Each node
/// comes with what the pods bound to it request; `placed` says what the filters that read other objects (volumes, other pods) find wrong with a node. Returns the verdict
/// and the sweep, for the next search's start.
pub fn schedule<'n>(
    pod: &Pod,
    nodes: &[&'n Node],
    requested_on: impl Fn(usize, &str) -> &'n Requested,
    start: usize,
    placed: impl Fn(&str) -> Option<Misfit<'static>>,
    verdicts: (&mut NodeVerdicts, u64),
    rng: &mut ChaCha8Rng,
) -> (Result<&'n str, Unschedulable>, Sweep) {
    let start = if nodes.is_empty() { 0 } else { start % nodes.len() };
    let mut sweep = Sweep { start, processed: 0 };
    if !pod.scheduling_gates.is_empty() {
        return (Err(Unschedulable { message: MESSAGE_SCHEDULING_GATED.to_owned() }), sweep);
    }
    let (cache, nodes_written) = verdicts;
    // Numbered once per search, not per node.
    let wants: Vec<Want> = wants(pod, |name| Some(cache.resources.id(name))).collect();
    let (verdicts, allocatable) = cache.of(pod, nodes, nodes_written);
    let wanted = feasible_nodes_to_find(nodes.len());
    let mut feasible = 0;
    // A handful of distinct misfits at most: a list searched by equality costs less than an ordered map per node.
    let mut misfits: Vec<(Misfit, u32)> = Vec::new();
    let mut best: Option<(u64, &str)> = None;
    let mut ties = 0u32;
    let order = (start..nodes.len()).chain(0..start);
    for i in order {
        let node = nodes[i];
        if feasible == wanted {
            break;
        }
        sweep.processed += 1;
        // What the node's pods request is looked up only for nodes the pod's spec allows.
        let verdict = match verdicts[i].misfit(node) {
            Some(misfit) => Err(misfit),
            None => {
                let requested = requested_on(i, &node.name);
                let allocatable = |want: &Want| want.id.and_then(|id| allocatable[i].get(id)).copied().unwrap_or(0);
                let placed = placed(&node.name);
                fits_resources(pod, wants.iter().copied(), allocatable, node, requested, placed).map(|()| requested)
            }
        };
        match verdict {
            Err(misfit) => match misfits.iter_mut().find(|(seen, _)| *seen == misfit) {
                Some((_, count)) => *count += 1,
                None => misfits.push((misfit, 1)),
            },
            Ok(requested) => {
                feasible += 1;
                let score = free_share(pod, node, requested);
                match best {
                    Some((top, _)) if score < top => {}
                    Some((top, _)) if score == top => {
                        ties += 1;
                        if rng.random_range(0..=ties) == 0 {
                            best = Some((score, node.name.as_str()));
                        }
                    }
                    _ => {
                        best = Some((score, node.name.as_str()));
                        ties = 0;
                    }
                }
            }
        }
    }
    let verdict = match best {
        Some((_, node)) => Ok(node),
        None => Err(Unschedulable { message: unschedulable_message(nodes.len() as u32, &misfits) }),
    };
    (verdict, sweep)
}

/// [`schedule`] for a pod pinned to one node by `metadata.name` (what the GPU controller does): every other node
/// fails node affinity, so only the pinned one is filtered, and the message counts the rest as kube-scheduler
/// would. `total` is the number of nodes in the cluster.
pub fn schedule_pinned<'n>(
    pod: &Pod,
    pinned: Option<(&'n Node, &'n Requested)>,
    placed: impl Fn(&str) -> Option<Misfit<'static>>,
    total: u32,
    resources: &Resources,
) -> Result<&'n str, Unschedulable> {
    if !pod.scheduling_gates.is_empty() {
        return Err(Unschedulable { message: MESSAGE_SCHEDULING_GATED.to_owned() });
    }
    let mut misfits: Vec<(Misfit, u32)> = Vec::new();
    let others = total - u32::from(pinned.is_some());
    if others > 0 {
        misfits.push((Misfit::Selector, others));
    }
    if let Some((node, requested)) = pinned {
        match filter(pod, node, requested, placed(&node.name), resources) {
            Ok(()) => return Ok(node.name.as_str()),
            // The message sums misfits by their text, so a second Selector entry counts with the first.
            Err(misfit) => misfits.push((misfit, 1)),
        }
    }
    Err(Unschedulable { message: unschedulable_message(total, &misfits) })
}

/// LeastAllocated: the mean share of CPU and memory left once the pod is placed, in millionths.
fn free_share(pod: &Pod, node: &Node, requested: &Requested) -> u64 {
    let share =
        |used: u64, capacity: u64| (capacity.saturating_sub(used) * 1_000_000).checked_div(capacity).unwrap_or(0);
    let cpu = share(requested.cpu_millis + pod.cpu_millis, node.cpu_millis);
    let memory = share(requested.memory_bytes + pod.memory_bytes, node.memory_bytes);
    (cpu + memory) / 2
}

/// `0/N nodes are available: <count> <reason>, ...`, the "count reason" strings sorted as text, as kube-scheduler's
/// FitError sorts them.
fn unschedulable_message(total: u32, misfits: &[(Misfit<'_>, u32)]) -> String {
    let mut by_text: BTreeMap<String, u32> = BTreeMap::new();
    for (misfit, count) in misfits {
        *by_text.entry(misfit.to_string()).or_insert(0) += count;
    }
    let mut reasons: Vec<String> = by_text.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
    reasons.sort();
    if reasons.is_empty() {
        return format!("0/{total} nodes are available.");
    }
    format!("0/{total} nodes are available: {}.", reasons.join(", "))
}

#[cfg(test)]
mod tests {
    use gpuclaim_engine::fixtures::{gated_launcher, gpu_node};
    use gpuclaim_engine::model::Time;

    use super::*;
    use crate::rng::actor_stream;

    const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

    /// [`schedule`] over (node, what its pods request) pairs.
    fn search<'n>(
        pod: &Pod,
        pairs: &[(&'n Node, &'n Requested)],
        start: usize,
        placed: impl Fn(&str) -> Option<Misfit<'static>>,
        verdicts: (&mut NodeVerdicts, u64),
        rng: &mut ChaCha8Rng,
    ) -> (Result<&'n str, Unschedulable>, Sweep) {
        let nodes: Vec<&Node> = pairs.iter().map(|(node, _)| *node).collect();
        let requested =
            |_: usize, name: &str| pairs.iter().find(|(node, _)| node.name == name).expect("a listed node").1;
        schedule(pod, &nodes, requested, start, placed, verdicts, rng)
    }

    fn launcher(units: u64) -> Pod {
        let attachments = r#"[{"template":0,"class":"h100","count":1}]"#;
        let mut pod = gated_launcher("tenant-a", "vm-1", attachments, H100, units, Time::UNIX_EPOCH);
        pod.scheduling_gates.clear();
        pod
    }

    #[test]
    fn filters_name_the_first_misfit() {
        let pod = launcher(2);
        let node = gpu_node("gpu-1", H100, 2);
        let idle = Requested::default();
        let mut resources = Resources::default();
        let h100 = resources.id(H100);
        let filter = |pod, node, requested, placed| filter(pod, node, requested, placed, &resources);
        assert_eq!(filter(&pod, &node, &idle, None), Ok(()));
        let mut busy = Requested::default();
        busy.add_units(h100, 1);
        assert_eq!(filter(&pod, &node, &busy, None), Err(Misfit::Insufficient { resource: H100 }));
        let mut untolerated = pod.clone();
        untolerated.tolerations = Default::default();
        assert_eq!(
            filter(&untolerated, &node, &idle, None).unwrap_err().to_string(),
            format!("node(s) had untolerated taint {{{H100}: }}")
        );
        let mut elsewhere = pod.clone();
        std::sync::Arc::make_mut(&mut elsewhere.node_selector).insert("zone".into(), "b".into());
        assert_eq!(filter(&elsewhere, &node, &idle, None), Err(Misfit::Selector));
        let mut cordoned = node.clone();
        cordoned.unschedulable = true;
        assert_eq!(filter(&pod, &cordoned, &idle, None), Err(Misfit::Cordoned));
        let cpu = Requested { cpu_millis: node.cpu_millis, ..Requested::default() };
        assert_eq!(filter(&pod, &node, &cpu, None), Err(Misfit::Insufficient { resource: "cpu" }));
        let volume = filter(&pod, &node, &idle, Some(Misfit::VolumeNodeAffinity)).unwrap_err();
        assert_eq!(volume.to_string(), "node(s) had volume node affinity conflict");
        let avoided = filter(&pod, &node, &idle, Some(Misfit::AntiAffinity)).unwrap_err();
        assert_eq!(
            (avoided.clone(), avoided.to_string()),
            (Misfit::AntiAffinity, "node(s) didn't match pod anti-affinity rules".into())
        );
    }

    #[test]
    fn a_pod_that_fits_nowhere_gets_the_schedulers_message() {
        let pod = launcher(4);
        let nodes = [gpu_node("gpu-1", H100, 2), gpu_node("gpu-2", H100, 2), gpu_node("cpu-1", "none", 0)];
        let requested = Requested::default();
        let mut rng = actor_stream(1, "scheduler");
        let nodes: Vec<_> = nodes.iter().map(|n| (n, &requested)).collect();
        let (verdict, sweep) = search(&pod, &nodes, 0, |_| None, (&mut NodeVerdicts::default(), 0), &mut rng);
        assert_eq!(sweep, Sweep { start: 0, processed: 3 }, "a pod that fits nowhere was filtered on every node");
        let verdict = verdict.unwrap_err();
        assert_eq!(
            verdict.message,
            format!("0/3 nodes are available: 1 node(s) had untolerated taint {{none: }}, 2 Insufficient {H100}.")
        );
    }

    #[test]
    fn what_bound_pods_request_is_counted_by_resource_number() {
        let nodes = [gpu_node("gpu-1", H100, 8), gpu_node("gpu-2", H100, 8)];
        let mut cache = NodeVerdicts::default();
        // Units bound before the cache ever saw a node: the numbers are shared, whoever gives them first.
        let mut seven = Requested::default();
        seven.add(&launcher(7), cache.resources_mut());
        let idle = Requested::default();
        let mut rng = actor_stream(1, "scheduler");
        let pairs: Vec<_> = nodes.iter().zip([&seven, &idle]).collect();
        let (verdict, _) = search(&launcher(2), &pairs, 0, |_| None, (&mut cache, 0), &mut rng);
        assert_eq!(verdict, Ok("gpu-2"), "one unit left on gpu-1");
        let mut six = Requested::default();
        six.add(&launcher(6), cache.resources_mut());
        let pairs: Vec<_> = nodes.iter().zip([&seven, &six]).collect();
        let (verdict, _) = search(&launcher(3), &pairs, 0, |_| None, (&mut cache, 0), &mut rng);
        assert_eq!(verdict.unwrap_err().message, format!("0/2 nodes are available: 2 Insufficient {H100}."));
        six.remove(&launcher(6), cache.resources());
        let pairs: Vec<_> = nodes.iter().zip([&seven, &six]).collect();
        let (verdict, _) = search(&launcher(3), &pairs, 0, |_| None, (&mut cache, 0), &mut rng);
        assert_eq!(verdict, Ok("gpu-2"), "the units went with the pod");
    }

    #[test]
    fn requests_are_read_by_position_through_node_list_changes() {
        let [a, b, c] = ["gpu-a", "gpu-b", "gpu-c"].map(|name| gpu_node(name, H100, 8));
        let mut resources = Resources::default();
        let h100 = Some(resources.id(H100));
        let mut requests = NodeRequests::default();
        // Counted before any search saw the node.
        requests.entry("gpu-b").add(&launcher(2), &mut resources);
        let units = |requests: &NodeRequests, position| requests.at(position).units(h100);
        requests.sync(&[&a, &b], 0);
        assert_eq!((units(&requests, 0), units(&requests, 1)), (0, 2));
        // Counted while the list stands: read at once.
        requests.entry("gpu-a").add(&launcher(1), &mut resources);
        assert_eq!(units(&requests, 0), 1);
        // A node added in between moves positions; the counts stay with their nodes.
        requests.sync(&[&a, &c, &b], 1);
        assert_eq!([0, 1, 2].map(|position| units(&requests, position)), [1, 0, 2]);
        requests.entry("gpu-c").add(&launcher(3), &mut resources);
        requests.get_mut("gpu-b").expect("counted").remove(&launcher(2), &resources);
        assert_eq!([0, 1, 2].map(|position| units(&requests, position)), [1, 3, 0]);
        // A node gone keeps its count (its pods are still bound until they are deleted).
        requests.sync(&[&a, &b], 2);
        assert_eq!((units(&requests, 0), units(&requests, 1)), (1, 0));
        assert_eq!(requests.get("gpu-c").map(|r| r.units(h100)), Some(3));
    }

    #[test]
    fn the_least_requested_node_wins_and_ties_are_drawn_from_the_stream() {
        let pod = launcher(1);
        let nodes = [gpu_node("gpu-1", H100, 8), gpu_node("gpu-2", H100, 8), gpu_node("gpu-3", H100, 8)];
        let loaded = Requested { cpu_millis: 32_000, ..Requested::default() };
        let idle = Requested::default();
        let nodes: Vec<_> = nodes.iter().zip([&loaded, &idle, &idle]).collect();
        let mut picks = BTreeMap::new();
        let mut rng = actor_stream(3, "scheduler");
        for _ in 0..200 {
            let node = search(&pod, &nodes, 0, |_| None, (&mut NodeVerdicts::default(), 0), &mut rng).0.unwrap();
            *picks.entry(node).or_insert(0) += 1;
        }
        assert!(!picks.contains_key("gpu-1"), "the loaded node loses");
        assert!(picks["gpu-2"] > 60 && picks["gpu-3"] > 60, "ties split: {picks:?}");
        let mut again = actor_stream(3, "scheduler");
        let first = search(&pod, &nodes, 0, |_| None, (&mut NodeVerdicts::default(), 0), &mut again).0.unwrap();
        let mut replay = actor_stream(3, "scheduler");
        assert_eq!(
            search(&pod, &nodes, 0, |_| None, (&mut NodeVerdicts::default(), 0), &mut replay).0.unwrap(),
            first,
            "same stream, same pick"
        );
    }

    #[test]
    fn large_clusters_are_searched_in_part_from_where_the_last_search_stopped() {
        // kube-scheduler's numFeasibleNodesToFind: all of a small cluster, an adaptive share of a large one.
        assert_eq!(feasible_nodes_to_find(99), 99);
        assert_eq!(feasible_nodes_to_find(100), 100, "50% of 100 is below the minimum of 100");
        assert_eq!(feasible_nodes_to_find(1_000), 420, "50 - 1000/125 = 42%");
        assert_eq!(feasible_nodes_to_find(1_523), 578, "50 - 12 = 38% of 1,523");
        assert_eq!(feasible_nodes_to_find(5_000), 500, "50 - 40 = 10%");
        assert_eq!(feasible_nodes_to_find(10_000), 500, "at least 5%");
        let pod = launcher(1);
        let nodes: Vec<Node> = (0..250).map(|i| gpu_node(&format!("gpu-{i:03}"), H100, 8)).collect();
        let idle = Requested::default();
        let full = Requested { cpu_millis: nodes[0].cpu_millis, ..Requested::default() };
        let mut rng = actor_stream(1, "scheduler");
        let wanted = feasible_nodes_to_find(250);
        assert_eq!(wanted, 120, "48% of 250");
        let idle_nodes: Vec<_> = nodes.iter().map(|n| (n, &idle)).collect();
        let (verdict, sweep) = search(&pod, &idle_nodes, 200, |_| None, (&mut NodeVerdicts::default(), 0), &mut rng);
        assert_eq!(sweep, Sweep { start: 200, processed: wanted });
        assert_eq!(sweep.next_start(250), 70, "the search wrapped around");
        let picked: usize = verdict.unwrap()["gpu-".len()..].parse().unwrap();
        assert!(!(70..200).contains(&picked), "only the nodes searched can be picked: {picked}");
        // Nodes that do not fit do not count towards the feasible ones: the search goes on past them.
        let first_full: Vec<_> =
            nodes.iter().enumerate().map(|(i, n)| (n, if i < 100 { &full } else { &idle })).collect();
        let (verdict, sweep) = search(&pod, &first_full, 0, |_| None, (&mut NodeVerdicts::default(), 0), &mut rng);
        assert_eq!(sweep.processed, 100 + wanted);
        assert!(verdict.unwrap() >= "gpu-100");
    }

    #[test]
    fn cached_node_verdicts_say_what_the_filters_say_until_a_node_changes() {
        use k8s_openapi::api::core::v1::Taint;
        let mut nodes: Vec<Node> = (0..12).map(|i| gpu_node(&format!("gpu-{i:02}"), H100, 2)).collect();
        nodes[1].unschedulable = true;
        nodes[2].ready = false;
        nodes[3].taints.push(Taint {
            key: "dedicated".into(),
            value: Some("x".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
        nodes[4].labels.remove(gpuclaim_engine::keys::kubevirt::LABEL_SCHEDULABLE);
        let plain = launcher(1);
        let mut picky = launcher(1);
        std::sync::Arc::make_mut(&mut picky.node_selector).insert("zone".into(), "a".into());
        for node in &mut nodes[6..] {
            node.labels.insert("zone".into(), "a".into());
        }
        let idle = Requested::default();
        let busy = Requested { cpu_millis: nodes[0].cpu_millis, ..Requested::default() };
        // A shared cache, asked for both shapes in turn, answers as a fresh one each time, from every start.
        let mut cache = NodeVerdicts::default();
        let sweep_from = |nodes: &[Node], pod: &Pod, start: usize, cache: &mut NodeVerdicts, written: u64| {
            let with: Vec<_> =
                nodes.iter().enumerate().map(|(i, n)| (n, if i % 5 == 0 { &busy } else { &idle })).collect();
            let (verdict, sweep) = search(pod, &with, start, |_| None, (cache, written), &mut actor_stream(1, "s"));
            (verdict.map(str::to_owned), sweep)
        };
        for start in 0..nodes.len() {
            for pod in [&plain, &picky] {
                let fresh = sweep_from(&nodes, pod, start, &mut NodeVerdicts::default(), 0);
                assert_eq!(sweep_from(&nodes, pod, start, &mut cache, 0), fresh, "start {start}");
            }
        }
        let everywhere_else = |nodes: &[Node], cache: &mut NodeVerdicts, written: u64| {
            let with: Vec<_> = nodes.iter().map(|n| (n, &busy)).collect();
            search(&plain, &with, 0, |_| None, (cache, written), &mut actor_stream(1, "s")).0.unwrap_err().message
        };
        let before = everywhere_else(&nodes, &mut cache, 0);
        assert!(before.contains("1 node(s) had untolerated taint {dedicated: x}"), "{before}");
        // A node write moves the count: the verdicts are taken again.
        nodes[3].taints.clear();
        nodes[1].unschedulable = false;
        let after = everywhere_else(&nodes, &mut cache, 1);
        assert_eq!(after, everywhere_else(&nodes, &mut NodeVerdicts::default(), 0));
        assert!(!after.contains("taint {dedicated") && !after.contains("were unschedulable"), "{after}");
    }

    #[test]
    fn a_gated_pod_is_not_scheduled() {
        let mut pod = launcher(1);
        pod.scheduling_gates.push("gpu.cozystack.io/placement".into());
        let node = gpu_node("gpu-1", H100, 8);
        let idle = Requested::default();
        let (verdict, _) = search(
            &pod,
            &[(&node, &idle)],
            0,
            |_| None,
            (&mut NodeVerdicts::default(), 0),
            &mut actor_stream(1, "scheduler"),
        );
        let verdict = verdict.unwrap_err();
        assert_eq!(verdict.message, MESSAGE_SCHEDULING_GATED);
    }
}
