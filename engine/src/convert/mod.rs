//! The edge between Kubernetes objects and the engine: objects into the compact [`crate::model`], decisions
//! into RFC 6902 JSON patches and the usage records the controller creates. Pure functions; the twin never calls
//! them on its hot paths.

mod core;
mod crd;
mod patch;
mod vmi;

use serde::Deserialize;
use serde_json::Value;

use crate::message::readable;

pub use self::core::{node_from_kube, pod_from_json, pod_from_kube, quota_budgets, settings_from_kube, vgpu_entitled};
pub use crd::{claim_from_kube, class_from_kube, usage_from_kube, usage_object};
pub use patch::{pod_json_patch, vmi_json_patch};
pub use vmi::vmi_from_json;

/// An object that cannot be turned into the compact model: which field, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("field {}: {}", readable(.field), readable(.reason))]
pub struct ConvertError {
    pub field: String,
    pub reason: String,
}

impl ConvertError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConvertError { field: field.into(), reason: reason.into() }
    }
}

/// Deserializes `value` as `T`, naming the field that does not fit.
pub fn typed<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, ConvertError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.into_inner().to_string();
        // serde names a missing field in its message, at the path of the map that lacks it: name it in the path.
        let missing = reason.strip_prefix("missing field `").and_then(|rest| rest.split('`').next());
        let field = match (path.as_str(), missing) {
            (".", Some(name)) => name.to_owned(),
            (_, Some(name)) => format!("{path}.{name}"),
            (".", None) => "(object)".to_owned(),
            (_, None) => path,
        };
        ConvertError::new(field, reason)
    })
}

/// The controller ownerReference of `kind`, as a VMI reference (name + uid).
fn controller_owner(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
) -> Option<crate::model::VmiRef> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true) && owner.kind == kind)
        .map(|owner| crate::model::VmiRef { name: owner.name.as_str().into(), uid: owner.uid.clone().into() })
}

/// A condition of `type_` whose status is False, as a wait reason.
fn false_condition<'a>(
    conditions: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>, Option<&'a str>)>,
    type_: &str,
) -> Option<crate::model::Reason> {
    conditions.into_iter().find(|(t, status, _, _)| *t == type_ && *status == "False").map(|(_, _, reason, message)| {
        crate::model::Reason {
            reason: reason.unwrap_or_default().to_owned(),
            message: message.unwrap_or_default().to_owned(),
        }
    })
}

fn time_of(time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> crate::model::Time {
    time.map(|t| t.0).unwrap_or_default()
}

#[cfg(test)]
mod tests;
