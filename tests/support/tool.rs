//! An outside tool the tests use when it is at hand (helm, promtool): `$VAR`, else its name on the PATH.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The tool: `$variable`, else `name` on the PATH, if `--version`-like `probe` runs; `None`, with a note saying the
/// tests skip it and how to get one (`hint`), when neither does.
pub fn find(variable: &str, name: &str, probe: &str, hint: &str) -> Option<PathBuf> {
    let candidate = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(name));
    match Command::new(&candidate).arg(probe).output() {
        Ok(output) if output.status.success() => Some(candidate),
        _ => {
            eprintln!("skipped: no {name} ({}); {hint}", candidate.display());
            None
        }
    }
}
