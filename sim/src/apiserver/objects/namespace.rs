//! A tenant's Namespace as served.
//!
//! Owned: `metadata.{name, uid, resourceVersion, creationTimestamp}` (the last three the manifest's, else
//! deterministic), the `kubernetes.io/metadata.name` label the API server sets on every namespace, and the vGPU
//! entitlement label (the compact tenant's flag). `spec.finalizers` and `status.phase` are the API server's
//! defaults: the twin deletes no namespaces yet.

use std::collections::BTreeMap;

use gpuclaim_engine::keys;
use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, set_key};

/// The label the API server sets on every namespace to its name.
pub const LABEL_NAME: &str = "kubernetes.io/metadata.name";

pub fn render(name: &str, vgpu_entitled: bool, manifest: Option<&Manifest>) -> Value {
    let skeleton = json!({"spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
    let mut object = base(manifest, "v1", "Namespace", skeleton);
    own(&mut object, name, vgpu_entitled, manifest);
    object
}

fn own(object: &mut Value, name: &str, vgpu_entitled: bool, manifest: Option<&Manifest>) {
    let meta = Meta { namespace: "", name, uid: None, resource_version: None, created: None };
    meta.own(object, Kind::Namespace, manifest);
    set_key(object, &["metadata", "labels"], LABEL_NAME, Some(name));
    set_key(object, &["metadata", "labels"], keys::LABEL_VGPU_ENTITLED, vgpu_entitled.then_some(keys::TRUE));
}

/// The labels of the namespace as served (what a namespace selector reads).
pub fn labels(name: &str, vgpu_entitled: bool, manifest: Option<&Manifest>) -> BTreeMap<String, String> {
    let mut labels = manifest.map(Manifest::labels).unwrap_or_default();
    labels.insert(LABEL_NAME.to_owned(), name.to_owned());
    match vgpu_entitled {
        true => labels.insert(keys::LABEL_VGPU_ENTITLED.to_owned(), keys::TRUE.to_owned()),
        false => labels.remove(keys::LABEL_VGPU_ENTITLED),
    };
    labels
}
