//! What a webhook is called for, as its registration in the chart says: its rules (operations and resources), its
//! `objectSelector` (matched against the object or the stored object, as the API server does: either matching is
//! enough), its `matchConditions` (any false: not called; an error: refused) and its failure policy (what a call
//! that cannot be made does to the request).

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, RuleWithOperations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_cel::cel::Context;
use kube_core::{Selector, SelectorExt};
use serde::Deserialize;

use gpuclaim_engine::review::Webhook;

use super::cel::{CompileError, Expression};
use super::policy::Rule;
use super::request::Request;

/// A registration that cannot be applied as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    #[error("webhook {webhook}: {reason}")]
    Invalid { webhook: String, reason: String },
    #[error("webhook {webhook}: {source}")]
    Compile { webhook: String, source: CompileError },
}

/// The fields of a webhook registration that say what it is called for.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationSpec {
    #[serde(default)]
    pub failure_policy: Option<String>,
    pub rules: Vec<RuleWithOperations>,
    #[serde(default)]
    pub object_selector: Option<LabelSelector>,
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
}

/// One webhook's registration, compiled.
pub struct Registration {
    /// Its name in the configuration (`order-update.gpu.cozystack.io`).
    pub name: String,
    /// The engine's webhook it calls.
    pub webhook: Webhook,
    /// `failurePolicy: Fail` (the default): a call that cannot be made refuses the request.
    pub fail_closed: bool,
    rules: Vec<RuleWithOperations>,
    selector: Option<Selector>,
    conditions: Vec<Expression>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Registration {
    /// The registration `name` (`order-update`, its configuration name without our group) of `webhook`.
    pub fn new(name: &str, webhook: Webhook, spec: RegistrationSpec) -> Result<Registration, RegistrationError> {
        let full = format!("{name}.{}", gpuclaim_engine::keys::GROUP);
        let name = || full.clone();
        let selector = spec
            .object_selector
            .map(Selector::try_from)
            .transpose()
            .map_err(|e| RegistrationError::Invalid { webhook: name(), reason: format!("objectSelector: {e}") })?;
        let conditions = spec
            .match_conditions
            .iter()
            .map(|c| Expression::compile(&c.expression))
            .collect::<Result<_, _>>()
            .map_err(|source| RegistrationError::Compile { webhook: name(), source })?;
        let fail_closed = match spec.failure_policy.as_deref() {
            None | Some("Fail") => true,
            Some("Ignore") => false,
            Some(other) => {
                return Err(RegistrationError::Invalid {
                    webhook: name(),
                    reason: format!("failurePolicy {other:?} is neither Fail nor Ignore"),
                });
            }
        };
        Ok(Registration { name: full, webhook, fail_closed, rules: spec.rules, selector, conditions })
    }

    /// Whether the API server calls the webhook for `request`; `Err` is a condition that failed to evaluate (the
    /// request is then refused, as `failurePolicy: Fail` has it).
    pub fn calls(&self, request: &Request<'_>, functions: &Context<'_>) -> Result<bool, String> {
        let ruled = self.rules.iter().any(|rule| {
            let RuleWithOperations { api_groups, api_versions, operations, resources, scope } = rule;
            Rule { api_groups, api_versions, operations, resources, scope }.selects(request)
        });
        if !ruled {
            return Ok(false);
        }
        if let Some(selector) = &self.selector {
            let selected = [request.object, request.old_object]
                .into_iter()
                .flatten()
                .any(|object| selector.matches(&object.labels()));
            if !selected {
                return Ok(false);
            }
        }
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let scope = request.scope(functions, None, true);
        let mut failed = None;
        for condition in &self.conditions {
            match condition.evaluate_bool(&scope) {
                Ok(false) => return Ok(false),
                Ok(true) => {}
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        failed.map_or(Ok(true), Err)
    }
}
