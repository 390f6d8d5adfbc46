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

use crate::promtool;
use crate::support::{self, FakeApi, Reply, TestCa};
use gpuclaim_engine::review::Outcome;

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
        let metrics = Arc::new(Metrics::new());
        metrics.set_leader(true);
        MetricsServer::serving(metrics, api_router, ttl).await
    }

    /// A server exporting `metrics`.
    async fn serving(metrics: Arc<Metrics>, api_router: Option<axum::Router>, ttl: Duration) -> MetricsServer {
        let calls = Calls::default();
        let api = FakeApi::start(api_router.unwrap_or_else(|| fake_api_router(&calls))).await;
        let ca = TestCa::new();
        let dir = support::temp_dir("metrics-certs");
        support::write_cert_dir(&dir, &ca.serving());
        let certificate = CertDir::open(&dir).unwrap();
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
        self.scrape_accepting(token, None).await
    }

    /// A scrape whose Accept header is `accept` (none: as curl sends).
    async fn scrape_accepting(&self, token: Option<&str>, accept: Option<&str>) -> Reply {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = authorization.iter().map(|a| ("authorization", a.as_str())).collect();
        headers.extend(accept.map(|accept| ("accept", accept)));
        support::request(self.addr, &self.ca.der(), "GET", "/metrics", &headers, Vec::new()).await
    }
}

#[tokio::test]
async fn a_reader_gets_the_metrics() {
    let server = MetricsServer::start(None, VERDICT_TTL).await;
    let reply = server.scrape_accepting(Some("reader-token"), Some(PROMETHEUS_ACCEPTS)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    let text = reply.text();
    assert!(text.contains("\ngpuclaim_leader 1\n"), "{text}");
    assert!(text.contains("\n# TYPE gpuclaim_pins_rechecked counter\n"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Without asking for OpenMetrics (curl), the classic text format: a counter's type names its samples.
    let reply = server.scrape(Some("reader-token")).await;
    assert_eq!(reply.content_type, "text/plain; version=0.0.4; charset=utf-8");
    let text = reply.text();
    assert!(text.contains("\n# TYPE gpuclaim_pins_rechecked_total counter\n"), "{text}");
    assert!(!text.contains("# EOF"), "{text}");
}

/// What Prometheus 2.x sends.
const PROMETHEUS_ACCEPTS: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                                  version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

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

/// Every metric the adapter exports, each with series: reviews answered and refused, a pass and its writes, pods
/// that left the gate, units held, pods waiting by reason, claims and classes.
pub fn every_metric() -> Arc<Metrics> {
    use gpuclaim_engine::controller::metrics::{Figures, GateExit, GateOutcome};
    use gpuclaim_engine::fixtures::{self, gated_launcher, held_claim};
    use gpuclaim_engine::model::{Reason, Time};
    use gpuclaim_engine::review::Webhook;
    let metrics = Arc::new(Metrics::new());
    metrics.set_leader(true);
    let outcome = |refusal, patched| Outcome { webhook: Webhook::Order, refusal, patched };
    metrics.admission(&outcome(None, false));
    metrics.admission(&outcome(Some("BudgetExceeded"), false));
    metrics.admission(&Outcome { webhook: Webhook::Pod, refusal: None, patched: true });
    metrics.admission_error(Webhook::Vmi, "Timeout");
    metrics.admission_handled(Webhook::Order, Duration::from_micros(300));
    metrics.reconciled(Duration::from_millis(12));
    metrics.write("PinAndUngate", "ok");
    metrics.pins_rechecked();
    let now = Time::now();
    let mut view = fixtures::two_node_cluster();
    view.upsert_claim(fixtures::bound(held_claim("tenant-a", "train-a", "h100", 2), "gpu-1"));
    let one = r#"[{"template":0,"class":"h100","count":1}]"#;
    let mut waiting = gated_launcher("tenant-a", "vm-1", one, "nvidia.com/GH100_H100_SXM5_80GB", 1, now);
    waiting.waiting = Some(Reason { reason: "NoCapacity".into(), message: "waiting for capacity".into() });
    view.upsert_pod(waiting);
    let mut fragmented = gated_launcher("tenant-a", "vm-2", one, "nvidia.com/GH100_H100_SXM5_80GB", 1, now);
    fragmented.waiting = Some(Reason { reason: "Fragmented".into(), message: "wait for one node".into() });
    view.upsert_pod(fragmented);
    let mut figures = Figures::default();
    figures.left_gate(&GateExit { gated: now, classes: vec!["h100".into()], outcome: GateOutcome::Ungated }, now);
    figures.left_gate(&GateExit { gated: now, classes: vec!["h100".into()], outcome: GateOutcome::Deleted }, now);
    figures.accrue(&view, now);
    metrics.observe_loop(&figures, Some(&view));
    metrics
}

#[tokio::test]
async fn a_scrape_of_the_live_endpoint_passes_promtool_check_metrics() {
    let server = MetricsServer::serving(every_metric(), None, VERDICT_TTL).await;
    let reply = server.scrape(Some("reader-token")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    for name in [
        "gpuclaim_admission_decisions_total{webhook=\"vmi\",decision=\"error\",reason=\"Timeout\"} 1",
        "gpuclaim_admission_duration_seconds_count{webhook=\"order\"} 1",
        "gpuclaim_gate_wait_seconds_count{class=\"h100\",outcome=\"deleted\"} 1",
        "gpuclaim_gate_wait_seconds_bucket{le=\"0.1\",class=\"h100\",outcome=\"ungated\"} 1",
        "gpuclaim_units_bound_seconds_total{namespace=\"tenant-a\",class=\"h100\"}",
        "gpuclaim_gated_pods{class=\"h100\",reason=\"NoCapacity\"} 1",
        "gpuclaim_gated_pods{class=\"h100\",reason=\"Fragmented\"} 1",
        "gpuclaim_gated_pod_wait_seconds_max{class=\"h100\"}",
        "gpuclaim_claims{class=\"h100\",phase=\"Bound\"} 1",
        "gpuclaim_class_free_units{class=\"h100\"} 0",
        "gpuclaim_class_fragmented_units{class=\"h100\"} 0",
    ] {
        assert!(text.contains(&format!("\n{name}")), "{name} missing from\n{text}");
    }
    let Some(promtool) = promtool::promtool() else { return };
    let printed = promtool::check(&promtool, &["check", "metrics"], &text);
    assert_eq!(printed, "", "promtool's lint has nothing to say");
}
