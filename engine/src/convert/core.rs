//! Core Kubernetes kinds (Namespace, ResourceQuota, ConfigMap, Node, Pod) into the compact model.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Node as KubeNode, Pod as KubePod, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_core::ResourceExt;
use serde_json::Value;

use super::{ConvertError, controller_owner, false_condition, time_of, typed};
use crate::keys;
use crate::model::{Name, Node, Pod, PodPhase, Settings};
use crate::quantity;

pub fn vgpu_entitled(namespace: &Namespace) -> bool {
    namespace.labels().get(keys::LABEL_VGPU_ENTITLED).map(String::as_str) == Some(keys::TRUE)
}

/// The GPU budgets a ResourceQuota sets: class → hard units, from its `requests.gpu.cozystack.io/<class>` keys.
pub fn quota_budgets(quota: &ResourceQuota) -> Result<BTreeMap<String, u64>, ConvertError> {
    let mut budgets = BTreeMap::new();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    for (key, quantity) in hard.into_iter().flatten() {
        let Some(class) = key.strip_prefix(keys::QUOTA_KEY_PREFIX) else { continue };
        let units = quantity::whole_units(&quantity.0).map_err(|e| {
            ConvertError::new(
                format!("spec.hard[{key}]"),
                format!("{:?}: {} (GPU units are whole)", quantity.0, e.reason),
            )
        })?;
        budgets.insert(class.to_owned(), units);
    }
    Ok(budgets)
}

pub fn settings_from_kube(config: &ConfigMap) -> Settings {
    let data = config.data.as_ref();
    Settings {
        controller_user: data.and_then(|d| d.get(keys::SETTINGS_CONTROLLER_USER)).filter(|v| !v.is_empty()).cloned(),
    }
}

/// Extended resources (GPUs, vGPU profiles, KubeVirt's devices) are the domain-prefixed names outside
/// `kubernetes.io`; only those can be devices.
fn is_device(resource: &str) -> bool {
    resource.contains('/') && !resource.starts_with("kubernetes.io/") && !resource.contains(".kubernetes.io/")
}

pub fn node_from_kube(node: &KubeNode) -> Result<Node, ConvertError> {
    let status = node.status.as_ref();
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let read = |name: &str, parse: fn(&str) -> Result<u64, quantity::QuantityError>| -> Result<u64, ConvertError> {
        allocatable
            .and_then(|a| a.get(name))
            .map(|q| parse(&q.0).map_err(|e| ConvertError::new(format!("status.allocatable[{name}]"), e.to_string())))
            .unwrap_or(Ok(0))
    };
    let mut devices = BTreeMap::new();
    for (resource, q) in allocatable.into_iter().flatten().filter(|(name, _)| is_device(name)) {
        let field = || format!("status.allocatable[{resource}]");
        let units = quantity::whole_units(&q.0).map_err(|e| ConvertError::new(field(), e.to_string()))?;
        if units > Node::DEVICE_UNITS_MAX {
            let reason = format!("{units} units is more than the {} one node may offer", Node::DEVICE_UNITS_MAX);
            return Err(ConvertError::new(field(), reason));
        }
        devices.insert(resource.clone(), units);
    }
    let spec = node.spec.as_ref();
    Ok(Node {
        name: node.name_any(),
        resource_version: node.resource_version().unwrap_or_default(),
        labels: node.labels().clone(),
        taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        cpu_millis: read("cpu", quantity::cpu_millis)?,
        memory_bytes: read("memory", quantity::bytes)?,
        devices,
    })
}

/// What the scheduler counts for a pod: the sum over containers, at least the largest init container, plus the
/// pod's overhead (kube-scheduler's computePodResourceRequest, without sidecar subtleties).
#[derive(Default)]
struct Requests {
    cpu_millis: u64,
    memory_bytes: u64,
    devices: BTreeMap<String, u64>,
}

impl Requests {
    fn of_container(container: &Container, field: &str) -> Result<Requests, ConvertError> {
        let requests = container.resources.as_ref().and_then(|r| r.requests.as_ref());
        let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
        // Extended resources may be given as limits only; the API server defaults the request to the limit.
        let mut merged: BTreeMap<&String, &Quantity> = limits.into_iter().flatten().collect();
        merged.extend(requests.into_iter().flatten());
        Requests::of_map(merged.into_iter(), &format!("{field}.resources.requests"))
    }

