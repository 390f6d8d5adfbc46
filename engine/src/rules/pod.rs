//! The pod webhook rule: hold launcher and WaitForFirstConsumer pods at the placement gate.

use std::fmt;

use k8s_openapi::api::core::v1::Toleration;

use crate::keys;
use crate::model::{Pod, View, pod_role};
use crate::variant::Variant;

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

    /// Applies the patch to the compact pod (the twin's path; the live path applies the JSON patch). Consumed: the
    /// tolerations it adds move into the pod instead of being copied once more per launcher.
    pub fn apply(self, pod: &mut Pod) {
        if self.add_gate {
            pod.scheduling_gates.push(keys::GATE_PLACEMENT.into());
        }
        if !self.add_tolerations.is_empty() {
            std::sync::Arc::make_mut(&mut pod.tolerations).extend(self.add_tolerations);
        }
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

/// The pod webhook: a launcher or WaitForFirstConsumer pod with the claims label gets the placement gate and the
/// tolerations of its claims' classes, each at most once (a duplicate gate fails pod validation, and the webhook
/// may be called again). The classes come from the attachments annotation KubeVirt copies from the VMI. A class
/// deleted since the VMI was admitted adds no tolerations; the controller reports it while the pod waits.
pub fn mutate_pod(view: &View, pod: &Pod) -> Result<PodPatch, PodRefusal> {
    mutate_pod_with(view, pod, &Variant::SHIPPED)
}

/// [`mutate_pod`] under an engine variant: `gate_migration_targets` treats a migration target like a launcher;
/// `no_class_tolerations` adds the gate alone.
pub fn mutate_pod_with(view: &View, pod: &Pod, variant: &Variant) -> Result<PodPatch, PodRefusal> {
    if !pod_role(pod).is_gated_under(variant) {
        return Ok(PodPatch::default());
    }
    let attachments = pod.attachments().ok_or(PodRefusal::MissingAttachments)?;
    let attachments = attachments.map_err(|detail| PodRefusal::MalformedAttachments { detail })?;
    let mut patch = PodPatch {
        add_gate: !pod.scheduling_gates.iter().any(|gate| gate == keys::GATE_PLACEMENT),
        add_tolerations: Vec::new(),
    };
    let mut classes: Vec<&str> = attachments.iter().map(|a| a.class.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    if variant.no_class_tolerations {
        return Ok(patch);
    }
    for class in classes.into_iter().filter_map(|name| view.class(name)) {
        for toleration in class.tolerations.iter() {
            if !pod.tolerations.contains(toleration) && !patch.add_tolerations.contains(toleration) {
                patch.add_tolerations.push(toleration.clone());
            }
        }
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::pod_from_json;
    use crate::fixtures::{self, gpu_toleration, platform};
    use crate::keys::kubevirt;
    use crate::model::PodRole;

    const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
    const ATTACHMENTS: &str = r#"[{"claim":"train-a","uid":"u","class":"h100","count":1},{"template":0,"class":"a100-40c","count":1},{"template":1,"class":"h100","count":2}]"#;

    fn launcher() -> Pod {
        pod_from_json(&fixtures::launcher_pod_json("tenant-a", "vm-1", ATTACHMENTS, H100, 3), "tenant-a").unwrap()
    }

    #[test]
    fn a_launcher_gets_the_gate_and_each_class_toleration_once() {
        let patch = mutate_pod(&platform(), &launcher()).unwrap();
        assert!(patch.add_gate);
        // Classes in name order, each toleration once although h100 is attached twice.
        assert_eq!(patch.add_tolerations, vec![gpu_toleration("nvidia.com/A100-40C"), gpu_toleration(H100)]);
    }

    #[test]
    fn mutating_a_mutated_pod_adds_nothing() {
        let mut pod = launcher();
        mutate_pod(&platform(), &pod).unwrap().apply(&mut pod);
        assert_eq!(mutate_pod(&platform(), &pod), Ok(PodPatch::default()));
        assert_eq!(pod.scheduling_gates.iter().filter(|g| *g == keys::GATE_PLACEMENT).count(), 1);
    }

    #[test]
    fn a_toleration_the_pod_already_has_is_not_added_again() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.tolerations).push(gpu_toleration(H100));
        pod.scheduling_gates.push("example.com/other".into());
        let patch = mutate_pod(&platform(), &pod).unwrap();
        assert!(patch.add_gate);
        assert_eq!(patch.add_tolerations, vec![gpu_toleration("nvidia.com/A100-40C")]);
    }

    #[test]
    fn the_volume_binding_pod_is_gated_like_the_launcher() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.labels).remove(kubevirt::LABEL_APP);
        std::sync::Arc::make_mut(&mut pod.annotations)
            .insert(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING.into(), "true".into());
        assert_eq!(pod_role(&pod), PodRole::VolumeBinder);
        assert!(mutate_pod(&platform(), &pod).unwrap().add_gate);
    }

    #[test]
    fn migration_targets_are_left_ungated() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.labels)
            .insert(kubevirt::LABEL_MIGRATION_JOB_UID.into(), "uid-migration-1".into());
        assert_eq!(pod_role(&pod), PodRole::MigrationTarget);
        assert_eq!(mutate_pod(&platform(), &pod), Ok(PodPatch::default()));
    }

    #[test]
    fn the_gate_migration_targets_variant_gates_targets_like_launchers() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.labels)
            .insert(kubevirt::LABEL_MIGRATION_JOB_UID.into(), "uid-migration-1".into());
        let variant = Variant::named("gate-migration-targets").unwrap();
        let patch = mutate_pod_with(&platform(), &pod, &variant).unwrap();
        assert!(patch.add_gate);
        assert_eq!(patch.add_tolerations.len(), 2);
    }

    #[test]
    fn the_no_class_tolerations_variant_adds_the_gate_alone() {
        let variant = Variant::named("no-class-tolerations").unwrap();
        let patch = mutate_pod_with(&platform(), &launcher(), &variant).unwrap();
        assert_eq!(patch, PodPatch { add_gate: true, add_tolerations: Vec::new() });
    }

    #[test]
    fn pods_without_the_claims_label_or_of_another_role_are_left_alone() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.labels).remove(keys::LABEL_CLAIMS);
        assert_eq!(mutate_pod(&platform(), &pod), Ok(PodPatch::default()));
        let mut hotplug = launcher();
        std::sync::Arc::make_mut(&mut hotplug.labels).insert(kubevirt::LABEL_APP.into(), "hotplug-disk".into());
        assert_eq!(pod_role(&hotplug), PodRole::NotOurs);
        assert_eq!(mutate_pod(&platform(), &hotplug), Ok(PodPatch::default()));
    }

    #[test]
    fn a_deleted_class_adds_no_tolerations_but_the_pod_still_waits() {
        let mut view = platform();
        view.remove_class("a100-40c");
        let patch = mutate_pod(&view, &launcher()).unwrap();
        assert!(patch.add_gate);
        assert_eq!(patch.add_tolerations, vec![gpu_toleration(H100)]);
    }

    #[test]
    fn a_claims_pod_without_attachments_is_refused() {
        let mut pod = launcher();
        std::sync::Arc::make_mut(&mut pod.annotations).remove(keys::ANNOTATION_ATTACHMENTS);
        let refusal = mutate_pod(&platform(), &pod).unwrap_err();
        assert_eq!(refusal, PodRefusal::MissingAttachments);
        assert_eq!(
            refusal.to_string(),
            "the pod carries label gpu.cozystack.io/claims but no annotation gpu.cozystack.io/attachments: its VMI \
             was not admitted by the GPU claims webhook"
        );
        std::sync::Arc::make_mut(&mut pod.annotations).insert(keys::ANNOTATION_ATTACHMENTS.into(), "{".into());
        let refusal = mutate_pod(&platform(), &pod).unwrap_err();
        assert_eq!(refusal.reason(), "MalformedAttachments");
        assert_eq!(refusal.code(), 422);
    }

    /// The role read off labels and annotations by ordered lookups, one rule at a time, as the rules are stated.
    fn role_by_lookups(pod: &Pod) -> PodRole {
        let label = |key: &str| pod.labels.get(key).map(String::as_str);
        if label(keys::LABEL_CLAIMS) != Some(keys::TRUE) {
            PodRole::NotOurs
        } else if label(kubevirt::LABEL_MIGRATION_JOB_UID).is_some() {
            PodRole::MigrationTarget
        } else if pod.annotations.get(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING).map(String::as_str)
            == Some(keys::TRUE)
        {
            PodRole::VolumeBinder
        } else if label(kubevirt::LABEL_APP) == Some(kubevirt::LAUNCHER) {
            PodRole::Launcher
        } else {
            PodRole::NotOurs
        }
    }

    #[test]
    fn the_role_walk_agrees_with_the_rules_for_every_label_combination() {
        // Each of the four inputs absent, set to the value that matters, or set to another value: 81 pods.
        let values = |wanted: &'static str| [None, Some(wanted), Some("other")];
        let mut seen = std::collections::BTreeSet::new();
        for claims in values(keys::TRUE) {
            for migration in values("job-1") {
                for app in values(kubevirt::LAUNCHER) {
                    for ephemeral in values(keys::TRUE) {
                        let mut pod = launcher();
                        let labels = std::sync::Arc::make_mut(&mut pod.labels);
                        for (key, value) in [
                            (keys::LABEL_CLAIMS, claims),
                            (kubevirt::LABEL_MIGRATION_JOB_UID, migration),
                            (kubevirt::LABEL_APP, app),
                        ] {
                            labels.remove(key);
                            if let Some(value) = value {
                                labels.insert(key.into(), value.into());
                            }
                        }
                        let annotations = std::sync::Arc::make_mut(&mut pod.annotations);
                        annotations.remove(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING);
                        if let Some(value) = ephemeral {
                            annotations.insert(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING.into(), value.into());
                        }
                        let role = pod_role(&pod);
                        assert_eq!(role, role_by_lookups(&pod), "{claims:?} {migration:?} {app:?} {ephemeral:?}");
                        seen.insert(format!("{role:?}"));
                    }
                }
            }
        }
        assert_eq!(seen.len(), 4, "every role reached: {seen:?}");
    }
}
