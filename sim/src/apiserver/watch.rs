//! The watch stream the GPU controller's cache is fed from: every change of a watched kind, in revision order,
//! delivered a lag after it was written. A change carries the object as written (a snapshot), so a cache that
//! lags sees every intermediate state, as a real watch delivers them.

use std::collections::VecDeque;

use gpuclaim_engine::controller::runtime::{Change, Kind, ObjectKey, revision};
use gpuclaim_engine::model::Name;

use crate::kernel::Millis;

/// One write in the journal: the object's key and the revision it was written at (a deletion's own).
pub type Journaled = (ObjectKey, u64);

/// The stream of one watcher: changes queued with the time they are due.
#[derive(Debug, Default)]
pub struct Watch {
    /// How long a change takes to reach the watcher.
    pub lag: Millis,
    now: Millis,
    queue: VecDeque<(Millis, Change)>,
    delivery_scheduled: bool,
    /// A lag drawn per change, uniform in [lag, max], from its own stream (a fault a scenario switches on).
    jitter: Option<(Millis, rand_chacha::ChaCha8Rng)>,
    /// The key and revision of every write since the journal was last taken, when someone reads it (the run's
    /// invariant checks look at what an event touched, not at the whole store). It holds writes of every kind the
    /// store keeps, watched or not (a pod the controller does not watch too), as an API server's own watch cache
    /// sees them.
    journal: Option<Vec<Journaled>>,
}

impl Watch {
    /// Sets the clock new changes are stamped with.
    pub fn tick(&mut self, now: Millis) {
        self.now = now;
    }

    /// Draws each change's lag uniformly from [lag, max] with `rng`.
    pub fn jitter(&mut self, max: Millis, rng: rand_chacha::ChaCha8Rng) {
        self.jitter = Some((max.max(self.lag), rng));
    }

    /// Whether someone reads the journal of writes.
    pub fn keeps_journal(&self) -> bool {
        self.journal.is_some()
    }

    /// Starts keeping the journal of writes.
    pub fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The writes since the last call, in the order written (empty unless the journal is kept). `spent` (emptied)
    /// takes the journal's place, so the journal keeps a buffer grown to an event's size instead of growing a new
    /// one.
    pub fn take_journal(&mut self, mut spent: Vec<Journaled>) -> Vec<Journaled> {
        spent.clear();
        match &mut self.journal {
            Some(journal) => std::mem::replace(journal, spent),
            None => Vec::new(),
        }
    }

    /// Notes a change written outside the stream (a watcher's own write) in the journal.
    pub(super) fn note(&mut self, change: &Change) {
        if let Some(journal) = &mut self.journal {
            journal.push((change.key(), change.revision()));
        }
    }

    /// Notes a write of an object no watcher selects (a pod the controller does not watch): in the journal only,
    /// its key built only when the journal is kept.
    pub(super) fn note_key(&mut self, kind: Kind, namespace: &Name, name: &Name, resource_version: &str) {
        if let Some(journal) = &mut self.journal {
            let key = ObjectKey { kind, namespace: namespace.clone(), name: name.clone() };
            journal.push((key, revision(resource_version)));
        }
    }

    pub(super) fn push(&mut self, change: Change) {
        self.note(&change);
        self.queue(change);
    }

    /// [`Watch::push`] for a change whose object carries no revision (a quota, the settings): journaled at
    /// `revision`, the one its write took.
    pub(super) fn push_at(&mut self, change: Change, revision: u64) {
        if let Some(journal) = &mut self.journal {
            journal.push((change.key(), revision));
        }
        self.queue(change);
    }

    fn queue(&mut self, change: Change) {
        let lag = match &mut self.jitter {
            Some((max, rng)) => Millis(rand::RngExt::random_range(rng, self.lag.0..=max.0)),
            None => self.lag,
        };
        // Delivery stays in revision order, whatever the lag: a watch is one ordered stream.
        let due = self.queue.back().map_or(self.now + lag, |(last, _)| (*last).max(self.now + lag));
        self.queue.push_back((due, change));
    }

    /// When the next delivery must run, if one is not scheduled yet (the caller schedules it).
    pub fn delivery_due(&mut self) -> Option<Millis> {
        if self.delivery_scheduled {
            return None;
        }
        let (due, _) = self.queue.front()?;
        self.delivery_scheduled = true;
        Some(*due)
    }

    /// Takes every change due by `now` (moved out one by one as the caller takes them: a change carries a whole
    /// object, and collecting them first copied each once more); the next delivery is the caller's to schedule again.
    pub fn deliver(&mut self, now: Millis) -> impl Iterator<Item = Change> + '_ {
        self.delivery_scheduled = false;
        let due = self.queue.iter().take_while(|(at, _)| *at <= now).count();
        self.queue.drain(..due).map(|(_, change)| change)
    }
}
