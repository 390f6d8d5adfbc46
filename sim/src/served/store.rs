//! The served objects as clients read them: every object of every served resource, rendered, with the revision it
//! was last written at, and per resource a bounded history of changes that watches resume from.
//!
//! The twin's modelled objects are rendered into it from the compact store after every event and every write
//! ([`super`]'s sync); objects of kinds the twin does not model live here alone (it is their store). One revision
//! counter, the API server's, orders every change of every resource, so a list's revision and a watch's resume
//! point mean the same as an etcd-backed API server's.
//!
//! History is kept per resource and bounded ([`HISTORY_PER_RESOURCE_MAX`] by default): a watch that asks to resume
//! from a revision older than the oldest change kept is told it expired (`410 Gone`), and relists, as a client of a
//! real API server does after its watch cache moved on.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use gpuclaim_engine::model::Name;
use serde_json::Value;

/// The changes kept per resource for watches to resume from, as the API server's watch cache keeps a window.
pub const HISTORY_PER_RESOURCE_MAX: usize = 10_000;

/// A served resource: its API group and plural name (`("", "pods")`, `("gpu.cozystack.io", "gpuclaims")`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceId {
    pub group: &'static str,
    pub plural: &'static str,
}

/// What a change did to an object, as a watch event names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    /// As a watch event's `type`.
    pub fn name(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// An object as stored: the revision it was last written at, and its rendering.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub revision: u64,
    pub object: Arc<Value>,
}

/// One change of one object: its revision, what it did, the object after it (a deletion: the last state, carrying
/// the deletion's revision) and before it (none for an addition). A watch with a selector needs both: an object that
/// stops matching is a deletion to it, one that starts matching an addition.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub revision: u64,
    pub change: ChangeType,
    pub namespace: Name,
    pub name: Name,
    pub object: Arc<Value>,
    pub before: Option<Arc<Value>>,
}

/// A resume point older than the history kept: the oldest revision a watch may still resume from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    pub since: u64,
}

#[derive(Clone, Debug, Default)]
struct Collection {
    /// (namespace, name) → object: ordered as a list returns them.
    objects: BTreeMap<(Name, Name), Stored>,
    history: VecDeque<Change>,
    /// Every change after this revision is in `history`.
    since: u64,
    /// The newest revision any object of the resource was loaded or written at (what caches of it are keyed by).
    written: u64,
}

/// Every served object, and the history watches resume from.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The revision the snapshot began at: every change after it is recorded (until evicted).
    start: u64,
    head: u64,
    collections: BTreeMap<ResourceId, Collection>,
    history_max: usize,
}

impl Snapshot {
    /// An empty snapshot at revision `head`, keeping `history_max` changes per resource (at least one).
    pub fn new(head: u64, history_max: usize) -> Snapshot {
        Snapshot { start: head, head, collections: BTreeMap::new(), history_max: history_max.max(1) }
    }

    /// The newest revision: what a list reports, and where a watch from "now" starts.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Moves the head to `revision` (a write that changed no served object still takes a revision).
    pub fn advance(&mut self, revision: u64) {
        self.head = self.head.max(revision);
    }

    /// Stores `object` as it was at the snapshot's start (written at `revision`, at most the start), recording no
    /// change: a watch from before the start has nothing to resume.
    pub fn load(&mut self, resource: ResourceId, namespace: &str, name: &str, revision: u64, object: Value) {
        let collection = self.collection(resource);
        collection.written = collection.written.max(revision);
        let stored = Stored { revision, object: Arc::new(object) };
        collection.objects.insert((Name::from(namespace), Name::from(name)), stored);
    }

    /// Stores `object` as written at `revision`, recording an addition or a modification. A revision not newer than
    /// the object's stored one changes nothing (the change was already recorded).
    pub fn upsert(&mut self, resource: ResourceId, namespace: &str, name: &str, revision: u64, object: Value) {
        let collection = self.collection(resource);
        let key = (Name::from(namespace), Name::from(name));
        let before = collection.objects.get(&key).map(|stored| (stored.revision, Arc::clone(&stored.object)));
        if before.as_ref().is_some_and(|(stored, _)| *stored >= revision) {
            return;
        }
        let object = Arc::new(object);
        collection.objects.insert(key.clone(), Stored { revision, object: Arc::clone(&object) });
        let change = if before.is_some() { ChangeType::Modified } else { ChangeType::Added };
        let (namespace, name) = key;
        let before = before.map(|(_, object)| object);
        self.record(resource, Change { revision, change, namespace, name, object, before });
    }

