//! The watch stream the GPU controller's cache is fed from: every change of a watched kind, in revision order,
//! delivered a lag after it was written. A change carries the object as written (a snapshot), so a cache that
//! lags sees every intermediate state, as a real watch delivers them.

use std::collections::VecDeque;

use gpuclaim_engine::controller::{pod_change_wakes, pod_deletion_wakes, run_key_visits, vmi_key_needed};
use gpuclaim_engine::model::{Claim, Class, Name, Node, Pod, Usage, View, Vmi};

use super::Kind;
use crate::kernel::Millis;

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
}

/// A namespace as the GPU controller reads it: whether the platform's label entitles it to vGPU classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub name: Name,
    pub vgpu_entitled: bool,
    pub resource_version: Name,
}

/// One watch event.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// ADDED or MODIFIED.
    Upsert(Object),
    /// DELETED, at `revision`.
    Delete { kind: Kind, namespace: Name, name: Name, revision: Name },
}

/// The stream of one watcher: changes queued with the time they are due.
#[derive(Debug, Default)]
pub struct Watch {
    /// How long a change takes to reach the watcher.
    pub lag: Millis,
    now: Millis,
    queue: VecDeque<(Millis, Change)>,
    delivery_scheduled: bool,
    /// A lag drawn per change, uniform in [lag, max], from its own stream (a fault a scenario switches on).
    jitter: Option<(Millis, rand_chacha::ChaCha8Rng)>,
    /// The keys of every change written since the journal was last taken, when someone reads it (the run's
    /// invariant checks look at what an event touched, not at the whole store).
    journal: Option<Vec<ObjectKey>>,
}

/// Which object a change is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: Name,
    pub name: Name,
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
            Change::Delete { kind, namespace, name, .. } => (*kind, namespace.clone(), name.clone()),
        };
        ObjectKey { kind, namespace, name }
    }
}

impl Watch {
    /// Sets the clock new changes are stamped with.
    pub fn tick(&mut self, now: Millis) {
        self.now = now;
    }

    /// Draws each change's lag uniformly from [lag, max] with `rng`.
    pub fn jitter(&mut self, max: Millis, rng: rand_chacha::ChaCha8Rng) {
        self.jitter = Some((max.max(self.lag), rng));
    }

    /// Starts keeping the journal of changed keys.
    pub fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The keys changed since the last call (empty unless the journal is kept). `spent` (emptied) takes the
    /// journal's place, so the journal keeps a buffer grown to an event's size instead of growing a new one.
    pub fn take_journal(&mut self, mut spent: Vec<ObjectKey>) -> Vec<ObjectKey> {
        spent.clear();
        match &mut self.journal {
            Some(journal) => std::mem::replace(journal, spent),
            None => Vec::new(),
        }
    }

    /// Notes a change written outside the stream (a watcher's own write) in the journal.
    pub(super) fn note(&mut self, change: &Change) {
        if let Some(journal) = &mut self.journal {
            journal.push(change.key());
        }
    }

    pub(super) fn push(&mut self, change: Change) {
        self.note(&change);
        let lag = match &mut self.jitter {
            Some((max, rng)) => Millis(rand::RngExt::random_range(rng, self.lag.0..=max.0)),
            None => self.lag,
        };
        // Delivery stays in revision order, whatever the lag: a watch is one ordered stream.
        let due = self.queue.back().map_or(self.now + lag, |(last, _)| (*last).max(self.now + lag));
        self.queue.push_back((due, change));
    }

    /// When the next delivery must run, if one is not scheduled yet (the caller schedules it).
    pub fn delivery_due(&mut self) -> Option<Millis> {
        if self.delivery_scheduled {
            return None;
        }
        let (due, _) = self.queue.front()?;
        self.delivery_scheduled = true;
        Some(*due)
    }

    /// Takes every change due by `now` (moved out one by one as the caller takes them: a change carries a whole
    /// object, and collecting them first copied each once more); the next delivery is the caller's to schedule again.
    pub fn deliver(&mut self, now: Millis) -> impl Iterator<Item = Change> + '_ {
        self.delivery_scheduled = false;
        let due = self.queue.iter().take_while(|(at, _)| *at <= now).count();
        self.queue.drain(..due).map(|(_, change)| change)
    }
}

