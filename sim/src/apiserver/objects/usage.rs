//! A GPUUsage record as served.
//!
//! Owned (from the compact record): `metadata.{name, namespace, resourceVersion}`, the ownerReference to its claim
//! and the whole `spec`, exactly as the controller creates a record (`convert::usage_object`). The uid and creation
//! time are the manifest's (else [`super::uid_of`], and the record's start).

use gpuclaim_engine::convert;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::Usage;
use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, set};

pub fn render(usage: &Usage, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, keys::API_VERSION, keys::KIND_USAGE, json!({}));
    own(&mut object, usage, manifest);
    object
}

fn own(object: &mut Value, usage: &Usage, manifest: Option<&Manifest>) {
    let created = manifest.and_then(|m| m.created).unwrap_or(usage.start);
    let meta = Meta {
        namespace: &usage.namespace,
        name: &usage.name,
        uid: None,
        resource_version: Some(&usage.resource_version),
        created: Some(created),
    };
    meta.own(object, Kind::Usage, manifest);
    let written = convert::usage_object(usage, &usage.claim_uid);
    set(object, &["metadata", "ownerReferences"], Some(json!(written.metadata.owner_references)));
    set(object, &["spec"], Some(json!(written.spec)));
}
