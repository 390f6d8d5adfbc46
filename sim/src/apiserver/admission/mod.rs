//! The admission chain as the API server runs it, with the chart's admission configuration ([`chart`]):
//!
//! 1. mutating webhooks: the engine's VMI and pod webhooks, called for what their registrations select;
//! 2. the CRDs' validation rules ([`crd`]), on a custom resource's changed values;
//! 3. validating admission: the chart's ValidatingAdmissionPolicies ([`policy`]), then the order webhook.
//!
//! In remote mode ([`Admission::go_remote`], the served twin with the real controller) the webhooks are the ones the
//! stored webhook configurations register, called through a transport ([`remote`]), and the policies and the CRDs'
//! rules are the stored ones ([`Admission::configure_remote`]); until a configuration is stored, none applies.
//!
//! Webhooks fail closed (`failurePolicy: Fail`): with no ready replica behind the webhook's Service, a write one
//! selects is refused with the API server's "no endpoints" error. Every write names its user ([`request::User`]):
//! the policies trust the controller, KubeVirt, platform administrators and Kubernetes' own controllers, and judge
//! everyone else.

pub mod cel;
pub mod chart;
pub mod crd;
pub mod policy;
pub mod registration;
pub mod remote;
pub mod request;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Pod, View, Vmi};
use gpuclaim_engine::review::Webhook;
use gpuclaim_engine::rules::{self, Order, PodPatch, Refusal};
use gpuclaim_engine::variant::Variant;
use k8s_openapi::api::core::v1::Toleration;

use chart::AdmissionConfig;
use crd::{CrdRules, RuleBroken};
use policy::{Denial, Prefilter, Remembered};
use remote::{Remote, WebhookTransport};
use request::{Operation, Request, Served};

use super::objects::judged::Judged;

/// The Service in front of the webhook replicas (the chart's names).
pub const WEBHOOK_SERVICE: &str = "gpuclaim-webhook";

/// A create the admission chain refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The webhook answered and denied: its registration's name, the reason, the HTTP code its answer carries and
    /// the message.
    #[error("admission webhook {name:?} denied the request{}", denied_text(message))]
    Denied { name: String, reason: Cow<'static, str>, code: u16, message: String },
    /// A ValidatingAdmissionPolicy of the chart refused the write.
    #[error("{0}")]
    Policy(Denial),
    /// A webhook registration's condition failed to evaluate: the write is refused.
    #[error("failed calling webhook {name:?}: {message}")]
    Condition { name: String, message: String },
    /// No webhook replica is ready: the call fails and the policy fails the request closed.
    #[error(
        "Internal error occurred: failed calling webhook {name:?}: failed to call webhook: Post \"https://{WEBHOOK_SERVICE}.{namespace}.svc:443{}?timeout=10s\": no endpoints available for service {WEBHOOK_SERVICE:?}",
        webhook.path()
    )]
    Unavailable { name: String, webhook: Webhook, namespace: String },
    /// A stored webhook could not be called, or answered what the API server cannot use, and fails closed: the
    /// reason is the API server's (`failed to call webhook: Post "URL": MESSAGE`, `received invalid webhook
    /// response: ...`).
    #[error("Internal error occurred: failed calling webhook {name:?}: {reason}")]
    Failed { name: String, reason: String },
    /// The API server could not apply a webhook's answer (its patch, or the patched object read back).
    #[error("Internal error occurred: {0}")]
    Internal(String),
}

/// After "denied the request": the message, or the words the API server uses when there is none.
fn denied_text(message: &str) -> String {
    match message {
        "" => " without explanation".to_owned(),
        message => format!(": {message}"),
    }
}

impl AdmissionError {
    /// The reason a client reads: the refusal's own for a denial, `InternalError` for an outage.
    pub fn reason(&self) -> &str {
        match self {
            AdmissionError::Denied { reason, .. } => reason,
            AdmissionError::Policy(denial) => match denial.reason.as_str() {
                "Forbidden" => "Forbidden",
                "Unauthorized" => "Unauthorized",
                "RequestEntityTooLarge" => "RequestEntityTooLarge",
                _ => "Invalid",
            },
            AdmissionError::Condition { .. }
            | AdmissionError::Unavailable { .. }
            | AdmissionError::Failed { .. }
            | AdmissionError::Internal(_) => "InternalError",
        }
    }

