//! What an operator's dashboard shows of the controller, computed once for the twin and the live adapter: how long
//! pods wait at the placement gate (a histogram per class, by how the wait ended), the unit-seconds claims hold per
//! tenant and class (what GPU-hours are billed from), and the cluster's gauges read from the view (pods at the gate
//! by class and reason, claims by class and phase, each class's published units).
//!
//! The controller's loop ([`super::runtime::Runtime`]) keeps a [`Figures`] as it runs: every change that goes into
//! its cache is looked at once for a pod leaving the gate ([`gate_exit`]), and the units claims hold are accrued at
//! each pass. The live adapter exports what it holds (adapter/src/metrics.rs, Prometheus text); the twin sums the
//! figures of every process that led in a run, so a what-if report says what the dashboard would have shown. Both
//! read the gauges with [`Gauges::of`]. Nothing here changes a decision.
//!
//! Names, labels and buckets are Prometheus conventions (base units, `_seconds`, `_total`); docs/adapter.md lists
//! every metric. A series whose class or tenant no longer holds anything goes [`SERIES_LINGER`] later, so a class,
//! namespace or reason that is gone leaves no series behind, and the last increments are scraped before it goes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::{ClaimPhase, Name, Pod, Published, Time, View};

/// The gate wait's buckets, in seconds: 0.1 s (a pod placed in the pass its creation woke) to 6 h (a queue behind
/// a full class), about ×2–×3 apart, as Prometheus's default buckets are.
pub const GATE_WAIT_BUCKETS_SECONDS: [f64; 18] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1_200.0, 1_800.0, 3_600.0, 7_200.0, 14_400.0,
    21_600.0,
];

/// How long a series stays after its class is gone (a gate-wait series) or its tenant holds no more units of its
/// class (a unit-seconds series): several scrape intervals (Prometheus scrapes every 30 s to 1 min by default; the
/// chart's ServiceMonitor every 30 s), so the last increments are scraped before the series goes.
pub const SERIES_LINGER: Duration = Duration::from_secs(10 * 60);

/// The reason of a pod at the gate the controller has not judged yet (no placement condition written).
pub const NOT_YET_CONSIDERED: &str = "NotYetConsidered";

/// The class label of a pod whose set cannot be read (`MissingAttachments`, `MalformedAttachments`, `NoClaims`).
pub const NO_CLASS: &str = "";

/// How a wait at the gate ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GateOutcome {
    /// The controller removed the gate (the pod was placed).
    Ungated,
    /// The pod was deleted while gated (its VM stopped, a migration gave up).
    Deleted,
}

impl GateOutcome {
    /// The `outcome` label.
    pub fn name(self) -> &'static str {
        match self {
            GateOutcome::Ungated => "ungated",
            GateOutcome::Deleted => "deleted",
        }
    }
}

/// A pod that left the gate: when it was gated (the pod webhook gates a pod as it is created), for which classes,
/// and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateExit {
    pub gated: Time,
    /// The classes of its set, sorted, each once ([`NO_CLASS`] alone when the set cannot be read).
    pub classes: Vec<Name>,
    pub outcome: GateOutcome,
}

/// Whether a change of `cached` (a pod the cache holds) to `incoming` (`None`: its deletion) takes it off the gate.
pub fn gate_exit(cached: &Pod, incoming: Option<&Pod>) -> Option<GateExit> {
    if !crate::model::holds_placement_gate(cached) {
        return None;
    }
    let outcome = match incoming {
        None => GateOutcome::Deleted,
        Some(pod) if !crate::model::holds_placement_gate(pod) => GateOutcome::Ungated,
        Some(_) => return None,
    };
    Some(GateExit { gated: cached.created, classes: classes_of(cached), outcome })
}

/// The classes of a pod's set, sorted, each once; [`NO_CLASS`] alone when it has none that can be read.
pub fn classes_of(pod: &Pod) -> Vec<Name> {
    let mut classes: Vec<Name> = match pod.attachments() {
        Some(Ok(set)) => set.iter().map(|attachment| Name::from(attachment.class.as_str())).collect(),
        _ => Vec::new(),
    };
    classes.sort_unstable();
    classes.dedup();
    if classes.is_empty() {
        classes.push(Name::from(NO_CLASS));
    }
    classes
}

