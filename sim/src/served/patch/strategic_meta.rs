//! The strategic merge patch's metadata for the built-in kinds the twin serves: which fields merge (and by which
//! key), which are replaced whole, and which clear the keys a patch's `$retainKeys` leaves out.
//!
//! The API server reads this from the Go types' `patchStrategy` and `patchMergeKey` tags; the twin has no Go types,
//! so it keeps them here as a tree of types, one row per OpenAPI schema that has such a field or leads to one. A
//! field not listed has no strategy: a map in it merges key by key, a list in it is replaced.
//! `tests/served_patch.rs` walks this tree through the OpenAPI extract beside the cases
//! (`tests/fixtures/strategic/openapi-extract.json`, with its source in its header) and fails on any disagreement,
//! either way: a field listed here that the schema lacks or tags otherwise, or a tagged field the walk reaches that
//! is missing here.
//!
//! ```
//! use gpuclaim_sim::served::patch::strategic_meta::{self, Strategy};
//!
//! let env = strategic_meta::strategy_at("Deployment", "spec.template.spec.containers[].env");
//! assert_eq!(env, Some(Strategy::Merge { key: Some("name"), retain_keys: false }));
//! assert_eq!(strategic_meta::strategy_at("Pod", "spec.tolerations"), None);
//! ```

/// How a field takes a strategic merge patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// A list whose items merge with the patch's: maps by the value of `key`, primitives (no key) as a set.
    /// `retain_keys`: the items are unions whose stale members a `$retainKeys` clears (`merge,retainKeys`).
    Merge { key: Option<&'static str>, retain_keys: bool },
    /// The patch's value replaces the field's whole.
    Replace,
    /// A map (a union) whose keys missing from the patch's `$retainKeys` are cleared.
    RetainKeys,
}

/// An OpenAPI schema, as far as a strategic merge patch needs it.
#[derive(Debug)]
pub struct Type {
    /// The schema's name in the API server's OpenAPI (`io.k8s.api.core.v1.PodSpec`).
    pub schema: &'static str,
    pub fields: &'static [Field],
}

/// A field of a [`Type`] that has a strategy, or whose value (or whose list's items) is of a type with fields that
/// have one.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub strategy: Option<Strategy>,
    /// The type of the value, or of the items for a list.
    pub of: Option<&'static Type>,
}

impl Type {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|field| field.name == name)
    }
}

/// A field with a type and no strategy of its own.
const fn typed(name: &'static str, of: &'static Type) -> Field {
    Field { name, strategy: None, of: Some(of) }
}

/// A list merged by `key`, its items of type `of` (if they have fields with metadata).
const fn merge_by(name: &'static str, key: &'static str, of: Option<&'static Type>) -> Field {
    Field { name, strategy: Some(Strategy::Merge { key: Some(key), retain_keys: false }), of }
}

/// A list merged by `key` whose items are unions (`merge,retainKeys`).
const fn merge_retain_by(name: &'static str, key: &'static str) -> Field {
    Field { name, strategy: Some(Strategy::Merge { key: Some(key), retain_keys: true }), of: None }
}

/// A list of primitives merged as a set.
const fn merge_set(name: &'static str) -> Field {
    Field { name, strategy: Some(Strategy::Merge { key: None, retain_keys: false }), of: None }
}

const fn strategy(name: &'static str, strategy: Strategy) -> Field {
    Field { name, strategy: Some(strategy), of: None }
}

const fn root(schema: &'static str, fields: &'static [Field]) -> Type {
    Type { schema, fields }
}

pub static OBJECT_META: Type = root(
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    &[merge_set("finalizers"), merge_by("ownerReferences", "uid", None)],
);

static METADATA_ONLY: &[Field] = &[typed("metadata", &OBJECT_META)];

/// A kind whose only metadata is its ObjectMeta's.
const fn plain(schema: &'static str) -> Type {
    Type { schema, fields: METADATA_ONLY }
}

static CONTAINER_FIELDS: &[Field] = &[
    merge_by("env", "name", None),
    merge_by("ports", "containerPort", None),
    merge_by("volumeDevices", "devicePath", None),
    merge_by("volumeMounts", "mountPath", None),
];
static CONTAINER: Type = root("io.k8s.api.core.v1.Container", CONTAINER_FIELDS);
static EPHEMERAL_CONTAINER: Type = root("io.k8s.api.core.v1.EphemeralContainer", CONTAINER_FIELDS);

