//! The reconciler: the engine's controller runtime (`engine::controller::runtime`) driven live. The caches fill the
//! view and the work queue from kube-runtime's watchers; this file hands the runtime tokio's time and the lease, and
//! does what it asks: the writer's API calls (writes, a pin's node read live, a stale object read again), then sleeps
//! until the runtime's next wake, a watch event that needs a pass, or a change of leadership. When a pass runs, over
//! what, what is confirmed and how a refused write is retried are the runtime's (docs/controller.md, "The loop"), the
//! same loop the twin drives in virtual time. A poisoned view (shared.rs) ends the reconciler, which health.rs
//! reports so the kubelet restarts the replica.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuclaim_engine::controller::runtime::{ObjectKey, Outcome, POLLS_PER_WAKE_MAX, Poll, Runtime, target};
use gpuclaim_engine::model::Time;
use gpuclaim_engine::variant::Variant;
use tokio::sync::watch;

use crate::cache::Caches;
use crate::metrics::Metrics;
use crate::shared::ViewPoisoned;
use crate::writer::{WriteError, Writer, action_name};

/// What one turn of the loop did, until it went idle.
#[derive(Debug, Default)]
pub struct Turn {
    /// The writes the runtime handed out, in order, and how each went.
    pub attempts: Vec<Attempt>,
    /// The write or read that was refused (the pass stopped there), if one was.
    pub refused: Option<WriteError>,
    /// When the runtime asked to run again, counted from the turn's last poll; `None`: when a watch event wakes it.
    pub retry_after: Option<Duration>,
}

impl Turn {
    /// How many writes went through.
    pub fn written(&self) -> usize {
        self.attempts.iter().filter(|attempt| attempt.outcome == "ok").count()
    }
}

/// One write and how it went: `ok`, or the `gpuclaim_writes_total` metric's word for its refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub action: &'static str,
    pub object: ObjectKey,
    pub outcome: &'static str,
}

pub struct Reconciler {
    caches: Arc<Caches>,
    writer: Writer,
    metrics: Arc<Metrics>,
    leading: watch::Receiver<bool>,
    runtime: Runtime,
}

impl Reconciler {
    pub fn new(caches: Arc<Caches>, writer: Writer, metrics: Arc<Metrics>, leading: watch::Receiver<bool>) -> Self {
        Reconciler { caches, writer, metrics, leading, runtime: Runtime::new(Variant::SHIPPED) }
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
        loop {
            let turn = match self.turn().await {
                Ok(turn) => turn,
                Err(error) => return tracing::error!(%error, "the reconciler stops"),
            };
            if turn.written() > 0 {
                tracing::info!(written = turn.written(), "reconciled");
            }
            if let Some(error) = &turn.refused {
                tracing::warn!(%error, retry_after = ?turn.retry_after, "a write was refused; retrying");
            }
            let sleep = turn.retry_after.map_or(Duration::MAX, |after| after.max(Duration::from_millis(1)));
            tokio::select! {
                () = self.caches.changed() => {}
                () = tokio::time::sleep(sleep.min(Duration::from_secs(86_400))) => {}
                _ = self.leading.changed() => {}
                () = &mut shutdown => return,
            }
        }
    }

    /// Runs the loop until it has nothing to do now: every pass due, with its confirmations, writes and reads.
    pub async fn turn(&mut self) -> Result<Turn, ViewPoisoned> {
        let started = Instant::now();
        let leading = *self.leading.borrow();
        if leading != self.runtime.is_leading() {
            tracing::info!(leading, "leadership moved");
        }
        self.runtime.set_leading(leading, Time::now());
        let before = self.runtime.stats();
        let mut turn = Turn::default();
        for _ in 0..POLLS_PER_WAKE_MAX {
            let now = Time::now();
            let poll = {
                let view = self.caches.view.read()?;
                self.runtime.poll(&view, &mut self.caches.queue.lock(), now)
            };
            match poll {
                Poll::Idle { wake_at } => {
                    turn.retry_after = wake_at.map(|at| Duration::try_from(at.duration_since(now)).unwrap_or_default());
                    break;
                }
                Poll::Confirm(nodes) => {
                    for node in &nodes {
                        let live = match self.writer.read_node_live(node).await {
                            Ok(live) => Some(live),
                            Err(error) => {
                                turn.refused = Some(error);
                                None
                            }
                        };
                        let failed = live.is_none();
                        let mut view = self.caches.view.write()?;
                        let moved =
                            self.runtime.read_live(&mut view, &mut self.caches.queue.lock(), node, live, Time::now());
                        if moved {
                            tracing::info!(node, "a pin's node changed behind the watch; reconciling again");
                        }
                        if failed {
                            break;
                        }
                    }
                }
                Poll::Refresh(object) => {
                    let live = self.writer.read_again(&object).await.unwrap_or_else(|error| {
                        tracing::warn!(%object, %error, "failed to read a stale object again");
                        None
                    });
                    let mut view = self.caches.view.write()?;
                    self.runtime.refreshed(&mut view, &mut self.caches.queue.lock(), live);
                }
                Poll::Write(action) => {
                    let written = self.writer.write(&action).await;
                    let word = written.as_ref().map_or_else(WriteError::outcome, |_| "ok");
                    turn.attempts.push(Attempt {
                        action: action_name(&action),
                        object: target(&action),
                        outcome: word,
                    });
                    let outcome = match written {
                        Ok(written) => Outcome::Written(written),
                        Err(WriteError::View { source, .. }) => return Err(source),
                        Err(WriteError::NotLeading { .. }) => Outcome::NotSent,
                        Err(error) => {
                            let outcome = if matches!(error, WriteError::Stale { .. }) {
                                Outcome::Stale
                            } else {
                                Outcome::Failed
                            };
                            turn.refused = Some(error);
                            outcome
                        }
                    };
                    let mut view = self.caches.view.write()?;
                    self.runtime.wrote(&mut view, &mut self.caches.queue.lock(), &action, outcome, Time::now());
                }
            }
        }
        let after = self.runtime.stats();
        if after.passes > before.passes {
            self.metrics.reconciled(started.elapsed());
        }
        if after.passes > before.passes || !leading {
            // The gauges of the view its passes decided on, while it leads; a standby exports none.
            let view = self.caches.view.read()?;
            self.metrics.observe_loop(self.runtime.figures(), leading.then_some(&*view));
        }
        for _ in before.pins_rechecked..after.pins_rechecked {
            self.metrics.pins_rechecked();
        }
        Ok(turn)
    }
}
