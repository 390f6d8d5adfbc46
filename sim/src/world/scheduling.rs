//! The scheduler and the kubelets: binding pods where they fit (or where the GPU controller pinned them), the
//! queue of pods that did not fit, pods starting and ending, nodes joining and being cordoned.

use crate::log::Named;
use std::collections::BTreeSet;

use gpuclaim_engine::keys::kubevirt;
use gpuclaim_engine::model::{Name, Node, Pod, PodPhase, View, VmiPhase};
use gpuclaim_engine::scheduling::is_pinned_to;
use rand::RngExt;

use super::{Event, World, WorldError};
use crate::scheduler::{Misfit, Requested, schedule, schedule_pinned};

impl World {
    /// kube-scheduler: a gated pod waits; an ungated one is bound where it fits, or parked.
    pub(super) fn schedule_pod(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(pod) = self.api.store().pod(namespace, name) else { return Ok(()) };
        if pod.node_name.is_some() || pod.phase.is_terminal() || self.scheduling_queue.is_parked(namespace, name) {
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
        let volume_node = pod
            .owner_vmi
            .as_ref()
            .and_then(|vmi| self.vms.get(namespace, &vmi.name))
            .and_then(|vm| vm.volume_node.clone());
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
                let node = store.node(pinned).map(|n| (n, self.requested.get(pinned).unwrap_or(&empty)));
                schedule_pinned(pod, node, placed, total, self.node_verdicts.resources()).map(str::to_owned)
            }
            None => {
                let nodes: Vec<&Node> = store.nodes().collect();
                self.requested.sync(&nodes, self.api.nodes_written());
                let requested = &self.requested;
                let requested_on = |position: usize, _: &str| requested.at(position);
                let rng = self.streams.of("scheduler");
                let verdicts = (&mut self.node_verdicts, self.api.nodes_written());
                let (verdict, sweep) = schedule(pod, &nodes, requested_on, self.next_start_node, placed, verdicts, rng);
                self.next_start_node = sweep.next_start(nodes.len());
                verdict.map(str::to_owned)
            }
        };
        match verdict {
            Ok(node) => {
                let resources = self.node_verdicts.resources_mut();
                self.requested.entry(&node).add(pod, resources);
                self.api
                    .update_pod_status(namespace, name, |pod| pod.node_name = Some(node.as_str().into()))
                    .expect("read above");
                self.scheduling_queue.forget(namespace, name);
                if let Some(uid) = migration_of(self.api.store(), namespace, name) {
                    self.migration_target_bound(&uid);
                }
                self.record("scheduler", &object, "Bound", &[("node", &node)])?;
                let delay = self.pod_start_delay();
                let event = Event::PodStarted { namespace: namespace.into(), pod: name.into() };
                self.schedule_at(self.now() + delay, event)
            }
            Err(unschedulable) => {
                self.record("scheduler", &object, "Unschedulable", &[("message", &unschedulable.message)])?;
                match self.scheduling_queue.park(namespace, name, self.now()) {
                    Some(flush) => self.schedule_at(flush, Event::SchedulerFlush),
                    None => Ok(()),
                }
            }
        }
    }

    /// How long the kubelet takes to start a pod bound to its node (image, sandbox, containers up).
    pub(super) fn pod_start_delay(&mut self) -> crate::kernel::Millis {
        let (low, high) = self.timing.pod_start;
        crate::kernel::Millis(self.streams.of("kubelet").random_range(low.0..=high.0))
    }

    /// The leftover flush: pods parked five minutes are tried again.
    pub(super) fn flush_unschedulable(&mut self) -> Result<(), WorldError> {
        let (due, next) = self.scheduling_queue.flush(self.now());
        for (namespace, pod) in due {
            self.schedule_at(self.now(), Event::Schedule { namespace: namespace.into(), pod: pod.into() })?;
        }
        match next {
            Some(next) => self.schedule_at(next, Event::SchedulerFlush),
            None => Ok(()),
        }
    }

    /// A change that may let parked pods fit (a pod gone, a node added or changed): they go back to the queue.
    pub(super) fn scheduler_cluster_changed(&mut self) -> Result<(), WorldError> {
        for (namespace, pod, at) in self.scheduling_queue.move_all(self.now()) {
            self.schedule_at(at, Event::Schedule { namespace: namespace.into(), pod: pod.into() })?;
        }
        Ok(())
    }

    /// A pod leaves the scheduler's count (deleted): what it requested is free again.
    pub(super) fn scheduler_forget(&mut self, namespace: &str, name: &str) {
        self.scheduling_queue.forget(namespace, name);
        let Some(pod) = self.api.store().pod(namespace, name) else { return };
        if let (Some(node), false) = (pod.node_name.as_ref(), pod.phase.is_terminal()) {
            let resources = self.node_verdicts.resources();
            self.requested.get_mut(node.as_str()).expect("a bound pod is counted").remove(pod, resources);
        }
    }

    /// The kubelet started the launcher; the VMI is Scheduled on its node.
    pub(super) fn pod_started(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(pod) = self.api.store().pod(namespace, name) else { return Ok(()) };
        if pod.phase != PodPhase::Pending {
            return Ok(());
        }
        let node = pod.node_name.clone().unwrap_or_default();
        let vmi_name = pod.owner_vmi.as_ref().map(|v| v.name.clone()).unwrap_or_default();
        self.api.update_pod_status(namespace, name, |pod| pod.phase = PodPhase::Running).expect("read above");
        self.record("kubelet", &Named("Pod", namespace, name), "Running", &[("node", &node)])?;
        if let Some(uid) = migration_of(self.api.store(), namespace, name) {
            return self.migration_target_running(&uid);
        }
        if is_volume_binder(self.api.store(), namespace, name) {
            return self.volume_bound(namespace, name, &vmi_name, &node);
        }
        let scheduled = self.api.update_vmi(namespace, &vmi_name, &self.kubevirt_controller, |vmi| {
            vmi.phase = VmiPhase::Scheduled;
            vmi.node_name = Some(node);
        });
        if scheduled.is_ok() {
            let event = Event::VmiRunning { namespace: namespace.into(), vmi: vmi_name };
            self.schedule_at(self.now() + self.timing.vmi_running_after, event)?;
        }
        Ok(())
    }

    /// A pod's containers exited (`phase` is terminal): the kubelet frees what it requested.
    pub(super) fn pod_ended(&mut self, namespace: &str, name: &str, phase: PodPhase) -> Result<(), WorldError> {
        self.scheduler_forget(namespace, name);
        self.api.update_pod_status(namespace, name, |pod| pod.phase = phase).expect("listed by the caller");
        self.scheduler_cluster_changed()
    }

    /// Nodes register (the kubelet creates its Node).
    pub(super) fn add_nodes(&mut self, nodes: Vec<Node>) -> Result<(), WorldError> {
        for node in nodes {
            let name = node.name.clone();
            self.api.put_node(node);
            self.record("kubelet", &format_args!("Node {name}"), "Registered", &[])?;
        }
        self.scheduler_cluster_changed()
    }

    /// `kubectl cordon` / `uncordon`.
    pub(super) fn cordon(&mut self, name: &str, cordoned: bool) -> Result<(), WorldError> {
        let Some(mut node) = self.api.store().node(name).cloned() else { return Ok(()) };
        node.unschedulable = cordoned;
        self.api.put_node(node);
        let what = if cordoned { "Cordoned" } else { "Uncordoned" };
        self.record("operator", &format_args!("Node {name}"), what, &[])?;
        self.scheduler_cluster_changed()
    }
}

/// Whether a pod is the temporary pod that binds a WaitForFirstConsumer volume.
fn is_volume_binder(store: &View, namespace: &str, pod: &str) -> bool {
    store.pod(namespace, pod).is_some_and(|pod| {
        pod.annotations.get(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING).map(String::as_str)
            == Some(gpuclaim_engine::keys::TRUE)
    })
}

/// The migration a target pod belongs to.
fn migration_of(store: &View, namespace: &str, pod: &str) -> Option<String> {
    store.pod(namespace, pod)?.labels.get(kubevirt::LABEL_MIGRATION_JOB_UID).cloned()
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
            if let Some(node) = running_there.filter(|_| crate::kubevirt::selector::matches(&selector, &other.labels)) {
                avoided.insert(node.to_string());
            }
        }
    }
    avoided
}
