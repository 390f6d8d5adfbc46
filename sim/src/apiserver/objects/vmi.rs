//! A VirtualMachineInstance as served.
//!
//! Owned (from the compact VMI, which KubeVirt's actors and the VMI webhook write): `metadata.{name, namespace,
//! uid, resourceVersion, labels, annotations}`, `deletionTimestamp`'s presence (the manifest's time, else the
//! creation time), `spec.domain.devices.gpus`, `status.phase`, `status.nodeName` and the `Ready` condition. The creation time is the
//! manifest's (the compact VMI keeps none); the rest of the spec (CPU, memory, disks) is the manifest's.

use gpuclaim_engine::keys::kubevirt;
use gpuclaim_engine::model::{Reason, Vmi, VmiPhase};
use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, get, map_field, own_condition, set, since, timestamp};

pub fn render(vmi: &Vmi, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, kubevirt::API_VERSION, kubevirt::KIND_VMI, json!({}));
    own(&mut object, vmi, manifest);
    object
}

fn own(object: &mut Value, vmi: &Vmi, manifest: Option<&Manifest>) {
    let created = manifest.and_then(|m| m.created).unwrap_or_default();
    let meta = Meta {
        namespace: &vmi.namespace,
        name: &vmi.name,
        uid: Some(&vmi.uid),
        resource_version: Some(&vmi.resource_version),
        created: Some(created),
    };
    meta.own(object, Kind::Vmi, manifest);
    set(object, &["metadata", "labels"], map_field(&vmi.labels));
    set(object, &["metadata", "annotations"], map_field(&vmi.annotations));
    let deleted = get(object, &["metadata", "deletionTimestamp"]).cloned();
    let deleted = vmi.deleting.then(|| deleted.unwrap_or_else(|| timestamp(created).into()));
    set(object, &["metadata", "deletionTimestamp"], deleted);
    let gpus: Vec<Value> =
        vmi.gpus.iter().map(|gpu| json!({"name": gpu.name, "deviceName": gpu.device_name})).collect();
    set(object, &["spec", "domain", "devices", "gpus"], Some(Value::Array(gpus)));
    set(object, &["status", "phase"], Some(format!("{:?}", vmi.phase).into()));
    set(object, &["status", "nodeName"], vmi.node_name.as_deref().map(Value::from));
    // KubeVirt's Ready condition: True while the guest runs (what `kubectl get vmi`'s READY column reads).
    let not_running =
        Reason { reason: "GuestNotRunning".into(), message: "Guest VM is not reported as running".into() };
    let ready = Reason::default();
    let condition = match vmi.phase {
        VmiPhase::Running => ("True", &ready),
        _ => ("False", &not_running),
    };
    let since = |status: &str| since(manifest, "Ready", status, created);
    own_condition(object, &["status", "conditions"], "Ready", Some(condition), since);
}
