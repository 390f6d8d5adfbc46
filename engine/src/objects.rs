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
use crate::message::readable;
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
            write!(f, " ({})", readable(object))?;
        }
        write!(f, ": field {}: {}", readable(&self.field), readable(&self.reason))
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

/// Parses multi-document YAML (or JSON) manifests into a view. `kind: List` documents are unpacked. The settings
/// ConfigMap is read from `controller_namespace` only: one of that name elsewhere is a tenant's, not ours.
pub fn load_objects(text: &str, controller_namespace: &str) -> Result<Objects, ObjectsError> {
    let mut objects = Objects::default();
    let mut document = 0;
    for value in crate::yaml::documents(text) {
        let value = value.map_err(|e| ObjectsError {
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
            let kind = add_object(&mut objects.view, &item, document, controller_namespace)?;
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

fn add_object(
    view: &mut View,
    value: &Value,
    document: usize,
    controller_namespace: &str,
) -> Result<Kind, ObjectsError> {
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
        Kind::GpuUsage => {
            view.upsert_usage(convert::usage_from_kube(&typed::<GPUUsage>(value).map_err(wrap)?, namespace))
        }
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
            if config.metadata.name.as_deref() == Some(keys::SETTINGS_CONFIGMAP) && namespace == controller_namespace {
                view.settings = convert::settings_from_kube(&config);
            }
        }
        Kind::Node => view.upsert_node(convert::node_from_kube(&typed::<Node>(value).map_err(wrap)?).map_err(wrap)?),
        Kind::Pod => {
            view.upsert_pod(convert::pod_from_kube(&typed::<Pod>(value).map_err(wrap)?, namespace).map_err(wrap)?)
        }
        Kind::VirtualMachineInstance => view.upsert_vmi(convert::vmi_from_json(value, namespace).map_err(wrap)?),
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

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "cozy-gpu";

    fn load_objects_in(text: &str) -> Result<Objects, ObjectsError> {
        load_objects(text, NS)
    }

    const CLASS: &str = "apiVersion: gpu.cozystack.io/v1alpha1\nkind: GPUClass\nmetadata: {name: h100}\n\
                         spec: {resourceName: nvidia.com/H100, mode: Passthrough, maxCount: 8}\n";

    #[test]
    fn documents_and_list_items_fill_the_view() {
        let text = format!(
            "{CLASS}---\n---\napiVersion: v1\nkind: List\nitems:\n\
             - {{apiVersion: v1, kind: Namespace, metadata: {{name: t, labels: {{gpu.cozystack.io/vgpu-entitled: 'true'}}}}}}\n\
             - {{apiVersion: v1, kind: ResourceQuota, metadata: {{name: q, namespace: t}}, spec: {{hard: {{requests.gpu.cozystack.io/h100: '2'}}}}}}\n\
             - {{apiVersion: gpu.cozystack.io/v1alpha1, kind: GPUClaim, metadata: {{name: c, namespace: t}}, spec: {{className: h100, count: 1}}}}\n\
             - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: gpu-claims-settings, namespace: cozy-gpu}}, data: {{controllerUser: 'system:serviceaccount:cozy-gpu:gpuclaim'}}}}\n"
        );
        let objects = load_objects(&text, NS).unwrap();
        let view = &objects.view;
        assert_eq!(view.class("h100").unwrap().max_count, 8);
        let tenant = view.tenant("t").unwrap();
        assert!(tenant.vgpu_entitled);
        assert_eq!((tenant.budget("h100"), tenant.units_used("h100")), (Some(2), 1));
        assert_eq!(view.settings.controller_user.as_deref(), Some("system:serviceaccount:cozy-gpu:gpuclaim"));
        assert_eq!(objects.counts.values().sum::<usize>(), 5);
        // The same ConfigMap in a tenant's namespace is not the settings.
        let tenant_settings = text.replace("namespace: cozy-gpu", "namespace: t");
        assert_eq!(load_objects(&tenant_settings, NS).unwrap().view.settings, Default::default());
    }

    #[test]
    fn an_unknown_kind_names_the_document_and_the_kinds_expected() {
        let text =
            format!("{CLASS}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: t}}\n");
        let error = load_objects(&text, NS).unwrap_err();
        assert_eq!(
            (error.document, error.object.as_deref(), error.field.as_str()),
            (2, Some("Deployment t/web"), "kind")
        );
        assert!(error.to_string().starts_with(
            "document 2 (Deployment t/web): field kind: unknown kind \"Deployment\" of apiVersion \"apps/v1\""
        ));
    }

    #[test]
    fn a_missing_field_names_its_path() {
        let error = load_objects_in(&CLASS.replace(", maxCount: 8", "")).unwrap_err();
        assert_eq!(error.to_string(), "document 1 (GPUClass h100): field spec.maxCount: missing field `maxCount`");
        let error = load_objects_in("apiVersion: v1\nkind: Namespace\nmetadata: {}\n").unwrap_err();
        assert_eq!(error.to_string(), "document 1 (Namespace <unnamed>): field metadata.name: missing");
        let error = load_objects_in("kind: Namespace\n").unwrap_err();
        assert_eq!(error.to_string(), "document 1: field apiVersion: missing");
    }

    #[test]
    fn bad_yaml_names_the_document_and_the_line() {
        let error = load_objects_in(&format!("{CLASS}---\nkind: [unclosed\n")).unwrap_err();
        assert_eq!((error.document, error.field.as_str()), (2, "(document)"));
        assert!(error.reason.contains("line"), "{}", error.reason);
        let error = load_objects_in("- just\n- a list\n").unwrap_err();
        assert_eq!(error.to_string(), "document 1: field (document): must be a Kubernetes object (a map)");
    }
}
