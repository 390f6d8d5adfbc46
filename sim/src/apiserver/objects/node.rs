//! A Node as served.
//!
//! Owned (from the compact node, which the twin's kubelets and node actors write): `metadata.{name,
//! resourceVersion, labels}`, `spec.{taints, unschedulable}`, `status.allocatable` and `status.capacity` (CPU,
//! memory, the devices, and the kubelet's default 110 pods) and the `Ready` condition. The uid and creation time are
//! the manifest's (else [`super::uid_of`]); the other conditions, addresses and annotations are the manifest's.

use gpuclaim_engine::model::{Node, Reason};
use gpuclaim_engine::quantity;
use serde_json::{Map, Value, json};

use super::{Kind, Manifest, Meta, base, map_field, own_condition, set, since};

/// The pods a kubelet takes by default (`--max-pods`): what it reports as allocatable `pods`.
pub const PODS_MAX: u64 = 110;

pub fn render(node: &Node, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, "v1", "Node", json!({}));
    own(&mut object, node, manifest);
    object
}

fn own(object: &mut Value, node: &Node, manifest: Option<&Manifest>) {
    let meta = Meta {
        namespace: "",
        name: &node.name,
        uid: None,
        resource_version: Some(&node.resource_version),
        created: None,
    };
    meta.own(object, Kind::Node, manifest);
    set(object, &["metadata", "labels"], map_field(&node.labels));
    set(object, &["spec", "taints"], (!node.taints.is_empty()).then(|| json!(node.taints)));
    set(object, &["spec", "unschedulable"], node.unschedulable.then_some(Value::Bool(true)));
    let mut allocatable = Map::new();
    allocatable.insert("cpu".into(), quantity::cpu_text(node.cpu_millis).into());
    allocatable.insert("memory".into(), quantity::bytes_text(node.memory_bytes).into());
    allocatable.insert("pods".into(), PODS_MAX.to_string().into());
    for (device, units) in &node.devices {
        allocatable.insert(device.clone(), units.to_string().into());
    }
    set(object, &["status", "capacity"], Some(Value::Object(allocatable.clone())));
    set(object, &["status", "allocatable"], Some(Value::Object(allocatable)));
    let ready = match node.ready {
        true => ("True", Reason { reason: "KubeletReady".into(), message: "kubelet is posting ready status".into() }),
        // What the node lifecycle controller writes when the kubelet stops reporting (a lost node).
        false => (
            "Unknown",
            Reason { reason: "NodeStatusUnknown".into(), message: "Kubelet stopped posting node status.".into() },
        ),
    };
    let created = manifest.and_then(|m| m.created).unwrap_or_default();
    let since = |status: &str| since(manifest, "Ready", status, created);
    own_condition(object, &["status", "conditions"], "Ready", Some((ready.0, &ready.1)), since);
}
