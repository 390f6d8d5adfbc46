//! The watch stream the GPU controller's cache is fed from: every change of a watched kind, in revision order,
//! delivered a lag after it was written. A change carries the object as written (a snapshot), so a cache that
//! lags sees every intermediate state, as a real watch delivers them.

use std::collections::VecDeque;

use gpuclaim_engine::controller::runtime::{Change, ObjectKey};

use crate::kernel::Millis;

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
    /// The keys of every change written since the journal was last taken, when someone reads it (the run's
    /// invariant checks look at what an event touched, not at the whole store).
    journal: Option<Vec<ObjectKey>>,
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

    /// Starts keeping the journal of changed keys.
    pub fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The keys changed since the last call (empty unless the journal is kept). `spent` (emptied) takes the
    /// journal's place, so the journal keeps a buffer grown to an event's size instead of growing a new one.
    pub fn take_journal(&mut self, mut spent: Vec<ObjectKey>) -> Vec<ObjectKey> {
        spent.clear();
        match &mut self.journal {
            Some(journal) => std::mem::replace(journal, spent),
            None => Vec::new(),
        }
    }

    /// Notes a change written outside the stream (a watcher's own write) in the journal.
    pub(super) fn note(&mut self, change: &Change) {
        if let Some(journal) = &mut self.journal {
            journal.push(change.key());
        }
    }

    pub(super) fn push(&mut self, change: Change) {
        self.note(&change);
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
