//! KubeVirt, in one place: the VM and VMI controllers and virt-handler (`vms`), the launcher pod as KubeVirt renders
//! it ([`launcher`]), the start-failure backoff and the work queues' rate limiter ([`start`]), the migration
//! controller and node evacuation (`migrations`) with the pending-target timeouts ([`target_timeout`]), and the
//! state they keep ([`KubeVirt`]). The timings are KubeVirt's real constants, each citing the source it was read
//! from.
//!
//! The handlers are `impl World` blocks, as every actor's are: a handler reads the API server's store, writes
//! through it as KubeVirt's service accounts, logs and schedules the next events, all of which the
//! [`World`](crate::world::World) owns, and it calls the scheduler's and the kubelets' handlers as the real
//! components react to each other's writes. KubeVirt's own state is one field of the world, [`KubeVirt`], whose
//! fields only this folder reads; the world sees the field, never inside it. So the state sits below the world (the
//! world imports this module) and the handlers above it (they import the world), and no file imports one that
//! imports it back. What tests and reports read of it (a VM's status, its start waits, the migrations) are
//! `World`'s methods, defined beside the handlers.

pub mod launcher;
mod migrations;
pub mod start;
pub mod target_timeout;
mod vms;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpuclaim_engine::model::{GpuMode, View, Vmi};
use gpuclaim_engine::references::GpuEntry;

use crate::kernel::Millis;
use crate::users::{self, User};
use gpuclaim_engine::controller::runtime::RateLimiter;
use launcher::LauncherParts;

/// What KubeVirt keeps between events.
#[derive(Debug)]
pub struct KubeVirt {
    /// Who its controllers act as (every write names its user).
    controller: User,
    handler: User,
    /// The VMs its VM controller keeps (hashed with a fixed seed: looked up at every VM event).
    vms: Vms,
    /// Its work queues' rate limiters (VM controller, VMI controller).
    vm_retries: RateLimiter<String>,
    vmi_retries: RateLimiter<String>,
    /// What every launcher this world renders shares.
    launcher_parts: LauncherParts,
    /// Migrations by uid, and the number handed out so far.
    migrations: BTreeMap<String, Migration>,
    migration_seq: u64,
    /// Nodes being drained.
    drains: BTreeMap<String, Drain>,
}

impl Default for KubeVirt {
    fn default() -> Self {
        KubeVirt {
            controller: users::kubevirt_controller(),
            handler: users::kubevirt_handler(),
            vms: Vms::default(),
            vm_retries: RateLimiter::default(),
            vmi_retries: RateLimiter::default(),
            launcher_parts: LauncherParts::default(),
            migrations: BTreeMap::new(),
            migration_seq: 0,
            drains: BTreeMap::new(),
        }
    }
}

/// A VirtualMachine as the tenant's chart renders it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmSpec {
    pub namespace: String,
    pub name: String,
    pub gpus: Vec<GpuEntry>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// How long the VM runs once Running, then stops (`None`: until the end).
    pub lifetime: Option<Millis>,
    /// Its disk is a DataVolume on local storage with `volumeBindingMode: WaitForFirstConsumer`.
    pub wffc_volume: bool,
}

/// A VM KubeVirt's VM controller keeps.
#[derive(Clone, Debug)]
struct VmState {
    spec: VmSpec,
    /// A held claim the tenant ordered for this VM and deletes when it is done.
    ordered_claim: Option<String>,
    /// The tenant stopped it (runStrategy Halted): once its VMI is gone, the tenant deletes it.
    halted: bool,
    /// `status.startFailure`: VMIs that ended without running, in a row.
    start_failure: Option<StartFailure>,
    /// The current VMI reached Running (its `phaseTransitionTimestamps` has a Running entry).
    vmi_ran: bool,
    /// The node its WaitForFirstConsumer volume was bound to (local storage: for good).
    volume_node: Option<String>,
    /// Since when it has been asked to run (created, or restarted after its VMI failed): a start wait's origin.
    start_requested: Millis,
    /// The wait of its last start (asked to run → Running).
    last_start_wait: Option<Millis>,
    /// GPU units its running VMI counts in the metrics.
    counted_units: Vec<(String, i64)>,
}

/// The VMs KubeVirt's VM controller keeps: namespace → name → state, in two levels so a lookup borrows its names
/// (looked up at every VM event), hashed with a fixed seed (the one listing, VMs waiting to start, only counts).
#[derive(Debug, Default)]
struct Vms(HashMap<String, HashMap<String, VmState, foldhash::fast::FixedState>, foldhash::fast::FixedState>);

impl Vms {
    fn get(&self, namespace: &str, name: &str) -> Option<&VmState> {
        self.0.get(namespace)?.get(name)
    }

    fn get_mut(&mut self, namespace: &str, name: &str) -> Option<&mut VmState> {
        self.0.get_mut(namespace)?.get_mut(name)
    }

    fn insert(&mut self, namespace: &str, name: &str, vm: VmState) {
        self.0.entry(namespace.to_owned()).or_default().insert(name.to_owned(), vm);
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<VmState> {
        let vms = self.0.get_mut(namespace)?;
        let vm = vms.remove(name);
        if vms.is_empty() {
            self.0.remove(namespace);
        }
        vm
    }

    /// Every VM with its namespace and name, in no order (the caller sorts what it shows).
    fn iter(&self) -> impl Iterator<Item = (&str, &str, &VmState)> {
        self.0
            .iter()
            .flat_map(|(namespace, vms)| vms.iter().map(move |(name, vm)| (namespace.as_str(), name.as_str(), vm)))
    }

    fn values(&self) -> impl Iterator<Item = &VmState> {
        self.0.values().flat_map(HashMap::values)
    }
}

/// KubeVirt's `vm.status.startFailure`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StartFailure {
    consecutive: u32,
    last_failed_vmi_uid: String,
    retry_after: Millis,
}

/// A migration's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationPhase {
    Pending,
    Scheduling,
    Scheduled,
    Running,
    Succeeded,
    Failed,
}

/// One VirtualMachineInstanceMigration.
#[derive(Clone, Debug)]
pub struct Migration {
    pub namespace: String,
    pub vmi: String,
    pub source_node: String,
    pub target_pod: Option<String>,
    pub target_created: Millis,
    pub phase: MigrationPhase,
    /// Created by a drain (evacuation) rather than by a user.
    pub evacuation: bool,
}

impl Migration {
    /// Counts against the limits: its target exists and the migration has not ended.
    pub fn active(&self) -> bool {
        matches!(self.phase, MigrationPhase::Scheduling | MigrationPhase::Scheduled | MigrationPhase::Running)
    }

    fn finished(&self) -> bool {
        matches!(self.phase, MigrationPhase::Succeeded | MigrationPhase::Failed)
    }
}

/// A node being drained: consecutive evacuation failures, and VMIs already reported as blocking.
#[derive(Clone, Debug, Default)]
struct Drain {
    failures: u32,
    blocked: BTreeSet<(String, String)>,
}

/// Whether KubeVirt can live-migrate the VMI: no GPUs, or exactly one vGPU of a class that allows it; a
/// passthrough GPU (or a device no class names) pins it to its host.
pub fn live_migratable(view: &View, vmi: &Vmi) -> bool {
    if vmi.gpus.is_empty() {
        return true;
    }
    let [gpu] = vmi.gpus.as_slice() else { return false };
    view.classes()
        .find(|class| class.resource_name == gpu.device_name)
        .is_some_and(|class| class.mode == GpuMode::Vgpu && class.live_migratable)
}
