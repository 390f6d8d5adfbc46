//! Tenants as actors: the writes a scenario has a tenant try at given times, each made as the tenant's own user
//! through the API server's whole admission chain. Besides ordering and deleting claims, these are the writes a
//! tenant would use to get more than it paid for (docs/admission.md, "Who may write what"); the chart refuses each,
//! and the variant `unguarded-writes` shows what each would break.
//!
//! Every attempt is one log line: `Wrote` when it landed, the write's name with the API server's reason and
//! message when it was refused (counted in the run's refusals as `<Write>:<reason>`, landed ones in
//! `tenantWrites/<Write>`).

use std::sync::Arc;

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, ClaimPhase};
use gpuclaim_engine::references::{attachments_json, parse_attachments};

use super::{Event, World, WorldError};
use crate::apiserver::ApiError;
use crate::log::{ClusterNamed, LogObject, Named};
use crate::users;

/// A write a tenant tries, named after what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantWrite {
    /// Orders a held claim (through the order webhook).
    OrderClaim { claim: String, class: String, count: u32 },
    /// Deletes one of its claims.
    DeleteClaim { claim: String },
    /// Raises a claim's `spec.count` after it was ordered (and bound).
    RaiseClaimCount { claim: String, count: u32 },
    /// Switches a claim's `spec.className` after it was ordered.
    SwitchClaimClass { claim: String, class: String },
    /// Removes the template mark from a claim the controller ordered for a run (it would outlive the run as held).
    DropTemplateMark { claim: String },
    /// Orders a claim carrying the template mark (it would skip the order checks).
    OrderMarkedClaim { claim: String, class: String, count: u32 },
    /// Writes a claim's status as Bound and attached to nothing (another VM could attach it too).
    DetachClaim { claim: String },
    /// Removes the release finalizer from a claim (deleted while attached, its units unaccounted).
    ReleaseFinalizer { claim: String },
    /// Ends a claim's open usage record now (billing stops while the VM runs).
    CloseUsage { claim: String },
    /// Deletes a claim's open usage record.
    DeleteUsage { claim: String },
    /// Removes the placement gate from its VM's launcher (scheduled without the controller's pin).
    RemoveGate { vm: String },
    /// Rewrites the attachments annotation of its VM's launcher, every unit count set to `count`.
    ForgeAttachments { vm: String, count: u32 },
    /// Labels its own namespace `gpu.cozystack.io/vgpu-entitled: "true"`.
    EntitleNamespace,
}

impl TenantWrite {
    /// The name the log and the run's figures use.
    pub fn name(&self) -> &'static str {
        match self {
            TenantWrite::OrderClaim { .. } => "OrderClaim",
            TenantWrite::DeleteClaim { .. } => "DeleteClaim",
            TenantWrite::RaiseClaimCount { .. } => "RaiseClaimCount",
            TenantWrite::SwitchClaimClass { .. } => "SwitchClaimClass",
            TenantWrite::DropTemplateMark { .. } => "DropTemplateMark",
            TenantWrite::OrderMarkedClaim { .. } => "OrderMarkedClaim",
            TenantWrite::DetachClaim { .. } => "DetachClaim",
            TenantWrite::ReleaseFinalizer { .. } => "ReleaseFinalizer",
            TenantWrite::CloseUsage { .. } => "CloseUsage",
            TenantWrite::DeleteUsage { .. } => "DeleteUsage",
            TenantWrite::RemoveGate { .. } => "RemoveGate",
            TenantWrite::ForgeAttachments { .. } => "ForgeAttachments",
            TenantWrite::EntitleNamespace => "EntitleNamespace",
        }
    }

    /// Every write's name, for error messages.
    pub const NAMES: [&'static str; 13] = [
        "OrderClaim",
        "DeleteClaim",
        "RaiseClaimCount",
        "SwitchClaimClass",
        "DropTemplateMark",
        "OrderMarkedClaim",
        "DetachClaim",
        "ReleaseFinalizer",
        "CloseUsage",
        "DeleteUsage",
        "RemoveGate",
        "ForgeAttachments",
        "EntitleNamespace",
    ];
}

