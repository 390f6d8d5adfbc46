//! One run of one variant on one seed: the world built from the variant's scenario, run in chunks to sample the
//! cluster between them, and what it measured. Every figure is a pure function of (scenario, seed).

use std::collections::{BTreeMap, BTreeSet};

use gpuclaim_engine::controller::metrics::{GateOutcome, Readings};
use gpuclaim_engine::variant::Variant as EngineVariant;
use gpuclaim_scenarios::check::{check_event, watch_invariants};
use gpuclaim_scenarios::scenario::Scenario;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::metrics::{self, percentiles};
use gpuclaim_sim::world::World;
use serde::{Deserialize, Serialize};

use gpuclaim_engine::references::GpuEntry;

use crate::fill::FillPlan;
use crate::study::{classes_key, typical_claim};

/// The most events one run may handle before it is declared runaway.
pub const EVENTS_MAX: u64 = 1_000_000_000;

#[derive(Debug, thiserror::Error)]
#[error("variant {variant}, seed {seed}: {reason}")]
pub struct RunError {
    pub variant: String,
    pub seed: u64,
    pub reason: String,
}

/// Values over time, one per sample point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Sample times, in hours since the start.
    pub t_hours: Vec<f64>,
    /// class → share of its units that running VMs hold.
    pub utilisation: BTreeMap<String, Vec<f64>>,
    /// class → share of its units claims hold (bound, running or not).
    pub allocated: BTreeMap<String, Vec<f64>>,
    /// Pods at the placement gate.
    pub gate_queue: Vec<f64>,
    /// class → free units on nodes that a typical claim of the class cannot use (Σ free mod size).
    pub stranded: BTreeMap<String, Vec<f64>>,
    /// VMs in CrashLoopBackOff.
    pub crash_loop: Vec<f64>,
}

/// What one run measured. `scalars` holds every figure the report aggregates across seeds, by a stable name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub variant: String,
    pub seed: u64,
    pub events: u64,
    pub scalars: BTreeMap<String, f64>,
    /// Refusals after the warm-up, by `<what>:<reason>`.
    pub refusals: BTreeMap<String, u64>,
    pub series: Series,
    /// A fill's curve: the share of the cluster's units allocated at 1, 2, … % of them arrived (empty unless the
    /// study fills). Written with the run (a shard's run is merged from its JSON), left out when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fill: Vec<f64>,
    /// At the same points, the units arrived and not allocated (waiting), as a share of the cluster's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fill_waiting: Vec<f64>,
}

/// Counters at the warm-up's end, subtracted from the run's end.
#[derive(Default)]
struct Mark {
    start_waits: usize,
    gate_waits: usize,
    refusals: BTreeMap<String, u64>,
    counts: BTreeMap<String, u64>,
    readings: Readings,
}

impl Mark {
    fn of(world: &World) -> Self {
        Mark {
            start_waits: world.metrics().start_wait_samples().len(),
            gate_waits: world.metrics().gate_wait_samples().len(),
            refusals: world.stats().refusals.clone(),
            counts: world.metrics().counts().clone(),
            readings: world.readings(),
        }
    }
}

/// The first start waits of the timed VMs (`vms:`) ordering some classes, for an SLO over those classes. The twin's
/// start-wait samples carry no VM name, so after every event in which a VM started, the watched VMs created by then
/// and not started yet are looked up by name (`World::last_start_wait`). Scanning only on starts, and only the
/// watched VMs waiting, keeps it off the run's hot path.
struct StartWatch {
    /// (created, deleted, namespace, name) of every watched VM, by creation time.
    vms: Vec<(Millis, Option<Millis>, String, String)>,
    /// `vms[..next]` are created by now (or will be within this instant).
    next: usize,
    /// Indices into `vms` of those not started yet.
    waiting: Vec<usize>,
    starts_seen: u64,
    warmup: Millis,
    /// First start waits (ms) of the VMs that started after the warm-up.
    waits: Vec<u64>,
}

