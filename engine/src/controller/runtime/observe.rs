//! What a watch event does to the controller's cache, and whether it wakes the work queue: the event filter.
//!
//! A change carries the object as written (a snapshot), in the engine's terms; the twin's watch and the adapter's
//! kube-runtime watchers both hand their events over as [`Change`]s. An object older than the cached copy (a watch
//! event of the controller's own write, which it wrote through to its cache at once) changes nothing. What a change
//! touched decides what the next pass visits ([`Touched`]); changes no decision reads (a pod bound or running where
//! it was placed, a usage record, a VMI on its way to Running) go into the cache and wake nothing, as
//! controller-runtime's event filters (predicates) would have them.

use std::collections::BTreeMap;

use crate::model::{Claim, Class, Name, Node, Pod, PodPhase, Settings, Usage, View, Vmi, holds_placement_gate};

use super::super::metrics::{GateExit, gate_exit};
use super::super::{follow_to, vmi_change_matters};

/// The kinds of object the controller caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Class,
    Claim,
    Usage,
    Pod,
    Vmi,
    Node,
    Namespace,
    Quota,
    Settings,
}

impl Kind {
    /// The kind as objects name it (`GPUClaim`, `Pod`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Class => "GPUClass",
            Kind::Claim => "GPUClaim",
            Kind::Usage => "GPUUsage",
            Kind::Pod => "Pod",
            Kind::Vmi => "VirtualMachineInstance",
            Kind::Node => "Node",
            Kind::Namespace => "Namespace",
            Kind::Quota => "ResourceQuota",
            Kind::Settings => "ConfigMap",
        }
    }

    /// The resource as the API server names it in messages (`pods`, `gpuclaims.gpu.cozystack.io`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Class => "gpuclasses.gpu.cozystack.io",
            Kind::Claim => "gpuclaims.gpu.cozystack.io",
            Kind::Usage => "gpuusages.gpu.cozystack.io",
            Kind::Pod => "pods",
            Kind::Vmi => "virtualmachineinstances.kubevirt.io",
            Kind::Node => "nodes",
            Kind::Namespace => "namespaces",
            Kind::Quota => "resourcequotas",
            Kind::Settings => "configmaps",
        }
    }
}

/// An object as a watch event carries it.
// Unboxed on purpose: nearly every change is an upsert, and a box would cost one allocation more per write.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    Class(Class),
    Claim(Claim),
    Usage(Usage),
    Pod(Pod),
    Vmi(Vmi),
    Node(Node),
    Namespace(Namespace),
    Quota(Quota),
    Settings(Settings),
}

/// A namespace as the controller reads it: whether the platform's label entitles it to vGPU classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub name: Name,
    pub vgpu_entitled: bool,
    pub resource_version: Name,
}

/// A ResourceQuota as the controller reads it: its GPU budgets (class → units).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    pub namespace: Name,
    pub name: Name,
    pub budgets: BTreeMap<String, u64>,
}

/// One watch event.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// ADDED or MODIFIED.
    Upsert(Object),
    /// DELETED, at `revision` (empty: gone whatever the cache holds — a relist that no longer shows it, a live read
    /// answered 404).
    Delete { kind: Kind, namespace: Name, name: Name, revision: Name },
}

/// Which object a change is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: Name,
    pub name: Name,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: impl Into<Name>, name: impl Into<Name>) -> Self {
        ObjectKey { kind, namespace: namespace.into(), name: name.into() }
    }
}

impl std::fmt::Display for ObjectKey {
    /// As the event log and the API server name objects: `GPUClaim ns/name`, `GPUClass name`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind.name())?;
        f.write_str(" ")?;
        if !self.namespace.is_empty() {
            f.write_str(&self.namespace)?;
            f.write_str("/")?;
        }
        f.write_str(&self.name)
    }
}

