//! What the reconciler asks the world to do: data, applied in order by the twin or the live adapter.
//!
//! Every write carries its precondition (the resourceVersion it was decided on, or the uid for a delete); a
//! writer that meets a conflict refreshes its cache and reconciles again. Within one pass an object gets at most
//! one write per subresource; an [`Action::UpdateClaim`] with both parts is written metadata first, then status
//! with the resourceVersion the first write returned.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeSelectorTerm;

use crate::model::{ClaimPhase, Name, Published, Reason, Time, Usage, VmiRef};

/// A namespaced object's name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub namespace: Name,
    pub name: Name,
}

impl ObjectRef {
    /// Shared names are shared, not copied (`&Name`); a `&str` is copied once.
    pub fn new(namespace: impl Into<Name>, name: impl Into<Name>) -> Self {
        ObjectRef { namespace: namespace.into(), name: name.into() }
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.namespace)?;
        f.write_str("/")?;
        f.write_str(&self.name)
    }
}

/// A claim's status as the controller writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimStatus {
    pub phase: ClaimPhase,
    pub node: Option<Name>,
    pub attached_to: Option<VmiRef>,
    /// The Bound condition's reason while Pending.
    pub pending: Option<Reason>,
}

/// The kinds an event may be recorded on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    Claim,
    Pod,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create a template claim (mark label, release finalizer, controller ownerReference to the VMI) for one run,
    /// then write its status with the resourceVersion the create returned.
    CreateClaim { claim: ObjectRef, class: String, count: u32, owner: VmiRef, status: ClaimStatus },
    /// Set or clear the release finalizer and/or write the status of a claim.
    UpdateClaim { claim: ObjectRef, precondition: Name, finalizer: Option<bool>, status: Option<ClaimStatus> },
    /// Delete a template claim whose run ended (after its finalizer was removed in the same pass).
    DeleteClaim { claim: ObjectRef, uid: Name },
    /// Create a usage record (owned by its claim).
    OpenUsage { usage: Usage },
    /// Close a usage record at `end`.
    CloseUsage { usage: ObjectRef, precondition: Name, end: Time },
    /// In one pod update: remove the placement gate and set the required node-affinity terms to `terms` (the pod's
    /// own terms with the pin appended to each).
    PinAndUngate { pod: ObjectRef, precondition: Name, node: String, terms: Arc<Vec<NodeSelectorTerm>> },
    /// Variant `two_update_pin` only: the first of two pod updates, removing the placement gate alone.
    Ungate { pod: ObjectRef, precondition: Name },
    /// Variant `two_update_pin` only: the second update, setting the pinned terms, written on the resourceVersion the
    /// [`Action::Ungate`] before it returned (a client chaining its two writes). The API server refuses it: the pod
    /// is no longer gated, so its node affinity may not change.
    Pin { pod: ObjectRef, node: String, terms: Arc<Vec<NodeSelectorTerm>> },
    /// Write the pod's placement condition: why it still waits.
    SetPodWaiting { pod: ObjectRef, precondition: Name, waiting: Reason },
    /// Write a class's published free units.
    PublishClass { class: String, precondition: Name, published: Published },
    /// Record a Kubernetes Event (PascalCase reason, short note).
    Event { kind: EventKind, object: ObjectRef, reason: &'static str, message: String },
}

impl Action {
    /// The node a pod update pins a pod to.
    pub fn pinned_node(&self) -> Option<&str> {
        match self {
            Action::PinAndUngate { node, .. } | Action::Pin { node, .. } => Some(node),
            _ => None,
        }
    }

    /// The order writes go out in: claims before pods, so a pod is never pinned to a node its claims do not hold,
    /// and a controller that stops between two writes finds a state it resumes from.
    pub(super) fn rank(&self) -> u8 {
        match self {
            Action::CreateClaim { .. } => 0,
            Action::UpdateClaim { .. } => 1,
            Action::DeleteClaim { .. } => 2,
            Action::CloseUsage { .. } => 3,
            Action::OpenUsage { .. } => 4,
            Action::PinAndUngate { .. } | Action::Ungate { .. } | Action::Pin { .. } => 5,
            Action::SetPodWaiting { .. } => 6,
            Action::PublishClass { .. } => 7,
            Action::Event { .. } => 8,
        }
    }
}
