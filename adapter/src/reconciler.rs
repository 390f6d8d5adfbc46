//! The reconciler: watcher → store → reconcile → error policy, as kube-runtime composes a controller. The caches
//! fill the view; on every change the leader runs the engine's pass (only over what changed, or over everything
//! after a failure, a leadership change or a resync) and writes its actions.
//!
//! Error policy, by the error's kind: a stale view (409 Conflict, 404) refreshes the object and reconciles again
//! after [`STALE_RETRY_DELAY`]; anything else backs off exponentially up to [`FAILURE_BACKOFF_MAX`]. Either way the
//! next pass is a full one, since a pass that stopped halfway leaves no guarantee `reconcile_changes` relies on. A
//! call that timed out counts as a failure; a lease that lapsed mid-pass stops the pass until leadership returns;
//! a poisoned view (shared.rs) ends the reconciler, which health.rs reports so the kubelet restarts the replica.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuclaim_engine::controller::{self, Action, ObjectRef, PinConfirmation, Waiting};
use gpuclaim_engine::model::Time;
use gpuclaim_engine::variant::Variant;
use tokio::sync::watch;

use crate::cache::Caches;
use crate::metrics::Metrics;
use crate::shared::ViewPoisoned;
use crate::writer::{WriteError, Writer};

/// A full pass at least this often, whatever the watches say: a missed event cannot strand a waiter for long.
pub const RESYNC_INTERVAL: Duration = Duration::from_secs(300);
/// After a conflict: long enough for the watch to deliver the change that caused it.
pub const STALE_RETRY_DELAY: Duration = Duration::from_millis(200);
/// The first backoff after a failed write, doubled per consecutive failure up to the maximum.
pub const FAILURE_BACKOFF_MIN: Duration = Duration::from_secs(1);
pub const FAILURE_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// What one pass did, and when to run the next.
#[derive(Debug)]
pub enum PassOutcome {
    /// Every action written (`written` of them); the next pass may cover only what changes.
    Done { written: usize },
    /// The replica stopped leading mid-pass after `written` writes.
    NotLeading { written: usize },
    /// A write met a stale view; the object was refreshed. Retry (fully) after the delay.
    Stale { error: WriteError, retry_after: Duration },
    /// A write failed; retry (fully) after the backoff.
    Failed { error: WriteError, retry_after: Duration },
    /// The view is poisoned: nothing can be decided any more.
    Broken(ViewPoisoned),
}

pub struct Reconciler {
    caches: Arc<Caches>,
    writer: Writer,
    metrics: Arc<Metrics>,
    leading: watch::Receiver<bool>,
    /// Whether the next pass must cover everything.
    full: bool,
    /// Consecutive failed passes, for the backoff.
    failures: u32,
    /// The waiters the last pass whose writes all landed left waiting: skipped while nothing loosens for them (the
    /// engine's `Waiting`; forgotten after any failure, as the twin's controller does).
    waiting: Waiting,
}

impl Reconciler {
    pub fn new(caches: Arc<Caches>, writer: Writer, metrics: Arc<Metrics>, leading: watch::Receiver<bool>) -> Self {
        Reconciler { caches, writer, metrics, leading, full: true, failures: 0, waiting: Waiting::default() }
    }

