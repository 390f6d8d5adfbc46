//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics (`tools/leaderelection`), so a
//! gpuclaim replica and any client-go tool agree on who leads:
//!
//! - A candidate acquires a Lease that is missing, released (no holder) or expired; a Lease is expired when its
//!   record has not changed for `lease_duration` *as observed on this replica's clock* (the renew time written in
//!   the Lease is not trusted: clocks of different nodes differ).
//! - The leader renews every `retry_period`; if no renewal succeeds for `renew_deadline`, it stops leading (before
//!   others may take over, since `renew_deadline < lease_duration`).
//! - Every write is an update with the resourceVersion read (optimistic concurrency): of two candidates racing for
//!   the same Lease, one gets a conflict.
//! - Taking over from another holder increments `leaseTransitions` and sets `acquireTime`; renewing keeps both.
//! - On shutdown the leader releases the Lease (holder cleared), so the next replica need not wait for expiry.
//!
//! - What the writer asks before each write is [`Leadership`]: when the last renewal succeeded. It must not write
//!   once that is older than the renew deadline, whatever the elector's loop has published yet.
//!
//! kube-runtime has none; kube-lease-manager 0.13 (for kube 5) lacks a renew deadline, judges expiry by the
//! holder's clock and writes without preconditions (docs/adapter.md says where), hence this one small module.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// client-go's timings (and controller-runtime's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long non-leaders wait after the last observed change of the Lease before taking it over.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingsError {
    #[error("the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})")]
    LeaseNotLongerThanRenew { lease: Duration, renew: Duration },
    #[error("the renew deadline ({renew:?}) must be longer than the retry period ({retry:?})")]
    RenewNotLongerThanRetry { renew: Duration, retry: Duration },
    #[error("the retry period must be positive")]
    RetryZero,
}

impl Timings {
    /// The relations client-go insists on: otherwise two replicas could lead at once.
    pub fn validate(&self) -> Result<(), TimingsError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingsError::LeaseNotLongerThanRenew {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period {
            return Err(TimingsError::RenewNotLongerThanRetry { renew: self.renew_deadline, retry: self.retry_period });
        }
        if self.retry_period.is_zero() {
            return Err(TimingsError::RetryZero);
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("failed to read Lease {namespace}/{name}: {source}")]
    Get { namespace: String, name: String, source: kube::Error },
    #[error("failed to create Lease {namespace}/{name}: {source}")]
    Create { namespace: String, name: String, source: kube::Error },
    #[error("failed to update Lease {namespace}/{name}: {source}")]
    Update { namespace: String, name: String, source: kube::Error },
}

/// One candidate for one Lease.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timings: Timings,
    /// The Lease's spec as last read, and when (on our clock) it last changed.
    observed: Option<(LeaseSpec, Instant)>,
    leading: watch::Sender<bool>,
    /// When the try that last renewed (or acquired) the Lease started, while leading.
    renewed: watch::Sender<Option<Instant>>,
}

/// Whether this replica may act as the leader now, as the writer asks before each call: the start of the last try
/// that renewed the Lease, and the renew deadline it holds for. The start, not the end, of the try: others judge
/// expiry from when they saw the record change, which is after our request left.
#[derive(Clone, Debug)]
pub struct Leadership {
    /// `None`: no election (a single replica, or a test); it always leads.
    renewed: Option<watch::Receiver<Option<Instant>>>,
    renew_deadline: Duration,
}

impl Leadership {
    /// Leading without a Lease.
    pub fn unelected() -> Leadership {
        Leadership { renewed: None, renew_deadline: Duration::MAX }
    }

    /// Leading while the last renewal `renewed` says (`None`: not leading) is younger than `renew_deadline`: what
    /// [`Elector::leadership`] gives, for a test to drive.
    pub fn following(renewed: watch::Receiver<Option<Instant>>, renew_deadline: Duration) -> Leadership {
        Leadership { renewed: Some(renewed), renew_deadline }
    }

    /// How long this replica may still act as the leader; `None` when it may not (no renewal, or the last one is
    /// older than the renew deadline).
    pub fn remaining(&self) -> Option<Duration> {
        let Some(renewed) = &self.renewed else { return Some(self.renew_deadline) };
        let at = (*renewed.borrow())?;
        self.renew_deadline.checked_sub(at.elapsed()).filter(|left| !left.is_zero())
    }
}

/// What one try found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the Lease (acquired or renewed).
    Leading,
    /// Another live holder has it.
    HeldByOther,
}