impl Change {
    /// The object the change is about.
    pub fn key(&self) -> ObjectKey {
        let (kind, namespace, name) = match self {
            Change::Upsert(Object::Class(o)) => (Kind::Class, Name::default(), Name::from(o.name.as_str())),
            Change::Upsert(Object::Claim(o)) => (Kind::Claim, o.namespace.clone(), o.name.clone()),
            Change::Upsert(Object::Usage(o)) => (Kind::Usage, o.namespace.clone(), o.name.clone()),
            Change::Upsert(Object::Pod(o)) => (Kind::Pod, o.namespace.clone(), o.name.clone()),
            Change::Upsert(Object::Vmi(o)) => (Kind::Vmi, o.namespace.clone(), o.name.clone()),
            Change::Upsert(Object::Node(o)) => (Kind::Node, Name::default(), Name::from(o.name.as_str())),
            Change::Upsert(Object::Namespace(o)) => (Kind::Namespace, Name::default(), o.name.clone()),
            Change::Upsert(Object::Quota(o)) => (Kind::Quota, o.namespace.clone(), o.name.clone()),
            Change::Upsert(Object::Settings(_)) => (Kind::Settings, Name::default(), Name::default()),
            Change::Delete { kind, namespace, name, .. } => (*kind, namespace.clone(), name.clone()),
        };
        ObjectKey { kind, namespace, name }
    }

    /// The revision the change was written at (0 where the object carries none: quotas, settings).
    pub fn revision(&self) -> u64 {
        let version = match self {
            Change::Upsert(Object::Class(o)) => &o.resource_version,
            Change::Upsert(Object::Claim(o)) => o.resource_version.as_str(),
            Change::Upsert(Object::Usage(o)) => o.resource_version.as_str(),
            Change::Upsert(Object::Pod(o)) => o.resource_version.as_str(),
            Change::Upsert(Object::Vmi(o)) => o.resource_version.as_str(),
            Change::Upsert(Object::Node(o)) => &o.resource_version,
            Change::Upsert(Object::Namespace(o)) => o.resource_version.as_str(),
            Change::Upsert(Object::Quota(_) | Object::Settings(_)) => "",
            Change::Delete { revision, .. } => revision.as_str(),
        };
        revision(version)
    }
}

/// A resourceVersion as an etcd revision (0 when it is not one).
pub fn revision(resource_version: &str) -> u64 {
    resource_version.parse().unwrap_or(0)
}

/// Whether an object at `incoming` is newer than the cached copy at `cached` (none cached: it is).
/// resourceVersions are opaque to clients, but the API server's are etcd revisions: where both read as integers,
/// only a higher one is taken, so a watch event older than what the cache holds (the controller's own write, or a
/// live read) never rolls it back; otherwise any difference is newer.
pub fn newer(cached: Option<&str>, incoming: &str) -> bool {
    let Some(cached) = cached else { return true };
    match (cached.parse::<u64>(), incoming.parse::<u64>()) {
        (Ok(cached), Ok(incoming)) => incoming > cached,
        _ => cached != incoming,
    }
}

/// What a change touched, for the work queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touched {
    Claim(Name, Name),
    Vmi(Name, Name),
    Node(String),
    /// A change every waiter may read: a pod at the placement gate, a pod that has just ended or went before it
    /// ended (units or CPU free), a class's spec, a budget, an entitlement, the settings. Needs no key: every pass
    /// serves the whole queue of waiters.
    Waiters,
    /// A change no decision reads (a pod bound or running, a usage record, a class's status): it goes into the
    /// cache for the next pass, and wakes nothing.
    Quiet,
}

/// Applies a change to a cache unless the cache already holds that revision or a newer one. Returns what it
/// touched, or `None` when it changed nothing.
pub fn observe(cache: &mut View, change: Change) -> Option<Touched> {
    observe_noting(cache, change, None)
}

/// [`observe`], noting on `exits` a pod the change takes off the placement gate (ungated or deleted), for the
/// gate-wait histogram (`controller::metrics`).
pub fn observe_noting(cache: &mut View, change: Change, exits: Option<&mut Vec<GateExit>>) -> Option<Touched> {
    match change {
        Change::Upsert(object) => upsert(cache, object, exits),
        Change::Delete { kind, namespace, name, revision } => delete(cache, kind, namespace, name, &revision, exits),
    }
}