impl StartWatch {
    fn new(scenario: &Scenario, classes: &[String], warmup: Millis) -> Self {
        let held_class = |tenant: &str, claim: &str| {
            let tenant = scenario.cluster.tenants.iter().find(|t| t.name == tenant);
            tenant.and_then(|t| t.claims.iter().find(|c| c.name == claim)).map(|c| c.class.clone())
        };
        let mut vms: Vec<(Millis, Option<Millis>, String, String)> = scenario
            .vms
            .iter()
            .filter(|vm| {
                vm.gpu_entries().iter().any(|entry| match entry {
                    GpuEntry::ClaimTemplate(template) => classes.contains(&template.class),
                    GpuEntry::Claim(claim) => held_class(&vm.tenant, claim).is_some_and(|c| classes.contains(&c)),
                    GpuEntry::Name(_) => false,
                })
            })
            .map(|vm| (vm.at.0, vm.stop_at.map(|d| d.0), vm.tenant.clone(), vm.name.clone()))
            .collect();
        vms.sort();
        StartWatch { vms, next: 0, waiting: Vec::new(), starts_seen: 0, warmup, waits: Vec::new() }
    }

    fn observe(&mut self, world: &World) {
        if world.vm_starts() == self.starts_seen {
            return;
        }
        self.starts_seen = world.vm_starts();
        let now = world.now();
        while self.next < self.vms.len() && self.vms[self.next].0 <= now {
            self.waiting.push(self.next);
            self.next += 1;
        }
        let counted = self.warmup == Millis(0) || now > self.warmup;
        let (vms, waits) = (&self.vms, &mut self.waits);
        self.waiting.retain(|&i| {
            let (_, _, namespace, name) = &vms[i];
            match world.last_start_wait(namespace, name) {
                Some(wait) => {
                    if counted {
                        waits.push(wait.0);
                    }
                    false
                }
                None => true,
            }
        });
    }

    /// The waits at the run's end: the started VMs', then each watched VM that never started counts with its wait
    /// until it was deleted (a trace's deletion time) or until the end, a lower bound either way, so a pool too small
    /// to start them cannot look fast. Returns (waits, VMs not started).
    fn finish(mut self, end: Millis) -> (Vec<u64>, usize) {
        self.waiting.extend(self.next..self.vms.iter().filter(|vm| vm.0 <= end).count());
        let mut not_started = 0;
        for &i in &self.waiting {
            let (created, deleted, _, _) = &self.vms[i];
            let until = deleted.map_or(end, |d| d.min(end));
            if until > self.warmup || self.warmup == Millis(0) {
                self.waits.push(until.0.saturating_sub(created.0));
                not_started += 1;
            }
        }
        (self.waits, not_started)
    }
}

