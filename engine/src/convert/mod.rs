//! The edge between Kubernetes objects and the engine: objects into the compact [`crate::model`], decisions
//! into RFC 6902 JSON patches. Pure functions; the twin never calls them on its hot paths.

mod from_kube;
mod patch;

pub use from_kube::{
    ConvertError, claim_from_kube, class_from_kube, pod_from_json, pod_from_kube, quota_budgets, settings_from_kube,
    typed, vgpu_entitled, vmi_from_json,
};
pub use patch::{pod_json_patch, vmi_json_patch};
