//! The webhook transport against a real HTTPS server: the adapter's webhook router (what `gpuclaim controller`
//! serves on :9443), served by the adapter's HTTPS server with a certificate for `gpuclaim-webhook.cozy-gpuclaim.svc`
//! signed by a CA made for the test. Allowed, denied and patched answers come back as the engine wrote them; a CA
//! that did not sign the certificate, a Service without endpoints, a closed port and a slow answer fail with the
//! words the API server quotes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuclaim_adapter::https::{self, Limits};
use gpuclaim_adapter::metrics::Metrics;
use gpuclaim_adapter::shared::SharedView;
use gpuclaim_engine::fixtures::{self, launcher_pod_json};
use gpuclaim_engine::keys;
use gpuclaim_serve::certs;
use gpuclaim_serve::webhook_client::{HttpsWebhooks, ResolveService};
use gpuclaim_sim::apiserver::admission::remote::{ServiceRef, WebhookCall, WebhookTransport, review};
use gpuclaim_sim::apiserver::admission::request::{self, Operation, Request, Resource, Served, User};
use serde_json::{Value, json};

const HOST: &str = "gpuclaim-webhook.cozy-gpuclaim.svc";
const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

/// Every Service resolves to the same endpoints.
struct Fixed(Vec<SocketAddr>);

impl ResolveService for Fixed {
    fn endpoints(&self, _namespace: &str, _service: &str, _port: i32) -> Result<Vec<SocketAddr>, String> {
        Ok(self.0.clone())
    }
}

/// Serves the engine's webhooks on the platform fixture, plus `/slow` (answers after 5 s), on a thread of its own;
/// returns where, and the CA that signed its certificate.
fn serve_webhooks() -> (SocketAddr, String) {
    let issued = certs::issue(&[HOST.to_owned()]).unwrap();
    let (ca, server) = (issued.ca_pem, issued.server);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = https::listen("127.0.0.1:0".parse().unwrap()).unwrap();
            sender.send(listener.local_addr().unwrap()).unwrap();
            let view = SharedView::new(fixtures::platform());
            let slow = axum::routing::post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "{}"
            });
            let router =
                gpuclaim_adapter::webhook::router(view, Arc::new(Metrics::new()), Duration::from_secs(10), None)
                    .route("/slow", slow);
            https::serve(listener, server, router, Limits::default(), std::future::pending()).await;
        });
    });
    (receiver.recv().unwrap(), ca)
}

struct Object(Value);

impl Served for Object {
    fn json(&self) -> Value {
        self.0.clone()
    }

    fn labels(&self) -> Cow<'_, BTreeMap<String, String>> {
        Cow::Owned(serde_json::from_value(self.0["metadata"]["labels"].clone()).unwrap_or_default())
    }
}

fn call(path: &str, ca: &str, resource: Resource, user: &User, object: Value, timeout: Duration) -> WebhookCall {
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let served = Object(object.clone());
    let request = Request {
        operation: Operation::Create,
        resource,
        subresource: "",
        namespace: "tenant-a",
        name: &name,
        user,
        object: Some(&served),
        old_object: None,
    };
    let service =
        ServiceRef { namespace: "cozy-gpuclaim".into(), name: "gpuclaim-webhook".into(), path: path.into(), port: 443 };
    let body = review("uid-1", &request, Some(&object), None);
    WebhookCall { service, ca_bundle: ca.as_bytes().to_vec(), timeout, body }
}

fn claim(count: u32) -> Value {
    json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
        "metadata": {"name": "order", "namespace": "tenant-a"},
        "spec": {"className": "h100", "count": count},
    })
}

fn order(ca: &str, count: u32) -> WebhookCall {
    call("/validate-order", ca, request::CLAIMS, &User::person("alice", &[]), claim(count), Duration::from_secs(10))
}

fn transport(endpoints: Vec<SocketAddr>) -> HttpsWebhooks {
    HttpsWebhooks::new(Arc::new(Fixed(endpoints))).unwrap()
}

#[test]
fn an_order_within_budget_is_allowed_over_https() {
    let (address, ca) = serve_webhooks();
    let answer = transport(vec![address]).call(&order(&ca, 2)).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["response"]["uid"], "uid-1");
    assert_eq!(answer["response"]["allowed"], true);
}

