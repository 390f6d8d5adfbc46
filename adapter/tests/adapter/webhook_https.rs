//! The webhook server over HTTPS: it answers exactly as `gpuclaim review` does, refuses what it cannot answer
//! with a clear 4xx, and serves a rotated certificate without a restart.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gpuclaim_adapter::https::{self, Limits};
use gpuclaim_adapter::metrics::Metrics;
use gpuclaim_adapter::shared::SharedView;
use gpuclaim_adapter::tls::{CertDir, TlsError};
use gpuclaim_adapter::webhook::{self, REVIEW_BYTES_MAX};
use gpuclaim_engine::review::{Webhook, answer_review, parse_review};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{self, Reply, TestCa};

/// The webhook server on loopback HTTPS, with a test CA.
pub struct Server {
    addr: SocketAddr,
    ca: TestCa,
    dir: std::path::PathBuf,
    metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(timeout: Duration, limits: Limits) -> Server {
        Server::on(support::example_view(), timeout, limits).await
    }

    /// The server deciding on `view`.
    pub async fn on(view: SharedView, timeout: Duration, limits: Limits) -> Server {
        let ca = TestCa::new();
        let dir = support::temp_dir("webhook-certs");
        support::write_cert_dir(&dir, &ca.serving());
        let certificate = CertDir::open(&dir).unwrap();
        tokio::spawn(certificate.clone().watch(Duration::from_millis(20)));
        let metrics = Arc::new(Metrics::new());
        let router = webhook::router(view, metrics.clone(), timeout, None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(https::serve(listener, certificate.server_config(), router, limits, async {
            let _ = stopped.await;
        }));
        Server { addr, ca, dir, metrics, stop: Some(stop), served }
    }

    async fn default() -> Server {
        Server::start(webhook::REQUEST_TIMEOUT, Limits::default()).await
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> Reply {
        let headers = [("content-type", "application/json")];
        support::request(self.addr, &self.ca.der(), "POST", path, &headers, body).await
    }
}

/// What `tls` reads until the server closes the connection; `None` if it is still open after 5 s.
async fn read_to_close(tls: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut answer = Vec::new();
    // A close without TLS's close_notify reads as an error after the bytes; the bytes are what counts.
    let _closed = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await.ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

fn pod_review() -> serde_json::Value {
    support::example_reviews().into_iter().find(|(name, _)| name == "pod-launcher-trainer.json").unwrap().1
}

#[tokio::test]
async fn each_webhook_answers_byte_for_byte_as_gpuclaim_review() {
    let server = Server::default().await;
    let view = support::example_view();
    for (name, review) in support::example_reviews() {
        let webhook = Webhook::route(&parse_review(&review).unwrap().kind).unwrap();
        let (expected, _) = answer_review(&view.read().unwrap(), &review).unwrap();
        let reply = server.post(webhook.path(), serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        assert_eq!(reply.content_type, "application/json", "{name}");
        assert_eq!(reply.body, serde_json::to_vec(&expected).unwrap(), "{name}");
    }
    let exposition = server.metrics.encode();
    assert!(
        exposition.contains(
            r#"gpuclaim_admission_decisions_total{webhook="order",decision="denied",reason="BudgetExceeded"} 1"#
        ),
        "{exposition}"
    );
}

#[tokio::test]
async fn a_body_that_is_not_json_gets_400_naming_the_parse_error() {
    let server = Server::default().await;
    let reply = server.post("/mutate-pod", b"{\"kind\": AdmissionReview".to_vec()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.content_type, "text/plain; charset=utf-8");
    assert!(reply.text().starts_with("the body is not JSON: expected value at line 1 column 10"), "{}", reply.text());
}

#[tokio::test]
async fn a_review_without_a_request_gets_400_naming_the_field() {
    let server = Server::default().await;
    let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec();
    let reply = server.post("/validate-order", body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.text(),
        "invalid AdmissionReview: field request: missing (the AdmissionReview carries no request)\n"
    );
}

#[tokio::test]
async fn a_review_of_another_webhooks_kind_gets_400_naming_both() {
    let server = Server::default().await;
    let reply = server.post("/mutate-vmi", serde_json::to_vec(&pod_review()).unwrap()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.text(),
        "this endpoint serves the vmi webhook; a review of kind \"Pod\" belongs to the pod webhook\n"
    );
}

#[tokio::test]
async fn a_review_of_a_kind_no_webhook_serves_gets_400() {
    let server = Server::default().await;
    let mut review = pod_review();
    review["request"]["kind"] = serde_json::json!({"group": "", "version": "v1", "kind": "Service"});
    let reply = server.post("/mutate-pod", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(
        reply.text(),
        "invalid AdmissionReview: field request.kind: no webhook serves kind \"Service\" of group \"\"\n"
    );
}

#[tokio::test]
async fn an_oversized_review_gets_413_before_it_is_read() {
    let server = Server::default().await;
    let reply = server.post("/mutate-pod", vec![b' '; REVIEW_BYTES_MAX + 1]).await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.text(), format!("the review is larger than {REVIEW_BYTES_MAX} bytes\n"));
}

#[tokio::test]
async fn a_review_sent_as_another_media_type_gets_415() {
    let server = Server::default().await;
    let body = serde_json::to_vec(&pod_review()).unwrap();
    let reply =
        support::request(server.addr, &server.ca.der(), "POST", "/mutate-pod", &[("content-type", "text/plain")], body)
            .await;
    assert_eq!(reply.status, 415);
    assert_eq!(reply.text(), "expected Content-Type application/json, got \"text/plain\"\n");
}

#[tokio::test]
async fn other_methods_and_paths_are_refused() {
    let server = Server::default().await;
    let get = support::request(server.addr, &server.ca.der(), "GET", "/mutate-pod", &[], Vec::new()).await;
    assert_eq!(get.status, 405);
    let unknown = server.post("/mutate-service", b"{}".to_vec()).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn a_review_that_stops_arriving_gets_408_after_the_timeout() {
    let server = Server::start(Duration::from_millis(200), Limits::default()).await;
    let mut tls = support::connect(server.addr, &server.ca.der()).await.unwrap();
    let head = "POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buffer = [0_u8; 1024];
        loop {
            let n = tls.read(&mut buffer).await.unwrap_or(0);
            answer.extend_from_slice(&buffer[..n]);
            if n == 0 || answer.ends_with(b"ms\n") {
                break;
            }
        }
    });
    read.await.expect("the server answers within the timeout");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.ends_with("the review was not read and answered within 200ms\n"), "{answer}");
}

#[tokio::test]
async fn a_client_that_never_sends_headers_is_disconnected() {
    let limits = Limits { header_read: Duration::from_millis(200), ..Limits::default() };
    let server = Server::start(webhook::REQUEST_TIMEOUT, limits).await;
    let mut tls = support::connect(server.addr, &server.ca.der()).await.unwrap();
    let mut buffer = [0_u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buffer)).await;
    assert!(read.is_ok(), "the server closes an idle connection after the header deadline");
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let server = Server::default().await;
    let body = serde_json::to_vec(&pod_review()).unwrap();
    let first = server.post("/mutate-pod", body.clone()).await;
    assert_eq!(first.status, 200);

    let rotated = server.ca.serving();
    support::write_cert_dir(&server.dir, &rotated);
    let mut served = first.peer.clone();
    for _ in 0..250 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        served = server.post("/mutate-pod", body.clone()).await.peer;
        if served == rotated.der {
            break;
        }
    }
    assert_eq!(served, rotated.der, "the rotated certificate is served within 5 s");

