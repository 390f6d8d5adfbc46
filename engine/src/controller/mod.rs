//! The controller's decisions: one pure, level-triggered pass over the view that returns what to write.
//!
//! `reconcile(view, now)` reads only the view and `now`, and returns [`Action`]s in the order they must be
//! written. It is idempotent: applying its actions and reconciling again yields nothing. Within a pass, decisions
//! see the ones made before them (units reserved or freed, budget spent, CPU taken by pods just pinned) through
//! overlays on the view's indexes, so a pass never over-allocates and publishes what the world will be once its
//! writes land.
//!
//! The pass, in order: release ended runs and follow migrations; finalizers and deleting claims; serve waiters
//! first come, first served (gated pods, and held claims that are Pending or stranded on a lost node); usage
//! records; published free units.

mod actions;
mod apply;
mod claims;
mod confirm;
pub mod metrics;
mod names;
mod placement;
mod policy;
mod publish;
mod reasons;
pub mod runtime;
mod usage;
mod waiting;

use std::collections::{BTreeMap, BTreeSet};

pub use actions::{Action, ClaimStatus, EventKind, ObjectRef};
pub use apply::{Conflict, apply, created_claim};
pub use confirm::{CONFIRMATION_ROUNDS_MAX, PinConfirmation};
pub use names::{NAME_LENGTH_MAX, template_claim_name, usage_name};
pub use policy::FRAGMENTATION_AWARE_CANDIDATES_PER_BUCKET;
pub use reasons::Wait;
pub use waiting::Waiting;

use crate::model::{Claim, ClaimPhase, Class, Name, Time, View, Vmi, VmiPhase, VmiRef};
use crate::variant::Variant;

/// The most candidate nodes one placement examines before it reports no capacity: a bound on the work one pod may
/// cost a pass (candidates come best fit first, so the first fitting node is usually among the first few).
pub const CANDIDATES_PER_PLACEMENT_MAX: usize = 4_096;

/// One reconcile pass over everything: what the controller decides, given the view and the time.
pub fn reconcile(view: &View, now: Time) -> Vec<Action> {
    reconcile_with(view, now, &Variant::SHIPPED)
}

/// [`reconcile`] under an engine variant (`two_update_pin` writes the gate removal and the pin apart).
pub fn reconcile_with(view: &View, now: Time, variant: &Variant) -> Vec<Action> {
    let claims: Vec<&Claim> = view.claims().collect();
    Pass::new(view, now, *variant, None).run(&claims, None).0
}

/// What a pass reads of a VMI (a run): which run it is, whether it has ended, and where it runs once Running
/// (claims follow a completed migration there). An update that leaves these as they were (Pending → Scheduling →
/// Scheduled, a condition, a label) changes no decision, so a controller's event filter need not queue its key:
/// the object still goes into the cache for the passes that come anyway.
pub fn vmi_change_matters(cached: Option<&Vmi>, incoming: &Vmi) -> bool {
    fn read(vmi: &Vmi) -> (&str, bool, Option<&Name>) {
        (&vmi.uid, vmi.phase.is_final(), running_on(vmi))
    }
    cached.is_none_or(|cached| read(cached) != read(incoming))
}

/// Whether `stored` (the VMI of the name `run` refers to) is that run, not ended: the same uid (a reference
/// without one names whichever run is stored) and not in a final phase.
fn is_live_run(run: &VmiRef, stored: &Vmi) -> bool {
    (run.uid.is_empty() || stored.uid == run.uid) && !stored.phase.is_final()
}

/// Where a run runs, once Running.
fn running_on(vmi: &Vmi) -> Option<&Name> {
    (vmi.phase == VmiPhase::Running).then_some(vmi.node_name.as_ref()).flatten()
}

/// The node a claim attached to `run` must follow it to: where the run runs once Running (a completed migration
/// moved it), when that is not the claim's node. The one rule both the pass (`settle_attachment`) and the event
/// filter ([`runtime::vmi_key_needed`]) read, so the filter never drops an update the pass would follow.
fn follow_to<'r>(claim: &Claim, run: &'r Vmi) -> Option<&'r Name> {
    running_on(run).filter(|node| Some(node.as_str()) != claim.node.as_deref())
}