    /// The HTTP status code a client sees: a webhook's own (the API server raises one below 400 to 400), a
    /// policy's from its reason (403 Forbidden, 401 Unauthorized, 413 RequestEntityTooLarge, else 422 Invalid),
    /// 500 for an outage or a condition that fails to evaluate.
    pub fn code(&self) -> u16 {
        match self {
            AdmissionError::Denied { code, .. } => (*code).max(400),
            AdmissionError::Policy(_) => match self.reason() {
                "Forbidden" => 403,
                "Unauthorized" => 401,
                "RequestEntityTooLarge" => 413,
                _ => 422,
            },
            AdmissionError::Condition { .. }
            | AdmissionError::Unavailable { .. }
            | AdmissionError::Failed { .. }
            | AdmissionError::Internal(_) => 500,
        }
    }
}

/// The admission chain: the chart's configuration, and the webhook replicas as the API server reaches them.
pub struct Admission {
    /// Replicas ready behind the Service (endpoints). Zero: every selected create fails closed.
    pub ready_replicas: u32,
    /// The controller's namespace (the Service's).
    pub namespace: String,
    /// The engine's rules the webhooks run (the shipped ones unless a scenario asks for a counterfactual).
    pub variant: Variant,
    /// The API server calls the pod webhook again after the chain (`reinvocationPolicy: IfNeeded` with another
    /// mutating webhook changing the pod after ours): the rule must add nothing twice.
    pub reinvoke_pod_webhook: bool,
    /// Toleration lists the pod webhook's patches produced: (the list a pod came with, what the patch added, the
    /// result). Launchers come with one shared list and gain their classes' tolerations, so the results are shared
    /// too (a pod's lists are copied on write) instead of copied for every launcher. Holding the list a pod came
    /// with keeps its address from being reused while it is remembered. At most [`TOLERATED_MAX`].
    tolerated: Vec<Tolerated>,
    config: AdmissionConfig,
    /// The pod webhook as variant `gate-migration-targets` registers it: its objectSelector without the expression
    /// that leaves migration targets out (else the counterfactual rule would never see one).
    pod_gating_targets: registration::Registration,
    crds: CrdRules,
    /// CEL's functions, built once (see [`cel::functions`]).
    functions: kube_cel::cel::Context<'static>,
    /// The settings ConfigMap's data, the policies' parameter (`None`: the ConfigMap is missing).
    settings: Option<BTreeMap<String, String>>,
    /// The same, as the policies' `params` reads it.
    params: Option<kube_cel::cel::Value>,
    remembered: Remembered,
    /// Remote mode: the stored webhooks and the transport that calls them (`None`: the in-process chain).
    remote: Option<Box<Remote>>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("ready_replicas", &self.ready_replicas)
            .field("namespace", &self.namespace)
            .field("variant", &self.variant)
            .field("settings", &self.settings)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// One toleration list the pod webhook's patch made (see [`Admission`]).
#[derive(Clone, Debug)]
struct Tolerated {
    from: Arc<Vec<Toleration>>,
    added: Vec<Toleration>,
    result: Arc<Vec<Toleration>>,
}

/// How many patched toleration lists [`Admission`] remembers (one per set of classes a launcher orders, in practice).
const TOLERATED_MAX: usize = 16;

impl Default for Admission {
    fn default() -> Self {
        let namespace = keys::DEFAULT_CONTROLLER_NAMESPACE;
        Admission {
            ready_replicas: 2,
            namespace: namespace.to_owned(),
            variant: Variant::SHIPPED,
            reinvoke_pod_webhook: false,
            tolerated: Vec::new(),
            config: AdmissionConfig::shipped(namespace).expect("the chart's admission files compile (a test says so)"),
            pod_gating_targets: chart::pod_registration_gating_targets(),
            crds: CrdRules::generated(),
            functions: cel::functions(),
            settings: None,
            params: None,
            remembered: Remembered::default(),
            remote: None,
        }
    }
}

impl Admission {
    /// Whether the call can be made: `Ok(false)` when it cannot and the registration fails open (the request goes
    /// on without it), an error when it cannot and the registration fails closed.
    fn reachable(&self, registration: &registration::Registration) -> Result<bool, AdmissionError> {
        if self.ready_replicas > 0 {
            return Ok(true);
        }
        match registration.fail_closed {
            true => Err(AdmissionError::Unavailable {
                name: registration.name.clone(),
                webhook: registration.webhook,
                namespace: self.namespace.clone(),
            }),
            false => Ok(false),
        }
    }

