//! The caches: one kube-runtime watcher per kind, folded into the engine's [`View`] (the store both the webhooks
//! and the reconciler read) through the controller runtime's work queue, which keeps the keys each event touched
//! for the reconciler's next pass and filters out what no pass reads (`engine::controller::runtime`).
//!
//! A (re)list is buffered and applied at once when it completes, so the view never shows half a list; objects a
//! relist no longer holds are removed then. An object the engine cannot read is logged and its previous version kept
//! (dropping a quota that became unreadable would lift a budget). Each kind reports when its first list is in, which
//! is what readiness and the reconciler's first pass wait for.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::controller::runtime::{self, Change, Kind, Object, Quota, Watches, WorkQueue};
use gpuclaim_engine::convert::{self, ConvertError};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::View;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ResourceQuota};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};

use crate::shared::{SharedView, ViewPoisoned};

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

/// The view, the work queue of what changed since the reconciler's last pass, and which kinds have synced.
pub struct Caches {
    pub view: SharedView,
    /// Taken after the view's lock, never before. A lock that does not poison: the keys are hints for the next pass
    /// (a full pass needs none), and a view a change panicked in is poisoned on its own.
    pub queue: parking_lot::Mutex<WorkQueue>,
    wake: Notify,
    synced: watch::Sender<BTreeSet<CacheKind>>,
}

impl Caches {
    pub fn new(view: SharedView) -> Arc<Caches> {
        Arc::new(Caches {
            view,
            // One kube-runtime watcher per kind.
            queue: parking_lot::Mutex::new(WorkQueue::new(Watches::PerKind)),
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

    /// Waits for the next change (one that happened since the last wait counts).
    pub async fn changed(&self) {
        self.wake.notified().await;
    }

    /// Applies watch events to the view through the work queue; wakes the reconciler when one of them needs a pass.
    pub fn apply(&self, changes: impl IntoIterator<Item = Change>) -> Result<(), ViewPoisoned> {
        let woke = {
            let mut view = self.view.write()?;
            let mut queue = self.queue.lock();
            changes.into_iter().fold(false, |woke, change| queue.observe(&mut view, change) | woke)
        };
        if woke {
            self.wake.notify_one();
        }
        Ok(())
    }

    fn mark_synced(&self, kind: CacheKind) {
        let newly = self.synced.send_if_modified(|synced| synced.insert(kind));
        if newly {
            tracing::info!(cache = kind.name(), "cache synced");
        }
    }

    /// One watcher per kind, each named (`the gpuclaims cache's watch`): the caller runs them as essential tasks
    /// (health.rs), until aborted at shutdown.
    pub fn watches(
        self: &Arc<Self>,
        client: &kube::Client,
        controller_namespace: &str,
    ) -> Vec<(String, BoxFuture<'static, ()>)> {
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
        let watches: [(CacheKind, BoxFuture<'static, ()>); 10] = [
            (CacheKind::Classes, watch_kind(Api::<GPUClass>::all(client.clone()), all(), self.clone()).boxed()),
            (CacheKind::Claims, watch_kind(Api::<GPUClaim>::all(client.clone()), all(), self.clone()).boxed()),
            (CacheKind::Usages, watch_kind(Api::<GPUUsage>::all(client.clone()), all(), self.clone()).boxed()),
            (CacheKind::Pods, watch_kind(Api::<Pod>::all(client.clone()), claims_pods, self.clone()).boxed()),
            (CacheKind::OtherPods, watch_kind(Api::<OtherPod>::all(client.clone()), other_pods, self.clone()).boxed()),
            (
                CacheKind::Vmis,
                watch_kind(Api::<DynamicObject>::all_with(client.clone(), &vmi), all(), self.clone()).boxed(),
            ),
            (CacheKind::Nodes, watch_kind(Api::<Node>::all(client.clone()), all(), self.clone()).boxed()),
            (CacheKind::Quotas, watch_kind(Api::<ResourceQuota>::all(client.clone()), all(), self.clone()).boxed()),
            (CacheKind::Namespaces, watch_kind(Api::<Namespace>::all(client.clone()), all(), self.clone()).boxed()),
            (
                CacheKind::Settings,
                watch_kind(Api::<ConfigMap>::namespaced(client.clone(), controller_namespace), settings, self.clone())
                    .boxed(),
            ),
        ];
        watches.into_iter().map(|(kind, watch)| (format!("the {} cache's watch", kind.name()), watch)).collect()
    }
}

/// (namespace, name); cluster-scoped objects have an empty namespace.
pub type Key = (String, String);

/// How one kind goes into the view: [`Cached::read`] turns the object into the engine's terms (parsing what the API
/// server holds, which may be anything) before the view's lock is taken; the work queue then folds it in under the
/// lock (the engine's bookkeeping only; see shared.rs for why).
pub trait Cached: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    const KIND: CacheKind;
    /// The object in the engine's terms; `None` when this watch leaves it to another.
    fn read(&self) -> Result<Option<Object>, ConvertError>;
    /// The deletion of the object at `key` as a watch event (`revision`: the deleted object's resourceVersion,
    /// empty: gone whatever the view holds); `None` when the object is another watch's.
    fn deletion((namespace, name): &Key, revision: &str, _view: &View) -> Option<Change> {
        Some(Change::Delete {
            kind: Self::KIND.kind(),
            namespace: namespace.into(),
            name: name.into(),
            revision: revision.into(),
        })
    }
    /// The keys of this kind the view holds, when it can list them: the controller's own writes also go into the
    /// view, and a relist must be able to remove those too.
    fn view_keys(_view: &View) -> Vec<Key> {
        Vec::new()
    }
}

pub fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

fn version_of<K: Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap_or_default()
}

impl CacheKind {
    /// The kind of object the engine caches from this watch.
    pub fn kind(self) -> Kind {
        match self {
            CacheKind::Classes => Kind::Class,
            CacheKind::Claims => Kind::Claim,
            CacheKind::Usages => Kind::Usage,
            CacheKind::Pods | CacheKind::OtherPods => Kind::Pod,
            CacheKind::Vmis => Kind::Vmi,
            CacheKind::Nodes => Kind::Node,
            CacheKind::Quotas => Kind::Quota,
            CacheKind::Namespaces => Kind::Namespace,
            CacheKind::Settings => Kind::Settings,
        }
    }
}

impl Cached for GPUClass {
    const KIND: CacheKind = CacheKind::Classes;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        Ok(Some(Object::Class(convert::class_from_kube(self))))
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.classes().map(|c| (String::new(), c.name.clone())).collect()
    }
}

impl Cached for GPUClaim {
    const KIND: CacheKind = CacheKind::Claims;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        Ok(Some(Object::Claim(convert::claim_from_kube(self, &self.namespace().unwrap_or_default()))))
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.claims().map(|c| (c.namespace.to_string(), c.name.to_string())).collect()
    }
}

