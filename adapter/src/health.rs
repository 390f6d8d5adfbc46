//! The kubelet's probes, over plain HTTP as controller-runtime serves them, and the record of what broke.
//!
//! - `/healthz` answers 200 while the process can do its work, and 503 naming what broke otherwise: the view
//!   poisoned by a change that panicked (shared.rs), or an essential task (a cache's watch, the reconciler, leader
//!   election, a server, the certificate reload) that ended or panicked before shutdown. The liveness probe then
//!   fails and the kubelet restarts the container: a replica that cannot recover on its own must not look healthy
//!   while it refuses every review.
//! - `/readyz` answers 200 only once every cache the webhooks read has synced, so the Service sends no review to a
//!   replica that would answer it from an empty view, and never while `/healthz` fails, so a broken replica leaves
//!   the Service's endpoints at the next readiness probe instead of waiting for the restart.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use futures::FutureExt;
use tokio::task::JoinHandle;

use crate::cache::Caches;

/// The tasks the process needs running until it stops, and how those that ended early ended.
#[derive(Debug, Default)]
pub struct Tasks {
    /// Task name → "ended" or "panicked: <message>". A plain map under a lock that does not poison: an entry is
    /// written whole or not at all.
    ended: parking_lot::Mutex<BTreeMap<String, String>>,
    /// Set when shutdown begins: from then on a task that returns is stopping, not broken.
    stopping: AtomicBool,
}

impl Tasks {
    pub fn new() -> Arc<Tasks> {
        Arc::new(Tasks::default())
    }

    /// Spawns `task` as an essential one: if it panics, or returns before [`Tasks::stop`], it is recorded (and
    /// logged) as broken. A panic is caught here so it is recorded with its message; the task ends either way.
    pub fn spawn(
        self: &Arc<Self>,
        name: impl Into<String>,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        let (tasks, name) = (self.clone(), name.into());
        tokio::spawn(async move {
            let how = match AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) if tasks.stopping.load(Ordering::Acquire) => return,
                Ok(()) => "ended".to_owned(),
                Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
            };
            tracing::error!(task = %name, how, "an essential task stopped: /healthz fails until the replica restarts");
            tasks.ended.lock().insert(name, how);
        })
    }

    /// Marks the start of shutdown: tasks returning from now on are not broken.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// The essential tasks that ended early, each with how.
    pub fn ended(&self) -> Vec<String> {
        self.ended.lock().iter().map(|(name, how)| format!("{name} {how}")).collect()
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    match (panic.downcast_ref::<&'static str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message,
        (None, Some(message)) => message,
        (None, None) => "a panic without a message",
    }
}

#[derive(Clone)]
struct Probes {
    caches: Arc<Caches>,
    tasks: Arc<Tasks>,
}

impl Probes {
    /// What broke, one line each; empty while the process is healthy.
    fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        if self.caches.view.is_poisoned() {
            broken.push("the view: a change panicked half-way through it (its lock is poisoned)".to_owned());
        }
        broken.extend(self.tasks.ended());
        broken
    }

    /// 503 naming what broke, or `None` while nothing did.
    fn broken_answer(&self) -> Option<(StatusCode, String)> {
        let broken = self.broken();
        (!broken.is_empty()).then(|| (StatusCode::SERVICE_UNAVAILABLE, format!("broken: {}\n", broken.join("; "))))
    }
}

pub fn router(caches: Arc<Caches>, tasks: Arc<Tasks>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(ready)).with_state(Probes { caches, tasks })
}

async fn healthz(State(probes): State<Probes>) -> (StatusCode, String) {
    probes.broken_answer().unwrap_or((StatusCode::OK, "ok\n".to_owned()))
}

async fn ready(State(probes): State<Probes>) -> (StatusCode, String) {
    if let Some(broken) = probes.broken_answer() {
        return broken;
    }
    let pending = probes.caches.webhook_caches_pending();
    if pending.is_empty() {
        return (StatusCode::OK, "ok\n".to_owned());
    }
    let names: Vec<&str> = pending.iter().map(|kind| kind.name()).collect();
    (StatusCode::SERVICE_UNAVAILABLE, format!("waiting for caches to sync: {}\n", names.join(", ")))
}
