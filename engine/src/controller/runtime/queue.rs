//! The controller's work queue: the keys watch events brought since the last pass, through the event filter, and
//! what the controller's own deletions must not let the watch bring back.

use std::collections::BTreeMap;

use crate::model::View;

use super::super::Changes;
use super::observe::{Change, ObjectKey, Touched, observe};

/// What watch events queued since the last pass.
#[derive(Debug, Default)]
pub struct WorkQueue {
    keys: Changes,
    /// Something a pass acts on arrived since the last pass.
    woken: bool,
    /// Objects the controller's own writes deleted, at the deletion's revision: the watch still brings their older
    /// states (a deletion's own event may come last), and those must not bring them back. Dropped once the watch of
    /// that kind has passed the revision (each kind's watch delivers in revision order).
    tombstones: BTreeMap<ObjectKey, u64>,
}

impl WorkQueue {
    /// A watch event: into the cache, its keys onto the queue. Returns whether it woke the queue (a pass has work).
    pub fn observe(&mut self, cache: &mut View, change: Change) -> bool {
        if !self.tombstones.is_empty() {
            if self.buried(&change) {
                return false;
            }
            let (kind, revision) = (change.key().kind, change.revision());
            self.tombstones.retain(|buried, deleted| buried.kind != kind || *deleted > revision);
        }
        let Some(touched) = observe(cache, change) else { return false };
        let woke = queue(&mut self.keys, touched);
        self.woken |= woke;
        woke
    }

    /// Whether the controller deleted the object of `change` at its revision or later: an older state, not taken.
    pub(super) fn buried(&self, change: &Change) -> bool {
        !self.tombstones.is_empty()
            && self.tombstones.get(&change.key()).is_some_and(|deleted| change.revision() <= *deleted)
    }

    /// Whether a pass has work.
    pub fn is_woken(&self) -> bool {
        self.woken
    }

    /// The keys queued, and the queue emptied.
    pub(super) fn take(&mut self) -> Changes {
        self.woken = false;
        std::mem::take(&mut self.keys)
    }

    /// The controller deleted `key` at `revision`: older states the watch still brings are not taken.
    pub(super) fn bury(&mut self, key: ObjectKey, revision: u64) {
        self.tombstones.insert(key, revision);
    }
}

/// Puts what a change touched on `keys`; returns whether it wakes a pass.
pub(super) fn queue(keys: &mut Changes, touched: Touched) -> bool {
    match touched {
        Touched::Claim(namespace, name) => {
            keys.claims.insert((namespace, name));
        }
        Touched::Vmi(namespace, name) => {
            keys.vmis.insert((namespace, name));
        }
        Touched::Node(name) => {
            keys.nodes.insert(name);
        }
        Touched::Waiters => {}
        Touched::Quiet => return false,
    }
    true
}