/// What changed since the view was last reconciled: the keys a controller's work queue holds (from watch events,
/// its own writes included). Pods, classes, quotas and namespaces need no keys: every pass serves the whole queue
/// of waiters (gated pods, pending held claims) and publishes every class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// (namespace, name) of claims created, changed or deleted.
    pub claims: BTreeSet<(Name, Name)>,
    /// (namespace, name) of VMIs created, changed or deleted.
    pub vmis: BTreeSet<(Name, Name)>,
    /// Nodes added, changed or deleted.
    pub nodes: BTreeSet<String>,
}

/// A pass that visits only the claims `changes` can affect (changed claims, the claims of changed runs, the claims
/// on changed nodes) besides the waiters. On a view reconciled before (its last pass's writes applied), it returns
/// exactly what [`reconcile`] returns, at a cost that follows the change rather than the claims held.
pub fn reconcile_changes(view: &View, now: Time, changes: &Changes) -> Vec<Action> {
    reconcile_changes_with(view, now, changes, &Variant::SHIPPED)
}

/// [`reconcile_changes`] under an engine variant.
pub fn reconcile_changes_with(view: &View, now: Time, changes: &Changes, variant: &Variant) -> Vec<Action> {
    Pass::new(view, now, *variant, None).run(&changed_claims(view, changes), Some(changes)).0
}

/// The claims `changes` can affect: changed claims, the claims of changed runs, the claims on changed nodes, in
/// namespace/name order.
fn changed_claims<'v>(view: &'v View, changes: &Changes) -> Vec<&'v Claim> {
    let changed = changes.claims.iter().filter_map(|(namespace, name)| view.claim(namespace, name));
    let of_runs = changes.vmis.iter().flat_map(|(namespace, vmi)| view.claims_of_run(namespace, vmi));
    let on_nodes = changes.nodes.iter().flat_map(|node| view.claims_on_node(node));
    // A handful of claims per pass: sorted and deduplicated in place rather than through a map.
    let mut claims: Vec<&Claim> = changed.chain(of_runs).chain(on_nodes).collect();
    claims.sort_unstable_by_key(|c| key_of(c));
    claims.dedup_by_key(|c| key_of(c));
    claims
}

/// [`reconcile_with`] (`changes` none) or [`reconcile_changes_with`], skipping the waiters `waiting` says nothing
/// has changed for since the last pass whose writes landed, and remembering what this one leaves waiting: the same
/// actions, at a cost that follows what changed rather than the queue's length (see [`Waiting`]). The caller then
/// says whether this pass's writes landed ([`Waiting::landed`]) or not ([`Waiting::forget`]).
pub fn reconcile_remembering(
    view: &View,
    now: Time,
    changes: Option<&Changes>,
    variant: &Variant,
    waiting: &mut Waiting,
) -> Vec<Action> {
    let memo = waiting.usable();
    let claims = match changes {
        None => view.claims().collect(),
        Some(changes) => changed_claims(view, changes),
    };
    let (actions, proposed) = Pass::new(view, now, *variant, Some(memo)).run(&claims, changes);
    if let Some(proposed) = proposed {
        waiting.propose(proposed);
    }
    actions
}

/// A claim's identity within a pass, borrowed from the view: bookkeeping a pass does per claim allocates nothing.
type ClaimKey<'v> = (&'v str, &'v str);

fn key_of(claim: &Claim) -> ClaimKey<'_> {
    (claim.namespace.as_str(), claim.name.as_str())
}

/// Units of a VMI's claims on (node, resource) that a pass attached (+) or detached (−).
type Attached = (Name, String, i64);

/// A template claim this pass creates.
struct NewClaim {
    class: String,
    count: u32,
    owner: VmiRef,
    status: ClaimStatus,
}

