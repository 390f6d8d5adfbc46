//! `gpuclaim sim run` end to end: the same scenario and seed give the same event log across processes, the log
//! written is the one hashed, and bad scenarios exit 2 naming the field.

use std::process::Command;

use serde_json::Value;

fn gpuclaim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuclaim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("gpuclaim runs");
    (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn stats(args: &[&str]) -> Value {
    let (code, stdout, stderr) = gpuclaim(args);
    assert_eq!(code, Some(0), "{stderr}");
    serde_json::from_str(&stdout).expect("--stats prints one JSON object")
}

#[test]
fn the_same_scenario_and_seed_give_the_same_log_in_two_processes() {
    let a = stats(&["sim", "run", "scenarios/examples/small.yaml", "--stats", "--seed", "5"]);
    let b = stats(&["sim", "run", "scenarios/examples/small.yaml", "--stats", "--seed", "5"]);
    assert_eq!(a["event_log_sha256"], b["event_log_sha256"]);
    assert_eq!(a["events"], b["events"]);
    assert!(a["vm_starts"].as_u64().unwrap() > 50, "the day starts VMs: {a}");
    let c = stats(&["sim", "run", "scenarios/examples/small.yaml", "--stats", "--seed", "6"]);
    assert_ne!(a["event_log_sha256"], c["event_log_sha256"]);
    for key in ["events", "simulated_seconds", "wall_seconds", "events_per_second", "event_log_sha256", "vm_starts"] {
        assert!(a.get(key).is_some(), "stats carry {key}");
    }
}

#[test]
fn the_log_written_is_the_log_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.jsonl");
    let run =
        stats(&["sim", "run", "scenarios/examples/small.yaml", "--stats", "--events-out", events.to_str().unwrap()]);
    let bytes = std::fs::read(&events).unwrap();
    let lines = bytes.iter().filter(|b| **b == b'\n').count();
    assert!(lines > 100);
    let first: Value = serde_json::from_slice(bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
    for key in ["t_ms", "actor", "object", "what"] {
        assert!(first.get(key).is_some(), "log lines carry {key}: {first}");
    }
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(run["event_log_sha256"], digest.as_str());
}

#[test]
fn a_bad_scenario_exits_2_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "name: bad\nduration: 1h\ncluster: {classes: [], nodes: [{prefix: n, count: two, cpu: '1', memory: 1Gi}]}\n",
    )
    .unwrap();
    let (code, _, stderr) = gpuclaim(&["sim", "run", file.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("field cluster.nodes[0].count: invalid type: string \"two\""), "{stderr}");
    assert!(stderr.contains("bad.yaml"), "{stderr}");
}

#[test]
fn the_readme_main_job_runs_the_example_scenario() {
    // As the README runs it: the example scenario with --stats, from the repository root.
    let run = stats(&["sim", "run", "scenarios/examples/small.yaml", "--stats"]);
    assert_eq!(run["scenario"], "small");
    assert_eq!(run["seed"], 1, "the scenario's own seed");
    assert_eq!(run["simulated_seconds"], 86_400.0);
}