impl World {
    /// The tenant of `namespace` tries `write`.
    pub(super) fn tenant_write(&mut self, namespace: &str, write: &TenantWrite) -> Result<(), WorldError> {
        let user = users::tenant(namespace);
        let now = self.time();
        let (object, outcome): (Box<dyn LogObject + '_>, _) = match write {
            TenantWrite::OrderClaim { claim, class, count } | TenantWrite::OrderMarkedClaim { claim, class, count } => {
                let order = Claim {
                    namespace: namespace.into(),
                    name: claim.as_str().into(),
                    uid: format!("uid-claim-{namespace}-{claim}").into(),
                    created: now,
                    class: class.as_str().into(),
                    count: *count,
                    template: matches!(write, TenantWrite::OrderMarkedClaim { .. }),
                    ..Claim::default()
                };
                (Box::new(Named("GPUClaim", namespace, claim)), self.api.create_claim(order, &user).map(|_| ()))
            }
            TenantWrite::DeleteClaim { claim } => {
                (Box::new(Named("GPUClaim", namespace, claim)), self.api.delete_claim(namespace, claim, None))
            }
            TenantWrite::RaiseClaimCount { claim, count } => {
                let outcome = self.api.update_claim(namespace, claim, "", &user, |c| c.count = *count);
                (Box::new(Named("GPUClaim", namespace, claim)), outcome)
            }
            TenantWrite::SwitchClaimClass { claim, class } => {
                let outcome = self.api.update_claim(namespace, claim, "", &user, |c| c.class = class.as_str().into());
                (Box::new(Named("GPUClaim", namespace, claim)), outcome)
            }
            TenantWrite::DropTemplateMark { claim } => {
                let outcome = self.api.update_claim(namespace, claim, "", &user, |c| c.template = false);
                (Box::new(Named("GPUClaim", namespace, claim)), outcome)
            }
            TenantWrite::DetachClaim { claim } => {
                let outcome = self.api.update_claim(namespace, claim, "status", &user, |c| {
                    c.phase = ClaimPhase::Bound;
                    c.attached_to = None;
                });
                (Box::new(Named("GPUClaim", namespace, claim)), outcome)
            }
            TenantWrite::ReleaseFinalizer { claim } => {
                let outcome = self.api.update_claim(namespace, claim, "", &user, |c| c.finalizer = false);
                (Box::new(Named("GPUClaim", namespace, claim)), outcome)
            }
            TenantWrite::CloseUsage { claim } | TenantWrite::DeleteUsage { claim } => {
                let open = self.api.store().usages_of_claim(namespace, claim).find(|u| u.end.is_none());
                let Some(usage) = open.map(|u| u.name.clone()) else {
                    return self.tenant_found_nothing(namespace, write, "no open usage record");
                };
                let outcome = match write {
                    TenantWrite::CloseUsage { .. } => {
                        self.api.update_usage(namespace, &usage, &user, |u| u.end = Some(now))
                    }
                    _ => self.api.delete_usage(namespace, &usage, &user),
                };
                return self.tenant_wrote(&Named("GPUUsage", namespace, &usage), write, outcome);
            }
            TenantWrite::RemoveGate { vm } | TenantWrite::ForgeAttachments { vm, .. } => {
                let gated = self
                    .api
                    .store()
                    .vmi_pods(namespace, vm)
                    .find(|pod| pod.scheduling_gates.iter().any(|gate| gate == keys::GATE_PLACEMENT));
                let Some(pod) = gated.map(|pod| pod.name.clone()) else {
                    return self.tenant_found_nothing(namespace, write, "no launcher at the gate");
                };
                let outcome = match write {
                    TenantWrite::ForgeAttachments { count, .. } => {
                        self.api.update_pod(namespace, &pod, &user, |pod| forge_attachments(pod, *count))
                    }
                    _ => self.api.update_pod(namespace, &pod, &user, |pod| {
                        pod.scheduling_gates.retain(|gate| gate != keys::GATE_PLACEMENT)
                    }),
                };
                if outcome.is_ok() && matches!(write, TenantWrite::RemoveGate { .. }) {
                    self.schedule_at(self.now(), Event::Schedule { namespace: namespace.into(), pod: pod.clone() })?;
                }
                return self.tenant_wrote(&Named("Pod", namespace, &pod), write, outcome);
            }
            TenantWrite::EntitleNamespace => {
                let outcome = self.api.label_namespace(namespace, &user, true);
                (Box::new(ClusterNamed("Namespace", namespace)), outcome)
            }
        };
        self.tenant_wrote(&*object, write, outcome)
    }

    fn tenant_wrote(
        &mut self,
        object: &dyn LogObject,
        write: &TenantWrite,
        outcome: Result<(), ApiError>,
    ) -> Result<(), WorldError> {
        match outcome {
            Ok(()) => {
                *self.stats.tenant_writes.entry(write.name().to_owned()).or_insert(0) += 1;
                self.record("tenant", object, "Wrote", &[("write", write.name())])
            }
            Err(error) => self.refused("tenant", object, write.name(), error.reason(), error.to_string()),
        }
    }

    /// The write had nothing to act on (no open record, no launcher at the gate): logged, counted as neither.
    fn tenant_found_nothing(&mut self, namespace: &str, write: &TenantWrite, why: &str) -> Result<(), WorldError> {
        let object = ClusterNamed("Namespace", namespace);
        self.record("tenant", &object, "NothingToWrite", &[("write", write.name()), ("why", why)])
    }
}

/// The pod's attachments with every count set to `count` (an unreadable annotation is left as it is).
fn forge_attachments(pod: &mut gpuclaim_engine::model::Pod, count: u32) {
    let Some(current) = pod.annotations.get(keys::ANNOTATION_ATTACHMENTS) else { return };
    let Ok(mut attachments) = parse_attachments(current) else { return };
    for attachment in &mut attachments {
        attachment.count = count;
    }
    Arc::make_mut(&mut pod.annotations).insert(keys::ANNOTATION_ATTACHMENTS.into(), attachments_json(&attachments));
}