/// A histogram with fixed buckets, as Prometheus keeps one: counts per bucket, their sum, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is `+Inf`'s.
    counts: Vec<u64>,
    sum_seconds: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|pair| pair[0] < pair[1]), "bucket bounds grow");
        Histogram { bounds, counts: vec![0; bounds.len() + 1], sum_seconds: 0.0 }
    }

    /// One observation of `seconds` (a negative one, from clock skew, counts as 0).
    pub fn observe(&mut self, seconds: f64) {
        let seconds = seconds.max(0.0);
        let bucket = self.bounds.partition_point(|bound| *bound < seconds);
        self.counts[bucket] += 1;
        self.sum_seconds += seconds;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_seconds
    }

    /// (upper bound, observations at or below it) per bucket, `+Inf` last: the `_bucket{le=...}` series.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        bounds
            .zip(&self.counts)
            .scan(0, |seen, (bound, count)| {
                *seen += count;
                Some((bound, *seen))
            })
            .collect()
    }

    /// (upper bound, observations in that bucket alone) per bucket, `+Inf` last.
    pub fn per_bucket(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.bounds.iter().copied().chain([f64::INFINITY]).zip(self.counts.iter().copied())
    }

    /// The observations since `earlier` (an earlier reading of this histogram): what Prometheus's `increase()`
    /// over the window between them gives.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        assert_eq!(self.bounds, earlier.bounds, "readings of one histogram have the same buckets");
        let counts = self.counts.iter().zip(&earlier.counts).map(|(now, then)| now.saturating_sub(*then)).collect();
        Histogram { bounds: self.bounds, counts, sum_seconds: (self.sum_seconds - earlier.sum_seconds).max(0.0) }
    }

    /// Adds `other`'s observations (the same buckets).
    pub fn merge(&mut self, other: &Histogram) {
        assert_eq!(self.bounds, other.bounds, "histograms merged have the same buckets");
        for (count, more) in self.counts.iter_mut().zip(&other.counts) {
            *count += more;
        }
        self.sum_seconds += other.sum_seconds;
    }

    /// The `q`-quantile as Prometheus's `histogram_quantile` estimates it from the buckets (linear within the bucket
    /// the rank falls in; the highest finite bound when it falls in `+Inf`'s): what a dashboard's panel shows.
    /// `None` without observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let cumulative = self.cumulative();
        let total = cumulative.last().map_or(0, |(_, count)| *count);
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let bucket = cumulative.iter().position(|(_, count)| *count as f64 >= rank).unwrap_or(cumulative.len() - 1);
        if bucket == cumulative.len() - 1 {
            return self.bounds.last().copied();
        }
        let (start, below) = if bucket == 0 { (0.0, 0) } else { cumulative[bucket - 1] };
        let (end, at) = cumulative[bucket];
        let inside = (at - below) as f64;
        Some(start + (end - start) * (rank - below as f64) / inside)
    }
}

/// Unit-seconds held by one tenant's claims of one class.
#[derive(Clone, Debug, Default, PartialEq)]
struct Accrual {
    /// Units held since the last accrual.
    units: u64,
    /// Unit-nanoseconds held so far.
    unit_nanos: u128,
    /// The last time units were held.
    held: Option<Time>,
}

/// A gate-wait series and when its class was last seen.
#[derive(Clone, Debug, PartialEq)]
struct Waits {
    histogram: Histogram,
    seen: Time,
}

/// What the controller's loop measures as it runs: gate waits and unit-seconds held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    gate_waits: BTreeMap<(Name, GateOutcome), Waits>,
    /// namespace → class → what its claims held (two levels, so that each pass's lookups borrow their keys).
    units_bound: BTreeMap<Name, BTreeMap<Name, Accrual>>,
    /// When units were last accrued.
    accrued_at: Option<Time>,
}

impl Figures {
    /// A pod left the gate at `now`: its wait goes into the histogram of each class of its set.
    pub fn left_gate(&mut self, exit: &GateExit, now: Time) {
        let seconds = now.duration_since(exit.gated).as_secs_f64();
        for class in &exit.classes {
            let key = (class.clone(), exit.outcome);
            let waits = self
                .gate_waits
                .entry(key)
                .or_insert_with(|| Waits { histogram: Histogram::new(&GATE_WAIT_BUCKETS_SECONDS), seen: now });
            waits.histogram.observe(seconds);
            waits.seen = now;
        }
    }

