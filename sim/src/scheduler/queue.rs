//! kube-scheduler's queue for pods that did not fit: parked as unschedulable, moved back for another attempt when
//! the cluster changes in a way that may make them fit (a pod gone, a node added or changed), no sooner than their
//! backoff allows, and in any case after five minutes parked.
//!
//! Constants from kube-scheduler (pkg/scheduler/backend/queue/scheduling_queue.go and the config defaults):
//! `podInitialBackoffSeconds` 1, `podMaxBackoffSeconds` 10, `DefaultPodMaxInUnschedulablePodsDuration` 5 min, the
//! leftover flush every 30 s.

use std::collections::BTreeMap;

use crate::kernel::Millis;

pub const POD_INITIAL_BACKOFF: Millis = Millis(1_000);
pub const POD_MAX_BACKOFF: Millis = Millis(10_000);
pub const MAX_IN_UNSCHEDULABLE: Millis = Millis(300_000);
pub const FLUSH_LEFTOVER_EVERY: Millis = Millis(30_000);

/// A pod the scheduler could not place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parked {
    /// Failed attempts so far.
    attempts: u32,
    /// When it was parked.
    since: Millis,
}

#[derive(Clone, Debug, Default)]
pub struct SchedulingQueue {
    /// (namespace, pod) → parked state.
    unschedulable: BTreeMap<(String, String), Parked>,
    /// Attempts of pods that are back in the active queue (their backoff keeps growing until they bind).
    attempts: BTreeMap<(String, String), u32>,
    flush_scheduled: bool,
}

/// The backoff after `attempts` failures: 1 s doubling, at most 10 s.
pub fn backoff(attempts: u32) -> Millis {
    let doublings = attempts.saturating_sub(1).min(16);
    Millis((POD_INITIAL_BACKOFF.0 << doublings).min(POD_MAX_BACKOFF.0))
}

impl SchedulingQueue {
    /// A pod failed to fit at `now`: parked. Returns when the leftover flush must run, if it is not scheduled.
    pub fn park(&mut self, namespace: &str, pod: &str, now: Millis) -> Option<Millis> {
        let key = (namespace.to_owned(), pod.to_owned());
        let attempts = self.attempts.remove(&key).unwrap_or(0) + 1;
        self.unschedulable.insert(key, Parked { attempts, since: now });
        if self.flush_scheduled {
            return None;
        }
        self.flush_scheduled = true;
        Some(now + FLUSH_LEFTOVER_EVERY)
    }

    /// The cluster changed: every parked pod goes back, each once its backoff since it was parked has passed.
    /// Returns (namespace, pod, when) for each.
    pub fn move_all(&mut self, now: Millis) -> Vec<(String, String, Millis)> {
        let parked = std::mem::take(&mut self.unschedulable);
        parked
            .into_iter()
            .map(|((namespace, pod), parked)| {
                let at = (parked.since + backoff(parked.attempts)).max(now);
                self.attempts.insert((namespace.clone(), pod.clone()), parked.attempts);
                (namespace, pod, at)
            })
            .collect()
    }

    /// The leftover flush: pods parked five minutes or more go back now. Returns them, and when the next flush
    /// runs (none while nothing is parked).
    pub fn flush(&mut self, now: Millis) -> (Vec<(String, String)>, Option<Millis>) {
        let due: Vec<(String, String)> = self
            .unschedulable
            .iter()
            .filter(|(_, parked)| now.0.saturating_sub(parked.since.0) >= MAX_IN_UNSCHEDULABLE.0)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &due {
            let parked = self.unschedulable.remove(key).expect("listed above");
            self.attempts.insert(key.clone(), parked.attempts);
        }
        self.flush_scheduled = !self.unschedulable.is_empty();
        (due, self.flush_scheduled.then_some(now + FLUSH_LEFTOVER_EVERY))
    }

    /// The pod bound or went away.
    pub fn forget(&mut self, namespace: &str, pod: &str) {
        // Asked for every pod that binds or goes; most never failed to fit, so the key is built only when some did.
        if self.unschedulable.is_empty() && self.attempts.is_empty() {
            return;
        }
        let key = (namespace.to_owned(), pod.to_owned());
        self.unschedulable.remove(&key);
        self.attempts.remove(&key);
    }

    pub fn is_parked(&self, namespace: &str, pod: &str) -> bool {
        !self.unschedulable.is_empty() && self.unschedulable.contains_key(&(namespace.to_owned(), pod.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_ten() {
        let seconds: Vec<u64> = (1..=6).map(|n| backoff(n).0 / 1_000).collect();
        assert_eq!(seconds, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn a_cluster_change_moves_parked_pods_back_after_their_backoff() {
        let mut queue = SchedulingQueue::default();
        assert_eq!(queue.park("ns", "a", Millis(0)), Some(Millis(30_000)), "the first park schedules the flush");
        assert_eq!(queue.park("ns", "b", Millis(500)), None);
        let moved = queue.move_all(Millis(700));
        assert_eq!(moved, [("ns".into(), "a".into(), Millis(1_000)), ("ns".into(), "b".into(), Millis(1_500))]);
        // a fails again: its second backoff is 2 s.
        queue.park("ns", "a", Millis(1_000));
        assert_eq!(queue.move_all(Millis(1_100)), [("ns".into(), "a".into(), Millis(3_000))]);
        queue.forget("ns", "a");
        queue.park("ns", "a", Millis(4_000));
        assert_eq!(queue.move_all(Millis(4_000)), [("ns".into(), "a".into(), Millis(5_000))], "bound: starts over");
    }

    #[test]
    fn the_flush_returns_pods_parked_five_minutes() {
        let mut queue = SchedulingQueue::default();
        queue.park("ns", "old", Millis(0));
        queue.park("ns", "new", Millis(200_000));
        let (due, next) = queue.flush(Millis(300_000));
        assert_eq!(due, [("ns".into(), "old".into())]);
        assert_eq!(next, Some(Millis(330_000)), "one is still parked");
        assert!(queue.is_parked("ns", "new"));
        let (due, next) = queue.flush(Millis(500_000));
        assert_eq!((due.len(), next), (1, None), "nothing left: no more flushes");
    }
}
