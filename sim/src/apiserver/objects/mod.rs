//! The twin's objects as the API server serves them: full Kubernetes JSON, rendered from the compact store and, for
//! an object a client wrote (served mode, issue 39), from the manifest it wrote.
//!
//! The compact model (`gpuclaim_engine::model`) stays the truth for everything the twin models, and it is lossy on
//! purpose. A render starts from a *base*: the manifest a client last wrote, or else a skeleton of deterministic
//! defaults (an object an actor made). Then the *owned* fields, every field the compact type holds, are written over
//! it. Each kind's file lists its owned fields at its top and writes them in one function, so what an actor changes
//! shows, and what a client wrote that the twin does not model (a container's image, a claim's own labels) stays as
//! written. Reading a render back with `gpuclaim_engine::convert` gives the compact object again (a test holds it
//! for every kind).
//!
//! Renders are deterministic. A uid the compact type lacks comes from [`uid_of`]; times are written as the API
//! server writes them (RFC 3339, whole seconds); a condition's `lastTransitionTime` is the manifest's record of
//! when it took its status, else the object's creation.

pub mod claim;
pub mod class;
pub mod event;
pub mod judged;
pub mod namespace;
pub mod node;
pub mod pod;
pub mod quota;
pub mod settings;
pub mod usage;
pub mod vmi;

use std::collections::BTreeMap;

use gpuclaim_engine::api::VmiRef;
use gpuclaim_engine::keys::kubevirt;
use gpuclaim_engine::model::{Name, Reason, Time};
use serde_json::{Map, Value, json};

use super::{ApiServer, Kind, ObjectKey};

/// What the served layer keeps of a modelled object beside its compact form: the manifest a client wrote, and the
/// metadata the compact type cannot hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    /// The object as a client last wrote it (after patching and defaulting); `Null` when only the fields below are
    /// kept (an object an actor made).
    pub json: Value,
    /// The uid, for kinds whose compact type holds none (nodes, usage records, namespaces, quotas, the settings).
    pub uid: Option<Name>,
    /// The creation time, for kinds whose compact type holds none.
    pub created: Option<Time>,
    /// `metadata.generation`: 0 when not counted.
    pub generation: i64,
    /// The resourceVersion, for kinds whose compact type holds none (namespaces, quotas, the settings).
    pub resource_version: Option<Name>,
    /// Condition type → (status, since when): when each condition took the status it has.
    pub transitions: BTreeMap<String, (String, Time)>,
}

impl Manifest {
    /// The labels the manifest carries (none when it has no map of strings there).
    pub fn labels(&self) -> BTreeMap<String, String> {
        get(&self.json, &["metadata", "labels"])
            .and_then(|labels| serde_json::from_value(labels.clone()).ok())
            .unwrap_or_default()
    }
}

/// The manifests of the objects the served layer knows, by key. Absent from the in-process twin.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    by_key: BTreeMap<ObjectKey, Manifest>,
}

impl Manifests {
    pub fn get(&self, key: &ObjectKey) -> Option<&Manifest> {
        self.by_key.get(key)
    }