    /// Switches to remote mode: from now on the webhooks called are the ones [`Admission::configure_remote`] reads
    /// from the stored configurations, through `transport`, and the policies are the stored ones. Until then none
    /// applies (a fresh cluster's); the CRDs' rules stay the generated ones until the stored CRDs are read.
    pub fn go_remote(&mut self, transport: Box<dyn WebhookTransport>) {
        self.remote = Some(Box::new(Remote::new(transport)));
        self.config = AdmissionConfig::empty();
        self.remembered.forget();
    }

    /// Whether the webhooks are called through a transport ([`Admission::go_remote`]).
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Remote mode: the configuration in force, from the stored objects `documents` (webhook configurations,
    /// ValidatingAdmissionPolicies and their bindings) and the stored CRDs' rules. What cannot be compiled is left
    /// out (the API server would have refused to store it) and returned, one line each. Nothing in in-process mode.
    pub fn configure_remote(&mut self, documents: &[serde_json::Value], crds: CrdRules) -> Vec<String> {
        let Some(remote) = &mut self.remote else { return Vec::new() };
        let (hooks, mut problems) = remote::Hooks::of(documents);
        remote.hooks = hooks;
        let mut policies = Vec::new();
        for policy in chart::policies_of(documents) {
            match policy {
                Ok(policy) => policies.push(policy),
                Err(error) => problems.push(error.to_string()),
            }
        }
        self.config = AdmissionConfig { registrations: Vec::new(), policies };
        self.crds = crds;
        self.remembered.forget();
        problems
    }

    /// Remote mode: each namespace's labels as served, which the webhooks' `namespaceSelector`s read.
    pub fn set_namespace_labels(&mut self, namespaces: BTreeMap<String, BTreeMap<String, String>>) {
        if let Some(remote) = &mut self.remote {
            remote.set_namespaces(namespaces);
        }
    }

    /// Applies `config` and `crds` instead of what ships (a test's: the chart as helm rendered it).
    pub fn configure(&mut self, config: AdmissionConfig, crds: CrdRules) {
        self.config = config;
        self.crds = crds;
        self.remembered.forget();
    }

    /// The settings ConfigMap's data as stored (`None`: it is missing): the policies' parameter.
    pub fn set_settings(&mut self, settings: Option<BTreeMap<String, String>>) {
        self.params = settings.as_ref().map(|data| {
            let configmap = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": keys::SETTINGS_CONFIGMAP, "namespace": self.namespace},
                "data": data,
            });
            cel::value_of(&configmap)
        });
        self.settings = settings;
        self.remembered.forget();
    }

    pub fn settings(&self) -> Option<&BTreeMap<String, String>> {
        self.settings.as_ref()
    }

    /// Whether the chart's guards on tenants' writes (policies, CRD rules, the order webhook on UPDATE) apply.
    fn guarded(&self) -> bool {
        !self.variant.unguarded_writes
    }

    /// The registration of `webhook` that calls it for `request`, if one does and the call can be made (a
    /// condition that fails to evaluate, or a call that cannot be made under `Fail`, refuses the request).
    fn called(
        &self,
        webhook: Webhook,
        request: &Request<'_>,
    ) -> Result<Option<&registration::Registration>, AdmissionError> {
        if webhook == Webhook::Order && request.operation == Operation::Update && !self.guarded() {
            return Ok(None);
        }
        let counterfactual = webhook == Webhook::Pod && self.variant.gate_migration_targets;
        let shipped = self.config.registrations(webhook).filter(|_| !counterfactual);
        for registration in shipped.chain(counterfactual.then_some(&self.pod_gating_targets)) {
            let calls = registration
                .calls(request, &self.functions)
                .map_err(|message| AdmissionError::Condition { name: registration.name.clone(), message })?;
            if calls && self.reachable(registration)? {
                return Ok(Some(registration));
            }
        }
        Ok(None)
    }

