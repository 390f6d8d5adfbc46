//! Virtual time and the one event queue: events ordered by (time, insertion sequence), so events at the same
//! millisecond run in the order they were scheduled, on every machine.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::ops::Add;

use serde::Serialize;

/// Virtual time in milliseconds since the run began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Millis(pub u64);

impl Millis {
    pub const ZERO: Millis = Millis(0);

    pub const fn seconds(seconds: u64) -> Millis {
        Millis(seconds * 1_000)
    }

    pub fn checked_add(self, other: Millis) -> Option<Millis> {
        self.0.checked_add(other.0).map(Millis)
    }
}

/// Virtual time as a duration since the run's zero, for what counts in durations (the engine's rate limiters).
impl From<Millis> for std::time::Duration {
    fn from(at: Millis) -> Self {
        std::time::Duration::from_millis(at.0)
    }
}

/// A duration in whole milliseconds (rounded down; beyond u64's range, the largest).
impl From<std::time::Duration> for Millis {
    fn from(duration: std::time::Duration) -> Self {
        Millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }
}

impl Add for Millis {
    type Output = Millis;

    fn add(self, other: Millis) -> Millis {
        self.checked_add(other).expect("virtual time does not overflow u64 milliseconds")
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1_000, self.0 % 1_000)
    }
}

/// The most events the queue holds at once: a run that schedules more is broken, not busy.
pub const EVENTS_QUEUED_MAX: usize = 10_000_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelError {
    #[error("an event was scheduled at {at}, before the current time {now}")]
    InThePast { now: Millis, at: Millis },
    #[error("more than {EVENTS_QUEUED_MAX} events are queued")]
    QueueFull,
    #[error("the run did not end: {handled} events handled by {now}, past its bound of {bound} events")]
    Unbounded { handled: u64, now: Millis, bound: u64 },
}

/// The event queue and the clock. Generic over the event type the world defines.
#[derive(Debug)]
pub struct Kernel<E> {
    now: Millis,
    sequence: u64,
    /// Events due later than now, ordered by (time, sequence): the heap holds only that key and the event's slot,
    /// so sifting moves 24 bytes, not the event.
    later: BinaryHeap<Reverse<(Millis, u64, u32)>>,
    /// The events of `later`, by slot; freed slots are reused.
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    /// Events scheduled for the current millisecond, in the order they were scheduled. Most events a step schedules
    /// are for now (the next controller in a chain reacting at once); they need no ordering beyond arrival, and
    /// every event of `later` due now was scheduled before them, so it runs first.
    due_now: VecDeque<E>,
    handled: u64,
}

impl<E> Default for Kernel<E> {
    fn default() -> Self {
        Kernel {
            now: Millis::ZERO,
            sequence: 0,
            later: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            due_now: VecDeque::new(),
            handled: 0,
        }
    }
}

impl<E> Kernel<E> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn now(&self) -> Millis {
        self.now
    }

    /// Events handled so far (the index the event log and invariant reports use).
    pub fn handled(&self) -> u64 {
        self.handled
    }

    pub fn queued(&self) -> usize {
        self.later.len() + self.due_now.len()
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<Millis> {
        if !self.due_now.is_empty() {
            return Some(self.now);
        }
        self.later.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Schedules `event` at `at`; the past is an error (a bug in the actor that asked).
    pub fn schedule_at(&mut self, at: Millis, event: E) -> Result<(), KernelError> {
        if at < self.now {
            return Err(KernelError::InThePast { now: self.now, at });
        }
        if self.queued() >= EVENTS_QUEUED_MAX {
            return Err(KernelError::QueueFull);
        }
        self.sequence += 1;
        if at == self.now {
            self.due_now.push_back(event);
            return Ok(());
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                u32::try_from(self.slots.len() - 1).expect("the queue's bound keeps slots within u32")
            }
        };
        self.later.push(Reverse((at, self.sequence, slot)));
        Ok(())
    }

    pub fn schedule_after(&mut self, delay: Millis, event: E) -> Result<(), KernelError> {
        self.schedule_at(self.now + delay, event)
    }

    /// Takes the next event and moves the clock to its time.
    pub fn take_next(&mut self) -> Option<(Millis, E)> {
        // Events of `later` due now were scheduled before any of `due_now` (those were scheduled at now itself).
        let event = match self.later.peek() {
            Some(Reverse((at, _, _))) if *at == self.now || self.due_now.is_empty() => {
                let Reverse((at, _, slot)) = self.later.pop().expect("peeked");
                self.now = at;
                self.free.push(slot);
                self.slots[slot as usize].take().expect("a queued slot holds its event")
            }
            _ => self.due_now.pop_front()?,
        };
        self.handled += 1;
        Some((self.now, event))
    }

    /// Runs `step` on every event up to and including `until`, at most `events_max` events: a run that does not
    /// end within its bound fails with a clear error instead of spinning. Returns how many events ran.
    pub fn run<X>(
        &mut self,
        until: Millis,
        events_max: u64,
        mut step: impl FnMut(&mut Self, Millis, E) -> Result<(), X>,
    ) -> Result<u64, RunError<X>> {
        let mut ran = 0;
        while self.peek_time().is_some_and(|at| at <= until) {
            if ran == events_max {
                return Err(RunError::Kernel(KernelError::Unbounded {
                    handled: self.handled,
                    now: self.now,
                    bound: events_max,
                }));
            }
            let (at, event) = self.take_next().expect("peeked an event");
            step(self, at, event).map_err(RunError::Step)?;
            ran += 1;
        }
        if self.now < until {
            self.now = until;
        }
        Ok(ran)
    }
}

