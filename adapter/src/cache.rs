//! The caches: one kube-runtime watcher per kind, folded into the engine's [`View`] (the store both the webhooks
//! and the reconciler read), plus the keys each event touched for the reconciler's next pass.
//!
//! A (re)list is buffered and applied at once when it completes, so the view never shows half a list; objects a
//! relist no longer holds are removed then. An object the engine cannot read is logged and its previous version kept
//! (dropping a quota that became unreadable would lift a budget). Each kind reports when its first list is in, which
//! is what readiness and the reconciler's first pass wait for.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::controller::{Changes, run_key_visits, vmi_key_needed};
use gpuclaim_engine::convert::{self, ConvertError};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Settings, View};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ResourceQuota};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::webhook::{SharedView, VIEW_UNPOISONED};

/// The kinds cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CacheKind {
    Classes,
    Claims,
    Usages,
    Pods,
    OtherPods,
    Vmis,
    Nodes,
    Quotas,
    Namespaces,
    Settings,
}

impl CacheKind {
    pub const ALL: [CacheKind; 10] = [
        CacheKind::Classes,
        CacheKind::Claims,
        CacheKind::Usages,
        CacheKind::Pods,
        CacheKind::OtherPods,
        CacheKind::Vmis,
        CacheKind::Nodes,
        CacheKind::Quotas,
        CacheKind::Namespaces,
        CacheKind::Settings,
    ];

    /// What the webhooks read (DESIGN.md §3): classes and claims (VMI and pod webhooks), budgets, entitlement and
    /// settings (order webhook). A replica is ready once these are in.
    pub fn webhooks_read(self) -> bool {
        matches!(
            self,
            CacheKind::Classes | CacheKind::Claims | CacheKind::Quotas | CacheKind::Namespaces | CacheKind::Settings
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Classes => "gpuclasses",
            CacheKind::Claims => "gpuclaims",
            CacheKind::Usages => "gpuusages",
            CacheKind::Pods => "pods with claims",
            CacheKind::OtherPods => "other bound pods",
            CacheKind::Vmis => "virtualmachineinstances",
            CacheKind::Nodes => "nodes",
            CacheKind::Quotas => "resourcequotas",
            CacheKind::Namespaces => "namespaces",
            CacheKind::Settings => "settings configmap",
        }
    }
}

/// The view, the keys changed since the reconciler last took them, and which kinds have synced.
pub struct Caches {
    pub view: SharedView,
    changes: Mutex<Changes>,
    wake: Notify,
    synced: watch::Sender<BTreeSet<CacheKind>>,
}

impl Caches {
    pub fn new(view: SharedView) -> Arc<Caches> {
        Arc::new(Caches {
            view,
            changes: Mutex::new(Changes::default()),
            wake: Notify::new(),
            synced: watch::Sender::new(BTreeSet::new()),
        })
    }

    /// Kinds whose first list is in.
    pub fn synced(&self) -> watch::Receiver<BTreeSet<CacheKind>> {
        self.synced.subscribe()
    }

    /// Kinds the webhooks read that have not synced yet (empty once the replica may be ready).
    pub fn webhook_caches_pending(&self) -> Vec<CacheKind> {
        let synced = self.synced.borrow();
        CacheKind::ALL.into_iter().filter(|k| k.webhooks_read() && !synced.contains(k)).collect()
    }

    pub fn all_synced(&self) -> bool {
        self.synced.borrow().len() == CacheKind::ALL.len()
    }

    /// The keys changed since the last call.
    pub fn take_changes(&self) -> Changes {
        std::mem::take(&mut *self.changes.lock().expect(CHANGES_UNPOISONED))
    }

    /// Waits for the next change (one that happened since the last wait counts).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Applies one change to the view and records its keys, then wakes the reconciler.
    pub fn apply(&self, change: impl FnOnce(&mut View, &mut Changes)) {
        {
            let mut view = self.view.write().expect(VIEW_UNPOISONED);
            let mut changes = self.changes.lock().expect(CHANGES_UNPOISONED);
            change(&mut view, &mut changes);
        }
        self.wake.notify_one();
    }

    fn mark_synced(&self, kind: CacheKind) {
        let newly = self.synced.send_if_modified(|synced| synced.insert(kind));
        if newly {
            tracing::info!(cache = kind.name(), "cache synced");
        }
    }