/// Runs `scenario` on `seed` and measures it: sampled `samples` times at even intervals; waits and counts taken
/// after `warmup`, as are the time series' means. With `slo_classes`, also the start waits of the timed VMs
/// ordering those classes (`start_wait_p90_s:<classes>`...).
#[allow(clippy::too_many_arguments)]
pub fn run_one(
    variant: &str,
    scenario: &Scenario,
    engine: EngineVariant,
    seed: u64,
    samples: u32,
    warmup: Millis,
    slo_classes: &[String],
    fill: Option<&FillPlan>,
) -> Result<RunResult, RunError> {
    let fail = |reason: String| RunError { variant: variant.to_owned(), seed, reason };
    // Nothing in a report reads the event log's hash: the run only counts its lines.
    let mut world = scenario.build(seed, EventLog::unhashed()).map_err(|e| fail(e.to_string()))?;
    world.set_variant(engine);
    // Every run holds the invariants after every event (docs/scenarios.md): a what-if figure from a run that broke
    // one would be a figure of a bug.
    let mut invariants = watch_invariants(&mut world, engine, scenario.reaction_time());
    let mut watch = (!slo_classes.is_empty()).then(|| StartWatch::new(scenario, slo_classes, warmup));
    let mut advance = |world: &mut World, until: Millis| -> Result<(), RunError> {
        let outcome = world
            .run_observed(until, EVENTS_MAX, |world| {
                if let Some(watch) = watch.as_mut() {
                    watch.observe(world);
                }
                check_event(&mut invariants, world)
            })
            .map_err(|e| fail(e.to_string()))?;
        outcome.map(|_| ()).map_err(|stop| fail(stop.to_string()))
    };
    let duration = scenario.duration.0;
    let classes: Vec<(String, String, u64)> = scenario
        .cluster
        .classes
        .iter()
        .map(|c| (c.name.clone(), c.resource_name.clone(), typical_claim(scenario, &c.name)))
        .collect();
    let mut series = Series::default();
    let mut fill_figures = BTreeMap::new();
    let mut mark = if warmup == Millis(0) { Some(Mark::default()) } else { None };
    // Sample points after the warm-up count towards the series' means.
    let mut measured = Vec::new();
    let mut curve = Vec::new();
    let mut waiting = Vec::new();
    match fill {
        // A fill is sampled at its points (a fill has no warm-up): the series and the curve.
        Some(plan) => {
            let mut first_short = None;
            for (x, (t, arrived)) in (1..).zip(&plan.points) {
                advance(&mut world, *t)?;
                sample(&world, *t, &classes, &mut series);
                measured.push(true);
                let allocated = allocated_units(&world);
                curve.push(allocated as f64 / plan.cluster_units as f64);
                waiting.push(arrived.saturating_sub(allocated) as f64 / plan.cluster_units as f64);
                if first_short.is_none() && allocated < *arrived {
                    first_short = Some(x);
                }
            }
            advance(&mut world, duration)?;
            fill_scalars(plan, &curve, first_short, &mut fill_figures);
            // Why the VMs left over wait: the fill's answer to "why does it wait when units are free".
            for pod in world.store().gated_pods() {
                let reason = pod.waiting.as_ref().map_or("(none yet)", |w| w.reason.as_str());
                *fill_figures.entry(format!("fill_waiting_at_end:{reason}")).or_insert(0.0) += 1.0;
            }
        }
        None => {
            for i in 1..=u64::from(samples) {
                let t = Millis(duration.0 * i / u64::from(samples));
                if mark.is_none() && warmup <= t {
                    advance(&mut world, warmup)?;
                    mark = Some(Mark::of(&world));
                }
                advance(&mut world, t)?;
                sample(&world, t, &classes, &mut series);
                measured.push(t > warmup);
            }
        }
    }
    let mark = mark.unwrap_or_default();
    let mut result = RunResult {
        fill: curve,
        fill_waiting: waiting,
        variant: variant.to_owned(),
        seed,
        events: world.events(),
        scalars: BTreeMap::new(),
        refusals: difference(&world.stats().refusals, &mark.refusals),
        series,
    };
    measure(&world, &mark, &measured, &mut result);
    result.scalars.extend(fill_figures);
    if let Some(watch) = watch {
        let key = classes_key(slo_classes);
        let (mut waits, not_started) = watch.finish(duration);
        result.scalars.insert(format!("vms_not_started:{key}"), not_started as f64);
        insert_waits(&mut result.scalars, "start_wait", &key, &mut waits);
    }
    Ok(result)
}

/// Units of the classes' resources taken on the cluster's nodes (claims bound there, pods' devices beyond them),
/// each node counted up to what it has.
fn allocated_units(world: &World) -> u64 {
    let store = world.store();
    let capacity = store.placement_index();
    let resources: BTreeSet<&str> = store.classes().map(|class| class.resource_name.as_str()).collect();
    store
        .nodes()
        .flat_map(|node| {
            let capacity = &capacity;
            resources.iter().filter_map(move |resource| {
                let has = node.devices.get(*resource)?;
                Some(capacity.used(resource, &node.name).min(*has))
            })
        })
        .sum()
}

