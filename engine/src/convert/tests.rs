//! Conversion errors name their field.

use serde_json::json;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuota;

use super::*;
use crate::api::GPUClaim;

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
fn a_node_offering_more_device_units_than_any_machine_is_refused() {
    // Two such nodes overflowed a class's totals of free and allocatable units (found by the fuzz harness).
    let node = |units: &str| -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({"metadata": {"name": "gpu-1"},
            "status": {"allocatable": {"nvidia.com/H100": units}}}))
        .unwrap()
    };
    assert_eq!(node_from_kube(&node("4294967296")).unwrap().devices["nvidia.com/H100"], 1 << 32);
    let error = node_from_kube(&node("18446744073709551615")).unwrap_err();
    assert_eq!(error.field, "status.allocatable[nvidia.com/H100]");
    assert_eq!(error.reason, "18446744073709551615 units is more than the 4294967296 one node may offer");
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
        "field spec.hard[requests.gpu.cozystack.io/h100]: \"1500m\": not a whole number (GPU units are whole)"
    );
}