impl Cached for GPUUsage {
    const KIND: CacheKind = CacheKind::Usages;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        Ok(Some(Object::Usage(convert::usage_from_kube(self, &self.namespace().unwrap_or_default()))))
    }
    fn view_keys(view: &View) -> Vec<Key> {
        view.usages().map(|u| (u.namespace.to_string(), u.name.to_string())).collect()
    }
}

impl Cached for Pod {
    const KIND: CacheKind = CacheKind::Pods;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        convert::pod_from_kube(self, &self.namespace().unwrap_or_default()).map(|pod| Some(Object::Pod(pod)))
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
    /// `None` for a claims pod: the other watch owns it.
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        if is_claims_pod(self.0.labels()) {
            return Ok(None);
        }
        self.0.read()
    }
    fn deletion(key: &Key, revision: &str, view: &View) -> Option<Change> {
        let (namespace, name) = key;
        let others = view.pod(namespace, name).is_some_and(|pod| !is_claims_pod(&pod.labels));
        others.then(|| Change::Delete {
            kind: Kind::Pod,
            namespace: namespace.into(),
            name: name.into(),
            revision: revision.into(),
        })
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
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        let object = serde_json::to_value(self).expect("a DynamicObject always serializes");
        convert::vmi_from_json(&object, &self.namespace().unwrap_or_default()).map(|vmi| Some(Object::Vmi(vmi)))
    }
}

impl Cached for Node {
    const KIND: CacheKind = CacheKind::Nodes;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        convert::node_from_kube(self).map(|node| Some(Object::Node(node)))
    }
}

