//! Who may do what: the API server's RBAC authorizer over the stored Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings, with Kubernetes' rule matching (k8s.io/kubernetes `plugin/pkg/auth/authorizer/rbac/rbac.go`
//! `RuleAllows`, `pkg/apis/rbac/v1/evaluation_helpers.go`, `pkg/registry/rbac/validation/rule.go`).
//!
//! A request is described by its [`Attributes`] (a resource request: verb, group, resource, subresource, namespace,
//! name; or a non-resource one: verb and path) and decided for a [`User`]:
//! - the group `system:masters` is allowed everything, as the API server's privileged-groups authorizer allows it
//!   before RBAC is asked;
//! - otherwise the ClusterRoleBindings are visited in name order, then (for a request in a namespace) the
//!   RoleBindings of that namespace; the first rule of a binding whose subjects include the user that allows the
//!   request decides, and the reason names the binding (`RBAC: allowed by RoleBinding "b/ns" of Role "r" to
//!   ServiceAccount "sa/ns"`). A binding whose role is not stored adds its error to the denial's reason, as the
//!   API server's does (`RBAC: role.rbac.authorization.k8s.io "r" not found`).
//!
//! Built in, as every cluster's bootstrap policy has them bound to `system:authenticated` ([`BOOTSTRAP`]):
//! `system:discovery` (GET on `/api`, `/apis`, `/openapi`, `/version` and below), `system:public-info-viewer` (GET
//! on `/healthz`, `/livez`, `/readyz`, `/version`) and `system:basic-user` (create self subject access, rules and
//! subject reviews). They are not stored objects; a stored ClusterRole of the same name takes their place for
//! stored bindings. Not served: ClusterRole aggregation (`aggregationRule` is ignored: an aggregated role has the
//! rules it stores), the other bootstrap roles (`view`, `edit`, `admin`, `cluster-admin` exist only when applied),
//! and the escalation checks the API server makes on writes of roles and bindings (`escalate`, `bind`).
//!
//! Deciding reads a rule index built from the four resources ([`Authorizer`] keeps it until one of them is written),
//! so a request costs the bindings that can apply to it, not a walk over the stored JSON.
//!
//! ```
//! use gpuclaim_sim::served::rbac::{self, Attributes, Decision};
//! use gpuclaim_sim::served::store::Snapshot;
//! use gpuclaim_sim::users::User;
//!
//! let snapshot = Snapshot::new(1, 10);
//! let reader = User::service_account("tenant-a", "reader");
//! let patch = Attributes::resource("patch", "", "pods", "", "tenant-a", "x");
//! assert!(!rbac::authorize(&snapshot, &reader, &patch).allowed());
//! let version = Attributes::non_resource("get", "/version");
//! assert!(rbac::authorize(&snapshot, &reader, &version).allowed());
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::go::quote;
use super::store::{ResourceId, Snapshot};
use crate::apiserver::admission::request::User;

/// The group the API server allows everything (`user.SystemPrivilegedGroup`).
pub const SUPERUSER_GROUP: &str = "system:masters";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// `*` in a rule's verbs, groups, resources or non-resource URLs: all of them.
const ALL: &str = "*";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const CLUSTER_ROLES: ResourceId = ResourceId { group: RBAC_GROUP, plural: "clusterroles" };
const CLUSTER_ROLE_BINDINGS: ResourceId = ResourceId { group: RBAC_GROUP, plural: "clusterrolebindings" };
const ROLES: ResourceId = ResourceId { group: RBAC_GROUP, plural: "roles" };
const ROLE_BINDINGS: ResourceId = ResourceId { group: RBAC_GROUP, plural: "rolebindings" };

/// What a request asks, as the API server's `authorizer.Attributes` holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attributes {
    /// A request for an API resource (`/api/v1/namespaces/ns/pods/x`).
    Resource(ResourceAttributes),
    /// A request for any other path (`/version`, `/apis`, `/metrics`); the verb is the HTTP method, lowercased.
    NonResource { verb: String, path: String },
}

/// A resource request's attributes; empty strings for what it does not name (the core group is `""`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl Attributes {
    /// A resource request's attributes.
    pub fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes::Resource(ResourceAttributes {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// A non-resource request's attributes.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes::NonResource { verb: verb.to_owned(), path: path.to_owned() }
    }

    /// The verb asked.
    pub fn verb(&self) -> &str {
        match self {
            Attributes::Resource(resource) => &resource.verb,
            Attributes::NonResource { verb, .. } => verb,
        }
    }

    /// The namespace the request is in (`""` for a cluster-wide or non-resource request).
    pub fn namespace(&self) -> &str {
        match self {
            Attributes::Resource(resource) => &resource.namespace,
            Attributes::NonResource { .. } => "",
        }
    }
}

