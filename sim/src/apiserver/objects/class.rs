//! A GPUClass as served.
//!
//! Owned (from the compact class): `metadata.{name, resourceVersion}`, the whole `spec` and the whole `status` (the
//! figures the controller publishes). The uid and creation time are the manifest's (else [`super::uid_of`]).

use gpuclaim_engine::api::{GPUClassSpec, GPUClassStatus};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::Class;
use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, set};

pub fn render(class: &Class, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, keys::API_VERSION, keys::KIND_CLASS, json!({}));
    own(&mut object, class, manifest);
    object
}

fn own(object: &mut Value, class: &Class, manifest: Option<&Manifest>) {
    let meta = Meta {
        namespace: "",
        name: &class.name,
        uid: None,
        resource_version: Some(&class.resource_version),
        created: None,
    };
    meta.own(object, Kind::Class, manifest);
    let spec = GPUClassSpec {
        resource_name: class.resource_name.clone(),
        mode: class.mode,
        max_count: class.max_count,
        node_selector: (*class.node_selector).clone(),
        tolerations: (*class.tolerations).clone(),
        live_migratable: class.live_migratable,
        placement: class.placement,
    };
    let published = class.published;
    let status = GPUClassStatus {
        allocatable_units: published.allocatable_units,
        free_units: published.free_units,
        largest_free_on_node: published.largest_free_on_node,
        fragmented_units: published.fragmented_units,
    };
    set(object, &["spec"], Some(json!(spec)));
    set(object, &["status"], Some(json!(status)));
}
