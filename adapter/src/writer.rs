//! Writing the actions the controller runtime hands out to the API server, each with its precondition: a merge patch
//! carrying `metadata.resourceVersion` (the API server refuses it with 409 Conflict when the object changed since), a
//! delete carrying the uid; and the live reads it asks for (a pin's node, a stale object).
//!
//! What a write returns goes back to the runtime as watch events of its own, which it writes through to the view at
//! once (read your own writes), so the next pass does not decide on the version the write replaced while the watch
//! event is still on its way.
//!
//! How each action goes out:
//! - `CreateClaim`: create (mark label, release finalizer, controller ownerReference to the VMI), then the status
//!   with the resourceVersion the create returned.
//! - `UpdateClaim`: a finalizer change first (the claim is read to keep other finalizers; it must still be at the
//!   precondition), then the status with the resourceVersion that write returned.
//! - `OpenUsage`: create, owned by its claim (whose uid comes from a create in the same pass when it is new).
//! - `PinAndUngate`: ONE merge patch of the pod: the remaining scheduling gates and the pinned node-affinity terms.
//! - `SetPodWaiting`: a strategic merge patch of the pod's status (conditions merge by type).
//! - `Event`: a Kubernetes Event (events.k8s.io/v1) on the claim or pod; failures are logged, never fatal.
//!
//! Every API call is bounded: a write is sent only while this replica's last lease renewal is younger than the
//! renew deadline ([`Leadership`]), and is given up after [`CALL_TIMEOUT`] or when what is left of the lease runs
//! out, whichever comes first. So a hung API server cannot stall the reconciler, and a write cannot still be waiting
//! on our side once another replica may lead. (A write the API server received before we gave up may still be
//! applied later; the lease duration's margin over the renew deadline is what covers that.)

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gpuclaim_engine::api::{ClaimPhase, GPUClaim, GPUClaimSpec, GPUClass, GPUUsage};
use gpuclaim_engine::controller::runtime::{Change, Kind, ObjectKey};
use gpuclaim_engine::controller::{Action, ClaimStatus, EventKind, ObjectRef};
use gpuclaim_engine::convert;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Published, Reason, Time, VmiRef};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time as KubeTime};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::{Value, json};

use crate::cache::{Cached, read_logged};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::shared::{SharedView, ViewPoisoned};

/// The field manager our writes are recorded under.
pub const FIELD_MANAGER: &str = "gpuclaim-controller";

