//! The compact objects: exactly the fields the rules and the reconciler read.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::references::{Attachment, GpuEntry, Read};

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PodAffinity, PodAntiAffinity, Taint, Toleration};

pub use crate::api::{ClaimPhase, GpuMode, Placement, VmiRef};
use crate::keys::{self, kubevirt};
use crate::name::Name;
use crate::variant::Variant;

/// Time as the engine takes it: the caller's clock (virtual in the twin), never read inside.
pub type Time = k8s_openapi::jiff::Timestamp;

/// A GPUClass as the rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct Class {
    pub name: String,
    pub resource_name: String,
    pub mode: GpuMode,
    pub max_count: u32,
    pub node_selector: Arc<BTreeMap<String, String>>,
    pub tolerations: Arc<Vec<Toleration>>,
    pub live_migratable: bool,
    /// How the controller chooses among the nodes that fit.
    pub placement: Placement,
    pub published: Published,
    pub resource_version: String,
}

/// The free units a class offers (its status). Before the controller first publishes, all are zero, so orders wait
/// for the controller rather than pass unchecked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub allocatable_units: u64,
    pub free_units: u64,
    pub largest_free_on_node: u64,
    /// Free units on nodes that cannot take the class's most common claim size.
    pub fragmented_units: u64,
}

/// Why something waits: a PascalCase reason and a sentence, as a condition carries them.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reason {
    pub reason: String,
    pub message: String,
}

impl Reason {
    /// The claim's `Bound` condition once it is bound (True), as the controller writes it.
    pub fn bound(node: &str) -> Reason {
        Reason { reason: "Bound".to_owned(), message: format!("bound to node {node}") }
    }
}

/// A GPUClaim as the rules see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    pub namespace: Name,
    pub name: Name,
    pub uid: Name,
    pub resource_version: Name,
    pub created: Time,
    pub class: Name,
    pub count: u32,
    /// Carries the template mark: the controller ordered it for one VMI run.
    pub template: bool,
    /// The VMI a template claim was ordered for (its controller ownerReference).
    pub owner_vmi: Option<VmiRef>,
    pub phase: ClaimPhase,
    pub node: Option<Name>,
    pub attached_to: Option<VmiRef>,
    /// The claim's Bound condition when it is not bound: why it waits.
    pub pending: Option<Reason>,
    /// Carries the release finalizer.
    pub finalizer: bool,
    /// Has a deletion timestamp (waiting on its finalizer).
    pub deleting: bool,
}

/// A Node as placement sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub name: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// The Ready condition is True. A NotReady node keeps its claims' reservations but takes no new ones.
    pub ready: bool,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Allocatable extended resources (GPUs, vGPU profiles) by resource name, each at most
    /// [`Node::DEVICE_UNITS_MAX`].
    pub devices: BTreeMap<String, u64>,
}

impl Node {
    /// The most units of one device a node may offer: far past any machine (a few dozen GPUs, a few thousand vGPU
    /// profiles), and small enough that a class's totals over a million nodes stay exact in a u64. The readers
    /// refuse more; a class's index adds nodes' units without checking.
    pub const DEVICE_UNITS_MAX: u64 = 1 << 32;
}

