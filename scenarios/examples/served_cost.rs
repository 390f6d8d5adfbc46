//! What serving a scenario costs the world: the same scenario and seed run in-process and in served mode (every
//! event's changes rendered into the snapshot clients read, no client connected), side by side, alternating, in one
//! process. `cargo run --release -p gpuclaim-scenarios --example served_cost -- SCENARIO [ROUNDS [MODE]]`, MODE
//! `served` or `in-process` to run one of them only (for instruction counts under callgrind); the figures in
//! docs/performance.md come from it.

use std::time::Instant;

use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::World;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: served_cost SCENARIO [ROUNDS]");
    let rounds: usize = args.next().map_or(2, |rounds| rounds.parse().expect("ROUNDS is a number"));
    let only = args.next();
    let modes: Vec<bool> = match only.as_deref() {
        None => vec![false, true],
        Some("served") => vec![true],
        Some("in-process") => vec![false],
        Some(other) => panic!("MODE is served or in-process, not {other:?}"),
    };
    let text = std::fs::read_to_string(&path).expect("a readable scenario");
    let scenario = parse_scenario(&text).expect("a valid scenario");
    let end = scenario.duration.0;
    for round in 1..=rounds {
        for &served in &modes {
            let mut world = scenario.build(1, EventLog::new(None)).expect("it builds");
            let start = Instant::now();
            let events = if served {
                let snapshot = world.serve(gpuclaim_sim::served::store::HISTORY_PER_RESOURCE_MAX);
                let sync = |world: &mut World| {
                    world.served_sync();
                    Ok::<(), ()>(())
                };
                let events = world.run_observed(end, u64::MAX, sync).expect("it runs").expect("never stopped");
                let objects = snapshot.read().map(|s| s.head()).unwrap_or_default();
                eprintln!("  served head revision {objects}");
                events
            } else {
                world.run(end, u64::MAX).expect("it runs")
            };
            let seconds = start.elapsed().as_secs_f64();
            let mode = if served { "served" } else { "in-process" };
            println!(
                "round {round} {mode:>10}: {events} events in {seconds:.2} s ({:.0} events/s)",
                events as f64 / seconds
            );
        }
    }
}
