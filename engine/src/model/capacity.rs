//! The placement index: free units per class and node, kept in step as claims, pods, nodes and classes change,
//! so placing a pod reads an ordered range instead of scanning every node.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::objects::{Class, Node, Published};
use crate::name::Name;
use crate::scheduling::{matches_node_selector, untolerated_taint};

/// What is taken on one node.
/// Why `units` of a class cannot be placed on one node: too few free units in the class (`NoCapacity`), or enough in
/// total but not on any one node (`Fragmented`). One rule for the order webhook (from the class's published figures)
/// and the controller (from what its pass leaves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortage {
    NoCapacity,
    Fragmented,
}

/// The [`Shortage`] that keeps `units` off every node, given the class's `free` units in total and the most free on
/// one node (`largest`); `None` when they fit on one.
pub fn shortage(units: u64, free: u64, largest: u64) -> Option<Shortage> {
    if free < units {
        Some(Shortage::NoCapacity)
    } else if largest < units {
        Some(Shortage::Fragmented)
    } else {
        None
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// class → units of the claims bound here.
    claim_units: BTreeMap<String, u64>,
    /// resource → units pods take here beyond their VMI's claims on this node: raw-name VMs and other workloads in
    /// full, a migration target until its VMI's claims follow it, a launcher not at all (its claims count). Only
    /// resources some class publishes: placement checks other devices (kvm, tun, vhost-net) for presence only.
    pod_devices: BTreeMap<String, u64>,
    /// CPU and memory requested by every pod bound here and not finished.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// One class's eligible nodes, by free units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ClassIndex {
    by_free: BTreeSet<(u64, Name)>,
    /// node → (free, allocatable) as indexed; looked up by node only (the order is `by_free`'s). Both share one
    /// name per node: moving a node in `by_free` copies no name.
    entries: HashMap<Name, (u64, u64), super::Fixed>,
    allocatable_units: u64,
    free_units: u64,
    /// allocatable units per node → how many nodes have that many: the largest set the class could ever hold.
    allocatables: BTreeMap<u64, u32>,
    /// free units per node → how many nodes have that many free: the buckets a policy walks, and the units stranded
    /// on nodes too small for a claim size, without visiting nodes.
    buckets: BTreeMap<u64, u32>,
}

impl ClassIndex {
    /// Enters a node's (free, allocatable) in the entries and the totals (its place in `by_free` is the caller's).
    fn enter(&mut self, name: Name, free: u64, allocatable: u64) {
        self.entries.insert(name, (free, allocatable));
        self.free_units += free;
        self.allocatable_units += allocatable;
        *self.allocatables.entry(allocatable).or_insert(0) += 1;
        *self.buckets.entry(free).or_insert(0) += 1;
    }

    /// Takes one node with `free` units out of its bucket.
    fn leave_bucket(&mut self, free: u64) {
        let nodes = self.buckets.get_mut(&free).expect("indexed nodes are in their bucket");
        *nodes -= 1;
        if *nodes == 0 {
            self.buckets.remove(&free);
        }
    }
}

/// What `node` offers `class`, `used` units of its resource being taken there (read only for an eligible node):
/// (free, allocatable), if it is eligible.
fn offered(class: &Class, node: &Node, used: impl FnOnce() -> u64) -> Option<(u64, u64)> {
    Capacity::eligible(class, node).then(|| {
        let allocatable = node.devices[&class.resource_name];
        (allocatable.saturating_sub(used()), allocatable)
    })
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Looked up by node only: hashed (see `model::Nested`).
    loads: HashMap<String, NodeLoad, super::Fixed>,
    /// Looked up by class only (on every refresh of a node): hashed.
    classes: HashMap<String, ClassIndex, super::Fixed>,
    /// resource name → the classes that publish it, in name order (two classes may share one resource on different
    /// nodes). Looked up by resource only (every refresh reads what a node's resource has taken): hashed.
    resources: HashMap<String, BTreeSet<String>, super::Fixed>,
}

impl Capacity {
    /// A node may offer a class's units when it is Ready, not cordoned, matches the class's node selector, its
    /// taints are tolerated by the class, and it has the resource.
    pub fn eligible(class: &Class, node: &Node) -> bool {
        node.ready
            && !node.unschedulable
            && node.devices.get(&class.resource_name).is_some_and(|units| *units > 0)
            && matches_node_selector(&class.node_selector, &node.labels)
            && untolerated_taint(&class.tolerations, &node.taints).is_none()
    }

    /// Units of `resource` taken on `node`: claims of every class publishing it, and pods outside claims.
    pub fn used(&self, resource: &str, node: &str) -> u64 {
        let Some(load) = self.loads.get(node) else { return 0 };
        let claims: u64 =
            self.resources.get(resource).into_iter().flatten().filter_map(|class| load.claim_units.get(class)).sum();
        claims + load.pod_devices.get(resource).copied().unwrap_or(0)
    }

    /// Free units of `class` on `node`, or `None` when the node does not offer the class.
    pub fn free(&self, class: &str, node: &str) -> Option<u64> {
        self.classes.get(class)?.entries.get(node).map(|(free, _)| *free)
    }

    /// Nodes offering `class` with at least `units` free, fewest free first (best fit), then by name.
    pub fn candidates<'a>(&'a self, class: &str, units: u64) -> impl Iterator<Item = (u64, &'a str)> + 'a {
        self.classes
            .get(class)
            .into_iter()
            .flat_map(move |index| index.by_free.range((units, Name::default())..))
            .map(|(free, node)| (*free, node.as_str()))
    }

    /// Nodes offering `class`, most free first.
    pub fn most_free_first<'a>(&'a self, class: &str) -> impl Iterator<Item = (u64, &'a str)> + 'a {
        self.classes
            .get(class)
            .into_iter()
            .flat_map(|index| index.by_free.iter().rev())
            .map(|(free, node)| (*free, node.as_str()))
    }

    /// How many nodes offer `class`.
    pub fn node_count(&self, class: &str) -> usize {
        self.classes.get(class).map_or(0, |index| index.entries.len())
    }

    /// The most units any one node could ever give `class` (its largest allocatable).
    pub fn largest_allocatable(&self, class: &str) -> u64 {
        self.classes.get(class).and_then(|index| index.allocatables.last_key_value()).map_or(0, |(units, _)| *units)
    }

    /// What the class publishes: units on its nodes, free units, the most free on one node, and the free units on
    /// nodes with fewer free than `typical` (the class's most common claim size; `None`: it holds no claims).
    pub fn published(&self, class: &str, typical: Option<u32>) -> Published {
        let Some(index) = self.classes.get(class) else { return Published::default() };
        Published {
            allocatable_units: index.allocatable_units,
            free_units: index.free_units,
            largest_free_on_node: index.by_free.last().map_or(0, |(free, _)| *free),
            fragmented_units: typical.map_or(0, |size| {
                let below = index.buckets.range(1..u64::from(size));
                below.map(|(free, nodes)| free * u64::from(*nodes)).sum()
            }),
        }
    }

    /// The distinct free-unit figures of the nodes offering `class` with at least `units` free, ascending, with how
    /// many nodes have each: the buckets a placement policy walks.
    pub fn buckets<'a>(&'a self, class: &str, units: u64) -> impl DoubleEndedIterator<Item = (u64, u32)> + 'a {
        self.classes.get(class).into_iter().flat_map(move |index| index.buckets.range(units..)).map(|(f, n)| (*f, *n))
    }

    /// Nodes offering `class` with exactly `free` units free, by name.
    pub fn in_bucket<'a>(&'a self, class: &str, free: u64) -> impl Iterator<Item = &'a str> + 'a {
        self.classes
            .get(class)
            .into_iter()
            .flat_map(move |index| index.by_free.range((free, Name::default())..))
            .take_while(move |(f, _)| *f == free)
            .map(|(_, node)| node.as_str())
    }

    pub fn load(&self, node: &str) -> Option<&NodeLoad> {
        self.loads.get(node)
    }

    /// Whether some class publishes `resource` (the devices the index counts).
    pub fn publishes(&self, resource: &str) -> bool {
        self.resources.contains_key(resource)
    }

    pub fn classes_of(&self, resource: &str) -> impl Iterator<Item = &str> {
        self.resources.get(resource).into_iter().flatten().map(String::as_str)
    }

    /// Re-reads which classes publish which resource (after a class changed).
    pub(super) fn set_resources<'a>(&mut self, classes: impl Iterator<Item = &'a Class>) {
        self.resources.clear();
        self.classes.clear();
        for class in classes {
            self.resources.entry(class.resource_name.clone()).or_default().insert(class.name.clone());
            self.classes.insert(class.name.clone(), ClassIndex::default());
        }
    }

    /// Re-indexes every class publishing `resource` on `node` (`None`: the node is gone).
    pub(super) fn refresh_resource(
        &mut self,
        resource: &str,
        classes: &BTreeMap<String, Class>,
        node_name: &str,
        node: Option<&Node>,
    ) {
        let used = self.used(resource, node_name);
        // The class indexes are refreshed beside the set naming them (two fields), so the walk copies no name.
        let Some(publishing) = self.resources.get(resource) else { return };
        for class in publishing {
            refresh_class(&mut self.classes, &classes[class], node_name, node, used);
        }
    }

    /// Re-indexes `class` on `node` (`None`: the node is gone).
    pub(super) fn refresh(&mut self, class: &Class, node_name: &str, node: Option<&Node>) {
        let used = self.used(&class.resource_name, node_name);
        refresh_class(&mut self.classes, class, node_name, node, used);
    }

    /// Indexes `class` over `nodes`, given in name order, on an index built afresh (none of them indexed yet): what
    /// [`Capacity::refresh`] of each node gives, but ordered once instead of a tree insertion per node (reports
    /// build an index from objects at every sample, and most nodes tie on their free units, so each insertion
    /// compared node names).
    pub(super) fn index_class<'a>(&mut self, class: &Class, nodes: impl Iterator<Item = &'a Node>) {
        // (free, allocatable, node) of each node offering the class, in name order.
        let nodes_offering: Vec<(u64, u64, Name)> = nodes
            .filter_map(|node| {
                let (free, allocatable) = offered(class, node, || self.used(&class.resource_name, &node.name))?;
                Some((free, allocatable, Name::from(node.name.as_str())))
            })
            .collect();
        let index = self.classes.entry(class.name.clone()).or_default();
        debug_assert!(index.entries.is_empty(), "a class is indexed whole only on a fresh index");
        let mut by_free = Vec::with_capacity(nodes_offering.len());
        for (free, allocatable, name) in nodes_offering {
            index.enter(name.clone(), free, allocatable);
            by_free.push((free, name));
        }
        // A stable sort by free units keeps nodes of equal free units in name order: `by_free`'s order, so the set
        // is built from sorted input.
        by_free.sort_by_key(|(free, _)| *free);
        index.by_free = by_free.into_iter().collect();
    }

    /// The load of `node`, created empty if missing (its name is copied only then).
    fn load_mut(&mut self, node: &str) -> &mut NodeLoad {
        if !self.loads.contains_key(node) {
            self.loads.insert(node.to_owned(), NodeLoad::default());
        }
        self.loads.get_mut(node).expect("inserted above")
    }

    pub(super) fn add_claim_units(&mut self, node: &str, class: &str, units: u32, adding: bool) {
        let load = self.load_mut(node);
        step(&mut load.claim_units, class, u64::from(units), adding);
    }

    /// Counts (or uncounts) the CPU and memory of a pod bound to `node`.
    pub(super) fn add_pod_load(&mut self, node: &str, cpu_millis: u64, memory_bytes: u64, adding: bool) {
        let load = self.load_mut(node);
        if adding {
            load.cpu_millis += cpu_millis;
            load.memory_bytes += memory_bytes;
        } else {
            load.cpu_millis = load.cpu_millis.checked_sub(cpu_millis).expect("pod CPU counted once");
            load.memory_bytes = load.memory_bytes.checked_sub(memory_bytes).expect("pod memory counted once");
        }
    }

    /// Counts (or uncounts) devices pods take on `node` beyond what their VMI's claims there already count.
    pub(super) fn add_pod_devices(&mut self, node: &str, devices: &BTreeMap<String, u64>, adding: bool) {
        let load = self.load_mut(node);
        for (resource, units) in devices {
            step(&mut load.pod_devices, resource, *units, adding);
        }
    }
}

