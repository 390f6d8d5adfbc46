//! The resources the twin serves, one row each: the names discovery lists, the verbs and subresources served, the
//! fields a field selector may name, and where the objects live ([`Storage`]). Discovery ([`super::discovery`]),
//! Status bodies ([`super::status`]) and request routing read this table; nothing else lists resources.
//!
//! Names, short names and categories are the real API server's (Kubernetes 1.37) and the CRDs' (KubeVirt's
//! `virt-operator` CRD generator, cert-manager's chart, ours from `gpuclaim_engine::api`). Verbs are the ones served:
//! `deletecollection` is not (it answers 405), so no row lists it. Subresources are listed only when served (`status`, where the real resource has one, and
//! `pods/binding`): `pods/eviction` and `deployments/scale` are not yet.
//!
//! The rows' groups are in the order discovery lists them (within a group version it lists resources by name): the
//! core group first, then the built-in groups in the API server's priority order (apps, events, authentication,
//! authorization, policy, rbac, storage, admissionregistration, apiextensions, coordination: the
//! `groupPriorityMinimum`s of kube-apiserver's APIServices, ties broken by name), then the CRD groups
//! alphabetically (all CRDs share one priority). The reviews (TokenReview, SelfSubjectReview, SubjectAccessReview,
//! SelfSubjectAccessReview, SelfSubjectRulesReview, `serviceaccounts/token`) are only created, and answered rather
//! than stored ([`Storage::Answered`]).
//!
//! ```
//! use gpuclaim_sim::served::resources;
//!
//! let claims = resources::find("gpu.cozystack.io", "v1alpha1", "gpuclaims").unwrap();
//! assert_eq!(claims.kind, "GPUClaim");
//! assert_eq!(claims.list_kind(), "GPUClaimList");
//! assert_eq!(resources::of_kind("v1", "Pod").unwrap().plural, "pods");
//! ```

use crate::apiserver::Kind;

/// One served resource, as discovery describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    /// The API group; `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    /// The URL segment (`pods`).
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub short_names: &'static [&'static str],
    /// The groups `kubectl get <category>` expands (`all` for pods, services, deployments and KubeVirt's kinds).
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    /// As discovery lists them, sorted.
    pub verbs: &'static [&'static str],
    pub subresources: &'static [Subresource],
    /// The field selector labels supported beyond `metadata.name` and `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    pub storage: Storage,
}

/// A subresource served under its resource (`pods/status`).
#[derive(Debug, PartialEq, Eq)]
pub struct Subresource {
    pub name: &'static str,
    /// The kind its requests and answers carry (the resource's own for `status`).
    pub kind: &'static str,
    /// The group and version of that kind, when they are not the resource's (`serviceaccounts/token` answers an
    /// `authentication.k8s.io/v1` TokenRequest).
    pub kind_group_version: Option<(&'static str, &'static str)>,
    pub verbs: &'static [&'static str],
}

/// Where a resource's objects live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The twin's model ([`crate::apiserver::ApiServer`]) holds them: writes go through its rules.
    Modelled(Kind),
    /// The served layer's generic store holds them as JSON, with no rule beyond the API server's own.
    Generic,
    /// KubeVirt's VM controller holds them (VirtualMachines: the twin's KubeVirt state, not the API server's store).
    VirtualMachines,
    /// Nothing holds them: the server answers each create from the request and the stored state, as the API server
    /// answers its reviews (TokenReview, SubjectAccessReview); the serving crate does, never the world.
    Answered,
}

