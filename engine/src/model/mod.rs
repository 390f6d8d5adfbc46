//! The compact domain model the engine decides on: exactly what the rules read, indexed for them.
//!
//! The twin keeps its world in these types, so its hot paths never build Kubernetes objects; the live adapter and
//! `gpuclaim review` fill them from Kubernetes objects through [`crate::convert`]. Every change goes through a
//! `upsert_*` or `remove_*` method, which keeps the indexes (units per tenant, the placement index, the gated
//! queue) in step with the objects, so no decision scans what an index can answer.

mod capacity;
mod history;
mod nodes;
mod objects;
mod sizes;
mod tenant;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub use capacity::{Capacity, NodeLoad, Shortage, shortage};
pub use history::Change;
pub use objects::*;
pub use sizes::{SEEN_ARRIVAL_WEIGHT, SEEN_DECAY_SHIFT, SizesSeen, typical_size};
pub use tenant::{BudgetExceeded, NotEntitled, Tenant, check_budget, check_entitlement};

pub use crate::name::Name;

use crate::keys;
use crate::scheduling::is_pinned_to;

/// The world the engine decides on: what the webhooks' and the controller's caches hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    classes: BTreeMap<String, Class>,
    tenants: BTreeMap<String, Tenant>,
    pub settings: Settings,
    nodes: nodes::Nodes,
    /// namespace → name → pod; only pods the controller watches (those with the claims label) and pods that take
    /// devices or CPU on nodes need to be here.
    /// Hashed (see [`Nested`]): looked up on every event, listed rarely (a drain, a resync), sorted then.
    pods: Nested<Pod>,
    /// (created, namespace, name) of launcher and volume-binder pods holding the placement gate: the queue the
    /// reconciler serves first come, first served.
    gated: BTreeSet<(Time, Name, Name)>,
    vmis: Nested<Vmi>,
    usages: Nested<Usage>,
    /// Nodes that are NotReady, deleted, or named by a claim but never seen: where an unattached claim needs
    /// another node.
    unavailable: BTreeSet<String>,
    /// namespace → VMI → the claims attached to that run or ordered for it (template claims' owner). Keyed in two
    /// levels (here and below) so a lookup borrows its key instead of building an owned tuple.
    claims_by_run: Nested<NameSet>,
    /// node → (namespace, claim) of the claims bound there (looked up by node only: hashed, see [`Nested`]).
    claims_by_node: HashMap<Name, BTreeSet<(Name, Name)>, Fixed>,
    /// (namespace, claim) of held claims with no node that are not being deleted: the claims' queue.
    pending_held: BTreeSet<(Name, Name)>,
    /// namespace → claim → names of all its usage records, open or closed (they go with the claim).
    usages_by_claim: Nested<NameSet>,
    /// namespace → claim → names of its open usage records (one, or two while a migration moves it). Hashed (see
    /// [`Nested`]): looked up for every claim a pass visits and on every record write; only a full pass lists it,
    /// sorted then.
    open_usages: Nested<NameSet>,
    capacity: Capacity,
    /// namespace → VMI → node → resource → units of the claims attached to that VMI on that node: what the VMI's
    /// pods there take through claims rather than on their own.
    vmi_claim_units: Nested<BTreeMap<Name, BTreeMap<String, u64>>>,
    /// namespace → VMI → its pods, so their device counts follow its claims.
    pods_by_vmi: Nested<NameSet>,
    /// node → (namespace, pod) of the pods occupying it (bound there, or pinned there once ungated): what a
    /// controller confirming a pin lists (looked up by node only: hashed).
    pods_by_node: HashMap<Name, BTreeSet<(Name, Name)>, Fixed>,
    /// namespace → pod → (node, devices counted for it): exactly what to uncount when it changes. Only resources a
    /// class publishes are counted (see `devices_to_count`).
    pod_devices: Nested<(Name, BTreeMap<String, u64>)>,
    /// The placement side (`capacity`, `vmi_claim_units`, `pod_devices`) is not kept: a view that only stores
    /// objects for rules that never place — the twin's API server, whose store every change passes through once
    /// more before the controller's cache sees it. [`View::placement_index`] builds the index when asked.
    objects_only: bool,
    /// class → claim size → how many claims of that size are stored.
    sizes_held: sizes::Held,
    /// The sizes each class has seen arrive, decayed (history: ignored by `==`).
    sizes_seen: sizes::Seen,
    /// What it remembers of its changes (ignored by `==`).
    history: history::History,
}

impl View {
    pub fn class(&self, name: &str) -> Option<&Class> {
        self.classes.get(name)
    }

    pub fn classes(&self) -> impl Iterator<Item = &Class> {
        self.classes.values()
    }

    pub fn tenant(&self, namespace: &str) -> Option<&Tenant> {
        self.tenants.get(namespace)
    }

    pub fn tenants(&self) -> impl Iterator<Item = (&str, &Tenant)> {
        self.tenants.iter().map(|(name, tenant)| (name.as_str(), tenant))
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Claim> {
        self.tenants.get(namespace)?.claim(name)
    }

    /// Every claim, by namespace then name.
    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.tenants.values().flat_map(Tenant::claims)
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.get(namespace)?.get(name)
    }

