//! The CI suite (`scenarios/suite/`): every scenario passes under every engine variant it lists, each run twice with
//! the same event-log hash; and a rule flipped in the engine is caught, naming the scenario and the expectation or
//! invariant that broke.

use std::path::{Path, PathBuf};

use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::check::suite::{self, Loaded, Plan};
use gpuclaim_sim::check::{CheckedRun, Invariant, run_twice};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/suite")
}

fn load(file: &str) -> Loaded {
    suite::load(&suite_dir().join(file)).unwrap()
}

/// Runs every variant the scenario lists (seeds 1 and 2), asserting each passes and repeats itself; returns the runs
/// of seed 1 by variant name.
fn passes(file: &str) -> Vec<CheckedRun> {
    let loaded = load(file);
    let mut runs = Vec::new();
    for (name, variant) in loaded.scenario.variants().unwrap() {
        for seed in [1, 2] {
            let (run, mismatch) = run_twice(&loaded.scenario, variant, &name, seed).unwrap();
            assert_eq!(mismatch, None, "{file} {name} seed {seed}");
            assert!(run.passed(), "{file} {name} seed {seed}: {:?}\n{:#?}", run.failure(), run.judged);
            if seed == 1 {
                runs.push(run);
            }
        }
    }
    runs
}

/// Runs the scenario with `variant`'s engine, judged by the shipped engine's expectations: a rule flipped.
fn flipped(file: &str, variant: &str) -> CheckedRun {
    let loaded = load(file);
    let (run, mismatch) = run_twice(&loaded.scenario, Variant::named(variant).unwrap(), "shipped", 1).unwrap();
    assert_eq!(mismatch, None);
    assert!(!run.passed(), "{file} with {variant} must fail the shipped expectations");
    run
}

fn failed_labels(run: &CheckedRun) -> Vec<&str> {
    run.judged.iter().filter(|j| !j.passed).map(|j| j.label.as_str()).collect()
}

fn judged<'r>(run: &'r CheckedRun, says: &str) -> &'r gpuclaim_sim::check::Judged {
    run.judged.iter().find(|j| j.label.contains(says)).unwrap_or_else(|| panic!("no expectation saying {says:?}"))
}

#[test]
fn s01_migration_targets_left_ungated() {
    let runs = passes("01-migration-targets-ungated.yaml");
    assert!(judged(&runs[0], "the evacuation succeeds").passed);
    let gated = &runs[1];
    assert_eq!(gated.variant, "gate-migration-targets");
    // The target was created with the drain at 120 s: deleted 900 s later, the migration failing with it.
    assert!(judged(gated, "KubeVirt deletes the target at 900 s").detail == "met at 1020.000s");
    assert!(judged(gated, "the drain stalls").passed);
}

#[test]
fn s02_start_backoff_avoidance() {
    let runs = passes("02-start-backoff-avoidance.yaml");
    let (shipped, refused) = (&runs[0], &runs[1]);
    // The refusing variant starts the second VM measurably later (the longest start wait is that VM's).
    assert!(
        refused.figures.start_wait.max_ms >= shipped.figures.start_wait.max_ms + 60_000,
        "{:?} vs {:?}",
        refused.figures.start_wait,
        shipped.figures.start_wait
    );
    assert!(refused.figures.refusals >= 10);
}

#[test]
fn s03_pin_and_ungate_in_one_update() {
    let runs = passes("03-pin-and-ungate-in-one-update.yaml");
    let two = &runs[1];
    let stop = two.stop.as_ref().expect("the two-update variant stops on an invariant");
    assert_eq!(stop.violation.invariant, Invariant::UngatedWithoutPin);
    assert!(two.stop_expected);
}

#[test]
fn s04_wait_for_first_consumer() {
    passes("04-wait-for-first-consumer.yaml");
}

#[test]
fn s05_pod_webhook_reinvoked() {
    passes("05-pod-webhook-reinvoked.yaml");
}

#[test]
fn s06_webhook_outage_fails_closed() {
    passes("06a-webhook-two-replicas-drain.yaml");
    let runs = passes("06b-webhook-one-replica-outage.yaml");
    assert!(runs[0].figures.refusals >= 2);
}

#[test]
fn s07_controller_failover_mid_placement() {
    passes("07-controller-failover.yaml");
}

#[test]
fn s08_budgets() {
    passes("08-budgets.yaml");
}

#[test]
fn s09_vgpu_entitlement() {
    passes("09-vgpu-entitlement.yaml");
}

#[test]
fn s10_two_vms_racing_for_one_held_claim() {
    passes("10-held-claim-race.yaml");
}

