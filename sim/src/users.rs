//! Who each actor of the twin acts as, as the API server authenticates it: the names the chart's admission policies
//! read (`charts/gpuclaim/admission/policies/`), so the twin's writes are judged as a cluster's would be.

use std::collections::BTreeMap;

use gpuclaim_engine::keys;

pub use crate::apiserver::admission::request::User;

/// KubeVirt's virt-controller (creates VMIs from VMs and their launcher pods, updates VMIs).
pub fn kubevirt_controller() -> User {
    User::service_account("kubevirt", "kubevirt-controller")
}

/// KubeVirt's virt-handler (reports a VMI's phase).
pub fn kubevirt_handler() -> User {
    User::service_account("kubevirt", "kubevirt-handler")
}

/// kube-controller-manager's garbage collector.
pub fn garbage_collector() -> User {
    User::service_account("kube-system", "generic-garbage-collector")
}

/// The GPU controller's service account in `namespace` (the chart's `gpuclaim`).
pub fn gpu_controller(namespace: &str) -> User {
    User::service_account(namespace, "gpuclaim")
}

/// A tenant's own user: an administrator of its namespace, as a platform's identity provider names them.
pub fn tenant(namespace: &str) -> User {
    User::person(&format!("admin@{namespace}"), &[&format!("tenant:{namespace}")])
}

/// A platform administrator (cluster-admin's usual group).
pub fn platform_admin() -> User {
    User::person("platform-admin", &["system:masters"])
}

/// The settings ConfigMap's data as the chart's default values render it, for a controller acting as `controller`.
pub fn chart_settings(controller: &str) -> BTreeMap<String, String> {
    let kubevirt = [kubevirt_controller(), kubevirt_handler()].map(|user| user.username).join(",");
    BTreeMap::from([
        (keys::SETTINGS_CONTROLLER_USER.to_owned(), controller.to_owned()),
        (keys::SETTINGS_KUBEVIRT_USERS.to_owned(), kubevirt),
        (keys::SETTINGS_PLATFORM_ADMIN_GROUPS.to_owned(), "system:masters".to_owned()),
    ])
}
