//! Run statistics the twin keeps as it goes: start waits (a VM created → Running), GPU units in use per resource
//! over time (peak and time-weighted mean), and what still waits at the gate when the run ends, by reason; gate waits
//! (a launcher created → ungated) and counts of what capacity planners ask about (orders accepted, migrations
//! failed, start failures that put a VM in `CrashLoopBackOff`, pods set waiting by reason). What-if reports and trace
//! replays read them; they never change what the run does.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::kernel::Millis;

/// Summary of a sample: nearest-rank percentiles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

/// Nearest-rank percentiles of `values` (sorted in place).
pub fn percentiles(values: &mut [u64]) -> Percentiles {
    if values.is_empty() {
        return Percentiles::default();
    }
    values.sort_unstable();
    let rank = |p: u64| values[((p * values.len() as u64).div_ceil(100) as usize).clamp(1, values.len()) - 1];
    Percentiles {
        count: values.len() as u64,
        p50_ms: rank(50),
        p90_ms: rank(90),
        p99_ms: rank(99),
        max_ms: *values.last().expect("not empty"),
    }
}

/// Units of one resource in use over time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Usage {
    now: u64,
    peak: u64,
    /// ∫ units dt, in unit·ms.
    area: u128,
    since: Millis,
}

/// Units in use of a resource over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UnitsInUse {
    pub peak: u64,
    pub mean: f64,
}

/// What a run measures.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    start_waits: Vec<u64>,
    gate_waits: Vec<u64>,
    in_use: BTreeMap<String, Usage>,
    counts: BTreeMap<String, u64>,
}

/// What [`Metrics::count`] counts: a tenant's order the order webhook let through.
pub const ORDER_ACCEPTED: &str = "OrderAccepted";
/// A live migration that ended Failed.
pub const MIGRATION_FAILED: &str = "MigrationFailed";
/// A VMI that ended without running: its VM goes into `CrashLoopBackOff` until the start backoff allows a new one.
pub const START_FAILURE: &str = "StartFailure";
/// The GPU controller set a gated pod waiting, as `Waiting:<reason>` (`Waiting:BudgetExceeded`, ...).
pub const WAITING_PREFIX: &str = "Waiting:";

impl Metrics {
    pub fn started(&mut self, waited: Millis) {
        self.start_waits.push(waited.0);
    }

    /// `units` of `resource` taken (`delta` > 0) or given back at `now`.
    pub fn units(&mut self, resource: &str, delta: i64, now: Millis) {
        let usage = self.in_use.entry(resource.to_owned()).or_default();
        usage.area += u128::from(usage.now) * u128::from(now.0 - usage.since.0);
        usage.since = now;
        usage.now = usage.now.saturating_add_signed(delta);
        usage.peak = usage.peak.max(usage.now);
    }

    pub fn start_waits(&self) -> Percentiles {
        percentiles(&mut self.start_waits.clone())
    }

    /// Start waits in the order the VMs reached Running, in ms (a report takes those after its warm-up).
    pub fn start_wait_samples(&self) -> &[u64] {
        &self.start_waits
    }

    /// A launcher (or any gated pod) left the placement gate `waited` after it was created.
    pub fn ungated(&mut self, waited: Millis) {
        self.gate_waits.push(waited.0);
    }

    /// Gate waits in the order the pods were ungated, in ms.
    pub fn gate_wait_samples(&self) -> &[u64] {
        &self.gate_waits
    }

    /// Counts one occurrence of `what` (see the constants above).
    pub fn count(&mut self, what: &str) {
        match self.counts.get_mut(what) {
            Some(count) => *count += 1,
            None => {
                self.counts.insert(what.to_owned(), 1);
            }
        }
    }

    /// Occurrences so far by what was counted.
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    /// Units of each resource running VMIs hold now.
    pub fn units_now(&self) -> BTreeMap<String, u64> {
        self.in_use.iter().map(|(resource, usage)| (resource.clone(), usage.now)).collect()
    }

    /// Peak and time-weighted mean of the units in use per resource over [0, `end`].
    pub fn units_in_use(&self, end: Millis) -> BTreeMap<String, UnitsInUse> {
        self.in_use
            .iter()
            .map(|(resource, usage)| {
                let area = usage.area + u128::from(usage.now) * u128::from(end.0.saturating_sub(usage.since.0));
                let mean = if end.0 == 0 { 0.0 } else { area as f64 / end.0 as f64 };
                (resource.clone(), UnitsInUse { peak: usage.peak, mean: (mean * 1000.0).round() / 1000.0 })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut values: Vec<u64> = (1..=100).rev().collect();
        let p = percentiles(&mut values);
        assert_eq!((p.count, p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms), (100, 50, 90, 99, 100));
        assert_eq!(percentiles(&mut [7]).p50_ms, 7);
        assert_eq!(percentiles(&mut []), Percentiles::default());
    }

    #[test]
    fn counts_and_gate_waits_keep_what_was_recorded() {
        let mut metrics = Metrics::default();
        metrics.count(MIGRATION_FAILED);
        metrics.count(MIGRATION_FAILED);
        metrics.count(ORDER_ACCEPTED);
        metrics.ungated(Millis(1_500));
        metrics.ungated(Millis(0));
        assert_eq!(metrics.counts()[MIGRATION_FAILED], 2);
        assert_eq!(metrics.counts()[ORDER_ACCEPTED], 1);
        assert_eq!(metrics.gate_wait_samples(), &[1_500, 0]);
    }

    #[test]
    fn units_in_use_are_weighted_by_time() {
        let mut metrics = Metrics::default();
        metrics.units("gpu", 4, Millis(0));
        metrics.units("gpu", 4, Millis(1_000));
        metrics.units("gpu", -8, Millis(2_000));
        let used = &metrics.units_in_use(Millis(4_000))["gpu"];
        // 4 for 1 s, 8 for 1 s, 0 for 2 s: 12 unit·s over 4 s.
        assert_eq!((used.peak, used.mean), (8, 3.0));
    }
}