    /// Every pod, by namespace then name.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        sorted(&self.pods, |pod| (&pod.namespace, &pod.name))
    }

    /// Gated launcher and volume-binder pods, oldest first.
    pub fn gated_pods(&self) -> impl Iterator<Item = &Pod> {
        self.gated.iter().filter_map(|(_, namespace, name)| self.pod(namespace, name))
    }

    pub fn vmi(&self, namespace: &str, name: &str) -> Option<&Vmi> {
        self.vmis.get(namespace)?.get(name)
    }

    /// Every VMI, by namespace then name.
    pub fn vmis(&self) -> impl Iterator<Item = &Vmi> {
        sorted(&self.vmis, |vmi| (&vmi.namespace, &vmi.name))
    }

    pub fn usage(&self, namespace: &str, name: &str) -> Option<&Usage> {
        self.usages.get(namespace)?.get(name)
    }

    /// Every usage record, by namespace then name.
    pub fn usages(&self) -> impl Iterator<Item = &Usage> {
        sorted(&self.usages, |usage| (&usage.namespace, &usage.name))
    }

    /// The claims attached to, or ordered for, run `vmi`.
    pub fn claims_of_run(&self, namespace: &str, vmi: &str) -> impl Iterator<Item = &Claim> {
        let names = nested(&self.claims_by_run, namespace, vmi);
        names.into_iter().flatten().filter_map(move |name| self.claim(namespace, name))
    }

    /// The claims bound to `node`.
    pub fn claims_on_node(&self, node: &str) -> impl Iterator<Item = &Claim> {
        self.claims_by_node.get(node).into_iter().flatten().filter_map(|(namespace, name)| self.claim(namespace, name))
    }

    /// Held claims waiting for a node (no node, not being deleted).
    pub fn pending_held_claims(&self) -> impl Iterator<Item = &Claim> {
        self.pending_held.iter().filter_map(|(namespace, name)| self.claim(namespace, name))
    }

    /// Whether a node cannot hold claims now: NotReady, deleted, or never seen.
    pub fn is_unavailable(&self, node: &str) -> bool {
        self.unavailable.contains(node)
    }

    /// The pods a VMI controls (launcher, volume binder, migration target).
    pub fn vmi_pods(&self, namespace: &str, vmi: &str) -> impl Iterator<Item = &Pod> {
        nested(&self.pods_by_vmi, namespace, vmi)
            .into_iter()
            .flatten()
            .filter_map(move |name| self.pod(namespace, name))
    }

    /// The most common size among the claims of `class` stored now (ties: the larger); `None` when it has none.
    pub fn typical_claim_size(&self, class: &str) -> Option<u32> {
        sizes::typical(&self.sizes_held, class)
    }

    /// Claim size → how many claims of `class` of that size are stored.
    pub fn claim_sizes(&self, class: &str) -> Option<&BTreeMap<u32, u32>> {
        self.sizes_held.get(class)
    }

    /// The sizes of the claims of `class` this view has seen arrive, decayed (its history: a view filled afresh has
    /// seen only what it holds).
    pub fn sizes_seen(&self, class: &str) -> Option<&SizesSeen> {
        self.sizes_seen.of(class)
    }

    /// What placement reads of `node`: the node (its resourceVersion aside) and what is taken there. Two views that
    /// agree on it decide the same about the node, whatever else differs in the objects behind it (a confirmed pin
    /// is decided again only when it differs).
    pub fn node_standing(&self, node: &str) -> (Option<Node>, Option<capacity::NodeLoad>) {
        let node_now = self.node(node).map(|n| Node { resource_version: String::new(), ..n.clone() });
        (node_now, self.capacity.load(node).cloned())
    }

    /// The pods occupying `node` (bound there, or pinned there once ungated), in namespace/name order.
    pub fn pods_on_node(&self, node: &str) -> impl Iterator<Item = &Pod> {
        self.pods_by_node.get(node).into_iter().flatten().filter_map(|(namespace, name)| self.pod(namespace, name))
    }

    /// Units per resource of the claims attached to `vmi` on `node`.
    pub fn vmi_claim_units(&self, namespace: &str, vmi: &str, node: &str) -> Option<&BTreeMap<String, u64>> {
        nested(&self.vmi_claim_units, namespace, vmi)?.get(node)
    }

    /// The node and devices the placement index counts for a pod beyond its VMI's claims.
    pub fn counted_devices(&self, namespace: &str, pod: &str) -> Option<(&Name, &BTreeMap<String, u64>)> {
        nested(&self.pod_devices, namespace, pod).map(|(node, devices)| (node, devices))
    }

    /// The placement index as kept. Empty on a view that keeps objects only (see [`View::keep_placement`]); use
    /// [`View::placement_index`] where either kind of view may be asked.
    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    /// A number that moves whenever something changes that could let a waiting pod through or change why it waits
    /// (capacity freed, a node, class, budget or entitlement changed, a waiter stored, a run ended or went); changes
    /// that only take leave it. Equal figures at two moments: every waiter refused at the first is refused at the
    /// second, for the same reason unless its namespace's bound units changed.
    pub fn generation(&self) -> u64 {
        self.history.generation()
    }

    /// The edition a gated pod was last stored at: moves with every store of the pod, whatever changed.
    pub fn gated_edition(&self, namespace: &str, pod: &str) -> Option<u64> {
        self.history.edition(namespace, pod)
    }

    /// What changed since `generation`, oldest first; `None` when the view no longer remembers that far back
    /// (then anything may have).
    pub fn changes_since(&self, generation: u64) -> Option<impl Iterator<Item = &Change>> {
        self.history.since(generation)
    }

    /// The placement index: the one kept, or on a view that keeps objects only, one built from its classes, nodes,
    /// claims and the pods occupying nodes (what a controller's informers would build from a LIST).
    pub fn placement_index(&self) -> std::borrow::Cow<'_, Capacity> {
        if !self.objects_only {
            return std::borrow::Cow::Borrowed(&self.capacity);
        }
        // Built straight from the objects, copying none (reports sample it often): what the kept index counts.
        let mut built = Capacity::default();
        built.set_resources(self.classes.values());
        // (namespace, run, node, resource) → units of the claims attached to the run there, as `vmi_claim_units`.
        let mut covered: HashMap<(&str, &str, &str, &str), u64, Fixed> = HashMap::default();
        // In the map's order, not by name: the counts are sums, and sorting every tenant's claims was a tenth of a
        // sample's cost.
        for claim in self.tenants.values().flat_map(|tenant| tenant.claims.values()) {
            let Some(node) = claim.node.as_deref() else { continue };
            built.add_claim_units(node, &claim.class, claim.count, true);
            if let (Some(class), Some(run)) = (self.classes.get(claim.class.as_str()), &claim.attached_to) {
                let key = (claim.namespace.as_str(), run.name.as_str(), node, class.resource_name.as_str());
                *covered.entry(key).or_default() += u64::from(claim.count);
            }
        }
        for pod in self.pods.values().flat_map(HashMap::values) {
            let Some(node) = occupied_node(pod) else { continue };
            built.add_pod_load(node, pod.cpu_millis, pod.memory_bytes, true);
            let run = claims_run(pod);
            let through_claims = |resource: &str| covered.get(&(pod.namespace.as_str(), run?, node, resource)).copied();
            let devices: BTreeMap<String, u64> =
                beyond_claims(pod, &built, through_claims).map(|(resource, units)| (resource.clone(), units)).collect();
            built.add_pod_devices(node, &devices, true);
        }
        for class in self.classes.values() {
            built.index_class(class, self.nodes.iter());
        }
        std::borrow::Cow::Owned(built)
    }

    /// Whether the placement index is kept (see [`View::keep_placement`]).
    pub fn keeps_placement(&self) -> bool {
        !self.objects_only
    }

    /// Whether the placement index is kept (the default) or only objects and their lookups (`false`): turning it
    /// back on rebuilds it from the objects.
    pub fn keep_placement(&mut self, kept: bool) {
        if self.objects_only != kept {
            return;
        }
        self.objects_only = !kept;
        self.history.changed(Change::Everything);
        self.reindex_all();
    }

    pub fn upsert_class(&mut self, class: Class) {
        // A stored class is replaced in place: a status write (every pass that moves units publishes one) then
        // copies no name for the key.
        if let Some(old) = self.classes.get_mut(class.name.as_str()) {
            // A status write carries the stored shared maps. `Arc`'s `==` already compares addresses first when
            // the contents are `Eq` (the selector); tolerations are only `PartialEq`, so that is done here.
            let placement_unchanged = old.resource_name == class.resource_name
                && old.node_selector == class.node_selector
                && (Arc::ptr_eq(&old.tolerations, &class.tolerations) || old.tolerations == class.tolerations);
            let rules = (old.mode, old.max_count, old.placement);
            if !placement_unchanged || rules != (class.mode, class.max_count, class.placement) {
                self.history.changed(Change::Everything);
            }
            *old = class;
            if !placement_unchanged {
                self.reindex_all();
            }
            return;
        }
        self.classes.insert(class.name.clone(), class);
        self.history.changed(Change::Everything);
        self.reindex_all();
    }

    pub fn remove_class(&mut self, name: &str) -> Option<Class> {
        let class = self.classes.remove(name)?;
        self.history.changed(Change::Everything);
        self.reindex_all();
        Some(class)
    }

    /// Stores a claim, keeping the tenant's units and the placement index in step.
    pub fn upsert_claim(&mut self, claim: Claim) {
        if self.claim(&claim.namespace, &claim.name).is_some() {
            let (namespace, name) = (claim.namespace.clone(), claim.name.clone());
            self.edit_claim(&namespace, &name, |stored| *stored = claim);
            return;
        }
        let indexed = ClaimIndexed::of(&claim);
        let (namespace, name) = (claim.namespace.clone(), claim.name.clone());
        let tenant = match self.tenants.get_mut(namespace.as_str()) {
            Some(tenant) => tenant,
            None => self.tenants.entry(namespace.to_string()).or_default(),
        };
        tenant.claims.insert(name.clone(), claim);
        self.sizes_seen.arrived(&indexed.class, indexed.count);
        sizes::hold(&mut self.sizes_held, &indexed.class, indexed.count, true);
        self.list_claim(&namespace, &name, &indexed, true);
        self.count_claim(&namespace, &indexed, true);
    }

    pub fn remove_claim(&mut self, namespace: &str, name: &str) -> Option<Claim> {
        let old = self.tenants.get_mut(namespace)?.claims.remove(name)?;
        self.history.changed(match &old.node {
            Some(node) => Change::Node(node.clone()),
            None => Change::Namespace(old.namespace.clone()),
        });
        let indexed = ClaimIndexed::of(&old);
        sizes::hold(&mut self.sizes_held, &indexed.class, indexed.count, false);
        self.count_claim(&old.namespace, &indexed, false);
        self.list_claim(&old.namespace, &old.name, &indexed, false);
        Some(old)
    }

    /// Edits a stored claim in place. What the indexes read is compared before and after: the units it counts
    /// (class, count, node, attachment) and the lists it is on (its runs, its node, the pending queue) are redone only
    /// where they changed, so a status phase, condition or resourceVersion change costs no index work. Returns
    /// whether the claim exists.
    pub fn edit_claim(&mut self, namespace: &str, name: &str, edit: impl FnOnce(&mut Claim)) -> bool {
        let Some(claim) = self.tenants.get_mut(namespace).and_then(|t| t.claims.get_mut(name)) else { return false };
        let before = ClaimIndexed::of(claim);
        let deleting_before = claim.deleting;
        edit(claim);
        if claim.deleting != deleting_before {
            self.history.changed(Change::Namespace(claim.namespace.clone()));
        }
        // Most edits are status and revision changes: compared borrowed, they copy nothing.
        if before.counted() == ClaimIndexed::counted_of(claim) && before.listed() == ClaimIndexed::listed_of(claim) {
            return true;
        }
        let after = ClaimIndexed::of(claim);
        if !before.only_takes(&after) {
            self.history.changed(match &before.node {
                Some(node) => Change::Node(node.clone()),
                None => Change::Namespace(claim.namespace.clone()),
            });
        }
        let (namespace, name) = (&claim.namespace.clone(), &claim.name.clone());
        if (&before.class, before.count) != (&after.class, after.count) {
            sizes::hold(&mut self.sizes_held, &before.class, before.count, false);
            sizes::hold(&mut self.sizes_held, &after.class, after.count, true);
        }
        if before.counted() != after.counted() {
            self.count_claim(namespace, &before, false);
            self.count_claim(namespace, &after, true);
        }
        if before.listed() != after.listed() {
            self.list_claim(namespace, name, &before, false);
            self.list_claim(namespace, name, &after, true);
        }
        true
    }

    /// Keeps the claim lookups by run, by node and of the pending queue.
    fn list_claim(&mut self, namespace: &Name, name: &Name, claim: &ClaimIndexed, adding: bool) {
        // The run it is attached to, and the run that ordered it when that is another (no list built per write).
        let ordered_by = claim.owner_vmi.as_ref().filter(|owner| claim.attached_to.as_ref() != Some(*owner));
        for run in claim.attached_to.iter().chain(ordered_by) {
            edit_nested_set(&mut self.claims_by_run, namespace, run, name, adding);
        }
        let key = || (namespace.clone(), name.clone());
        if let Some(node) = &claim.node {
            edit_set(&mut self.claims_by_node, node, key(), adding);
        }
        if claim.pending_held {
            if adding {
                self.pending_held.insert(key());
            } else {
                self.pending_held.remove(&key());
            }
        }
    }

    /// Counts (or uncounts) a claim's units: the tenant's ordered and bound units, its node's free units, the units
    /// its VMI's pods there need not count themselves.
    fn count_claim(&mut self, namespace: &Name, claim: &ClaimIndexed, adding: bool) {
        let tenant = match self.tenants.get_mut(namespace.as_str()) {
            Some(tenant) => tenant,
            None => self.tenants.entry(namespace.to_string()).or_default(),
        };
        tenant.count(&claim.class, claim.count, claim.node.is_some(), adding);
        self.count_claim_units(namespace, claim, adding);
    }

    /// The placement side of [`View::count_claim`]: node units and the units attached to the claim's VMI there.
    fn count_claim_units(&mut self, namespace: &Name, claim: &ClaimIndexed, adding: bool) {
        let Some(node) = claim.node.as_ref() else { return };
        if adding && !self.nodes.contains(node) {
            self.unavailable.insert(node.to_string());
        }
        if self.objects_only {
            return;
        }
        self.capacity.add_claim_units(node, &claim.class, claim.count, adding);
        let Some(class) = self.classes.get(claim.class.as_str()) else { return };
        if let Some(vmi) = &claim.attached_to {
            let by_node = nested_entry(&mut self.vmi_claim_units, namespace, vmi);
            let units = by_node.entry(node.clone()).or_default();
            let resource = class.resource_name.as_str();
            if adding {
                *entry_of(units, resource) += u64::from(claim.count);
            } else {
                let total = units.get_mut(resource).expect("attached units counted once");
                *total = total.checked_sub(u64::from(claim.count)).expect("attached units counted once");
                if *total == 0 {
                    units.remove(resource);
                }
                if units.is_empty() {
                    by_node.remove(node);
                }
                prune(&mut self.vmi_claim_units, namespace, vmi, BTreeMap::is_empty);
            }
            self.recount_vmi_pods(namespace, vmi);
        }
        // The class is looked up again: the recount above needed the view whole.
        let class = &self.classes[claim.class.as_str()];
        self.capacity.refresh_resource(&class.resource_name, &self.classes, node, self.nodes.get(node));
    }

    /// Edits a stored pod in place, re-indexing only when what an index reads changed (its gate, owner, the node
    /// it occupies, its requests, the claims label): a phase, condition or resourceVersion change costs no index work.
    pub fn edit_pod(&mut self, namespace: &str, name: &str, edit: impl FnOnce(&mut Pod)) -> bool {
        self.edit_pod_counting(namespace, name, edit).is_some()
    }

    /// [`View::edit_pod`], saying whether the devices counted for the pod beyond its claims moved (their node or
    /// units; `None`: no such pod).
    fn edit_pod_counting(&mut self, namespace: &str, name: &str, edit: impl FnOnce(&mut Pod)) -> Option<bool> {
        let pod = self.pods.get_mut(namespace).and_then(|pods| pods.get_mut(name))?;
        let before = PodIndexed::of(pod);
        // The count of its devices reads, beside what `PodIndexed` holds, the devices (shared, never edited in
        // place: a new pod version from a watch or a write carries the same allocation) and the claims label. The
        // rest it reads (its VMI's claim units there, which resources classes publish) recounts the pod when it
        // changes, so with these two the same, the count stands without being worked out again.
        let counted_inputs =
            (!self.objects_only).then(|| (Arc::clone(&pod.devices), Arc::clone(&pod.labels), is_claims_pod(pod)));
        edit(pod);
        let pod = &self.pods[namespace][name];
        self.history.stored(&pod.namespace, &pod.name, holds_placement_gate(pod));
        let counted_inputs_same = counted_inputs.is_none_or(|(devices, labels, claims_pod)| {
            Arc::ptr_eq(&devices, &pod.devices)
                && (Arc::ptr_eq(&labels, &pod.labels) || claims_pod == is_claims_pod(pod))
        });
        // Devices are not part of `PodIndexed` (copying them per edit was most of an edit's cost): what matters is
        // whether the devices counted for the pod would change, and that is compared against the count itself.
        if before.is(pod) && (counted_inputs_same || self.counted_devices_unchanged(namespace, pod)) {
            return Some(false);
        }
        let after = PodIndexed::of(pod);
        let (namespace, name) = (&pod.namespace.clone(), &pod.name.clone());
        let counted_before = self.uncount_pod_devices(namespace, name);
        self.reindex_pod(namespace, name, &before, &after);
        self.count_pod_devices(namespace, name);
        let moved =
            self.counted_devices(namespace, name) != counted_before.as_ref().map(|(node, devices)| (node, devices));
        if let (true, Some((node, _))) = (moved, &counted_before) {
            // Devices counted for it moved or went: units may have come free there.
            self.history.changed(Change::Node(node.clone()));
        }
        Some(moved)
    }

    /// Edits a stored VMI in place (no index reads a VMI).
    pub fn edit_vmi(&mut self, namespace: &str, name: &str, edit: impl FnOnce(&mut Vmi)) -> bool {
        let Some(vmi) = self.vmis.get_mut(namespace).and_then(|vmis| vmis.get_mut(name)) else { return false };
        edit(vmi);
        true
    }

    /// Edits a stored usage record in place, re-indexing only what moved: the open-records index when it closes
    /// (or opens again), both indexes when it names another claim.
    pub fn edit_usage(&mut self, namespace: &str, name: &str, edit: impl FnOnce(&mut Usage)) -> bool {
        let Some(usage) = self.usages.get_mut(namespace).and_then(|usages| usages.get_mut(name)) else {
            return false;
        };
        let (claim_before, open_before) = (usage.claim.clone(), usage.end.is_none());
        edit(usage);
        let (namespace, name, open) = (&usage.namespace, &usage.name, usage.end.is_none());
        if usage.claim != claim_before {
            edit_nested_set(&mut self.usages_by_claim, namespace, &claim_before, name, false);
            edit_nested_set(&mut self.usages_by_claim, namespace, &usage.claim, name, true);
            if open_before {
                edit_nested_set(&mut self.open_usages, namespace, &claim_before, name, false);
            }
            if open {
                edit_nested_set(&mut self.open_usages, namespace, &usage.claim, name, true);
            }
        } else if open != open_before {
            edit_nested_set(&mut self.open_usages, namespace, &usage.claim, name, open);
        }
        true
    }

    /// Sets a class's resourceVersion (no index reads it).
    pub fn set_class_resource_version(&mut self, name: &str, resource_version: String) -> bool {
        let Some(class) = self.classes.get_mut(name) else { return false };
        class.resource_version = resource_version;
        true
    }

    /// Sets a pod's resourceVersion (no index reads it): an API server stamping a write it has already applied.
    pub fn set_pod_resource_version(&mut self, namespace: &str, name: &str, resource_version: Name) -> bool {
        let Some(pod) = self.pods.get_mut(namespace).and_then(|pods| pods.get_mut(name)) else { return false };
        pod.resource_version = resource_version;
        true
    }

    /// Sets a class's status and resourceVersion (no index reads either): a publish, written in place.
    pub fn set_class_status(&mut self, name: &str, published: Published, resource_version: String) -> bool {
        let Some(class) = self.classes.get_mut(name) else { return false };
        class.published = published;
        class.resource_version = resource_version;
        true
    }

    pub fn set_vgpu_entitled(&mut self, namespace: &str, entitled: bool) {
        let tenant = self.tenants.entry(namespace.to_owned()).or_default();
        if tenant.vgpu_entitled != entitled {
            tenant.vgpu_entitled = entitled;
            self.history.changed(Change::Namespace(namespace.into()));
        }
    }

    /// Stores one ResourceQuota's GPU budgets (class → hard units).
    pub fn upsert_quota(&mut self, namespace: &str, quota: &str, hard: BTreeMap<String, u64>) {
        let tenant = self.tenants.entry(namespace.to_owned()).or_default();
        if tenant.quotas.get(quota) != Some(&hard) {
            tenant.quotas.insert(quota.to_owned(), hard);
            self.history.changed(Change::Namespace(namespace.into()));
        }
    }

    pub fn remove_quota(&mut self, namespace: &str, quota: &str) {
        if let Some(tenant) = self.tenants.get_mut(namespace)
            && tenant.quotas.remove(quota).is_some()
        {
            self.history.changed(Change::Namespace(namespace.into()));
        }
    }

    pub fn upsert_node(&mut self, node: Node) {
        if self.nodes.get(&node.name) != Some(&node) {
            self.history.changed(Change::Everything);
        }
        let name = node.name.clone();
        if node.ready {
            self.unavailable.remove(&name);
        } else {
            self.unavailable.insert(name.clone());
        }
        self.nodes.insert(node);
        self.reindex_node(&name);
    }

    /// A node deleted (lost): its claims keep their binding until the controller moves them.
    pub fn remove_node(&mut self, name: &str) -> Option<Node> {
        let node = self.nodes.remove(name)?;
        self.history.changed(Change::Everything);
        self.unavailable.insert(name.to_owned());
        self.reindex_node(name);
        Some(node)
    }

    pub fn upsert_pod(&mut self, pod: Pod) {
        self.upsert_pod_counting(pod);
    }

    /// [`View::upsert_pod`], saying whether the devices counted for the pod beyond its claims moved (a raw-device
    /// launcher or a migration target bound, a pod that held them ended): what a controller's event filter asks.
    /// Always `false` on a view that keeps objects only (it counts none).
    pub fn upsert_pod_counting(&mut self, mut pod: Pod) -> bool {
        // A stored pod carries what its attachments annotation reads as, read here only when it changed (an edit in
        // place that changes the annotation leaves it to be read by whoever asks).
        pod.read_attachments();
        if self.pod(&pod.namespace, &pod.name).is_some() {
            let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
            return self.edit_pod_counting(&namespace, &name, |stored| *stored = pod).unwrap_or(false);
        }
        let indexed = PodIndexed::of(&pod);
        let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
        self.pods.entry(namespace.clone()).or_default().insert(name.clone(), pod);
        self.history.stored(&namespace, &name, indexed.gated_since.is_some());
        self.index_pod(&namespace, &name, &indexed, true);
        self.count_pod_devices(&namespace, &name);
        self.counted_devices(&namespace, &name).is_some()
    }

    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> Option<Pod> {
        self.uncount_pod_devices(namespace, name);
        let old = self.pods.get_mut(namespace)?.remove(name)?;
        let indexed = PodIndexed::of(&old);
        self.history.stored(&old.namespace, &old.name, false);
        if let Some(node) = &indexed.occupied {
            self.history.changed(Change::Node(node.clone()));
        }
        self.index_pod(&old.namespace, &old.name, &indexed, false);
        Some(old)
    }

    /// Adds (or takes out) a pod's entries in the gated queue, the pods of its VMI and its node's CPU and memory.
    fn index_pod(&mut self, namespace: &Name, name: &Name, indexed: &PodIndexed, adding: bool) {
        self.index_gated(namespace, name, indexed, adding);
        self.index_owner(namespace, name, indexed, adding);
        self.index_node(namespace, name, indexed, adding);
    }

    /// The gated queue.
    fn index_gated(&mut self, namespace: &Name, name: &Name, indexed: &PodIndexed, adding: bool) {
        if let Some(created) = indexed.gated_since {
            let key = (created, namespace.clone(), name.clone());
            if adding {
                self.gated.insert(key);
            } else {
                self.gated.remove(&key);
            }
        }
    }

    /// The pods of its VMI.
    fn index_owner(&mut self, namespace: &Name, name: &Name, indexed: &PodIndexed, adding: bool) {
        if let Some(vmi) = &indexed.owner_vmi {
            edit_nested_set(&mut self.pods_by_vmi, namespace, vmi, name, adding);
        }
    }

    /// The node it occupies: its pods and the CPU and memory taken there.
    fn index_node(&mut self, namespace: &Name, name: &Name, indexed: &PodIndexed, adding: bool) {
        if let Some(node) = &indexed.occupied {
            if !self.objects_only {
                self.capacity.add_pod_load(node, indexed.cpu_millis, indexed.memory_bytes, adding);
            }
            edit_set(&mut self.pods_by_node, node, (namespace.clone(), name.clone()), adding);
        }
    }

    /// [`View::index_pod`] from `before` to `after`, touching only the indexes whose entry moved: an edit usually
    /// changes one thing (ungated, bound, ended), and taking an entry out to put it back costs hashed lookups and a
    /// set edit each.
    fn reindex_pod(&mut self, namespace: &Name, name: &Name, before: &PodIndexed, after: &PodIndexed) {
        if before.gated_since != after.gated_since {
            self.index_gated(namespace, name, before, false);
            self.index_gated(namespace, name, after, true);
        }
        if before.owner_vmi != after.owner_vmi {
            self.index_owner(namespace, name, before, false);
            self.index_owner(namespace, name, after, true);
        }
        if (&before.occupied, before.cpu_millis, before.memory_bytes)
            != (&after.occupied, after.cpu_millis, after.memory_bytes)
        {
            // Binding where it was pinned only takes; leaving a node, moving or shrinking may free room.
            let grows_in_place = before.occupied == after.occupied
                && after.cpu_millis >= before.cpu_millis
                && after.memory_bytes >= before.memory_bytes;
            if let Some(node) = before.occupied.as_ref().filter(|_| !grows_in_place) {
                self.history.changed(Change::Node(node.clone()));
            }
            self.index_node(namespace, name, before, false);
            self.index_node(namespace, name, after, true);
        }
    }

    /// Counts the devices a stored pod takes beyond its VMI's claims on its node.
    fn count_pod_devices(&mut self, namespace: &Name, name: &Name) {
        if self.objects_only {
            return;
        }
        let Some(pod) = self.pod(namespace, name) else { return };
        let Some(node) = occupied_name(pod) else { return };
        // One or two resources: inserted one by one (collecting into a B-tree sorts through a buffer first).
        let mut devices: BTreeMap<String, u64> = BTreeMap::new();
        for (resource, units) in self.devices_to_count(namespace, pod, &node) {
            devices.insert(resource.clone(), units);
        }
        if devices.is_empty() {
            return;
        }
        let node = node.into_owned();
        self.capacity.add_pod_devices(&node, &devices, true);
        for resource in devices.keys() {
            self.capacity.refresh_resource(resource, &self.classes, &node, self.nodes.get(&node));
        }
        *nested_entry(&mut self.pod_devices, namespace, name) = (node, devices);
    }

    /// The devices a pod on `node` takes beyond its VMI's claims there (those with units left).
    fn devices_to_count<'a>(
        &'a self,
        namespace: &str,
        pod: &'a Pod,
        node: &str,
    ) -> impl Iterator<Item = (&'a String, u64)> + 'a {
        let covered = claims_run(pod).and_then(|run| self.vmi_claim_units(namespace, run, node));
        beyond_claims(pod, &self.capacity, move |resource| covered.and_then(|c| c.get(resource)).copied())
    }

    /// Whether what [`View::count_pod_devices`] would count for `pod` is what is counted for it now.
    fn counted_devices_unchanged(&self, namespace: &str, pod: &Pod) -> bool {
        let counted = self.counted_devices(namespace, &pod.name);
        let Some(node) = occupied_node(pod) else { return counted.is_none() };
        match counted {
            None => self.devices_to_count(namespace, pod, node).next().is_none(),
            Some((counted_node, counted)) => {
                counted_node == node
                    && self.devices_to_count(namespace, pod, node).eq(counted.iter().map(|(r, units)| (r, *units)))
            }
        }
    }

    /// Takes a pod's counted devices out of the index; returns what was counted (node, devices).
    fn uncount_pod_devices(&mut self, namespace: &str, name: &str) -> Option<(Name, BTreeMap<String, u64>)> {
        if self.objects_only {
            return None;
        }
        let pods = self.pod_devices.get_mut(namespace)?;
        let (node, devices) = pods.remove(name)?;
        if pods.is_empty() {
            self.pod_devices.remove(namespace);
        }
        self.capacity.add_pod_devices(&node, &devices, false);
        for resource in devices.keys() {
            self.capacity.refresh_resource(resource, &self.classes, &node, self.nodes.get(&node));
        }
        Some((node, devices))
    }

    /// The VMI's claims changed: its pods' own device counts change with them.
    fn recount_vmi_pods(&mut self, namespace: &Name, vmi: &str) {
        let Some(pods) = nested(&self.pods_by_vmi, namespace, vmi) else { return };
        // Usually one pod (the launcher); a migration adds its target.
        let pods: NameSet = pods.clone();
        for pod in pods {
            self.uncount_pod_devices(namespace, &pod);
            self.count_pod_devices(namespace, &pod);
        }
    }

    pub fn upsert_vmi(&mut self, vmi: Vmi) {
        // Which run it is and whether it ended is all a waiter reads of it.
        let same_run = |old: &Vmi| old.uid == vmi.uid && old.phase.is_final() == vmi.phase.is_final();
        if self.vmi(&vmi.namespace, &vmi.name).is_some_and(|old| !same_run(old)) {
            self.history.changed(Change::Run(vmi.namespace.clone(), vmi.name.clone()));
        }
        self.vmis.entry(vmi.namespace.clone()).or_default().insert(vmi.name.clone(), vmi);
    }

    pub fn remove_vmi(&mut self, namespace: &str, name: &str) -> Option<Vmi> {
        let old = self.vmis.get_mut(namespace)?.remove(name)?;
        self.history.changed(Change::Run(old.namespace.clone(), old.name.clone()));
        Some(old)
    }

    pub fn upsert_usage(&mut self, usage: Usage) {
        // Most writes of a stored record are its close or a new revision: edited in place.
        if self.usage(&usage.namespace, &usage.name).is_some() {
            let (namespace, name) = (usage.namespace.clone(), usage.name.clone());
            self.edit_usage(&namespace, &name, |stored| *stored = usage);
            return;
        }
        if usage.end.is_none() {
            edit_nested_set(&mut self.open_usages, &usage.namespace, &usage.claim, &usage.name, true);
        }
        edit_nested_set(&mut self.usages_by_claim, &usage.namespace, &usage.claim, &usage.name, true);
        self.usages.entry(usage.namespace.clone()).or_default().insert(usage.name.clone(), usage);
    }

    pub fn remove_usage(&mut self, namespace: &str, name: &str) -> Option<Usage> {
        let old = self.usages.get_mut(namespace)?.remove(name)?;
        edit_nested_set(&mut self.usages_by_claim, &old.namespace, &old.claim, &old.name, false);
        edit_nested_set(&mut self.open_usages, &old.namespace, &old.claim, &old.name, false);
        Some(old)
    }

    /// Every usage record of a claim, open or closed.
    pub fn usages_of_claim(&self, namespace: &str, claim: &str) -> impl Iterator<Item = &Usage> {
        let names = nested(&self.usages_by_claim, namespace, claim);
        let usages = self.usages.get(namespace);
        names.into_iter().flatten().filter_map(move |name| usages?.get(name))
    }

    /// The open usage records of a claim.
    pub fn open_usages_of(&self, namespace: &str, claim: &str) -> impl Iterator<Item = &Usage> {
        let names = nested(&self.open_usages, namespace, claim);
        let usages = self.usages.get(namespace);
        names.into_iter().flatten().filter_map(move |name| usages?.get(name))
    }

    /// Claims with open usage records, by namespace then claim, with the records' names in name order: for walking
    /// claims and their records side by side (a full pass; sorted here, the index is hashed).
    pub fn open_usage_claims(&self) -> impl Iterator<Item = (&str, &str, &[Name])> {
        let mut claims: Vec<(&str, &str, &[Name])> = self
            .open_usages
            .iter()
            .flat_map(|(namespace, claims)| {
                claims.iter().map(move |(claim, names)| (namespace.as_str(), claim.as_str(), names.as_slice()))
            })
            .collect();
        claims.sort_unstable_by_key(|(namespace, claim, _)| (*namespace, *claim));
        claims.into_iter()
    }

    /// Every open usage record, by namespace then claim.
    pub fn open_usages(&self) -> impl Iterator<Item = &Usage> {
        self.open_usage_claims().flat_map(move |(namespace, _, names)| {
            let usages = self.usages.get(namespace);
            names.iter().filter_map(move |name| usages?.get(name))
        })
    }

    /// Re-indexes every class on every node: after a class changed (rare), since its resource or selector moves
    /// which nodes and claims count for it.
    fn reindex_all(&mut self) {
        // Which resource a claim's units count under depends on its class: rebuild the derived counts whole.
        self.capacity = Capacity::default();
        self.vmi_claim_units.clear();
        self.pod_devices.clear();
        if self.objects_only {
            return;
        }
        self.capacity.set_resources(self.classes.values());
        for class in self.classes.values() {
            self.capacity.index_class(class, self.nodes.iter());
        }
        let claims: Vec<(Name, ClaimIndexed)> =
            self.claims().map(|claim| (claim.namespace.clone(), ClaimIndexed::of(claim))).collect();
        for (namespace, claim) in &claims {
            self.count_claim_units(namespace, claim, true);
        }
        let pods: Vec<(Name, Name)> = self.pods().map(|p| (p.namespace.clone(), p.name.clone())).collect();
        for (namespace, name) in pods {
            let pod = &self.pods[&namespace][&name];
            if let Some(node) = occupied_node(pod).map(str::to_owned) {
                let (cpu, memory) = (pod.cpu_millis, pod.memory_bytes);
                self.capacity.add_pod_load(&node, cpu, memory, true);
            }
            self.uncount_pod_devices(&namespace, &name);
            self.count_pod_devices(&namespace, &name);
        }
    }

    fn reindex_node(&mut self, node: &str) {
        if self.objects_only {
            return;
        }
        for class in self.classes.values() {
            self.capacity.refresh(class, node, self.nodes.get(node));
        }
    }
}