    /// The manifest of `key`, made empty if there was none.
    pub fn entry(&mut self, key: ObjectKey) -> &mut Manifest {
        self.by_key.entry(key).or_default()
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Manifest> {
        self.by_key.remove(key)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

impl ApiServer {
    /// Starts keeping the manifests (served mode): what clients write beside the compact store, and the metadata
    /// the compact types lack.
    pub fn keep_manifests(&mut self) {
        self.manifests.get_or_insert_with(Box::default);
        self.recorded_events.get_or_insert_with(Vec::new);
    }

    /// The events the controller recorded since the last call (served mode; none otherwise).
    pub fn take_recorded_events(&mut self) -> Vec<event::Recorded> {
        self.recorded_events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The manifests kept, when they are.
    pub fn manifests(&self) -> Option<&Manifests> {
        self.manifests.as_deref()
    }

    pub fn manifests_mut(&mut self) -> Option<&mut Manifests> {
        self.manifests.as_deref_mut()
    }

    /// The revision of the last write: what a list reports.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// `key` as the API server serves it, `None` when the store does not hold it.
    pub fn render(&self, key: &ObjectKey) -> Option<Value> {
        let store = &self.store;
        let (namespace, name) = (key.namespace.as_str(), key.name.as_str());
        let manifest = self.manifests.as_deref().and_then(|manifests| manifests.get(key));
        Some(match key.kind {
            Kind::Claim => claim::render(store.claim(namespace, name)?, manifest),
            Kind::Class => class::render(store.class(name)?, manifest),
            Kind::Usage => usage::render(store.usage(namespace, name)?, manifest),
            Kind::Pod => pod::render(store.pod(namespace, name)?, manifest),
            Kind::Node => node::render(store.node(name)?, manifest),
            Kind::Vmi => vmi::render(store.vmi(namespace, name)?, manifest),
            Kind::Namespace => namespace::render(name, store.tenant(name)?.vgpu_entitled, manifest),
            Kind::Quota => {
                let (_, hard) = store.tenant(namespace)?.quotas().find(|(quota, _)| *quota == name)?;
                quota::render(namespace, name, hard, manifest)
            }
            Kind::Settings => settings::render(namespace, name, self.admission.settings()?, manifest),
        })
    }
}

/// A deterministic uid for an object whose compact type holds none: a hash of its kind, namespace and name, written
/// as a UUID (version 8, RFC 9562 §5.8), so a render gives the same uid every time and on every machine.
pub fn uid_of(kind: &str, namespace: &str, name: &str) -> Name {
    // FNV-1a over the three parts with separators, twice with different offsets for 128 bits.
    let hash = |offset: u64| {
        let mut hash = offset;
        for byte in [kind, "/", namespace, "/", name].concat().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    };
    let (high, low) = (hash(0xcbf2_9ce4_8422_2325), hash(0x6c62_272e_07bb_0142));
    let bits = (u128::from(high) << 64 | u128::from(low)) & !(0xf << 76) & !(0x3 << 62) | (0x8 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]).into()
}

/// A time as the API server writes `metav1.Time`: RFC 3339 in UTC, whole seconds.
pub fn timestamp(time: Time) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The base a render starts from: the client's manifest, or a skeleton of `apiVersion`, `kind` and `extra`.
fn base(manifest: Option<&Manifest>, api_version: &str, kind: &str, extra: Value) -> Value {
    match manifest.map(|m| &m.json) {
        Some(json @ Value::Object(_)) => json.clone(),
        _ => {
            let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
            if let (Value::Object(object), Value::Object(extra)) = (&mut object, extra) {
                object.extend(extra);
            }
            object
        }
    }
}

/// The metadata every kind owns: name, namespace (none for cluster-scoped kinds), uid, resourceVersion and
/// creationTimestamp, with the manifest standing in for what the compact type lacks. `generation` is written when
/// counted. A value `None` here and in the manifest is removed.
struct Meta<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: Option<&'a str>,
    resource_version: Option<&'a str>,
    created: Option<Time>,
}

impl Meta<'_> {
    fn own(&self, object: &mut Value, kind: Kind, manifest: Option<&Manifest>) {
        let uid = self
            .uid
            .filter(|uid| !uid.is_empty())
            .map(Name::from)
            .or_else(|| manifest.and_then(|m| m.uid.clone()))
            .unwrap_or_else(|| uid_of(kind.name(), self.namespace, self.name));
        let version = self
            .resource_version
            .filter(|version| !version.is_empty())
            .map(str::to_owned)
            .or_else(|| manifest.and_then(|m| m.resource_version.as_ref()).map(|v| v.to_string()));
        let created = self.created.or_else(|| manifest.and_then(|m| m.created)).unwrap_or_default();
        set(object, &["metadata", "name"], Some(self.name.into()));
        set(object, &["metadata", "namespace"], (!self.namespace.is_empty()).then(|| self.namespace.into()));
        set(object, &["metadata", "uid"], Some(uid.as_str().into()));
        set(object, &["metadata", "resourceVersion"], version.map(Value::from));
        set(object, &["metadata", "creationTimestamp"], Some(timestamp(created).into()));
        let generation = manifest.map_or(0, |m| m.generation);
        if generation > 0 {
            set(object, &["metadata", "generation"], Some(generation.into()));
        }
    }
}

/// Sets the field at `path` (creating the maps on the way), or removes it when `value` is `None` (removing the maps
/// left empty on the way, as the API server omits empty ones). A field that is not a map on the way is replaced.
fn set(object: &mut Value, path: &[&str], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else { return };
    match value {
        Some(value) => {
            let mut at = object;
            for part in parents {
                if !at.is_object() {
                    *at = Value::Object(Map::new());
                }
                at = at.as_object_mut().expect("a map").entry(*part).or_insert_with(|| Value::Object(Map::new()));
            }
            if !at.is_object() {
                *at = Value::Object(Map::new());
            }
            at.as_object_mut().expect("a map").insert((*last).to_owned(), value);
        }
        None => remove(object, path),
    }
}

fn remove(object: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else { return };
    let Some(map) = object.as_object_mut() else { return };
    if rest.is_empty() {
        map.remove(*first);
        return;
    }
    if let Some(child) = map.get_mut(*first) {
        remove(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(*first);
        }
    }
}

/// A map field, absent when empty (as the API server omits empty maps).
fn map_field(map: &BTreeMap<String, String>) -> Option<Value> {
    (!map.is_empty()).then(|| json!(map))
}

/// Sets or removes one key of the string map at `path` (a label, an annotation).
fn set_key(object: &mut Value, path: &[&str], key: &str, value: Option<&str>) {
    let mut full: Vec<&str> = path.to_vec();
    full.push(key);
    set(object, &full, value.map(Value::from));
}

/// Adds `item` to the string list at `path` when `present`, else removes it; the list goes when empty.
fn mark(object: &mut Value, path: &[&str], item: &str, present: bool) {
    let mut items: Vec<Value> = get(object, path).and_then(Value::as_array).cloned().unwrap_or_default();
    items.retain(|value| value.as_str() != Some(item));
    if present {
        items.push(item.into());
    }
    set(object, path, (!items.is_empty()).then_some(Value::Array(items)));
}

fn get<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |at, part| at.get(*part))
}