/// What the authorizer decided, and why (the API server's reason text; empty when it gives none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed {
        reason: String,
    },
    /// No rule allows it (RBAC has no opinion, which the API server answers 403).
    Denied {
        reason: String,
    },
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allowed { .. })
    }

    pub fn reason(&self) -> &str {
        match self {
            Decision::Allowed { reason } | Decision::Denied { reason } => reason,
        }
    }
}

/// One rule of a role, its absent lists empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

impl From<PolicyRule> for Rule {
    fn from(rule: PolicyRule) -> Rule {
        Rule {
            verbs: rule.verbs,
            api_groups: rule.api_groups.unwrap_or_default(),
            resources: rule.resources.unwrap_or_default(),
            resource_names: rule.resource_names.unwrap_or_default(),
            non_resource_urls: rule.non_resource_urls.unwrap_or_default(),
        }
    }
}

/// Whether the rule names the verb, or all verbs (`VerbMatches`).
pub fn verb_matches(rule: &Rule, verb: &str) -> bool {
    rule.verbs.iter().any(|allowed| allowed == ALL || allowed == verb)
}

/// Whether the rule names the API group, or all groups (`APIGroupMatches`).
pub fn api_group_matches(rule: &Rule, group: &str) -> bool {
    rule.api_groups.iter().any(|allowed| allowed == ALL || allowed == group)
}

/// Whether the rule names the resource: `*`, the resource as asked (`pods`, or `pods/status` for a subresource), or
/// `*/status` for any resource's subresource of that name (`ResourceMatches`).
pub fn resource_matches(rule: &Rule, resource: &str, subresource: &str) -> bool {
    let combined = match subresource {
        "" => resource.to_owned(),
        subresource => format!("{resource}/{subresource}"),
    };
    rule.resources.iter().any(|allowed| {
        allowed == ALL
            || *allowed == combined
            || (!subresource.is_empty() && allowed.strip_prefix("*/").is_some_and(|sub| sub == subresource))
    })
}

/// Whether the rule allows the object's name: any name when the rule lists none, else only a name listed (a
/// request that names no object, as a list or a create, matches no rule with names) (`ResourceNameMatches`).
pub fn resource_name_matches(rule: &Rule, name: &str) -> bool {
    rule.resource_names.is_empty() || rule.resource_names.iter().any(|allowed| allowed == name)
}

/// Whether the rule names the path: `*`, the path itself, or a prefix of it ending in `*` (`/apis/*` allows
/// `/apis/apps/v1`) (`NonResourceURLMatches`).
pub fn non_resource_url_matches(rule: &Rule, path: &str) -> bool {
    rule.non_resource_urls.iter().any(|allowed| {
        allowed == ALL || allowed == path || (allowed.ends_with('*') && path.starts_with(allowed.trim_end_matches('*')))
    })
}

/// Whether one rule allows the request (`RuleAllows`).
pub fn rule_allows(rule: &Rule, attributes: &Attributes) -> bool {
    match attributes {
        Attributes::Resource(asked) => {
            verb_matches(rule, &asked.verb)
                && api_group_matches(rule, &asked.group)
                && resource_matches(rule, &asked.resource, &asked.subresource)
                && resource_name_matches(rule, &asked.name)
        }
        Attributes::NonResource { verb, path } => verb_matches(rule, verb) && non_resource_url_matches(rule, path),
    }
}

/// Whether a binding's subject is the user (`appliesToUser`): a User by name, a Group the user is in, a
/// ServiceAccount by its username, its namespace defaulting to the binding's (`binding_namespace`, `""` for a
/// ClusterRoleBinding, where a ServiceAccount subject must name its namespace).
pub fn subject_applies(subject: &Subject, user: &User, binding_namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.username == subject.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let namespace = subject.namespace.as_deref().filter(|namespace| !namespace.is_empty());
            let namespace = namespace.unwrap_or(binding_namespace);
            !namespace.is_empty() && user.username == format!("system:serviceaccount:{namespace}:{}", subject.name)
        }
        _ => false,
    }
}

/// A subject as the authorizer's reasons name it (`describeSubject`): `ServiceAccount "sa/ns"`, `Group "g"`.
fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    match subject.kind.as_str() {
        "ServiceAccount" => {
            let namespace = subject.namespace.as_deref().filter(|namespace| !namespace.is_empty());
            let namespace = namespace.unwrap_or(binding_namespace);
            format!("ServiceAccount {}", quote(&format!("{}/{namespace}", subject.name)))
        }
        kind => format!("{kind} {}", quote(&subject.name)),
    }
}