/// What the indexes read of a claim.
#[derive(PartialEq)]
struct ClaimIndexed {
    class: Name,
    count: u32,
    node: Option<Name>,
    attached_to: Option<Name>,
    owner_vmi: Option<Name>,
    /// A held claim with no node, not being deleted: on the claims' queue.
    pending_held: bool,
}

impl ClaimIndexed {
    fn of(claim: &Claim) -> Self {
        ClaimIndexed {
            class: claim.class.clone(),
            count: claim.count,
            node: claim.node.clone(),
            attached_to: claim.attached_to.as_ref().map(|vmi| vmi.name.clone()),
            owner_vmi: claim.owner_vmi.as_ref().map(|vmi| vmi.name.clone()),
            pending_held: claim.node.is_none() && !claim.template && !claim.deleting,
        }
    }

    /// Whether going from this to `after` only takes: bound where it had no node, or attached where it is bound,
    /// the same class and count. Anything else may free units or a claim a waiter needs.
    fn only_takes(&self, after: &ClaimIndexed) -> bool {
        let same = self.class == after.class && self.count == after.count && self.owner_vmi == after.owner_vmi;
        let binds = self.node.is_none();
        let attaches = self.node == after.node && self.attached_to.is_none();
        same && (binds || attaches)
    }

    /// What the unit counts read.
    fn counted(&self) -> (&str, u32, Option<&str>, Option<&str>) {
        (&self.class, self.count, self.node.as_deref(), self.attached_to.as_deref())
    }

