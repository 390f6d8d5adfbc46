//! The real kubectl, 1.37 or newer, for the tests that drive it (included by path at the crate's root, beside
//! helm.rs whose `tool` it uses: `#[path = ".../tests/support/kubectl.rs"] mod kubectl;`). Tests skip kubectl, saying
//! so, when there is none. An older client is refused, not used: `/usr/bin/kubectl` can be gcloud's 1.32
//! dispatcher, and what the twin serves was probed with kubectl v1.37.1 (docs/plans/issue39-kubectl-probe.md).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::helm::tool;

/// The oldest client the tests take (major, minor).
pub const MINIMUM: (u64, u64) = (1, 37);

/// The kubectl binary: `$KUBECTL`, else `kubectl` on the PATH, if its client is [`MINIMUM`] or newer; `None` (and a
/// note saying why and how to get one) otherwise.
pub fn kubectl() -> Option<PathBuf> {
    let accept = |stdout: &[u8]| {
        let version = client_version(&String::from_utf8_lossy(stdout))?;
        new_enough(version)
    };
    let hint = "`.ci/kubectl` fetches one (v1.37.1) and prints its path for KUBECTL";
    tool::find_accepted("KUBECTL", "kubectl", &["version", "--client", "-o", "json"], accept, hint)
}

/// The client's (major, minor) from `kubectl version --client -o json`. A minor such as `32+` (a vendor's build)
/// counts as its number.
pub fn client_version(json: &str) -> Result<(u64, u64), String> {
    let document: Value = serde_json::from_str(json).map_err(|e| format!("its version is not JSON ({e})"))?;
    let client = &document["clientVersion"];
    let number = |field: &str| {
        let text = client[field].as_str().ok_or_else(|| format!("its version has no clientVersion.{field}"))?;
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().map_err(|_| format!("its clientVersion.{field} {text:?} is not a number"))
    };
    Ok((number("major")?, number("minor")?))
}

/// `Ok` when `version` is [`MINIMUM`] or newer, else the refusal naming both.
pub fn new_enough(version: (u64, u64)) -> Result<(), String> {
    if version >= MINIMUM {
        return Ok(());
    }
    let ((major, minor), (want_major, want_minor)) = (version, MINIMUM);
    Err(format!("its client is {major}.{minor}, older than {want_major}.{want_minor}"))
}

/// Runs `kubectl ARGS…` (in `directory`), returning its standard output (a failure fails the test with kubectl's
/// words).
pub fn kubectl_run(kubectl: &Path, directory: &Path, args: &[&str]) -> String {
    let output = Command::new(kubectl).args(args).current_dir(directory).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}
