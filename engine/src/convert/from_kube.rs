//! Kubernetes objects into the compact model.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod as KubePod, ResourceQuota};
use kube_core::ResourceExt;
use serde::Deserialize;
use serde_json::Value;

use crate::api::{GPUClaim, GPUClass};
use crate::keys;
use crate::model::{Claim, Class, GpuDevice, Pod, Published, Settings, Vmi};

/// An object that cannot be turned into the compact model: which field, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("field {field}: {reason}")]
pub struct ConvertError {
    pub field: String,
    pub reason: String,
}

impl ConvertError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
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

pub fn class_from_kube(class: &GPUClass) -> Class {
    let status = class.status.clone().unwrap_or_default();
    Class {
        name: class.name_any(),
        resource_name: class.spec.resource_name.clone(),
        mode: class.spec.mode,
        max_count: class.spec.max_count,
        node_selector: class.spec.node_selector.clone(),
        tolerations: class.spec.tolerations.clone(),
        live_migratable: class.spec.live_migratable,
        published: Published {
            allocatable_units: status.allocatable_units,
            free_units: status.free_units,
            largest_free_on_node: status.largest_free_on_node,
        },
    }
}

/// `namespace` stands in when the object omits its own (an AdmissionReview's object may).
pub fn claim_from_kube(claim: &GPUClaim, namespace: &str) -> Claim {
    let status = claim.status.clone().unwrap_or_default();
    Claim {
        namespace: claim.namespace().unwrap_or_else(|| namespace.to_owned()),
        name: claim.name_any(),
        uid: claim.uid().unwrap_or_default(),
        class: claim.spec.class_name.clone(),
        count: claim.spec.count,
        template: claim.labels().get(keys::LABEL_TEMPLATE_CLAIM).map(String::as_str) == Some(keys::TRUE),
        phase: status.phase,
        node: status.node_name,
        attached_to: status.attached_to,
        deleting: claim.metadata.deletion_timestamp.is_some(),
    }
}

pub fn vgpu_entitled(namespace: &Namespace) -> bool {
    namespace.labels().get(keys::LABEL_VGPU_ENTITLED).map(String::as_str) == Some(keys::TRUE)
}

/// The GPU budgets a ResourceQuota sets: class → hard units, from its `requests.gpu.cozystack.io/<class>` keys.
pub fn quota_budgets(quota: &ResourceQuota) -> Result<BTreeMap<String, u64>, ConvertError> {
    let mut budgets = BTreeMap::new();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    for (key, quantity) in hard.into_iter().flatten() {
        let Some(class) = key.strip_prefix(keys::QUOTA_KEY_PREFIX) else { continue };
        let units = whole_units(&quantity.0).ok_or_else(|| {
            ConvertError::new(format!("spec.hard[{key}]"), format!("{:?} is not a whole number of units", quantity.0))
        })?;
        budgets.insert(class.to_owned(), units);
    }
    Ok(budgets)
}

/// GPU units are whole devices: a plain integer, or one with a decimal SI suffix that keeps it whole.
fn whole_units(quantity: &str) -> Option<u64> {
    let (digits, scale) = match quantity.as_bytes().last()? {
        b'k' => (&quantity[..quantity.len() - 1], 1_000),
        b'M' => (&quantity[..quantity.len() - 1], 1_000_000),
        b'G' => (&quantity[..quantity.len() - 1], 1_000_000_000),
        _ => (quantity, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

pub fn settings_from_kube(config: &ConfigMap) -> Settings {
    let data = config.data.as_ref();
    Settings {
        template_claim_creator: data
            .and_then(|d| d.get(keys::SETTINGS_TEMPLATE_CLAIM_CREATOR))
            .filter(|v| !v.is_empty())
            .cloned(),
    }
}

pub fn pod_from_kube(pod: &KubePod, namespace: &str) -> Pod {
    let spec = pod.spec.as_ref();
    Pod {
        namespace: pod.namespace().unwrap_or_else(|| namespace.to_owned()),
        name: pod.metadata.name.clone().or_else(|| pod.metadata.generate_name.clone()).unwrap_or_default(),
        labels: pod.labels().clone(),
        annotations: pod.annotations().clone(),
        scheduling_gates: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|gates| gates.iter().map(|g| g.name.clone()).collect())
            .unwrap_or_default(),
        tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
    }
}

pub fn pod_from_json(object: &Value, namespace: &str) -> Result<Pod, ConvertError> {
    Ok(pod_from_kube(&typed::<KubePod>(object)?, namespace))
}

/// Only the parts of a KubeVirt VMI the webhook reads (KubeVirt's types are not ours to vendor).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VmiWire {
    #[serde(default)]
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: VmiSpecWire,
}

#[derive(Deserialize)]
struct VmiSpecWire {
    domain: DomainWire,
}

#[derive(Deserialize)]
struct DomainWire {
    #[serde(default)]
    devices: DevicesWire,
}

#[derive(Deserialize, Default)]
struct DevicesWire {
    #[serde(default)]
    gpus: Vec<GpuWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GpuWire {
    name: String,
    device_name: String,
}

pub fn vmi_from_json(object: &Value, namespace: &str) -> Result<Vmi, ConvertError> {
    let wire: VmiWire = typed(object)?;
    let meta = wire.metadata;
    Ok(Vmi {
        namespace: meta.namespace.unwrap_or_else(|| namespace.to_owned()),
        name: meta.name.or(meta.generate_name).unwrap_or_default(),
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        gpus: wire
            .spec
            .domain
            .devices
            .gpus
            .into_iter()
            .map(|g| GpuDevice { name: g.name, device_name: g.device_name })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_missing_field_is_named_by_its_whole_path() {
        let claim = json!({"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
            "metadata": {"name": "a"}, "spec": {"className": "h100"}});
        let error = typed::<GPUClaim>(&claim).unwrap_err();
        assert_eq!(error, ConvertError::new("spec.count", "missing field `count`"));
        let error = typed::<GPUClaim>(&json!({"metadata": {"name": "a"}})).unwrap_err();
        assert_eq!(error.field, "spec");
    }

    #[test]
    fn a_wrong_type_is_named_by_its_path() {
        let claim = json!({"metadata": {"name": "a"}, "spec": {"className": "h100", "count": "two"}});
        let error = typed::<GPUClaim>(&claim).unwrap_err();
        assert_eq!(error.field, "spec.count");
        assert!(error.reason.starts_with("invalid type: string \"two\""), "{}", error.reason);
    }

    #[test]
    fn quota_budgets_read_whole_units_and_refuse_fractions() {
        let quota: ResourceQuota = serde_json::from_value(json!({"metadata": {"name": "q"}, "spec": {"hard": {
            "requests.gpu.cozystack.io/h100": "4", "requests.gpu.cozystack.io/l40s": "1k", "requests.cpu": "10"}}}))
        .unwrap();
        assert_eq!(quota_budgets(&quota).unwrap(), BTreeMap::from([("h100".into(), 4), ("l40s".into(), 1000)]));
        let quota: ResourceQuota = serde_json::from_value(
            json!({"metadata": {"name": "q"}, "spec": {"hard": {"requests.gpu.cozystack.io/h100": "1500m"}}}),
        )
        .unwrap();
        assert_eq!(
            quota_budgets(&quota).unwrap_err().to_string(),
            "field spec.hard[requests.gpu.cozystack.io/h100]: \"1500m\" is not a whole number of units"
        );
    }
}