    /// What the lists read.
    fn listed(&self) -> (Option<&str>, Option<&str>, Option<&str>, bool) {
        (self.attached_to.as_deref(), self.owner_vmi.as_deref(), self.node.as_deref(), self.pending_held)
    }

    /// [`ClaimIndexed::counted`] of a stored claim, without copying it.
    fn counted_of(claim: &Claim) -> (&str, u32, Option<&str>, Option<&str>) {
        (&claim.class, claim.count, claim.node.as_deref(), claim.attached_to.as_ref().map(|vmi| vmi.name.as_str()))
    }

    /// [`ClaimIndexed::listed`] of a stored claim, without copying it.
    fn listed_of(claim: &Claim) -> (Option<&str>, Option<&str>, Option<&str>, bool) {
        (
            claim.attached_to.as_ref().map(|vmi| vmi.name.as_str()),
            claim.owner_vmi.as_ref().map(|vmi| vmi.name.as_str()),
            claim.node.as_deref(),
            claim.node.is_none() && !claim.template && !claim.deleting,
        )
    }
}

/// What the gated queue, the pods of a VMI and the node loads read of a pod, derived: the same before and after an
/// edit means nothing there to re-index (the devices counted for it are checked on their own).
struct PodIndexed {
    /// Its creation time while it holds the placement gate (the gated queue's order).
    gated_since: Option<Time>,
    owner_vmi: Option<Name>,
    occupied: Option<Name>,
    cpu_millis: u64,
    memory_bytes: u64,
}

