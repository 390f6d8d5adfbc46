//! `gpuclaim sim run`: one run of the twin on a scenario file, checked like every run (invariants after every event,
//! the scenario's expectations for the variant), with its figures on request.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use std::collections::BTreeMap;

use anyhow::{Context, anyhow};
use gpuclaim_engine::controller::metrics::{GateOutcome, Readings};
use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::run_checked_world;
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::log::EventLog;

pub struct Options {
    pub scenario: PathBuf,
    pub seed: Option<u64>,
    pub events_out: Option<PathBuf>,
    pub stats: bool,
    pub metrics_out: Option<PathBuf>,
    pub variant: String,
}

pub fn run(options: &Options) -> anyhow::Result<ExitCode> {
    let path = options.scenario.display();
    let text = std::fs::read_to_string(&options.scenario).with_context(|| format!("failed to read scenario {path}"))?;
    let scenario = parse_scenario(&text).map_err(|e| anyhow!("scenario {path}: {e}"))?;
    let variant = Variant::named(&options.variant)?;
    let seed = match options.seed.or(scenario.seed) {
        Some(seed) => seed,
        None => {
            // A run without a seed draws one and says it first, so any run can be replayed.
            let drawn =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            eprintln!("seed: {drawn}");
            drawn
        }
    };
    let sink: Option<Box<dyn std::io::Write>> = match &options.events_out {
        Some(file) => {
            let file = std::fs::File::create(file).with_context(|| format!("failed to create {}", file.display()))?;
            Some(Box::new(std::io::BufWriter::new(file)))
        }
        None => None,
    };
    // A variant the scenario does not list is judged by the shipped engine's expectations.
    let listed = scenario.variants().map_err(|e| anyhow!("scenario {path}: {e}"))?;
    let judge_as = if listed.iter().any(|(name, _)| *name == options.variant) { &options.variant } else { "shipped" };
    let started = Instant::now();
    let (run, world) = run_checked_world(&scenario, variant, judge_as, seed, EventLog::new(sink))
        .map_err(|e| anyhow!("scenario {path}, seed {seed}: {e}"))?;
    let wall_seconds = started.elapsed().as_secs_f64();
    if options.stats {
        let events = world.events();
        let stats = serde_json::json!({
            "scenario": scenario.name,
            "seed": seed,
            "variant": options.variant,
            "events": events,
            "simulated_seconds": world.now().0 as f64 / 1_000.0,
            "wall_seconds": wall_seconds,
            "events_per_second": events as f64 / wall_seconds.max(1e-9),
            "event_log_sha256": run.hash,
            "vm_starts": world.vm_starts(),
            "controller_passes": world.stats().controller_passes,
            "pins_rechecked": world.stats().pins_rechecked,
            "refusals": world.stats().refusals,
            "start_wait": world.start_waits(),
            "gpu_units_in_use": world.units_in_use(),
            "waiting_at_gate": world.waiting_at_gate(),
            "dashboard": dashboard(&world.readings()),
            "checks": if run.passed() { "passed" } else { "failed" },
        });
        println!("{stats}");
    }
    if let Some(file) = &options.metrics_out {
        let exposition = gpuclaim_adapter::metrics::exposition(&world.readings(), world.engine_time());
        std::fs::write(file, exposition).with_context(|| format!("failed to write {}", file.display()))?;
    }
    // The process ends here and its event log is already flushed: freeing the world's millions of small
    // allocations one by one would only add to the run's time (about 2% of ref-1k's).
    std::mem::forget(world);
    if let Some(failure) = run.failure() {
        eprintln!(
            "scenario {path}, seed {seed}, variant {}: {failure}\nreplay: gpuclaim sim run {path} --seed {seed} \
             --variant {}",
            options.variant, options.variant
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// What the operator's dashboard would have shown at the run's end (`controller::metrics`): the gate-wait quantiles
/// of placed pods as its panel estimates them from the buckets, the pods whose wait ended in a deletion, the
/// unit-hours held per namespace and class, and the pods at the gate by class and reason.
fn dashboard(readings: &Readings) -> serde_json::Value {
    let placed = readings.gate_waits_of(None, Some(GateOutcome::Ungated));
    let mut unit_hours: BTreeMap<&str, BTreeMap<&str, f64>> = BTreeMap::new();
    for ((namespace, class), seconds) in &readings.units_bound_seconds {
        unit_hours.entry(namespace.as_str()).or_default().insert(class.as_str(), (seconds / 3.6).round() / 1_000.0);
    }
    let mut gated: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for ((class, reason), pods) in readings.gauges.iter().flat_map(|gauges| &gauges.gated_pods) {
        gated.entry(class.as_str()).or_default().insert(reason.as_str(), *pods);
    }
    serde_json::json!({
        "gate_wait_seconds": {
            "count": placed.count(),
            "p50": placed.quantile(0.5),
            "p90": placed.quantile(0.9),
            "p99": placed.quantile(0.99),
        },
        "gate_waits_ended_deleted": readings.gate_waits_of(None, Some(GateOutcome::Deleted)).count(),
        "unit_hours": unit_hours,
        "gated_pods": gated,
    })
}
