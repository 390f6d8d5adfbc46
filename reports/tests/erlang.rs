//! The twin's queueing against Erlang B and C on reports/examples/erlang.yaml (docs/whatif.md). The full study (16
//! seeds × 20 days) runs in release: `cargo test --release -p gpuclaim-reports --test erlang -- --ignored
//! --nocapture`; the quick one (4 seeds × 4 days) runs with the other tests.

use std::path::Path;

use gpuclaim_reports::erlang::compare;
use gpuclaim_reports::run_study;
use gpuclaim_reports::study::load_study;
use gpuclaim_sim::kernel::Millis;

fn check(seeds: u64, days: Option<u64>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/erlang.yaml");
    let mut study = load_study(&path).unwrap();
    study.seeds = (1..=seeds).collect();
    if let Some(days) = days {
        let duration = format!("{days}d");
        for variant in &mut study.variants {
            variant.scenario["duration"] = duration.clone().into();
        }
        study.duration = Millis(days * 86_400_000);
    }
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let report = run_study(&study, jobs, &|_| {}).unwrap();
    let comparisons = compare(&report).unwrap();
    for c in &comparisons {
        println!(
            "{:>7} {:<19} c={} a={:.1}: theory {:.4}, twin {:.4} ± {:.4} over {} seeds{}",
            c.variant,
            c.figure,
            c.servers,
            c.load_erlangs,
            c.theory,
            c.mean,
            c.half_width,
            c.seeds,
            if c.within { "" } else { "  OUTSIDE" }
        );
    }
    assert_eq!(comparisons.len(), 2);
    for c in &comparisons {
        assert!(c.within, "{c:#?}");
    }
}

#[test]
fn refused_orders_and_gate_waits_match_erlang_b_and_c_on_a_short_study() {
    check(4, Some(4));
}

#[test]
#[ignore = "16 seeds × 20 simulated days: run in release (docs/whatif.md)"]
fn refused_orders_and_gate_waits_match_erlang_b_and_c() {
    check(16, None);
}
