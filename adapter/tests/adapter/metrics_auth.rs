//! `/metrics` over HTTPS against a fake API server answering TokenReview and SubjectAccessReview with the shapes
//! the real one sends: 200 for a reader, 401 without a valid token, 403 without permission.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use gpuclaim_adapter::access::{Access, VERDICT_TTL};
use gpuclaim_adapter::https::{self, Limits};
use gpuclaim_adapter::metrics::Metrics;
use gpuclaim_adapter::scrape;
use gpuclaim_adapter::tls::CertDir;
use serde_json::{Value, json};

use crate::support::{self, FakeApi, Reply, TestCa};

const READER: &str = "system:serviceaccount:monitoring:prometheus";
const TENANT: &str = "system:serviceaccount:tenant-a:default";

/// Counts of the reviews the fake API server answered.
#[derive(Clone, Default)]
struct Calls {
    token_reviews: Arc<AtomicUsize>,
    access_reviews: Arc<AtomicUsize>,
}

/// TokenReview as kube-apiserver answers it: `reader-token` and `tenant-token` authenticate, anything else not.
fn token_review(body: &Value) -> Value {
    let token = body["spec"]["token"].as_str().unwrap_or_default();
    let user = match token {
        "reader-token" => Some(READER),
        "tenant-token" => Some(TENANT),
        _ => None,
    };
    let status = match user {
        Some(username) => json!({
            "authenticated": true,
            "user": {
                "username": username,
                "uid": "0b9f3c8e-6b4c-4d3e-9a55-1f0d0c6c2b7a",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]}
            },
            "audiences": ["https://kubernetes.default.svc.cluster.local"]
        }),
        None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    };
    json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": body["spec"],
        "status": status
    })
}

/// SubjectAccessReview as kube-apiserver answers it: only the reader may get /metrics.
fn access_review(body: &Value) -> Value {
    let spec = &body["spec"];
    assert_eq!(spec["nonResourceAttributes"], json!({"path": "/metrics", "verb": "get"}));
    assert_eq!(spec["groups"], json!(["system:serviceaccounts", "system:authenticated"]), "the user's groups go along");
    let status = if spec["user"] == READER {
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"prometheus-gpuclaim\" of ClusterRole \"gpuclaim-metrics-reader\" to ServiceAccount \"prometheus/monitoring\""})
    } else {
        json!({"allowed": false})
    };
    json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status
    })
}

fn fake_api_router(calls: &Calls) -> axum::Router {
    let (tokens, accesses) = (calls.token_reviews.clone(), calls.access_reviews.clone());
    axum::Router::new()
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(move |Json(body): Json<Value>| async move {
                tokens.fetch_add(1, Ordering::SeqCst);
                (StatusCode::CREATED, Json(token_review(&body)))
            }),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(move |Json(body): Json<Value>| async move {
                accesses.fetch_add(1, Ordering::SeqCst);
                (StatusCode::CREATED, Json(access_review(&body)))
            }),
        )
}

struct MetricsServer {
    addr: SocketAddr,
    ca: TestCa,
    calls: Calls,
    _api: FakeApi,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl MetricsServer {
    async fn start(api_router: Option<axum::Router>, ttl: Duration) -> MetricsServer {
        let calls = Calls::default();
        let api = FakeApi::start(api_router.unwrap_or_else(|| fake_api_router(&calls))).await;
        let ca = TestCa::new();
        let dir = support::temp_dir("metrics-certs");
        support::write_cert_dir(&dir, &ca.serving());
        let certificate = CertDir::open(&dir).unwrap();
        let metrics = Arc::new(Metrics::new());
        metrics.set_leader(true);
        let router = scrape::router(Arc::new(Access::new(api.client.clone(), ttl)), metrics);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(https::serve(listener, certificate.server_config(), router, Limits::default(), async {
            let _ = stopped.await;
        }));
        MetricsServer { addr, ca, calls, _api: api, _stop: stop }
    }

    async fn scrape(&self, token: Option<&str>) -> Reply {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = authorization.iter().map(|a| ("authorization", a.as_str())).collect();
        support::request(self.addr, &self.ca.der(), "GET", "/metrics", &headers, Vec::new()).await
    }
}

#[tokio::test]
async fn a_reader_gets_the_metrics() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    let reply = server.scrape(Some("reader-token")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    let text = reply.text();
    assert!(text.contains("\ngpuclaim_leader 1\n"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[tokio::test]
async fn a_scrape_without_a_token_gets_401_and_asks_for_one() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    let reply = server.scrape(None).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.text(), "an Authorization: Bearer token is required\n");
    assert_eq!(server.calls.token_reviews.load(Ordering::SeqCst), 0, "no review for a request with no token");
}

#[tokio::test]
async fn a_token_the_api_server_does_not_authenticate_gets_401_with_its_reason() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    let reply = server.scrape(Some("stolen-token")).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.text(), "the token is not authenticated: [invalid bearer token, token lookup failed]\n");
    assert_eq!(server.calls.access_reviews.load(Ordering::SeqCst), 0, "an unknown user is not authorised");
}

#[tokio::test]
async fn a_user_rbac_does_not_allow_gets_403() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    let reply = server.scrape(Some("tenant-token")).await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.text(), format!("user {TENANT:?} may not get /metrics: no RBAC rule allows it\n"));
}

#[tokio::test]
async fn verdicts_are_reused_within_their_ttl_and_asked_again_after() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    for _ in 0..3 {
        assert_eq!(server.scrape(Some("reader-token")).await.status, 200);
        assert_eq!(server.scrape(Some("tenant-token")).await.status, 403);
    }
    assert_eq!(server.calls.token_reviews.load(Ordering::SeqCst), 2, "one TokenReview per token");
    assert_eq!(server.calls.access_reviews.load(Ordering::SeqCst), 2, "one SubjectAccessReview per user");

    let uncached = MetricsServer::start(None, Duration::ZERO).await;
    for _ in 0..2 {
        assert_eq!(uncached.scrape(Some("reader-token")).await.status, 200);
    }
    assert_eq!(uncached.calls.token_reviews.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_api_server_that_cannot_review_refuses_the_scrape_with_500() {
    let failing = axum::Router::new().route(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        post(|| async {
            let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
            (StatusCode::INTERNAL_SERVER_ERROR, Json(status)).into_response()
        }),
    );
    let server = MetricsServer::start(Some(failing), VERDICT_TTL).await;
    let reply = server.scrape(Some("reader-token")).await;
    assert_eq!(reply.status, 500);
    let text = reply.text();
    assert!(text.starts_with("cannot check access to /metrics: failed to create a TokenReview: "), "{text}");
    assert!(text.contains("etcdserver: request timed out"), "{text}");
}

#[tokio::test]
async fn reviews_that_do_not_come_back_in_time_refuse_the_scrape_with_503() {
    // kube's client retries 503 for minutes; the scrape gives up after the check's timeout.
    let overloaded = axum::Router::new().route(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "overloaded").into_response() }),
    );
    let server = MetricsServer::start(Some(overloaded), VERDICT_TTL).await;
    let started = std::time::Instant::now();
    let reply = server.scrape(Some("reader-token")).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.text(), "cannot check access to /metrics: the reviews took over 5s\n");
    assert!(started.elapsed() < Duration::from_secs(8), "answered after {:?}", started.elapsed());
}