    /// Starts one watcher per kind; they run until the returned tasks are aborted.
    pub fn start(
        self: &Arc<Self>,
        client: &kube::Client,
        controller_namespace: &str,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let claims_pods = watcher::Config::default().labels(&format!("{}={}", keys::LABEL_CLAIMS, keys::TRUE));
        // Pods on nodes that still hold resources: what else takes devices, CPU and memory where claims go.
        let other_pods = watcher::Config::default()
            .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
            .labels(&format!("{}!={}", keys::LABEL_CLAIMS, keys::TRUE));
        let settings = watcher::Config::default().fields(&format!("metadata.name={}", keys::SETTINGS_CONFIGMAP));
        let (group, version) = keys::kubevirt::API_VERSION.split_once('/').expect("kubevirt.io/v1 has a group");
        let vmi = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, keys::kubevirt::KIND_VMI),
            "virtualmachineinstances",
        );
        let all = watcher::Config::default;
        vec![
            tokio::spawn(watch_kind(Api::<GPUClass>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<GPUClaim>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<GPUUsage>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<Pod>::all(client.clone()), claims_pods, self.clone())),
            tokio::spawn(watch_kind(Api::<OtherPod>::all(client.clone()), other_pods, self.clone())),
            tokio::spawn(watch_kind(Api::<DynamicObject>::all_with(client.clone(), &vmi), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<Node>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<ResourceQuota>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(Api::<Namespace>::all(client.clone()), all(), self.clone())),
            tokio::spawn(watch_kind(
                Api::<ConfigMap>::namespaced(client.clone(), controller_namespace),
                settings,
                self.clone(),
            )),
        ]
    }
}

/// Nothing panics while the changes lock is held (set insertions), so it is never poisoned.
const CHANGES_UNPOISONED: &str = "the changes lock is never poisoned";

/// (namespace, name); cluster-scoped objects have an empty namespace.
pub type Key = (String, String);

/// How one kind goes into the view.
pub trait Cached: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    const KIND: CacheKind;
    /// Puts the object into the view, recording the keys the reconciler visits for it.
    fn upsert(&self, view: &mut View, changes: &mut Changes) -> Result<(), ConvertError>;
    /// Takes the object out of the view.
    fn remove(key: &Key, view: &mut View, changes: &mut Changes);
    /// The keys of this kind the view holds, when it can list them: the writer also puts objects into the view,
    /// and a relist must be able to remove those too.
    fn view_keys(_view: &View) -> Vec<Key> {
        Vec::new()
    }
}

fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

impl Cached for GPUClass {
    const KIND: CacheKind = CacheKind::Classes;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        view.upsert_class(convert::class_from_kube(self));
        Ok(())
    }
    fn remove((_, name): &Key, view: &mut View, _: &mut Changes) {
        view.remove_class(name);
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.classes().map(|c| (String::new(), c.name.clone())).collect()
    }
}

impl Cached for GPUClaim {
    const KIND: CacheKind = CacheKind::Claims;
    fn upsert(&self, view: &mut View, changes: &mut Changes) -> Result<(), ConvertError> {
        let (namespace, name) = key_of(self);
        view.upsert_claim(convert::claim_from_kube(self, &namespace));
        changes.claims.insert((namespace.into(), name.into()));
        Ok(())
    }
    fn remove((namespace, name): &Key, view: &mut View, changes: &mut Changes) {
        view.remove_claim(namespace, name);
        changes.claims.insert((namespace.as_str().into(), name.as_str().into()));
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.claims().map(|c| (c.namespace.to_string(), c.name.to_string())).collect()
    }
}

impl Cached for GPUUsage {
    const KIND: CacheKind = CacheKind::Usages;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        view.upsert_usage(convert::usage_from_kube(self, &self.namespace().unwrap_or_default()));
        Ok(())
    }
    fn remove((namespace, name): &Key, view: &mut View, _: &mut Changes) {
        view.remove_usage(namespace, name);
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.usages().map(|u| (u.namespace.to_string(), u.name.to_string())).collect()
    }
}

impl Cached for Pod {
    const KIND: CacheKind = CacheKind::Pods;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        view.upsert_pod(convert::pod_from_kube(self, &self.namespace().unwrap_or_default())?);
        Ok(())
    }
    fn remove((namespace, name): &Key, view: &mut View, _: &mut Changes) {
        view.remove_pod(namespace, name);
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.pods()
            .filter(|p| is_claims_pod(&p.labels))
            .map(|p| (p.namespace.to_string(), p.name.to_string()))
            .collect()
    }
}

/// A pod without the claims label, bound to a node: a raw-GPU VM's launcher, or any other workload. The engine
/// counts its devices, CPU and memory where it runs. The two pod watches split pods by the claims label, so each pod
/// has one owner in the view; a claims pod that reaches this watch anyway is left to the other.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(transparent)]
pub struct OtherPod(pub Pod);

impl Resource for OtherPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::plural(dt)
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.0.metadata
    }
}

fn is_claims_pod(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(keys::LABEL_CLAIMS).map(String::as_str) == Some(keys::TRUE)
}

impl Cached for OtherPod {
    const KIND: CacheKind = CacheKind::OtherPods;
    fn upsert(&self, view: &mut View, changes: &mut Changes) -> Result<(), ConvertError> {
        if is_claims_pod(self.0.labels()) {
            return Ok(());
        }
        self.0.upsert(view, changes)
    }
    fn remove((namespace, name): &Key, view: &mut View, changes: &mut Changes) {
        if view.pod(namespace, name).is_some_and(|pod| !is_claims_pod(&pod.labels)) {
            Pod::remove(&(namespace.clone(), name.clone()), view, changes);
        }
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.pods()
            .filter(|p| !is_claims_pod(&p.labels))
            .map(|p| (p.namespace.to_string(), p.name.to_string()))
            .collect()
    }
}