/// The controller ownerReference to a VMI, as KubeVirt writes it on the pods and claims it makes.
fn vmi_owner(vmi: &VmiRef) -> Value {
    json!([{
        "apiVersion": kubevirt::API_VERSION,
        "kind": kubevirt::KIND_VMI,
        "name": vmi.name,
        "uid": vmi.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// Sets the condition of `type_` in the list at `path` (the others stay as they are; a new one goes last), or
/// removes it when `condition` is `None`. `since` is when it took its status (see [`Manifest::transitions`]).
fn own_condition(
    object: &mut Value,
    path: &[&str],
    type_: &str,
    condition: Option<(&str, &Reason)>,
    since: impl FnOnce(&str) -> Time,
) {
    let mut conditions: Vec<Value> = get(object, path).and_then(Value::as_array).cloned().unwrap_or_default();
    let at = conditions.iter().position(|c| c.get("type").and_then(Value::as_str) == Some(type_));
    match (condition, at) {
        (Some((status, reason)), at) => {
            let mut written = json!({"type": type_, "status": status, "lastTransitionTime": timestamp(since(status))});
            // The API server omits empty strings (a condition that is True needs no reason).
            for (field, text) in [("reason", &reason.reason), ("message", &reason.message)] {
                if !text.is_empty() {
                    written[field] = text.as_str().into();
                }
            }
            match at {
                Some(at) => conditions[at] = written,
                None => conditions.push(written),
            }
        }
        (None, Some(at)) => {
            conditions.remove(at);
        }
        (None, None) => {}
    }
    set(object, path, (!conditions.is_empty()).then_some(Value::Array(conditions)));
}

/// When the condition `type_` took `status`, by the manifest's record, else `fallback` (the object's creation).
fn since(manifest: Option<&Manifest>, type_: &str, status: &str, fallback: Time) -> Time {
    manifest
        .and_then(|m| m.transitions.get(type_))
        .filter(|(recorded, _)| recorded == status)
        .map_or(fallback, |(_, at)| *at)
}

#[cfg(test)]
mod tests;