/// The longest one API call may take. The API server answers a write in milliseconds; one that has not answered
/// in this long is unreachable or overloaded, and the pass is better failed and retried with backoff.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a write failed, and what the reconciler should do about it.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed (409) or is gone (404) since the view read it: refresh it and reconcile again.
    #[error("{action} {object}: the object changed since it was read ({code}): {message}")]
    Stale { action: &'static str, kind: Kind, object: ObjectRef, code: u16, message: String },
    /// Anything else (the API server unreachable, refused, invalid): back off and reconcile again.
    #[error("{action} {object}: {source}")]
    Failed { action: &'static str, object: ObjectRef, source: kube::Error },
    /// No answer within the call's budget (the call timeout, or what was left of the lease); the write may or may
    /// not have been applied: back off and reconcile again, in full.
    #[error("{action} {object}: no answer within {after:?}; the write may or may not have been applied")]
    Timeout { action: &'static str, object: ObjectRef, after: Duration },
    /// The lease was last renewed longer than the renew deadline ago: the call was not sent.
    #[error("{action} {object}: not sent: this replica's lease was last renewed longer than the renew deadline ago")]
    NotLeading { action: &'static str, object: ObjectRef },
    /// The view is poisoned (shared.rs): nothing more can be decided or written.
    #[error("{action} {object}: {source}")]
    View { action: &'static str, object: ObjectRef, source: ViewPoisoned },
}

impl WriteError {
    /// How the write went, in the words of the `gpuclaim_writes_total` metric's `result` label (`ok` aside).
    pub fn outcome(&self) -> &'static str {
        match self {
            WriteError::Stale { .. } => "stale",
            WriteError::Failed { .. } | WriteError::View { .. } => "error",
            WriteError::Timeout { .. } => "timeout",
            WriteError::NotLeading { .. } => "not_sent",
        }
    }
}

pub struct Writer {
    client: kube::Client,
    view: SharedView,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    params: PatchParams,
    leadership: Leadership,
    call_timeout: Duration,
}

impl Writer {
    /// Writes while `leadership` holds, each call bounded by [`CALL_TIMEOUT`].
    pub fn new(
        client: kube::Client,
        view: SharedView,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        leadership: Leadership,
    ) -> Writer {
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
        Writer { client, view, recorder, metrics, params, leadership, call_timeout: CALL_TIMEOUT }
    }

    /// The same writer with another bound on each call (tests use a short one).
    pub fn with_call_timeout(self, call_timeout: Duration) -> Writer {
        Writer { call_timeout, ..self }
    }

    /// Writes one action; returns what the API server answered, as the watch would bring it. The outcome is
    /// counted under the action's name.
    pub async fn write(&self, action: &Action) -> Result<Vec<Change>, WriteError> {
        let mut written = Vec::new();
        let result = self.write_into(action, &mut written).await;
        self.metrics.write(action_name(action), result.as_ref().map_or_else(WriteError::outcome, |()| "ok"));
        result.map(|()| written)
    }

    async fn write_into(&self, action: &Action, written: &mut Vec<Change>) -> Result<(), WriteError> {
        match action {
            Action::CreateClaim { claim, class, count, owner, status } => {
                self.create_claim(claim, class, *count, owner, status, written).await?;
            }
            Action::UpdateClaim { claim, precondition, finalizer, status } => {
                let mut version = precondition.to_string();
                if let Some(keep) = finalizer {
                    version = self.set_finalizer(claim, precondition, *keep, written).await?;
                }
                if let Some(status) = status {
                    self.patch_claim_status(action_name(action), claim, &version, status, written).await?;
                }
            }
            Action::DeleteClaim { claim, uid } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(uid.to_string()), resource_version: None }),
                    ..DeleteParams::default()
                };
                // The version the view holds (its finalizer's removal, written just before): what the watch still
                // brings of it up to there is older than the deletion, and must not bring it back.
                let revision = {
                    let view = self.view.read().map_err(|source| view_error(action_name(action), claim, source))?;
                    view.claim(&claim.namespace, &claim.name).map(|c| c.resource_version.clone()).unwrap_or_default()
                };
                let api = Api::<GPUClaim>::namespaced(self.client.clone(), &claim.namespace);
                let deleted =
                    self.call(action_name(action), Kind::Claim, claim, api.delete(&claim.name, &params)).await?;
                match deleted.left() {
                    // Still there: someone else's finalizer holds it.
                    Some(object) => written.extend(read_logged(&object).map(Change::Upsert)),
                    None => written.push(Change::Delete {
                        kind: Kind::Claim,
                        namespace: claim.namespace.clone(),
                        name: claim.name.clone(),
                        revision,
                    }),
                }
            }
            Action::OpenUsage { usage } => {
                // A claim created in the same pass has its uid in the view by now (its creation written through).
                let claim_uid = match usage.claim_uid.as_str() {
                    "" => {
                        let view = self.view.read().map_err(|source| {
                            view_error(action_name(action), &ObjectRef::new(&usage.namespace, &usage.name), source)
                        })?;
                        view.claim(&usage.namespace, &usage.claim).map(|c| c.uid.to_string()).unwrap_or_default()
                    }
                    uid => uid.to_owned(),
                };
                let object = convert::usage_object(usage, &claim_uid);
                let api = Api::<GPUUsage>::namespaced(self.client.clone(), &usage.namespace);
                let reference = ObjectRef::new(&usage.namespace, &usage.name);
                let params = PostParams { field_manager: self.params.field_manager.clone(), ..PostParams::default() };
                let created =
                    self.call(action_name(action), Kind::Usage, &reference, api.create(&params, &object)).await?;
                written.extend(read_logged(&created).map(Change::Upsert));
            }
            Action::CloseUsage { usage, precondition, end } => {
                let patch = json!({"metadata": {"resourceVersion": precondition}, "spec": {"endTime": KubeTime(*end)}});
                let api = Api::<GPUUsage>::namespaced(self.client.clone(), &usage.namespace);
                let patch = Patch::Merge(patch);
                let closed = self
                    .call(action_name(action), Kind::Usage, usage, api.patch(&usage.name, &self.params, &patch))
                    .await?;
                written.extend(read_logged(&closed).map(Change::Upsert));
            }
            Action::PinAndUngate { pod, precondition, node: _, terms } => {
                let gates = self.remaining_gates(action, pod)?;
                let patch = pin_and_ungate_patch(precondition, &gates, terms);
                written.extend(self.merge_pod(action, pod, patch).await?);
            }
            // The two-update counterfactual's writes (never decided by the shipped engine the adapter runs): the
            // gate removal on the decided resourceVersion, then the pin on whatever the pod is now.
            Action::Ungate { pod, precondition } => {
                let gates: Vec<Value> =
                    self.remaining_gates(action, pod)?.iter().map(|name| json!({"name": name})).collect();
                let patch = json!({"metadata": {"resourceVersion": precondition}, "spec": {"schedulingGates": gates}});
                written.extend(self.merge_pod(action, pod, patch).await?);
            }
            Action::Pin { pod, node: _, terms } => {
                let patch = json!({"spec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms.as_slice()}}}}});
                written.extend(self.merge_pod(action, pod, patch).await?);
            }
            Action::SetPodWaiting { pod, precondition, waiting } => {
                let patch = pod_waiting_patch(precondition, waiting, now());
                let api = Api::<Pod>::namespaced(self.client.clone(), &pod.namespace);
                let patch = Patch::Strategic(patch);
                let patched = self
                    .call(action_name(action), Kind::Pod, pod, api.patch_status(&pod.name, &self.params, &patch))
                    .await?;
                written.extend(read_logged(&patched).map(Change::Upsert));
            }
            Action::PublishClass { class, precondition, published } => {
                let patch = publish_patch(precondition, published);
                let api = Api::<GPUClass>::all(self.client.clone());
                let reference = ObjectRef::new("", class);
                let patch = Patch::Merge(patch);
                let patched = self
                    .call(action_name(action), Kind::Class, &reference, api.patch_status(class, &self.params, &patch))
                    .await?;
                written.extend(read_logged(&patched).map(Change::Upsert));
            }
            Action::Event { kind, object, reason, message } => self.event(*kind, object, reason, message).await?,
        }
        Ok(())
    }

    /// One merge patch of a pod's spec (the pin and the gates); returns what the API server answered.
    async fn merge_pod(&self, action: &Action, pod: &ObjectRef, patch: Value) -> Result<Option<Change>, WriteError> {
        let api = Api::<Pod>::namespaced(self.client.clone(), &pod.namespace);
        let patch = Patch::Merge(patch);
        let patched =
            self.call(action_name(action), Kind::Pod, pod, api.patch(&pod.name, &self.params, &patch)).await?;
        Ok(read_logged(&patched).map(Change::Upsert))
    }

    async fn create_claim(
        &self,
        claim: &ObjectRef,
        class: &str,
        count: u32,
        owner: &VmiRef,
        status: &ClaimStatus,
        written: &mut Vec<Change>,
    ) -> Result<(), WriteError> {
        let object = template_claim(claim, class, count, owner);
        let api = Api::<GPUClaim>::namespaced(self.client.clone(), &claim.namespace);
        let params = PostParams { field_manager: self.params.field_manager.clone(), ..PostParams::default() };
        let created = self.call("CreateClaim", Kind::Claim, claim, api.create(&params, &object)).await?;
        written.extend(read_logged(&created).map(Change::Upsert));
        let version = created.metadata.resource_version.clone().unwrap_or_default();
        self.patch_claim_status("CreateClaim", claim, &version, status, written).await
    }

    /// Adds or removes our finalizer, keeping everyone else's; returns the new resourceVersion.
    async fn set_finalizer(
        &self,
        claim: &ObjectRef,
        precondition: &str,
        keep: bool,
        written: &mut Vec<Change>,
    ) -> Result<String, WriteError> {
        let api = Api::<GPUClaim>::namespaced(self.client.clone(), &claim.namespace);
        let current = self.call("UpdateClaim", Kind::Claim, claim, api.get(&claim.name)).await?;
        let version = current.metadata.resource_version.clone().unwrap_or_default();
        if version != precondition {
            let message = format!("read at resourceVersion {precondition}, now {version}");
            return Err(WriteError::Stale {
                action: "UpdateClaim",
                kind: Kind::Claim,
                object: claim.clone(),
                code: 409,
                message,
            });
        }
        let mut finalizers: Vec<String> = current
            .metadata
            .finalizers
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != keys::FINALIZER_RELEASE)
            .collect();
        if keep {
            finalizers.push(keys::FINALIZER_RELEASE.to_owned());
        }
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": precondition, "finalizers": finalizers}}));
        let patched =
            self.call("UpdateClaim", Kind::Claim, claim, api.patch(&claim.name, &self.params, &patch)).await?;
        written.extend(claim_written(&patched));
        Ok(patched.metadata.resource_version.unwrap_or_default())
    }

    async fn patch_claim_status(
        &self,
        action: &'static str,
        claim: &ObjectRef,
        version: &str,
        status: &ClaimStatus,
        written: &mut Vec<Change>,
    ) -> Result<(), WriteError> {
        let patch = Patch::Merge(claim_status_patch(version, status, now()));
        let api = Api::<GPUClaim>::namespaced(self.client.clone(), &claim.namespace);
        let patched =
            self.call(action, Kind::Claim, claim, api.patch_status(&claim.name, &self.params, &patch)).await?;
        written.extend(read_logged(&patched).map(Change::Upsert));
        Ok(())
    }

    /// The pod's gates without ours, as the view read them at the precondition's resourceVersion.
    fn remaining_gates(&self, action: &Action, pod: &ObjectRef) -> Result<Vec<String>, WriteError> {
        let view = self.view.read().map_err(|source| view_error(action_name(action), pod, source))?;
        Ok(view
            .pod(&pod.namespace, &pod.name)
            .map(|p| p.scheduling_gates.iter().filter(|g| *g != keys::GATE_PLACEMENT).map(|g| g.to_string()).collect())
            .unwrap_or_default())
    }

    async fn event(&self, kind: EventKind, object: &ObjectRef, reason: &str, message: &str) -> Result<(), WriteError> {
        let (api_version, kind_name, uid) = {
            let view = self.view.read().map_err(|source| view_error("Event", object, source))?;
            match kind {
                EventKind::Claim => (
                    keys::API_VERSION,
                    keys::KIND_CLAIM,
                    view.claim(&object.namespace, &object.name).map(|c| c.uid.clone()),
                ),
                EventKind::Pod => ("v1", "Pod", view.pod(&object.namespace, &object.name).map(|p| p.uid.clone())),
            }
        };
        let regarding = ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind_name.to_owned()),
            namespace: Some(object.namespace.to_string()),
            name: Some(object.name.to_string()),
            uid: uid.filter(|u| !u.is_empty()).map(String::from),
            ..ObjectReference::default()
        };
        let event = Event {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            note: Some(message.to_owned()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        // Best effort, but bounded and only while leading like any write: a failure is logged, never fatal.
        let Some(left) = self.leadership.remaining() else {
            tracing::debug!(%object, reason, "not recording an event: the lease lapsed");
            return Ok(());
        };
        match tokio::time::timeout(left.min(self.call_timeout), self.recorder.publish(&event, &regarding)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%object, reason, %error, "failed to record an event"),
            Err(_) => tracing::warn!(%object, reason, "failed to record an event: no answer in time"),
        }
        Ok(())
    }

    /// One API call of a write: sent only while this replica may lead, and given up after the call timeout or once
    /// what was left of the lease runs out, whichever comes first. (`request` is lazy: nothing is sent before the
    /// check.)
    async fn call<T>(
        &self,
        action: &'static str,
        kind: Kind,
        object: &ObjectRef,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        let Some(left) = self.leadership.remaining() else {
            return Err(WriteError::NotLeading { action, object: object.clone() });
        };
        let budget = left.min(self.call_timeout);
        match tokio::time::timeout(budget, request).await {
            Ok(answer) => answer.map_err(|error| stale_or_failed(action, kind, object, error)),
            Err(_) => Err(WriteError::Timeout { action, object: object.clone(), after: budget }),
        }
    }

    /// One read, bounded by the call timeout like any call; reads need no lease.
    async fn read<T>(
        &self,
        action: &'static str,
        object: &ObjectRef,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.call_timeout, request).await {
            Ok(answer) => answer.map_err(|source| WriteError::Failed { action, object: object.clone(), source }),
            Err(_) => Err(WriteError::Timeout { action, object: object.clone(), after: self.call_timeout }),
        }
    }

    /// Confirms a pin's node before a pass that pins there is written (docs/controller.md, "Pins are confirmed"):
    /// reads the node and the pods bound there from the API server, past the watch, as watch events for the
    /// runtime (which takes only what is newer than the view). Pods the list no longer shows are left to the watch.
    pub async fn read_node_live(&self, node: &str) -> Result<Vec<Change>, WriteError> {
        let reference = ObjectRef::new("", node);
        let live_node =
            self.read("ConfirmPin", &reference, Api::<Node>::all(self.client.clone()).get_opt(node)).await?;
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let pods = Api::<Pod>::all(self.client.clone());
        let pods = self.read("ConfirmPin", &reference, pods.list(&params)).await?.items;
        let node = live_node.as_ref().and_then(read_logged);
        Ok(node.into_iter().chain(pods.iter().filter_map(read_logged)).map(Change::Upsert).collect())
    }

    /// Reads an object again after a write found it stale: its current state, or its deletion when it is gone.
    pub async fn read_again(&self, object: &ObjectKey) -> Result<Option<Change>, WriteError> {
        let client = self.client.clone();
        let namespace = &object.namespace;
        match object.kind {
            Kind::Claim => self.read_one(object, Api::<GPUClaim>::namespaced(client, namespace)).await,
            Kind::Usage => self.read_one(object, Api::<GPUUsage>::namespaced(client, namespace)).await,
            Kind::Pod => self.read_one(object, Api::<Pod>::namespaced(client, namespace)).await,
            Kind::Class => self.read_one(object, Api::<GPUClass>::all(client)).await,
            Kind::Node => self.read_one(object, Api::<Node>::all(client)).await,
            // Never written by the controller, so never found stale.
            Kind::Vmi | Kind::Namespace | Kind::Quota | Kind::Settings => Ok(None),
        }
    }

    async fn read_one<K: Cached>(&self, object: &ObjectKey, api: Api<K>) -> Result<Option<Change>, WriteError> {
        let reference = ObjectRef::new(&object.namespace, &object.name);
        Ok(match self.read("Refresh", &reference, api.get_opt(&object.name)).await? {
            Some(live) => read_logged(&live).map(Change::Upsert),
            None => Some(Change::Delete {
                kind: object.kind,
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                revision: Default::default(),
            }),
        })
    }
}

