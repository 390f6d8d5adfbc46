//! The chart's admission configuration (`charts/gpuclaim/admission/`): the webhooks' registrations and the
//! ValidatingAdmissionPolicies, read from the very files the chart's templates include, compiled into the twin;
//! or read from the chart as helm rendered it, so a test can hold the twin to what ships.

use k8s_openapi::api::admissionregistration::v1::{
    ParamRef, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec,
};
use serde_json::Value;

use gpuclaim_engine::keys;
use gpuclaim_engine::review::Webhook;

use super::policy::{Policy, PolicyError};
use super::registration::{Registration, RegistrationError, RegistrationSpec};

/// The chart's name prefix for what it installs (the release `gpuclaim` of the chart `gpuclaim`).
pub const RELEASE: &str = "gpuclaim";

/// The webhook registration files of `charts/gpuclaim/admission/webhooks/`: the registration's name (its file
/// stem), the engine's webhook it calls, the file.
pub const WEBHOOK_FILES: [(&str, Webhook, &str); 4] = [
    ("vmi", Webhook::Vmi, include_str!("../../../../charts/gpuclaim/admission/webhooks/vmi.yaml")),
    ("pod", Webhook::Pod, include_str!("../../../../charts/gpuclaim/admission/webhooks/pod.yaml")),
    ("order", Webhook::Order, include_str!("../../../../charts/gpuclaim/admission/webhooks/order.yaml")),
    ("order-update", Webhook::Order, include_str!("../../../../charts/gpuclaim/admission/webhooks/order-update.yaml")),
];

/// The policy files of `charts/gpuclaim/admission/policies/`, by file stem (a test checks none is missing).
pub const POLICY_FILES: [(&str, &str); 3] = [
    ("controller-writes", include_str!("../../../../charts/gpuclaim/admission/policies/controller-writes.yaml")),
    ("template-mark", include_str!("../../../../charts/gpuclaim/admission/policies/template-mark.yaml")),
    ("vgpu-entitlement", include_str!("../../../../charts/gpuclaim/admission/policies/vgpu-entitlement.yaml")),
];

/// A configuration that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("the rendered chart has no webhook {0:?}")]
    WebhookMissing(String),
    #[error("policy {0}: no binding names it")]
    Unbound(String),
}

/// The webhooks' registrations and the policies, compiled.
#[derive(Debug)]
pub struct AdmissionConfig {
    pub registrations: Vec<Registration>,
    pub policies: Vec<Policy>,
}

fn yaml<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, ConfigError> {
    let unreadable = |reason: String| ConfigError::Unreadable { file: file.to_owned(), reason };
    let value = gpuclaim_engine::yaml::from_str(text).map_err(|e| unreadable(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| unreadable(e.to_string()))
}

fn json<T: serde::de::DeserializeOwned>(what: &str, value: &Value) -> Result<T, ConfigError> {
    serde_json::from_value(value.clone())
        .map_err(|e| ConfigError::Unreadable { file: what.to_owned(), reason: e.to_string() })
}

/// The binding the chart's template renders for a policy (`templates/policies.yaml`).
pub fn chart_binding(policy: &str, controller_namespace: &str) -> ValidatingAdmissionPolicyBindingSpec {
    ValidatingAdmissionPolicyBindingSpec {
        policy_name: Some(policy.to_owned()),
        validation_actions: Some(vec!["Deny".to_owned()]),
        param_ref: Some(ParamRef {
            name: Some(keys::SETTINGS_CONFIGMAP.to_owned()),
            namespace: Some(controller_namespace.to_owned()),
            parameter_not_found_action: Some("Allow".to_owned()),
            selector: None,
        }),
        match_resources: None,
    }
}

fn of_kind<'a>(documents: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
    documents.iter().filter(move |d| d["kind"] == kind)
}

/// The pod webhook's registration with its objectSelector's expressions dropped (migration targets selected too):
/// what the counterfactual `gate-migration-targets` would need the chart to register.
pub fn pod_registration_gating_targets() -> Registration {
    let (_, _, text) = WEBHOOK_FILES.iter().find(|(name, _, _)| *name == "pod").expect("listed");
    let mut spec: RegistrationSpec = yaml("admission/webhooks/pod.yaml", text).expect("the chart's file reads");
    if let Some(selector) = &mut spec.object_selector {
        selector.match_expressions = None;
    }
    Registration::new("pod", Webhook::Pod, spec).expect("the chart's file compiles")
}