/// The verbs of a resource whose collection and items are served (no `deletecollection`).
const SERVED: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
/// The verbs of a resource that is only ever created (the reviews).
const CREATE: &[&str] = &["create"];
/// The verbs of a `status` subresource.
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// The patch content types the API server accepts for a built-in kind, in its order (apply is refused by the twin
/// later, by the patch layer: server-side apply is not served).
pub const PATCH_TYPES_BUILT_IN: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
/// The patch content types the API server accepts for a custom resource: no strategic merge patch.
pub const PATCH_TYPES_CUSTOM: &[&str] =
    &["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];

/// The groups whose resources are CRDs (the twin pre-creates their CustomResourceDefinition objects).
const CUSTOM_GROUPS: &[&str] = &["cert-manager.io", "gpu.cozystack.io", "kubevirt.io"];

const fn status(kind: &'static str) -> Subresource {
    Subresource { name: "status", kind, kind_group_version: None, verbs: STATUS_VERBS }
}

/// The fields of a core Event a field selector may name (k8s.io/kubernetes `pkg/apis/core/v1` conversion).
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// The fields of a Pod a field selector may name (k8s.io/kubernetes `pkg/apis/core/v1` conversion, but
/// `status.podIPs`).
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// A row with the common defaults: every served verb, no short names, categories, subresources or field labels.
const fn row(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    storage: Storage,
) -> Resource {
    Resource {
        group,
        version,
        plural,
        singular,
        kind,
        short_names: &[],
        categories: &[],
        namespaced,
        verbs: SERVED,
        subresources: &[],
        field_labels: &[],
        storage,
    }
}

const CORE: &str = "";
const ADMISSION: &str = "admissionregistration.k8s.io";
const RBAC: &str = "rbac.authorization.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const GPU: &str = gpuclaim_engine::keys::GROUP;
const KUBEVIRT: &str = "kubevirt.io";
const CERT_MANAGER: &str = "cert-manager.io";

use Storage::{Answered, Generic, Modelled};

/// A review: cluster-scoped, only created, never stored.
const fn review(group: &'static str, plural: &'static str, singular: &'static str, kind: &'static str) -> Resource {
    Resource { verbs: CREATE, ..row(group, "v1", plural, singular, kind, false, Answered) }
}

/// Every served resource, its groups in discovery's order (see the module doc).
pub static RESOURCES: &[Resource] = &[
    Resource {
        short_names: &["ns"],
        ..row(CORE, "v1", "namespaces", "namespace", "Namespace", false, Modelled(Kind::Namespace))
    },
    Resource {
        short_names: &["no"],
        field_labels: &["spec.unschedulable"],
        ..row(CORE, "v1", "nodes", "node", "Node", false, Modelled(Kind::Node))
    },
    Resource {
        short_names: &["po"],
        categories: &["all"],
        subresources: &[
            status("Pod"),
            Subresource { name: "binding", kind: "Binding", kind_group_version: None, verbs: &["create"] },
        ],
        field_labels: POD_FIELDS,
        ..row(CORE, "v1", "pods", "pod", "Pod", true, Modelled(Kind::Pod))
    },
    Resource {
        short_names: &["quota"],
        subresources: &[status("ResourceQuota")],
        ..row(CORE, "v1", "resourcequotas", "resourcequota", "ResourceQuota", true, Modelled(Kind::Quota))
    },
    // The settings ConfigMap is the model's (`Kind::Settings`): the store layer routes that one object there by its
    // namespace and name; every other ConfigMap is generic, so the resource is.
    Resource { short_names: &["cm"], ..row(CORE, "v1", "configmaps", "configmap", "ConfigMap", true, Generic) },
    Resource { field_labels: &["type"], ..row(CORE, "v1", "secrets", "secret", "Secret", true, Generic) },
    // `serviceaccounts/token` is a TokenRequest (authentication.k8s.io/v1), answered by the server, not stored.
    Resource {
        short_names: &["sa"],
        subresources: &[Subresource {
            name: "token",
            kind: "TokenRequest",
            kind_group_version: Some(("authentication.k8s.io", "v1")),
            verbs: CREATE,
        }],
        ..row(CORE, "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, Generic)
    },
    Resource {
        short_names: &["svc"],
        categories: &["all"],
        subresources: &[status("Service")],
        ..row(CORE, "v1", "services", "service", "Service", true, Generic)
    },
    Resource { short_names: &["ep"], ..row(CORE, "v1", "endpoints", "endpoints", "Endpoints", true, Generic) },
    Resource {
        short_names: &["ev"],
        field_labels: EVENT_FIELDS,
        ..row(CORE, "v1", "events", "event", "Event", true, Generic)
    },
    Resource {
        short_names: &["deploy"],
        categories: &["all"],
        subresources: &[status("Deployment")],
        ..row("apps", "v1", "deployments", "deployment", "Deployment", true, Generic)
    },
    // The events.k8s.io Events the controller's recorder posts: stored apart from core/v1 Events (the API server
    // stores both as one), so `kubectl describe` does not list them. No short name: `ev` is core's here.
    row("events.k8s.io", "v1", "events", "event", "Event", true, Generic),
    review(AUTHENTICATION, "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview"),
    review(AUTHENTICATION, "tokenreviews", "tokenreview", "TokenReview"),
    review(AUTHORIZATION, "selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview"),
    review(AUTHORIZATION, "selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview"),
    review(AUTHORIZATION, "subjectaccessreviews", "subjectaccessreview", "SubjectAccessReview"),
    Resource {
        short_names: &["pdb"],
        subresources: &[status("PodDisruptionBudget")],
        ..row("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", true, Generic)
    },
    row(RBAC, "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", false, Generic),
    row(RBAC, "v1", "clusterroles", "clusterrole", "ClusterRole", false, Generic),
    row(RBAC, "v1", "rolebindings", "rolebinding", "RoleBinding", true, Generic),
    row(RBAC, "v1", "roles", "role", "Role", true, Generic),
    Resource {
        short_names: &["sc"],
        ..row("storage.k8s.io", "v1", "storageclasses", "storageclass", "StorageClass", false, Generic)
    },
    Resource {
        categories: &["api-extensions"],
        ..row(
            ADMISSION,
            "v1",
            "mutatingwebhookconfigurations",
            "mutatingwebhookconfiguration",
            "MutatingWebhookConfiguration",
            false,
            Generic,
        )
    },
    Resource {
        categories: &["api-extensions"],
        subresources: &[status("ValidatingAdmissionPolicy")],
        ..row(
            ADMISSION,
            "v1",
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy",
            false,
            Generic,
        )
    },
    Resource {
        categories: &["api-extensions"],
        ..row(
            ADMISSION,
            "v1",
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            "ValidatingAdmissionPolicyBinding",
            false,
            Generic,
        )
    },
    Resource {
        categories: &["api-extensions"],
        ..row(
            ADMISSION,
            "v1",
            "validatingwebhookconfigurations",
            "validatingwebhookconfiguration",
            "ValidatingWebhookConfiguration",
            false,
            Generic,
        )
    },
    Resource {
        short_names: &["crd", "crds"],
        categories: &["api-extensions"],
        subresources: &[status("CustomResourceDefinition")],
        ..row(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            false,
            Generic,
        )
    },
    row("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, Generic),
    Resource {
        short_names: &["cert", "certs"],
        categories: &["cert-manager"],
        subresources: &[status("Certificate")],
        ..row(CERT_MANAGER, "v1", "certificates", "certificate", "Certificate", true, Generic)
    },
    Resource {
        categories: &["cert-manager"],
        subresources: &[status("Issuer")],
        ..row(CERT_MANAGER, "v1", "issuers", "issuer", "Issuer", true, Generic)
    },
    Resource {
        subresources: &[status("GPUClaim")],
        ..row(GPU, "v1alpha1", "gpuclaims", "gpuclaim", "GPUClaim", true, Modelled(Kind::Claim))
    },
    Resource {
        subresources: &[status("GPUClass")],
        ..row(GPU, "v1alpha1", "gpuclasses", "gpuclass", "GPUClass", false, Modelled(Kind::Class))
    },
    row(GPU, "v1alpha1", "gpuusages", "gpuusage", "GPUUsage", true, Modelled(Kind::Usage)),
    Resource {
        short_names: &["vmim", "vmims"],
        categories: &["all"],
        subresources: &[status("VirtualMachineInstanceMigration")],
        ..row(
            KUBEVIRT,
            "v1",
            "virtualmachineinstancemigrations",
            "virtualmachineinstancemigration",
            "VirtualMachineInstanceMigration",
            true,
            Generic,
        )
    },
    Resource {
        short_names: &["vmi", "vmis"],
        categories: &["all"],
        ..row(
            KUBEVIRT,
            "v1",
            "virtualmachineinstances",
            "virtualmachineinstance",
            "VirtualMachineInstance",
            true,
            Modelled(Kind::Vmi),
        )
    },
    // Generic until the twin models VirtualMachines as objects of the served API (issue 39 M7).
    Resource {
        short_names: &["vm", "vms"],
        categories: &["all"],
        subresources: &[status("VirtualMachine")],
        ..row(KUBEVIRT, "v1", "virtualmachines", "virtualmachine", "VirtualMachine", true, Storage::VirtualMachines)
    },
];

/// The served resource at `/api/{version}/{plural}` (group `""`) or `/apis/{group}/{version}/{plural}`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|row| row.group == group && row.version == version && row.plural == plural)
}

/// The served resource of an object's `apiVersion` and `kind` (`v1`, `Pod`; `gpu.cozystack.io/v1alpha1`, `GPUClaim`).
pub fn of_kind(api_version: &str, kind: &str) -> Option<&'static Resource> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    RESOURCES.iter().find(|row| row.group == group && row.version == version && row.kind == kind)
}

/// The served resource whose objects the model holds as `kind` (none for the settings ConfigMap: its resource is the
/// generic `configmaps`).
pub fn modelled(kind: Kind) -> Option<&'static Resource> {
    RESOURCES.iter().find(|row| row.storage == Storage::Modelled(kind))
}

