//! Prometheus's promtool (Debian's `prometheus` package ships it; `.ci/run` installs it) for the tests that check
//! what the controller exports and the chart's alerts (included by path at the crate's root, beside helm.rs whose
//! `tool` it uses: `#[path = ".../tests/support/promtool.rs"] mod promtool;`). Tests skip promtool, saying so, when
//! there is none.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::helm::tool;

/// The promtool binary: `$PROMTOOL`, else `promtool` on the PATH; `None` (and a note saying how to get one) when
/// neither runs.
pub fn promtool() -> Option<PathBuf> {
    tool::find(
        "PROMTOOL",
        "promtool",
        "--version",
        "`.ci/promtool` (Debian's prometheus package) prints one's path for PROMTOOL",
    )
}

/// Runs `promtool ARGS…` with `input` on its standard input.
pub fn run(promtool: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(promtool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child.stdin.take().expect("piped").write_all(input.as_bytes()).expect("promtool reads its input");
    child.wait_with_output().expect("promtool ends")
}

/// Runs `promtool ARGS…` and fails the test with promtool's words unless it succeeds; returns what it printed.
pub fn check(promtool: &Path, args: &[&str], input: &str) -> String {
    let output = run(promtool, args, input);
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "promtool {args:?} failed:\n{printed}");
    printed
}
