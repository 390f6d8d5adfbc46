//! The GPU controller in the loop: watch deliveries into its cache, passes when its queue holds work, its writes
//! through the API server, and what each accepted write sets going (the scheduler for a pod it ungated).

use crate::log::{ClusterNamed, Named};
use gpuclaim_engine::controller::{Action, ObjectRef, PinConfirmation};
use gpuclaim_engine::model::Time;

use crate::apiserver::watch::{Change, Object, newer};
use crate::apiserver::{ApiError, Kind};

use super::{Event, World, WorldError};
use crate::kernel::Millis;

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
        let mut actions = self.controller.reconcile(now);
        if !self.controller.variant.unconfirmed_pins {
            actions = self.confirm_pins(actions, now)?;
        }
        // A refused write's retry delay: client-go's rate limiter for that object (5 ms·2^k per object, a shared
        // 10/s bucket), so one object that keeps conflicting does not hold the others back.
        let mut refused: Option<Millis> = None;
        for action in &actions {
            let written = if self.injected_conflict() && !matches!(action, Action::Event { .. }) {
                let (kind, object) = target(action);
                Err(ApiError::Conflict { kind, name: object.name.to_string() })
            } else {
                self.api.write(action, now, &self.controller.user)
            };
            match written {
                Ok(changes) => {
                    // Naming the object costs a string per write: only worth it when something backs off.
                    if self.controller_retries.backing_off() {
                        self.controller_retries.forget(&action_object(action));
                    }
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
                    refused = Some(self.controller_retries.when(&object, self.now()));
                    break;
                }
            }
        }
        if refused.is_none() {
            self.controller.passed();
        }
        // What its own writes queued is served when their echo would arrive, one lag later; a refused write
        // requeues after its object's backoff instead.
        if self.controller.is_dirty() {
            let delay = refused.unwrap_or(self.timing.watch_lag);
            self.wake_controller_at(self.now() + delay)?;
        }
        Ok(())
    }

    /// Confirms a pass's pins before anything is written: kube-scheduler binds pods the controller does not place
    /// (migration targets, raw-device VMs), and a cache one watch lag behind would pin a launcher onto units one of
    /// them has just taken. So the controller reads each pin's node and the pods bound there from the API server
    /// (a GET and a LIST, as fresh as the store), takes whatever is newer than its cache into the cache, and if
    /// that changed the node as placement sees it, takes the pass again on what it now knows ([`PinConfirmation`]:
    /// a node is read once per wake, a bounded number of rounds).
    fn confirm_pins(&mut self, mut actions: Vec<Action>, now: Time) -> Result<Vec<Action>, WorldError> {
        let mut confirmation = PinConfirmation::default();
        loop {
            let nodes = confirmation.next_round(&actions);
            if nodes.is_empty() {
                break;
            }
            let mut refreshed = 0;
            for node in &nodes {
                let fresher = self.live_read(node);
                if fresher.is_empty() {
                    continue;
                }
                // Newer objects that leave the node as placement sees it (a pod gone Running) change no decision.
                let before = self.controller.cache().node_standing(node);
                let taken = fresher.len();
                for change in fresher {
                    self.controller.refresh(change);
                }
                if self.controller.cache().node_standing(node) != before {
                    let fields: &[(&str, &str)] = &[("objects", &taken.to_string())];
                    self.record("gpu-controller", &format_args!("Node {node}"), "CacheRefreshed", fields)?;
                    refreshed += 1;
                }
            }
            if refreshed == 0 {
                break;
            }
            self.stats.pins_rechecked += 1;
            self.controller.retake();
            actions = self.controller.reconcile(now);
        }
        Ok(actions)
    }

    /// What a GET of `node` and a LIST of the pods bound there return that the controller's cache has older or
    /// not at all. Pods the list no longer shows are left to the watch: keeping them only makes the controller
    /// more careful until it catches up.
    fn live_read(&self, node: &str) -> Vec<Change> {
        let (store, cache) = (self.api.store(), self.controller.cache());
        let mut fresher = Vec::new();
        if let Some(live) = store.node(node)
            && newer(cache.node(node).map(|n| n.resource_version.as_str()), &live.resource_version)
        {
            fresher.push(Change::Upsert(Object::Node(live.clone())));
        }
        for pod in store.pods_on_node(node).filter(|pod| pod.node_name.as_deref() == Some(node)) {
            if newer(cache.pod(&pod.namespace, &pod.name).map(|p| p.resource_version.as_str()), &pod.resource_version) {
                fresher.push(Change::Upsert(Object::Pod(pod.clone())));
            }
        }
        fresher
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

/// The object an action writes, and its kind.
fn target(action: &Action) -> (Kind, ObjectRef) {
    match action {
        Action::CreateClaim { claim, .. } | Action::UpdateClaim { claim, .. } | Action::DeleteClaim { claim, .. } => {
            (Kind::Claim, claim.clone())
        }
        Action::PinAndUngate { pod, .. }
        | Action::Ungate { pod, .. }
        | Action::Pin { pod, .. }
        | Action::SetPodWaiting { pod, .. } => (Kind::Pod, pod.clone()),
        Action::OpenUsage { usage } => (Kind::Usage, ObjectRef::new(&usage.namespace, &usage.name)),
        Action::CloseUsage { usage, .. } => (Kind::Usage, usage.clone()),
        Action::PublishClass { class, .. } => (Kind::Class, ObjectRef::new("", class)),
        Action::Event { object, .. } => (Kind::Pod, object.clone()),
    }
}

/// How the log names the object an action writes (`GPUClaim ns/name`).
fn action_object(action: &Action) -> String {
    let (kind, object) = target(action);
    match kind {
        Kind::Class => format!("{} {}", kind.name(), object.name),
        _ => format!("{} {object}", kind.name()),
    }
}