/// A fill's figures: the share allocated at 100% and at the last point, the first point (in % of the cluster's
/// units arrived) where the units allocated fall below the units arrived (one past the last point when they never
/// do), and the arrived units not allocated at 100%.
fn fill_scalars(plan: &FillPlan, curve: &[f64], first_short: Option<usize>, scalars: &mut BTreeMap<String, f64>) {
    let at = |x: usize| curve.get(x - 1).copied();
    if let Some(share) = at(100) {
        scalars.insert("fill_allocated_pct_at_100".to_owned(), share * 100.0);
        let arrived = plan.points[99].1 as f64;
        let waiting = arrived - share * plan.cluster_units as f64;
        scalars.insert("fill_units_waiting_at_100".to_owned(), waiting.round());
    }
    if let Some(share) = curve.last() {
        scalars.insert("fill_allocated_pct_at_end".to_owned(), *share * 100.0);
    }
    scalars.insert("fill_first_short_pct".to_owned(), first_short.unwrap_or(curve.len() + 1) as f64);
    scalars.insert("fill_arrivals".to_owned(), plan.arrivals as f64);
}

fn sample(world: &World, t: Millis, classes: &[(String, String, u64)], series: &mut Series) {
    let store = world.store();
    let capacity = store.placement_index();
    let running = world.metrics().units_now();
    series.t_hours.push(t.0 as f64 / 3_600_000.0);
    for (class, resource, size) in classes {
        let published = capacity.published(class, None);
        let share = |units: u64| {
            if published.allocatable_units == 0 { 0.0 } else { units as f64 / published.allocatable_units as f64 }
        };
        let in_use = running.get(resource).copied().unwrap_or(0).min(published.allocatable_units);
        series.utilisation.entry(class.clone()).or_default().push(share(in_use));
        let claimed = published.allocatable_units.saturating_sub(published.free_units);
        series.allocated.entry(class.clone()).or_default().push(share(claimed));
        let stranded: u64 = capacity.most_free_first(class).map(|(free, _)| free % size).sum();
        series.stranded.entry(class.clone()).or_default().push(stranded as f64);
    }
    series.gate_queue.push(store.gated_pods().count() as f64);
    series.crash_loop.push(world.vms_in_crash_loop() as f64);
}

