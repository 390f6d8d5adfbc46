//! Our own kinds (GPUClass, GPUClaim, GPUUsage) into the compact model, and a usage record back into its object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time as KubeTime};
use kube_core::ResourceExt;

use super::{controller_owner, false_condition, time_of};
use crate::api::{GPUClaim, GPUClass, GPUUsage, GPUUsageSpec};
use crate::keys;
use crate::model::{Claim, Class, Name, Published, Usage};

pub fn class_from_kube(class: &GPUClass) -> Class {
    let status = class.status.clone().unwrap_or_default();
    Class {
        name: class.name_any(),
        resource_version: class.resource_version().unwrap_or_default(),
        resource_name: class.spec.resource_name.clone(),
        mode: class.spec.mode,
        max_count: class.spec.max_count,
        node_selector: class.spec.node_selector.clone().into(),
        tolerations: class.spec.tolerations.clone().into(),
        live_migratable: class.spec.live_migratable,
        placement: class.spec.placement,
        published: Published {
            allocatable_units: status.allocatable_units,
            free_units: status.free_units,
            largest_free_on_node: status.largest_free_on_node,
            fragmented_units: status.fragmented_units,
        },
    }
}

/// `namespace` stands in when the object omits its own (an AdmissionReview's object may).
pub fn claim_from_kube(claim: &GPUClaim, namespace: &str) -> Claim {
    let status = claim.status.clone().unwrap_or_default();
    let conditions = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), Some(c.reason.as_str()), Some(c.message.as_str())));
    Claim {
        namespace: claim.namespace().unwrap_or_else(|| namespace.to_owned()).into(),
        name: claim.name_any().into(),
        uid: claim.uid().unwrap_or_default().into(),
        resource_version: claim.resource_version().unwrap_or_default().into(),
        created: time_of(claim.metadata.creation_timestamp.as_ref()),
        class: claim.spec.class_name.as_str().into(),
        count: claim.spec.count,
        template: claim.labels().get(keys::LABEL_TEMPLATE_CLAIM).map(String::as_str) == Some(keys::TRUE),
        owner_vmi: controller_owner(&claim.metadata, keys::kubevirt::KIND_VMI),
        phase: status.phase,
        node: status.node_name.clone().map(Name::from),
        attached_to: status.attached_to.clone(),
        pending: false_condition(conditions, keys::CONDITION_BOUND),
        finalizer: claim.finalizers().iter().any(|f| f == keys::FINALIZER_RELEASE),
        deleting: claim.metadata.deletion_timestamp.is_some(),
    }
}

pub fn usage_from_kube(usage: &GPUUsage, namespace: &str) -> Usage {
    let spec = &usage.spec;
    Usage {
        namespace: usage.namespace().unwrap_or_else(|| namespace.to_owned()).into(),
        name: usage.name_any().into(),
        resource_version: usage.resource_version().unwrap_or_default().into(),
        claim: spec.claim.clone().into(),
        claim_uid: usage
            .owner_references()
            .iter()
            .find(|o| o.kind == keys::KIND_CLAIM)
            .map(|o| o.uid.as_str())
            .unwrap_or_default()
            .into(),
        class: spec.class_name.as_str().into(),
        resource_name: spec.resource_name.as_str().into(),
        count: spec.count,
        vmi: spec.vmi.clone(),
        node: spec.node.clone().into(),
        start: spec.start_time.0,
        end: spec.end_time.as_ref().map(|t| t.0),
    }
}

/// A usage record as the controller creates it, owned by its claim (`claim_uid`): [`usage_from_kube`] reads it back
/// as `usage` (with that uid).
pub fn usage_object(usage: &Usage, claim_uid: &str) -> GPUUsage {
    let spec = GPUUsageSpec {
        claim: usage.claim.to_string(),
        class_name: usage.class.to_string(),
        resource_name: usage.resource_name.to_string(),
        count: usage.count,
        vmi: usage.vmi.clone(),
        node: usage.node.to_string(),
        start_time: KubeTime(usage.start),
        end_time: usage.end.map(KubeTime),
    };
    let mut object = GPUUsage::new(&usage.name, spec);
    object.metadata.namespace = Some(usage.namespace.to_string());
    object.metadata.owner_references = Some(vec![OwnerReference {
        api_version: keys::API_VERSION.to_owned(),
        kind: keys::KIND_CLAIM.to_owned(),
        name: usage.claim.to_string(),
        uid: claim_uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    object
}
