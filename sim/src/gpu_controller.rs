//! The GPU controller as it runs in a cluster: its own cache, fed by the API server's watch after a lag, a work
//! queue of the keys the watch brought, the engine's `reconcile_changes` over the cache, and its writes sent
//! through the API server as its service account.
//!
//! A successful write is written through to the cache at once (client-go's mutation cache does the same for a
//! controller's own objects), so the next pass never decides on units it has already spent; the watch event of that
//! write then arrives with a revision the cache already holds and changes nothing. The keys its writes touched go
//! back on its queue as the echo would put them (one lag later): a pass's writes can enable the next step (a
//! released claim frees the name a new run's template claim needs). When nothing waits (no pod at the gate, no held
//! claim pending) that pass would decide nothing, so the keys are dropped instead (the engine's `echo_needs_pass`):
//! a real controller spends that pass, the twin skips it and nothing it decides moves. A refused write (a conflict, an
//! object gone, the webhook down) ends the pass: the controller waits for the watch to bring the newer state and
//! reconciles again, as controller-runtime requeues with backoff.

use gpuclaim_engine::controller::{Action, Changes, Waiting, echo_needs_pass, reconcile_remembering};
use gpuclaim_engine::model::{Time, View};
use gpuclaim_engine::variant::Variant;

use std::collections::BTreeMap;

use crate::apiserver::watch::{Change, ObjectKey, Touched, observe, revision_of};
use crate::users::User;

/// The GPU controller's state between passes.
#[derive(Debug)]
pub struct GpuController {
    cache: View,
    changes: Changes,
    /// Something arrived since the last pass.
    dirty: bool,
    /// The next pass is a full one (a new leader's first, a resync).
    resync: bool,
    /// The keys the last pass served: a pass cut short by a refused write serves them again.
    serving: Changes,
    /// Who its writes are made as (its service account: the settings name it as `controllerUser`).
    pub user: User,
    /// The engine's rules it runs (the shipped ones unless a scenario asks for a counterfactual).
    pub variant: Variant,
    /// Objects its own writes deleted, at the deletion's revision: the watch still brings their older states (the
    /// echo of a deletion is not sent), and those must not bring them back. Dropped once the watch has passed the
    /// revision (it delivers in revision order).
    tombstones: BTreeMap<ObjectKey, u64>,
    /// The waiters its last pass left waiting for capacity: skipped while nothing loosens (the engine's
    /// `Waiting`), learnt only from passes whose writes all went through.
    waiting: Waiting,
}

impl GpuController {
    /// A controller whose cache starts as `synced` (the initial list), acting as `user`.
    pub fn new(mut synced: View, user: User) -> Self {
        // A copy of the API server's store keeps objects only: the controller places, so its cache indexes them.
        synced.keep_placement(true);
        GpuController {
            cache: synced,
            changes: Changes::default(),
            dirty: true,
            resync: false,
            serving: Changes::default(),
            user,
            variant: Variant::SHIPPED,
            tombstones: BTreeMap::new(),
            waiting: Waiting::default(),
        }
    }

    pub fn cache(&self) -> &View {
        &self.cache
    }

    /// Whether a pass has work: something arrived since the last one.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// A watch event: into the cache, its key onto the work queue.
    pub fn observe(&mut self, change: Change) {
        if !self.tombstones.is_empty() {
            let revision = revision_of(&change);
            if self.tombstones.get(&change.key()).is_some_and(|deleted| revision <= *deleted) {
                return;
            }
            self.tombstones.retain(|_, deleted| *deleted > revision);
        }
        self.apply(change);
    }

    /// A live read's object (a GET or LIST of the API server, past the watch): into the cache and onto the work
    /// queue as a watch event would be, when it is newer than the cached copy.
    pub fn refresh(&mut self, change: Change) {
        self.apply(change);
    }

    /// The last pass is taken again (a live read refreshed the cache under it before it wrote anything): the keys
    /// it served go back on the queue.
    pub fn retake(&mut self) {
        let serving = std::mem::take(&mut self.serving);
        self.changes.claims.extend(serving.claims);
        self.changes.vmis.extend(serving.vmis);
        self.changes.nodes.extend(serving.nodes);
    }

    fn apply(&mut self, change: Change) {
        let Some(touched) = observe(&mut self.cache, change) else { return };
        match touched {
            Touched::Claim(namespace, name) => {
                self.changes.claims.insert((namespace, name));
            }
            Touched::Vmi(namespace, name) => {
                self.changes.vmis.insert((namespace, name));
            }
            Touched::Node(name) => {
                self.changes.nodes.insert(name);
            }
            Touched::Pod => {}
            Touched::Quiet => return,
        }
        self.dirty = true;
    }

    /// The pass went through: a resync is done, and the keys its writes queued (all the queue holds now) are dropped
    /// when their echo would find nothing to do ([`echo_needs_pass`]: no waiter left).
    pub fn passed(&mut self) {
        self.resync = false;
        self.waiting.landed();
        if !echo_needs_pass(&self.cache) {
            self.changes = Changes::default();
            self.dirty = false;
        }
    }

    /// Its own accepted write: into the cache at once, its keys queued as the watch echo will queue them.
    pub fn written(&mut self, change: Change) {
        if let Change::Delete { .. } = &change {
            self.tombstones.insert(change.key(), revision_of(&change));
        }
        self.apply(change);
    }

    /// The next pass goes over everything (a new leader's first pass).
    pub fn resync(&mut self) {
        self.resync = true;
        self.waiting.forget();
        self.dirty = true;
    }

    /// One pass over what the queue holds (over everything after [`GpuController::resync`]): the actions to write,
    /// in order.
    pub fn reconcile(&mut self, now: Time) -> Vec<Action> {
        self.dirty = false;
        self.serving = std::mem::take(&mut self.changes);
        let changes = (!self.resync).then_some(&self.serving);
        reconcile_remembering(&self.cache, now, changes, &self.variant, &mut self.waiting)
    }

    /// A write was refused: the pass stops there, so the keys it served go back on the queue (the writes it did
    /// not get to decided on them), with the key of the refused write.
    pub fn requeue(&mut self, action: &Action) {
        self.dirty = true;
        self.waiting.forget();
        self.retake();
        match action {
            Action::CreateClaim { claim, .. }
            | Action::UpdateClaim { claim, .. }
            | Action::DeleteClaim { claim, .. } => {
                self.changes.claims.insert((claim.namespace.clone(), claim.name.clone()));
            }
            Action::PinAndUngate { pod, .. }
            | Action::Ungate { pod, .. }
            | Action::Pin { pod, .. }
            | Action::SetPodWaiting { pod, .. } => {
                if let Some(vmi) = self.cache.pod(&pod.namespace, &pod.name).and_then(|p| p.owner_vmi.clone()) {
                    self.changes.vmis.insert((pod.namespace.clone(), vmi.name));
                }
            }
            Action::OpenUsage { .. }
            | Action::CloseUsage { .. }
            | Action::PublishClass { .. }
            | Action::Event { .. } => {}
        }
    }
}