struct Pass<'v> {
    view: &'v View,
    now: Time,
    variant: Variant,
    /// Claim statuses this pass writes (only where they differ from the view).
    statuses: BTreeMap<ClaimKey<'v>, ClaimStatus>,
    /// Finalizer changes this pass writes.
    finalizers: BTreeMap<ClaimKey<'v>, bool>,
    /// Claims this pass deletes.
    deleted: BTreeSet<ClaimKey<'v>>,
    /// Template claims this pass creates.
    created: BTreeMap<(Name, Name), NewClaim>,
    /// resource → node → units this pass frees (+) or takes (−). In two levels so a lookup borrows its names.
    units: BTreeMap<String, BTreeMap<Name, i64>>,
    /// namespace → class → bound units this pass adds (+) or releases (−).
    bound: BTreeMap<String, BTreeMap<String, i64>>,
    /// (namespace, VMI) → (node, resource, units) of claims attached to the VMI there, added or removed this pass.
    /// A VMI's entries are one or two, so they are a list looked up by borrowed names, not a map keyed by copies.
    attached: BTreeMap<(Name, Name), Vec<Attached>>,
    /// node → CPU millis and memory bytes of the pods this pass pins there.
    pinned: BTreeMap<String, (u64, u64)>,
    /// (namespace, pod) → the node this pass pins it to.
    pinned_pods: BTreeMap<(Name, Name), Name>,
    /// (namespace, pod) → the unit overlay its device counts contributed so far (see `settle_pods`).
    settled: BTreeMap<(Name, Name), BTreeMap<(String, Name), i64>>,
    actions: Vec<Action>,
    /// Held claims needing a node, found while releasing (served with the gated pods).
    waiting_claims: BTreeMap<ClaimKey<'v>, &'v Claim>,
    /// Why the last candidate node refused the pod being placed (for its Waiting event).
    last_refusal: std::cell::Cell<Option<String>>,
    /// Changes to what settling pods reads (`attached`, `pinned_pods`) so far, and how many there had been when pods
    /// were last settled: a pass settles twice, and the second time usually finds nothing new.
    moves: u64,
    settled_at: Option<u64>,
    /// Remembering waiters (see [`Waiting`]): what the last landed pass left waiting, if it still holds (the outer
    /// `Some`: this pass remembers; the inner: it may skip), and what this pass leaves.
    remembered: Option<Option<&'v waiting::Memo>>,
    remembering: Option<waiting::Proposal>,
    /// Whether the last candidate walk stopped at [`CANDIDATES_PER_PLACEMENT_MAX`].
    walk_capped: std::cell::Cell<bool>,
}

