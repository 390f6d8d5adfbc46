//! A Pod as served.
//!
//! Owned (from the compact pod): `metadata.{name, namespace, uid, resourceVersion, creationTimestamp, labels,
//! annotations}`, the VMI ownerReference of KubeVirt's pods, `spec.{schedulingGates, tolerations, nodeSelector,
//! nodeName}`, `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`,
//! `spec.affinity.{podAffinity, podAntiAffinity}`, `status.phase`, the controller's placement condition and the
//! `PodScheduled` condition the API server and scheduler write (False while gated, True once bound).
//!
//! The containers are the manifest's. A pod an actor made has none there: it renders with one container,
//! `compute`, requesting the compact sums (devices as limits equal to requests), which reads back as the same pod.

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Pod, Reason};
use gpuclaim_engine::quantity;
use serde_json::{Map, Value, json};

use super::{Kind, Manifest, Meta, base, map_field, own_condition, set, since, vmi_owner};

/// The image of the one container a pod an actor made renders with.
pub const COMPUTE_IMAGE: &str = "gpuclaim.io/twin/compute:v1";

pub fn render(pod: &Pod, manifest: Option<&Manifest>) -> Value {
    let skeleton = json!({"spec": {"containers": [compute(pod)]}});
    let mut object = base(manifest, "v1", "Pod", skeleton);
    own(&mut object, pod, manifest);
    object
}

/// The one container of a pod an actor made: the compact sums as its requests, devices also as limits.
fn compute(pod: &Pod) -> Value {
    let mut requests = Map::new();
    if pod.cpu_millis > 0 {
        requests.insert("cpu".into(), quantity::cpu_text(pod.cpu_millis).into());
    }
    if pod.memory_bytes > 0 {
        requests.insert("memory".into(), quantity::bytes_text(pod.memory_bytes).into());
    }
    let devices: Map<String, Value> =
        pod.devices.iter().map(|(device, units)| (device.clone(), units.to_string().into())).collect();
    requests.extend(devices.clone());
    let mut resources = Map::new();
    if !requests.is_empty() {
        resources.insert("requests".into(), requests.into());
    }
    if !devices.is_empty() {
        resources.insert("limits".into(), devices.into());
    }
    json!({"name": "compute", "image": COMPUTE_IMAGE, "resources": resources})
}

fn own(object: &mut Value, pod: &Pod, manifest: Option<&Manifest>) {
    let meta = Meta {
        namespace: &pod.namespace,
        name: &pod.name,
        uid: Some(&pod.uid),
        resource_version: Some(&pod.resource_version),
        created: Some(pod.created),
    };
    meta.own(object, Kind::Pod, manifest);
    set(object, &["metadata", "labels"], map_field(&pod.labels));
    set(object, &["metadata", "annotations"], map_field(&pod.annotations));
    if let Some(vmi) = &pod.owner_vmi {
        set(object, &["metadata", "ownerReferences"], Some(vmi_owner(vmi)));
    }
    let gates: Vec<Value> = pod.scheduling_gates.iter().map(|gate| json!({"name": gate})).collect();
    set(object, &["spec", "schedulingGates"], (!gates.is_empty()).then_some(Value::Array(gates)));
    set(object, &["spec", "tolerations"], (!pod.tolerations.is_empty()).then(|| json!(*pod.tolerations)));
    set(object, &["spec", "nodeSelector"], map_field(&pod.node_selector));
    let required = pod.required_terms().map(|terms| json!({"nodeSelectorTerms": terms}));
    let affinity = ["spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"];
    set(object, &affinity, required);
    set(object, &["spec", "affinity", "podAffinity"], pod.pod_affinity.as_ref().map(|a| json!(a)));
    set(object, &["spec", "affinity", "podAntiAffinity"], pod.pod_anti_affinity.as_ref().map(|a| json!(a)));
    set(object, &["spec", "nodeName"], pod.node_name.as_deref().map(Value::from));
    set(object, &["status", "phase"], Some(format!("{:?}", pod.phase).into()));
    let since = |type_: &'static str| move |status: &str| since(manifest, type_, status, pod.created);
    let placement = pod.waiting.as_ref().map(|waiting| ("False", waiting));
    let conditions = ["status", "conditions"];
    own_condition(object, &conditions, keys::CONDITION_PLACEMENT, placement, since(keys::CONDITION_PLACEMENT));
    let gated = Reason {
        reason: "SchedulingGated".into(),
        message: "Scheduling is blocked due to non-empty scheduling gates".into(),
    };
    let scheduled = Reason { reason: String::new(), message: String::new() };
    let scheduled = match (&pod.node_name, pod.scheduling_gates.is_empty()) {
        (Some(_), _) => Some(("True", &scheduled)),
        (None, false) => Some(("False", &gated)),
        (None, true) => None,
    };
    own_condition(object, &conditions, "PodScheduled", scheduled, since("PodScheduled"));
}
