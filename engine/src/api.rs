//! The API types of group `gpu.cozystack.io/v1alpha1` (DESIGN.md §2), as the API server stores them.
//!
//! These are wire types: serde, the CRD schema and nothing else. The engine decides on the compact
//! [`crate::model`]; [`crate::convert`] turns these into it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a class's devices reach a VM.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum GpuMode {
    /// Whole physical devices by PCI passthrough; never live-migratable.
    Passthrough,
    /// Mediated vGPU profiles; tenants need the vGPU entitlement.
    #[serde(rename = "VGPU")]
    Vgpu,
}

/// How the controller chooses among the nodes where a claim (or a VM's whole set) fits: a class's placement
/// policy (docs/controller.md, "Placement policies").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum Placement {
    /// The node with the fewest free units that still fit (then by name): keeps large blocks whole.
    #[default]
    BestFit,
    /// The node with the most free units (then by name), as kube-scheduler's LeastAllocated: spreads load and
    /// the blast radius of a node's loss.
    Spread,
    /// The node whose choice least raises the class's expected fragmentation given the claim sizes the class has
    /// seen (FGD, Weng et al., ATC'23, for whole units).
    FragmentationAware,
}

impl Placement {
    pub fn is_best_fit(&self) -> bool {
        *self == Placement::BestFit
    }
}

/// A kind of GPU tenants may order, as one extended resource of the device plugin.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpu.cozystack.io",
    version = "v1alpha1",
    kind = "GPUClass",
    plural = "gpuclasses",
    status = "GPUClassStatus",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name":"Resource","type":"string","jsonPath":".spec.resourceName"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Free","type":"integer","jsonPath":".status.freeUnits"}"#,
    printcolumn = r#"{"name":"LargestFree","type":"integer","jsonPath":".status.largestFreeOnNode"}"#,
    printcolumn = r#"{"name":"Fragmented","type":"integer","jsonPath":".status.fragmentedUnits"}"#,
    printcolumn = r#"{"name":"Placement","type":"string","jsonPath":".spec.placement","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GPUClassSpec {
    /// The extended resource the device plugin publishes, e.g. `nvidia.com/GH100_H100_SXM5_80GB`.
    pub resource_name: String,
    pub mode: GpuMode,
    /// The most units one claim of this class may order.
    #[schemars(range(min = 1))]
    pub max_count: u32,
    /// Nodes this class's devices may be taken from (all labels must match).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints of the GPU nodes that pods of this class must tolerate; the pod webhook adds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Whether a VMI with exactly one unit of this (vGPU) class may live-migrate. Passthrough never does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live_migratable: bool,
    /// How the controller chooses a node among those that fit (default `BestFit`).
    #[serde(default, skip_serializing_if = "Placement::is_best_fit")]
    pub placement: Placement,
}

/// What the controller publishes for the order webhook to read.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUClassStatus {
    /// Units on all nodes this class may use.
    pub allocatable_units: u64,
    /// Units not bound to any claim nor taken by pods outside claims.
    pub free_units: u64,
    /// The most free units on any one node: a claim lands on one node, so this bounds an order.
    pub largest_free_on_node: u64,
    /// Free units on nodes that cannot take the class's most common claim size (of the claims it holds now): units
    /// free but stranded for the claims the class mostly sees.
    #[serde(default)]
    pub fragmented_units: u64,
}

/// What the API server answers a GPUClaim update that changes the spec (the CRD's transition rule).
pub const SPEC_IMMUTABLE_MESSAGE: &str =
    "spec is immutable: a claim's class and count were judged when it was ordered; delete it and order a new one";

/// A tenant's order for GPUs of one class, bound to one node.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "gpu.cozystack.io",
    version = "v1alpha1",
    kind = "GPUClaim",
    plural = "gpuclaims",
    namespaced,
    status = "GPUClaimStatus",
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name":"Class","type":"string","jsonPath":".spec.className"}"#,
    printcolumn = r#"{"name":"Count","type":"integer","jsonPath":".spec.count"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#
)]
#[serde(rename_all = "camelCase")]
// The spec is immutable (DESIGN.md §3, `SpecImmutable`): the order webhook judged it when the claim was created,
// and the controller never looks at a bound claim's spec again. The API server refuses a change by this rule
// before any webhook is called; the order webhook refuses it too, for a cluster whose CRD is older.
#[x_kube(
    crates(kube_core = "::kube_core", schemars = "::schemars", serde = "::serde", serde_json = "::serde_json"),
    validation = Rule::new("self == oldSelf").message(Message::Message(SPEC_IMMUTABLE_MESSAGE.into())).reason(Reason::FieldValueForbidden)
)]
pub struct GPUClaimSpec {
    pub class_name: String,
    #[schemars(range(min = 1))]
    pub count: u32,
}

/// Where a claim is in its life.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum ClaimPhase {
    /// Not bound to a node yet; a condition says why.
    #[default]
    Pending,
    /// Bound to a node (its units reserved there), not attached to a VMI.
    Bound,
    /// Attached to a running VMI on its node.
    Attached,
}

/// The VMI a claim is attached to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmiRef {
    pub name: crate::name::Name,
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub uid: crate::name::Name,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUClaimStatus {
    #[serde(default)]
    pub phase: ClaimPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_to: Option<VmiRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The usage record of one attachment: who used which units where, from when to when.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpu.cozystack.io",
    version = "v1alpha1",
    kind = "GPUUsage",
    plural = "gpuusages",
    namespaced,
    crates(
        kube_core = "::kube_core",
        k8s_openapi = "::k8s_openapi",
        schemars = "::schemars",
        serde = "::serde",
        serde_json = "::serde_json"
    ),
    printcolumn = r#"{"name":"Claim","type":"string","jsonPath":".spec.claim"}"#,
    printcolumn = r#"{"name":"Count","type":"integer","jsonPath":".spec.count"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Start","type":"date","jsonPath":".spec.startTime"}"#,
    printcolumn = r#"{"name":"End","type":"date","jsonPath":".spec.endTime"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GPUUsageSpec {
    pub claim: String,
    pub class_name: String,
    pub resource_name: String,
    pub count: u32,
    pub vmi: VmiRef,
    pub node: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// The CRDs of the API group, generated from these types, as one multi-document YAML (what `gpuclaim crds`
/// prints and the chart stores).
pub fn crds_yaml() -> String {
    use kube_core::CustomResourceExt;
    [GPUClass::crd(), GPUClaim::crd(), GPUUsage::crd()]
        .iter()
        .map(|crd| format!("---\n{}", crate::yaml::to_string(crd)))
        .collect()
}
