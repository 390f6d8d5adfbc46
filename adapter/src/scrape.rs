//! `GET /metrics` over HTTPS, for callers the API server vouches for: 401 without a token it authenticates, 403
//! for a user RBAC does not allow `get` on `/metrics`, 500 when the reviews cannot be made and 503 when they take
//! too long (the scrape is refused, never answered unchecked).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::access::{Access, METRICS_PATH, Verdict};
use crate::metrics::Metrics;

/// How long the TokenReview and SubjectAccessReview of one scrape may take together.
pub const ACCESS_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Clone)]
struct Scrape {
    access: Arc<Access>,
    metrics: Arc<Metrics>,
}

/// The router serving [`METRICS_PATH`].
pub fn router(access: Arc<Access>, metrics: Arc<Metrics>) -> Router {
    Router::new().route(METRICS_PATH, get(scrape)).with_state(Scrape { access, metrics })
}

async fn scrape(State(state): State<Scrape>, headers: HeaderMap) -> Response {
    let Some(token) = bearer_token(&headers) else {
        return unauthorized("an Authorization: Bearer token is required");
    };
    // Prometheus gives up on a scrape after its timeout (10 s by default); so does the check.
    let checked = tokio::time::timeout(ACCESS_CHECK_TIMEOUT, state.access.check(token)).await;
    let Ok(checked) = checked else {
        let message = format!("cannot check access to {METRICS_PATH}: the reviews took over {ACCESS_CHECK_TIMEOUT:?}");
        tracing::warn!(%message, "cannot check a metrics scrape");
        return text(StatusCode::SERVICE_UNAVAILABLE, message);
    };
    match checked {
        Ok(Verdict::Allowed { .. }) if accepts_openmetrics(&headers) => {
            let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            ([(header::CONTENT_TYPE, content_type)], state.metrics.encode()).into_response()
        }
        Ok(Verdict::Allowed { .. }) => {
            let content_type = "text/plain; version=0.0.4; charset=utf-8";
            ([(header::CONTENT_TYPE, content_type)], state.metrics.encode_classic()).into_response()
        }
        Ok(Verdict::Unauthenticated { reason }) => unauthorized(&format!("the token is not authenticated: {reason}")),
        Ok(Verdict::Forbidden { user, reason }) => {
            tracing::info!(%user, %reason, "refused a metrics scrape");
            text(StatusCode::FORBIDDEN, format!("user {user:?} may not get {METRICS_PATH}: {reason}"))
        }
        Err(error) => {
            tracing::warn!(%error, "cannot check a metrics scrape");
            text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot check access to {METRICS_PATH}: {error}"))
        }
    }
}

/// Whether the scraper asks for OpenMetrics (Prometheus does, first); anything else gets the classic text format,
/// as client_golang negotiates.
fn accepts_openmetrics(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|value| value.to_str().ok()).flat_map(|v| v.split(',')).any(
        |range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|p| p.replace(' ', "") == "q=0");
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        },
    )
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized(message: &str) -> Response {
    let mut response = text(StatusCode::UNAUTHORIZED, message.to_owned());
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

fn text(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{message}\n")).into_response()
}
