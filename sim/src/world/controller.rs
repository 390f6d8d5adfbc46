//! The GPU controller in the loop: watch deliveries into its cache, passes when its queue holds work, its writes
//! through the API server, and what each accepted write sets going (the scheduler for a pod it ungated).

use gpuclaim_engine::controller::Action;

use super::{Event, World, WorldError};
use crate::kernel::Millis;
use crate::kubevirt::start::{ITEM_BACKOFF_BASE, ITEM_BACKOFF_MAX};

impl World {
    /// Watch events reach the controller's cache; work wakes it.
    pub(super) fn deliver_watch(&mut self) -> Result<(), WorldError> {
        let now = self.now();
        for change in self.api.watch().deliver(now) {
            self.controller.observe(change);
        }
        if self.controller.is_dirty() {
            self.wake_controller_at(now)?;
        }
        Ok(())
    }

    /// Schedules a pass at `at` unless one is due by then.
    pub(super) fn wake_controller_at(&mut self, at: Millis) -> Result<(), WorldError> {
        if self.wake_at.is_some_and(|pending| pending <= at) {
            return Ok(());
        }
        self.wake_at = Some(at);
        self.schedule_at(at, Event::ControllerWake)
    }

    /// One pass over the cache; its writes go through the API server in order until one is refused.
    pub(super) fn controller_wake(&mut self) -> Result<(), WorldError> {
        if self.wake_at == Some(self.now()) {
            self.wake_at = None;
        }
        // Without a leader nothing reconciles; the queue keeps what arrives for the next leader's resync.
        if !self.controller.is_dirty() || !self.has_leader() {
            return Ok(());
        }
        self.stats.controller_passes += 1;
        let now = self.time();
        let actions = self.controller.reconcile(now);
        let mut refused = false;
        for action in &actions {
            match self.api.write(action, now, &self.controller.user.clone()) {
                Ok(changes) => {
                    // Written through: the next pass sees its own writes at once.
                    for change in changes {
                        self.controller.written(change);
                    }
                    self.after_write(action)?;
                }
                Err(error) => {
                    let object = action_object(action);
                    self.refused("gpu-controller", &object, "WriteRefused", error.reason(), error.to_string())?;
                    self.controller.requeue(action);
                    refused = true;
                    break;
                }
            }
        }
        // What its own writes queued is served when their echo would arrive, one lag later; a refused write
        // requeues with controller-runtime's exponential backoff instead.
        self.controller_failures = if refused { self.controller_failures.saturating_add(1) } else { 0 };
        if self.controller.is_dirty() {
            let delay = if refused { requeue_backoff(self.controller_failures) } else { self.timing.watch_lag };
            self.wake_controller_at(self.now() + delay)?;
        }
        Ok(())
    }

    fn after_write(&mut self, action: &Action) -> Result<(), WorldError> {
        match action {
            Action::CreateClaim { claim, .. }
            | Action::UpdateClaim { claim, .. }
            | Action::DeleteClaim { claim, .. } => {
                let what = match action {
                    Action::CreateClaim { .. } => "Created",
                    Action::DeleteClaim { .. } => "Deleted",
                    _ => "Updated",
                };
                let node = self
                    .api
                    .store()
                    .claim(&claim.namespace, &claim.name)
                    .and_then(|c| c.node.clone())
                    .unwrap_or_default();
                self.record("gpu-controller", &format!("GPUClaim {claim}"), what, vec![("node", node)])
            }
            Action::PinAndUngate { pod, node, .. } => {
                self.record("gpu-controller", &format!("Pod {pod}"), "PinnedAndUngated", vec![("node", node.clone())])?;
                let event = Event::Schedule { namespace: pod.namespace.clone(), pod: pod.name.clone() };
                self.schedule_at(self.now(), event)
            }
            Action::SetPodWaiting { pod, waiting, .. } => {
                let fields = vec![("reason", waiting.reason.clone())];
                self.record("gpu-controller", &format!("Pod {pod}"), "Waiting", fields)
            }
            Action::OpenUsage { usage } => {
                let object = format!("GPUUsage {}/{}", usage.namespace, usage.name);
                self.record("gpu-controller", &object, "Opened", vec![("node", usage.node.clone())])
            }
            Action::CloseUsage { usage, .. } => {
                self.record("gpu-controller", &format!("GPUUsage {usage}"), "Closed", vec![])
            }
            Action::PublishClass { class, published, .. } => {
                let fields = vec![("free", published.free_units.to_string())];
                self.record("gpu-controller", &format!("GPUClass {class}"), "Published", fields)
            }
            Action::Event { .. } => Ok(()),
        }
    }
}

/// controller-runtime's per-item backoff (5 ms · 2^k, at most 1000 s) after `failures` refused passes in a row.
fn requeue_backoff(failures: u32) -> Millis {
    let exponent = failures.saturating_sub(1).min(30);
    Millis((ITEM_BACKOFF_BASE.0 << exponent).min(ITEM_BACKOFF_MAX.0))
}

fn action_object(action: &Action) -> String {
    match action {
        Action::CreateClaim { claim, .. } | Action::UpdateClaim { claim, .. } | Action::DeleteClaim { claim, .. } => {
            format!("GPUClaim {claim}")
        }
        Action::PinAndUngate { pod, .. } | Action::SetPodWaiting { pod, .. } => format!("Pod {pod}"),
        Action::OpenUsage { usage } => format!("GPUUsage {}/{}", usage.namespace, usage.name),
        Action::CloseUsage { usage, .. } => format!("GPUUsage {usage}"),
        Action::PublishClass { class, .. } => format!("GPUClass {class}"),
        Action::Event { object, .. } => object.to_string(),
    }
}
