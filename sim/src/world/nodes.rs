//! Node lifecycle: a kubelet that goes silent is marked NotReady by the node lifecycle controller after its grace
//! period, tainted unreachable, and its pods are evicted once their toleration of that taint runs out; a kubelet
//! that comes back makes the node Ready again. And the operator's `kubectl cordon` and `kubectl drain`.
//!
//! Constants from Kubernetes: kube-controller-manager `--node-monitor-grace-period` 50 s (the default since 1.32),
//! and the DefaultTolerationSeconds admission plugin's 300 s toleration of `node.kubernetes.io/unreachable` and
//! `not-ready` (NoExecute) given to every pod that does not set its own.

use crate::log::Named;
use gpuclaim_engine::model::Name;
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Taint;

use super::{Event, World, WorldError};
use crate::kernel::Millis;

pub const NODE_MONITOR_GRACE_PERIOD: Millis = Millis(50_000);
pub const DEFAULT_TOLERATION_SECONDS: Millis = Millis(300_000);
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

fn unreachable_taint(effect: &str) -> Taint {
    Taint { key: TAINT_UNREACHABLE.to_owned(), effect: effect.to_owned(), ..Taint::default() }
}

impl World {
    pub(super) fn node_lost(&mut self, name: &str) -> Result<(), WorldError> {
        if self.api.store().node(name).is_none() || self.silent_nodes.contains_key(name) {
            return Ok(());
        }
        let since = self.now();
        self.silent_nodes.insert(name.to_owned(), since);
        self.record("kubelet", &format_args!("Node {name}"), "HeartbeatLost", &[])?;
        self.replicas_lost_with(name)?;
        let event = Event::NodeNotReady { node: name.to_owned(), since };
        self.schedule_at(since + NODE_MONITOR_GRACE_PERIOD, event)
    }

    /// The grace period ran out: Ready becomes Unknown, the node is tainted unreachable (NoSchedule, NoExecute).
    pub(super) fn node_not_ready(&mut self, name: &str, since: Millis) -> Result<(), WorldError> {
        if self.silent_nodes.get(name) != Some(&since) {
            return Ok(());
        }
        let Some(mut node) = self.api.store().node(name).cloned() else { return Ok(()) };
        node.ready = false;
        node.taints.retain(|taint| taint.key != TAINT_UNREACHABLE);
        node.taints.push(unreachable_taint("NoSchedule"));
        node.taints.push(unreachable_taint("NoExecute"));
        self.api.put_node(node);
        self.record("node-lifecycle", &format_args!("Node {name}"), "NotReady", &[])?;
        let event = Event::EvictUnreachable { node: name.to_owned(), since };
        self.schedule_at(self.now() + DEFAULT_TOLERATION_SECONDS, event)
    }

    /// The taint manager evicts the node's pods; their VMIs fail (the VM controller starts them again elsewhere).
    /// The deletions are taken as confirmed, as the pod garbage collector forces them once the node is gone.
    pub(super) fn evict_unreachable(&mut self, name: &str, since: Millis) -> Result<(), WorldError> {
        if self.silent_nodes.get(name) != Some(&since) {
            return Ok(());
        }
        let evicted: Vec<(Name, Name, Option<Name>)> = self
            .api
            .store()
            .pods()
            .filter(|pod| pod.node_name.as_deref() == Some(name) && !pod.phase.is_terminal())
            .map(|pod| (pod.namespace.clone(), pod.name.clone(), pod.owner_vmi.as_ref().map(|v| v.name.clone())))
            .collect();
        let mut vmis = BTreeSet::new();
        for (namespace, pod, vmi) in evicted {
            self.scheduler_forget(&namespace, &pod);
            if self.api.delete_pod(&namespace, &pod).is_ok() {
                self.record("taint-manager", &Named("Pod", &namespace, &pod), "Evicted", &[])?;
            }
            if let Some(vmi) = vmi {
                vmis.insert((namespace, vmi));
            }
        }
        self.scheduler_cluster_changed()?;
        self.replace_replicas_from(name)?;
        for (namespace, vmi) in vmis {
            self.launcher_gone(&namespace, &vmi)?;
        }
        Ok(())
    }

    /// The kubelet posts status again: Ready, untainted.
    pub(super) fn node_recovered(&mut self, name: &str) -> Result<(), WorldError> {
        if self.silent_nodes.remove(name).is_none() {
            return Ok(());
        }
        let Some(mut node) = self.api.store().node(name).cloned() else { return Ok(()) };
        node.ready = true;
        node.taints.retain(|taint| taint.key != TAINT_UNREACHABLE);
        self.api.put_node(node);
        self.record("kubelet", &format_args!("Node {name}"), "Ready", &[])?;
        self.scheduler_cluster_changed()
    }

    /// `kubectl cordon` / `uncordon`.
    pub(crate) fn cordon(&mut self, name: &str, cordoned: bool) -> Result<(), WorldError> {
        let Some(mut node) = self.api.store().node(name).cloned() else { return Ok(()) };
        node.unschedulable = cordoned;
        self.api.put_node(node);
        let what = if cordoned { "Cordoned" } else { "Uncordoned" };
        self.record("operator", &format_args!("Node {name}"), what, &[])?;
        self.scheduler_cluster_changed()
    }

    /// `kubectl drain`: cordon, evict the GPU controller's replicas (within their PDB), and KubeVirt evacuates the
    /// VMIs.
    pub(super) fn drain(&mut self, node: &str) -> Result<(), WorldError> {
        self.evacuation_started(node);
        self.cordon(node, true)?;
        self.evict_replicas(node)?;
        self.evacuate(node)
    }
}
