//! The kubelet's probes, over plain HTTP as controller-runtime serves them: `/healthz` answers while the process
//! runs; `/readyz` only once every cache the webhooks read has synced, so the Service sends no review to a replica
//! that would answer it from an empty view.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::cache::Caches;

pub fn router(caches: Arc<Caches>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(ready)).with_state(caches)
}

async fn ready(State(caches): State<Arc<Caches>>) -> (StatusCode, String) {
    let pending = caches.webhook_caches_pending();
    if pending.is_empty() {
        return (StatusCode::OK, "ok\n".to_owned());
    }
    let names: Vec<&str> = pending.iter().map(|kind| kind.name()).collect();
    (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for caches to sync: {}\n", names.join(", ")))
}