    /// Whether validating `request` needs its objects: some policy selects it and no condition on who asks skips
    /// it. `request` carries no objects here; a write that needs none is judged by [`Admission::validate`] without
    /// making them.
    pub fn needs_objects(&mut self, request: &Request<'_>) -> Result<bool, AdmissionError> {
        if self.remote.as_ref().is_some_and(|remote| remote.validating_rules_select(request)) {
            return Ok(true);
        }
        if !self.guarded() {
            return Ok(false);
        }
        if let Some(skipped) = self.remembered.skipped(request) {
            return Ok(!skipped);
        }
        let mut needs = false;
        for (index, policy) in self.config.policies.iter().enumerate() {
            let prefilter =
                policy.prefilter(index, request, self.params.as_ref(), &self.functions, &mut self.remembered);
            needs |= prefilter.map_err(AdmissionError::Policy)? != Prefilter::Skip;
        }
        self.remembered.remember_skipped(request, !needs);
        Ok(needs)
    }

    /// The validating policies, on `request` with its objects; in remote mode the validating webhooks after them.
    pub fn validate(&mut self, request: &Request<'_>) -> Result<(), AdmissionError> {
        if !self.needs_objects(request)? {
            return Ok(());
        }
        if self.guarded() {
            for (index, policy) in self.config.policies.iter().enumerate() {
                policy
                    .admit(index, request, self.params.as_ref(), &self.functions, &mut self.remembered)
                    .map_err(AdmissionError::Policy)?;
            }
        }
        match &mut self.remote {
            Some(remote) => remote.validate(request, &self.functions),
            None => Ok(()),
        }
    }

    /// The CRDs' rules on a custom resource whose ruled values (a claim's spec) `request` changes.
    pub fn validate_schema(&self, request: &Request<'_>) -> Result<(), RuleBroken> {
        if !self.guarded() {
            return Ok(());
        }
        let Some(object) = request.object else { return Ok(()) };
        if request.old_object.is_none() && !self.crds.judges_creates(request.resource.resource) {
            return Ok(());
        }
        let old = request.old_object.map(|old| old.json());
        self.crds.validate(request.resource.resource, &object.json(), old.as_ref())
    }

    /// The VMI webhook, where its registration selects the VMI `user` creates; its patch is applied to `vmi`. In
    /// remote mode, the stored mutating webhooks, their patches read back into `vmi`.
    pub fn admit_vmi(&mut self, view: &View, user: &request::User, vmi: &mut Vmi) -> Result<(), AdmissionError> {
        let request = Request {
            operation: Operation::Create,
            resource: request::VMIS,
            subresource: "",
            namespace: &vmi.namespace,
            name: &vmi.name,
            user,
            object: Some(&Judged::compact(&*vmi) as &dyn Served),
            old_object: None,
        };
        if let Some(remote) = &mut self.remote {
            let rendered = Judged::compact(&*vmi).json();
            let Some(patched) = remote.mutate(&request, rendered, &self.functions)? else { return Ok(()) };
            let read = gpuclaim_engine::convert::vmi_from_json(&patched, &vmi.namespace);
            *vmi = read.map_err(|e| read_back("VirtualMachineInstance", &e))?;
            return Ok(());
        }
        let Some(registration) = self.called(Webhook::Vmi, &request)? else { return Ok(()) };
        let name = registration.name.clone();
        let patch = rules::admit_vmi_with(view, vmi, &self.variant).map_err(|refusal| denied(name, &refusal))?;
        patch.apply(vmi);
        Ok(())
    }

    /// The pod webhook, where its registration selects `pod`; its patch is applied to `pod`. In remote mode, the
    /// stored mutating webhooks, their patches read back into `pod`.
    pub fn mutate_pod(&mut self, view: &View, user: &request::User, pod: &mut Pod) -> Result<(), AdmissionError> {
        let head = Request {
            operation: Operation::Create,
            resource: request::PODS,
            subresource: "",
            namespace: &pod.namespace,
            name: &pod.name,
            user,
            object: Some(&Judged::compact(&*pod) as &dyn Served),
            old_object: None,
        };
        if let Some(remote) = &mut self.remote {
            let rendered = Judged::compact(&*pod).json();
            let Some(patched) = remote.mutate(&head, rendered, &self.functions)? else { return Ok(()) };
            let read = gpuclaim_engine::convert::pod_from_json(&patched, &pod.namespace);
            *pod = read.map_err(|e| read_back("Pod", &e))?;
            return Ok(());
        }
        let Some(registration) = self.called(Webhook::Pod, &head)? else { return Ok(()) };
        let name = registration.name.clone();
        let calls = if self.reinvoke_pod_webhook { 2 } else { 1 };
        for _ in 0..calls {
            let patch =
                rules::mutate_pod_with(view, pod, &self.variant).map_err(|refusal| denied(name.clone(), &refusal))?;
            self.apply_pod_patch(patch, pod);
        }
        Ok(())
    }