impl<'v> Pass<'v> {
    /// The pass, in order, over `claims` (every claim, or those a change can affect, in namespace/name order).
    fn run(mut self, claims: &[&'v Claim], changes: Option<&Changes>) -> (Vec<Action>, Option<waiting::Proposal>) {
        self.release_and_follow(claims);
        self.settle_pods();
        self.serve_waiters();
        match changes {
            None => self.reconcile_usages(),
            Some(changes) => self.reconcile_usages_of(claims, changes),
        }
        self.publish();
        let remembered = self.remembering.take();
        (self.finish(), remembered)
    }

    fn new(view: &'v View, now: Time, variant: Variant, remembered: Option<Option<&'v waiting::Memo>>) -> Self {
        Pass {
            view,
            now,
            variant,
            statuses: BTreeMap::new(),
            finalizers: BTreeMap::new(),
            deleted: BTreeSet::new(),
            created: BTreeMap::new(),
            units: BTreeMap::new(),
            bound: BTreeMap::new(),
            attached: BTreeMap::new(),
            pinned: BTreeMap::new(),
            pinned_pods: BTreeMap::new(),
            settled: BTreeMap::new(),
            actions: Vec::new(),
            last_refusal: std::cell::Cell::new(None),
            waiting_claims: BTreeMap::new(),
            moves: 0,
            settled_at: None,
            remembering: remembered.map(|_| waiting::Proposal::new(view.generation())),
            remembered,
            walk_capped: std::cell::Cell::new(false),
        }
    }

    /// A claim's status as it stands after the decisions made so far.
    fn status_of(&self, claim: &Claim) -> ClaimStatus {
        self.statuses.get(&key_of(claim)).cloned().unwrap_or_else(|| current_status(claim))
    }

    /// The node a claim is bound to after the decisions made so far (no copy: the hot path of every pass).
    fn node_of<'a>(&'a self, claim: &'a Claim) -> Option<&'a str> {
        match self.statuses.get(&key_of(claim)) {
            Some(status) => status.node.as_deref(),
            None => claim.node.as_deref(),
        }
    }

    /// The run a claim is attached to after the decisions made so far.
    fn attached_of<'a>(&'a self, claim: &'a Claim) -> Option<&'a VmiRef> {
        match self.statuses.get(&key_of(claim)) {
            Some(status) => status.attached_to.as_ref(),
            None => claim.attached_to.as_ref(),
        }
    }

    /// Decides a claim's new status, moving its units, budget and attachment counts with it.
    fn set_status(&mut self, claim: &'v Claim, status: ClaimStatus) {
        let old = self.status_of(claim);
        self.account(&claim.namespace, &claim.class, claim.count, &old, false);
        self.account(&claim.namespace, &claim.class, claim.count, &status, true);
        if status == current_status(claim) {
            self.statuses.remove(&key_of(claim));
        } else {
            self.statuses.insert(key_of(claim), status);
        }
    }

    /// Adds (or removes) what a claim in `status` takes: units on its node, budget, units attached to its VMI.
    fn account(&mut self, namespace: &Name, class: &str, count: u32, status: &ClaimStatus, adding: bool) {
        let Some(node) = &status.node else { return };
        let delta = if adding { i64::from(count) } else { -i64::from(count) };
        shift(&mut self.bound, namespace, class, delta);
        let Some(resource) = self.view.class(class).map(|c| c.resource_name.as_str()) else { return };
        shift(&mut self.units, resource, node, -delta);
        if let Some(vmi) = &status.attached_to {
            self.moves += 1;
            let entries = self.attached.entry((namespace.clone(), vmi.name.clone())).or_default();
            match entries.iter_mut().find(|(n, r, _)| n == node && *r == resource) {
                Some((_, _, units)) => *units += delta,
                None => entries.push((node.clone(), resource.to_owned(), delta)),
            }
        }
    }

    /// Deletes a template claim: its finalizer goes first, then the object, and its units with it.
    fn delete(&mut self, claim: &'v Claim) {
        let status = self.status_of(claim);
        self.account(&claim.namespace, &claim.class, claim.count, &status, false);
        self.statuses.remove(&key_of(claim));
        if claim.finalizer {
            self.finalizers.insert(key_of(claim), false);
        }
        self.deleted.insert(key_of(claim));
    }

    /// Free units of `class` on `node` after this pass's decisions; `None` when the node does not offer it.
    fn free(&self, class: &Class, node: &str) -> Option<u64> {
        let indexed = self.view.capacity().free(&class.name, node)?;
        Some(self.free_from(class, node, indexed))
    }

    /// [`Pass::free`] from the index's figure for the node (`indexed`), read by the caller.
    fn free_from(&self, class: &Class, node: &str, indexed: u64) -> u64 {
        let delta = overlay(&self.units, &class.resource_name, node);
        if indexed == 0 && delta > 0 {
            // The index shows an overbooked node as 0 free (a device failed under its claims; a migrated run's
            // source launcher still holds its devices beside the claims that followed it): units this pass frees
            // there pay that debt first, or a released claim's units would be handed out (or published) twice.
            let allocatable = self.view.node(node).and_then(|n| n.devices.get(&class.resource_name)).copied();
            let used = self.view.capacity().used(&class.resource_name, node);
            let owed = used.saturating_sub(allocatable.unwrap_or(0));
            return delta.unsigned_abs().saturating_sub(owed);
        }
        indexed.saturating_add_signed(delta)
    }

    /// Units of `class` the namespace holds on nodes after this pass's decisions.
    fn bound_units(&self, namespace: &str, class: &str) -> u64 {
        let indexed = self.view.tenant(namespace).map_or(0, |t| t.units_bound(class));
        let delta = overlay(&self.bound, namespace, class);
        indexed.saturating_add_signed(delta)
    }

    /// Whether the run a claim is attached to still holds it: the VMI exists as that run and has not ended.
    fn run_alive(&self, namespace: &str, vmi: &VmiRef) -> bool {
        self.view.vmi(namespace, &vmi.name).is_some_and(|stored| is_live_run(vmi, stored))
    }

    fn event(&mut self, kind: EventKind, object: ObjectRef, reason: &'static str, message: String) {
        self.actions.push(Action::Event { kind, object, reason, message });
    }

    /// Turns the decisions into writes, in the order they must be applied.
    fn finish(mut self) -> Vec<Action> {
        // Usage records close first: a record is owned by its claim, so one written after the claim's finalizer
        // went would find the record already collected and its end time lost.
        let (mut writes, rest): (Vec<Action>, Vec<Action>) =
            std::mem::take(&mut self.actions).into_iter().partition(|a| matches!(a, Action::CloseUsage { .. }));
        self.actions = rest;
        let keys: BTreeSet<ClaimKey<'v>> = self.statuses.keys().chain(self.finalizers.keys()).copied().collect();
        // Releases before reservations: units a pass frees are free before the claims that take them are written
        // (created bound, or bound). A pass cut short in between (a refused write, a crash) leaves units free that
        // nothing holds yet, never units held twice.
        let mut releasing = Vec::new();
        let mut reserving = Vec::new();
        for key in keys {
            let claim = self.view.claim(key.0, key.1).expect("a pass only updates claims it read");
            let status = self.statuses.remove(&key);
            let takes = status.as_ref().is_some_and(|s| s.node.is_some() && s.node != claim.node);
            let update = Action::UpdateClaim {
                claim: ObjectRef { namespace: claim.namespace.clone(), name: claim.name.clone() },
                precondition: claim.resource_version.clone(),
                finalizer: self.finalizers.get(&key).copied(),
                status,
            };
            if takes { reserving.push(update) } else { releasing.push(update) }
        }
        writes.extend(releasing);
        for (namespace, name) in std::mem::take(&mut self.deleted) {
            let claim = self.view.claim(namespace, name).expect("a pass only deletes claims it read");
            let object = ObjectRef { namespace: claim.namespace.clone(), name: claim.name.clone() };
            writes.push(Action::DeleteClaim { claim: object, uid: claim.uid.clone() });
        }
        for ((namespace, name), new) in std::mem::take(&mut self.created) {
            writes.push(Action::CreateClaim {
                claim: ObjectRef { namespace, name },
                class: new.class,
                count: new.count,
                owner: new.owner,
                status: new.status,
            });
        }
        writes.extend(reserving);
        let mut rest = std::mem::take(&mut self.actions);
        rest.sort_by_key(Action::rank);
        writes.extend(rest);
        writes
    }
}

/// What an overlay in two levels holds at (`first`, `second`) (0 when nothing moved there).
fn overlay<K: std::borrow::Borrow<str> + Ord>(
    map: &BTreeMap<String, BTreeMap<K, i64>>,
    first: &str,
    second: &str,
) -> i64 {
    map.get(first).and_then(|inner| inner.get(second)).copied().unwrap_or(0)
}

/// Adds `delta` to an overlay in two levels at (`first`, `second`); keys are copied only when first seen.
fn shift<K: std::borrow::Borrow<str> + Ord + for<'a> From<&'a str>>(
    map: &mut BTreeMap<String, BTreeMap<K, i64>>,
    first: &str,
    second: &str,
    delta: i64,
) {
    if !map.contains_key(first) {
        map.insert(first.to_owned(), BTreeMap::new());
    }
    let inner = map.get_mut(first).expect("inserted above");
    match inner.get_mut(second) {
        Some(total) => *total += delta,
        None => {
            inner.insert(K::from(second), delta);
        }
    }
}

/// A claim's current status, as the view holds it.
fn current_status(claim: &Claim) -> ClaimStatus {
    ClaimStatus {
        phase: claim.phase,
        node: claim.node.clone(),
        attached_to: claim.attached_to.clone(),
        pending: claim.pending.clone(),
    }
}

/// The status of a claim attached to `vmi` on `node`.
fn attached_status(node: &Name, vmi: &VmiRef) -> ClaimStatus {
    ClaimStatus { phase: ClaimPhase::Attached, node: Some(node.clone()), attached_to: Some(vmi.clone()), pending: None }
}

#[cfg(test)]
mod tests;
