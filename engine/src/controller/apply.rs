//! Applying actions to a view: the effect a perfect API server gives them (preconditions checked, finalizers
//! honoured, resourceVersions bumped). Tests use it to check that reconcile is idempotent; the twin's API server
//! gives the same effects with its own timing and faults.

use super::actions::{Action, ObjectRef};
use crate::keys;
use crate::model::{Claim, Name, Time, View};

/// A write whose precondition no longer holds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("conflict writing {object}: {reason}")]
pub struct Conflict {
    pub object: String,
    pub reason: String,
}

fn conflict(kind: &str, object: &ObjectRef, reason: &str) -> Conflict {
    Conflict { object: format!("{kind} {object}"), reason: reason.to_owned() }
}

fn bump(resource_version: &str) -> Name {
    Name::from(itoa::Buffer::new().format(resource_version.parse::<u64>().unwrap_or(0) + 1))
}

/// Applies `actions` in order at `now`. Stops at the first conflict, as a writer would (it then refreshes and
/// reconciles again).
pub fn apply(view: &mut View, actions: &[Action], now: Time) -> Result<(), Conflict> {
    for action in actions {
        apply_one(view, action, now)?;
    }
    Ok(())
}

fn apply_one(view: &mut View, action: &Action, now: Time) -> Result<(), Conflict> {
    match action {
        Action::CreateClaim { claim, .. } => {
            if view.claim(&claim.namespace, &claim.name).is_some() {
                return Err(conflict("GPUClaim", claim, "already exists"));
            }
            view.upsert_claim(created_claim(action, now).expect("a CreateClaim creates a claim"));
        }
        Action::UpdateClaim { claim: key, precondition, finalizer, status } => {
            let claim = claimed(view, key, precondition)?;
            if claim.deleting && *finalizer == Some(false) {
                view.remove_claim(&key.namespace, &key.name);
                return Ok(());
            }
            view.edit_claim(&key.namespace, &key.name, |claim| {
                if let Some(finalizer) = finalizer {
                    claim.finalizer = *finalizer;
                }
                if let Some(status) = status {
                    claim.phase = status.phase;
                    claim.node.clone_from(&status.node);
                    claim.attached_to.clone_from(&status.attached_to);
                    claim.pending.clone_from(&status.pending);
                }
                claim.resource_version = bump(&claim.resource_version);
            });
        }
        Action::DeleteClaim { claim: key, uid } => {
            let Some(mut claim) = view.claim(&key.namespace, &key.name).cloned() else {
                return Err(conflict("GPUClaim", key, "not found"));
            };
            if claim.uid != *uid {
                return Err(conflict("GPUClaim", key, "uid precondition failed"));
            }
            if claim.finalizer {
                claim.deleting = true;
                claim.resource_version = bump(&claim.resource_version);
                view.upsert_claim(claim);
            } else {
                view.remove_claim(&key.namespace, &key.name);
            }
        }
        Action::OpenUsage { usage } => {
            if view.usage(&usage.namespace, &usage.name).is_some() {
                return Err(conflict("GPUUsage", &ObjectRef::new(&usage.namespace, &usage.name), "already exists"));
            }
            let mut usage = usage.clone();
            usage.resource_version = "1".into();
            if usage.claim_uid.is_empty() {
                usage.claim_uid =
                    view.claim(&usage.namespace, &usage.claim).map(|c| c.uid.as_str()).unwrap_or_default().into();
            }
            view.upsert_usage(usage);
        }
        Action::CloseUsage { usage: key, precondition, end } => {
            let Some(usage) = view.usage(&key.namespace, &key.name) else {
                return Err(conflict("GPUUsage", key, "not found"));
            };
            if usage.resource_version != *precondition {
                return Err(conflict("GPUUsage", key, "resourceVersion changed"));
            }
            view.edit_usage(&key.namespace, &key.name, |usage| {
                usage.end = Some(*end);
                usage.resource_version = bump(&usage.resource_version);
            });
        }
        Action::PinAndUngate { pod: key, precondition, terms, .. } => {
            pod_at(view, key, precondition)?;
            view.edit_pod(&key.namespace, &key.name, |pod| {
                pod.scheduling_gates.retain(|gate| gate != keys::GATE_PLACEMENT);
                pod.required_terms = Some(std::sync::Arc::clone(terms));
                pod.resource_version = bump(&pod.resource_version);
            });
        }
        Action::Ungate { pod: key, precondition } => {
            pod_at(view, key, precondition)?;
            view.edit_pod(&key.namespace, &key.name, |pod| {
                pod.scheduling_gates.retain(|gate| gate != keys::GATE_PLACEMENT);
                pod.resource_version = bump(&pod.resource_version);
            });
        }
        Action::Pin { pod: key, terms, .. } => {
            if view.pod(&key.namespace, &key.name).is_none() {
                return Err(conflict("Pod", key, "not found"));
            }
            view.edit_pod(&key.namespace, &key.name, |pod| {
                pod.required_terms = Some(std::sync::Arc::clone(terms));
                pod.resource_version = bump(&pod.resource_version);
            });
        }
        Action::SetPodWaiting { pod: key, precondition, waiting } => {
            pod_at(view, key, precondition)?;
            view.edit_pod(&key.namespace, &key.name, |pod| {
                pod.waiting = Some(waiting.clone());
                pod.resource_version = bump(&pod.resource_version);
            });
        }
        Action::PublishClass { class: name, precondition, published } => {
            let Some(class) = view.class(name) else {
                return Err(conflict("GPUClass", &ObjectRef::new("", name), "not found"));
            };
            if class.resource_version != *precondition {
                return Err(conflict("GPUClass", &ObjectRef::new("", name), "resourceVersion changed"));
            }
            // Only the status moves: written in place rather than the class copied and stored again.
            let revision = bump(&class.resource_version).to_string();
            view.set_class_status(name, *published, revision);
        }
        Action::Event { .. } => {}
    }
    Ok(())
}

/// The template claim a `CreateClaim` writes, as the controller sends it (`None` for any other action): the mark,
/// the owner, the release finalizer and the status decided in the same pass.
pub fn created_claim(action: &Action, now: Time) -> Option<Claim> {
    let Action::CreateClaim { claim, class, count, owner, status } = action else { return None };
    Some(Claim {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: ["uid-", &claim.namespace, "-", &claim.name].concat().into(),
        resource_version: "2".into(),
        created: now,
        class: class.as_str().into(),
        count: *count,
        template: true,
        owner_vmi: Some(owner.clone()),
        phase: status.phase,
        node: status.node.clone(),
        attached_to: status.attached_to.clone(),
        pending: status.pending.clone(),
        finalizer: true,
        deleting: false,
    })
}

fn claimed<'v>(view: &'v View, key: &ObjectRef, precondition: &str) -> Result<&'v Claim, Conflict> {
    let claim = view.claim(&key.namespace, &key.name).ok_or_else(|| conflict("GPUClaim", key, "not found"))?;
    if claim.resource_version != precondition {
        return Err(conflict("GPUClaim", key, "resourceVersion changed"));
    }
    Ok(claim)
}

fn pod_at<'v>(view: &'v View, key: &ObjectRef, precondition: &str) -> Result<&'v crate::model::Pod, Conflict> {
    let pod = view.pod(&key.namespace, &key.name).ok_or_else(|| conflict("Pod", key, "not found"))?;
    if pod.resource_version != precondition {
        return Err(conflict("Pod", key, "resourceVersion changed"));
    }
    Ok(pod)
}
