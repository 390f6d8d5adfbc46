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
    #[serde(default)]
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
    matcher: Matcher,
}

/// What a registration is called for, compiled: its rules, its `objectSelector` and its `matchConditions` (the
/// in-process registrations and the ones read from stored configurations share it).
pub struct Matcher {
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
        let fail_closed = fail_closed(&full, spec.failure_policy.as_deref())?;
        let matcher = Matcher::compile(&full, spec)?;
        Ok(Registration { name: full, webhook, fail_closed, matcher })
    }

    /// Whether the API server calls the webhook for `request`; `Err` is a condition that failed to evaluate (the
    /// request is then refused, as `failurePolicy: Fail` has it).
    pub fn calls(&self, request: &Request<'_>, functions: &Context<'_>) -> Result<bool, String> {
        self.matcher.calls(request, functions)
    }
}

/// Whether `failurePolicy` (of the webhook `name`) fails closed: `Fail` (the default) does, `Ignore` does not.
pub fn fail_closed(name: &str, failure_policy: Option<&str>) -> Result<bool, RegistrationError> {
    match failure_policy {
        None | Some("Fail") => Ok(true),
        Some("Ignore") => Ok(false),
        Some(other) => Err(RegistrationError::Invalid {
            webhook: name.to_owned(),
            reason: format!("failurePolicy {other:?} is neither Fail nor Ignore"),
        }),
    }
}

impl Matcher {
    /// Compiles what `spec` (of the webhook `name`) says the webhook is called for.
    pub fn compile(name: &str, spec: RegistrationSpec) -> Result<Matcher, RegistrationError> {
        let webhook = || name.to_owned();
        let selector = spec
            .object_selector
            .map(Selector::try_from)
            .transpose()
            .map_err(|e| RegistrationError::Invalid { webhook: webhook(), reason: format!("objectSelector: {e}") })?;
        let conditions = spec
            .match_conditions
            .iter()
            .map(|c| Expression::compile(&c.expression))
            .collect::<Result<_, _>>()
            .map_err(|source| RegistrationError::Compile { webhook: webhook(), source })?;
        Ok(Matcher { rules: spec.rules, selector, conditions })
    }

    /// Whether the rules alone select `request` (its operation, resource and subresource): what can be told before
    /// the objects are made.
    pub fn rules_select(&self, request: &Request<'_>) -> bool {
        self.rules.iter().any(|rule| {
            let RuleWithOperations { api_groups, api_versions, operations, resources, scope } = rule;
            Rule { api_groups, api_versions, operations, resources, scope }.selects(request)
        })
    }

    /// Whether the API server calls the webhook for `request`; `Err` is a condition that failed to evaluate.
    pub fn calls(&self, request: &Request<'_>, functions: &Context<'_>) -> Result<bool, String> {
        if !self.rules_select(request) {
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
