//! A GPUClaim as served.
//!
//! Owned (from the compact claim): `metadata.{name, namespace, uid, resourceVersion, creationTimestamp}`, the
//! template mark label, the release finalizer, `deletionTimestamp`'s presence (the manifest's time, else the
//! creation time: the compact claim keeps none), the VMI ownerReference of a template claim, `spec`, and
//! `status.{phase, nodeName, attachedTo}` with the `Bound` condition (False with why it waits, True once bound, as
//! the controller writes it). Everything else is the manifest's.

use gpuclaim_engine::api::ClaimPhase;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, Reason};
use serde_json::{Value, json};

use super::{Kind, Manifest, Meta, base, get, mark, own_condition, set, set_key, since, timestamp, vmi_owner};

pub fn render(claim: &Claim, manifest: Option<&Manifest>) -> Value {
    let mut object = base(manifest, keys::API_VERSION, keys::KIND_CLAIM, json!({}));
    own(&mut object, claim, manifest);
    object
}

fn own(object: &mut Value, claim: &Claim, manifest: Option<&Manifest>) {
    let meta = Meta {
        namespace: &claim.namespace,
        name: &claim.name,
        uid: Some(&claim.uid),
        resource_version: Some(&claim.resource_version),
        created: Some(claim.created),
    };
    meta.own(object, Kind::Claim, manifest);
    let mark_value = claim.template.then_some(keys::TRUE);
    set_key(object, &["metadata", "labels"], keys::LABEL_TEMPLATE_CLAIM, mark_value);
    mark(object, &["metadata", "finalizers"], keys::FINALIZER_RELEASE, claim.finalizer);
    let deleted = get(object, &["metadata", "deletionTimestamp"]).cloned();
    let deleted = claim.deleting.then(|| deleted.unwrap_or_else(|| timestamp(claim.created).into()));
    set(object, &["metadata", "deletionTimestamp"], deleted);
    if let Some(vmi) = &claim.owner_vmi {
        set(object, &["metadata", "ownerReferences"], Some(vmi_owner(vmi)));
    }
    set(object, &["spec"], Some(json!({"className": claim.class, "count": claim.count})));
    set(object, &["status", "phase"], Some(json!(claim.phase)));
    set(object, &["status", "nodeName"], claim.node.as_deref().map(Value::from));
    set(object, &["status", "attachedTo"], claim.attached_to.as_ref().map(|vmi| json!(vmi)));
    let bound = Reason::bound(claim.node.as_deref().unwrap_or_default());
    let condition = match (&claim.pending, claim.phase) {
        (Some(pending), _) => Some(("False", pending)),
        (None, ClaimPhase::Bound | ClaimPhase::Attached) => Some(("True", &bound)),
        (None, ClaimPhase::Pending) => None,
    };
    let since = |status: &str| since(manifest, keys::CONDITION_BOUND, status, claim.created);
    own_condition(object, &["status", "conditions"], keys::CONDITION_BOUND, condition, since);
}
