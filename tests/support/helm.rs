//! The real helm against the charts (`charts/gpuclaim`, `charts/virtual-machine`), for the tests of every crate that
//! checks what a chart renders (included by path: `#[path = ".../tests/support/helm.rs"] mod helm;`). Tests skip
//! helm, saying so, when there is none.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

#[path = "tool.rs"]
pub mod tool;

/// The repository root: the crate's directory or the one above it (the workspace's crates sit one level down).
pub fn repository() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.ancestors().find(|dir| dir.join("charts/gpuclaim/Chart.yaml").is_file());
    root.expect("the repository holds charts/gpuclaim").to_path_buf()
}

/// `charts/gpuclaim`, the controller's chart.
pub fn chart() -> PathBuf {
    repository().join("charts/gpuclaim")
}

/// `charts/gpuclaim-whatif`, a what-if study as Kubernetes Jobs.
pub fn whatif_chart() -> PathBuf {
    repository().join("charts/gpuclaim-whatif")
}

/// `charts/virtual-machine`, the tenant's VM chart.
pub fn vm_chart() -> PathBuf {
    repository().join("charts/virtual-machine")
}

/// The helm binary: `$HELM`, else `helm` on the PATH; `None` (and a note saying how to get one) when neither runs.
pub fn helm() -> Option<PathBuf> {
    tool::find("HELM", "helm", "version", "`.ci/helm` fetches one and prints its path for HELM")
}

/// Runs `helm ARGS… charts/gpuclaim`, returning its standard output (a failure fails the test with helm's words).
pub fn helm_run(helm: &Path, args: &[&str]) -> String {
    helm_run_on(helm, &chart(), args)
}

/// Runs `helm ARGS… CHART`, returning its standard output (a failure fails the test with helm's words).
pub fn helm_run_on(helm: &Path, chart: &Path, args: &[&str]) -> String {
    let output = helm_output(helm, chart, args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "helm {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `helm ARGS… CHART` as it goes, failing or not (for tests of what a chart refuses).
pub fn helm_output(helm: &Path, chart: &Path, args: &[&str]) -> Output {
    Command::new(helm).args(args).arg(chart).output().unwrap()
}

/// The documents `helm template gpuclaim` renders in namespace `cozy-gpuclaim` with `sets` (`key=value`), as JSON.
pub fn render(helm: &Path, extra: &[&str], sets: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "gpuclaim", "--namespace", "cozy-gpuclaim"];
    args.extend(extra);
    for set in sets {
        args.extend(["--set", set]);
    }
    documents(&helm_run(helm, &args))
}

/// The documents of a rendered text, as JSON.
pub fn documents(text: &str) -> Vec<Value> {
    gpuclaim_engine::yaml::documents(text).map(Result::unwrap).collect()
}

pub fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}