fn view_error(action: &'static str, object: &ObjectRef, source: ViewPoisoned) -> WriteError {
    WriteError::View { action, object: object.clone(), source }
}

fn now() -> Time {
    Time::now()
}

pub fn action_name(action: &Action) -> &'static str {
    match action {
        Action::CreateClaim { .. } => "CreateClaim",
        Action::UpdateClaim { .. } => "UpdateClaim",
        Action::DeleteClaim { .. } => "DeleteClaim",
        Action::OpenUsage { .. } => "OpenUsage",
        Action::CloseUsage { .. } => "CloseUsage",
        Action::PinAndUngate { .. } => "PinAndUngate",
        Action::Ungate { .. } => "Ungate",
        Action::Pin { .. } => "Pin",
        Action::SetPodWaiting { .. } => "SetPodWaiting",
        Action::PublishClass { .. } => "PublishClass",
        Action::Event { .. } => "Event",
    }
}

/// 409 (Conflict, AlreadyExists) and 404 mean the view is behind: refresh and retry. Anything else is a failure.
fn stale_or_failed(action: &'static str, kind: Kind, object: &ObjectRef, error: kube::Error) -> WriteError {
    match error {
        kube::Error::Api(status) if status.code == 409 || status.code == 404 => {
            WriteError::Stale { action, kind, object: object.clone(), code: status.code, message: status.message }
        }
        source => WriteError::Failed { action, object: object.clone(), source },
    }
}