fn upsert(cache: &mut View, object: Object, exits: Option<&mut Vec<GateExit>>) -> Option<Touched> {
    match object {
        Object::Claim(claim) => {
            let cached = cache.claim(&claim.namespace, &claim.name).map(|c| c.resource_version.as_str());
            if !newer(cached, &claim.resource_version) {
                return None;
            }
            let touched = Touched::Claim(claim.namespace.clone(), claim.name.clone());
            cache.upsert_claim(claim);
            Some(touched)
        }
        Object::Pod(pod) => {
            let cached = cache.pod(&pod.namespace, &pod.name);
            if !newer(cached.map(|p| p.resource_version.as_str()), &pod.resource_version) {
                return None;
            }
            let wakes = pod_change_wakes(cached.map(|cached| cached.phase), &pod);
            if let (Some(exits), Some(cached)) = (exits, cached) {
                exits.extend(gate_exit(cached, Some(&pod)));
            }
            // A pod whose devices counted beyond its claims moved wakes one too (`upsert_pod_counting` says so: a
            // raw-device launcher or a migration target bound, so the classes publish fewer free units).
            let moved = cache.upsert_pod_counting(pod);
            Some(if wakes || moved { Touched::Waiters } else { Touched::Quiet })
        }
        Object::Vmi(vmi) => {
            let cached = cache.vmi(&vmi.namespace, &vmi.name);
            if !newer(cached.map(|v| v.resource_version.as_str()), &vmi.resource_version) {
                return None;
            }
            let needed = vmi_key_needed(cache, cached, &vmi);
            let touched = if needed { Touched::Vmi(vmi.namespace.clone(), vmi.name.clone()) } else { Touched::Quiet };
            cache.upsert_vmi(vmi);
            Some(touched)
        }
        Object::Usage(usage) => {
            let cached = cache.usage(&usage.namespace, &usage.name).map(|u| u.resource_version.as_str());
            if !newer(cached, &usage.resource_version) {
                return None;
            }
            cache.upsert_usage(usage);
            Some(Touched::Quiet)
        }
        Object::Class(class) => {
            if !newer(cache.class(&class.name).map(|c| c.resource_version.as_str()), &class.resource_version) {
                return None;
            }
            let spec_changed = cache.class(&class.name).is_none_or(|cached| {
                (&cached.resource_name, &cached.node_selector, &cached.tolerations, cached.max_count)
                    != (&class.resource_name, &class.node_selector, &class.tolerations, class.max_count)
            });
            cache.upsert_class(class);
            Some(if spec_changed { Touched::Waiters } else { Touched::Quiet })
        }
        Object::Node(node) => {
            if !newer(cache.node(&node.name).map(|n| n.resource_version.as_str()), &node.resource_version) {
                return None;
            }
            let touched = Touched::Node(node.name.clone());
            cache.upsert_node(node);
            Some(touched)
        }
        // Namespaces, quotas and settings change rarely (the platform grants an entitlement, sets a budget): every
        // waiter may move. The view keeps no revision of them, so every event is taken.
        Object::Namespace(namespace) => {
            cache.set_vgpu_entitled(&namespace.name, namespace.vgpu_entitled);
            Some(Touched::Waiters)
        }
        Object::Quota(quota) => {
            cache.upsert_quota(&quota.namespace, &quota.name, quota.budgets);
            Some(Touched::Waiters)
        }
        Object::Settings(settings) => {
            cache.settings = settings;
            Some(Touched::Waiters)
        }
    }
}

