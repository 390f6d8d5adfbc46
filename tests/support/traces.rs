//! The public GPU-cluster traces in `../shared/traces/` for the tests that read them (they are never committed; a
//! member crate's test includes this by path: `#[path = "../../tests/support/traces.rs"] mod traces;`). Tests skip
//! them, saying so, when they are absent.

use std::path::{Path, PathBuf};

/// `../shared/traces/` beside the workspace, when it holds `file` (a path under it); `None`, saying the test skips,
/// otherwise.
pub fn traces(file: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    if path.join(file).is_file() {
        Some(path)
    } else {
        eprintln!("skipped: no public traces at {}", path.display());
        None
    }
}
