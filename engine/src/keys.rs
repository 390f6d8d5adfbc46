//! Every name gpuclaim writes or reads on Kubernetes objects, in one place (DESIGN.md §2).
//!
//! Other crates, the chart and the docs take these from here; a test checks the chart's copies against them.

/// The API group of GPUClass, GPUClaim and GPUUsage.
pub const GROUP: &str = "gpu.cozystack.io";
/// The served and stored version of the API group.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as objects carry it in `apiVersion`.
pub const API_VERSION: &str = "gpu.cozystack.io/v1alpha1";

/// Kinds of the API group.
pub const KIND_CLASS: &str = "GPUClass";
pub const KIND_CLAIM: &str = "GPUClaim";
pub const KIND_USAGE: &str = "GPUUsage";

/// Label on a template claim (value [`TRUE`]). Only the controller may set it: the tamper policy refuses it from
/// anyone else. It names no VMI because a VMI name can exceed a label value's 63 characters.
pub const LABEL_TEMPLATE_CLAIM: &str = "gpu.cozystack.io/template-claim";
/// Label on a VMI template, VMI and launcher pod whose GPUs are claim references (value [`TRUE`]); the VMI and pod
/// webhooks select objects by it.
pub const LABEL_CLAIMS: &str = "gpu.cozystack.io/claims";
/// Annotation with the JSON list of references the VM rendered (`[{"claim":"a"},{"claimTemplate":{...}}]`).
pub const ANNOTATION_CLAIMS: &str = "gpu.cozystack.io/claims";
/// Annotation the VMI webhook writes: the resolved set (JSON list of attachments). KubeVirt copies VMI annotations
/// onto the launcher pod, so the pod webhook reads the classes from there without a VMI cache.
pub const ANNOTATION_ATTACHMENTS: &str = "gpu.cozystack.io/attachments";
/// Condition type on a claim: False with a reason while it waits for a node (BudgetExceeded, NoCapacity, ...).
pub const CONDITION_BOUND: &str = "Bound";
/// Condition type on a gated pod: False with a reason naming what does not fit yet.
pub const CONDITION_PLACEMENT: &str = "gpu.cozystack.io/Placement";
/// Finalizer that keeps an attached claim until its VMI ends.
pub const FINALIZER_RELEASE: &str = "gpu.cozystack.io/release";
/// Scheduling gate the pod webhook adds and the controller removes when it pins the pod.
pub const GATE_PLACEMENT: &str = "gpu.cozystack.io/placement";
/// Prefix of tenant ResourceQuota `spec.hard` keys: `requests.gpu.cozystack.io/<class>`.
pub const QUOTA_KEY_PREFIX: &str = "requests.gpu.cozystack.io/";
/// Namespace label, set by the platform, that entitles a tenant to vGPU classes (value [`TRUE`]).
pub const LABEL_VGPU_ENTITLED: &str = "gpu.cozystack.io/vgpu-entitled";
/// The settings ConfigMap in the controller's namespace: the policies' parameters.
pub const SETTINGS_CONFIGMAP: &str = "gpu-claims-settings";
/// The namespace the chart installs the controller in, unless told otherwise; the settings ConfigMap lives there.
pub const DEFAULT_CONTROLLER_NAMESPACE: &str = "cozy-gpuclaim";
/// Settings key: the user the controller acts as (`system:serviceaccount:<ns>:<name>`): the only one allowed to
/// write the template mark, and trusted by the admission policies with what only the controller writes.
pub const SETTINGS_CONTROLLER_USER: &str = "controllerUser";
/// Settings key: KubeVirt's controllers' users, comma-separated (they copy the attachments annotation onto the
/// launcher and update VMIs); the admission policies trust them.
pub const SETTINGS_KUBEVIRT_USERS: &str = "kubevirtUsers";
/// Settings key: the platform administrators' groups, comma-separated: they alone set [`LABEL_VGPU_ENTITLED`].
pub const SETTINGS_PLATFORM_ADMIN_GROUPS: &str = "platformAdminGroups";
/// The platform's cluster-wide values block, and the switch in it that enables claim references in the VM render.
pub const CLUSTER_VALUES: &str = "_cluster";
pub const CLUSTER_SWITCH: &str = "gpu-claims-enabled";
/// Names of the GPU entries the VMI webhook writes: `gpuclaim-<unit index>`.
pub const GPU_ENTRY_PREFIX: &str = "gpuclaim-";
/// The value every boolean label and annotation of ours takes.
pub const TRUE: &str = "true";

/// Returns the ResourceQuota `spec.hard` key that budgets `class`.
pub fn quota_key(class: &str) -> String {
    format!("{QUOTA_KEY_PREFIX}{class}")
}

/// Names KubeVirt and Kubernetes own; we only read them.
pub mod kubevirt {
    /// Launcher pods carry `kubevirt.io: virt-launcher`.
    pub const LABEL_APP: &str = "kubevirt.io";
    pub const LAUNCHER: &str = "virt-launcher";
    /// The UID of the VMI a launcher pod serves.
    pub const LABEL_CREATED_BY: &str = "kubevirt.io/created-by";
    /// Migration target pods carry the migration's UID; KubeVirt deletes a target that stays pending.
    pub const LABEL_MIGRATION_JOB_UID: &str = "kubevirt.io/migrationJobUID";
    /// The temporary pod that binds WaitForFirstConsumer volumes carries this annotation (value `"true"`).
    pub const ANNOTATION_EPHEMERAL_PROVISIONING: &str = "kubevirt.io/ephemeral-provisioning";
    /// nodeSelector KubeVirt puts on every launcher pod.
    pub const LABEL_SCHEDULABLE: &str = "kubevirt.io/schedulable";
    pub const API_VERSION: &str = "kubevirt.io/v1";
    pub const KIND_VMI: &str = "VirtualMachineInstance";
}