    /// Accrues the units held since the last call up to `now`, then reads what `view` holds from now on; series
    /// idle for [`SERIES_LINGER`] go. Called at each pass and when a pass's writes are in: units change only
    /// through the controller's own writes (a claim is bound, released or let go of its finalizer by it alone).
    pub fn accrue(&mut self, view: &View, now: Time) {
        self.stop_accruing(now);
        for (namespace, tenant) in view.tenants() {
            for (class, units) in tenant.bound_units().filter(|(_, units)| *units > 0) {
                if !self.units_bound.contains_key(namespace) {
                    self.units_bound.insert(Name::from(namespace), BTreeMap::new());
                }
                let classes = self.units_bound.get_mut(namespace).expect("inserted above");
                if !classes.contains_key(class) {
                    classes.insert(Name::from(class), Accrual::default());
                }
                let accrual = classes.get_mut(class).expect("inserted above");
                accrual.units = units;
                accrual.held = Some(now);
            }
        }
        let lingered = |at: Time| at_least(at, now, SERIES_LINGER);
        for classes in self.units_bound.values_mut() {
            classes.retain(|_, accrual| accrual.held.is_some_and(|held| !lingered(held)));
        }
        self.units_bound.retain(|_, classes| !classes.is_empty());
        for ((class, _), waits) in &mut self.gate_waits {
            if class.as_str() == NO_CLASS || view.class(class).is_some() {
                waits.seen = now;
            }
        }
        self.gate_waits.retain(|_, waits| !lingered(waits.seen));
    }

    /// Accrues what is held up to `now`, then holds nothing: this process no longer leads (its lease is gone, it
    /// stopped), and the next leader accrues from its first pass.
    pub fn stop_accruing(&mut self, now: Time) {
        let elapsed = self.accrued_at.map_or(0, |at| nanos_between(at, now));
        self.accrued_at = Some(now);
        for accrual in self.units_bound.values_mut().flat_map(BTreeMap::values_mut) {
            if accrual.units > 0 {
                accrual.unit_nanos += u128::from(accrual.units) * elapsed;
                accrual.held = Some(now);
            }
            accrual.units = 0;
        }
    }

    /// Whether units were last accrued `period` or more before `now` (or never).
    pub fn accrued_before(&self, now: Time, period: Duration) -> bool {
        self.accrued_at.is_none_or(|at| at_least(at, now, period))
    }

    /// Gate waits by (class, outcome).
    pub fn gate_waits(&self) -> impl Iterator<Item = (&str, GateOutcome, &Histogram)> {
        self.gate_waits.iter().map(|((class, outcome), waits)| (class.as_str(), *outcome, &waits.histogram))
    }

    /// Unit-seconds held by (namespace, class) as of `now`: what was accrued, and what is held since.
    pub fn units_bound_seconds(&self, now: Time) -> BTreeMap<(Name, Name), f64> {
        let since = self.accrued_at.map_or(0, |at| nanos_between(at, now));
        let series = self
            .units_bound
            .iter()
            .flat_map(|(namespace, classes)| classes.iter().map(move |(class, accrual)| (namespace, class, accrual)));
        series
            .map(|(namespace, class, accrual)| {
                let nanos = accrual.unit_nanos + u128::from(accrual.units) * since;
                ((namespace.clone(), class.clone()), nanos as f64 / 1e9)
            })
            .collect()
    }

    /// What it measured, as of `now`.
    pub fn readings(&self, now: Time) -> Readings {
        let gate_waits = self.gate_waits.iter().map(|(key, waits)| (key.clone(), waits.histogram.clone())).collect();
        Readings { gate_waits, units_bound_seconds: self.units_bound_seconds(now), gauges: None }
    }
}

/// Everything a dashboard reads of the controller as of one time: what its loop measured, and the gauges of its
/// view (`None`: not read, as on a replica that does not lead). The live adapter renders it on each scrape; the
/// twin sums it over the processes that led in a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Readings {
    pub gate_waits: BTreeMap<(Name, GateOutcome), Histogram>,
    pub units_bound_seconds: BTreeMap<(Name, Name), f64>,
    pub gauges: Option<Gauges>,
}

