//! `gpuclaim suite` and `gpuclaim scenario run` end to end: the table, the exit codes, the replay command a failure
//! prints, the JUnit report, and bad scenario files named with their field and reason.

use std::path::PathBuf;
use std::process::Command;

fn gpuclaim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuclaim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("gpuclaim runs");
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn the_suite_passes_with_a_row_per_scenario_variant_and_seed_and_writes_junit() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("suite.xml");
    let (code, stdout, stderr) = gpuclaim(&["suite", "--junit", junit.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" pass ")).collect();
    assert!(rows.len() >= 18, "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("01-migration-targets-ungated") && l.contains("gate-migration-targets"))
    );
    assert!(stdout.contains("(each twice, event-log hashes compared)"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(xml.contains("<testsuite name=\"scenarios/suite/02-start-backoff-avoidance\""), "{xml}");
    assert!(xml.contains("<testcase name=\"refuse-at-admission seed 1\""), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn a_rule_flipped_fails_the_suite_naming_the_scenario_the_invariant_and_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("flip.xml");
    let (code, stdout, _) = gpuclaim(&["suite", "--variant", "two-update-pin", "--junit", junit.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}");
    let failure = stdout
        .lines()
        .find(|l| l.starts_with("FAIL 04-wait-for-first-consumer two-update-pin seed 1: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(failure.contains("invariant UngatedWithoutPin broken after event "), "{failure}");
    assert!(
        stdout.contains(
            "replay: gpuclaim scenario run scenarios/suite/04-wait-for-first-consumer.yaml --seed 1 --variant \
             two-update-pin"
        ),
        "{stdout}"
    );
    // Scenario 3 lists the variant and expects exactly that stop: it passes.
    assert!(
        stdout.lines().any(|l| l.starts_with("03-pin-and-ungate-in-one-update") && l.contains(" pass ")),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<failure message=\"invariant UngatedWithoutPin broken after event "), "{xml}");
}

#[test]
fn a_failed_expectation_names_itself_and_what_was_seen() {
    let (code, stdout, _) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/01-migration-targets-ungated.yaml",
        "--variant",
        "gate-migration-targets",
        "--seed",
        "1",
    ]);
    // Listed by the scenario: judged by its own expectations, it passes.
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, _) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/05-pod-webhook-reinvoked.yaml",
        "--variant",
        "gate-migration-targets",
    ]);
    assert_eq!(code, Some(0), "a variant that changes nothing this scenario touches passes: {stdout}");
    let (code, stdout, _) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/02-start-backoff-avoidance.yaml",
        "--variant",
        "refuse-at-admission",
        "--seeds",
        "2",
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, _) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/05-pod-webhook-reinvoked.yaml",
        "--variant",
        "no-class-tolerations",
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, _) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/13-raw-gpus-beside-claims.yaml",
        "--variant",
        "no-class-tolerations",
    ]);
    assert_eq!(code, Some(0), "13 has no tainted nodes: {stdout}");
    let (code, stdout, _) =
        gpuclaim(&["scenario", "run", "scenarios/suite/08-budgets.yaml", "--variant", "refuse-at-admission"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("expectation expect[1] (the template run over budget waits with the reason): saw "),
        "{stdout}"
    );
}

#[test]
fn bad_scenario_files_exit_2_naming_file_field_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/suite/03-pin-and-ungate-in-one-update.yaml"),
    )
    .unwrap();
    let cases = [
        (
            "variants: [shipped, two-update-pin]",
            "variants: [shipped, fast]",
            "field variants[1]: unknown engine variant \"fast\"; known: shipped, gate-migration-targets, \
             refuse-at-admission, two-update-pin, no-class-tolerations, unconfirmed-pins",
        ),
        (
            "variants: [shipped, two-update-pin]",
            "variants: [shipped]",
            "field expect[3].variants: \"two-update-pin\" is not among the scenario's variants",
        ),
        (
            "- {says: the VM runs, variants: [shipped], by: 1m,",
            "- {says: the VM runs, variants: [shipped], by: 1m, claim: tenant-a/x,",
            "field expect[1]: name exactly one subject: vm, pod, migration, claim, figure, startWait or invariant",
        ),
        (
            "figure: \"refusals/WriteRefused:Invalid\", equals: 0}",
            "figure: \"refused\", equals: 0}",
            "field expect[2].figure: \"refused\" is not a figure",
        ),
        (
            "invariant: UngatedWithoutPin}",
            "invariant: NeverWrong}",
            "field expect[4].invariant: \"NeverWrong\" is not an invariant: DeviceDoubleBooked, BudgetExceeded",
        ),
        (
            "by: 1m, vm: tenant-a/train, phase: Running}",
            "by: 1m, vm: tenant-a/train, phase: Flying}",
            "field expect[1].phase: \"Flying\" is not one of Pending",
        ),
    ];
    for (index, (from, to, message)) in cases.iter().enumerate() {
        assert!(base.contains(from), "case {index}: {from}");
        let file = dir.path().join(format!("bad-{index}.yaml"));
        std::fs::write(&file, base.replacen(from, to, 1)).unwrap();
        let (code, _, stderr) = gpuclaim(&["scenario", "run", file.to_str().unwrap()]);
        assert_eq!(code, Some(2), "case {index}: {stderr}");
        assert!(stderr.contains(&format!("scenario {}: {message}", file.display())), "case {index}: {stderr}");
    }
    let (code, _, stderr) = gpuclaim(&["suite", dir.path().join("missing").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot list"), "{stderr}");
}

#[test]
fn a_soak_runs_a_seed_range_once_each_and_groups_its_failures_by_what_broke() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("soak.xml");
    let (code, stdout, stderr) = gpuclaim(&[
        "scenario",
        "run",
        "scenarios/suite/04-wait-for-first-consumer.yaml",
        "--variant",
        "two-update-pin",
        "--soak",
        "3",
        "--from",
        "40",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("04-wait-for-first-consumer") && l.contains(" 3        3 ")),
        "{stdout}"
    );
    let group = stdout.lines().find(|l| l.starts_with("FAIL 04-wait-for-first-consumer two-update-pin: ")).unwrap();
    assert_eq!(
        group,
        "FAIL 04-wait-for-first-consumer two-update-pin: invariant UngatedWithoutPin: 3 runs (seeds 40, 41, 42)"
    );
    assert!(
        stdout.contains(
            "replay: gpuclaim scenario run scenarios/suite/04-wait-for-first-consumer.yaml --seed 40 --variant \
             two-update-pin"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("3 runs (soak: each once): 0 passed, 3 failed"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<testcase name=\"two-update-pin seed 42\""), "{xml}");
}

#[test]
fn a_soak_stops_starting_runs_at_its_time_budget() {
    let (code, stdout, _) = gpuclaim(&["suite", "--soak", "1000", "--budget", "0s"]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("0 runs (soak: each once): 0 passed, 0 failed, "), "{stdout}");
    assert!(stdout.contains("not started (time budget)"), "{stdout}");
}
