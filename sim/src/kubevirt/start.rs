//! When a VM may start again: the start-failure backoff after VMIs that ended without running, and the work
//! queue's rate limiter after a refused VMI create.

use std::collections::BTreeMap;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::kernel::Millis;

/// kubevirt/kubevirt pkg/virt-controller/watch/vm/vm.go `defaultMaxCrashLoopBackoffDelaySeconds`.
pub const START_BACKOFF_MAX_SECONDS: u64 = 300;

/// The delay before the next start after `failures` consecutive early failures (vm.go `calculateStartBackoffTime`):
/// `d = 10·n²` seconds (n ≥ 1), plus a uniform integer in `[0, d/2]`, capped at 300 s.
pub fn start_backoff_seconds(failures: u32, rng: &mut ChaCha8Rng) -> u64 {
    let n = u64::from(failures.max(1));
    let base = n.saturating_mul(n).saturating_mul(10).min(START_BACKOFF_MAX_SECONDS * 2);
    let jittered = base + rng.random_range(0..=base / 2);
    jittered.min(START_BACKOFF_MAX_SECONDS)
}

/// client-go's `DefaultControllerRateLimiter`, which KubeVirt's VM controller queue uses: the larger of a per-item
/// exponential backoff (5 ms · 2^k, at most 1000 s) and a shared token bucket (10 per second, burst 100).
#[derive(Clone, Debug)]
pub struct RateLimiter {
    failures: BTreeMap<String, u32>,
    bucket: TokenBucket,
}

/// client-go `workqueue.DefaultControllerRateLimiter` constants.
pub const ITEM_BACKOFF_BASE: Millis = Millis(5);
pub const ITEM_BACKOFF_MAX: Millis = Millis(1_000_000);
pub const BUCKET_PER_SECOND: u64 = 10;
pub const BUCKET_BURST: u64 = 100;

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter { failures: BTreeMap::new(), bucket: TokenBucket::new(BUCKET_PER_SECOND, BUCKET_BURST) }
    }
}

impl RateLimiter {
    /// When `item` may be retried, asked at `now` after another failure.
    pub fn when(&mut self, item: &str, now: Millis) -> Millis {
        let exponent = self.failures.get(item).copied().unwrap_or(0);
        self.failures.insert(item.to_owned(), exponent.saturating_add(1));
        let item_delay = 2u64
            .checked_pow(exponent)
            .and_then(|factor| factor.checked_mul(ITEM_BACKOFF_BASE.0))
            .map_or(ITEM_BACKOFF_MAX, |delay| Millis(delay.min(ITEM_BACKOFF_MAX.0)));
        item_delay.max(self.bucket.reserve(now))
    }

    /// The item succeeded: its backoff starts over.
    pub fn forget(&mut self, item: &str) {
        self.failures.remove(item);
    }

    /// Whether any item has failures counted (one to forget).
    pub fn backing_off(&self) -> bool {
        !self.failures.is_empty()
    }

    pub fn failures(&self, item: &str) -> u32 {
        self.failures.get(item).copied().unwrap_or(0)
    }
}

/// golang.org/x/time/rate's limiter, in thousandths of a token so that time stays integer milliseconds.
#[derive(Clone, Debug)]
struct TokenBucket {
    per_second: u64,
    burst_milli: i64,
    tokens_milli: i64,
    last: Millis,
}

impl TokenBucket {
    fn new(per_second: u64, burst: u64) -> Self {
        let burst_milli = (burst * 1_000) as i64;
        TokenBucket { per_second, burst_milli, tokens_milli: burst_milli, last: Millis::ZERO }
    }

    /// Takes one token at `now`; returns how long the caller must wait for it.
    fn reserve(&mut self, now: Millis) -> Millis {
        let elapsed = now.0.saturating_sub(self.last.0);
        // `per_second` tokens a second is `per_second` thousandths of a token a millisecond.
        let refill = elapsed.saturating_mul(self.per_second).min(i64::MAX as u64) as i64;
        self.tokens_milli = self.tokens_milli.saturating_add(refill).min(self.burst_milli);
        self.last = self.last.max(now);
        self.tokens_milli -= 1_000;
        if self.tokens_milli >= 0 {
            return Millis::ZERO;
        }
        let owed = self.tokens_milli.unsigned_abs();
        Millis(owed.div_ceil(self.per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::actor_stream;

    #[test]
    fn the_backoff_grows_with_failures_within_kubevirts_bounds() {
        let mut rng = actor_stream(5, "vm-controller");
        for (failures, min, max) in
            [(0, 10, 15), (1, 10, 15), (2, 40, 60), (3, 90, 135), (4, 160, 240), (5, 250, 300), (6, 300, 300)]
        {
            let delays: Vec<u64> = (0..1_000).map(|_| start_backoff_seconds(failures, &mut rng)).collect();
            assert!(delays.iter().all(|d| (min..=max).contains(d)), "{failures}: {delays:?}");
            if min < max {
                assert!(
                    delays.contains(&min) && delays.contains(&max.min(min + (max - min))),
                    "{failures}: the ends are drawn"
                );
            }
        }
    }

    #[test]
    fn a_refused_create_is_retried_exponentially_per_item() {
        let mut limiter = RateLimiter::default();
        let delays: Vec<Millis> = (0..5).map(|_| limiter.when("tenant-a/vm-1", Millis::ZERO)).collect();
        assert_eq!(delays, [Millis(5), Millis(10), Millis(20), Millis(40), Millis(80)]);
        assert_eq!(limiter.when("tenant-a/vm-2", Millis::ZERO), Millis(5), "per item");
        for _ in 0..30 {
            limiter.when("tenant-a/vm-1", Millis(1_000_000_000));
        }
        assert_eq!(limiter.when("tenant-a/vm-1", Millis(1_000_000_000)), ITEM_BACKOFF_MAX, "capped at 1000 s");
        limiter.forget("tenant-a/vm-1");
        assert_eq!(limiter.failures("tenant-a/vm-1"), 0);
    }

    #[test]
    fn the_shared_bucket_allows_a_burst_of_100_then_10_a_second() {
        let mut bucket = TokenBucket::new(BUCKET_PER_SECOND, BUCKET_BURST);
        let waits: Vec<Millis> = (0..102).map(|_| bucket.reserve(Millis::ZERO)).collect();
        assert!(waits[..100].iter().all(|w| *w == Millis::ZERO));
        assert_eq!((waits[100], waits[101]), (Millis(100), Millis(200)));
        // A second later, ten tokens came back: the debt of two is paid and eight are free.
        assert_eq!(bucket.reserve(Millis(1_000)), Millis::ZERO);
    }
}
