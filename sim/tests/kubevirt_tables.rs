//! KubeVirt's own test tables, from `../shared/kubevirt/` (13: start backoff, 14: migration target timeouts), against
//! the twin's functions; skipped when that folder is absent.

use std::path::PathBuf;

use gpuclaim_sim::kubevirt::start::start_backoff_seconds;
use gpuclaim_sim::kubevirt::target_timeout::{MigrationPhase, TargetPod, TargetTimeout, target_timeout};
use gpuclaim_sim::rng::actor_stream;
use serde_json::Value;

fn shared(name: &str) -> Option<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/kubevirt").join(name);
    let text = std::fs::read_to_string(path).ok()?;
    Some(gpuclaim_engine::yaml::from_str(&text).expect("shared tables are YAML"))
}

#[test]
fn start_backoff_stays_within_kubevirts_table() {
    let Some(table) = shared("13-kubevirt-vm-start-failure-backoff.yaml") else {
        eprintln!("skipped: ../shared/kubevirt is absent");
        return;
    };
    let rows = table["table_from_vm_test"].as_array().expect("the table");
    assert_eq!(rows.len(), 7);
    let mut rng = actor_stream(13, "vm-controller");
    for row in rows {
        let failures = row["failCount"].as_u64().unwrap() as u32;
        let (min, max) = (row["min"].as_u64().unwrap(), row["max"].as_u64().unwrap());
        // As KubeVirt's own test: 1000 samples, all within [min, max].
        for _ in 0..1_000 {
            let delay = start_backoff_seconds(failures, &mut rng);
            assert!((min..=max).contains(&delay), "failCount {failures}: {delay} outside {min}..={max}");
        }
    }
}

#[test]
fn migration_target_timeouts_follow_kubevirts_tables() {
    let Some(tables) = shared("14-kubevirt-migration-target-pending-timeouts.yaml") else {
        eprintln!("skipped: ../shared/kubevirt is absent");
        return;
    };
    for (table, unschedulable) in [("unschedulable_table", true), ("catch_all_table", false)] {
        for row in tables[table].as_array().expect("the table") {
            let phase = match row["phase"].as_str().unwrap() {
                "Pending" => MigrationPhase::Pending,
                "Scheduling" => MigrationPhase::Scheduling,
                _ => MigrationPhase::Scheduled,
            };
            let lapse = row["timeLapse"].as_u64().unwrap();
            let annotation = row["annotation"].as_str().unwrap().parse::<u64>().ok();
            let pod = TargetPod { pending: true, unschedulable, age_seconds: lapse };
            let (unschedulable_override, pending_override) =
                if unschedulable { (annotation, None) } else { (None, annotation) };
            let verdict = target_timeout(phase, pod, unschedulable_override, pending_override);
            let expected = row["deleted"].as_bool().unwrap();
            assert_eq!(verdict.is_some(), expected, "{table} {row}");
            if let Some(kind) = verdict {
                let want = if unschedulable { TargetTimeout::Unschedulable } else { TargetTimeout::Pending };
                assert_eq!(kind, want, "{table} {row}");
            }
        }
    }
}
