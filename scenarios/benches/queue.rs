//! Whole checked runs where the queue is long, side by side with their short-queue yardsticks (issue 32's targets,
//! docs/performance.md): the openb trace replayed as the FGD simulator reads it (deletions ignored: arrivals until
//! the cluster is full, 1,312 VMs left at the gate) and as timed, and `scenarios/perf/gate-10k.yaml` (10,000 VMs at
//! a full 1,000-node cluster). Each sample is one run, invariants checked after every event as `gpuclaim sim run`
//! does. The openb trace stays in `../shared/traces/` (never committed): without it the two openb benchmarks say
//! so and measure nothing. Run: `cargo bench -p gpuclaim-scenarios --bench queue`.

use std::path::{Path, PathBuf};

use divan::{Bencher, black_box};
use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::run_checked;
use gpuclaim_scenarios::import::openb::{OpenbOptions, import_openb};
use gpuclaim_scenarios::scenario::{Scenario, parse_scenario};
use gpuclaim_sim::log::EventLog;

fn main() {
    divan::main();
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The openb default pod list as a scenario, `filled` reading it as the FGD simulator does; `None` (said on
/// standard error) without the trace.
fn openb(filled: bool) -> Option<Scenario> {
    let traces = repository().join("../shared/traces/openb-2023");
    let (nodes, pods) = (traces.join("openb_node_list_all_node.csv"), traces.join("openb_pod_list_default.csv"));
    if !nodes.exists() || !pods.exists() {
        eprintln!("skipped: the openb trace is not at {} (it is never committed)", traces.display());
        return None;
    }
    let mut options = OpenbOptions::new(nodes, pods);
    options.ignore_deletion = filled;
    let imported = import_openb(&options).unwrap_or_else(|e| panic!("the openb import failed: {e}"));
    Some(parse_scenario(&imported.to_json()).expect("an imported scenario parses"))
}

fn checked_run(bencher: Bencher, scenario: Option<Scenario>) {
    let Some(scenario) = scenario else { return };
    bencher.bench(|| {
        let run = run_checked(&scenario, Variant::SHIPPED, "shipped", 1, EventLog::new(None)).expect("the run");
        assert!(run.passed(), "{}: {:?}", scenario.name, run.stop);
        black_box(run.hash)
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn openb_timed(bencher: Bencher) {
    checked_run(bencher, openb(false));
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn openb_filled(bencher: Bencher) {
    checked_run(bencher, openb(true));
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn gate_10k(bencher: Bencher) {
    let path = repository().join("scenarios/perf/gate-10k.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    checked_run(bencher, Some(parse_scenario(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))));
}