/// Re-indexes `class` on `node` (`None`: the node is gone), with `used` units of the class's resource taken there.
fn refresh_class(
    classes: &mut HashMap<String, ClassIndex, super::Fixed>,
    class: &Class,
    node_name: &str,
    node: Option<&Node>,
    used: u64,
) {
    let offered = node.and_then(|node| offered(class, node, || used));
    if !classes.contains_key(&class.name) {
        classes.insert(class.name.clone(), ClassIndex::default());
    }
    let index = classes.get_mut(&class.name).expect("inserted above");
    let indexed = index.entries.get_key_value(node_name).map(|(name, entry)| (name.clone(), *entry));
    if indexed.as_ref().map(|(_, entry)| *entry) == offered {
        return;
    }
    if let (Some((name, (old_free, allocatable))), Some((free, new_allocatable))) = (&indexed, offered)
        && *allocatable == new_allocatable
    {
        // Only the free units moved: the node's shared name is moved between the ordered entries.
        index.by_free.remove(&(*old_free, name.clone()));
        index.by_free.insert((free, name.clone()));
        index.entries.get_mut(node_name).expect("indexed above").0 = free;
        index.free_units = index.free_units - old_free + free;
        index.leave_bucket(*old_free);
        *index.buckets.entry(free).or_insert(0) += 1;
        return;
    }
    if let Some((name, (free, allocatable))) = indexed {
        index.entries.remove(node_name);
        index.by_free.remove(&(free, name));
        index.leave_bucket(free);
        index.free_units -= free;
        index.allocatable_units -= allocatable;
        let nodes = index.allocatables.get_mut(&allocatable).expect("indexed allocatables are counted");
        *nodes -= 1;
        if *nodes == 0 {
            index.allocatables.remove(&allocatable);
        }
    }
    if let Some((free, allocatable)) = offered {
        let name = Name::from(node_name);
        index.by_free.insert((free, name.clone()));
        index.enter(name, free, allocatable);
    }
}

fn step(units: &mut BTreeMap<String, u64>, key: &str, delta: u64, adding: bool) {
    if adding {
        match units.get_mut(key) {
            Some(total) => *total += delta,
            None => {
                units.insert(key.to_owned(), delta);
            }
        }
        return;
    }
    let total = units.get_mut(key).expect("units are uncounted only after being counted");
    *total = total.checked_sub(delta).expect("units counted never go below zero");
    if *total == 0 {
        units.remove(key);
    }
}