/// A template claim as the controller creates it.
pub fn template_claim(claim: &ObjectRef, class: &str, count: u32, owner: &VmiRef) -> GPUClaim {
    let mut object = GPUClaim::new(&claim.name, GPUClaimSpec { class_name: class.to_owned(), count });
    object.metadata = ObjectMeta {
        name: Some(claim.name.to_string()),
        namespace: Some(claim.namespace.to_string()),
        labels: Some([(keys::LABEL_TEMPLATE_CLAIM.to_owned(), keys::TRUE.to_owned())].into()),
        finalizers: Some(vec![keys::FINALIZER_RELEASE.to_owned()]),
        owner_references: Some(vec![OwnerReference {
            api_version: keys::kubevirt::API_VERSION.to_owned(),
            kind: keys::kubevirt::KIND_VMI.to_owned(),
            name: owner.name.to_string(),
            uid: owner.uid.to_string(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    };
    object
}

/// The claim status merge patch: every field explicit (null clears), the Bound condition saying why it waits.
pub fn claim_status_patch(version: &str, status: &ClaimStatus, now: Time) -> Value {
    let conditions = match (&status.pending, status.phase) {
        (Some(reason), _) => vec![condition(keys::CONDITION_BOUND, "False", reason, now)],
        (None, ClaimPhase::Bound | ClaimPhase::Attached) => {
            let node = status.node.as_deref().unwrap_or_default();
            vec![condition(keys::CONDITION_BOUND, "True", &Reason::bound(node), now)]
        }
        (None, ClaimPhase::Pending) => Vec::new(),
    };
    json!({
        "metadata": {"resourceVersion": version},
        "status": {
            "phase": status.phase,
            "nodeName": status.node,
            "attachedTo": status.attached_to,
            "conditions": conditions,
        }
    })
}

fn condition(type_: &str, status: &str, reason: &Reason, now: Time) -> Value {
    let at = KubeTime(now);
    json!({"type": type_, "status": status, "reason": reason.reason, "message": reason.message, "lastTransitionTime": at})
}

/// Pin and ungate in one patch: the gates left besides ours, and the required terms with the pin.
pub fn pin_and_ungate_patch(
    version: &str,
    gates: &[String],
    terms: &[k8s_openapi::api::core::v1::NodeSelectorTerm],
) -> Value {
    let gates: Vec<Value> = gates.iter().map(|name| json!({"name": name})).collect();
    json!({
        "metadata": {"resourceVersion": version},
        "spec": {
            "schedulingGates": gates,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
        }
    })
}

/// The pod's placement condition (False: it waits), merged by type into its conditions.
pub fn pod_waiting_patch(version: &str, waiting: &Reason, now: Time) -> Value {
    json!({
        "metadata": {"resourceVersion": version},
        "status": {"conditions": [condition(keys::CONDITION_PLACEMENT, "False", waiting, now)]}
    })
}

pub fn publish_patch(version: &str, published: &Published) -> Value {
    json!({
        "metadata": {"resourceVersion": version},
        "status": {
            "allocatableUnits": published.allocatable_units,
            "freeUnits": published.free_units,
            "largestFreeOnNode": published.largest_free_on_node,
            "fragmentedUnits": published.fragmented_units,
        }
    })
}

/// What a claim's write left, as the view takes it: the claim as written, or, when the write took the last finalizer
/// off a claim being deleted, its deletion at the write's revision. The watch's DELETED event may arrive before this
/// answer does; an upsert would then bring the claim back into the view for good.
fn claim_written(claim: &GPUClaim) -> Option<Change> {
    let meta = &claim.metadata;
    let gone = meta.deletion_timestamp.is_some() && meta.finalizers.as_ref().is_none_or(Vec::is_empty);
    if !gone {
        return read_logged(claim).map(Change::Upsert);
    }
    Some(Change::Delete {
        kind: Kind::Claim,
        namespace: meta.namespace.clone().unwrap_or_default().into(),
        name: meta.name.clone().unwrap_or_default().into(),
        revision: meta.resource_version.clone().unwrap_or_default().into(),
    })
}

#[cfg(test)]
mod tests {
    use gpuclaim_engine::api::GPUClassStatus;

    use super::*;

    #[test]
    fn the_published_figures_read_back_as_the_class_status() {
        let published =
            Published { allocatable_units: 24, free_units: 4, largest_free_on_node: 2, fragmented_units: 4 };
        let patch = publish_patch("7", &published);
        let status: GPUClassStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(
            (status.allocatable_units, status.free_units, status.largest_free_on_node, status.fragmented_units),
            (24, 4, 2, 4)
        );
        // A status written before issue 35 has no fragmentedUnits: it reads as 0.
        let old: GPUClassStatus =
            serde_json::from_value(serde_json::json!({"allocatableUnits": 24, "freeUnits": 4, "largestFreeOnNode": 2}))
                .unwrap();
        assert_eq!(old.fragmented_units, 0);
    }

    #[test]
    fn a_claim_write_that_took_the_last_finalizer_off_a_deleting_claim_is_its_deletion() {
        let claim = |finalizers: serde_json::Value| -> GPUClaim {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
                "metadata": {"name": "data", "namespace": "tenant-a", "resourceVersion": "1372", "uid": "u",
                    "deletionTimestamp": "2027-01-15T08:00:26Z", "finalizers": finalizers},
                "spec": {"className": "h100", "count": 1}
            }))
            .unwrap()
        };
        let gone = claim_written(&claim(serde_json::json!([])));
        let expected = Change::Delete {
            kind: Kind::Claim,
            namespace: "tenant-a".into(),
            name: "data".into(),
            revision: "1372".into(),
        };
        assert_eq!(gone, Some(expected), "gone: the view must not keep it, whatever the watch sends first");
        let kept = claim_written(&claim(serde_json::json!([keys::FINALIZER_RELEASE])));
        assert!(matches!(kept, Some(Change::Upsert(_))), "still held by a finalizer: {kept:?}");
    }
}
