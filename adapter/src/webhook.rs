//! The three admission webhooks over HTTPS: each endpoint reads one AdmissionReview, answers it with
//! [`gpuclaim_engine::review::answer_review`] (the code path of `gpuclaim review`) on the caches' view, and logs the
//! decision. It decides nothing itself.
//!
//! A request that is not a review this endpoint can answer gets a 4xx with a one-line message saying what and why;
//! the API server shows that message in the error it returns to the client (the webhooks fail closed).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use gpuclaim_engine::message::readable;
use gpuclaim_engine::review::{Outcome, ReviewError, Webhook, answer_review};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::metrics::Metrics;
use crate::read_through;
use crate::shared::{SharedView, ViewPoisoned};

/// The largest review accepted. The API server refuses requests over 3 MiB, and a review may carry the object
/// and the old object, so twice that holds any review it sends.
pub const REVIEW_BYTES_MAX: usize = 6 * 1024 * 1024;

/// A review must arrive and be answered within this. The API server waits at most the configuration's
/// `timeoutSeconds` (the chart sets 10), so a slower answer is of no use to it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Endpoint {
    view: SharedView,
    metrics: Arc<Metrics>,
    /// Where a VMI refused for a claim the cache lacks reads the claims again ([`crate::read_through`]).
    client: Option<kube::Client>,
}

/// The router serving the three webhooks at [`Webhook::path`]; a request not read and answered within `timeout`
/// ([`REQUEST_TIMEOUT`] in production) gets 408. With `client`, a VMI refused for a claim the cache does not have
/// yet is answered again with the namespace's claims read from the API server ([`crate::read_through`]).
pub fn router(view: SharedView, metrics: Arc<Metrics>, timeout: Duration, client: Option<kube::Client>) -> Router {
    let state = Endpoint { view, metrics, client };
    [Webhook::Vmi, Webhook::Pod, Webhook::Order]
        .into_iter()
        .fold(Router::new(), |router, webhook| {
            router.route(
                webhook.path(),
                post(move |State(state): State<Endpoint>, headers: HeaderMap, body: Body| async move {
                    let started = Instant::now();
                    let refused = match tokio::time::timeout(timeout, handle(&state, webhook, &headers, body)).await {
                        Ok(Ok(answer)) => Ok(answer),
                        Ok(Err(refused)) => Err(refused),
                        Err(_) => Err(RequestError::Timeout(timeout)),
                    };
                    if let Err(refused) = &refused {
                        state.metrics.admission_error(webhook, refused.reason());
                    }
                    state.metrics.admission_handled(webhook, started.elapsed());
                    refused.unwrap_or_else(IntoResponse::into_response)
                }),
            )
        })
        .with_state(state)
}

/// Why a request gets no review back.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("expected Content-Type application/json, got {}", readable(&format!("{:?}", .0)))]
    ContentType(String),
    #[error("the review is larger than {REVIEW_BYTES_MAX} bytes")]
    TooLarge,
    #[error("failed to read the request body: {0}")]
    Body(String),
    #[error("the body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("invalid AdmissionReview: {0}")]
    Review(ReviewError),
    #[error("this endpoint serves the {expected} webhook; a review of kind {kind:?} belongs to the {got} webhook")]
    WrongEndpoint { expected: &'static str, got: &'static str, kind: String },
    #[error("the review was not read and answered within {0:?}")]
    Timeout(Duration),
    /// The view cannot be decided on (shared.rs); /healthz fails too, and the kubelet restarts the replica.
    #[error("cannot answer: {0}")]
    ViewPoisoned(ViewPoisoned),
}

impl RequestError {
    pub fn status(&self) -> StatusCode {
        match self {
            RequestError::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RequestError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            RequestError::ViewPoisoned(_) => StatusCode::SERVICE_UNAVAILABLE,
            RequestError::Body(_) | RequestError::NotJson(_) | RequestError::Review(_) => StatusCode::BAD_REQUEST,
            RequestError::WrongEndpoint { .. } => StatusCode::BAD_REQUEST,
        }
    }
}

impl RequestError {
    /// The status's reason as Kubernetes words it (`metav1.StatusReason`): the `reason` label of an error in
    /// `gpuclaim_admission_decisions_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            RequestError::ContentType(_) => "UnsupportedMediaType",
            RequestError::TooLarge => "RequestEntityTooLarge",
            RequestError::Timeout(_) => "Timeout",
            RequestError::ViewPoisoned(_) => "ServiceUnavailable",
            RequestError::Body(_) | RequestError::NotJson(_) | RequestError::Review(_) => "BadRequest",
            RequestError::WrongEndpoint { .. } => "BadRequest",
        }
    }
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        (self.status(), [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{self}\n")).into_response()
    }
}

async fn handle(state: &Endpoint, webhook: Webhook, headers: &HeaderMap, body: Body) -> Result<Response, RequestError> {
    let body = read_json_body(headers, body).await.inspect_err(|e| refused(webhook, e))?;
    let (mut response, mut outcome) = answer_body(&state.view, webhook, &body).inspect_err(|e| refused(webhook, e))?;
    if let Some(client) = state.client.as_ref().filter(|_| read_through::worth_reading(&outcome)) {
        // The body was read as a review above: it parses.
        let review: Value = serde_json::from_slice(&body).map_err(RequestError::NotJson)?;
        match read_through::answer_again(client, &state.view, &review).await {
            Ok(Some(again)) => (response, outcome) = again,
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "cannot read the claims past the cache; the refusal stands"),
        }
    }
    answered(&response, &outcome);
    state.metrics.admission(&outcome);
    let bytes = serde_json::to_vec(&response).expect("JSON values always serialize");
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

/// Reads the body, refusing another media type and anything over [`REVIEW_BYTES_MAX`] without buffering it.
pub async fn read_json_body(headers: &HeaderMap, body: Body) -> Result<Bytes, RequestError> {
    let content_type = headers.get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_json = content_type
        .as_deref()
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(RequestError::ContentType(content_type.unwrap_or_default()));
    }
    match http_body_util::Limited::new(body, REVIEW_BYTES_MAX).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(RequestError::TooLarge),
        Err(error) => Err(RequestError::Body(error.to_string())),
    }
}

/// Answers a body [`read_json_body`] read: parses the review, answers it on the view, and refuses a review of
/// another endpoint's kind. Synchronous and without I/O, so the fuzz driver (`examples/fuzz_readers.rs`) feeds it
/// bodies exactly as the server does; the view is locked only to answer, not while the body is parsed.
pub fn answer_body(view: &SharedView, webhook: Webhook, body: &[u8]) -> Result<(Value, Outcome), RequestError> {
    let review: Value = serde_json::from_slice(body).map_err(RequestError::NotJson)?;
    let (response, outcome) = {
        let view = view.read().map_err(RequestError::ViewPoisoned)?;
        answer_review(&view, &review).map_err(RequestError::Review)?
    };
    if outcome.webhook != webhook {
        let kind = review.pointer("/request/kind/kind").and_then(Value::as_str).unwrap_or_default().to_owned();
        return Err(RequestError::WrongEndpoint { expected: webhook.name(), got: outcome.webhook.name(), kind });
    }
    Ok((response, outcome))
}

fn answered(response: &Value, outcome: &Outcome) {
    let uid = response.pointer("/response/uid").and_then(Value::as_str).unwrap_or_default();
    tracing::info!(webhook = outcome.webhook.name(), uid, decision = %outcome, "answered an admission review");
}

fn refused(webhook: Webhook, error: &RequestError) {
    tracing::warn!(webhook = webhook.name(), status = error.status().as_u16(), %error, "refused a request");
}
