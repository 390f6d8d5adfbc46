//! The admission chain as the API server runs it: each of the engine's webhooks called for the objects its
//! configuration selects, fail closed (`failurePolicy: Fail`): with no ready replica behind the webhook's Service,
//! a create it selects is refused with the API server's "no endpoints" error.

use std::sync::Arc;

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Claim, Pod, View, Vmi};
use gpuclaim_engine::review::Webhook;
use gpuclaim_engine::rules::{self, PodPatch, Refusal};
use gpuclaim_engine::variant::Variant;
use k8s_openapi::api::core::v1::Toleration;

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
    /// Toleration lists the pod webhook's patches produced: (the list a pod came with, what the patch added, the
    /// result). Launchers come with one shared list and gain their classes' tolerations, so the results are shared
    /// too (a pod's lists are copied on write) instead of copied for every launcher. Holding the list a pod came
    /// with keeps its address from being reused while it is remembered. At most [`TOLERATED_MAX`].
    tolerated: Vec<Tolerated>,
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
        Admission {
            ready_replicas: 2,
            namespace: keys::DEFAULT_CONTROLLER_NAMESPACE.to_owned(),
            variant: Variant::SHIPPED,
            reinvoke_pod_webhook: false,
            tolerated: Vec::new(),
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
    pub fn mutate_pod(&mut self, view: &View, pod: &mut Pod) -> Result<(), AdmissionError> {
        if !gpuclaim_engine::model::is_claims_pod(pod) {
            return Ok(());
        }
        self.reachable(Webhook::Pod)?;
        let calls = if self.reinvoke_pod_webhook { 2 } else { 1 };
        for _ in 0..calls {
            let patch =
                rules::mutate_pod_with(view, pod, &self.variant).map_err(|refusal| denied(Webhook::Pod, &refusal))?;
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

    /// The order webhook, for every GPUClaim create, as `requester`.
    pub fn validate_order(&self, view: &View, claim: &Claim, requester: &str) -> Result<(), AdmissionError> {
        self.reachable(Webhook::Order)?;
        rules::validate_order(view, claim, requester).map_err(|refusal| denied(Webhook::Order, &refusal))
    }
}

fn denied(webhook: Webhook, refusal: &impl Refusal) -> AdmissionError {
    AdmissionError::Denied { webhook, reason: refusal.reason(), message: refusal.to_string() }
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
            admission.mutate_pod(&view, pod).unwrap();
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