    fn of_map<'a>(
        map: impl Iterator<Item = (&'a String, &'a Quantity)>,
        field: &str,
    ) -> Result<Requests, ConvertError> {
        let mut out = Requests::default();
        for (name, q) in map {
            let wrap = |e: quantity::QuantityError| ConvertError::new(format!("{field}[{name}]"), e.to_string());
            match name.as_str() {
                "cpu" => out.cpu_millis = quantity::cpu_millis(&q.0).map_err(wrap)?,
                "memory" => out.memory_bytes = quantity::bytes(&q.0).map_err(wrap)?,
                device if is_device(device) => {
                    out.devices.insert(device.to_owned(), quantity::whole_units(&q.0).map_err(wrap)?);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn add(&mut self, other: &Requests) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        for (name, units) in &other.devices {
            *self.devices.entry(name.clone()).or_insert(0) += units;
        }
    }

    fn at_least(&mut self, other: &Requests) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        for (name, units) in &other.devices {
            let mine = self.devices.entry(name.clone()).or_insert(0);
            *mine = (*mine).max(*units);
        }
    }
}

fn pod_requests(pod: &KubePod) -> Result<Requests, ConvertError> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(Requests::default()) };
    let mut total = Requests::default();
    for (i, container) in spec.containers.iter().enumerate() {
        total.add(&Requests::of_container(container, &format!("spec.containers[{i}]"))?);
    }
    for (i, container) in spec.init_containers.iter().flatten().enumerate() {
        total.at_least(&Requests::of_container(container, &format!("spec.initContainers[{i}]"))?);
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Requests::of_map(overhead.iter(), "spec.overhead")?);
    }
    Ok(total)
}

fn pod_phase(phase: Option<&str>) -> PodPhase {
    match phase {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Pending,
    }
}

pub fn pod_from_kube(pod: &KubePod, namespace: &str) -> Result<Pod, ConvertError> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let requests = pod_requests(pod)?;
    let conditions = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_deref(), c.message.as_deref()));
    let mut converted = Pod {
        namespace: pod.namespace().unwrap_or_else(|| namespace.to_owned()).into(),
        name: pod.metadata.name.clone().or_else(|| pod.metadata.generate_name.clone()).unwrap_or_default().into(),
        uid: pod.uid().unwrap_or_default().into(),
        resource_version: pod.resource_version().unwrap_or_default().into(),
        created: time_of(pod.metadata.creation_timestamp.as_ref()),
        labels: pod.labels().clone().into(),
        annotations: pod.annotations().clone().into(),
        scheduling_gates: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|gates| gates.iter().map(|g| Name::from(g.name.as_str())).collect())
            .unwrap_or_default(),
        tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default().into(),
        node_selector: spec.and_then(|s| s.node_selector.clone()).unwrap_or_default().into(),
        required_terms: spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|selector| selector.node_selector_terms.clone().into()),
        pod_affinity: spec.and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_affinity.clone()),
        pod_anti_affinity: spec.and_then(|s| s.affinity.as_ref()).and_then(|a| a.pod_anti_affinity.clone()),
        node_name: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()).map(Name::from),
        phase: pod_phase(status.and_then(|s| s.phase.as_deref())),
        cpu_millis: requests.cpu_millis,
        memory_bytes: requests.memory_bytes,
        devices: Arc::new(requests.devices),
        owner_vmi: controller_owner(&pod.metadata, keys::kubevirt::KIND_VMI),
        waiting: false_condition(conditions, keys::CONDITION_PLACEMENT),
        attachments_read: Default::default(),
    };
    // Read once here, where the pod enters the engine: every reader after lends it.
    converted.read_attachments();
    Ok(converted)
}

pub fn pod_from_json(object: &Value, namespace: &str) -> Result<Pod, ConvertError> {
    pod_from_kube(&typed::<KubePod>(object)?, namespace)
}