    /// Removes the object at `revision`, recording its deletion with its last state (its `resourceVersion` the
    /// deletion's, as the API server sends it). Returns that state, or `None` when it was not stored.
    pub fn remove(&mut self, resource: ResourceId, namespace: &str, name: &str, revision: u64) -> Option<Arc<Value>> {
        let collection = self.collection(resource);
        let stored = collection.objects.remove(&(Name::from(namespace), Name::from(name)))?;
        let mut last = (*stored.object).clone();
        if let Some(metadata) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("resourceVersion".into(), revision.to_string().into());
        }
        let object = Arc::new(last);
        let change = Change {
            revision,
            change: ChangeType::Deleted,
            namespace: namespace.into(),
            name: name.into(),
            object: Arc::clone(&object),
            before: Some(stored.object),
        };
        self.record(resource, change);
        Some(object)
    }

    fn collection(&mut self, resource: ResourceId) -> &mut Collection {
        let start = self.start;
        self.collections.entry(resource).or_insert_with(|| Collection { since: start, ..Collection::default() })
    }

    fn record(&mut self, resource: ResourceId, change: Change) {
        self.head = self.head.max(change.revision);
        let history_max = self.history_max;
        let collection = self.collections.get_mut(&resource).expect("made by the caller");
        collection.written = collection.written.max(change.revision);
        debug_assert!(collection.history.back().is_none_or(|last| last.revision < change.revision));
        collection.history.push_back(change);
        while collection.history.len() > history_max {
            let evicted = collection.history.pop_front().expect("longer than the bound");
            collection.since = evicted.revision;
        }
    }

    /// The object stored under `namespace`/`name` (`""` for a cluster-scoped one).
    pub fn get(&self, resource: ResourceId, namespace: &str, name: &str) -> Option<&Stored> {
        let collection = self.collections.get(&resource)?;
        collection.objects.get(&(Name::from(namespace), Name::from(name)))
    }

    /// The objects of `resource`, in (namespace, name) order, from `namespace` only when given, starting after
    /// `after` (a list's continue point) when given.
    pub fn objects<'a>(
        &'a self,
        resource: ResourceId,
        namespace: Option<&'a str>,
        after: Option<&(Name, Name)>,
    ) -> impl Iterator<Item = (&'a (Name, Name), &'a Stored)> + 'a {
        use std::ops::Bound;
        let start = match after {
            Some(key) => Bound::Excluded(key.clone()),
            None => match namespace {
                Some(namespace) => Bound::Included((Name::from(namespace), Name::default())),
                None => Bound::Unbounded,
            },
        };
        self.collections
            .get(&resource)
            .into_iter()
            .flat_map(move |collection| collection.objects.range((start.clone(), Bound::Unbounded)))
            .take_while(move |((ns, _), _)| namespace.is_none_or(|namespace| ns.as_str() == namespace))
    }

    /// The changes of `resource` after revision `after`, in revision order, or [`Expired`] when some of them are no
    /// longer kept.
    pub fn changes_after(&self, resource: ResourceId, after: u64) -> Result<impl Iterator<Item = &Change>, Expired> {
        let collection = self.collections.get(&resource);
        let since = collection.map_or(self.start, |collection| collection.since);
        if after < since {
            return Err(Expired { since });
        }
        let history = collection.map(|collection| &collection.history);
        let first = history.map_or(0, |history| history.partition_point(|change| change.revision <= after));
        Ok(history.into_iter().flat_map(move |history| history.range(first..)))
    }

    /// The newest revision an object of `resource` was loaded, written or removed at (0 for a resource never
    /// stored): two equal answers mean its objects did not change in between, so a cache of them is still good.
    pub fn written(&self, resource: ResourceId) -> u64 {
        self.collections.get(&resource).map_or(0, |collection| collection.written)
    }

    /// The oldest revision a watch of `resource` may resume from.
    pub fn since(&self, resource: ResourceId) -> u64 {
        self.collections.get(&resource).map_or(self.start, |collection| collection.since)
    }
}