/// The served group versions (`("", "v1")` first), in discovery's order, each once.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut served: Vec<(&'static str, &'static str)> = Vec::new();
    for row in RESOURCES {
        if !served.contains(&(row.group, row.version)) {
            served.push((row.group, row.version));
        }
    }
    served
}

/// The rows of one group version, in table order.
pub fn of_group_version<'a>(group: &'a str, version: &'a str) -> impl Iterator<Item = &'static Resource> + 'a {
    RESOURCES.iter().filter(move |row| row.group == group && row.version == version)
}

impl Resource {
    /// The resource as the snapshot keys it.
    pub fn id(&self) -> super::store::ResourceId {
        super::store::ResourceId { group: self.group, plural: self.plural }
    }

    /// The `apiVersion` its objects carry (`v1`, `gpu.cozystack.io/v1alpha1`).
    pub fn api_version(&self) -> String {
        match self.group {
            "" => self.version.to_owned(),
            group => format!("{group}/{}", self.version),
        }
    }

    /// The group and version.
    pub fn group_version(&self) -> (&'static str, &'static str) {
        (self.group, self.version)
    }

    /// The kind of its lists (`PodList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The resource qualified by its group, as the API server's messages name it (`pods`,
    /// `gpuclaims.gpu.cozystack.io`): apimachinery's `GroupResource.String()`.
    pub fn qualified(&self) -> String {
        qualify(self.plural, self.group)
    }

