//! Remote admission's configuration, read from the served store ([`crate::apiserver::admission::remote`]): the
//! webhook configurations, ValidatingAdmissionPolicies and bindings, and CustomResourceDefinitions clients stored,
//! and the namespaces' labels the webhooks' `namespaceSelector`s read. Read again at a sync only when one of those
//! resources changed since (their watch history says so), so the world's own writes cost one lookup per resource.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use super::resources;
use super::store::{ResourceId, Snapshot};
use crate::apiserver::Kind;
use crate::apiserver::admission::crd::CrdRules;
use crate::apiserver::admission::remote::WebhookTransport;
use crate::world::World;
use gpuclaim_engine::controller::runtime::ObjectKey;

/// The resources remote admission's configuration is read from: (group, version, plural).
pub const CONFIGURATION_RESOURCES: [(&str, &str, &str); 4] = [
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"),
];

/// Where the CRDs are stored.
const CRDS: (&str, &str, &str) = ("apiextensions.k8s.io", "v1", "customresourcedefinitions");

fn id((group, version, plural): (&str, &str, &str)) -> ResourceId {
    resources::find(group, version, plural).expect("admission's resources are served").id()
}

/// Whether `resource` changed after revision `seen` (or its history no longer reaches back that far).
fn changed_since(snapshot: &Snapshot, resource: ResourceId, seen: u64) -> bool {
    snapshot.changes_after(resource, seen).map_or(true, |mut changes| changes.next().is_some())
}

impl World {
    /// Switches the API server's admission to remote mode over `transport`: the webhooks the stored configurations
    /// register are called through it, with the stored policies and CRD rules (read now when served, and again
    /// whenever they change). See [`crate::apiserver::admission::Admission::go_remote`].
    pub fn go_remote_admission(&mut self, transport: Box<dyn WebhookTransport>) {
        self.api.admission.go_remote(transport);
        let Some(served) = &self.served else { return };
        let shared = served.snapshot();
        let snapshot = shared.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.sync_admission(&snapshot, true);
    }

    /// What reading the stored admission configuration found that cannot be applied, one line each (the last read's;
    /// empty in in-process mode).
    pub fn admission_problems(&self) -> &[String] {
        self.served.as_ref().map_or(&[], |served| &served.admission_problems)
    }

    /// Remote mode: reads the configuration again if one of its resources changed since the last read (or
    /// `namespaces_changed`: the namespaces' labels). Nothing in in-process mode.
    pub(crate) fn sync_admission(&mut self, snapshot: &Snapshot, namespaces_changed: bool) {
        if !self.api.admission.is_remote() {
            return;
        }
        let Some(served) = self.served.as_mut() else { return };
        let seen = served.admission_seen;
        let resources: Vec<ResourceId> = CONFIGURATION_RESOURCES.into_iter().map(id).chain([id(CRDS)]).collect();
        let moved = seen.is_none() || resources.iter().any(|r| changed_since(snapshot, *r, seen.unwrap_or(0)));
        served.admission_seen = Some(snapshot.head());
        if moved {
            let documents: Vec<Value> = resources[..CONFIGURATION_RESOURCES.len()]
                .iter()
                .flat_map(|resource| snapshot.objects(*resource, None, None))
                .map(|(_, stored)| (*stored.object).clone())
                .collect();
            let (crds, mut problems) = stored_crds(snapshot);
            problems.extend(self.api.admission.configure_remote(&documents, crds));
            self.served.as_mut().expect("checked above").admission_problems = problems;
        }
        if moved || namespaces_changed {
            let labels = self.namespace_labels();
            self.api.admission.set_namespace_labels(labels);
        }
    }

    /// Every namespace's labels as served.
    fn namespace_labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let names: Vec<String> = self.api.store().tenants().map(|(name, _)| name.to_string()).collect();
        names
            .into_iter()
            .filter_map(|name| {
                let object = self.api.render(&ObjectKey::new(Kind::Namespace, "", &name))?;
                let labels = object.pointer("/metadata/labels").cloned().unwrap_or(Value::Null);
                Some((name, serde_json::from_value(labels).unwrap_or_default()))
            })
            .collect()
    }
}

/// The rules of the stored CRDs; one that cannot be read is left out and named.
fn stored_crds(snapshot: &Snapshot) -> (CrdRules, Vec<String>) {
    let mut problems = Vec::new();
    let mut crds = Vec::new();
    for ((_, name), stored) in snapshot.objects(id(CRDS), None, None) {
        match serde_json::from_value::<CustomResourceDefinition>((*stored.object).clone()) {
            Ok(crd) => crds.push(crd),
            Err(error) => problems.push(format!("CustomResourceDefinition {name:?}: {error}")),
        }
    }
    (CrdRules::of(&crds), problems)
}
