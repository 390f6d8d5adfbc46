//! `gpuclaim sim run`: one run of the twin on a scenario file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, anyhow};
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::scenario::parse_scenario;

pub struct Options {
    pub scenario: PathBuf,
    pub seed: Option<u64>,
    pub events_out: Option<PathBuf>,
    pub stats: bool,
    pub variant: String,
}

/// The most events one run may handle before it is declared runaway.
const EVENTS_MAX: u64 = 1_000_000_000;

pub fn run(options: &Options) -> anyhow::Result<()> {
    let path = options.scenario.display();
    let text = std::fs::read_to_string(&options.scenario).with_context(|| format!("failed to read scenario {path}"))?;
    let scenario = parse_scenario(&text).map_err(|e| anyhow!("scenario {path}: {e}"))?;
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
    let variant = gpuclaim_engine::variant::Variant::named(&options.variant)?;
    let mut world = scenario.build(seed, EventLog::new(sink)).map_err(|e| anyhow!("scenario {path}: {e}"))?;
    world.set_variant(variant);
    let started = Instant::now();
    world
        .run(scenario.duration.0, EVENTS_MAX)
        .map_err(|e| {
            let variant = &options.variant;
            anyhow!("scenario {path}, seed {seed}: {e}\nreplay: gpuclaim sim run {path} --seed {seed} --variant {variant}")
        })?;
    let wall_seconds = started.elapsed().as_secs_f64();
    drop(world.take_log());
    if options.stats {
        let events = world.events();
        let stats = serde_json::json!({
            "scenario": scenario.name,
            "seed": seed,
            "events": events,
            "simulated_seconds": scenario.duration.0.0 as f64 / 1_000.0,
            "wall_seconds": wall_seconds,
            "events_per_second": events as f64 / wall_seconds.max(1e-9),
            "event_log_sha256": world.log_hash(),
            "vm_starts": world.vm_starts(),
            "controller_passes": world.stats().controller_passes,
            "refusals": world.stats().refusals,
            "start_wait": world.start_waits(),
            "gpu_units_in_use": world.units_in_use(),
            "waiting_at_gate": world.waiting_at_gate(),
        });
        println!("{stats}");
    }
    Ok(())
}
