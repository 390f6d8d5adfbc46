//! The real helm against the chart, for the tests of every crate that checks what the chart renders (included by
//! path: `#[path = ".../tests/support/helm.rs"] mod helm;`). Tests skip helm, saying so, when there is none.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// `charts/gpuclaim`, from the repository root.
pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("charts/gpuclaim")
}

/// The helm binary: `$HELM`, else `helm` on the PATH; `None` (and a note saying how to get one) when neither runs.
pub fn helm() -> Option<PathBuf> {
    let candidate = std::env::var_os("HELM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("helm"));
    match Command::new(&candidate).arg("version").output() {
        Ok(output) if output.status.success() => Some(candidate),
        _ => {
            eprintln!(
                "skipped: no helm ({}); `.ci/helm` fetches one and prints its path for HELM",
                candidate.display()
            );
            None
        }
    }
}

/// Runs `helm ARGS… charts/gpuclaim`, returning its standard output (a failure fails the test with helm's words).
pub fn helm_run(helm: &Path, args: &[&str]) -> String {
    let output = Command::new(helm).args(args).arg(chart()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "helm {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// The documents `helm template gpuclaim` renders in namespace `cozy-gpuclaim` with `sets` (`key=value`), as JSON.
pub fn render(helm: &Path, extra: &[&str], sets: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "gpuclaim", "--namespace", "cozy-gpuclaim"];
    args.extend(extra);
    for set in sets {
        args.extend(["--set", set]);
    }
    let text = helm_run(helm, &args);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|document: &Value| !document.is_null())
        .collect()
}

pub fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}