#[test]
fn an_order_over_budget_is_denied_over_https_with_the_engines_status() {
    let (address, ca) = serve_webhooks();
    let answer = transport(vec![address]).call(&order(&ca, 6)).unwrap();
    let response = &answer["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["auditAnnotations"]["reason"], "BudgetExceeded");
    assert_eq!(response["status"]["code"], 403);
    assert!(response["status"]["message"].as_str().unwrap().contains("budget"), "{response}");
}

#[test]
fn a_launcher_comes_back_with_the_pod_webhooks_patch() {
    let (address, ca) = serve_webhooks();
    let attachments = r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":1}]"#;
    let mut pod = launcher_pod_json("tenant-a", "vm-1", attachments, H100, 1);
    pod["metadata"]["name"] = "virt-launcher-vm-1-abcde".into();
    let kubevirt = gpuclaim_sim::users::kubevirt_controller();
    let call = call("/mutate-pod", &ca, request::PODS, &kubevirt, pod, Duration::from_secs(10));
    let answer = transport(vec![address]).call(&call).unwrap();
    let response = &answer["response"];
    assert_eq!((&response["allowed"], &response["patchType"]), (&json!(true), &json!("JSONPatch")));
    use base64::Engine;
    let patch = base64::engine::general_purpose::STANDARD.decode(response["patch"].as_str().unwrap()).unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert!(patch.to_string().contains(keys::GATE_PLACEMENT), "{patch}");
}

#[test]
fn a_certificate_another_ca_signed_fails_the_call_as_go_words_it() {
    let (address, _) = serve_webhooks();
    let other = certs::issue(&[HOST.to_owned()]).unwrap().ca_pem;
    let failure = transport(vec![address]).call(&order(&other, 2)).unwrap_err();
    assert_eq!(failure.message, "tls: failed to verify certificate: x509: certificate signed by unknown authority");
    let failure = transport(vec![address]).call(&order("", 2)).unwrap_err();
    assert_eq!(failure.message, "tls: failed to verify certificate: x509: certificate signed by unknown authority");
}

#[test]
fn a_service_without_endpoints_or_listener_fails_the_call_as_the_api_server_words_it() {
    let failure = transport(Vec::new()).call(&order("", 2)).unwrap_err();
    assert_eq!(failure.message, "no endpoints available for service \"gpuclaim-webhook\"");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let failure = transport(vec![closed]).call(&order("", 2)).unwrap_err();
    assert_eq!(failure.message, format!("dial tcp {closed}: connect: connection refused"));
}

#[test]
fn an_answer_slower_than_the_timeout_fails_the_call_at_the_timeout() {
    let (address, ca) = serve_webhooks();
    let mut slow = order(&ca, 2);
    slow.service.path = "/slow".into();
    slow.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let failure = transport(vec![address]).call(&slow).unwrap_err();
    assert_eq!(failure.message, "context deadline exceeded");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn a_certificate_for_another_name_fails_the_call() {
    let (address, ca) = serve_webhooks();
    let mut elsewhere = order(&ca, 2);
    elsewhere.service.name = "other".into();
    let failure = transport(vec![address]).call(&elsewhere).unwrap_err();
    assert_eq!(
        failure.message,
        "tls: failed to verify certificate: x509: certificate is not valid for other.cozy-gpuclaim.svc"
    );
}

/// The twin's API server in remote mode over HTTPS: an order over budget refused by the served engine with the
/// in-process chain's reason, code and message; the same order without a ready endpoint failed closed.
#[test]
fn the_api_server_calls_the_order_webhook_over_https_as_it_runs_it_in_process() {
    use base64::Engine;
    use gpuclaim_sim::apiserver::ApiServer;
    use gpuclaim_sim::apiserver::admission::crd::CrdRules;
    let (address, ca) = serve_webhooks();
    let (text, stem) = (gpuclaim_sim::apiserver::admission::chart::WEBHOOK_FILES[2].2, "order");
    let mut entry: Value = gpuclaim_engine::yaml::from_str(text).unwrap();
    entry["name"] = format!("{stem}.{}", keys::GROUP).into();
    entry["admissionReviewVersions"] = json!(["v1"]);
    entry["sideEffects"] = "None".into();
    entry["clientConfig"] = json!({
        "service": {"name": "gpuclaim-webhook", "namespace": "cozy-gpuclaim", "path": "/validate-order"},
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
    });
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "gpuclaim-order"}, "webhooks": [entry],
    });
    let tenant = gpuclaim_sim::users::tenant("tenant-a");
    let big = || fixtures::held_claim("tenant-a", "big", "h100", 6);
    let expected = ApiServer::new(fixtures::platform(), 100).create_claim(big(), &tenant).unwrap_err();
    for (endpoints, refused) in [(vec![address], expected.to_string()), (Vec::new(), String::new())] {
        let mut api = ApiServer::new(fixtures::platform(), 100);
        api.admission.go_remote(Box::new(transport(endpoints)));
        let problems = api.admission.configure_remote(std::slice::from_ref(&configuration), CrdRules::generated());
        assert_eq!(problems, Vec::<String>::new());
        let error = api.create_claim(big(), &tenant).unwrap_err();
        match refused.is_empty() {
            false => {
                assert_eq!((error.reason(), error.code()), (expected.reason(), expected.code()));
                assert_eq!(error.to_string(), refused);
            }
            true => assert_eq!(
                error.to_string(),
                "Internal error occurred: failed calling webhook \"order.gpu.cozystack.io\": failed to call webhook: \
                 Post \"https://gpuclaim-webhook.cozy-gpuclaim.svc:443/validate-order?timeout=10s\": no endpoints \
                 available for service \"gpuclaim-webhook\""
            ),
        }
    }
}
