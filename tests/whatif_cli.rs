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
