//! The kubelets: a pod bound to its node starts after the kubelet's start latency (KubeVirt's pods tell it their
//! part: a migration target runs, a volume binds, a VMI is Scheduled), a pod that ends frees what it requested, and
//! a node registers when it joins.

use gpuclaim_engine::model::{Name, Node, PodPhase};
use rand::RngExt;

use super::{World, WorldError};
use crate::kernel::Millis;
use crate::log::Named;

impl World {
    /// How long the kubelet takes to start a pod bound to its node (image, sandbox, containers up).
    pub(crate) fn pod_start_delay(&mut self) -> Millis {
        let (low, high) = self.timing.pod_start;
        Millis(self.streams.of("kubelet").random_range(low.0..=high.0))
    }

    /// The kubelet started a pod; KubeVirt sees it run.
    pub(super) fn pod_started(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(pod) = self.api.store().pod(namespace, name) else { return Ok(()) };
        if pod.phase != PodPhase::Pending {
            return Ok(());
        }
        let node = pod.node_name.clone().unwrap_or_default();
        let vmi_name = pod.owner_vmi.as_ref().map(|v| v.name.clone()).unwrap_or_default();
        self.api.update_pod_status(namespace, name, |pod| pod.phase = PodPhase::Running).expect("read above");
        self.record("kubelet", &Named("Pod", namespace, name), "Running", &[("node", &node)])?;
        self.kubevirt_pod_running(namespace, name, vmi_name, node)
    }

    /// A pod's containers exited (`phase` is terminal): the kubelet frees what it requested.
    pub(crate) fn pod_ended(&mut self, namespace: &str, name: &str, phase: PodPhase) -> Result<(), WorldError> {
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
}