    /// [`PodPatch::apply`], with the toleration list it makes shared with earlier pods that came with the same list
    /// and gained the same tolerations.
    fn apply_pod_patch(&mut self, patch: PodPatch, pod: &mut Pod) {
        let PodPatch { add_gate, add_tolerations } = patch;
        if !add_tolerations.is_empty() {
            let before = &pod.tolerations;
            let made =
                self.tolerated.iter().find(|made| Arc::ptr_eq(&made.from, before) && made.added == add_tolerations);
            match made {
                Some(made) => pod.tolerations = Arc::clone(&made.result),
                None => {
                    let from = Arc::clone(before);
                    PodPatch { add_gate: false, add_tolerations: add_tolerations.clone() }.apply(pod);
                    if self.tolerated.len() == TOLERATED_MAX {
                        self.tolerated.clear();
                    }
                    self.tolerated.push(Tolerated {
                        from,
                        added: add_tolerations,
                        result: Arc::clone(&pod.tolerations),
                    });
                }
            }
        }
        PodPatch { add_gate, add_tolerations: Vec::new() }.apply(pod);
    }

    /// The order webhook, where its registration selects `request` (a claim's CREATE or UPDATE), on `order`. In
    /// remote mode nothing: the stored validating webhooks were called by [`Admission::validate`].
    pub fn validate_order(&self, view: &View, request: &Request<'_>, order: Order<'_>) -> Result<(), AdmissionError> {
        if self.remote.is_some() {
            return Ok(());
        }
        let Some(registration) = self.called(Webhook::Order, request)? else { return Ok(()) };
        rules::validate_order(view, order, &request.user.username)
            .map_err(|refusal| denied(registration.name.clone(), &refusal))
    }
}

fn denied(name: String, refusal: &impl Refusal) -> AdmissionError {
    let reason = Cow::Borrowed(refusal.reason());
    AdmissionError::Denied { name, reason, code: refusal.code(), message: refusal.to_string() }
}

/// A patched object the compact types cannot hold: the API server's internal error (a webhook's patch that makes the
/// object undecodable).
fn read_back(kind: &str, error: &gpuclaim_engine::convert::ConvertError) -> AdmissionError {
    AdmissionError::Internal(format!("the patched {kind} cannot be read: {}: {}", error.field, error.reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuclaim_engine::convert::pod_from_json;
    use gpuclaim_engine::fixtures::{launcher_pod_json, platform};

    const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

    fn launcher(attachments: &str) -> Pod {
        pod_from_json(&launcher_pod_json("tenant-a", "vm-1", attachments, H100, 1), "tenant-a").unwrap()
    }

    #[test]
    fn launchers_that_gain_the_same_tolerations_share_one_list_with_the_rules_content() {
        let (view, mut admission) = (platform(), Admission::default());
        let h100 = launcher(r#"[{"template":0,"class":"h100","count":1}]"#);
        let vgpu = launcher(r#"[{"template":0,"class":"a100-40c","count":1}]"#);
        // Launchers come with one shared list, as the twin renders them.
        let (mut a, mut b, mut c) = (h100.clone(), h100.clone(), vgpu.clone());
        c.tolerations = Arc::clone(&h100.tolerations);
        for pod in [&mut a, &mut b, &mut c] {
            admission.mutate_pod(&view, &crate::users::kubevirt_controller(), pod).unwrap();
        }
        let mut expected = h100.clone();
        rules::mutate_pod(&view, &expected).unwrap().apply(&mut expected);
        assert_eq!(a, expected, "the whole pod is what the rule's patch makes of it");
        assert!(Arc::ptr_eq(&a.tolerations, &b.tolerations), "the same start and the same additions: one list");
        let mut expected_vgpu = vgpu.clone();
        expected_vgpu.tolerations = Arc::clone(&h100.tolerations);
        rules::mutate_pod(&view, &expected_vgpu).unwrap().apply(&mut expected_vgpu);
        assert_eq!(c.tolerations, expected_vgpu.tolerations);
        assert_ne!(a.tolerations, c.tolerations, "another class's tolerations: another list");
        assert_eq!(*h100.tolerations, *launcher(r#"[]"#).tolerations, "the list the pods came with is untouched");
    }
}
