//! Who a request comes from: the one bearer token the kubeconfig holds. Every other request is refused with 401,
//! as the API server refuses an unauthenticated one (the served twin has no anonymous access). Issue 40 adds service
//! accounts and RBAC.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;

/// Whether `headers` carry `Authorization: Bearer <token>` with the run's token, compared in constant time.
pub fn authenticated(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(AUTHORIZATION).and_then(|value| value.to_str().ok()) else { return false };
    let Some(given) = given.strip_prefix("Bearer ").map(str::trim) else { return false };
    // Every byte is compared whatever the first difference, so the time taken tells nothing of the token.
    let differences = given.bytes().zip(token.bytes()).fold(0u8, |seen, (a, b)| seen | (a ^ b));
    given.len() == token.len() && differences == 0
}
