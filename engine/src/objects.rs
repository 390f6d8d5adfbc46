//! Reading Kubernetes manifests (multi-document YAML, as `kubectl apply` takes them) into the engine's [`View`].
//!
//! Pure text in, view out: the caller reads the file. Every error names the document, the object and the field.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ResourceQuota};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{GPUClaim, GPUClass, GPUUsage};
use crate::convert::{self, ConvertError};
use crate::keys;
use crate::model::View;

/// The most documents one manifest file may hold (a `List`'s items count one each).
pub const DOCUMENTS_MAX: usize = 1_000_000;

/// The kinds a manifest may hold, and what each contributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    GpuClass,
    GpuClaim,
    GpuUsage,
    Namespace,
    ResourceQuota,
    ConfigMap,
    Node,
    Pod,
    VirtualMachineInstance,
}

impl Kind {
    /// Recognises `apiVersion` + `kind`.
    pub fn of(api_version: &str, kind: &str) -> Option<Kind> {
        Some(match (api_version, kind) {
            (keys::API_VERSION, keys::KIND_CLASS) => Kind::GpuClass,
            (keys::API_VERSION, keys::KIND_CLAIM) => Kind::GpuClaim,
            (keys::API_VERSION, keys::KIND_USAGE) => Kind::GpuUsage,
            ("v1", "Namespace") => Kind::Namespace,
            ("v1", "ResourceQuota") => Kind::ResourceQuota,
            ("v1", "ConfigMap") => Kind::ConfigMap,
            ("v1", "Node") => Kind::Node,
            ("v1", "Pod") => Kind::Pod,
            (keys::kubevirt::API_VERSION, keys::kubevirt::KIND_VMI) => Kind::VirtualMachineInstance,
            _ => return None,
        })
    }
}

/// A manifest that cannot be read: where, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct ObjectsError {
    /// 1-based index of the document in the file (items of a `List` count on).
    pub document: usize,
    /// `Kind namespace/name` when known.
    pub object: Option<String>,
    pub field: String,
    pub reason: String,
}

impl fmt::Display for ObjectsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        if let Some(object) = &self.object {
            write!(f, " ({object})")?;
        }
        write!(f, ": field {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for ObjectsError {}

/// What a manifest file held.
#[derive(Debug, Default)]
pub struct Objects {
    pub view: View,
    /// How many objects of each kind were read.
    pub counts: BTreeMap<Kind, usize>,
}

/// Parses multi-document YAML (or JSON) manifests into a view. `kind: List` documents are unpacked.
pub fn load_objects(text: &str) -> Result<Objects, ObjectsError> {
    let mut objects = Objects::default();
    let mut document = 0;
    for yaml in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(yaml).map_err(|e| ObjectsError {
            document: document + 1,
            object: None,
            field: "(document)".to_owned(),
            reason: format!("not valid YAML: {e}"),
        })?;
        if value.is_null() {
            continue; // an empty document, e.g. after a trailing `---`
        }
        let items = match value.get("kind").and_then(Value::as_str) {
            Some("List") => list_items(value, document + 1)?,
            _ => vec![value],
        };
        for item in items {
            document += 1;
            if document > DOCUMENTS_MAX {
                return Err(error(document, None, "(document)", format!("more than {DOCUMENTS_MAX} documents")));
            }
            let kind = add_object(&mut objects.view, &item, document)?;
            *objects.counts.entry(kind).or_insert(0) += 1;
        }
    }
    Ok(objects)
}

fn list_items(list: Value, document: usize) -> Result<Vec<Value>, ObjectsError> {
    match list {
        Value::Object(mut map) => match map.remove("items") {
            Some(Value::Array(items)) => Ok(items),
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(_) => Err(error(document, Some("List".to_owned()), "items", "must be a list of objects")),
        },
        _ => unreachable!("a document with a kind is a map"),
    }
}

fn add_object(view: &mut View, value: &Value, document: usize) -> Result<Kind, ObjectsError> {
    if !value.is_object() {
        return Err(error(document, None, "(document)", "must be a Kubernetes object (a map)"));
    }
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    let kind_name = value.get("kind").and_then(Value::as_str);
    let (Some(api_version), Some(kind_name)) = (api_version, kind_name) else {
        let field = if api_version.is_none() { "apiVersion" } else { "kind" };
        return Err(error(document, None, field, "missing"));
    };
    let name = object_name(kind_name, value);
    let kind = Kind::of(api_version, kind_name).ok_or_else(|| {
        error(
            document,
            Some(name.clone()),
            "kind",
            format!(
                "unknown kind {kind_name:?} of apiVersion {api_version:?}; expected GPUClass, GPUClaim, GPUUsage \
                 ({}), Namespace, ResourceQuota, ConfigMap, Node, Pod (v1) or VirtualMachineInstance ({})",
                keys::API_VERSION,
                keys::kubevirt::API_VERSION
            ),
        )
    })?;
    if value.pointer("/metadata/name").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(error(document, Some(name), "metadata.name", "missing"));
    }
    let wrap = |e: ConvertError| error(document, Some(name.clone()), e.field, e.reason);
    let namespace = value.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    match kind {
        Kind::GpuClass => view.upsert_class(convert::class_from_kube(&typed::<GPUClass>(value).map_err(wrap)?)),
        Kind::GpuClaim => {
            view.upsert_claim(convert::claim_from_kube(&typed::<GPUClaim>(value).map_err(wrap)?, namespace))
        }
        Kind::GpuUsage => drop(typed::<GPUUsage>(value).map_err(wrap)?),
        Kind::Namespace => {
            let ns: Namespace = typed(value).map_err(wrap)?;
            view.set_vgpu_entitled(ns.metadata.name.as_deref().unwrap_or_default(), convert::vgpu_entitled(&ns));
        }
        Kind::ResourceQuota => {
            let quota: ResourceQuota = typed(value).map_err(wrap)?;
            let quota_name = quota.metadata.name.as_deref().unwrap_or_default();
            view.upsert_quota(namespace, quota_name, convert::quota_budgets(&quota).map_err(wrap)?);
        }
        Kind::ConfigMap => {
            let config: ConfigMap = typed(value).map_err(wrap)?;
            if config.metadata.name.as_deref() == Some(keys::SETTINGS_CONFIGMAP) {
                view.settings = convert::settings_from_kube(&config);
            }
        }
        Kind::Node => drop(typed::<Node>(value).map_err(wrap)?),
        Kind::Pod => drop(typed::<Pod>(value).map_err(wrap)?),
        Kind::VirtualMachineInstance => drop(convert::vmi_from_json(value, namespace).map_err(wrap)?),
    }
    Ok(kind)
}

fn typed<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, ConvertError> {
    convert::typed(value)
}

fn object_name(kind: &str, value: &Value) -> String {
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
    match value.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn error(document: usize, object: Option<String>, field: impl Into<String>, reason: impl Into<String>) -> ObjectsError {
    ObjectsError { document, object, field: field.into(), reason: reason.into() }
}
