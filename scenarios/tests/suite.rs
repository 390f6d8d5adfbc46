//! The CI suite (`scenarios/suite/`): every scenario passes under every engine variant it lists, each run twice with
//! the same event-log hash; and a rule flipped in the engine is caught, naming the scenario and the expectation or
//! invariant that broke.

use std::path::{Path, PathBuf};

use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::suite::{self, Loaded, Plan};
use gpuclaim_scenarios::check::{CheckedRun, Invariant, run_twice};
use gpuclaim_scenarios::scenario::parse_scenario;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("suite")
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

fn judged<'r>(run: &'r CheckedRun, says: &str) -> &'r gpuclaim_scenarios::check::Judged {
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
    assert!(two.stop.is_none(), "an invariant the story expects is its outcome, not a failure");
    assert_eq!(two.broken[0].violation.invariant, Invariant::UngatedWithoutPin);
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
fn s19_vms_start_from_the_chart_values_a_tenant_writes() {
    let file = "19-vms-from-chart-values.yaml";
    let runs = passes(file);
    // The same story with each VM written as gpus, cpu and memory: the chart's values render to the same VMs, so
    // the event log is the same, byte for byte.
    let text = std::fs::read_to_string(suite_dir().join(file)).unwrap();
    let mut plain = gpuclaim_engine::yaml::from_str(&text).unwrap();
    for vm in plain["vms"].as_array_mut().unwrap() {
        let chart = vm.as_object_mut().unwrap().remove("chart").expect("every VM of the story is a chart's");
        vm["gpus"] = chart["gpus"].clone();
        vm["cpu"] = chart["resources"]["cpu"].to_string().trim_matches('"').into();
        vm["memory"] = chart["resources"]["memory"].clone();
    }
    let plain = parse_scenario(&plain.to_string()).unwrap();
    let (run, mismatch) = run_twice(&plain, Variant::SHIPPED, "shipped", 1).unwrap();
    assert_eq!(mismatch, None);
    assert!(run.passed(), "{:?}", run.failure());
    assert_eq!(run.hash, runs[0].hash);
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
    let broken = unconfirmed.broken.first().expect("the unconfirmed controller books a node twice");
    assert_eq!(broken.violation.invariant, Invariant::DeviceDoubleBooked);
}

#[test]
fn s16_every_tampering_write_is_refused_and_unguarded_each_breaks_what_it_should() {
    let runs = passes("16-tenant-tampering.yaml");
    assert!(runs[0].broken.is_empty() && runs[0].stop.is_none(), "shipped: every invariant holds");
    let unguarded = &runs[1];
    assert_eq!(unguarded.variant, "unguarded-writes");
    let broken: Vec<Invariant> = unguarded.broken.iter().map(|b| b.violation.invariant).collect();
    assert_eq!(
        broken,
        [
            Invariant::BudgetExceeded,
            Invariant::UngatedWithoutPin,
            Invariant::SetSplit,
            Invariant::ClaimAttachedTwice,
            Invariant::UsageRecordMismatch,
            Invariant::VgpuWithoutEntitlement,
        ],
        "in the order the writes land"
    );
}

#[test]
fn without_the_guards_the_tampering_story_fails_its_shipped_expectations() {
    let run = flipped("16-tenant-tampering.yaml", "unguarded-writes");
    let stop = run.stop.as_ref().expect("an invariant broke");
    assert_eq!(stop.violation.invariant, Invariant::BudgetExceeded, "the raised count, first");
}

#[test]
fn pinning_from_the_cache_alone_is_caught_by_an_invariant() {
    let run = flipped("15-pins-confirmed.yaml", "unconfirmed-pins");
    let stop = run.stop.as_ref().expect("an invariant broke");
    assert_eq!(stop.violation.invariant, Invariant::DeviceDoubleBooked);
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
    let outcomes = suite::run_jobs(&loaded, jobs, 2, false, None, &|_| {});
    for outcome in &outcomes {
        assert!(outcome.passed(), "{:?}: {:?}", outcome.job, outcome.failure());
    }
}

/// A shrunk regression story passes (twice, the same log) at the seed it was shrunk at, which its file keeps.
fn passes_at_its_seed(file: &str, seed: u64, why: &str) {
    let loaded = load(file);
    assert_eq!(loaded.scenario.seed, Some(seed), "{why}");
    let (run, mismatch) = run_twice(&loaded.scenario, Variant::SHIPPED, "shipped", seed).unwrap();
    assert_eq!(mismatch, None);
    assert!(run.passed(), "{:?}", run.failure());
}

#[test]
fn s17_replicas_spread_after_a_node_loss_at_the_seed_that_broke() {
    passes_at_its_seed("17-replicas-spread-after-node-loss.yaml", 783, "the seed suite 14 failed at before the fix");
}

#[test]
fn s18_a_bind_behind_a_device_failure_at_the_seed_that_broke() {
    passes_at_its_seed(
        "18-bind-behind-a-device-failure.yaml",
        195,
        "the seed the harsher mix failed at before the fix",
    );
}

#[test]
fn a_rate_expectation_is_judged_over_runs_not_in_each() {
    let text = std::fs::read_to_string(suite_dir().join("03-pin-and-ungate-in-one-update.yaml")).unwrap();
    // The shipped engine never leaves a pod ungated without its pin: expected at a rate, no run fails for it, and
    // the rate over the runs does.
    let text = text.replace(
        "- {says: the pod is left ungated without its pin, variants: [two-update-pin], invariant: UngatedWithoutPin}",
        "- {says: the pod is left ungated without its pin, invariant: UngatedWithoutPin, rate: 0.5}",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("03-rate.yaml");
    std::fs::write(&path, text).unwrap();
    let loaded = [suite::load(&path).unwrap()];
    let jobs = suite::plan(&loaded, &Plan { seeds: 4, ..Plan::default() }).unwrap();
    let outcomes = suite::run_jobs(&loaded, jobs, 2, true, None, &|_| {});
    let shipped: Vec<_> = outcomes.iter().filter(|o| o.job.variant_name == "shipped").collect();
    assert!(shipped.iter().all(|o| o.passed()), "a run that does not break it passes");
    let rates = suite::rates(&outcomes);
    let by_variant = |name: &str| rates.iter().find(|r| r.variant == name).unwrap();
    let never = by_variant("shipped");
    assert_eq!((never.broken, never.runs, never.passed()), (0, 4, false));
    assert_eq!(
        never.to_string(),
        "expect[4] (the pod is left ungated without its pin): broke in 0 of 4 runs (0.0%), at least 50.0% expected"
    );
    let always = by_variant("two-update-pin");
    assert_eq!((always.broken, always.runs, always.passed()), (4, 4, true));
}

#[test]
fn only_an_invariant_expectation_takes_a_rate_and_a_share_of_runs() {
    let base = std::fs::read_to_string(suite_dir().join("03-pin-and-ungate-in-one-update.yaml")).unwrap();
    for (line, error) in [
        ("- {at: end, figure: vmStarts, atLeast: 1, rate: 0.5}", "only an invariant expectation takes a rate"),
        ("- {invariant: SetSplit, rate: 1.5}", "1.5 is not a share of runs in (0, 1]"),
    ] {
        let text = format!("{base}{line}\n");
        let error_text = gpuclaim_scenarios::scenario::parse_scenario(&text).unwrap_err().to_string();
        assert!(error_text.contains(error) && error_text.contains(".rate"), "{error_text}");
    }
}
