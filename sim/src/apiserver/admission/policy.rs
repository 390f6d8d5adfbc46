//! ValidatingAdmissionPolicies as the API server applies them (`admission/plugin/policy/validating`), one policy
//! with one binding:
//!
//! 1. `matchConstraints.resourceRules` select the request (group, version, resource or `resource/subresource`,
//!    operation); anything else skips the policy.
//! 2. The binding's parameter is looked up *before* any condition: missing with `parameterNotFoundAction: Deny`, the
//!    request is refused whatever it is; with `Allow`, `params` is null.
//! 3. `matchConditions`: any false skips the policy (whatever the others do); else any error fails it under the
//!    failure policy. Conditions that read only who asks are evaluated first and their results kept per user (see
//!    [`Remembered`]): a false one skips the policy before the objects are even made.
//! 4. `variables`, in order, each seeing those before it (Kubernetes evaluates them lazily; for expressions that do
//!    not fail the results are the same).
//! 5. `validations`, in order: the first false refuses with its message (its `messageExpression` when that yields a
//!    string) and its reason (default `Invalid`); an error refuses under `failurePolicy: Fail`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::admissionregistration::v1::{
    NamedRuleWithOperations, ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec,
};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Value};

use super::cel::{CompileError, Expression};
use super::request::{Operation, Request};

/// A policy that cannot be applied as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {policy}: {source}")]
    Compile { policy: String, source: CompileError },
    #[error("policy {policy}: {field} is not supported by the twin's API server ({why})")]
    Unsupported { policy: String, field: &'static str, why: &'static str },
    #[error("policy {policy}: {field} is missing")]
    Missing { policy: String, field: &'static str },
}

/// A refusal, as the API server words it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub policy: String,
    pub binding: String,
    /// The status reason (`Forbidden`, `Invalid`, ...).
    pub reason: String,
    pub message: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
            self.policy, self.binding, self.message
        )
    }
}

struct Check {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: String,
}

/// One policy and its binding, compiled.
pub struct Policy {
    pub name: String,
    pub binding: String,
    rules: Vec<NamedRuleWithOperations>,
    fail_closed: bool,
    parameter_not_found_denies: bool,
    /// (name, expression), in the order written.
    conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Check>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy").field("name", &self.name).field("binding", &self.binding).finish_non_exhaustive()
    }
}

/// What conditions that read only who asks answered, per policy, condition and user. Within one world a user's
/// groups never change and the parameter changes only through [`Remembered::forget`], so the answer is the
/// condition's: it saves evaluating CEL on every write of the controller and of KubeVirt (most of the API server's
/// writes), which would otherwise cost about a tenth of a run (an evaluation with its scope is ~10 µs).
///
/// On top of the conditions' answers, what all the policies together make of a request before its objects (every
/// one skips it, or not) is kept per (resource, subresource, operation) and user: that is all such a decision
/// reads, and it turns the twin's busiest writes into one lookup (ref-1k ran 1.16× slower without it).
#[derive(Debug, Default)]
pub struct Remembered {
    /// By user, then (policy slot, condition index).
    answers: BTreeMap<String, BTreeMap<(usize, usize), bool>>,
    /// (resource, subresource, operation) → (user, every policy skips it).
    skipped: HashMap<WriteKind, Vec<(String, bool)>, foldhash::fast::FixedState>,
}

/// A kind of write: its resource, subresource and operation.
type WriteKind = (&'static str, &'static str, Operation);

impl Remembered {
    /// The parameter or the configuration changed: every answer may.
    pub fn forget(&mut self) {
        self.answers.clear();
        self.skipped.clear();
    }

    /// Whether every policy was found to skip requests like `request` from its user.
    pub fn skipped(&self, request: &Request<'_>) -> Option<bool> {
        let key = (request.resource.resource, request.subresource, request.operation);
        let users = self.skipped.get(&key)?;
        users.iter().find(|(user, _)| *user == request.user.username).map(|(_, skipped)| *skipped)
    }

    /// Keeps what every policy made of `request` before its objects.
    pub fn remember_skipped(&mut self, request: &Request<'_>, skipped: bool) {
        let key = (request.resource.resource, request.subresource, request.operation);
        self.skipped.entry(key).or_default().push((request.user.username.clone(), skipped));
    }
}

/// What a policy makes of a request before looking at its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prefilter {
    /// Not for this policy: its rules do not select the request, or a condition on who asks is false.
    Skip,
    /// The objects must be judged; a condition on who asks failed to evaluate (decided once the others are in).
    Judge { failed: Option<String> },
}