impl Elector {
    /// A candidate named `identity` (unique per replica: the pod's name) for Lease `namespace/name`.
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str, timings: Timings) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            observed: None,
            leading: watch::Sender::new(false),
            renewed: watch::Sender::new(None),
        }
    }

    /// What the writer checks before each call.
    pub fn leadership(&self) -> Leadership {
        Leadership { renewed: Some(self.renewed.subscribe()), renew_deadline: self.timings.renew_deadline }
    }

    /// Whether this replica leads, as it changes.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Campaigns and renews until `shutdown` completes, then releases the Lease if it holds it. Errors of single
    /// tries are logged and retried: a candidate never stops campaigning.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut last_renewed: Option<Instant> = None;
        loop {
            // A try may not outlast what is left of the renew deadline (client-go gives it a context with that
            // timeout): the client retries 429/503 for minutes on its own, and a leader stuck in such a try must
            // still stop leading in time.
            let budget = match last_renewed {
                Some(at) => self.timings.renew_deadline.saturating_sub(at.elapsed()),
                None => self.timings.renew_deadline,
            };
            let started = Instant::now();
            let attempt = tokio::time::timeout(budget, self.try_acquire_or_renew()).await;
            let now = Instant::now();
            match attempt {
                Ok(Ok(Attempt::Leading)) => {
                    last_renewed = Some(now);
                    self.renewed.send_replace(Some(started));
                }
                Ok(Ok(Attempt::HeldByOther)) => last_renewed = None,
                Ok(Err(error)) => tracing::warn!(%error, "leader election: try failed"),
                Err(_) => tracing::warn!(?budget, "leader election: try timed out"),
            }
            // A leader that could not renew for the renew deadline stops leading: by the time others may take
            // over (lease duration after their last observation), it no longer acts.
            let leading = last_renewed.is_some_and(|at| now.duration_since(at) < self.timings.renew_deadline);
            if !leading {
                last_renewed = None;
                self.renewed.send_replace(None);
            }
            self.set_leading(leading);
            // A leader wakes by its deadline at the latest, so `leading` turns false when the deadline passes, not
            // up to a retry period later.
            let sleep = match last_renewed {
                Some(at) => self.timings.retry_period.min(self.timings.renew_deadline.saturating_sub(at.elapsed())),
                None => self.timings.retry_period,
            };
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = &mut shutdown => break,
            }
        }
        if *self.leading.borrow() {
            self.renewed.send_replace(None);
            self.set_leading(false);
            // Bounded like a try: a stop must not hang on an API server that does not answer.
            match tokio::time::timeout(self.timings.renew_deadline, self.release()).await {
                Ok(Ok(())) => tracing::info!(lease = %self.name, "released the lease"),
                Ok(Err(error)) => tracing::warn!(%error, "leader election: failed to release the lease"),
                Err(_) => tracing::warn!("leader election: releasing the lease timed out"),
            }
        }
    }

    fn set_leading(&self, leading: bool) {
        let changed = self.leading.send_if_modified(|current| std::mem::replace(current, leading) != leading);
        if changed {
            tracing::info!(identity = %self.identity, lease = %self.name, leading, "leadership changed");
        }
    }

    /// One try, as client-go's `tryAcquireOrRenew`.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaseError> {
        let now = Instant::now();
        let existing = self.api.get_opt(&self.name).await.map_err(|source| self.get_error(source))?;
        let Some(mut lease) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.record(None)),
            };
            let created = self.api.create(&PostParams::default(), &lease).await.map_err(|source| {
                LeaseError::Create { namespace: self.namespace.clone(), name: self.name.clone(), source }
            })?;
            self.observed = Some((created.spec.unwrap_or_default(), now));
            return Ok(Attempt::Leading);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        match &self.observed {
            Some((observed, _)) if *observed == spec => {}
            _ => self.observed = Some((spec.clone(), now)),
        }
        let observed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let holder = spec.holder_identity.as_deref().unwrap_or_default();
        let expired = now.duration_since(observed_at) >= lease_duration_of(&spec, self.timings.lease_duration);
        if !holder.is_empty() && holder != self.identity && !expired {
            return Ok(Attempt::HeldByOther);
        }
        lease.spec = Some(self.record(Some(&spec)));
        let updated = self.api.replace(&self.name, &PostParams::default(), &lease).await.map_err(|source| {
            LeaseError::Update { namespace: self.namespace.clone(), name: self.name.clone(), source }
        })?;
        self.observed = Some((updated.spec.unwrap_or_default(), now));
        Ok(Attempt::Leading)
    }

    /// The record this replica writes: renewing keeps the acquire time and transitions; acquiring a Lease held or
    /// released by anyone counts one transition (as client-go counts).
    fn record(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let renewing = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(self.identity.as_str()));
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds(self.timings.lease_duration)),
            acquire_time: match previous {
                Some(p) if renewing => p.acquire_time.clone(),
                _ => Some(now.clone()),
            },
            renew_time: Some(now),
            lease_transitions: Some(match previous {
                Some(_) if renewing => transitions,
                Some(_) => transitions.saturating_add(1),
                None => 0,
            }),
            ..previous.cloned().unwrap_or_default()
        }
    }

    /// Gives the Lease up (holder cleared, duration 1 s), as client-go's `ReleaseOnCancel`.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(|source| self.get_error(source))? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        lease.spec = Some(spec);
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map_err(|source| LeaseError::Update {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        })?;
        Ok(())
    }

    fn get_error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Get { namespace: self.namespace.clone(), name: self.name.clone(), source }
    }
}

/// The duration the holder wrote (client-go trusts the record's), else ours.
fn lease_duration_of(spec: &LeaseSpec, ours: Duration) -> Duration {
    match spec.lease_duration_seconds {
        Some(seconds) if seconds > 0 => Duration::from_secs(u64::from(seconds.unsigned_abs())),
        _ => ours,
    }
}

fn seconds(duration: Duration) -> i32 {
    // Whole seconds, at least one: the field is an integer count of seconds.
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}