impl Cached for ResourceQuota {
    const KIND: CacheKind = CacheKind::Quotas;
    /// The quota's GPU budgets: class → units.
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        let (namespace, name) = key_of(self);
        let budgets = convert::quota_budgets(self)?;
        Ok(Some(Object::Quota(Quota { namespace: namespace.into(), name: name.into(), budgets })))
    }
}

impl Cached for Namespace {
    const KIND: CacheKind = CacheKind::Namespaces;
    /// Whether the namespace is entitled to vGPUs.
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        Ok(Some(Object::Namespace(runtime::Namespace {
            name: self.name_any().into(),
            vgpu_entitled: convert::vgpu_entitled(self),
            resource_version: version_of(self).into(),
        })))
    }
}

/// Only the settings ConfigMap is watched (by name, in the controller's namespace).
impl Cached for ConfigMap {
    const KIND: CacheKind = CacheKind::Settings;
    fn read(&self) -> Result<Option<Object>, ConvertError> {
        Ok(Some(Object::Settings(convert::settings_from_kube(self))))
    }
}

/// Folds one kind's watch into the view for as long as the task runs; watch errors are retried with kube-runtime's
/// default backoff. Returns only if the view is poisoned: nothing can be folded into it any more.
async fn watch_kind<K: Cached>(api: Api<K>, config: watcher::Config, caches: Arc<Caches>) {
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    // The keys this watch has put into the view: what a relist may have to remove.
    let mut known: BTreeSet<Key> = BTreeSet::new();
    let mut listing: Option<Vec<K>> = None;
    while let Some(event) = stream.next().await {
        let applied = match event {
            Ok(Event::Init) => {
                listing = Some(Vec::new());
                Ok(())
            }
            Ok(Event::InitApply(object)) => {
                listing.get_or_insert_with(Vec::new).push(object);
                Ok(())
            }
            Ok(Event::InitDone) => {
                let listed: Vec<(Key, Option<Object>)> =
                    listing.take().unwrap_or_default().iter().map(|o| (key_of(o), read_logged(o))).collect();
                let keys: BTreeSet<Key> = listed.iter().map(|(key, _)| key.clone()).collect();
                let applied = match caches.view.read() {
                    Ok(view) => {
                        // Gone since the last list: removed whatever the view holds (a relist has no revisions).
                        let held: BTreeSet<Key> = known.iter().cloned().chain(K::view_keys(&view)).collect();
                        let gone: Vec<Change> =
                            held.difference(&keys).filter_map(|key| K::deletion(key, "", &view)).collect();
                        drop(view);
                        let upserts = listed.into_iter().filter_map(|(_, object)| object.map(Change::Upsert));
                        caches.apply(gone.into_iter().chain(upserts))
                    }
                    Err(poisoned) => Err(poisoned),
                };
                known = keys;
                caches.mark_synced(K::KIND);
                applied
            }
            Ok(Event::Apply(object)) => {
                known.insert(key_of(&object));
                match read_logged(&object) {
                    Some(object) => caches.apply([Change::Upsert(object)]),
                    None => Ok(()),
                }
            }
            Ok(Event::Delete(object)) => {
                let key = key_of(&object);
                known.remove(&key);
                let deletion = caches.view.read().map(|view| K::deletion(&key, &version_of(&object), &view));
                match deletion {
                    Ok(deletion) => caches.apply(deletion),
                    Err(poisoned) => Err(poisoned),
                }
            }
            Err(error) => {
                tracing::warn!(cache = K::KIND.name(), %error, "watch failed; retrying");
                Ok(())
            }
        };
        if let Err(error) = applied {
            return tracing::error!(cache = K::KIND.name(), %error, "stopping the watch");
        }
    }
}

/// The object in the engine's terms, or `None` when it is another watch's or (logged) cannot be read: its last
/// readable version stays.
pub fn read_logged<K: Cached>(object: &K) -> Option<Object> {
    object
        .read()
        .inspect_err(|error| {
            let (namespace, name) = key_of(object);
            tracing::warn!(cache = K::KIND.name(), %namespace, %name, %error, "cannot read the object; keeping its last readable version");
        })
        .ok()
        .flatten()
}