/// The run's scalars, every one named as summary.json and runs.csv name it.
fn measure(world: &World, mark: &Mark, measured: &[bool], result: &mut RunResult) {
    let metrics = world.metrics();
    let scalars = &mut result.scalars;
    // VMs still waiting at the end count with their wait so far: a lower bound, but a cluster too small to start
    // them must not look fast.
    let mut start_waits = metrics.start_wait_samples()[mark.start_waits..].to_vec();
    let still_waiting = world.waiting_to_start();
    scalars.insert("vms_waiting_at_end".to_owned(), still_waiting.len() as f64);
    start_waits.extend(still_waiting);
    insert_waits(scalars, "start_wait", "", &mut start_waits);
    insert_waits(scalars, "gate_wait", "", &mut metrics.gate_wait_samples()[mark.gate_waits..].to_vec());
    // What the operator's dashboard would have shown over the measured window (`controller::metrics`, the live
    // controller's buckets): its gate-wait panel's quantiles of placed pods, estimated from the buckets as
    // histogram_quantile does, and the unit-hours billed per namespace and class.
    let dashboard = world.readings().since(&mark.readings);
    let placed = dashboard.gate_waits_of(None, Some(GateOutcome::Ungated));
    for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
        scalars.insert(format!("dashboard_gate_wait_{name}_s"), placed.quantile(q).unwrap_or(0.0));
    }
    for ((namespace, class), seconds) in &dashboard.units_bound_seconds {
        scalars.insert(format!("unit_hours:{namespace}:{class}"), seconds / 3_600.0);
    }
    let counts = difference(metrics.counts(), &mark.counts);
    let count = |what: &str| counts.get(what).copied().unwrap_or(0) as f64;
    let order_refusals: BTreeMap<&str, u64> = result
        .refusals
        .iter()
        .filter_map(|(key, n)| key.strip_prefix("OrderRefused:").map(|reason| (reason, *n)))
        .collect();
    let refused: u64 = order_refusals.values().sum();
    let accepted = count(metrics::ORDER_ACCEPTED);
    scalars.insert("orders".to_owned(), accepted + refused as f64);
    scalars.insert("orders_refused".to_owned(), refused as f64);
    let offered = accepted + refused as f64;
    scalars.insert("orders_refused_share".to_owned(), if offered > 0.0 { refused as f64 / offered } else { 0.0 });
    for (reason, n) in &order_refusals {
        scalars.insert(format!("orders_refused:{reason}"), *n as f64);
    }
    let budget_waits = count(&format!("{}BudgetExceeded", metrics::WAITING_PREFIX));
    let budget_orders = order_refusals.get("BudgetExceeded").copied().unwrap_or(0) as f64;
    scalars.insert("budget_hits".to_owned(), budget_orders + budget_waits);
    scalars.insert("failed_migrations".to_owned(), count(metrics::MIGRATION_FAILED));
    scalars.insert("start_failures".to_owned(), count(metrics::START_FAILURE));
    scalars.insert("vm_starts".to_owned(), world.vm_starts() as f64);
    let series = &result.series;
    let mean = |values: &[f64]| {
        let kept: Vec<f64> = values.iter().zip(measured).filter(|(_, m)| **m).map(|(v, _)| *v).collect();
        if kept.is_empty() { 0.0 } else { kept.iter().sum::<f64>() / kept.len() as f64 }
    };
    let peak = |values: &[f64]| values.iter().zip(measured).filter(|(_, m)| **m).fold(0.0, |a, (v, _)| f64::max(a, *v));
    for (class, values) in &series.utilisation {
        scalars.insert(format!("utilisation:{class}"), mean(values));
    }
    for (class, values) in &series.allocated {
        scalars.insert(format!("allocated:{class}"), mean(values));
    }
    for (class, values) in &series.stranded {
        scalars.insert(format!("stranded_units:{class}"), mean(values));
    }
    scalars.insert("gate_queue_mean".to_owned(), mean(&series.gate_queue));
    scalars.insert("gate_queue_peak".to_owned(), peak(&series.gate_queue));
    scalars.insert("crash_loop_peak".to_owned(), peak(&series.crash_loop));
}

/// `<name>_{count,mean_s,p50_s,p90_s,p99_s,max_s}` of the waits (ms), each suffixed `:<key>` when a key is given.
fn insert_waits(scalars: &mut BTreeMap<String, f64>, name: &str, key: &str, samples: &mut [u64]) {
    let suffix = if key.is_empty() { String::new() } else { format!(":{key}") };
    let mean = if samples.is_empty() { 0.0 } else { samples.iter().sum::<u64>() as f64 / samples.len() as f64 };
    let p = percentiles(samples);
    let seconds = |ms: u64| ms as f64 / 1_000.0;
    scalars.insert(format!("{name}_count{suffix}"), p.count as f64);
    scalars.insert(format!("{name}_mean_s{suffix}"), mean / 1_000.0);
    scalars.insert(format!("{name}_p50_s{suffix}"), seconds(p.p50_ms));
    scalars.insert(format!("{name}_p90_s{suffix}"), seconds(p.p90_ms));
    scalars.insert(format!("{name}_p99_s{suffix}"), seconds(p.p99_ms));
    scalars.insert(format!("{name}_max_s{suffix}"), seconds(p.max_ms));
}

/// `now - before`, per key (counters only grow).
fn difference(now: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}