/// (name, expression) pairs, each compiled.
fn compile_named<'a>(
    policy: &str,
    named: impl Iterator<Item = (&'a String, &'a String)>,
) -> Result<Vec<(String, Expression)>, PolicyError> {
    named.map(|(name, source)| Ok((name.clone(), compile(policy, source)?))).collect()
}

fn compile(policy: &str, source: &str) -> Result<Expression, PolicyError> {
    Expression::compile(source).map_err(|source| PolicyError::Compile { policy: policy.to_owned(), source })
}

impl Policy {
    /// Compiles `spec`, bound by `binding` (named `binding_name`).
    pub fn new(
        name: &str,
        spec: &ValidatingAdmissionPolicySpec,
        binding_name: &str,
        binding: &ValidatingAdmissionPolicyBindingSpec,
    ) -> Result<Policy, PolicyError> {
        let unsupported = |field, why| PolicyError::Unsupported { policy: name.to_owned(), field, why };
        let constraints = spec
            .match_constraints
            .as_ref()
            .ok_or(PolicyError::Missing { policy: name.to_owned(), field: "matchConstraints" })?;
        if constraints.namespace_selector.as_ref().is_some_and(|s| s != &Default::default())
            || constraints.object_selector.as_ref().is_some_and(|s| s != &Default::default())
            || constraints.exclude_resource_rules.as_ref().is_some_and(|r| !r.is_empty())
        {
            return Err(unsupported("matchConstraints", "only resourceRules select requests"));
        }
        if binding.match_resources.is_some() {
            return Err(unsupported("binding matchResources", "a binding applies to all the policy matches"));
        }
        if spec.audit_annotations.as_ref().is_some_and(|a| !a.is_empty()) {
            return Err(unsupported("auditAnnotations", "the twin keeps no audit log"));
        }
        let conditions = compile_named(name, spec.match_conditions.iter().flatten().map(|c| (&c.name, &c.expression)))?;
        let variables = compile_named(name, spec.variables.iter().flatten().map(|v| (&v.name, &v.expression)))?;
        let validations = spec
            .validations
            .iter()
            .flatten()
            .map(|v| {
                Ok(Check {
                    expression: compile(name, &v.expression)?,
                    message: v.message.clone(),
                    message_expression: v.message_expression.as_deref().map(|e| compile(name, e)).transpose()?,
                    reason: v.reason.clone().unwrap_or_else(|| "Invalid".to_owned()),
                })
            })
            .collect::<Result<_, PolicyError>>()?;
        let parameter_not_found_denies = binding
            .param_ref
            .as_ref()
            .is_some_and(|p| p.parameter_not_found_action.as_deref().unwrap_or("Deny") == "Deny");
        Ok(Policy {
            name: name.to_owned(),
            binding: binding_name.to_owned(),
            rules: constraints.resource_rules.clone().unwrap_or_default(),
            fail_closed: spec.failure_policy.as_deref().unwrap_or("Fail") == "Fail",
            parameter_not_found_denies,
            conditions,
            variables,
            validations,
        })
    }

    /// Whether the policy's resource rules select the request.
    pub fn selects(&self, request: &Request<'_>) -> bool {
        self.rules.iter().any(|rule| rule_selects(rule, request))
    }