/// Why a run stopped early: the kernel's bound, or the world's step.
#[derive(Debug, PartialEq, Eq)]
pub enum RunError<X> {
    Kernel(KernelError),
    Step(X),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_run_by_time_then_by_the_order_they_were_scheduled() {
        let mut kernel = Kernel::new();
        kernel.schedule_at(Millis(20), "c").unwrap();
        kernel.schedule_at(Millis(10), "a").unwrap();
        kernel.schedule_at(Millis(10), "b").unwrap();
        let order: Vec<_> = std::iter::from_fn(|| kernel.take_next()).collect();
        assert_eq!(order, [(Millis(10), "a"), (Millis(10), "b"), (Millis(20), "c")]);
        assert_eq!((kernel.now(), kernel.handled()), (Millis(20), 3));
    }

    /// The kernel's order against the definition (a sort by time, then by when each was scheduled), with events
    /// scheduled while others run, many at the current millisecond.
    #[test]
    fn events_scheduled_while_running_keep_time_then_schedule_order() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut kernel = Kernel::new();
        let mut expected: Vec<(Millis, u64)> = Vec::new();
        let mut next = 0u64;
        for _ in 0..50 {
            let at = Millis(rng.random_range(0..20));
            kernel.schedule_at(at, next).unwrap();
            expected.push((at, next));
            next += 1;
        }
        let mut seen = Vec::new();
        while let Some((at, event)) = kernel.take_next() {
            seen.push((at, event));
            if next < 2_000 {
                for _ in 0..rng.random_range(0..3) {
                    let delay = if rng.random_bool(0.6) { 0 } else { rng.random_range(0..15) };
                    kernel.schedule_at(at + Millis(delay), next).unwrap();
                    expected.push((at + Millis(delay), next));
                    next += 1;
                }
            }
        }
        // Events are numbered in the order they were scheduled, so (time, number) is (time, sequence).
        expected.sort();
        assert_eq!(seen, expected);
        assert_eq!(kernel.queued(), 0);
    }

    #[test]
    fn scheduling_in_the_past_is_an_error() {
        let mut kernel = Kernel::new();
        kernel.schedule_at(Millis(10), ()).unwrap();
        kernel.take_next();
        assert_eq!(kernel.schedule_at(Millis(9), ()), Err(KernelError::InThePast { now: Millis(10), at: Millis(9) }));
        assert!(kernel.schedule_at(Millis(10), ()).is_ok(), "now itself is not the past");
    }

    #[test]
    fn a_run_stops_at_its_deadline_and_moves_the_clock_there() {
        let mut kernel = Kernel::new();
        for at in [5, 10, 15] {
            kernel.schedule_at(Millis(at), at).unwrap();
        }
        let mut seen = Vec::new();
        let ran = kernel.run(Millis(12), 100, |_, _, e| -> Result<(), ()> {
            seen.push(e);
            Ok(())
        });
        assert_eq!((ran, seen), (Ok(2), vec![5, 10]));
        assert_eq!(kernel.now(), Millis(12));
        assert_eq!(kernel.queued(), 1);
    }

    #[test]
    fn a_run_that_does_not_end_fails_with_its_bound() {
        let mut kernel = Kernel::new();
        kernel.schedule_at(Millis(0), ()).unwrap();
        // Every event schedules another at the same time: it never reaches the deadline.
        let result = kernel.run(Millis(1), 1_000, |k, now, ()| -> Result<(), ()> {
            k.schedule_at(now, ()).unwrap();
            Ok(())
        });
        let Err(RunError::Kernel(KernelError::Unbounded { handled, bound, .. })) = result else { panic!("{result:?}") };
        assert_eq!((handled, bound), (1_000, 1_000));
    }
}
