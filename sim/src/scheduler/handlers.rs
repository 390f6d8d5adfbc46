//! The scheduler's handlers of the world's events: a pod to schedule (bound where it fits, or where the GPU
//! controller pinned it; else parked), the leftover flush, a change that may let parked pods fit, a pod gone.

use std::collections::BTreeSet;

use gpuclaim_engine::model::{Name, Node, Pod, View};
use gpuclaim_engine::scheduling::is_pinned_to;

use super::filters::{Misfit, Requested, schedule, schedule_pinned};
use super::selector;
use crate::log::Named;
use crate::world::{Event, World, WorldError};

impl World {
    /// kube-scheduler: a gated pod waits; an ungated one is bound where it fits, or parked.
    pub(crate) fn schedule_pod(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(pod) = self.api.store().pod(namespace, name) else { return Ok(()) };
        if pod.node_name.is_some() || pod.phase.is_terminal() || self.scheduler.queue.is_parked(namespace, name) {
            return Ok(());
        }
        let object = Named("Pod", namespace, name);
        if !pod.scheduling_gates.is_empty() {
            return self.record("scheduler", &object, "SchedulingGated", &[]);
        }
        let empty = Requested::default();
        let store = self.api.store();
        let total = store.node_count() as u32;
        // What the filters reading other objects say: the VM's local volume bound to one node, the pods the
        // anti-affinity keeps it off.
        let volume_node =
            pod.owner_vmi.as_ref().and_then(|vmi| self.volume_node(namespace, &vmi.name)).map(str::to_owned);
        let avoided = avoided_nodes(store, pod);
        let placed = |node: &str| {
            if volume_node.as_deref().is_some_and(|bound| bound != node) {
                return Some(Misfit::VolumeNodeAffinity);
            }
            avoided.contains(node).then_some(Misfit::AntiAffinity)
        };
        let verdict = match pod.required_terms().and_then(is_pinned_to) {
            // Pinned by the GPU controller: only that node can pass node affinity.
            Some(pinned) => {
                let node = store.node(pinned).map(|n| (n, self.scheduler.requested.get(pinned).unwrap_or(&empty)));
                schedule_pinned(pod, node, placed, total, self.scheduler.node_verdicts.resources()).map(str::to_owned)
            }
            None => {
                let nodes: Vec<&Node> = store.nodes().collect();
                self.scheduler.requested.sync(&nodes, self.api.nodes_written());
                let requested = &self.scheduler.requested;
                let requested_on = |position: usize, _: &str| requested.at(position);
                let rng = self.streams.of("scheduler");
                let verdicts = (&mut self.scheduler.node_verdicts, self.api.nodes_written());
                let (verdict, sweep) =
                    schedule(pod, &nodes, requested_on, self.scheduler.next_start_node, placed, verdicts, rng);
                self.scheduler.next_start_node = sweep.next_start(nodes.len());
                verdict.map(str::to_owned)
            }
        };
        match verdict {
            Ok(node) => self.bind_pod(namespace, name, &node, "scheduler"),
            Err(unschedulable) => {
                self.record("scheduler", &object, "Unschedulable", &[("message", &unschedulable.message)])?;
                match self.scheduler.queue.park(namespace, name, self.now()) {
                    Some(flush) => self.schedule_at(flush, Event::SchedulerFlush),
                    None => Ok(()),
                }
            }
        }
    }

    /// Binds the pod `namespace`/`name` to `node` as `binder` (kube-scheduler, or a served client's `pods/binding`):
    /// its requests counted there, `spec.nodeName` written, and the kubelet starts it after its start latency.
    pub(crate) fn bind_pod(&mut self, namespace: &str, name: &str, node: &str, binder: &str) -> Result<(), WorldError> {
        let Some(pod) = self.api.store().pod(namespace, name) else { return Ok(()) };
        let resources = self.scheduler.node_verdicts.resources_mut();
        self.scheduler.requested.entry(node).add(pod, resources);
        self.api.update_pod_status(namespace, name, |pod| pod.node_name = Some(node.into())).expect("read above");
        self.scheduler.queue.forget(namespace, name);
        self.migration_target_bound(namespace, name);
        self.record(binder, &Named("Pod", namespace, name), "Bound", &[("node", node)])?;
        let delay = self.pod_start_delay();
        let event = Event::PodStarted { namespace: namespace.into(), pod: name.into() };
        self.schedule_at(self.now() + delay, event)
    }

    /// The leftover flush: pods parked five minutes are tried again.
    pub(crate) fn flush_unschedulable(&mut self) -> Result<(), WorldError> {
        let (due, next) = self.scheduler.queue.flush(self.now());
        for (namespace, pod) in due {
            self.schedule_at(self.now(), Event::Schedule { namespace: namespace.into(), pod: pod.into() })?;
        }
        match next {
            Some(next) => self.schedule_at(next, Event::SchedulerFlush),
            None => Ok(()),
        }
    }

    /// A change that may let parked pods fit (a pod gone, a node added or changed): they go back to the queue.
    pub(crate) fn scheduler_cluster_changed(&mut self) -> Result<(), WorldError> {
        for (namespace, pod, at) in self.scheduler.queue.move_all(self.now()) {
            self.schedule_at(at, Event::Schedule { namespace: namespace.into(), pod: pod.into() })?;
        }
        Ok(())
    }

    /// A pod leaves the scheduler's count (deleted): what it requested is free again.
    pub(crate) fn scheduler_forget(&mut self, namespace: &str, name: &str) {
        self.scheduler.queue.forget(namespace, name);
        let Some(pod) = self.api.store().pod(namespace, name) else { return };
        if let (Some(node), false) = (pod.node_name.as_ref(), pod.phase.is_terminal()) {
            let resources = self.scheduler.node_verdicts.resources();
            self.scheduler.requested.get_mut(node.as_str()).expect("a bound pod is counted").remove(pod, resources);
        }
    }
}

/// The nodes a pod's required anti-affinity keeps it off (topology `kubernetes.io/hostname`). The only such terms
/// the twin's pods carry are KubeVirt's own, selecting the pods of the pod's VMI, so only those are looked at.
fn avoided_nodes(store: &View, pod: &Pod) -> BTreeSet<String> {
    let terms =
        pod.pod_anti_affinity.as_ref().and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    let (Some(terms), Some(vmi)) = (terms, pod.owner_vmi.as_ref()) else { return BTreeSet::new() };
    let mut avoided = BTreeSet::new();
    for term in terms.iter().filter(|term| term.topology_key == "kubernetes.io/hostname") {
        let selector = term.label_selector.clone().unwrap_or_default();
        for other in store.vmi_pods(&pod.namespace, &vmi.name) {
            let running_there =
                other.node_name.as_ref().filter(|_| !other.phase.is_terminal() && other.name != pod.name);
            if let Some(node) = running_there.filter(|_| selector::matches(&selector, &other.labels)) {
                avoided.insert(node.to_string());
            }
        }
    }
    avoided
}
