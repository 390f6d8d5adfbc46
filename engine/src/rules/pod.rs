//! The pod webhook rule: hold launcher and WaitForFirstConsumer pods at the placement gate.

use std::fmt;

use k8s_openapi::api::core::v1::Toleration;

use crate::keys::{self, kubevirt};
use crate::model::{Pod, View};
use crate::references::parse_attachments;

use super::Refusal;

/// What the pod webhook changes. Empty when the pod is not ours or already carries both.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodPatch {
    /// Append the placement gate.
    pub add_gate: bool,
    /// Append these tolerations (those of the claims' classes the pod lacks), in class order.
    pub add_tolerations: Vec<Toleration>,
}

impl PodPatch {
    pub fn is_empty(&self) -> bool {
        !self.add_gate && self.add_tolerations.is_empty()
    }

    /// Applies the patch to the compact pod (the twin's path; the live path applies the JSON patch).
    pub fn apply(&self, pod: &mut Pod) {
        if self.add_gate {
            pod.scheduling_gates.push(keys::GATE_PLACEMENT.to_owned());
        }
        pod.tolerations.extend(self.add_tolerations.iter().cloned());
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRefusal {
    /// A claims pod whose VMI was not admitted by the VMI webhook (no attachments were copied onto it).
    MissingAttachments,
    MalformedAttachments {
        detail: String,
    },
}

impl fmt::Display for PodRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodRefusal::MissingAttachments => write!(
                f,
                "the pod carries label {} but no annotation {}: its VMI was not admitted by the GPU claims webhook",
                keys::LABEL_CLAIMS,
                keys::ANNOTATION_ATTACHMENTS
            ),
            PodRefusal::MalformedAttachments { detail } => {
                write!(f, "annotation {} cannot be read: {detail}", keys::ANNOTATION_ATTACHMENTS)
            }
        }
    }
}

impl Refusal for PodRefusal {
    fn reason(&self) -> &'static str {
        match self {
            PodRefusal::MissingAttachments => "MissingAttachments",
            PodRefusal::MalformedAttachments { .. } => "MalformedAttachments",
        }
    }

    fn code(&self) -> u16 {
        422
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

/// Tells a pod's role from its labels and annotations alone.
pub fn pod_role(pod: &Pod) -> PodRole {
    if pod.labels.get(keys::LABEL_CLAIMS).map(String::as_str) != Some(keys::TRUE) {
        return PodRole::NotOurs;
    }
    if pod.labels.contains_key(kubevirt::LABEL_MIGRATION_JOB_UID) {
        return PodRole::MigrationTarget;
    }
    if pod.annotations.get(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING).map(String::as_str) == Some(keys::TRUE) {
        return PodRole::VolumeBinder;
    }
    if pod.labels.get(kubevirt::LABEL_APP).map(String::as_str) == Some(kubevirt::LAUNCHER) {
        return PodRole::Launcher;
    }
    PodRole::NotOurs
}

/// The pod webhook: a launcher or WaitForFirstConsumer pod with the claims label gets the placement gate and the
/// tolerations of its claims' classes, each at most once (a duplicate gate fails pod validation, and the webhook
/// may be called again). The classes come from the attachments annotation KubeVirt copies from the VMI. A class
/// deleted since the VMI was admitted adds no tolerations; the controller reports it while the pod waits.
pub fn mutate_pod(view: &View, pod: &Pod) -> Result<PodPatch, PodRefusal> {
    if !matches!(pod_role(pod), PodRole::Launcher | PodRole::VolumeBinder) {
        return Ok(PodPatch::default());
    }
    let json = pod.annotations.get(keys::ANNOTATION_ATTACHMENTS).ok_or(PodRefusal::MissingAttachments)?;
    let attachments =
        parse_attachments(json).map_err(|e| PodRefusal::MalformedAttachments { detail: e.to_string() })?;
    let mut patch = PodPatch {
        add_gate: !pod.scheduling_gates.iter().any(|gate| gate == keys::GATE_PLACEMENT),
        add_tolerations: Vec::new(),
    };
    let mut classes: Vec<&str> = attachments.iter().map(|a| a.class.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    for class in classes.into_iter().filter_map(|name| view.class(name)) {
        for toleration in &class.tolerations {
            if !pod.tolerations.contains(toleration) && !patch.add_tolerations.contains(toleration) {
                patch.add_tolerations.push(toleration.clone());
            }
        }
    }
    Ok(patch)
}