    /// What the policy makes of `request` before it looks at the objects: the resource rules, the parameter and
    /// the conditions on who asks (answers kept in `remembered` under slot `index`, the policy's place in its
    /// configuration). `request` needs no objects here.
    pub fn prefilter(
        &self,
        index: usize,
        request: &Request<'_>,
        params: Option<&Value>,
        functions: &Context<'_>,
        remembered: &mut Remembered,
    ) -> Result<Prefilter, Denial> {
        if !self.selects(request) {
            return Ok(Prefilter::Skip);
        }
        if params.is_none() && self.parameter_not_found_denies {
            return self
                .failed(
                    "failed to configure binding: no params found for policy binding with `Deny` \
                     parameterNotFoundAction",
                )
                .map(|()| Prefilter::Skip);
        }
        let params = params.cloned().unwrap_or(Value::Null);
        let mut requester_scope: Option<Context<'_>> = None;
        let mut failed = None;
        for (condition_index, (_, condition)) in self.conditions.iter().enumerate() {
            if !condition.reads_only_the_requester {
                continue;
            }
            let known =
                remembered.answers.get(request.user.username.as_str()).and_then(|a| a.get(&(index, condition_index)));
            let answer = match known {
                Some(answer) => Ok(*answer),
                None => {
                    let scope = requester_scope.get_or_insert_with(|| request.scope(functions, Some(&params), false));
                    condition.evaluate_bool(scope).inspect(|answer| {
                        let answers = remembered.answers.entry(request.user.username.clone()).or_default();
                        answers.insert((index, condition_index), *answer);
                    })
                }
            };
            match answer {
                // A false condition skips the policy whatever the others say.
                Ok(false) => return Ok(Prefilter::Skip),
                Ok(true) => {}
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        Ok(Prefilter::Judge { failed })
    }

    /// Applies the policy to `request` (with its objects) and its parameter (`None`: not found).
    pub fn admit(
        &self,
        index: usize,
        request: &Request<'_>,
        params: Option<&Value>,
        functions: &Context<'_>,
        remembered: &mut Remembered,
    ) -> Result<(), Denial> {
        let Prefilter::Judge { mut failed } = self.prefilter(index, request, params, functions, remembered)? else {
            return Ok(());
        };
        let params = params.cloned().unwrap_or(Value::Null);
        let mut scope = request.scope(functions, Some(&params), true);
        for (_, condition) in self.conditions.iter().filter(|(_, c)| !c.reads_only_the_requester) {
            match condition.evaluate_bool(&scope) {
                Ok(false) => return Ok(()),
                Ok(true) => {}
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        if let Some(error) = failed {
            return self.failed(&error);
        }
        let mut variables: std::collections::HashMap<Key, Value> = std::collections::HashMap::new();
        for (name, expression) in &self.variables {
            scope.add_variable_from_value("variables", Value::from(variables.clone()));
            if let Ok(value) = expression.evaluate(&scope) {
                variables.insert(Key::String(name.clone().into()), value);
            }
        }
        scope.add_variable_from_value("variables", Value::from(variables));
        for check in &self.validations {
            match check.expression.evaluate_bool(&scope) {
                Ok(true) => {}
                Ok(false) => {
                    let message = check
                        .message_expression
                        .as_ref()
                        .and_then(|e| match e.evaluate(&scope) {
                            Ok(Value::String(text)) => Some(text.to_string()),
                            _ => None,
                        })
                        .or_else(|| check.message.clone())
                        .unwrap_or_else(|| format!("failed expression: {}", check.expression.source));
                    return Err(self.denial(&check.reason, message));
                }
                Err(error) => return self.failed(&error),
            }
        }
        Ok(())
    }

    fn denial(&self, reason: &str, message: String) -> Denial {
        Denial { policy: self.name.clone(), binding: self.binding.clone(), reason: reason.to_owned(), message }
    }

    /// The policy could not be evaluated: refused under `failurePolicy: Fail`, let through under `Ignore`.
    fn failed(&self, error: &str) -> Result<(), Denial> {
        match self.fail_closed {
            true => Err(self.denial("Invalid", error.to_owned())),
            false => Ok(()),
        }
    }
}

/// A rule of `resourceRules` against a request.
fn rule_selects(rule: &NamedRuleWithOperations, request: &Request<'_>) -> bool {
    let NamedRuleWithOperations { api_groups, api_versions, operations, resources, scope, .. } = rule;
    Rule { api_groups, api_versions, operations, resources, scope }.selects(request)
}

/// The parts of an admission rule (a policy's or a webhook's) that select requests.
pub struct Rule<'a> {
    pub api_groups: &'a Option<Vec<String>>,
    pub api_versions: &'a Option<Vec<String>>,
    pub operations: &'a Option<Vec<String>>,
    pub resources: &'a Option<Vec<String>>,
    pub scope: &'a Option<String>,
}

impl Rule<'_> {
    /// `*` matches anything, `x/*` any subresource of `x`, `*/s` the subresource `s` of anything; a plain resource
    /// name matches the resource itself, not its subresources.
    pub fn selects(&self, request: &Request<'_>) -> bool {
        let listed = |list: &Option<Vec<String>>, value: &str| {
            list.as_ref().is_some_and(|items| items.iter().any(|item| item == "*" || item == value))
        };
        let resource = request.resource.resource;
        let resources = self.resources.as_ref().is_some_and(|names| {
            names.iter().any(|name| match name.split_once('/') {
                None => (name == "*" || name == resource) && request.subresource.is_empty(),
                Some((r, s)) => {
                    (r == "*" || r == resource)
                        && (s == "*" || s == request.subresource)
                        && !request.subresource.is_empty()
                }
            })
        });
        let scope = match self.scope.as_deref() {
            Some("Namespaced") => request.resource.namespaced,
            Some("Cluster") => !request.resource.namespaced,
            _ => true,
        };
        listed(self.api_groups, request.resource.group)
            && listed(self.api_versions, request.resource.version)
            && listed(self.operations, request.operation.name())
            && resources
            && scope
    }
}
