//! What the adapter's tests share: a test CA and serving certificates (rcgen), a certificate directory laid out as
//! cert-manager mounts it, an HTTPS client that trusts only the test CA, and the example objects.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use gpuclaim_adapter::shared::SharedView;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// A CA made for one test, and what it signs.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A serving certificate and its key, PEM.
pub struct Serving {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "gpuclaim test CA");
        TestCa { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A certificate for `localhost` and 127.0.0.1, as the chart's serving Certificate names the Service.
    pub fn serving(&self) -> Serving {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Serving { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().clone() }
    }
}

/// A fresh directory under the test target's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the pair as a mounted cert-manager secret holds it.
pub fn write_cert_dir(dir: &Path, serving: &Serving) {
    std::fs::write(dir.join("tls.crt"), &serving.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &serving.key_pem).unwrap();
}

/// One HTTP answer, with the certificate the server presented.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: String,
    pub peer: CertificateDer<'static>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A TLS client configuration that trusts only `ca`.
pub fn client_config(ca: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Opens a TLS connection to `addr` as `localhost`, verifying the server against `ca`.
pub async fn connect(
    addr: std::net::SocketAddr,
    ca: &CertificateDer<'static>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(client_config(ca));
    connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await
}

/// Sends one request over a new connection.
pub async fn request(
    addr: std::net::SocketAddr,
    ca: &CertificateDer<'static>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let tls = connect(addr, ca).await.expect("the TLS handshake succeeds");
    let peer = tls.get_ref().1.peer_certificates().expect("the server presents a certificate")[0].clone();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(connection);
    let mut builder = hyper::Request::builder().method(method).uri(path).header("host", "localhost");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let response = sender.send_request(builder.body(Full::new(Bytes::from(body))).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply { status, body, content_type, peer }
}

/// GETs `path` over plain HTTP (the probes' server): status and body.
pub async fn get_plain(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(path).header("host", "localhost").body(Full::new(Bytes::new())).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// Serves the probes of `caches` and `tasks` on loopback; returns the address.
pub async fn serve_probes(
    caches: Arc<gpuclaim_adapter::cache::Caches>,
    tasks: Arc<gpuclaim_adapter::health::Tasks>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let probes = gpuclaim_adapter::health::router(caches, tasks);
    tokio::spawn(async move { axum::serve(listener, probes).await });
    address
}

/// The repository's root, where `examples/` lives.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The example objects `gpuclaim review` is documented with, as the webhooks' view.
pub fn example_view() -> SharedView {
    let text = std::fs::read_to_string(repo_root().join("examples/objects.yaml")).unwrap();
    let objects =
        gpuclaim_engine::objects::load_objects(&text, gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE).unwrap();
    SharedView::new(objects.view)
}

/// The example reviews, by file name.
pub fn example_reviews() -> Vec<(String, serde_json::Value)> {
    let mut reviews: Vec<(String, serde_json::Value)> = std::fs::read_dir(repo_root().join("examples/reviews"))
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap())
        })
        .collect();
    reviews.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(reviews.len() >= 6, "the example reviews are where the README says");
    reviews
}

/// A stand-in for the API server on loopback HTTPS: the routes a test gives it, and a kube client that trusts it.
pub struct FakeApi {
    pub client: kube::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeApi {
    pub async fn start(router: axum::Router) -> FakeApi {
        let ca = TestCa::new();
        let dir = temp_dir("fake-api-certs");
        write_cert_dir(&dir, &ca.serving());
        let certificate = gpuclaim_adapter::tls::CertDir::open(&dir).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let limits = gpuclaim_adapter::https::Limits::default();
        tokio::spawn(gpuclaim_adapter::https::serve(listener, certificate.server_config(), router, limits, async {
            let _ = stopped.await;
        }));
        let mut config = kube::Config::new(format!("https://{addr}").parse().unwrap());
        config.root_cert = Some(vec![ca.der().to_vec()]);
        config.default_namespace = "cozy-gpuclaim".to_owned();
        FakeApi { client: kube::Client::try_from(config).unwrap(), _stop: stop }
    }
}
