//! A write as admission sees it: who asks, the operation, the resource (and subresource), and the object before and
//! after. The objects are produced only when a rule reads them ([`Served`]): most writes are the controller's or
//! KubeVirt's, which the policies skip on who asks alone.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube_cel::cel::{Context, Value as CelValue};
use serde_json::{Value, json};

use super::cel::value_of;

/// The operations admission is called for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// As `request.operation` and a rule's `operations` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// A resource the twin's API server serves, as admission names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub resource: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

pub const CLAIMS: Resource = Resource {
    group: "gpu.cozystack.io",
    version: "v1alpha1",
    resource: "gpuclaims",
    kind: "GPUClaim",
    namespaced: true,
};
pub const USAGES: Resource = Resource {
    group: "gpu.cozystack.io",
    version: "v1alpha1",
    resource: "gpuusages",
    kind: "GPUUsage",
    namespaced: true,
};
pub const PODS: Resource = Resource { group: "", version: "v1", resource: "pods", kind: "Pod", namespaced: true };
pub const VMIS: Resource = Resource {
    group: "kubevirt.io",
    version: "v1",
    resource: "virtualmachineinstances",
    kind: "VirtualMachineInstance",
    namespaced: true,
};
pub const NAMESPACES: Resource =
    Resource { group: "", version: "v1", resource: "namespaces", kind: "Namespace", namespaced: false };

/// Who asks: an authenticated user as the API server knows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct User {
    pub username: String,
    pub groups: Vec<String>,
}

impl User {
    /// A service account, with the groups the API server gives every one.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
        }
    }

    /// A person, with the groups their identity provider gives them.
    pub fn person(username: &str, groups: &[&str]) -> User {
        let mut all: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        all.push("system:authenticated".to_owned());
        User { username: username.to_owned(), groups: all }
    }
}

/// An object as the API server serves it (JSON), and the labels selectors read.
pub trait Served {
    fn json(&self) -> Value;
    fn labels(&self) -> Cow<'_, BTreeMap<String, String>>;
}

/// One write on its way through admission.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub operation: Operation,
    pub resource: Resource,
    /// `""` for the resource itself, `"status"` for its status subresource.
    pub subresource: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a User,
    /// The object as written (none on DELETE).
    pub object: Option<&'a dyn Served>,
    /// The object as stored (none on CREATE).
    pub old_object: Option<&'a dyn Served>,
}

impl Request<'_> {
    /// The `request` variable of admission CEL.
    pub fn json(&self) -> Value {
        let resource = self.resource;
        let kind = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
        let gvr = json!({"group": resource.group, "version": resource.version, "resource": resource.resource});
        json!({
            "kind": kind,
            "resource": gvr,
            "subResource": self.subresource,
            "requestKind": kind,
            "requestResource": gvr,
            "requestSubResource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation.name(),
            "userInfo": {"username": self.user.username, "groups": self.user.groups},
            "dryRun": false,
        })
    }

    /// The resource as a rule names it: `gpuclaims` or `gpuclaims/status`.
    pub fn resource_path(&self) -> String {
        match self.subresource {
            "" => self.resource.resource.to_owned(),
            subresource => format!("{}/{subresource}", self.resource.resource),
        }
    }
}

impl<'a> Request<'a> {
    /// A request without its objects: what the policies' conditions on who asks need ([`super::Admission::needs_objects`]).
    pub fn head(
        operation: Operation,
        resource: Resource,
        subresource: &'static str,
        namespace: &'a str,
        name: &'a str,
        user: &'a User,
    ) -> Self {
        Request { operation, resource, subresource, namespace, name, user, object: None, old_object: None }
    }

    /// A CEL scope below `functions` binding `request`, `params` when given (a policy's, null when not found) and,
    /// when `with_objects`, `object` and `oldObject` (null where there is none).
    pub fn scope<'f>(&self, functions: &'f Context<'f>, params: Option<&CelValue>, with_objects: bool) -> Context<'f> {
        let mut scope = functions.new_inner_scope();
        scope.add_variable_from_value("request", value_of(&self.json()));
        if let Some(params) = params {
            scope.add_variable_from_value("params", params.clone());
        }
        if with_objects {
            let served = |object: Option<&dyn Served>| object.map_or(CelValue::Null, |o| value_of(&o.json()));
            scope.add_variable_from_value("object", served(self.object));
            scope.add_variable_from_value("oldObject", served(self.old_object));
        }
        scope
    }
}
