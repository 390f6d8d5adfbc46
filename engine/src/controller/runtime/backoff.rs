//! client-go's `DefaultControllerRateLimiter`: when a work queue's item may be tried again after a failure. The GPU
//! controller's runtime retries refused writes with it, and the twin's KubeVirt controllers their refused creates,
//! as their work queues do.
//!
//! Times are offsets from any fixed origin (the twin's virtual zero, the Unix epoch): only differences matter.

use std::collections::BTreeMap;
use std::time::Duration;

/// client-go `workqueue.DefaultControllerRateLimiter` constants: the per-item backoff's base and cap, and the
/// shared bucket's rate and burst.
pub const ITEM_BACKOFF_BASE: Duration = Duration::from_millis(5);
pub const ITEM_BACKOFF_MAX: Duration = Duration::from_secs(1_000);
pub const BUCKET_PER_SECOND: u64 = 10;
pub const BUCKET_BURST: u64 = 100;

/// The larger of a per-item exponential backoff (5 ms · 2^k, at most 1000 s) and a shared token bucket (10 per
/// second, burst 100), as client-go's `DefaultControllerRateLimiter` composes them.
#[derive(Clone, Debug)]
pub struct RateLimiter<K> {
    failures: BTreeMap<K, u32>,
    bucket: TokenBucket,
}

impl<K: Ord + Clone> Default for RateLimiter<K> {
    fn default() -> Self {
        RateLimiter { failures: BTreeMap::new(), bucket: TokenBucket::new(BUCKET_PER_SECOND, BUCKET_BURST) }
    }
}

impl<K: Ord + Clone> RateLimiter<K> {
    /// How long `item` must wait before it is tried again, asked at `now` after another failure.
    pub fn when(&mut self, item: &K, now: Duration) -> Duration {
        let exponent = self.failures.get(item).copied().unwrap_or(0);
        self.failures.insert(item.clone(), exponent.saturating_add(1));
        let item_delay = 2u32
            .checked_pow(exponent)
            .and_then(|factor| ITEM_BACKOFF_BASE.checked_mul(factor))
            .map_or(ITEM_BACKOFF_MAX, |delay| delay.min(ITEM_BACKOFF_MAX));
        item_delay.max(self.bucket.reserve(now))
    }

    /// The item succeeded: its backoff starts over.
    pub fn forget(&mut self, item: &K) {
        self.failures.remove(item);
    }

    /// Whether any item has failures counted (one to forget).
    pub fn backing_off(&self) -> bool {
        !self.failures.is_empty()
    }

    pub fn failures(&self, item: &K) -> u32 {
        self.failures.get(item).copied().unwrap_or(0)
    }
}

/// golang.org/x/time/rate's limiter, in thousandths of a token so that time stays integer milliseconds.
#[derive(Clone, Debug)]
struct TokenBucket {
    per_second: u64,
    burst_milli: i64,
    tokens_milli: i64,
    last_ms: u64,
}

impl TokenBucket {
    fn new(per_second: u64, burst: u64) -> Self {
        let burst_milli = (burst * 1_000) as i64;
        TokenBucket { per_second, burst_milli, tokens_milli: burst_milli, last_ms: 0 }
    }

    /// Takes one token at `now`; returns how long the caller must wait for it.
    fn reserve(&mut self, now: Duration) -> Duration {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let elapsed = now_ms.saturating_sub(self.last_ms);
        // `per_second` tokens a second is `per_second` thousandths of a token a millisecond.
        let refill = elapsed.saturating_mul(self.per_second).min(i64::MAX as u64) as i64;
        self.tokens_milli = self.tokens_milli.saturating_add(refill).min(self.burst_milli);
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens_milli -= 1_000;
        if self.tokens_milli >= 0 {
            return Duration::ZERO;
        }
        let owed = self.tokens_milli.unsigned_abs();
        Duration::from_millis(owed.div_ceil(self.per_second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn a_failed_item_is_retried_exponentially_per_item() {
        let mut limiter = RateLimiter::default();
        let vm_1 = "tenant-a/vm-1".to_owned();
        let delays: Vec<Duration> = (0..5).map(|_| limiter.when(&vm_1, Duration::ZERO)).collect();
        assert_eq!(delays, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
        assert_eq!(limiter.when(&"tenant-a/vm-2".to_owned(), Duration::ZERO), ms(5), "per item");
        for _ in 0..30 {
            limiter.when(&vm_1, ms(1_000_000_000));
        }
        assert_eq!(limiter.when(&vm_1, ms(1_000_000_000)), ITEM_BACKOFF_MAX, "capped at 1000 s");
        limiter.forget(&vm_1);
        assert_eq!(limiter.failures(&vm_1), 0);
    }

    #[test]
    fn the_shared_bucket_allows_a_burst_of_100_then_10_a_second() {
        let mut bucket = TokenBucket::new(BUCKET_PER_SECOND, BUCKET_BURST);
        let waits: Vec<Duration> = (0..102).map(|_| bucket.reserve(Duration::ZERO)).collect();
        assert!(waits[..100].iter().all(|w| *w == Duration::ZERO));
        assert_eq!((waits[100], waits[101]), (ms(100), ms(200)));
        // A second later, ten tokens came back: the debt of two is paid and eight are free.
        assert_eq!(bucket.reserve(ms(1_000)), Duration::ZERO);
    }
}
