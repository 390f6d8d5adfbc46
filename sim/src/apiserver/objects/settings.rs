//! The settings ConfigMap as served.
//!
//! Owned: `metadata.{name, namespace}` (uid, resourceVersion and creation time the manifest's, else deterministic)
//! and the whole `data`: the API server keeps it as written, since it is the policies' parameter.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, map_field, set};

pub fn render(namespace: &str, name: &str, data: &BTreeMap<String, String>, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, "v1", "ConfigMap", json!({}));
    let meta = Meta { namespace, name, uid: None, resource_version: None, created: None };
    meta.own(&mut object, Kind::Settings, manifest);
    set(&mut object, &["data"], map_field(data));
    object
}
