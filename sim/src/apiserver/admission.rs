//! The admission chain as the API server runs it: each of the engine's webhooks called for the objects its
//! configuration selects, fail closed (`failurePolicy: Fail`): with no ready replica behind the webhook's Service,
//! a create it selects is refused with the API server's "no endpoints" error.

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, Pod, View, Vmi};
use gpuclaim_engine::review::Webhook;
use gpuclaim_engine::rules::{self, Refusal};
use gpuclaim_engine::variant::Variant;

/// The Service in front of the webhook replicas (the chart's names).
pub const WEBHOOK_SERVICE: &str = "gpuclaim-webhook";

/// A create the admission chain refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The webhook answered and denied: its reason and message.
    #[error("admission webhook {:?} denied the request: {message}", configuration_name(*webhook))]
    Denied { webhook: Webhook, reason: &'static str, message: String },
    /// No webhook replica is ready: the call fails and the policy fails the request closed.
    #[error(
        "Internal error occurred: failed calling webhook {:?}: failed to call webhook: Post \"https://{WEBHOOK_SERVICE}.{namespace}.svc:443{}?timeout=10s\": no endpoints available for service {WEBHOOK_SERVICE:?}",
        configuration_name(*webhook),
        webhook.path()
    )]
    Unavailable { webhook: Webhook, namespace: String },
}

impl AdmissionError {
    /// The reason a client reads: the refusal's own for a denial, `InternalError` for an outage.
    pub fn reason(&self) -> &'static str {
        match self {
            AdmissionError::Denied { reason, .. } => reason,
            AdmissionError::Unavailable { .. } => "InternalError",
        }
    }
}

/// The webhook's name in its configuration (`<webhook>.gpu.cozystack.io`).
pub fn configuration_name(webhook: Webhook) -> String {
    format!("{}.{}", webhook.name(), keys::GROUP)
}

/// The webhook replicas as the API server reaches them.
#[derive(Clone, Debug)]
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
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            ready_replicas: 2,
            namespace: keys::DEFAULT_CONTROLLER_NAMESPACE.to_owned(),
            variant: Variant::SHIPPED,
            reinvoke_pod_webhook: false,
        }
    }
}

impl Admission {
    fn reachable(&self, webhook: Webhook) -> Result<(), AdmissionError> {
        if self.ready_replicas == 0 {
            return Err(AdmissionError::Unavailable { webhook, namespace: self.namespace.clone() });
        }
        Ok(())
    }

    /// The VMI webhook, for VMIs carrying the claims label; its patch is applied to `vmi`.
    pub fn admit_vmi(&self, view: &View, vmi: &mut Vmi) -> Result<(), AdmissionError> {
        if vmi.labels.get(keys::LABEL_CLAIMS).map(String::as_str) != Some(keys::TRUE) {
            return Ok(());
        }
        self.reachable(Webhook::Vmi)?;
        let patch =
            rules::admit_vmi_with(view, vmi, &self.variant).map_err(|refusal| denied(Webhook::Vmi, &refusal))?;
        patch.apply(vmi);
        Ok(())
    }

    /// The pod webhook, for pods carrying the claims label; its patch is applied to `pod`.
    pub fn mutate_pod(&self, view: &View, pod: &mut Pod) -> Result<(), AdmissionError> {
        if !gpuclaim_engine::model::is_claims_pod(pod) {
            return Ok(());
        }
        self.reachable(Webhook::Pod)?;
        let calls = if self.reinvoke_pod_webhook { 2 } else { 1 };
        for _ in 0..calls {
            let patch =
                rules::mutate_pod_with(view, pod, &self.variant).map_err(|refusal| denied(Webhook::Pod, &refusal))?;
            patch.apply(pod);
        }
        Ok(())
    }

    /// The order webhook, for every GPUClaim create, as `requester`.
    pub fn validate_order(&self, view: &View, claim: &Claim, requester: &str) -> Result<(), AdmissionError> {
        self.reachable(Webhook::Order)?;
        rules::validate_order(view, claim, requester).map_err(|refusal| denied(Webhook::Order, &refusal))
    }
}

fn denied(webhook: Webhook, refusal: &impl Refusal) -> AdmissionError {
    AdmissionError::Denied { webhook, reason: refusal.reason(), message: refusal.to_string() }
}