impl Readings {
    /// Adds the readings of another process (a Prometheus query summing the replicas' series): histograms and
    /// counters add up; the gauges are `other`'s when it has them.
    pub fn merge(&mut self, other: &Readings) {
        for (key, histogram) in &other.gate_waits {
            match self.gate_waits.get_mut(key) {
                Some(mine) => mine.merge(histogram),
                None => {
                    self.gate_waits.insert(key.clone(), histogram.clone());
                }
            }
        }
        for (key, seconds) in &other.units_bound_seconds {
            *self.units_bound_seconds.entry(key.clone()).or_default() += seconds;
        }
        if other.gauges.is_some() {
            self.gauges.clone_from(&other.gauges);
        }
    }

    /// What the counters and histograms gained since `earlier` (a reading of the same run), the gauges being
    /// this reading's: a dashboard's `increase()` over the window between them.
    pub fn since(&self, earlier: &Readings) -> Readings {
        let gate_waits = self
            .gate_waits
            .iter()
            .map(|(key, histogram)| {
                let gained =
                    earlier.gate_waits.get(key).map_or_else(|| histogram.clone(), |then| histogram.since(then));
                (key.clone(), gained)
            })
            .collect();
        let units_bound_seconds = self
            .units_bound_seconds
            .iter()
            .map(|(key, seconds)| {
                let then = earlier.units_bound_seconds.get(key).copied().unwrap_or(0.0);
                (key.clone(), (seconds - then).max(0.0))
            })
            .collect();
        Readings { gate_waits, units_bound_seconds, gauges: self.gauges.clone() }
    }

    /// The gate waits of `class` (all outcomes, or one), summed: what `sum by (le)` over its series gives.
    pub fn gate_waits_of(&self, class: Option<&str>, outcome: Option<GateOutcome>) -> Histogram {
        let mut sum = Histogram::new(&GATE_WAIT_BUCKETS_SECONDS);
        for ((of, ended), histogram) in &self.gate_waits {
            if class.is_none_or(|class| class == of.as_str()) && outcome.is_none_or(|outcome| outcome == *ended) {
                sum.merge(histogram);
            }
        }
        sum
    }
}

/// Whether `period` or more passed from `from` to `to`.
fn at_least(from: Time, to: Time, period: Duration) -> bool {
    to.duration_since(from).as_nanos() >= i128::try_from(period.as_nanos()).unwrap_or(i128::MAX)
}

fn nanos_between(from: Time, to: Time) -> u128 {
    u128::try_from(to.duration_since(from).as_nanos()).unwrap_or(0)
}

/// The cluster's gauges as the view has them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// Pods at the gate by (class, reason): a pod whose set spans classes counts under each.
    pub gated_pods: BTreeMap<(Name, String), u64>,
    /// When the longest-waiting pod at the gate was gated, by class (its wait grows with the time it is read at:
    /// [`Gauges::gated_wait_seconds_max`]).
    pub gated_since: BTreeMap<Name, Time>,
    /// Claims by (class, phase); every phase of every class there is, zero included.
    pub claims: BTreeMap<(Name, ClaimPhase), u64>,
    /// Each class's published units.
    pub classes: BTreeMap<String, Published>,
}

impl Gauges {
    pub fn of(view: &View) -> Gauges {
        let mut gauges = Gauges::default();
        for pod in view.gated_pods() {
            let reason = pod.waiting.as_ref().map_or(NOT_YET_CONSIDERED, |waiting| waiting.reason.as_str());
            for class in classes_of(pod) {
                *gauges.gated_pods.entry((class.clone(), reason.to_owned())).or_default() += 1;
                let since = gauges.gated_since.entry(class).or_insert(pod.created);
                *since = (*since).min(pod.created);
            }
        }
        for class in view.classes() {
            gauges.classes.insert(class.name.clone(), class.published);
            for phase in [ClaimPhase::Pending, ClaimPhase::Bound, ClaimPhase::Attached] {
                gauges.claims.insert((Name::from(class.name.as_str()), phase), 0);
            }
        }
        for claim in view.claims() {
            *gauges.claims.entry((claim.class.clone(), claim.phase)).or_default() += 1;
        }
        gauges
    }

    /// The longest wait at the gate by class as of `now`, in seconds.
    pub fn gated_wait_seconds_max(&self, now: Time) -> impl Iterator<Item = (&str, f64)> {
        self.gated_since
            .iter()
            .map(move |(class, since)| (class.as_str(), now.duration_since(*since).as_secs_f64().max(0.0)))
    }
}

#[cfg(test)]
mod tests;