/// The ValidatingAdmissionPolicies among `documents`, each with the first binding that names it (in the documents'
/// order), compiled one by one: a policy that cannot be read, compiled or bound is its own error.
pub fn policies_of(documents: &[Value]) -> Vec<Result<Policy, ConfigError>> {
    let bindings: Vec<Result<ValidatingAdmissionPolicyBinding, ConfigError>> =
        of_kind(documents, "ValidatingAdmissionPolicyBinding")
            .map(|b| json("a ValidatingAdmissionPolicyBinding", b))
            .collect();
    let mut policies = Vec::new();
    if let Some(Err(unreadable)) = bindings.iter().find(|b| b.is_err()) {
        policies.push(Err(unreadable.clone()));
    }
    let bindings: Vec<&ValidatingAdmissionPolicyBinding> = bindings.iter().filter_map(|b| b.as_ref().ok()).collect();
    for document in of_kind(documents, "ValidatingAdmissionPolicy") {
        policies.push(json("a ValidatingAdmissionPolicy", document).and_then(|policy: ValidatingAdmissionPolicy| {
            let name = policy.metadata.name.clone().unwrap_or_default();
            let binding = bindings
                .iter()
                .find(|b| b.spec.as_ref().and_then(|s| s.policy_name.as_deref()) == Some(name.as_str()))
                .ok_or_else(|| ConfigError::Unbound(name.clone()))?;
            let binding_name = binding.metadata.name.clone().unwrap_or_default();
            let spec = policy.spec.unwrap_or_default();
            Ok(Policy::new(&name, &spec, &binding_name, binding.spec.as_ref().expect("found by its spec"))?)
        }));
    }
    policies
}

impl AdmissionConfig {
    /// No webhook and no policy: a cluster where nothing of the chart is applied yet.
    pub fn empty() -> AdmissionConfig {
        AdmissionConfig { registrations: Vec::new(), policies: Vec::new() }
    }

    /// The configuration that ships: the chart's files, compiled in, bound as the chart binds them.
    pub fn shipped(controller_namespace: &str) -> Result<AdmissionConfig, ConfigError> {
        let registrations = WEBHOOK_FILES
            .iter()
            .map(|(name, webhook, text)| {
                let file = format!("admission/webhooks/{name}.yaml");
                Ok(Registration::new(name, *webhook, yaml(&file, text)?)?)
            })
            .collect::<Result<_, ConfigError>>()?;
        let policies = POLICY_FILES
            .iter()
            .map(|(stem, text)| {
                let spec: ValidatingAdmissionPolicySpec = yaml(&format!("admission/policies/{stem}.yaml"), text)?;
                let name = format!("{RELEASE}-{stem}");
                Ok(Policy::new(&name, &spec, &name, &chart_binding(&name, controller_namespace))?)
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(AdmissionConfig { registrations, policies })
    }

    /// The configuration in the chart's rendered documents (webhook configurations, policies and bindings).
    pub fn from_rendered(documents: &[Value]) -> Result<AdmissionConfig, ConfigError> {
        let webhooks: Vec<&Value> = of_kind(documents, "MutatingWebhookConfiguration")
            .chain(of_kind(documents, "ValidatingWebhookConfiguration"))
            .flat_map(|c| c["webhooks"].as_array().into_iter().flatten())
            .collect();
        let mut registrations = Vec::new();
        for (stem, webhook, _) in WEBHOOK_FILES {
            let name = format!("{stem}.{}", keys::GROUP);
            let entry = webhooks
                .iter()
                .find(|w| w["name"] == name.as_str())
                .ok_or_else(|| ConfigError::WebhookMissing(name.clone()))?;
            let spec: RegistrationSpec = json(&format!("webhook {name}"), entry)?;
            registrations.push(Registration::new(stem, webhook, spec)?);
        }
        let policies = policies_of(documents).into_iter().collect::<Result<_, _>>()?;
        Ok(AdmissionConfig { registrations, policies })
    }

    /// The registrations that call `webhook`.
    pub fn registrations(&self, webhook: Webhook) -> impl Iterator<Item = &Registration> {
        self.registrations.iter().filter(move |r| r.webhook == webhook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_configuration_compiles() {
        let config = AdmissionConfig::shipped(keys::DEFAULT_CONTROLLER_NAMESPACE).unwrap();
        assert_eq!(config.registrations.len(), 4);
        let names: Vec<&str> = config.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["gpuclaim-controller-writes", "gpuclaim-template-mark", "gpuclaim-vgpu-entitlement"]);
    }

    fn stems(dir: &str) -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/gpuclaim/admission").join(dir);
        let mut stems: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path().file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        stems.sort();
        stems
    }

    #[test]
    fn every_admission_file_of_the_chart_is_compiled_in() {
        assert_eq!(stems("policies"), POLICY_FILES.map(|(stem, _)| stem));
        let mut webhooks = WEBHOOK_FILES.map(|(stem, _, _)| stem);
        webhooks.sort();
        assert_eq!(stems("webhooks"), webhooks);
        for (stem, webhook, _) in WEBHOOK_FILES {
            assert!(webhook.registrations().contains(&stem), "{stem} is one of {webhook:?}'s registrations");
        }
    }
}