impl PodIndexed {
    fn of(pod: &Pod) -> Self {
        PodIndexed {
            gated_since: holds_placement_gate(pod).then_some(pod.created),
            owner_vmi: pod.owner_vmi.as_ref().map(|vmi| vmi.name.clone()),
            occupied: occupied_name(pod).map(std::borrow::Cow::into_owned),
            cpu_millis: pod.cpu_millis,
            memory_bytes: pod.memory_bytes,
        }
    }

    /// Whether `pod` indexes as this, compared without copying it.
    fn is(&self, pod: &Pod) -> bool {
        self.gated_since == holds_placement_gate(pod).then_some(pod.created)
            && self.owner_vmi.as_deref() == pod.owner_vmi.as_ref().map(|vmi| vmi.name.as_str())
            && self.occupied.as_deref() == occupied_node(pod)
            && (self.cpu_millis, self.memory_bytes) == (pod.cpu_millis, pod.memory_bytes)
    }
}

fn edit_set<V: Ord>(map: &mut HashMap<Name, BTreeSet<V>, Fixed>, key: &Name, value: V, adding: bool) {
    if adding {
        hashed_entry_of(map, key).insert(value);
    } else if let Some(set) = map.get_mut(key) {
        set.remove(&value);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// Two levels of string keys (namespace, then name), so lookups borrow both. Hashed, not ordered: these indexes are
/// only ever looked up by key (what they hold, sets of names, stays ordered), and a hash lookup compares one key
/// where a B-tree search compares a dozen that share long prefixes (`virt-launcher-...`). The hasher's seed is
/// fixed, so nothing about them depends on the process.
type Nested<V> = HashMap<Name, HashMap<Name, V, Fixed>, Fixed>;
type Fixed = foldhash::fast::FixedState;

/// A sorted set of names inside a [`Nested`] index: nearly always one (a run's template claim, a VMI's launcher, a
/// claim's open record), held inline so that adding the entry allocates nothing beyond the maps themselves.
type NameSet = smallvec::SmallVec<[Name; 1]>;

/// Every value of a [`Nested`] map, in the order of `key`: what an ordered map would have listed.
fn sorted<'a, V, K: Ord + 'a>(map: &'a Nested<V>, key: impl Fn(&'a V) -> K) -> std::vec::IntoIter<&'a V> {
    let mut all: Vec<&V> = map.values().flat_map(HashMap::values).collect();
    all.sort_unstable_by_key(|value| key(value));
    all.into_iter()
}

