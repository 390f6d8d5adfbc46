//! The controller's work queue: the keys watch events brought since the last pass, through the event filter, and
//! what the controller's own deletions must not let the watch bring back.

use std::collections::{BTreeMap, VecDeque};

use crate::model::View;

use super::super::Changes;
use super::super::metrics::GateExit;
use super::observe::{Change, Kind, ObjectKey, Touched, observe_noting};

/// How the watch events reach the controller: what a watch event's revision says about the rest of the stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Watches {
    /// One stream of every kind, in revision order (the twin's API server): an event at revision r says that
    /// nothing older is still coming, of any kind.
    #[default]
    One,
    /// A stream per kind (kube-runtime's watchers, one per resource): an event says so of its own kind only.
    PerKind,
}

/// What watch events queued since the last pass.
#[derive(Debug, Default)]
pub struct WorkQueue {
    watches: Watches,
    keys: Changes,
    /// Something a pass acts on arrived since the last pass.
    woken: bool,
    /// Objects the controller's own writes deleted, at the deletion's revision: the watch still brings their older
    /// states (a deletion's own event may come last), and those must not bring them back.
    tombstones: BTreeMap<ObjectKey, u64>,
    /// The same, in the order they were dug (revisions only grow), per stream (`None`: the one stream): a tombstone
    /// is dropped once its stream has passed its revision, from the front, so keeping them costs nothing per event.
    dug: BTreeMap<Option<Kind>, VecDeque<(u64, ObjectKey)>>,
    /// Pods the watch took off the placement gate since the loop last polled, while this replica leads (a standby
    /// notes none: the leader's figures count them).
    exits: Vec<GateExit>,
    noting: bool,
}

impl WorkQueue {
    /// The queue of a controller whose watch events come as `watches` says.
    pub fn new(watches: Watches) -> Self {
        WorkQueue { watches, ..WorkQueue::default() }
    }

    /// A watch event: into the cache, its keys onto the queue. Returns whether it woke the queue (a pass has work).
    pub fn observe(&mut self, cache: &mut View, change: Change) -> bool {
        if !self.tombstones.is_empty() {
            let (key, revision) = (change.key(), change.revision());
            if self.tombstones.get(&key).is_some_and(|deleted| revision <= *deleted) {
                return false;
            }
            self.passed(key.kind, revision);
        }
        let exits = self.noting.then_some(&mut self.exits);
        let Some(touched) = observe_noting(cache, change, exits) else { return false };
        let woke = queue(&mut self.keys, touched);
        self.woken |= woke;
        woke
    }

    /// The stream that carries `kind` has delivered everything up to `revision`: older tombstones go.
    fn passed(&mut self, kind: Kind, revision: u64) {
        let Some(dug) = self.dug.get_mut(&self.stream_of(kind)) else { return };
        while let Some((deleted, _)) = dug.front()
            && *deleted <= revision
        {
            let (deleted, key) = dug.pop_front().expect("looked at above");
            if self.tombstones.get(&key) == Some(&deleted) {
                self.tombstones.remove(&key);
            }
        }
    }

    fn stream_of(&self, kind: Kind) -> Option<Kind> {
        match self.watches {
            Watches::One => None,
            Watches::PerKind => Some(kind),
        }
    }

    /// Whether the controller deleted the object of `change` at its revision or later: an older state, not taken.
    pub(super) fn buried(&self, change: &Change) -> bool {
        !self.tombstones.is_empty()
            && self.tombstones.get(&change.key()).is_some_and(|deleted| change.revision() <= *deleted)
    }

    /// How many tombstones are kept (for tests).
    #[cfg(test)]
    pub(super) fn tombstones_kept(&self) -> usize {
        self.tombstones.len()
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

    /// Notes pods leaving the gate from now on (`noting`: this replica leads) or not; hands those noted so far to
    /// `measure`.
    pub(super) fn drain_exits(&mut self, noting: bool, mut measure: impl FnMut(&GateExit)) {
        self.noting = noting;
        if !self.exits.is_empty() {
            self.exits.iter().for_each(&mut measure);
            self.exits.clear();
        }
    }

    /// The controller deleted `key` at `revision`: older states the watch still brings are not taken.
    pub(super) fn bury(&mut self, key: ObjectKey, revision: u64) {
        let stream = self.stream_of(key.kind);
        self.dug.entry(stream).or_default().push_back((revision, key.clone()));
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
