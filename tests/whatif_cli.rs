//! `gpuclaim whatif` end to end: a study in, a report out (the same bytes with any --jobs), and a bad study exits 2
//! naming the file and the field.

use std::path::Path;
use std::process::Command;

fn gpuclaim(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuclaim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("gpuclaim runs");
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_study_gives_a_report_whatever_the_jobs() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("whatif-cli");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let study = root.join("study.yaml");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/examples/small.yaml");
    std::fs::write(
        &study,
        format!(
            "name: cli\nscenario: {}\nduration: 3h\nsamples: 6\nvariants:\n- name: base\n- name: more-l40s\n  nodes: {{l40s: \"+2\"}}\n",
            scenario.display()
        ),
    )
    .unwrap();
    let mut summaries = Vec::new();
    for jobs in ["1", "2"] {
        let out = root.join(format!("out-{jobs}"));
        let args = ["whatif", study.to_str().unwrap(), "--out", out.to_str().unwrap(), "--seeds", "2", "--jobs", jobs];
        let (code, stderr) = gpuclaim(&args);
        assert_eq!(code, Some(0), "{stderr}");
        for file in ["report.html", "report.md", "runs.csv", "charts/gate-queue.svg", "charts/utilisation-h100.png"] {
            assert!(out.join(file).is_file(), "{file}");
        }
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(html.contains("--seeds 2"), "the command that reproduces it");
        summaries.push(std::fs::read(out.join("summary.json")).unwrap());
    }
    assert_eq!(summaries[0], summaries[1]);
}

#[test]
fn a_bad_study_exits_2_naming_the_file_and_the_field() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("whatif-cli-bad");
    std::fs::create_dir_all(&root).unwrap();
    let study = root.join("bad.yaml");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/examples/small.yaml");
    let text = format!("name: bad\nscenario: {}\nvariants: [{{name: a, nodes: {{h200: 4}}}}]\n", scenario.display());
    std::fs::write(&study, text).unwrap();
    let (code, stderr) = gpuclaim(&["whatif", study.to_str().unwrap(), "--out", root.join("out").to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("bad.yaml: field variants[0].nodes.h200: the scenario has no class \"h200\""), "{stderr}");
}

