//! The Kubernetes API as the twin serves it, without I/O: what a request to the served twin means and what it
//! answers, decided from the world's state (issue 39; more parts land here). The HTTPS server that carries it is
//! another crate's.
//!
//! Served mode is switched on per world ([`World::serve`]); the in-process twin never pays for it. Then, after
//! every event and every write, [`World::served_sync`] renders each object the API server's journal says was
//! written into the [`store::Snapshot`] clients read, recording the change for watches. Readers share the snapshot
//! behind a lock, so a list or a watch never stalls the world for longer than a copy of the objects it reads.
//!
//! The parts: the registry of served resources, one row each ([`resources`]); the discovery and OpenAPI documents
//! generated from it ([`discovery`]); the API server's Status bodies for refused requests ([`status`]); label and
//! field selectors as the API server parses and matches them ([`select`]); the served objects and their history
//! ([`store`]); LIST with pages ([`list`]); where a WATCH starts and what it is sent ([`watch`]); clients' writes
//! ([`writes`]); PATCH's three patch types applied as the API server applies them ([`patch`]); VirtualMachines,
//! KubeVirt's objects ([`vms`]); the CRD objects the twin pre-creates and their printer columns ([`crds`]); the
//! Table answers `kubectl get` asks for, aged on the twin's clock ([`table`]); the media ranges of an Accept header
//! ([`media`]); Go's quoting, as the API server's messages use it ([`go`]); what the world keeps of it while served ([`state`]); a custom resource checked against its CRD's
//! structural schema, its unknown fields found and pruned ([`validate`]); who may do what, Kubernetes' RBAC over the
//! stored roles and bindings ([`rbac`]); the protobuf bodies of the reviews kubectl sends ([`protobuf`]).

pub mod admission;
pub mod crds;
pub mod discovery;
pub mod go;
pub mod list;
pub mod media;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod resources;
pub mod select;
pub mod state;
pub mod status;
pub mod store;
pub mod table;
pub mod validate;
pub mod vms;
pub mod watch;
pub mod writes;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use gpuclaim_engine::controller::runtime::ObjectKey;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::Time;
use serde_json::Value;

use crate::apiserver::objects::{Manifest, timestamp, uid_of};
use crate::apiserver::watch::Journaled;
use crate::apiserver::{ApiServer, Kind};
use crate::world::World;
use state::ServedApi;
use store::{ResourceId, Snapshot};

/// The resource each modelled kind is served as.
pub fn resource_of(kind: Kind) -> ResourceId {
    let row = match kind {
        // The settings ConfigMap is the one modelled object of a resource whose other objects are generic.
        Kind::Settings => resources::find("", "v1", "configmaps"),
        kind => resources::modelled(kind),
    };
    row.expect("every modelled kind has a row (tests/served_discovery.rs holds it)").id()
}

/// The namespaces a served twin starts with besides the scenario's tenants and the controller's, as a cluster has
/// them.
pub const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

/// The events (core/v1) a served twin keeps at most: the oldest go first, as the API server's events expire (after
/// an hour there).
pub const EVENTS_KEPT_MAX: usize = 10_000;

/// The settings ConfigMap's key as served (the store names it by kind alone: there is one).
fn served_key(key: ObjectKey) -> ObjectKey {
    match key.kind {
        Kind::Settings => ObjectKey::new(Kind::Settings, keys::DEFAULT_CONTROLLER_NAMESPACE, keys::SETTINGS_CONFIGMAP),
        _ => key,
    }
}

/// Every object the store holds now, by served key.
pub fn stored_keys(api: &ApiServer) -> Vec<ObjectKey> {
    let store = api.store();
    let mut keys_now = Vec::new();
    let namespaced = |kind, namespace: &str, name: &str| ObjectKey::new(kind, namespace, name);
    keys_now.extend(store.classes().map(|class| namespaced(Kind::Class, "", &class.name)));
    keys_now.extend(store.nodes().map(|node| namespaced(Kind::Node, "", &node.name)));
    keys_now.extend(store.claims().map(|claim| namespaced(Kind::Claim, &claim.namespace, &claim.name)));
    keys_now.extend(store.usages().map(|usage| namespaced(Kind::Usage, &usage.namespace, &usage.name)));
    keys_now.extend(store.pods().map(|pod| namespaced(Kind::Pod, &pod.namespace, &pod.name)));
    keys_now.extend(store.vmis().map(|vmi| namespaced(Kind::Vmi, &vmi.namespace, &vmi.name)));
    for (namespace, tenant) in store.tenants() {
        keys_now.push(namespaced(Kind::Namespace, "", namespace));
        keys_now.extend(tenant.quotas().map(|(quota, _)| namespaced(Kind::Quota, namespace, quota)));
    }
    if api.admission.settings().is_some() {
        keys_now.push(served_key(namespaced(Kind::Settings, "", "")));
    }
    keys_now
}