static POD_SPEC: Type = root(
    "io.k8s.api.core.v1.PodSpec",
    &[
        merge_by("containers", "name", Some(&CONTAINER)),
        merge_by("ephemeralContainers", "name", Some(&EPHEMERAL_CONTAINER)),
        merge_by("hostAliases", "ip", None),
        merge_by("imagePullSecrets", "name", None),
        merge_by("initContainers", "name", Some(&CONTAINER)),
        merge_retain_by("resourceClaims", "name"),
        merge_by("schedulingGates", "name", None),
        merge_by("topologySpreadConstraints", "topologyKey", None),
        merge_retain_by("volumes", "name"),
    ],
);

static CONTAINER_STATUS: Type = root(
    "io.k8s.api.core.v1.ContainerStatus",
    &[merge_by("allocatedResourcesStatus", "name", None), merge_by("volumeMounts", "mountPath", None)],
);

static POD_STATUS: Type = root(
    "io.k8s.api.core.v1.PodStatus",
    &[
        merge_by("conditions", "type", None),
        typed("containerStatuses", &CONTAINER_STATUS),
        typed("ephemeralContainerStatuses", &CONTAINER_STATUS),
        merge_by("hostIPs", "ip", None),
        typed("initContainerStatuses", &CONTAINER_STATUS),
        merge_by("podIPs", "ip", None),
        merge_retain_by("resourceClaimStatuses", "name"),
    ],
);

static POD: Type = root(
    "io.k8s.api.core.v1.Pod",
    &[typed("metadata", &OBJECT_META), typed("spec", &POD_SPEC), typed("status", &POD_STATUS)],
);

static POD_TEMPLATE_SPEC: Type =
    root("io.k8s.api.core.v1.PodTemplateSpec", &[typed("metadata", &OBJECT_META), typed("spec", &POD_SPEC)]);

static NODE: Type = root(
    "io.k8s.api.core.v1.Node",
    &[
        typed("metadata", &OBJECT_META),
        typed("spec", &root("io.k8s.api.core.v1.NodeSpec", &[merge_set("podCIDRs")])),
        typed(
            "status",
            &root(
                "io.k8s.api.core.v1.NodeStatus",
                &[merge_by("addresses", "type", None), merge_by("conditions", "type", None)],
            ),
        ),
    ],
);

static SERVICE: Type = root(
    "io.k8s.api.core.v1.Service",
    &[
        typed("metadata", &OBJECT_META),
        typed("spec", &root("io.k8s.api.core.v1.ServiceSpec", &[merge_by("ports", "port", None)])),
        typed("status", &root("io.k8s.api.core.v1.ServiceStatus", &[merge_by("conditions", "type", None)])),
    ],
);

// `imagePullSecrets` has no strategy on a ServiceAccount (unlike a PodSpec's): a patch replaces it.
static SERVICE_ACCOUNT: Type =
    root("io.k8s.api.core.v1.ServiceAccount", &[typed("metadata", &OBJECT_META), merge_by("secrets", "name", None)]);

static NAMESPACE: Type = root(
    "io.k8s.api.core.v1.Namespace",
    &[
        typed("metadata", &OBJECT_META),
        typed("status", &root("io.k8s.api.core.v1.NamespaceStatus", &[merge_by("conditions", "type", None)])),
    ],
);

static DEPLOYMENT: Type = root(
    "io.k8s.api.apps.v1.Deployment",
    &[
        typed("metadata", &OBJECT_META),
        typed(
            "spec",
            &root(
                "io.k8s.api.apps.v1.DeploymentSpec",
                &[strategy("strategy", Strategy::RetainKeys), typed("template", &POD_TEMPLATE_SPEC)],
            ),
        ),
        typed("status", &root("io.k8s.api.apps.v1.DeploymentStatus", &[merge_by("conditions", "type", None)])),
    ],
);

static POD_DISRUPTION_BUDGET: Type = root(
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    &[
        typed("metadata", &OBJECT_META),
        typed(
            "spec",
            &root("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", &[strategy("selector", Strategy::Replace)]),
        ),
        typed(
            "status",
            &root("io.k8s.api.policy.v1.PodDisruptionBudgetStatus", &[merge_by("conditions", "type", None)]),
        ),
    ],
);

static MUTATING_WEBHOOK: Type =
    root("io.k8s.api.admissionregistration.v1.MutatingWebhook", &[merge_by("matchConditions", "name", None)]);