/// Runs `gpuclaim ARGS` in `dir`, returning its exit code and standard error.
fn gpuclaim_in(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuclaim")).args(args).current_dir(dir).output().expect("gpuclaim runs");
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

/// A fresh directory under the test's target directory.
fn fresh(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A study of the small cluster without a compaction search: two variants, 3 hours.
fn plain_study(dir: &Path) -> String {
    let study = dir.join("plain.yaml");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/examples/small.yaml");
    let text = format!(
        "name: plain\nscenario: {}\nduration: 3h\nsamples: 6\nvariants:\n- name: base\n- name: more-l40s\n  nodes: {{l40s: \"+2\"}}\n",
        scenario.display()
    );
    std::fs::write(&study, text).unwrap();
    study.to_str().unwrap().to_owned()
}

/// Shards 1..=N of `study` as separate processes in `dir`, round after round, merged until the report is written.
fn sharded(dir: &Path, study: &str, seeds: &str, shards: u32) {
    for round in 0..20 {
        for shard in 1..=shards {
            let shard = format!("{shard}/{shards}");
            let round = round.to_string();
            let args = ["whatif", study, "--out", "out", "--seeds", seeds, "--shard", &shard, "--round", &round];
            let (code, stderr) = gpuclaim_in(dir, &args);
            assert_eq!(code, Some(0), "shard {shard}, round {round}: {stderr}");
        }
        let dirs: Vec<String> = (1..=shards).map(|s| format!("out/shards/{s}")).collect();
        let mut args = vec!["whatif", "merge", study, "--out", "out", "--seeds", seeds];
        args.extend(dirs.iter().map(String::as_str));
        let (code, stderr) = gpuclaim_in(dir, &args);
        assert_eq!(code, Some(0), "merge after round {round}: {stderr}");
        if dir.join("out/summary.json").exists() {
            return;
        }
        assert!(stderr.contains(&format!("needs round {}", round + 1)), "{stderr}");
    }
    panic!("the compaction search did not end in 20 rounds");
}

/// Every file of a report: the same bytes in both directories.
fn assert_same_report(one: &Path, merged: &Path) {
    let mut files =
        vec!["summary.json".to_owned(), "runs.csv".to_owned(), "report.md".to_owned(), "report.html".to_owned()];
    for chart in std::fs::read_dir(one.join("charts")).unwrap() {
        files.push(format!("charts/{}", chart.unwrap().file_name().to_str().unwrap()));
    }
    for file in files {
        let (a, b) = (std::fs::read(one.join(&file)).unwrap(), std::fs::read(merged.join(&file)));
        assert!(b.as_ref().is_ok_and(|b| *b == a), "{file} differs between the one-process run and the merge");
    }
}

#[test]
fn shards_run_as_processes_and_merged_give_the_one_process_report_byte_for_byte() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples/h100-headroom.yaml");
    let root = fresh("whatif-shards");
    let plain = plain_study(&root);
    // The sample study has a compaction search (rounds decided by the merge); the plain one has none.
    for (name, study) in [("sample", sample.to_str().unwrap().to_owned()), ("plain", plain)] {
        let (one, merged) = (root.join(name).join("one"), root.join(name).join("merged"));
        std::fs::create_dir_all(&one).unwrap();
        std::fs::create_dir_all(&merged).unwrap();
        // The same relative --out on both sides: the report names the command that reproduces it.
        let (code, stderr) = gpuclaim_in(&one, &["whatif", &study, "--out", "out", "--seeds", "2"]);
        assert_eq!(code, Some(0), "{stderr}");
        sharded(&merged, &study, "2", 3);
        assert_same_report(&one.join("out"), &merged.join("out"));
    }
}

#[test]
fn a_killed_shard_resumes_after_the_runs_it_wrote() {
    let root = fresh("whatif-resume");
    let study = plain_study(&root);
    let args = ["whatif", study.as_str(), "--out", "out", "--seeds", "6", "--shard", "1/1", "--jobs", "1"];
    let mut shard = Command::new(env!("CARGO_BIN_EXE_gpuclaim")).args(args).current_dir(&root).spawn().unwrap();
    let dir = root.join("out/shards/1");
    let written = || {
        std::fs::read_dir(&dir).map_or(0, |entries| {
            entries.filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().starts_with("run-")).count()
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while written() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    shard.kill().unwrap();
    shard.wait().unwrap();
    let before = written();
    assert!((1..12).contains(&before), "killed after {before} of 12 runs");
    let (code, stderr) = gpuclaim_in(&root, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("{} runs made", 12 - before)), "{stderr}");
    assert!(stderr.contains(&format!("{before} already written")), "{stderr}");
    let (code, stderr) = gpuclaim_in(&root, &["whatif", "merge", &study, "--out", "out", "--seeds", "6"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = gpuclaim_in(&root, &["whatif", &study, "--out", "one", "--seeds", "6"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read(root.join("one/runs.csv")).unwrap(), std::fs::read(root.join("out/runs.csv")).unwrap());
}

#[test]
fn a_merge_refuses_a_missing_a_duplicated_or_a_foreign_run_naming_it() {
    let root = fresh("whatif-merge-refusals");
    let study = plain_study(&root);
    for shard in ["1/2", "2/2"] {
        let (code, stderr) = gpuclaim_in(&root, &["whatif", &study, "--out", "out", "--seeds", "2", "--shard", shard]);
        assert_eq!(code, Some(0), "{stderr}");
    }
    let merge = |root: &Path| gpuclaim_in(root, &["whatif", "merge", &study, "--out", "out", "--seeds", "2"]);
    // Runs are numbered variant by variant, seeds in order: position 3 is more-l40s on seed 2, shard 2's.
    let run = root.join("out/shards/2/run-0-3.json");
    let kept = std::fs::read(&run).unwrap();
    std::fs::remove_file(&run).unwrap();
    let (code, stderr) = merge(&root);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("variant more-l40s, seed 2 (round 0, position 3) is missing"), "{stderr}");
    std::fs::write(&run, &kept).unwrap();
    std::fs::write(root.join("out/shards/1/run-0-3.json"), &kept).unwrap();
    let (code, stderr) = merge(&root);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("variant more-l40s, seed 2 (round 0) was written twice"), "{stderr}");
    std::fs::remove_file(root.join("out/shards/1/run-0-3.json")).unwrap();
    // The same study with other seeds is another study: its shards' runs are not merged into it.
    let (code, stderr) = gpuclaim_in(&root, &["whatif", "merge", &study, "--out", "out", "--seeds", "3"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("a run of another study"), "{stderr}");
    let (code, stderr) = merge(&root);
    assert_eq!(code, Some(0), "whole again: {stderr}");
}
