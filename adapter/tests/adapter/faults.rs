//! The process survives its own faults: a panic half-way through a change of the view, or an essential task that
//! dies, turns `/healthz` (and `/readyz`) to 503 naming what broke, so the kubelet's liveness probe restarts the
//! replica, and the webhooks answer 503 instead of deciding on a half-written view.

use std::time::Duration;

use gpuclaim_adapter::cache::Caches;
use gpuclaim_adapter::health::Tasks;
use gpuclaim_adapter::https::Limits;
use gpuclaim_adapter::webhook;
use gpuclaim_engine::controller::runtime::{Change, Kind};

use crate::support;
use crate::webhook_https::Server;

#[tokio::test]
async fn a_panic_inside_the_view_lock_fails_the_probes_and_reviews_get_503_not_a_panic() {
    let view = support::example_view();
    let caches = Caches::new(view.clone());
    let tasks = Tasks::new();
    let probes = support::serve_probes(caches.clone(), tasks.clone()).await;
    let server = Server::on(view.clone(), webhook::REQUEST_TIMEOUT, Limits::default()).await;
    let review = support::example_reviews().into_iter().find(|(name, _)| name == "pod-launcher-trainer.json").unwrap();
    let body = serde_json::to_vec(&review.1).unwrap();
    let post = || server.post("/mutate-pod", body.clone());
    assert_eq!(post().await.status, 200);
    assert_eq!(support::get_plain(probes, "/healthz").await, (200, "ok\n".to_owned()));

    // Changes that panic half-way, as a bug in the engine's bookkeeping would (on a thread of its own, so the
    // panic ends that thread as it ends a watch's task).
    let changing = caches.clone();
    let panicked = std::thread::spawn(move || {
        let gone = Change::Delete { kind: Kind::Class, namespace: "".into(), name: "h100".into(), revision: "".into() };
        let _ =
            changing.apply([gone].into_iter().chain(std::iter::from_fn(|| panic!("a bug half-way through a change"))));
    })
    .join();
    assert!(panicked.is_err(), "the change panicked");

    let broken = "broken: the view: a change panicked half-way through it (its lock is poisoned)\n".to_owned();
    assert_eq!(support::get_plain(probes, "/healthz").await, (503, broken.clone()), "liveness fails: a restart");
    assert_eq!(support::get_plain(probes, "/readyz").await, (503, broken), "the Service stops sending reviews");
    let refused = post().await;
    assert_eq!(refused.status, 503);
    assert_eq!(
        refused.text(),
        "cannot answer: the view is unusable: a change panicked half-way through it (its lock is poisoned); the \
         replica must restart\n"
    );
    assert!(caches.apply([]).is_err(), "nothing more is folded into a poisoned view");
}

#[tokio::test]
async fn an_essential_task_that_panics_or_returns_fails_healthz_naming_it() {
    let caches = Caches::new(support::example_view());
    let tasks = Tasks::new();
    let probes = support::serve_probes(caches, tasks.clone()).await;
    tasks.spawn("the reconciler", async { panic!("boom") }).await.unwrap();
    assert_eq!(
        support::get_plain(probes, "/healthz").await,
        (503, "broken: the reconciler panicked: boom\n".to_owned())
    );
    tasks.spawn("the gpuclaims cache's watch", async {}).await.unwrap();
    let (status, body) = support::get_plain(probes, "/healthz").await;
    assert_eq!(status, 503);
    assert_eq!(body, "broken: the gpuclaims cache's watch ended; the reconciler panicked: boom\n");

    // Once shutdown has begun, a task that returns is stopping, not broken.
    tasks.stop();
    tasks.spawn("the webhook server", async {}).await.unwrap();
    assert_eq!(tasks.ended().len(), 2);
}

#[tokio::test]
async fn a_healthy_process_answers_ok_while_its_tasks_run() {
    let caches = Caches::new(support::example_view());
    let tasks = Tasks::new();
    let probes = support::serve_probes(caches, tasks.clone()).await;
    let running = tasks.spawn("the reconciler", std::future::pending());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(support::get_plain(probes, "/healthz").await, (200, "ok\n".to_owned()));
    running.abort();
}
