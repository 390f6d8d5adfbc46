//! A replica's files: its copy of each Secret volume (one file per key, as the kubelet projects a Secret) and the
//! kubeconfig its service account's token is in. Each file is replaced whole (a temporary file and a rename), so a
//! process reloading it never reads half of it.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// Why a volume could not be written.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("secret {secret:?}: data key {key:?} is not base64")]
    NotBase64 { secret: String, key: String },
    #[error("secret {secret:?}: data key {key:?} is not a file name")]
    BadKey { secret: String, key: String },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

/// Writes `secret`'s data into `dir`, one file per key.
pub fn write_secret(dir: &Path, secret: &Value) -> Result<(), VolumeError> {
    let name = secret.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    std::fs::create_dir_all(dir).map_err(|source| VolumeError::Write { path: dir.display().to_string(), source })?;
    let data = secret.get("data").and_then(Value::as_object);
    for (key, value) in data.into_iter().flatten() {
        if key.is_empty() || key.contains('/') || key == "." || key == ".." {
            return Err(VolumeError::BadKey { secret: name.to_owned(), key: key.clone() });
        }
        let bytes = value
            .as_str()
            .and_then(|text| STANDARD.decode(text).ok())
            .ok_or_else(|| VolumeError::NotBase64 { secret: name.to_owned(), key: key.clone() })?;
        write_atomically(&dir.join(key), &bytes)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), VolumeError> {
    let failed = |source| VolumeError::Write { path: path.display().to_string(), source };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    std::fs::write(&temporary, bytes).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_key_is_a_file_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("gpuclaim-volume-test-{}", std::process::id()));
        let secret = json!({"metadata": {"name": "s"}, "data": {"tls.crt": STANDARD.encode("one")}});
        write_secret(&dir, &secret).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("tls.crt")).unwrap(), "one");
        let secret = json!({"metadata": {"name": "s"}, "data": {"tls.crt": STANDARD.encode("two")}});
        write_secret(&dir, &secret).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("tls.crt")).unwrap(), "two");
        let bad = json!({"metadata": {"name": "s"}, "data": {"../x": "AA=="}});
        assert_eq!(
            write_secret(&dir, &bad).unwrap_err().to_string(),
            "secret \"s\": data key \"../x\" is not a file name"
        );
        let bad = json!({"metadata": {"name": "s"}, "data": {"k": "%%"}});
        assert_eq!(write_secret(&dir, &bad).unwrap_err().to_string(), "secret \"s\": data key \"k\" is not base64");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