fn nested<'a, V>(map: &'a Nested<V>, first: &str, second: &str) -> Option<&'a V> {
    map.get(first)?.get(second)
}

/// The value at (`first`, `second`), created empty if missing.
fn nested_entry<'a, V: Default>(map: &'a mut Nested<V>, first: &Name, second: &Name) -> &'a mut V {
    hashed_entry_of(hashed_entry_of(map, first), second)
}

fn hashed_entry_of<'a, V: Default>(map: &'a mut HashMap<Name, V, Fixed>, key: &Name) -> &'a mut V {
    map.entry(key.clone()).or_default()
}

/// The value at `key`, created empty if missing; the key is copied only then.
fn entry_of<'a, V: Default>(map: &'a mut BTreeMap<String, V>, key: &str) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("inserted above")
}

/// Drops the value at (`first`, `second`) once empty, and the inner map with it (so equal contents stay equal
/// views).
fn prune<V>(map: &mut Nested<V>, first: &str, second: &str, is_empty: impl Fn(&V) -> bool) {
    let Some(inner) = map.get_mut(first) else { return };
    if inner.get(second).is_some_and(is_empty) {
        inner.remove(second);
    }
    if inner.is_empty() {
        map.remove(first);
    }
}

/// Adds or removes `value` in the set at (`first`, `second`), dropping sets and maps that become empty. The sets
/// hold one to three names (a run's claims, a claim's usage records, a VMI's pods), so they are sorted lists: a
/// B-tree's node for one name cost an allocation ten times its size, on every VM start.
fn edit_nested_set(map: &mut Nested<NameSet>, first: &Name, second: &Name, value: &Name, adding: bool) {
    if adding {
        let set = nested_entry(map, first, second);
        if let Err(at) = set.binary_search(value) {
            set.insert(at, value.clone());
        }
        return;
    }
    let Some(inner) = map.get_mut(first) else { return };
    let Some(set) = inner.get_mut(second) else { return };
    if let Ok(at) = set.binary_search(value) {
        set.remove(at);
    }
    if set.is_empty() {
        inner.remove(second);
        if inner.is_empty() {
            map.remove(first);
        }
    }
}