fn delete(
    cache: &mut View,
    kind: Kind,
    namespace: Name,
    name: Name,
    at: &str,
    exits: Option<&mut Vec<GateExit>>,
) -> Option<Touched> {
    // A cached object newer than the deletion is a re-creation the cache already saw: keep it. A deletion without a
    // revision is final.
    let keep = |cached: &str| !at.is_empty() && revision(cached) > revision(at);
    match kind {
        Kind::Claim => {
            if cache.claim(&namespace, &name).is_none_or(|c| keep(&c.resource_version)) {
                return None;
            }
            cache.remove_claim(&namespace, &name);
            Some(Touched::Claim(namespace, name))
        }
        Kind::Pod => {
            let cached = cache.pod(&namespace, &name)?;
            if keep(&cached.resource_version) {
                return None;
            }
            let wakes = pod_deletion_wakes(cached);
            if let Some(exits) = exits {
                exits.extend(gate_exit(cached, None));
            }
            cache.remove_pod(&namespace, &name);
            Some(if wakes { Touched::Waiters } else { Touched::Quiet })
        }
        Kind::Vmi => {
            if cache.vmi(&namespace, &name).is_none_or(|v| keep(&v.resource_version)) {
                return None;
            }
            cache.remove_vmi(&namespace, &name);
            // A run no cached claim names has nothing for a pass to visit.
            Some(if run_key_visits(cache, &namespace, &name) { Touched::Vmi(namespace, name) } else { Touched::Quiet })
        }
        Kind::Usage => {
            if cache.usage(&namespace, &name).is_none_or(|u| keep(&u.resource_version)) {
                return None;
            }
            cache.remove_usage(&namespace, &name);
            Some(Touched::Quiet)
        }
        Kind::Class => {
            if cache.class(&name).is_none_or(|c| keep(&c.resource_version)) {
                return None;
            }
            cache.remove_class(&name);
            Some(Touched::Waiters)
        }
        Kind::Node => {
            if cache.node(&name).is_none_or(|n| keep(&n.resource_version)) {
                return None;
            }
            cache.remove_node(&name);
            Some(Touched::Node(name.to_string()))
        }
        Kind::Namespace => {
            cache.set_vgpu_entitled(&name, false);
            Some(Touched::Waiters)
        }
        Kind::Quota => {
            cache.remove_quota(&namespace, &name);
            Some(Touched::Waiters)
        }
        Kind::Settings => {
            cache.settings = Settings::default();
            Some(Touched::Waiters)
        }
    }
}

/// Whether a VMI update needs its run's key on the queue, `view` being the cache it arrives in: the update
/// [matters](vmi_change_matters) and a pass would find claims of the run ([`run_key_visits`]); and when only where
/// the run runs moved (the same run, not ended), a claim attached to it is bound elsewhere — following a completed
/// migration is all a pass does with that (a launcher going Running where its claims are changes nothing).
pub fn vmi_key_needed(view: &View, cached: Option<&Vmi>, incoming: &Vmi) -> bool {
    if !vmi_change_matters(cached, incoming) || !run_key_visits(view, &incoming.namespace, &incoming.name) {
        return false;
    }
    let same_run = cached.is_some_and(|c| c.uid == incoming.uid && c.phase.is_final() == incoming.phase.is_final());
    if !same_run {
        return true;
    }
    view.claims_of_run(&incoming.namespace, &incoming.name).any(|claim| {
        claim.attached_to.as_ref().is_some_and(|run| run.name == incoming.name) && follow_to(claim, incoming).is_some()
    })
}

/// Whether a pod update wakes a pass (pods need no key: every pass serves the whole queue): a pod at the placement
/// gate, or one that has just ended (what it took is free for the waiters); `cached` is the phase the cache held
/// (none: a new pod). A pod bound or running where it was placed wakes nothing.
pub fn pod_change_wakes(cached: Option<PodPhase>, incoming: &Pod) -> bool {
    let ended_before = cached.is_some_and(PodPhase::is_terminal);
    holds_placement_gate(incoming) || (incoming.phase.is_terminal() && !ended_before)
}

/// Whether a pod's deletion wakes a pass: not once it had ended — its end freed what it took, and the garbage
/// collector deletes it with its VMI.
pub fn pod_deletion_wakes(cached: &Pod) -> bool {
    !cached.phase.is_terminal()
}

/// Whether a VMI's key on the queue would bring anything into a pass over `view` (the cache with the change
/// applied): a pass reads a changed run only through its claims, so the key of a run with no claims there (a VMI
/// just created, or deleted after its claims went) visits nothing and need not wake a pass.
pub fn run_key_visits(view: &View, namespace: &str, vmi: &str) -> bool {
    view.claims_of_run(namespace, vmi).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::newer;

    #[test]
    fn a_cache_takes_only_what_is_newer_than_its_copy() {
        assert!(newer(None, "7"), "nothing cached");
        assert!(newer(Some("7"), "12"));
        assert!(!newer(Some("12"), "12"), "the same version");
        assert!(!newer(Some("12"), "7"), "an event older than the cached copy is not rolled back");
        assert!(newer(Some("a7"), "b2"), "opaque versions: any difference");
        assert!(!newer(Some("a7"), "a7"));
    }
}
