//! A tenant's ResourceQuota as served.
//!
//! Owned: `metadata.{name, namespace}` (uid, resourceVersion and creation time the manifest's, else deterministic)
//! and the GPU budgets in `spec.hard` (the `requests.gpu.cozystack.io/<class>` keys, in whole units). The manifest
//! keeps its other keys (CPU, memory, object counts): the twin enforces only the GPU budgets, through the order
//! webhook. There is no `status`: the twin runs no quota controller, and the API server's would not count these
//! keys (no pod requests a `gpu.cozystack.io/<class>` resource).

use std::collections::BTreeMap;

use gpuclaim_engine::keys;
use serde_json::{Map, Value, json};

use super::{Kind, Manifest, Meta, base, get, set};

pub fn render(namespace: &str, name: &str, budgets: &BTreeMap<String, u64>, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, "v1", "ResourceQuota", json!({}));
    own(&mut object, namespace, name, budgets, manifest);
    object
}

fn own(object: &mut Value, namespace: &str, name: &str, budgets: &BTreeMap<String, u64>, manifest: Option<&Manifest>) {
    let meta = Meta { namespace, name, uid: None, resource_version: None, created: None };
    meta.own(object, Kind::Quota, manifest);
    let mut hard: Map<String, Value> =
        get(object, &["spec", "hard"]).and_then(Value::as_object).cloned().unwrap_or_default();
    hard.retain(|key, _| !key.starts_with(keys::QUOTA_KEY_PREFIX));
    for (class, units) in budgets {
        hard.insert(format!("{}{class}", keys::QUOTA_KEY_PREFIX), units.to_string().into());
    }
    set(object, &["spec", "hard"], (!hard.is_empty()).then_some(Value::Object(hard)));
}