    /// Reconciles while leading until `shutdown` completes. Waits for every cache to sync first: a pass on a view
    /// missing VMIs would release every attached claim.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut synced = self.caches.synced();
        tokio::select! {
            _ = synced.wait_for(|kinds| kinds.len() == crate::cache::CacheKind::ALL.len()) => {}
            () = &mut shutdown => return,
        }
        let mut last_full = Instant::now();
        loop {
            if !*self.leading.borrow() {
                self.start_over();
                tokio::select! {
                    _ = self.leading.wait_for(|leading| *leading) => {}
                    () = &mut shutdown => return,
                }
                tracing::info!("leading: reconciling");
            }
            if last_full.elapsed() >= RESYNC_INTERVAL {
                self.start_over();
            }
            if self.full {
                last_full = Instant::now();
            }
            let wait = match self.pass().await {
                PassOutcome::Done { written } => {
                    if written > 0 {
                        tracing::info!(written, "reconciled");
                    }
                    None
                }
                // The writer saw the lease lapse; the elector says so within a retry period. Until then, wait
                // rather than decide passes that cannot be written.
                PassOutcome::NotLeading { .. } => Some(STALE_RETRY_DELAY),
                PassOutcome::Broken(error) => return tracing::error!(%error, "the reconciler stops"),
                PassOutcome::Stale { error, retry_after } => {
                    tracing::info!(%error, "view was stale; refreshed, reconciling again");
                    Some(retry_after)
                }
                PassOutcome::Failed { error, retry_after } => {
                    tracing::warn!(%error, ?retry_after, "write failed; backing off");
                    Some(retry_after)
                }
            };
            let idle = wait.unwrap_or_else(|| RESYNC_INTERVAL.saturating_sub(last_full.elapsed()));
            tokio::select! {
                () = self.caches.changed(), if wait.is_none() => {}
                () = tokio::time::sleep(idle) => {}
                _ = self.leading.changed() => {}
                () = &mut shutdown => return,
            }
        }
    }

    /// Confirms the pass's pins before any of it is written (docs/controller.md, "Pins are confirmed"): each pinned
    /// node and the pods bound there are read live; if that changed a node as placement sees it, the pass is taken
    /// again, in full, on the refreshed view (nothing of the first decision was written); [`PinConfirmation`] says
    /// which nodes each round reads.
    /// The pass taken again decides over everything without what the first one remembered; its own memory is not
    /// kept either (the caller forgets when the actions come back from a retake: `true`).
    async fn confirm_pins(&self, mut actions: Vec<Action>, now: Time) -> Result<(Vec<Action>, bool), WriteError> {
        let mut retaken = false;
        let mut confirmation = PinConfirmation::default();
        loop {
            let nodes = confirmation.next_round(&actions);
            if nodes.is_empty() {
                break;
            }
            let mut changed = Vec::new();
            for node in &nodes {
                if self.writer.read_node_live(node).await? {
                    changed.push(node.clone());
                }
            }
            if changed.is_empty() {
                break;
            }
            tracing::info!(?changed, "a pin's node changed behind the watch; reconciling again");
            self.metrics.pins_rechecked();
            let view = self.caches.view.read().map_err(|source| WriteError::View {
                action: "ConfirmPin",
                object: ObjectRef::new("", ""),
                source,
            })?;
            actions = controller::reconcile(&view, now);
            retaken = true;
        }
        Ok((actions, retaken))
    }

    /// The next pass covers everything and tries every waiter.
    fn start_over(&mut self) {
        self.full = true;
        self.waiting.forget();
    }

    /// One pass: decide on the view, write, and apply the error policy.
    pub async fn pass(&mut self) -> PassOutcome {
        let started = Instant::now();
        let now = Time::now();
        let changes = self.caches.take_changes();
        let actions: Vec<Action> = {
            let view = match self.caches.view.read() {
                Ok(view) => view,
                Err(poisoned) => return PassOutcome::Broken(poisoned),
            };
            let changes = (!self.full).then_some(&changes);
            controller::reconcile_remembering(&view, now, changes, &Variant::SHIPPED, &mut self.waiting)
        };
        let actions = match self.confirm_pins(actions, now).await {
            Ok((actions, retaken)) => {
                if retaken {
                    self.waiting.forget();
                }
                actions
            }
            Err(WriteError::View { source, .. }) => return PassOutcome::Broken(source),
            Err(error) => {
                self.start_over();
                self.failures = self.failures.saturating_add(1);
                return PassOutcome::Failed { error, retry_after: backoff(self.failures) };
            }
        };
        let result = self.writer.write_all(&actions).await;
        self.metrics.reconciled(started.elapsed());
        match self.caches.view.read() {
            Ok(view) => self.metrics.observe_view(&view, now),
            Err(poisoned) => return PassOutcome::Broken(poisoned),
        }
        match result {
            Ok(written) if written == actions.len() => {
                self.full = false;
                self.failures = 0;
                self.waiting.landed();
                PassOutcome::Done { written }
            }
            Ok(written) => {
                self.start_over();
                PassOutcome::NotLeading { written }
            }
            Err(WriteError::View { source, .. }) => PassOutcome::Broken(source),
            Err(error) => {
                self.start_over();
                self.failures = self.failures.saturating_add(1);
                if let WriteError::Stale { kind, object, .. } = &error {
                    if let Err(refresh) = self.writer.refresh(*kind, object).await {
                        let retry_after = backoff(self.failures);
                        tracing::warn!(%object, error = %refresh, "failed to refresh a stale object");
                        return PassOutcome::Failed { error, retry_after };
                    }
                    return PassOutcome::Stale { error, retry_after: STALE_RETRY_DELAY };
                }
                PassOutcome::Failed { error, retry_after: backoff(self.failures) }
            }
        }
    }
}

/// FAILURE_BACKOFF_MIN · 2^(failures−1), at most FAILURE_BACKOFF_MAX.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FAILURE_BACKOFF_MIN.saturating_mul(1 << doublings).min(FAILURE_BACKOFF_MAX)
}
