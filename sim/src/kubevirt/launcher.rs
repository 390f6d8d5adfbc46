//! How KubeVirt renders a VMI's launcher pod (pkg/virt-controller/services/template.go), as far as scheduling and
//! GPU claims care: its labels, the VMI's labels and annotations copied, the `kubevirt.io/schedulable`
//! nodeSelector, the host-model node-affinity term, the default NoExecute tolerations, and requests for CPU,
//! memory, KubeVirt's device plugins and one unit per GPU entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::{Name, Pod, PodPhase, Time, Vmi};
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Toleration};

/// The requests the compute container adds besides the VM's own CPU and memory.
pub const DEVICE_PLUGINS: [&str; 3] =
    ["devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net"];
/// template.go: the label the node labeller sets on nodes whose host CPU model is obsolete.
pub const OBSOLETE_HOST_MODEL: &str = "node-labeller.kubevirt.io/obsolete-host-model";

/// What every launcher a world renders carries alike, built once per world and shared (copied on write, like any
/// pod's maps): a launcher is rendered per VM start, and building these was a third of a render's allocations. Per
/// world, not per process, so that parallel runs do not contend on one reference count.
#[derive(Clone, Debug)]
pub struct LauncherParts {
    tolerations: Arc<Vec<Toleration>>,
    node_selector: Arc<BTreeMap<String, String>>,
    required_terms: Arc<Vec<NodeSelectorTerm>>,
}

impl Default for LauncherParts {
    fn default() -> Self {
        let toleration = |key: &str| Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("NoExecute".to_owned()),
            toleration_seconds: Some(300),
            value: None,
        };
        LauncherParts {
            tolerations: Arc::new(vec![
                toleration("node.kubernetes.io/not-ready"),
                toleration("node.kubernetes.io/unreachable"),
            ]),
            node_selector: Arc::new(BTreeMap::from([(kubevirt::LABEL_SCHEDULABLE.to_owned(), keys::TRUE.to_owned())])),
            required_terms: Arc::new(vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: OBSOLETE_HOST_MODEL.to_owned(),
                    operator: "DoesNotExist".to_owned(),
                    values: None,
                }]),
                match_fields: None,
            }]),
        }
    }
}

/// The launcher pod of `vmi` named `name`, requesting `cpu_millis` and `memory_bytes`.
pub fn render_launcher(
    vmi: &Vmi,
    name: &str,
    cpu_millis: u64,
    memory_bytes: u64,
    created: Time,
    parts: &LauncherParts,
) -> Pod {
    let mut labels = (*vmi.labels).clone();
    labels.insert(kubevirt::LABEL_APP.to_owned(), kubevirt::LAUNCHER.to_owned());
    labels.insert(kubevirt::LABEL_CREATED_BY.to_owned(), vmi.uid.to_string());
    labels.insert("vm.kubevirt.io/name".to_owned(), vmi.name.to_string());
    // template.go filterVMIAnnotationsForPod: every VMI annotation but kubectl's and the API-version bookkeeping.
    let mut annotations: BTreeMap<String, String> = vmi
        .annotations
        .iter()
        .filter(|(key, _)| {
            !key.starts_with("kubectl.kubernetes.io")
                && !key.starts_with("kubevirt.io/storage-observed-api-version")
                && !key.starts_with("kubevirt.io/latest-observed-api-version")
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    annotations.insert("kubectl.kubernetes.io/default-container".to_owned(), "compute".to_owned());
    let mut devices: BTreeMap<String, u64> = DEVICE_PLUGINS.iter().map(|d| ((*d).to_owned(), 1)).collect();
    for gpu in vmi.gpus.iter() {
        *devices.entry(gpu.device_name.clone()).or_insert(0) += 1;
    }
    Pod {
        namespace: vmi.namespace.clone(),
        name: name.into(),
        uid: ["uid-", name].concat().into(),
        resource_version: Name::default(),
        created,
        labels: labels.into(),
        annotations: annotations.into(),
        scheduling_gates: Vec::new(),
        tolerations: Arc::clone(&parts.tolerations),
        node_selector: Arc::clone(&parts.node_selector),
        required_terms: Some(Arc::clone(&parts.required_terms)),
        pod_affinity: None,
        pod_anti_affinity: None,
        node_name: None,
        phase: PodPhase::Pending,
        cpu_millis,
        memory_bytes,
        devices: Arc::new(devices),
        owner_vmi: Some(vmi.reference()),
        waiting: None,
        // The attachments annotation is copied above: what it reads as goes with it.
        attachments_read: vmi.attachments_read.clone(),
    }
}