    // A key that cannot be read keeps the rotated certificate in service.
    std::fs::write(server.dir.join("tls.key"), "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = server.post("/mutate-pod", body).await;
    assert_eq!((after.status, after.peer), (200, rotated.der));
}

#[test]
fn a_certificate_directory_that_cannot_be_used_is_an_error_naming_the_file() {
    let dir = support::temp_dir("bad-certs");
    let error = CertDir::open(&dir).unwrap_err();
    assert!(matches!(error, TlsError::Read { .. }));
    assert!(error.to_string().starts_with(&format!("failed to read {}", dir.join("tls.crt").display())), "{error}");

    let ca = TestCa::new();
    let (one, other) = (ca.serving(), ca.serving());
    std::fs::write(dir.join("tls.crt"), &one.cert_pem).unwrap();
    std::fs::write(dir.join("tls.key"), &other.key_pem).unwrap();
    let error = CertDir::open(&dir).unwrap_err();
    assert!(matches!(error, TlsError::Mismatch { .. }), "{error}");
    assert!(error.to_string().starts_with(&format!("{} does not match", dir.join("tls.key").display())), "{error}");

    std::fs::write(dir.join("tls.crt"), "").unwrap();
    let error = CertDir::open(&dir).unwrap_err();
    assert_eq!(error.to_string(), format!("{}: no PEM certificate in it", dir.join("tls.crt").display()));
}

#[tokio::test]
async fn a_review_in_flight_when_shutdown_starts_is_answered_and_new_connections_are_refused() {
    let mut server = Server::default().await;
    let body = serde_json::to_vec(&pod_review()).unwrap();
    let mut tls = support::connect(server.addr, &server.ca.der()).await.unwrap();
    let head = format!(
        "POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body[..100]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let refused = tokio::net::TcpStream::connect(server.addr).await;
    assert_eq!(refused.unwrap_err().kind(), std::io::ErrorKind::ConnectionRefused, "the listener is closed");

    tls.write_all(&body[100..]).await.unwrap();
    let answer = read_to_close(&mut tls).await.expect("the server closes the connection after the answer");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("\"allowed\":true"), "the review was answered: {answer}");
    tokio::time::timeout(Duration::from_secs(2), &mut server.served)
        .await
        .expect("the server returns once its connections are drained")
        .unwrap();
}

#[tokio::test]
async fn a_stop_closes_what_is_still_open_after_the_drain_time() {
    let limits = Limits { drain: Duration::from_millis(200), ..Limits::default() };
    let mut server = Server::start(webhook::REQUEST_TIMEOUT, limits).await;
    let mut tls = support::connect(server.addr, &server.ca.der()).await.unwrap();
    let head = "POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    tls.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), &mut server.served).await.expect("the drain is bounded").unwrap();
    assert_eq!(read_to_close(&mut tls).await.as_deref(), Some(""), "the stalled request was cut, not answered");
}

#[tokio::test]
async fn clients_that_hold_every_slot_without_a_request_give_their_slots_up_to_one_that_needs_one() {
    // Deadlines far beyond the test's bound: without the slots going to the newcomer, it would wait for them.
    let limits = Limits {
        handshake: Duration::from_secs(60),
        header_read: Duration::from_secs(60),
        connections_max: 4,
        evict_after: Duration::from_millis(200),
        ..Limits::default()
    };
    let server = Server::start(webhook::REQUEST_TIMEOUT, limits).await;
    let mut slow = Vec::new();
    // Two that never start their TLS handshake, two that dribble a request header after it.
    for _ in 0..2 {
        slow.push(tokio::net::TcpStream::connect(server.addr).await.unwrap());
    }
    let mut dribbling = Vec::new();
    for _ in 0..2 {
        let mut tls = support::connect(server.addr, &server.ca.der()).await.unwrap();
        tls.write_all(b"POST /mutate-pod HTTP/1.1\r\nhost: loc").await.unwrap();
        dribbling.push(tls);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;

    let started = tokio::time::Instant::now();
    let body = serde_json::to_vec(&pod_review()).unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), server.post("/mutate-pod", body))
        .await
        .expect("the request is served while slow clients hold every slot");
    assert_eq!(reply.status, 200);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "served after {took:?}");
    // The connection that had waited longest (the first, still before its handshake) lost its slot.
    assert_eq!(read_to_close(&mut slow[0]).await.as_deref(), Some(""), "closed without an answer");
}

#[tokio::test]
async fn a_listener_on_the_ipv6_wildcard_accepts_ipv4_clients_too() {
    let listener = https::listen("[::]:0".parse().unwrap()).unwrap();
    let port = listener.local_addr().unwrap().port();
    for client in ["127.0.0.1", "[::1]"] {
        let connected = tokio::net::TcpStream::connect(format!("{client}:{port}")).await;
        assert!(connected.is_ok(), "{client}: {connected:?}");
        let (_, peer) = listener.accept().await.unwrap();
        assert!(peer.is_ipv6(), "an IPv4 client arrives as an IPv4-mapped address: {peer}");
    }
}