/// The revision a change was written at.
pub fn revision_of(change: &Change) -> u64 {
    match change {
        Change::Upsert(Object::Class(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Claim(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Usage(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Pod(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Vmi(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Node(o)) => revision(&o.resource_version),
        Change::Upsert(Object::Namespace(o)) => revision(&o.resource_version),
        Change::Delete { revision: at, .. } => revision(at),
    }
}

fn revision(resource_version: &str) -> u64 {
    resource_version.parse().unwrap_or(0)
}

/// What a change touched, for the watcher's work queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Touched {
    Claim(Name, Name),
    Vmi(Name, Name),
    Node(String),
    /// A pod change the reconciler acts on: a pod at the placement gate, a pod that has just ended or went before
    /// it ended (units or CPU free for the waiters). Pods need no key: every pass serves the whole queue.
    Pod,
    /// A change the reconciler does not act on (a pod bound or running, a usage record, a class's status): it goes
    /// into the cache for the next pass, and wakes nothing, as a controller's event filter would have it.
    Quiet,
}

/// Applies a change to a cache unless the cache already holds that revision or a newer one (its own write, written
/// through). Returns what it touched, or `None` when it changed nothing.
pub fn observe(cache: &mut View, change: Change) -> Option<Touched> {
    match change {
        Change::Upsert(object) => upsert(cache, object),
        Change::Delete { kind, namespace, name, revision: at } => delete(cache, kind, namespace, name, revision(&at)),
    }
}

/// Whether an object at `incoming` is newer than the cached copy (none cached: it is).
pub fn newer(cached: Option<&str>, incoming: &str) -> bool {
    cached.is_none_or(|cached| revision(cached) < revision(incoming))
}

fn upsert(cache: &mut View, object: Object) -> Option<Touched> {
    match object {
        Object::Claim(claim) => {
            if !newer(
                cache.claim(&claim.namespace, &claim.name).map(|c| c.resource_version.as_str()),
                &claim.resource_version,
            ) {
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
            // The engine's event filter for pods: at the gate, just ended, or its counted devices moved.
            let wakes = pod_change_wakes(cached.map(|cached| cached.phase), &pod);
            let moved = cache.upsert_pod_counting(pod);
            Some(if wakes || moved { Touched::Pod } else { Touched::Quiet })
        }
        Object::Vmi(vmi) => {
            let cached = cache.vmi(&vmi.namespace, &vmi.name);
            if !newer(cached.map(|v| v.resource_version.as_str()), &vmi.resource_version) {
                return None;
            }
            // Phases on the way to Running, a run with no claims, a launcher running where its claims are: no
            // decision moves (the engine's `vmi_key_needed`), so the VMI goes into the cache without a key.
            let needed = vmi_key_needed(cache, cached, &vmi);
            let touched = if needed { Touched::Vmi(vmi.namespace.clone(), vmi.name.clone()) } else { Touched::Quiet };
            cache.upsert_vmi(vmi);
            Some(touched)
        }
        Object::Usage(usage) => {
            if !newer(
                cache.usage(&usage.namespace, &usage.name).map(|u| u.resource_version.as_str()),
                &usage.resource_version,
            ) {
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
            Some(if spec_changed { Touched::Pod } else { Touched::Quiet })
        }
        Object::Node(node) => {
            if !newer(cache.node(&node.name).map(|n| n.resource_version.as_str()), &node.resource_version) {
                return None;
            }
            let touched = Touched::Node(node.name.clone());
            cache.upsert_node(node);
            Some(touched)
        }
        // Namespaces change rarely (the platform grants an entitlement): every waiter may move.
        Object::Namespace(namespace) => {
            cache.set_vgpu_entitled(&namespace.name, namespace.vgpu_entitled);
            Some(Touched::Pod)
        }
    }
}

fn delete(cache: &mut View, kind: Kind, namespace: Name, name: Name, at: u64) -> Option<Touched> {
    // A cached object newer than the deletion is a re-creation the cache already saw: keep it.
    let keep = |cached: &str| revision(cached) > at;
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
            cache.remove_pod(&namespace, &name);
            Some(if wakes { Touched::Pod } else { Touched::Quiet })
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
            Some(Touched::Pod)
        }
        Kind::Node => {
            if cache.node(&name).is_none_or(|n| keep(&n.resource_version)) {
                return None;
            }
            cache.remove_node(&name);
            Some(Touched::Node(name.to_string()))
        }
        // The twin's namespaces are the tenants'; none is deleted during a run.
        Kind::Namespace => None,
    }
}
