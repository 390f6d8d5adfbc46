//! The GPU controller in the loop: watch deliveries into its cache, its loop run when its queue wakes or when it
//! asked to run again, its writes through the API server, and what each accepted write sets going (the scheduler
//! for a pod it ungated).

use crate::log::{ClusterNamed, Named};
use gpuclaim_engine::controller::Action;
use gpuclaim_engine::controller::runtime::{Change, ObjectKey, Outcome, target};
use gpuclaim_engine::model::View;

use super::{Cluster, GpuController};
use crate::apiserver::ApiError;
use crate::users::User;

use crate::kernel::Millis;
use crate::world::{Event, World, WorldError};

impl World {
    /// Watch events reach the controller's cache; work wakes it.
    pub(crate) fn deliver_watch(&mut self) -> Result<(), WorldError> {
        let now = self.now();
        let mut woke = false;
        let controller = self.controller.as_deref_mut().expect("the controller is in the world between its wakes");
        for change in self.api.watch().deliver(now) {
            woke |= controller.observe(change);
        }
        if woke {
            self.wake_controller_at(now)?;
        }
        Ok(())
    }

    /// The GPU controller's process (not while it runs: then it holds the world).
    pub(crate) fn controller(&self) -> &GpuController {
        self.controller.as_deref().expect("the controller is in the world between its wakes")
    }

    pub(crate) fn controller_mut(&mut self) -> &mut GpuController {
        self.controller.as_deref_mut().expect("the controller is in the world between its wakes")
    }

    /// Schedules a wake at `at` unless one is due by then.
    pub(crate) fn wake_controller_at(&mut self, at: Millis) -> Result<(), WorldError> {
        // A wake due by then runs the loop, which asks again for what it still needs.
        if self.wakes.first().is_some_and(|pending| *pending <= at) {
            return Ok(());
        }
        self.wakes.insert(at);
        self.schedule_at(at, Event::ControllerWake)
    }

    /// The controller's loop runs: passes, confirmations and writes until it has nothing to do now; it runs again
    /// when it asked to, or when the watch wakes its queue. Without a leader nothing reconciles; the queue keeps what
    /// arrives for the next leader's first pass.
    pub(crate) fn controller_wake(&mut self) -> Result<(), WorldError> {
        self.wakes.remove(&self.now());
        if !self.has_leader() {
            return Ok(());
        }
        let now = self.time();
        // The controller is taken out of the world while it runs, so that the world can be its cluster.
        let mut controller = self.controller.take().expect("the controller runs one wake at a time");
        let before = controller.stats();
        let woken = controller.wake(now, self);
        let after = controller.stats();
        self.controller = Some(controller);
        self.stats.controller_passes += after.passes - before.passes;
        self.stats.pins_rechecked += after.pins_rechecked - before.pins_rechecked;
        if let Some(at) = woken? {
            self.wake_controller_at(self.virtual_time(at))?;
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
                self.record(
                    "gpu-controller",
                    &Named("GPUClaim", &claim.namespace, &claim.name),
                    what,
                    &[("node", &node)],
                )
            }
            Action::PinAndUngate { pod, node, .. } => {
                if let Some(created) = self.api.store().pod(&pod.namespace, &pod.name).map(|p| p.created) {
                    let waited = (self.time().as_millisecond() - created.as_millisecond()).max(0);
                    self.metrics.ungated(Millis(waited as u64));
                }
                self.record(
                    "gpu-controller",
                    &Named("Pod", &pod.namespace, &pod.name),
                    "PinnedAndUngated",
                    &[("node", node)],
                )?;
                let event = Event::Schedule { namespace: pod.namespace.clone(), pod: pod.name.clone() };
                self.schedule_at(self.now(), event)
            }
            Action::Ungate { pod, .. } => {
                self.record("gpu-controller", &Named("Pod", &pod.namespace, &pod.name), "Ungated", &[])?;
                let event = Event::Schedule { namespace: pod.namespace.clone(), pod: pod.name.clone() };
                self.schedule_at(self.now(), event)
            }
            Action::Pin { pod, node, .. } => {
                self.record("gpu-controller", &Named("Pod", &pod.namespace, &pod.name), "Pinned", &[("node", node)])
            }
            Action::SetPodWaiting { pod, waiting, .. } => {
                self.metrics.count(&[crate::metrics::WAITING_PREFIX, &waiting.reason].concat());
                let fields: &[(&str, &str)] = &[("reason", &waiting.reason)];
                self.record("gpu-controller", &Named("Pod", &pod.namespace, &pod.name), "Waiting", fields)
            }
            Action::OpenUsage { usage } => {
                let object = Named("GPUUsage", &usage.namespace, &usage.name);
                self.record("gpu-controller", &object, "Opened", &[("node", &usage.node)])
            }
            Action::CloseUsage { usage, .. } => {
                self.record("gpu-controller", &Named("GPUUsage", &usage.namespace, &usage.name), "Closed", &[])
            }
            Action::PublishClass { class, published, .. } => {
                // A publish follows nearly every pass: its figure is formatted on the stack.
                let mut free = itoa::Buffer::new();
                let fields: &[(&str, &str)] = &[("free", free.format(published.free_units))];
                self.record("gpu-controller", &ClusterNamed("GPUClass", class), "Published", fields)
            }
            Action::Event { .. } => Ok(()),
        }
    }
}

/// The world as the controller's cluster: the API server answers its reads and writes as it would the live
/// controller's; an accepted write is logged and sets what follows it going.
impl Cluster for World {
    type Error = WorldError;

    fn write(&mut self, action: &Action, user: &User) -> Result<Outcome, WorldError> {
        let written = if self.injected_conflict() && !matches!(action, Action::Event { .. }) {
            let object = target(action);
            Err(ApiError::Conflict { kind: object.kind, name: object.name.to_string() })
        } else {
            self.api.write(action, self.time(), user)
        };
        match written {
            Ok(changes) => {
                self.after_write(action)?;
                Ok(Outcome::Written(changes))
            }
            Err(error) => {
                let object = target(action).to_string();
                self.refused("gpu-controller", &object, "WriteRefused", error.reason(), error.to_string())?;
                Ok(error.outcome())
            }
        }
    }

    fn read_node(&mut self, node: &str, cache: &View) -> Vec<Change> {
        self.api.read_node(node, cache)
    }

    fn read(&mut self, object: &ObjectKey) -> Option<Change> {
        self.api.get(object)
    }

    fn node_refreshed(&mut self, node: &str, objects: usize) -> Result<(), WorldError> {
        let fields: &[(&str, &str)] = &[("objects", &objects.to_string())];
        self.record("gpu-controller", &format_args!("Node {node}"), "CacheRefreshed", fields)
    }
}