static VALIDATING_WEBHOOK: Type =
    root("io.k8s.api.admissionregistration.v1.ValidatingWebhook", &[merge_by("matchConditions", "name", None)]);

static MUTATING_WEBHOOK_CONFIGURATION: Type = root(
    "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
    &[typed("metadata", &OBJECT_META), merge_by("webhooks", "name", Some(&MUTATING_WEBHOOK))],
);
static VALIDATING_WEBHOOK_CONFIGURATION: Type = root(
    "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
    &[typed("metadata", &OBJECT_META), merge_by("webhooks", "name", Some(&VALIDATING_WEBHOOK))],
);

static VALIDATING_ADMISSION_POLICY: Type = root(
    "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy",
    &[
        typed("metadata", &OBJECT_META),
        typed(
            "spec",
            &root(
                "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicySpec",
                &[merge_by("matchConditions", "name", None), merge_by("variables", "name", None)],
            ),
        ),
    ],
);

static CONFIG_MAP: Type = plain("io.k8s.api.core.v1.ConfigMap");
static SECRET: Type = plain("io.k8s.api.core.v1.Secret");
static RESOURCE_QUOTA: Type = plain("io.k8s.api.core.v1.ResourceQuota");
static ENDPOINTS: Type = plain("io.k8s.api.core.v1.Endpoints");
static EVENT: Type = plain("io.k8s.api.core.v1.Event");
static CLUSTER_ROLE: Type = plain("io.k8s.api.rbac.v1.ClusterRole");
static CLUSTER_ROLE_BINDING: Type = plain("io.k8s.api.rbac.v1.ClusterRoleBinding");
static ROLE: Type = plain("io.k8s.api.rbac.v1.Role");
static ROLE_BINDING: Type = plain("io.k8s.api.rbac.v1.RoleBinding");
static STORAGE_CLASS: Type = plain("io.k8s.api.storage.v1.StorageClass");
static VALIDATING_ADMISSION_POLICY_BINDING: Type =
    plain("io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding");
static LEASE: Type = plain("io.k8s.api.coordination.v1.Lease");
// The apiextensions kind is built in too: its lists have no strategy.
static CUSTOM_RESOURCE_DEFINITION: Type =
    plain("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition");

/// Every built-in kind the twin serves, by kind, with its type.
pub static KINDS: &[(&str, &Type)] = &[
    ("ClusterRole", &CLUSTER_ROLE),
    ("ClusterRoleBinding", &CLUSTER_ROLE_BINDING),
    ("ConfigMap", &CONFIG_MAP),
    ("CustomResourceDefinition", &CUSTOM_RESOURCE_DEFINITION),
    ("Deployment", &DEPLOYMENT),
    ("Endpoints", &ENDPOINTS),
    ("Event", &EVENT),
    ("Lease", &LEASE),
    ("MutatingWebhookConfiguration", &MUTATING_WEBHOOK_CONFIGURATION),
    ("Namespace", &NAMESPACE),
    ("Node", &NODE),
    ("Pod", &POD),
    ("PodDisruptionBudget", &POD_DISRUPTION_BUDGET),
    ("ResourceQuota", &RESOURCE_QUOTA),
    ("Role", &ROLE),
    ("RoleBinding", &ROLE_BINDING),
    ("Secret", &SECRET),
    ("Service", &SERVICE),
    ("ServiceAccount", &SERVICE_ACCOUNT),
    ("StorageClass", &STORAGE_CLASS),
    ("ValidatingAdmissionPolicy", &VALIDATING_ADMISSION_POLICY),
    ("ValidatingAdmissionPolicyBinding", &VALIDATING_ADMISSION_POLICY_BINDING),
    ("ValidatingWebhookConfiguration", &VALIDATING_WEBHOOK_CONFIGURATION),
];

/// The type of a built-in kind's objects.
pub fn of_kind(kind: &str) -> Option<&'static Type> {
    KINDS.iter().find(|(name, _)| *name == kind).map(|(_, of)| *of)
}

/// The strategy of the field at `path` in a `kind`'s objects: dotted names, `[]` after a list's name for its items
/// (`spec.containers[].env`). None for a field without one (or a path that leads nowhere the table knows).
pub fn strategy_at(kind: &str, path: &str) -> Option<Strategy> {
    let mut at = of_kind(kind);
    let mut last = None;
    for part in path.split('.') {
        let field = at?.field(part.strip_suffix("[]").unwrap_or(part))?;
        last = Some(field);
        at = field.of;
    }
    last.and_then(|field| field.strategy)
}