impl Cached for DynamicObject {
    const KIND: CacheKind = CacheKind::Vmis;
    fn upsert(&self, view: &mut View, changes: &mut Changes) -> Result<(), ConvertError> {
        let (namespace, name) = key_of(self);
        let object = serde_json::to_value(self).expect("a DynamicObject always serializes");
        let vmi = convert::vmi_from_json(&object, &namespace)?;
        // The reconciler's event filter: an update it reads nothing new from goes into the cache, not the queue.
        let needed = vmi_key_needed(view, view.vmi(&namespace, &name), &vmi);
        view.upsert_vmi(vmi);
        if needed {
            changes.vmis.insert((namespace.into(), name.into()));
        }
        Ok(())
    }
    fn remove((namespace, name): &Key, view: &mut View, changes: &mut Changes) {
        view.remove_vmi(namespace, name);
        if run_key_visits(view, namespace, name) {
            changes.vmis.insert((namespace.as_str().into(), name.as_str().into()));
        }
    }
}

impl Cached for Node {
    const KIND: CacheKind = CacheKind::Nodes;
    fn upsert(&self, view: &mut View, changes: &mut Changes) -> Result<(), ConvertError> {
        view.upsert_node(convert::node_from_kube(self)?);
        changes.nodes.insert(self.name_any());
        Ok(())
    }
    fn remove((_, name): &Key, view: &mut View, changes: &mut Changes) {
        view.remove_node(name);
        changes.nodes.insert(name.clone());
    }
}

impl Cached for ResourceQuota {
    const KIND: CacheKind = CacheKind::Quotas;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        let (namespace, name) = key_of(self);
        view.upsert_quota(&namespace, &name, convert::quota_budgets(self)?);
        Ok(())
    }
    fn remove((namespace, name): &Key, view: &mut View, _: &mut Changes) {
        view.remove_quota(namespace, name);
    }
}

impl Cached for Namespace {
    const KIND: CacheKind = CacheKind::Namespaces;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        view.set_vgpu_entitled(&self.name_any(), convert::vgpu_entitled(self));
        Ok(())
    }
    fn remove((_, name): &Key, view: &mut View, _: &mut Changes) {
        view.set_vgpu_entitled(name, false);
    }
}

/// Only the settings ConfigMap is watched (by name, in the controller's namespace).
impl Cached for ConfigMap {
    const KIND: CacheKind = CacheKind::Settings;
    fn upsert(&self, view: &mut View, _: &mut Changes) -> Result<(), ConvertError> {
        view.settings = convert::settings_from_kube(self);
        Ok(())
    }
    fn remove(_: &Key, view: &mut View, _: &mut Changes) {
        view.settings = Settings::default();
    }
}

/// Folds one kind's watch into the view for as long as the task runs; watch errors are retried with kube-runtime's
/// default backoff.
async fn watch_kind<K: Cached>(api: Api<K>, config: watcher::Config, caches: Arc<Caches>) {
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    // The keys this watch has put into the view: what a relist may have to remove.
    let mut known: BTreeSet<Key> = BTreeSet::new();
    let mut listing: Option<Vec<K>> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing = Some(Vec::new()),
            Ok(Event::InitApply(object)) => listing.get_or_insert_with(Vec::new).push(object),
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let keys: BTreeSet<Key> = listed.iter().map(key_of).collect();
                caches.apply(|view, changes| {
                    let held: BTreeSet<Key> = known.iter().cloned().chain(K::view_keys(view)).collect();
                    for gone in held.difference(&keys) {
                        K::remove(gone, view, changes);
                    }
                    for object in &listed {
                        upsert_logged(object, view, changes);
                    }
                });
                known = keys;
                caches.mark_synced(K::KIND);
            }
            Ok(Event::Apply(object)) => {
                known.insert(key_of(&object));
                caches.apply(|view, changes| upsert_logged(&object, view, changes));
            }
            Ok(Event::Delete(object)) => {
                let key = key_of(&object);
                known.remove(&key);
                caches.apply(|view, changes| K::remove(&key, view, changes));
            }
            Err(error) => tracing::warn!(cache = K::KIND.name(), %error, "watch failed; retrying"),
        }
    }
}

fn upsert_logged<K: Cached>(object: &K, view: &mut View, changes: &mut Changes) {
    if let Err(error) = object.upsert(view, changes) {
        let (namespace, name) = key_of(object);
        tracing::warn!(cache = K::KIND.name(), %namespace, %name, %error, "cannot read the object; keeping its last readable version");
    }
}