/// The revision a render carries, else `fallback`.
fn revision_of(object: &Value, fallback: u64) -> u64 {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|version| version.parse().ok())
        .unwrap_or(fallback)
}

/// Keeps in `manifest` what the compact types lack for `key` written at `revision` at `now`: the uid and creation
/// time at first sight, the revision for kinds that hold none.
fn note_write(manifest: &mut Manifest, key: &ObjectKey, revision: u64, now: Time) {
    if manifest.created.is_none() {
        manifest.created = Some(now);
        // Named by the revision it was first seen at too: a namesake created later is another object.
        manifest.uid = Some(uid_of(key.kind.name(), &key.namespace, &format!("{}@{revision}", key.name)));
    }
    if matches!(key.kind, Kind::Namespace | Kind::Quota | Kind::Settings) {
        manifest.resource_version = Some(revision.to_string().into());
    }
}

/// Records when each condition of `object` took its status (now, for one that changed since the last render),
/// and writes that time into the object.
fn note_transitions(manifest: &mut Manifest, object: &mut Value, now: Time) {
    let Some(conditions) = object.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else { return };
    for condition in conditions {
        let (Some(type_), Some(status)) = (
            condition.get("type").and_then(Value::as_str).map(str::to_owned),
            condition.get("status").and_then(Value::as_str).map(str::to_owned),
        ) else {
            continue;
        };
        let recorded = manifest.transitions.get(&type_).is_some_and(|(was, _)| *was == status);
        if !recorded {
            manifest.transitions.insert(type_, (status, now));
            condition["lastTransitionTime"] = timestamp(now).into();
        }
    }
}

impl World {
    /// Stores the events the controller recorded since the last sync as core/v1 Events, each at its own revision,
    /// dropping the oldest beyond [`EVENTS_KEPT_MAX`].
    fn sync_events(&mut self, snapshot: &mut Snapshot, now: Time) {
        let events = resources::find("", "v1", "events").expect("events are served").id();
        for recorded in self.api.take_recorded_events() {
            let revision: u64 = self.api.stamp().parse().unwrap_or_default();
            let name = crate::apiserver::objects::event::name(&recorded, revision);
            let namespace = recorded.object.namespace.to_string();
            let object = crate::apiserver::objects::event::render(&recorded, revision, now);
            snapshot.upsert(events, &namespace, &name, revision, object);
            let kept = &mut self.served.as_mut().expect("served").events_kept;
            kept.push_back((namespace, name));
            let expired = kept.len().saturating_sub(EVENTS_KEPT_MAX);
            let gone: Vec<(String, String)> = kept.drain(..expired).collect();
            for (namespace, name) in gone {
                let revision: u64 = self.api.stamp().parse().unwrap_or_default();
                snapshot.remove(events, &namespace, &name, revision);
            }
        }
    }

    /// Switches served mode on: the API server keeps manifests and its journal, and every object it holds now is
    /// rendered into the snapshot clients read, at the current revision. Watches keep `history_max` changes per
    /// resource. Returns the snapshot (shared; the world writes it at every [`World::served_sync`]).
    pub fn serve(&mut self, history_max: usize) -> Arc<RwLock<Snapshot>> {
        if let Some(served) = &self.served {
            return served.snapshot();
        }
        self.api.keep_manifests();
        // The namespaces every cluster has, and the controller's: clients write there (the chart's objects).
        let admin = crate::users::platform_admin();
        for namespace in SYSTEM_NAMESPACES.into_iter().chain([keys::DEFAULT_CONTROLLER_NAMESPACE]) {
            if self.api.store().tenant(namespace).is_none() {
                // Only an existing namespace is refused, and it was looked for above.
                let _ = self.api.create_namespace(namespace, &admin, false);
            }
        }
        // Someone reads the journal already (a run's invariant checks): the syncs keep what they read for it.
        let touched = self.api.watch().keeps_journal().then(Vec::new);
        self.api.watch().keep_journal();
        let now = self.time();
        let head = self.api.revision();
        let mut snapshot = Snapshot::new(head, history_max);
        for key in stored_keys(&self.api) {
            let manifests = self.api.manifests_mut().expect("kept above");
            note_write(manifests.entry(key.clone()), &key, head, now);
            let Some(mut object) = self.api.render(&key) else { continue };
            let manifest = self.api.manifests_mut().expect("kept above").entry(key.clone());
            note_transitions(manifest, &mut object, now);
            let revision = revision_of(&object, head);
            snapshot.load(resource_of(key.kind), &key.namespace, &key.name, revision, object);
        }
        // The CustomResourceDefinitions of the custom kinds served: ours as `gpuclaim crds` prints them, KubeVirt's and
        // cert-manager's as stand-ins ([`crds`]).
        let definitions = resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("served");
        for mut definition in crds::builtin() {
            let name = definition.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let metadata = &mut definition["metadata"];
            metadata["uid"] = uid_of("CustomResourceDefinition", "", &name).as_str().into();
            metadata["creationTimestamp"] = timestamp(now).into();
            metadata["resourceVersion"] = head.to_string().into();
            metadata["generation"] = 1.into();
            snapshot.load(definitions.id(), "", &name, head, definition);
        }
        let mut served = ServedApi::new(snapshot);
        served.touched = touched;
        let shared = served.snapshot();
        self.served = Some(Box::new(served));
        for (namespace, name) in self.vm_names() {
            self.note_vm(&namespace, &name);
        }
        let mut snapshot = shared.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.sync_vms([], &mut snapshot);
        self.sync_admission(&snapshot, true);
        drop(snapshot);
        shared
    }

