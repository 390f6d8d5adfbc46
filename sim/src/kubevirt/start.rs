//! When a VM may start again: the start-failure backoff after VMIs that ended without running. (A refused VMI
//! create is retried by the work queue's rate limiter, client-go's, which the GPU controller's runtime uses too:
//! `engine::controller::runtime::RateLimiter`.)

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

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
}