/// One binding, its role's rules resolved (or why they could not be).
#[derive(Clone, Debug)]
struct Grant {
    /// `ClusterRoleBinding "b"` or `RoleBinding "b/ns"`.
    binding: String,
    /// `""` for a ClusterRoleBinding.
    namespace: String,
    /// `ClusterRole "r"` or `Role "r"`.
    role: String,
    subjects: Vec<Subject>,
    rules: Result<Arc<[Rule]>, String>,
}

impl Grant {
    /// The subject of the binding that is the user (the first one), if any (`appliesTo`).
    fn subject_for(&self, user: &User) -> Option<&Subject> {
        self.subjects.iter().find(|subject| subject_applies(subject, user, &self.namespace))
    }
}

/// The roles built into every cluster's bootstrap policy that the twin keeps, each bound to
/// `system:authenticated` by a ClusterRoleBinding of its name.
pub const BOOTSTRAP: [&str; 3] = ["system:discovery", "system:basic-user", "system:public-info-viewer"];

/// A bootstrap role's rules (k8s.io/kubernetes `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`).
fn bootstrap_rules(role: &str) -> Vec<Rule> {
    let strings = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<Vec<String>>();
    let get_paths =
        |paths: &[&str]| Rule { verbs: strings(&["get"]), non_resource_urls: strings(paths), ..Rule::default() };
    let create = |group: &str, resources: &[&str]| Rule {
        verbs: strings(&["create"]),
        api_groups: strings(&[group]),
        resources: strings(resources),
        ..Rule::default()
    };
    match role {
        "system:discovery" => {
            vec![get_paths(&["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/"])]
        }
        "system:public-info-viewer" => vec![get_paths(&["/healthz", "/livez", "/readyz", "/version", "/version/"])],
        "system:basic-user" => vec![
            create("authorization.k8s.io", &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            create("authentication.k8s.io", &["selfsubjectreviews"]),
        ],
        _ => Vec::new(),
    }
}

/// Every binding of the four RBAC resources, their rules resolved: what deciding reads.
#[derive(Clone, Debug, Default)]
struct Index {
    /// The bootstrap bindings, then the stored ClusterRoleBindings in name order.
    cluster: Vec<Grant>,
    /// The stored RoleBindings of each namespace, in name order.
    namespaced: BTreeMap<String, Vec<Grant>>,
}

/// The stored objects of `resource` that read as `T` (one that does not is skipped: the API server would not have
/// stored it).
fn stored<T: DeserializeOwned>(snapshot: &Snapshot, resource: ResourceId) -> Vec<(String, String, T)> {
    snapshot
        .objects(resource, None, None)
        .filter_map(|((namespace, name), stored)| {
            let object = serde_json::from_value::<T>(Value::clone(&stored.object)).ok()?;
            Some((namespace.to_string(), name.to_string(), object))
        })
        .collect()
}

fn rules_of(rules: Option<Vec<PolicyRule>>) -> Arc<[Rule]> {
    rules.unwrap_or_default().into_iter().map(Rule::from).collect()
}

impl Index {
    fn build(snapshot: &Snapshot) -> Index {
        let mut cluster_roles: BTreeMap<String, Arc<[Rule]>> =
            BOOTSTRAP.iter().map(|role| ((*role).to_owned(), Arc::from(bootstrap_rules(role)))).collect();
        for (_, name, role) in stored::<ClusterRole>(snapshot, CLUSTER_ROLES) {
            cluster_roles.insert(name, rules_of(role.rules));
        }
        let roles: BTreeMap<(String, String), Arc<[Rule]>> = stored::<Role>(snapshot, ROLES)
            .into_iter()
            .map(|(namespace, name, role)| ((namespace, name), rules_of(role.rules)))
            .collect();
        let resolve = |kind: &str, name: &str, namespace: &str| -> Result<Arc<[Rule]>, String> {
            match kind {
                "ClusterRole" => cluster_roles
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("clusterrole.{RBAC_GROUP} {} not found", quote(name))),
                "Role" => roles
                    .get(&(namespace.to_owned(), name.to_owned()))
                    .cloned()
                    .ok_or_else(|| format!("role.{RBAC_GROUP} {} not found", quote(name))),
                kind => Err(format!("unsupported role reference kind: {}", quote(kind))),
            }
        };
        let mut cluster: Vec<Grant> = BOOTSTRAP
            .iter()
            .map(|role| Grant {
                binding: format!("ClusterRoleBinding {}", quote(role)),
                namespace: String::new(),
                role: format!("ClusterRole {}", quote(role)),
                subjects: vec![Subject {
                    api_group: Some(RBAC_GROUP.to_owned()),
                    kind: "Group".to_owned(),
                    name: AUTHENTICATED_GROUP.to_owned(),
                    namespace: None,
                }],
                rules: resolve("ClusterRole", role, ""),
            })
            .collect();
        for (_, name, binding) in stored::<ClusterRoleBinding>(snapshot, CLUSTER_ROLE_BINDINGS) {
            let role_ref = binding.role_ref;
            cluster.push(Grant {
                binding: format!("ClusterRoleBinding {}", quote(&name)),
                namespace: String::new(),
                role: format!("{} {}", role_ref.kind, quote(&role_ref.name)),
                subjects: binding.subjects.unwrap_or_default(),
                rules: resolve(&role_ref.kind, &role_ref.name, ""),
            });
        }
        let mut namespaced: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
        for (namespace, name, binding) in stored::<RoleBinding>(snapshot, ROLE_BINDINGS) {
            let role_ref = binding.role_ref;
            let grant = Grant {
                binding: format!("RoleBinding {}", quote(&format!("{name}/{namespace}"))),
                namespace: namespace.clone(),
                role: format!("{} {}", role_ref.kind, quote(&role_ref.name)),
                subjects: binding.subjects.unwrap_or_default(),
                rules: resolve(&role_ref.kind, &role_ref.name, &namespace),
            };
            namespaced.entry(namespace).or_default().push(grant);
        }
        Index { cluster, namespaced }
    }

    /// The RBAC authorizer's decision (`RBACAuthorizer.Authorize`): the first binding of the user whose rules allow
    /// the request, else denied with the errors met on the way.
    fn decide(&self, user: &User, attributes: &Attributes) -> Decision {
        let namespace = attributes.namespace();
        let local = match namespace {
            "" => None,
            namespace => self.namespaced.get(namespace),
        };
        let mut errors: Vec<&str> = Vec::new();
        for grant in self.cluster.iter().chain(local.into_iter().flatten()) {
            let Some(subject) = grant.subject_for(user) else { continue };
            match &grant.rules {
                Ok(rules) => {
                    if rules.iter().any(|rule| rule_allows(rule, attributes)) {
                        let to = describe_subject(subject, &grant.namespace);
                        let reason = format!("RBAC: allowed by {} of {} to {to}", grant.binding, grant.role);
                        return Decision::Allowed { reason };
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        let reason = match aggregate(&errors) {
            errors if errors.is_empty() => String::new(),
            errors => format!("RBAC: {errors}"),
        };
        Decision::Denied { reason }
    }
}

impl Index {
    /// Every rule the user's bindings grant in `namespace` (cluster-wide ones too), and the errors met resolving
    /// them (`RulesFor`).
    fn rules_for(&self, user: &User, namespace: &str) -> (Vec<Rule>, String) {
        let local = match namespace {
            "" => None,
            namespace => self.namespaced.get(namespace),
        };
        let mut rules = Vec::new();
        let mut errors: Vec<&str> = Vec::new();
        for grant in self.cluster.iter().chain(local.into_iter().flatten()) {
            if grant.subject_for(user).is_none() {
                continue;
            }
            match &grant.rules {
                Ok(granted) => rules.extend(granted.iter().cloned()),
                Err(error) => errors.push(error),
            }
        }
        (rules, aggregate(&errors))
    }
}

/// apimachinery's `utilerrors.NewAggregate(errs).Error()`: one error as it is, several (each once) in brackets.
fn aggregate(errors: &[&str]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for error in errors {
        if !seen.contains(error) {
            seen.push(error);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen[0].to_owned(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

/// Decides `attributes` for `user` against `snapshot`'s RBAC objects, building their index for this one request
/// (an [`Authorizer`] keeps it between requests).
pub fn authorize(snapshot: &Snapshot, user: &User, attributes: &Attributes) -> Decision {
    if is_superuser(user) {
        return Decision::Allowed { reason: String::new() };
    }
    Index::build(snapshot).decide(user, attributes)
}

/// Whether the user is in `system:masters`, which the API server allows everything with no reason given.
pub fn is_superuser(user: &User) -> bool {
    user.groups.iter().any(|group| group == SUPERUSER_GROUP)
}

/// The revisions the index was built at: the newest write of each RBAC resource.
type IndexKey = [u64; 4];

fn index_key(snapshot: &Snapshot) -> IndexKey {
    [CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS].map(|resource| snapshot.written(resource))
}

/// The authorizer a server keeps: [`authorize`], with the rule index kept until a Role, ClusterRole, RoleBinding or
/// ClusterRoleBinding is written (watch-heavy clients are authorised on every request; the index is rebuilt only
/// when RBAC changes).
#[derive(Debug, Default)]
pub struct Authorizer {
    index: Mutex<Option<(IndexKey, Arc<Index>)>>,
}

impl Authorizer {
    pub fn new() -> Authorizer {
        Authorizer::default()
    }

    /// Decides `attributes` for `user` against `snapshot` (the same snapshot every call: the key is its revisions).
    pub fn authorize(&self, snapshot: &Snapshot, user: &User, attributes: &Attributes) -> Decision {
        if is_superuser(user) {
            return Decision::Allowed { reason: String::new() };
        }
        self.index(snapshot).decide(user, attributes)
    }

    /// The rules `user` holds in `namespace`, as a SelfSubjectRulesReview lists them: `system:masters`' rule of
    /// everything first (the privileged-groups authorizer's), then the ones its bindings grant; with the errors met
    /// resolving them (`RBAC`-less, as the review's `evaluationError` carries them).
    pub fn rules_for(&self, snapshot: &Snapshot, user: &User, namespace: &str) -> (Vec<Rule>, String) {
        let (granted, errors) = self.index(snapshot).rules_for(user, namespace);
        let everything = || vec![ALL.to_owned()];
        let superuser = Rule {
            verbs: everything(),
            api_groups: everything(),
            resources: everything(),
            resource_names: Vec::new(),
            non_resource_urls: everything(),
        };
        let rules = is_superuser(user).then_some(superuser).into_iter().chain(granted).collect();
        (rules, errors)
    }

    fn index(&self, snapshot: &Snapshot) -> Arc<Index> {
        let key = index_key(snapshot);
        let mut cached = self.index.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match cached.as_ref() {
            Some((built, index)) if *built == key => Arc::clone(index),
            _ => {
                let index = Arc::new(Index::build(snapshot));
                *cached = Some((key, Arc::clone(&index)));
                index
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::served::status;

    fn rule(value: Value) -> Rule {
        Rule::from(serde_json::from_value::<PolicyRule>(value).unwrap())
    }

    fn pods(verb: &str, subresource: &str, namespace: &str, name: &str) -> Attributes {
        Attributes::resource(verb, "", "pods", subresource, namespace, name)
    }

    #[test]
    fn verbs_match_by_name_or_star() {
        let read = rule(json!({"verbs": ["get", "list"]}));
        assert!(verb_matches(&read, "get"));
        assert!(!verb_matches(&read, "watch"));
        assert!(verb_matches(&rule(json!({"verbs": ["*"]})), "deletecollection"));
        assert!(!verb_matches(&rule(json!({"verbs": []})), "get"));
    }

    #[test]
    fn groups_match_by_name_or_star_and_the_core_group_is_empty() {
        let core = rule(json!({"verbs": ["get"], "apiGroups": [""]}));
        assert!(api_group_matches(&core, ""));
        assert!(!api_group_matches(&core, "apps"));
        assert!(api_group_matches(&rule(json!({"verbs": ["get"], "apiGroups": ["*"]})), "gpu.cozystack.io"));
        assert!(!api_group_matches(&rule(json!({"verbs": ["get"]})), ""));
    }

    #[test]
    fn resources_match_by_name_star_or_star_slash_subresource() {
        let plain = rule(json!({"verbs": ["get"], "resources": ["pods"]}));
        assert!(resource_matches(&plain, "pods", ""));
        assert!(!resource_matches(&plain, "pods", "status"), "a subresource is named on its own");
        let status = rule(json!({"verbs": ["get"], "resources": ["pods/status"]}));
        assert!(resource_matches(&status, "pods", "status"));
        assert!(!resource_matches(&status, "pods", ""));
        assert!(!resource_matches(&status, "pods", "binding"));
        let any_status = rule(json!({"verbs": ["get"], "resources": ["*/status"]}));
        assert!(resource_matches(&any_status, "gpuclaims", "status"));
        assert!(!resource_matches(&any_status, "gpuclaims", ""));
        assert!(!resource_matches(&any_status, "pods", "xstatus"));
        let all = rule(json!({"verbs": ["get"], "resources": ["*"]}));
        assert!(resource_matches(&all, "pods", "") && resource_matches(&all, "pods", "status"));
    }

    #[test]
    fn resource_names_restrict_to_the_names_listed() {
        let named = rule(json!({"verbs": ["get"], "resourceNames": ["settings"]}));
        assert!(resource_name_matches(&named, "settings"));
        assert!(!resource_name_matches(&named, "other"));
        assert!(!resource_name_matches(&named, ""), "a list names no object");
        assert!(resource_name_matches(&rule(json!({"verbs": ["get"]})), ""));
    }

    #[test]
    fn non_resource_urls_match_exactly_by_star_or_by_a_trailing_star_prefix() {
        let urls = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics", "/apis/*", "/logs**"]}));
        assert!(non_resource_url_matches(&urls, "/metrics"));
        assert!(!non_resource_url_matches(&urls, "/metrics/x"));
        assert!(non_resource_url_matches(&urls, "/apis/apps/v1"));
        assert!(non_resource_url_matches(&urls, "/apis/"));
        assert!(!non_resource_url_matches(&urls, "/apis"));
        assert!(non_resource_url_matches(&urls, "/logs/x"));
        assert!(non_resource_url_matches(&rule(json!({"verbs": ["get"], "nonResourceURLs": ["*"]})), "/anything"));
    }

    #[test]
    fn a_rule_allows_only_what_all_its_parts_match() {
        let patch_pods = rule(json!({"verbs": ["patch"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(rule_allows(&patch_pods, &pods("patch", "", "a", "p")));
        assert!(!rule_allows(&patch_pods, &pods("get", "", "a", "p")));
        assert!(!rule_allows(&patch_pods, &pods("patch", "status", "a", "p")));
        assert!(!rule_allows(&patch_pods, &Attributes::resource("patch", "apps", "pods", "", "a", "p")));
        assert!(!rule_allows(&patch_pods, &Attributes::non_resource("patch", "/pods")));
        let metrics = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}));
        assert!(rule_allows(&metrics, &Attributes::non_resource("get", "/metrics")));
        assert!(!rule_allows(&metrics, &Attributes::non_resource("post", "/metrics")));
        assert!(!rule_allows(&metrics, &pods("get", "", "", "")), "a URL rule allows no resource");
    }

    #[test]
    fn subjects_are_users_groups_and_service_accounts_defaulted_to_the_bindings_namespace() {
        let subject = |value: Value| serde_json::from_value::<Subject>(value).unwrap();
        let sa = User::service_account("tenant-a", "reader");
        let person = User::person("alice", &["team"]);
        assert!(subject_applies(&subject(json!({"kind": "User", "name": "alice"})), &person, ""));
        assert!(!subject_applies(&subject(json!({"kind": "User", "name": "bob"})), &person, ""));
        assert!(subject_applies(&subject(json!({"kind": "Group", "name": "team"})), &person, ""));
        assert!(subject_applies(
            &subject(json!({"kind": "Group", "name": "system:serviceaccounts:tenant-a"})),
            &sa,
            ""
        ));
        let local = subject(json!({"kind": "ServiceAccount", "name": "reader"}));
        assert!(subject_applies(&local, &sa, "tenant-a"));
        assert!(!subject_applies(&local, &sa, "tenant-b"));
        assert!(!subject_applies(&local, &sa, ""), "a cluster binding's service account names its namespace");
        let qualified = subject(json!({"kind": "ServiceAccount", "name": "reader", "namespace": "tenant-a"}));
        assert!(subject_applies(&qualified, &sa, "") && subject_applies(&qualified, &sa, "tenant-b"));
        assert!(!subject_applies(&subject(json!({"kind": "Robot", "name": "reader"})), &sa, "tenant-a"));
    }

    /// A snapshot holding `objects` as (resource, namespace, name, object).
    fn snapshot(objects: &[(ResourceId, &str, &str, Value)]) -> Snapshot {
        let mut snapshot = Snapshot::new(1, 100);
        for (revision, (resource, namespace, name, object)) in objects.iter().enumerate() {
            snapshot.upsert(*resource, namespace, name, revision as u64 + 2, object.clone());
        }
        snapshot
    }

    fn binding(kind: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": "b"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role}, "subjects": subjects})
    }

    fn reader_policy() -> Snapshot {
        let role = json!({"metadata": {"name": "read-configmaps", "namespace": "tenant-a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]});
        let pods = json!({"metadata": {"name": "pod-patcher"},
            "rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["patch"]}]});
        snapshot(&[
            (ROLES, "tenant-a", "read-configmaps", role),
            (
                ROLE_BINDINGS,
                "tenant-a",
                "reader",
                binding(
                    "RoleBinding",
                    "Role",
                    "read-configmaps",
                    json!([{"kind": "ServiceAccount", "name": "reader"}]),
                ),
            ),
            (CLUSTER_ROLES, "", "pod-patcher", pods),
            (
                ROLE_BINDINGS,
                "tenant-b",
                "patcher",
                binding(
                    "RoleBinding",
                    "ClusterRole",
                    "pod-patcher",
                    json!([{"kind": "ServiceAccount", "name": "reader", "namespace": "tenant-a"}]),
                ),
            ),
        ])
    }

    #[test]
    fn a_role_binding_grants_its_roles_rules_in_its_namespace_only() {
        let policy = reader_policy();
        let reader = User::service_account("tenant-a", "reader");
        let get = Attributes::resource("get", "", "configmaps", "", "tenant-a", "c");
        assert_eq!(
            authorize(&policy, &reader, &get),
            Decision::Allowed {
                reason: r#"RBAC: allowed by RoleBinding "reader/tenant-a" of Role "read-configmaps" to ServiceAccount "reader/tenant-a""#.into()
            }
        );
        let elsewhere = Attributes::resource("get", "", "configmaps", "", "tenant-b", "c");
        assert_eq!(authorize(&policy, &reader, &elsewhere), Decision::Denied { reason: String::new() });
        let create = Attributes::resource("create", "", "configmaps", "", "tenant-a", "");
        assert!(!authorize(&policy, &reader, &create).allowed());
        let stranger = User::service_account("tenant-a", "other");
        assert!(!authorize(&policy, &stranger, &get).allowed());
    }

    #[test]
    fn a_role_binding_to_a_cluster_role_grants_its_rules_in_the_bindings_namespace() {
        let policy = reader_policy();
        let reader = User::service_account("tenant-a", "reader");
        let decision = authorize(&policy, &reader, &pods("patch", "status", "tenant-b", "p"));
        assert_eq!(
            decision.reason(),
            r#"RBAC: allowed by RoleBinding "patcher/tenant-b" of ClusterRole "pod-patcher" to ServiceAccount "reader/tenant-a""#
        );
        assert!(!authorize(&policy, &reader, &pods("patch", "", "tenant-a", "p")).allowed());
        assert!(!authorize(&policy, &reader, &pods("patch", "", "", "")).allowed(), "not cluster-wide");
    }

    #[test]
    fn a_cluster_role_binding_grants_everywhere_and_cluster_wide() {
        let role = json!({"metadata": {"name": "nodes"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]});
        let policy = snapshot(&[
            (CLUSTER_ROLES, "", "nodes", role),
            (
                CLUSTER_ROLE_BINDINGS,
                "",
                "ops",
                binding("ClusterRoleBinding", "ClusterRole", "nodes", json!([{"kind": "Group", "name": "ops"}])),
            ),
        ]);
        let operator = User::person("carol", &["ops"]);
        let list = Attributes::resource("list", "", "nodes", "", "", "");
        assert_eq!(
            authorize(&policy, &operator, &list).reason(),
            r#"RBAC: allowed by ClusterRoleBinding "ops" of ClusterRole "nodes" to Group "ops""#
        );
        assert!(authorize(&policy, &operator, &Attributes::resource("list", "", "nodes", "", "any", "")).allowed());
        assert!(!authorize(&policy, &User::person("dave", &[]), &list).allowed());
    }

    #[test]
    fn a_binding_to_a_missing_role_denies_with_the_api_servers_reason() {
        let policy = snapshot(&[
            (
                ROLE_BINDINGS,
                "tenant-a",
                "gone",
                binding("RoleBinding", "Role", "gone", json!([{"kind": "User", "name": "alice"}])),
            ),
            (
                CLUSTER_ROLE_BINDINGS,
                "",
                "gone",
                binding("ClusterRoleBinding", "ClusterRole", "gone", json!([{"kind": "User", "name": "alice"}])),
            ),
        ]);
        let alice = User::person("alice", &[]);
        let get = Attributes::resource("get", "", "configmaps", "", "tenant-a", "c");
        let reason = r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "gone" not found]"#;
        assert_eq!(authorize(&policy, &alice, &get), Decision::Denied { reason: reason.into() });
        let cluster = Attributes::resource("get", "", "nodes", "", "", "n");
        let reason = r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#;
        assert_eq!(authorize(&policy, &alice, &cluster), Decision::Denied { reason: reason.into() });
        assert_eq!(authorize(&policy, &User::person("bob", &[]), &get).reason(), "", "not bob's binding");
    }

    #[test]
    fn system_masters_is_allowed_everything_and_every_user_discovery() {
        let empty = Snapshot::new(1, 10);
        let admin = crate::users::platform_admin();
        assert_eq!(
            authorize(&empty, &admin, &pods("delete", "", "a", "p")),
            Decision::Allowed { reason: String::new() }
        );
        let user = User::person("alice", &[]);
        for path in
            ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/openapi/v3", "/version", "/healthz", "/livez", "/readyz"]
        {
            assert!(authorize(&empty, &user, &Attributes::non_resource("get", path)).allowed(), "{path}");
        }
        assert_eq!(
            authorize(&empty, &user, &Attributes::non_resource("get", "/version")).reason(),
            r#"RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated""#
        );
        assert!(!authorize(&empty, &user, &Attributes::non_resource("get", "/metrics")).allowed());
        assert!(!authorize(&empty, &user, &Attributes::non_resource("post", "/api")).allowed());
        let review = Attributes::resource("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", "");
        assert!(authorize(&empty, &user, &review).allowed());
        let others = Attributes::resource("create", "authorization.k8s.io", "subjectaccessreviews", "", "", "");
        assert!(!authorize(&empty, &user, &others).allowed());
        let anonymous = User { username: "system:anonymous".into(), groups: vec![] };
        assert!(!authorize(&empty, &anonymous, &Attributes::non_resource("get", "/version")).allowed());
    }

    #[test]
    fn the_authorizer_rebuilds_its_index_when_a_role_is_written() {
        let mut policy = reader_policy();
        let authorizer = Authorizer::new();
        let reader = User::service_account("tenant-a", "reader");
        let create = Attributes::resource("create", "", "configmaps", "", "tenant-a", "");
        assert!(!authorizer.authorize(&policy, &reader, &create).allowed());
        let role = json!({"metadata": {"name": "read-configmaps", "namespace": "tenant-a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]}]});
        policy.upsert(ROLES, "tenant-a", "read-configmaps", 100, role);
        assert!(authorizer.authorize(&policy, &reader, &create).allowed());
        policy.remove(ROLE_BINDINGS, "tenant-a", "reader", 101);
        assert!(!authorizer.authorize(&policy, &reader, &create).allowed());
    }

    #[test]
    fn the_rules_a_user_holds_are_its_bindings_and_masters_holds_everything() {
        let policy = reader_policy();
        let authorizer = Authorizer::new();
        let reader = User::service_account("tenant-a", "reader");
        let (rules, errors) = authorizer.rules_for(&policy, &reader, "tenant-a");
        assert_eq!(errors, "");
        let granted: Vec<(Vec<String>, Vec<String>)> =
            rules.iter().map(|rule| (rule.resources.clone(), rule.non_resource_urls.clone())).collect();
        assert!(granted.contains(&(vec!["configmaps".into()], vec![])), "{granted:?}");
        assert!(!granted.iter().any(|(resources, _)| resources.contains(&"pods".to_owned())), "not in tenant-a");
        assert!(granted.iter().any(|(_, urls)| urls.contains(&"/version".to_owned())), "bootstrap: {granted:?}");
        let (admin, _) = authorizer.rules_for(&policy, &crate::users::platform_admin(), "tenant-a");
        assert_eq!(admin[0].verbs, ["*"]);
        assert_eq!(admin[0].non_resource_urls, ["*"]);
    }

    #[test]
    fn refusals_are_worded_as_the_api_server_words_them() {
        let sa = "system:serviceaccount:ns:sa";
        let patch = status::forbidden(&pods("patch", "", "tenant-a", "x"), sa, "");
        assert_eq!(
            patch,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "pods \"x\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot patch resource \"pods\" in API group \"\" in the namespace \"tenant-a\"",
                "reason": "Forbidden", "details": {"name": "x", "kind": "pods"}, "code": 403})
        );
        let list = Attributes::resource("list", "gpu.cozystack.io", "gpuclaims", "", "", "");
        assert_eq!(
            status::forbidden(&list, sa, "")["message"],
            "gpuclaims.gpu.cozystack.io is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"gpuclaims\" in API group \"gpu.cozystack.io\" at the cluster scope"
        );
        let status_patch = status::forbidden(
            &pods("patch", "status", "a", "p"),
            sa,
            "RBAC: role.rbac.authorization.k8s.io \"r\" not found",
        );
        assert_eq!(
            status_patch["message"],
            "pods \"p\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot patch resource \"pods/status\" in API group \"\" in the namespace \"a\": RBAC: role.rbac.authorization.k8s.io \"r\" not found"
        );
        let metrics = status::forbidden(&Attributes::non_resource("get", "/metrics"), sa, "");
        assert_eq!(metrics["message"], "forbidden: User \"system:serviceaccount:ns:sa\" cannot get path \"/metrics\"");
        assert_eq!(metrics["details"], json!({}));
    }
}
