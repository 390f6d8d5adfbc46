//! The API server's webhook calls over HTTPS: the [`WebhookTransport`] the served twin's remote admission uses
//! (`gpuclaim_sim::apiserver::admission::remote`).
//!
//! A call resolves the registration's Service to its ready endpoints through a [`ResolveService`] the integrator
//! supplies (the kubelet stand-in, which knows where each replica listens), connects to one of them (in turn, as a
//! Service spreads connections), checks the serving certificate against the registration's `caBundle` for the name
//! `SERVICE.NAMESPACE.svc` (as the API server dials it), posts the review to `PATH?timeout=Ns` as JSON and reads the
//! answer, all within the registration's timeout.
//!
//! The call blocks the world's thread (a std thread: the API server waits for its webhooks too) on a small
//! single-threaded runtime the transport owns. Failures are worded as the API server's Go client words them, since
//! the API server quotes them to clients: `no endpoints available for service "x"`, `dial tcp ADDR: connect:
//! connection refused`, `tls: failed to verify certificate: x509: certificate signed by unknown authority`,
//! `context deadline exceeded`.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use gpuclaim_sim::apiserver::admission::remote::{CallFailure, WebhookCall, WebhookTransport};
use http_body_util::{BodyExt, Full, Limited};
use hyper::header;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

/// The largest answer read: a review's answer carries a patch at most, far below this.
pub const ANSWER_BYTES_MAX: usize = 6 * 1024 * 1024;

/// Where a Service's ready endpoints are (the kubelet stand-in's replicas behind it: [`crate::endpoints`]).
pub use crate::endpoints::ResolveService;

/// Webhook calls over HTTPS (see the module's doc).
pub struct HttpsWebhooks {
    resolver: Arc<dyn ResolveService>,
    runtime: tokio::runtime::Runtime,
    /// Calls made: which endpoint the next call goes to (in turn).
    calls_made: usize,
}

impl HttpsWebhooks {
    /// A transport resolving Services through `resolver`, with its own runtime.
    pub fn new(resolver: Arc<dyn ResolveService>) -> std::io::Result<HttpsWebhooks> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(HttpsWebhooks { resolver, runtime, calls_made: 0 })
    }
}

impl WebhookTransport for HttpsWebhooks {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure> {
        let service = &call.service;
        let endpoints =
            self.resolver.endpoints(&service.namespace, &service.name, service.port).map_err(CallFailure::new)?;
        if endpoints.is_empty() {
            return Err(CallFailure::new(format!("no endpoints available for service {:?}", service.name)));
        }
        let address = endpoints[self.calls_made % endpoints.len()];
        self.calls_made += 1;
        // The timer is made inside the runtime: it needs the runtime's clock.
        let posted = self.runtime.block_on(async { tokio::time::timeout(call.timeout, post(address, call)).await });
        match posted {
            Ok(answer) => answer.map_err(CallFailure::new),
            Err(_) => Err(CallFailure::new("context deadline exceeded")),
        }
    }
}

/// The TLS settings of one call: the bundle's certificates as the only roots.
fn tls_config(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_bundle) {
        let certificate = certificate.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(certificate).map_err(|e| format!("caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// A TLS failure as Go's crypto/tls words the common ones. A certificate whose issuer's name is a root's but whose
/// signature that root did not make (another CA of the same name) is "signed by unknown authority" to Go too.
fn tls_failure(error: &std::io::Error, host: &str) -> String {
    let rustls_error = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature,
        )) => "tls: failed to verify certificate: x509: certificate signed by unknown authority".to_owned(),
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
        )) => format!("tls: failed to verify certificate: x509: certificate is not valid for {host}"),
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. },
        )) => "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".to_owned(),
        Some(other) => format!("tls: {other}"),
        None => format!("tls: {error}"),
    }
}

/// Go's words for a refused or failed connection.
fn dial_failure(address: SocketAddr, error: &std::io::Error) -> String {
    let cause = match error.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        std::io::ErrorKind::ConnectionReset => "connection reset by peer".to_owned(),
        _ => error.to_string(),
    };
    format!("dial tcp {address}: connect: {cause}")
}

/// client-go's words for an answer that is not a 2xx (`errors.NewGenericServerResponse`).
fn status_failure(code: u16, body: &[u8]) -> String {
    match code {
        400 => "the server rejected our request for an unknown reason".to_owned(),
        404 => "the server could not find the requested resource".to_owned(),
        408 | 504 => {
            "the server was unable to return a response in the time allotted, but may still be processing the request"
                .to_owned()
        }
        code if code >= 500 => {
            let text = String::from_utf8_lossy(body);
            format!("an error on the server ({:?}) has prevented the request from succeeding", text.trim())
        }
        code => format!("the server responded with the status code {code} but did not return more information"),
    }
}

/// Posts the review to `address` and reads the answer.
async fn post(address: SocketAddr, call: &WebhookCall) -> Result<Value, String> {
    let host = call.service.host();
    let config = tls_config(&call.ca_bundle)?;
    let tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| dial_failure(address, &e))?;
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("tls: server name {host:?}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| tls_failure(&e, &host))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let path = format!("{}?timeout={}s", call.service.path, call.timeout.as_secs());
    let body = serde_json::to_vec(&call.body).expect("JSON values always serialize");
    let request = hyper::Request::post(path)
        .header(header::HOST, format!("{host}:{}", call.service.port))
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let code = response.status().as_u16();
    let body = Limited::new(response.into_body(), ANSWER_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| format!("failed to read the answer: {e}"))?
        .to_bytes();
    if !(200..300).contains(&code) {
        return Err(status_failure(code, &body));
    }
    serde_json::from_slice(&body).map_err(|e| format!("the answer is not JSON: {e}"))
}