    /// Renders every object written since the last sync into the snapshot (served mode; nothing otherwise) and
    /// returns the journal it read, for the caller's invariant checks. Writes to one object within one sync are
    /// one change to watchers (its state after the last of them), as the twin's writes within one event happen at
    /// one instant.
    pub fn served_sync(&mut self) -> Vec<Journaled> {
        if self.served.is_none() {
            return Vec::new();
        }
        let journal = self.api.watch().take_journal(Vec::new());
        if let Some(touched) = self.served.as_mut().and_then(|served| served.touched.as_mut()) {
            touched.extend_from_slice(&journal);
        }
        let mut last: BTreeMap<ObjectKey, u64> = BTreeMap::new();
        for (key, revision) in &journal {
            last.insert(served_key(key.clone()), *revision);
        }
        let mut written: Vec<(u64, ObjectKey)> = last.into_iter().map(|(key, revision)| (revision, key)).collect();
        written.sort();
        let now = self.time();
        let shared = self.served.as_ref().expect("checked above").snapshot();
        let mut snapshot = shared.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (revision, key) in written {
            let resource = resource_of(key.kind);
            let manifests = self.api.manifests_mut().expect("kept while serving");
            note_write(manifests.entry(key.clone()), &key, revision, now);
            match self.api.render(&key) {
                Some(mut object) => {
                    let manifest = self.api.manifests_mut().expect("kept while serving").entry(key.clone());
                    note_transitions(manifest, &mut object, now);
                    let revision = revision_of(&object, revision);
                    snapshot.upsert(resource, &key.namespace, &key.name, revision, object);
                }
                None => {
                    snapshot.remove(resource, &key.namespace, &key.name, revision);
                    self.api.manifests_mut().expect("kept while serving").remove(&key);
                }
            }
        }
        self.sync_events(&mut snapshot, now);
        let vmis = journal
            .iter()
            .filter(|(key, _)| key.kind == Kind::Vmi)
            .map(|(key, _)| (key.namespace.clone(), key.name.clone()));
        let vmis: Vec<_> = vmis.collect();
        self.sync_vms(vmis, &mut snapshot);
        snapshot.advance(self.api.revision());
        let namespaces_changed = journal.iter().any(|(key, _)| key.kind == Kind::Namespace);
        self.sync_admission(&snapshot, namespaces_changed);
        journal
    }

    /// The writes since the last call, for a run's invariant checks: the API server's journal, or, while served,
    /// what the syncs read of it (they take it to render what changed). `spent` (emptied) takes its place.
    pub fn take_touched(&mut self, spent: Vec<Journaled>) -> Vec<Journaled> {
        if let Some(served) = self.served.as_mut() {
            // From now on the syncs keep what they read for the checks.
            served.touched.get_or_insert_with(Vec::new);
            self.served_sync();
            let touched = self.served.as_mut().and_then(|served| served.touched.as_mut()).expect("checked above");
            let mut spent = spent;
            spent.clear();
            return std::mem::replace(touched, spent);
        }
        self.api.watch().take_journal(spent)
    }

    /// Before a write the webhooks judge (remote admission): what the world wrote so far in this event is rendered,
    /// so a webhook that reads the API server sees it, as it would see every write committed before the request
    /// (a tenant's claim, then the VM using it, in one event).
    pub(crate) fn sync_before_admission(&mut self) {
        if self.api.admission.is_remote() {
            self.served_sync();
        }
    }
}
