//! The serving certificate, read from a directory (`tls.crt`, `tls.key`: the layout of a cert-manager secret
//! mounted as a volume) and swapped in place when the files change, so a rotated certificate is served on the next
//! handshake without a restart.
//!
//! The kubelet updates a mounted secret by swapping a symlink, so the files' bytes are compared rather than their
//! modification times (which the swap need not change). A change that cannot be read (a half-written key, a key
//! that does not match) keeps the old certificate and is reported; the next poll tries again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// File names inside the certificate directory, as cert-manager writes them.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// How often the directory is read for a rotated certificate: cert-manager renews well ahead of expiry and the
/// kubelet takes up to a minute to update a mounted secret, so ten seconds adds little to that.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: not a PEM certificate chain: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error("{path}: not a PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("{path}: unsupported private key: {reason}")]
    UnsupportedKey { path: PathBuf, reason: String },
    #[error("{key} does not match the certificate in {cert}: {reason}")]
    Mismatch { cert: PathBuf, key: PathBuf, reason: String },
}

/// The files' bytes as last loaded, to tell a rotation from a poll that finds nothing new.
#[derive(Clone, PartialEq, Eq)]
struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

/// The certificate every handshake is answered with; [`CertDir::reload`] swaps it.
pub struct CertDir {
    dir: PathBuf,
    /// A lock that does not poison: the new certificate is built outside it and swapped in whole, so whatever
    /// panics, the value under it is the old certificate or the new one, never half of either.
    serving: parking_lot::RwLock<Serving>,
}

/// The certificate served, and the files' bytes it came from.
struct Serving {
    loaded: Loaded,
    key: Arc<CertifiedKey>,
}

impl std::fmt::Debug for CertDir {
    // Never prints key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertDir").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// What one poll of the directory found.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    Unchanged,
    Rotated,
}

impl CertDir {
    /// Loads the certificate and key from `dir`; an unreadable or mismatched pair is an error naming the file.
    pub fn open(dir: &Path) -> Result<Arc<CertDir>, TlsError> {
        let loaded = read_files(dir)?;
        let key = certified_key(dir, &loaded)?;
        Ok(Arc::new(CertDir {
            dir: dir.to_owned(),
            serving: parking_lot::RwLock::new(Serving { loaded, key: Arc::new(key) }),
        }))
    }

    /// Reads the directory again and serves its certificate from the next handshake on if it changed. On an error
    /// the certificate being served stays.
    pub fn reload(&self) -> Result<Reload, TlsError> {
        let loaded = read_files(&self.dir)?;
        if self.serving.read().loaded == loaded {
            return Ok(Reload::Unchanged);
        }
        let key = Arc::new(certified_key(&self.dir, &loaded)?);
        *self.serving.write() = Serving { loaded, key };
        Ok(Reload::Rotated)
    }

    /// A server configuration that answers every handshake with the current certificate, offering HTTP/1.1.
    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// Polls the directory every `interval` until the task is dropped, logging rotations and unreadable files.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            match self.reload() {
                Ok(Reload::Unchanged) => {}
                Ok(Reload::Rotated) => tracing::info!(dir = %self.dir.display(), "serving a rotated certificate"),
                Err(error) => tracing::warn!(%error, "keeping the current certificate: the new one cannot be used"),
            }
        }
    }
}

impl ResolvesServerCert for CertDir {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.serving.read().key.clone())
    }
}

fn read_files(dir: &Path) -> Result<Loaded, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    Ok(Loaded { cert_pem: read(CERT_FILE)?, key_pem: read(KEY_FILE)? })
}

fn certified_key(dir: &Path, loaded: &Loaded) -> Result<CertifiedKey, TlsError> {
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    let chain = CertificateDer::pem_slice_iter(&loaded.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate { path: cert_path.clone(), reason: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_slice(&loaded.key_pem)
        .map_err(|e| TlsError::Key { path: key_path.clone(), reason: e.to_string() })?;
    let signer = any_supported_type(&key)
        .map_err(|e| TlsError::UnsupportedKey { path: key_path.clone(), reason: e.to_string() })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|e| TlsError::Mismatch { cert: cert_path, key: key_path, reason: e.to_string() })?;
    Ok(certified)
}