/// A pod's phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// Succeeded and Failed pods hold no resources.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// A Pod as the pod webhook and the reconciler see it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub namespace: Name,
    pub name: Name,
    pub uid: Name,
    pub resource_version: Name,
    pub created: Time,
    // The maps a pod is created with and rarely changes are shared (`Arc`, copied on write with `Arc::make_mut`):
    // a pod is copied for every watch event and every write-through of the controller's cache, and copying these
    // maps was most of that cost.
    pub labels: Arc<BTreeMap<String, String>>,
    pub annotations: Arc<BTreeMap<String, String>>,
    pub scheduling_gates: Vec<Name>,
    pub tolerations: Arc<Vec<Toleration>>,
    pub node_selector: Arc<BTreeMap<String, String>>,
    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`; `None` when unset.
    pub required_terms: Option<Arc<Vec<NodeSelectorTerm>>>,
    /// `affinity.podAffinity` and `affinity.podAntiAffinity` (a migration target keeps off its source's node so).
    pub pod_affinity: Option<PodAffinity>,
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    pub node_name: Option<Name>,
    pub phase: PodPhase,
    /// Requests the scheduler counts: containers summed, the largest init container, overhead.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Shared like the maps above: set when the pod is created, never changed after.
    pub devices: Arc<BTreeMap<String, u64>>,
    /// The VMI that controls the pod (launcher, volume binder, migration target).
    pub owner_vmi: Option<VmiRef>,
    /// The placement condition the controller last wrote: why the pod waits.
    pub waiting: Option<Reason>,
    /// What the attachments annotation reads as, kept when the pod was converted or stored in a view, or copied
    /// from its VMI (see [`crate::references`]; [`Pod::attachments`] reads it).
    pub attachments_read: Read<Attachment>,
}

impl Pod {
    /// The attachments annotation, read (`None`: the pod has none; `Err`: why it cannot be read).
    pub fn attachments(&self) -> Option<Result<Cow<'_, [Attachment]>, String>> {
        let text = self.annotations.get(keys::ANNOTATION_ATTACHMENTS)?;
        Some(self.attachments_read.of(text))
    }

    /// Keeps what the attachments annotation reads as, reading it only when it changed since it was read.
    pub fn read_attachments(&mut self) {
        self.attachments_read.keep(self.annotations.get(keys::ANNOTATION_ATTACHMENTS).map(String::as_str));
    }

    /// The required node-affinity terms, if set.
    pub fn required_terms(&self) -> Option<&[NodeSelectorTerm]> {
        self.required_terms.as_deref().map(Vec::as_slice)
    }
}

/// Which pods the placement gate applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRole {
    /// No claims label, or a pod of the VM that is neither of the two below: left alone.
    NotOurs,
    /// A migration target: KubeVirt deletes a target that stays pending, so it is never gated.
    MigrationTarget,
    /// The launcher of a VMI with claims.
    Launcher,
    /// The temporary pod that binds WaitForFirstConsumer volumes: it must land where the launcher will.
    VolumeBinder,
}

impl PodRole {
    /// The roles the placement gate holds: the launcher and the volume binder.
    pub fn is_gated(self) -> bool {
        matches!(self, PodRole::Launcher | PodRole::VolumeBinder)
    }

    /// The roles the placement gate holds under an engine variant: `gate_migration_targets` adds the migration
    /// target. The pod webhook gates these, and the invariant checks follow the pods it gated.
    pub fn is_gated_under(self, variant: &Variant) -> bool {
        self.is_gated() || (variant.gate_migration_targets && self == PodRole::MigrationTarget)
    }
}

/// Tells a pod's role from its labels and annotations alone.
pub fn pod_role(pod: &Pod) -> PodRole {
    // One walk over the handful of labels, matched by key (a length compare rejects most keys without reading
    // them), instead of three ordered lookups that each compare text along the way: a pod's role is asked for at
    // every edit of every pod.
    let (mut claims, mut migration_target, mut launcher) = (false, false, false);
    for (key, value) in pod.labels.iter() {
        match key.as_str() {
            keys::LABEL_CLAIMS => claims = value == keys::TRUE,
            kubevirt::LABEL_MIGRATION_JOB_UID => migration_target = true,
            kubevirt::LABEL_APP => launcher = value == kubevirt::LAUNCHER,
            _ => {}
        }
    }
    if !claims {
        return PodRole::NotOurs;
    }
    if migration_target {
        return PodRole::MigrationTarget;
    }
    if pod.annotations.get(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING).map(String::as_str) == Some(keys::TRUE) {
        return PodRole::VolumeBinder;
    }
    if launcher {
        return PodRole::Launcher;
    }
    PodRole::NotOurs
}

/// A VMI's phase, as KubeVirt reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VmiPhase {
    #[default]
    Pending,
    Scheduling,
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl VmiPhase {
    /// A VMI in these phases ended its run; its attachments are released.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }
}

/// A GPU entry of a VMI's `spec.domain.devices.gpus`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuDevice {
    pub name: String,
    pub device_name: String,
}

/// A VirtualMachineInstance as the VMI webhook and the reconciler see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmi {
    pub namespace: Name,
    pub name: Name,
    pub uid: Name,
    pub resource_version: Name,
    // Shared and copied on write, as a pod's: a VMI is copied for every watch event and most of a copy was these.
    pub labels: Arc<BTreeMap<String, String>>,
    pub annotations: Arc<BTreeMap<String, String>>,
    pub gpus: Arc<Vec<GpuDevice>>,
    pub phase: VmiPhase,
    /// `status.nodeName`: where the VMI runs (the target's node once a migration completes).
    pub node_name: Option<Name>,
    pub deleting: bool,
    /// What the claims annotation reads as, kept when the VMI was converted or rendered ([`Vmi::references`]).
    pub references_read: Read<GpuEntry>,
    /// The attachments annotation as the VMI webhook wrote it, with what it reads as: its pods copy both.
    pub attachments_read: Read<Attachment>,
}

impl Vmi {
    /// The claims annotation, read (`None`: the VMI has none; `Err`: why it cannot be read).
    pub fn references(&self) -> Option<Result<Cow<'_, [GpuEntry]>, String>> {
        let text = self.annotations.get(keys::ANNOTATION_CLAIMS)?;
        Some(self.references_read.of(text))
    }

    /// Keeps what the claims annotation reads as, reading it only when it changed since it was read.
    pub fn read_references(&mut self) {
        self.references_read.keep(self.annotations.get(keys::ANNOTATION_CLAIMS).map(String::as_str));
    }

    pub fn reference(&self) -> VmiRef {
        VmiRef { name: self.name.clone(), uid: self.uid.clone() }
    }
}

/// A GPUUsage record: one attachment of one claim to one VMI run on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub namespace: Name,
    pub name: Name,
    pub resource_version: Name,
    pub claim: Name,
    // Shared like the names: a usage record is copied for every watch event and write-through.
    pub claim_uid: Name,
    pub class: Name,
    pub resource_name: Name,
    pub count: u32,
    pub vmi: VmiRef,
    pub node: Name,
    pub start: Time,
    pub end: Option<Time>,
}

/// The settings ConfigMap's parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The user allowed to create template claims. The order webhook refuses the mark from anyone else, and from
    /// everyone while this is unset, a second line behind the tamper policy.
    pub controller_user: Option<String>,
}