#[test]
fn s11_node_loss_moves_unattached_held_claims() {
    passes("11-node-loss-held-claims-move.yaml");
}

#[test]
fn s12_template_claims_go_and_usage_records_close() {
    passes("12-template-claims-released.yaml");
}

#[test]
fn s13_raw_name_gpus_beside_claims() {
    passes("13-raw-gpus-beside-claims.yaml");
}

#[test]
fn s14_every_fault_at_once_keeps_every_invariant() {
    let runs = passes("14-every-fault.yaml");
    assert!(runs[0].figures.refusals > 100, "the faults bite: {:?}", runs[0].figures);
}

#[test]
fn s15_pins_confirmed_against_the_api_server() {
    let runs = passes("15-pins-confirmed.yaml");
    assert!(runs[0].stop.is_none());
    assert!(judged(&runs[0], "confirming pins caught a cache behind kube-scheduler").passed);
    let unconfirmed = &runs[1];
    assert_eq!(unconfirmed.variant, "unconfirmed-pins");
    let stop = unconfirmed.stop.as_ref().expect("the unconfirmed controller books a node twice");
    assert_eq!(stop.violation.invariant, Invariant::DeviceDoubleBooked);
    assert!(unconfirmed.stop_expected);
}

#[test]
fn pinning_from_the_cache_alone_is_caught_by_an_invariant() {
    let run = flipped("15-pins-confirmed.yaml", "unconfirmed-pins");
    let stop = run.stop.as_ref().expect("an invariant broke");
    assert_eq!(stop.violation.invariant, Invariant::DeviceDoubleBooked);
    assert!(!run.stop_expected);
    assert!(stop.violation.detail.contains("nvidia.com/GRID_A100-4C, the node has 8"), "{}", stop.violation.detail);
}

#[test]
fn gating_migration_targets_is_caught_by_the_evacuation() {
    let run = flipped("01-migration-targets-ungated.yaml", "gate-migration-targets");
    assert!(run.stop.is_none());
    let failed = failed_labels(&run);
    assert!(failed.iter().any(|l| l.contains("the evacuation succeeds")), "{failed:?}");
    assert!(failed.iter().any(|l| l.contains("no migration fails")), "{failed:?}");
}

#[test]
fn refusing_at_admission_is_caught_by_the_gate_wait() {
    let run = flipped("02-start-backoff-avoidance.yaml", "refuse-at-admission");
    let failed = failed_labels(&run);
    assert!(failed.iter().any(|l| l.contains("the launcher waits at the gate with the reason")), "{failed:?}");
    assert!(failed.iter().any(|l| l.contains("no create refused")), "{failed:?}");
}

#[test]
fn pinning_in_two_updates_is_caught_by_an_invariant_in_every_scenario_that_places_a_pod() {
    for file in
        ["03-pin-and-ungate-in-one-update.yaml", "04-wait-for-first-consumer.yaml", "12-template-claims-released.yaml"]
    {
        let run = flipped(file, "two-update-pin");
        let stop = run.stop.as_ref().unwrap_or_else(|| panic!("{file}: no invariant broke"));
        assert_eq!(stop.violation.invariant, Invariant::UngatedWithoutPin, "{file}");
        assert!(!run.stop_expected);
        assert!(run.failure().unwrap().starts_with("invariant UngatedWithoutPin broken after event "), "{file}");
    }
}

#[test]
fn dropping_class_tolerations_is_caught() {
    let run = flipped("05-pod-webhook-reinvoked.yaml", "no-class-tolerations");
    let failed = failed_labels(&run);
    assert!(failed.iter().any(|l| l.contains("one gate and no duplicate toleration")), "{failed:?}");
    assert!(failed.iter().any(|l| l.contains("the VM runs on the tainted node")), "{failed:?}");
}

#[test]
fn the_whole_suite_plans_every_listed_variant_and_passes() {
    let files = suite::scenario_files(&suite_dir()).unwrap();
    assert!(files.len() >= 15, "{files:?}");
    let loaded: Vec<Loaded> = files.iter().map(|f| suite::load(f).unwrap()).collect();
    let jobs = suite::plan(&loaded, &Plan { seeds: 1, ..Plan::default() }).unwrap();
    let variants: usize = loaded.iter().map(|l| l.scenario.variants().unwrap().len()).sum();
    assert_eq!(jobs.len(), variants);
    let outcomes = suite::run_jobs(&loaded, jobs, 2, &|_| {});
    for outcome in &outcomes {
        assert!(outcome.passed(), "{:?}: {:?}", outcome.job, outcome.failure());
    }
}