    /// The kind qualified by its group, as `Invalid` messages name it (`Pod`, `GPUClaim.gpu.cozystack.io`):
    /// apimachinery's `GroupKind.String()`.
    pub fn qualified_kind(&self) -> String {
        qualify(self.kind, self.group)
    }

    /// `Namespaced` or `Cluster`, as aggregated discovery writes the scope.
    pub fn scope(&self) -> &'static str {
        if self.namespaced { "Namespaced" } else { "Cluster" }
    }

    /// Whether the resource is a CRD's (custom resources take no strategic merge patch).
    pub fn is_custom(&self) -> bool {
        CUSTOM_GROUPS.contains(&self.group)
    }

    /// The patch content types the API server accepts for it.
    pub fn patch_types(&self) -> &'static [&'static str] {
        if self.is_custom() { PATCH_TYPES_CUSTOM } else { PATCH_TYPES_BUILT_IN }
    }

    /// Every field a field selector on it may name, for [`super::select::FieldSelector::check_supported`].
    pub fn field_selector_labels(&self) -> Vec<&'static str> {
        let mut labels = vec!["metadata.name", "metadata.namespace"];
        labels.extend_from_slice(self.field_labels);
        labels
    }

    /// Whether `verb` is served on the resource itself.
    pub fn serves(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// The served subresource called `name`.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|subresource| subresource.name == name)
    }
}

fn qualify(name: &str, group: &str) -> String {
    match group {
        "" => name.to_owned(),
        group => format!("{name}.{group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_modelled_kind_but_the_settings_has_one_row() {
        for kind in
            [Kind::Class, Kind::Claim, Kind::Usage, Kind::Pod, Kind::Vmi, Kind::Node, Kind::Namespace, Kind::Quota]
        {
            let rows = RESOURCES.iter().filter(|row| row.storage == Storage::Modelled(kind)).count();
            assert_eq!(rows, 1, "{kind:?}");
            let row = modelled(kind).unwrap();
            assert_eq!(row.kind, kind.name());
            assert_eq!(row.qualified(), kind.resource(), "the model's messages name the row's resource");
        }
        assert_eq!(modelled(Kind::Settings), None);
        assert_eq!(find("", "v1", "configmaps").unwrap().qualified(), Kind::Settings.resource());
    }

    #[test]
    fn the_core_group_comes_first_and_group_versions_are_listed_once() {
        let served = group_versions();
        assert_eq!(served[0], ("", "v1"));
        let mut sorted = served.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), served.len());
        // Rows of one group version are contiguous, so the table's order of groups is discovery's.
        let mut seen = Vec::new();
        for row in RESOURCES {
            if seen.last() != Some(&row.group_version()) {
                assert!(!seen.contains(&row.group_version()), "{} is split", row.api_version());
                seen.push(row.group_version());
            }
        }
    }

    #[test]
    fn names_qualify_as_apimachinery_writes_them() {
        let claims = find(GPU, "v1alpha1", "gpuclaims").unwrap();
        assert_eq!(claims.api_version(), "gpu.cozystack.io/v1alpha1");
        assert_eq!(claims.qualified_kind(), "GPUClaim.gpu.cozystack.io");
        assert!(claims.is_custom());
        let pods = of_kind("v1", "Pod").unwrap();
        assert_eq!(
            (pods.qualified(), pods.qualified_kind(), pods.scope()),
            ("pods".into(), "Pod".into(), "Namespaced")
        );
        assert_eq!(pods.patch_types().len(), 4);
        assert_eq!(of_kind("apps/v1", "Deployment").unwrap().plural, "deployments");
        assert_eq!(of_kind("v1", "Deployment"), None);
    }
}
