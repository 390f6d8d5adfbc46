//! Leader election against a fake API server storing the Lease: one of two candidates leads, the other takes over
//! once the lease expires or is released, and a leader that cannot renew stops leading.

use std::time::Duration;

use axum::http::StatusCode;
use gpuclaim_adapter::leader::{Attempt, Elector, Leadership, Timings, TimingsError};
use tokio::sync::{oneshot, watch};

use crate::fake_store::FakeStore;
use crate::support::FakeApi;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/cozy-gpuclaim/leases/gpuclaim";

/// Short timings with client-go's proportions; the Lease records whole seconds, so the lease is 1 s.
fn timings() -> Timings {
    Timings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(100),
    }
}

struct Candidate {
    leading: watch::Receiver<bool>,
    leadership: Leadership,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Candidate {
    fn start(api: &FakeApi, identity: &str) -> Candidate {
        let elector = Elector::new(api.client.clone(), "cozy-gpuclaim", "gpuclaim", identity, timings());
        let (leading, leadership) = (elector.leading(), elector.leadership());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(elector.run(async {
            let _ = stopped.await;
        }));
        Candidate { leading, leadership, stop: Some(stop), task }
    }

    fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    async fn wait_leading(&mut self, leading: bool, within: Duration) {
        tokio::time::timeout(within, self.leading.wait_for(|l| *l == leading))
            .await
            .unwrap_or_else(|_| panic!("leading={leading} not reached within {within:?}"))
            .unwrap();
    }

    /// Stops gracefully: the lease is released.
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap();
    }

    /// Dies: the lease is left to expire.
    fn crash(self) {
        self.task.abort();
    }
}

/// A fake API server and one candidate, "replica-a", once it leads.
async fn leading_candidate() -> (FakeStore, FakeApi, Candidate) {
    let store = FakeStore::default();
    let api = FakeApi::start(store.router()).await;
    let mut a = Candidate::start(&api, "replica-a");
    a.wait_leading(true, Duration::from_secs(2)).await;
    (store, api, a)
}

fn holder(store: &FakeStore) -> Option<String> {
    store.get(LEASE).and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn of_two_candidates_one_leads_and_the_lease_names_it() {
    let (store, api, a) = leading_candidate().await;
    let b = Candidate::start(&api, "replica-b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.is_leading() && !b.is_leading());
    assert_eq!(holder(&store).as_deref(), Some("replica-a"));
    let lease = store.get(LEASE).unwrap();
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(lease["spec"]["leaseTransitions"], 0);
}

#[tokio::test]
async fn a_crashed_leaders_lease_is_taken_over_after_it_expires() {
    let (store, api, a) = leading_candidate().await;
    let acquired = store.get(LEASE).unwrap()["spec"]["acquireTime"].clone();
    let mut b = Candidate::start(&api, "replica-b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.crash();
    let crashed = tokio::time::Instant::now();
    b.wait_leading(true, Duration::from_secs(3)).await;
    let waited = crashed.elapsed();
    assert!(waited >= Duration::from_millis(700), "b waited for expiry, not {waited:?}");
    let lease = store.get(LEASE).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    assert_ne!(lease["spec"]["acquireTime"], acquired);
}

#[tokio::test]
async fn a_released_lease_is_taken_over_without_waiting_for_expiry() {
    let (store, api, a) = leading_candidate().await;
    let mut b = Candidate::start(&api, "replica-b");
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.shutdown().await;
    assert_eq!(holder(&store), None, "a released the lease");
    b.wait_leading(true, Duration::from_millis(500)).await;
    assert_eq!(holder(&store).as_deref(), Some("replica-b"));
}

#[tokio::test]
async fn a_leader_that_cannot_renew_stops_leading_within_the_renew_deadline() {
    let (store, _api, mut a) = leading_candidate().await;
    store.set_failing(Some(StatusCode::INTERNAL_SERVER_ERROR));
    let outage = tokio::time::Instant::now();
    a.wait_leading(false, Duration::from_secs(2)).await;
    let took = outage.elapsed();
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(1), "stopped after {took:?}");
    store.set_failing(None);
    a.wait_leading(true, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_leader_whose_renewals_hang_in_client_retries_still_stops_leading_in_time() {
    let (store, _api, mut a) = leading_candidate().await;
    // kube's client retries 503 with backoff for minutes; the try must be cut at the renew deadline.
    store.set_failing(Some(StatusCode::SERVICE_UNAVAILABLE));
    let outage = tokio::time::Instant::now();
    a.wait_leading(false, Duration::from_secs(2)).await;
    let took = outage.elapsed();
    assert!(took < Duration::from_secs(1), "stopped leading after {took:?}, before the lease (1 s) could expire");
}

#[tokio::test]
async fn renewing_keeps_the_acquire_time_and_a_conflict_is_no_lead() {
    let store = FakeStore::default();
    let api = FakeApi::start(store.router()).await;
    let mut elector = Elector::new(api.client.clone(), "cozy-gpuclaim", "gpuclaim", "replica-a", timings());
    assert_eq!(elector.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
    let first = store.get(LEASE).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(elector.try_acquire_or_renew().await.unwrap(), Attempt::Leading);
    let renewed = store.get(LEASE).unwrap();
    assert_eq!(renewed["spec"]["acquireTime"], first["spec"]["acquireTime"]);
    assert_ne!(renewed["spec"]["renewTime"], first["spec"]["renewTime"]);

    let mut other = Elector::new(api.client.clone(), "cozy-gpuclaim", "gpuclaim", "replica-b", timings());
    assert_eq!(other.try_acquire_or_renew().await.unwrap(), Attempt::HeldByOther);
    let puts = store.requests().iter().filter(|r| r.method == "PUT").count();
    assert_eq!(puts, 1, "a live holder's lease is not written by another candidate");
}

#[test]
fn timings_that_would_let_two_replicas_lead_are_refused() {
    assert_eq!(Timings::default().validate(), Ok(()));
    let defaults = Timings::default();
    assert_eq!(
        defaults,
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2)
        }
    );
    let short = Timings { lease_duration: Duration::from_secs(10), ..defaults };
    assert_eq!(
        short.validate().unwrap_err().to_string(),
        "the lease duration (10s) must be longer than the renew deadline (10s)"
    );
    let slow = Timings { retry_period: Duration::from_secs(10), ..defaults };
    assert!(matches!(slow.validate(), Err(TimingsError::RenewNotLongerThanRetry { .. })));
}

#[tokio::test]
async fn the_writer_sees_leadership_end_at_the_renew_deadline_after_the_last_renewal() {
    let (store, _api, mut a) = leading_candidate().await;
    let left = a.leadership.remaining().expect("a leader may write");
    assert!(left <= timings().renew_deadline, "{left:?}");
    // Renewals hang in the client's retries; the last one that succeeded bounds what may still be written.
    store.set_failing(Some(StatusCode::SERVICE_UNAVAILABLE));
    let outage = tokio::time::Instant::now();
    while a.leadership.remaining().is_some() {
        assert!(outage.elapsed() < timings().renew_deadline, "still writing {:?} into the outage", outage.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    a.wait_leading(false, Duration::from_secs(1)).await;
    store.set_failing(None);
    a.wait_leading(true, Duration::from_secs(2)).await;
    assert!(a.leadership.remaining().is_some(), "leading again");
    a.shutdown().await;
    assert_eq!(holder(&store), None);
}