/// The run whose claims on a node cover a pod's devices there: its VMI's, for pods of claim VMIs.
fn claims_run(pod: &Pod) -> Option<&str> {
    pod.owner_vmi.as_ref().filter(|_| is_claims_pod(pod)).map(|vmi| vmi.name.as_str())
}

/// The devices a pod takes beyond what its run's claims on its node cover (`covered` per resource), those with
/// units left. Only resources a class publishes: other devices (KubeVirt's kvm, tun, vhost-net) are plentiful and
/// placement checks only that a node has them, so counting them would cost every pod edit for nothing.
fn beyond_claims<'a>(
    pod: &'a Pod,
    capacity: &'a Capacity,
    covered: impl Fn(&str) -> Option<u64> + 'a,
) -> impl Iterator<Item = (&'a String, u64)> + 'a {
    pod.devices
        .iter()
        .filter(|(resource, _)| capacity.publishes(resource))
        .map(move |(resource, units)| (resource, units.saturating_sub(covered(resource).unwrap_or(0))))
        .filter(|(_, units)| *units > 0)
}

/// Pods whose devices the claims count (launchers, volume binders and migration targets of claim VMIs).
pub fn is_claims_pod(pod: &Pod) -> bool {
    pod.labels.get(keys::LABEL_CLAIMS).map(String::as_str) == Some(keys::TRUE)
}

/// A launcher or volume binder that still holds the placement gate.
pub fn holds_placement_gate(pod: &Pod) -> bool {
    // The gate first: most pods do not hold it, and reading the role takes four label lookups.
    pod.scheduling_gates.iter().any(|gate| gate == keys::GATE_PLACEMENT) && pod_role(pod).is_gated()
}

/// [`occupied_node`] as a shared name: the pod's own when it is bound; one made from its affinity when pinned.
/// Which node that is stays [`occupied_node`]'s to say.
pub fn occupied_name(pod: &Pod) -> Option<std::borrow::Cow<'_, Name>> {
    let node = occupied_node(pod)?;
    Some(match &pod.node_name {
        Some(bound) if bound.as_str() == node => std::borrow::Cow::Borrowed(bound),
        _ => std::borrow::Cow::Owned(Name::from(node)),
    })
}

/// The node whose resources a pod takes: where it is bound, or where it is pinned once ungated (the scheduler can
/// put it nowhere else, so its requests are spoken for before it binds); none once it finished.
pub fn occupied_node(pod: &Pod) -> Option<&str> {
    if pod.phase.is_terminal() {
        return None;
    }
    pod.node_name.as_deref().or_else(|| {
        let terms = pod.required_terms().filter(|_| pod.scheduling_gates.is_empty())?;
        is_pinned_to(terms)
    })
}
