//! An outside tool the tests use when it is at hand (helm, promtool, kubectl): `$VAR`, else its name on the PATH.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The tool: `$variable`, else `name` on the PATH, if `--version`-like `probe` runs; `None`, with a note saying the
/// tests skip it and how to get one (`hint`), when neither does.
pub fn find(variable: &str, name: &str, probe: &str, hint: &str) -> Option<PathBuf> {
    find_accepted(variable, name, &[probe], |_| Ok(()), hint)
}

/// As [`find`], with a probe of several arguments whose standard output `accept` must take (a version check); its
/// refusal is said in the note.
pub fn find_accepted(
    variable: &str,
    name: &str,
    probe: &[&str],
    accept: impl Fn(&[u8]) -> Result<(), String>,
    hint: &str,
) -> Option<PathBuf> {
    let candidate = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(name));
    let refusal = match Command::new(&candidate).args(probe).output() {
        Ok(output) if output.status.success() => match accept(&output.stdout) {
            Ok(()) => return Some(candidate),
            Err(refusal) => format!(": {refusal}"),
        },
        _ => String::new(),
    };
    eprintln!("skipped: no {name} ({}{refusal}); {hint}", candidate.display());
    None
}
