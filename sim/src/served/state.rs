//! What the world keeps of the served layer while it is served ([`crate::world::World::serve`]): the snapshot
//! readers share, and what it needs to render KubeVirt's VirtualMachines (the API server's store does not hold
//! them: [`super::vms`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, RwLock};

use gpuclaim_engine::model::Name;

use super::store::Snapshot;
use crate::apiserver::objects::Manifest;

/// What a VM's render reads of KubeVirt's state besides its manifest: its printable status, whether its VMI runs,
/// whether it has one.
pub type VmStatusKey = (&'static str, bool, bool);

#[derive(Debug)]
pub struct ServedApi {
    pub(crate) snapshot: Arc<RwLock<Snapshot>>,
    /// VMs to render again at the next sync, by (namespace, name).
    pub(crate) vms_noted: BTreeSet<(Name, Name)>,
    /// Each VM's manifest and metadata, by (namespace, name).
    pub(crate) vm_manifests: BTreeMap<(Name, Name), Manifest>,
    /// The events kept, oldest first, by (namespace, name).
    pub(crate) events_kept: VecDeque<(String, String)>,
    /// What each VM's last render read of KubeVirt's state.
    pub(crate) vm_status_seen: BTreeMap<(Name, Name), VmStatusKey>,
    /// Remote admission: the snapshot's head when its configuration was last read (`None`: never).
    pub(crate) admission_seen: Option<u64>,
    /// What that read could not apply (see [`crate::world::World::admission_problems`]).
    pub(crate) admission_problems: Vec<String>,
    /// The writes each sync read from the API server's journal, kept for the run's invariant checks when they read
    /// the journal too (`None`: nobody does; see [`crate::world::World::take_touched`]).
    pub(crate) touched: Option<Vec<crate::apiserver::watch::Journaled>>,
}

impl ServedApi {
    pub fn new(snapshot: Snapshot) -> ServedApi {
        ServedApi {
            snapshot: Arc::new(RwLock::new(snapshot)),
            vms_noted: BTreeSet::new(),
            vm_manifests: BTreeMap::new(),
            vm_status_seen: BTreeMap::new(),
            events_kept: VecDeque::new(),
            admission_seen: None,
            admission_problems: Vec::new(),
            touched: None,
        }
    }

    /// The snapshot, as readers share it.
    pub fn snapshot(&self) -> Arc<RwLock<Snapshot>> {
        Arc::clone(&self.snapshot)
    }
}
