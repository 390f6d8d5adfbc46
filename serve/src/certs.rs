//! The served twin's certificates and the kubeconfig that trusts them: a CA made for this run, a serving
//! certificate it signs for the addresses the server answers on, and a bearer token for the one user.
//!
//! Nothing here outlives the process: a new run makes new ones, so a kubeconfig from an old run fails the handshake
//! rather than reaching the wrong twin.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate that could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot make the twin's certificates: {0}")]
pub struct CertError(String);

fn failed(error: impl std::fmt::Display) -> CertError {
    CertError(error.to_string())
}

/// The CA and the serving certificate of one run.
pub struct Certificates {
    /// The CA certificate (PEM): what the kubeconfig trusts.
    pub ca_pem: String,
    /// The TLS configuration serving the certificate the CA signed.
    pub server: Arc<rustls::ServerConfig>,
}

/// The names the serving certificate holds: loopback by address and name, and the listen address's host.
pub fn subject_names(listen: SocketAddr) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    let host = listen.ip();
    if !host.is_unspecified() && !host.is_loopback() {
        names.push(host.to_string());
    }
    names
}

/// Makes a CA and a serving certificate for `names`.
pub fn issue(names: &[String]) -> Result<Certificates, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "gpuclaim twin CA");
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(failed)?).map_err(failed)?;
    let key = KeyPair::generate().map_err(failed)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(failed)?;
    params.distinguished_name.push(DnType::CommonName, "gpuclaim twin");
    let serving = params.signed_by(&key, &issuer).map_err(failed)?;
    let chain = vec![CertificateDer::from(serving.der().to_vec())];
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).map_err(failed)?;
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(failed)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(failed)?;
    Ok(Certificates { ca_pem: issuer.pem(), server: Arc::new(server) })
}

/// A bearer token from the operating system's random source (outside the world: it changes no event log).
pub fn token() -> Result<String, CertError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).map_err(failed)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The kubeconfig of one cluster, `gpuclaim-twin`, at `server`, trusting `ca_pem`, with one user holding `token`.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
    let ca = STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gpuclaim-twin\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: gpuclaim-twin-admin\n  user:\n    token: {token}\n\
         contexts:\n- name: gpuclaim-twin\n  context:\n    cluster: gpuclaim-twin\n    user: gpuclaim-twin-admin\n\
         current-context: gpuclaim-twin\n"
    )
}
