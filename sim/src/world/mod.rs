//! One world, one loop: the API server, KubeVirt's controllers, the scheduler, the kubelets and the GPU controller,
//! driven by the kernel's events in virtual time. This file owns the loop, the events and what every actor uses (the
//! clock, the random streams, the log, the run's figures); each actor's handlers live in one place: the GPU
//! controller's Deployment, the nodes, the kubelets, the tenants, their workloads and the faults in this folder's
//! files, kube-scheduler and KubeVirt in folders of their own ([`crate::scheduler`], [`crate::kubevirt`]) that hold
//! their state too.
//!
//! Same-time events run in the order they were scheduled. Every transition is one event-log line.

mod external;
mod faults;
mod kubelet;
mod nodes;
mod observe;
mod tenants;
mod workloads;

use std::collections::BTreeMap;

use gpuclaim_engine::controller::metrics::{Gauges, Readings};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Name, Node, Time, View};
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_engine::variant::Variant;

use crate::apiserver::ApiServer;
use crate::gpu_controller::GpuController;
use crate::kernel::{Kernel, KernelError, Millis, RunError};
use crate::kubevirt::KubeVirt;
use crate::log::{EventLog, LogError, LogObject, Record};
use crate::rng::Streams;
use crate::scheduler::Scheduler;
use crate::users;

pub use crate::gpu_controller::deployment::{Deployment, DeploymentSpec, LEASE_DURATION, Replica, ReplicaState};
pub use external::HostAction;
pub use faults::{FaultKind, Faults};
pub use tenants::TenantWrite;
pub use workloads::Workload;

pub use crate::kubevirt::{Migration, MigrationPhase, VmSpec, live_migratable};

/// The twin's timing (virtual), with defaults read off real clusters.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Watch delivery to the GPU controller's cache.
    pub watch_lag: Millis,
    /// Launcher start on the kubelet: image pull, sandbox, virt-launcher up (uniform in this range).
    pub pod_start: (Millis, Millis),
    /// virt-handler: pod running → VMI Running.
    pub vmi_running_after: Millis,
    /// KubeVirt deletes a finished VMI this long after it ended.
    pub vmi_delete_after: Millis,
}

impl Default for Timing {
    fn default() -> Self {
        // Fixture 07 (a real VMI): Scheduling → Scheduled 11 s (pod ready), Scheduled → Running 2 s.
        Timing {
            watch_lag: Millis(100),
            pod_start: (Millis::seconds(5), Millis::seconds(15)),
            vmi_running_after: Millis::seconds(2),
            vmi_delete_after: Millis::seconds(1),
        }
    }
}

/// What happens, one event at a time.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A tenant creates (and starts) a VM.
    CreateVm(Box<VmSpec>),
    /// KubeVirt's VM controller syncs a VM: creates its VMI (again, after a refused create).
    SyncVm { namespace: Name, vm: Name },
    /// KubeVirt's VMI controller creates the VMI's launcher (again, after a refused create).
    CreateLauncher { namespace: Name, vmi: Name },
    /// Watch events reach the GPU controller's cache.
    WatchDeliver,
    /// The GPU controller's work queue runs.
    ControllerWake,
    /// The scheduler considers a pod.
    Schedule { namespace: Name, pod: Name },
    /// The scheduler moves pods unschedulable for too long back to its active queue.
    SchedulerFlush,
    /// The kubelet has started a pod.
    PodStarted { namespace: Name, pod: Name },
    /// virt-handler reports the VMI running.
    VmiRunning { namespace: Name, vmi: Name },
    /// The tenant stops the VM: the VMI shuts down, its launcher exits.
    StopVm { namespace: Name, vm: Name },
    /// KubeVirt deletes the finished VMI; the garbage collector takes its dependents.
    DeleteVmi { namespace: Name, vmi: Name },
    /// The next VM of a workload arrives.
    Arrival { workload: usize },
    /// A tenant tries a write.
    TenantWrite { namespace: Name, write: Box<TenantWrite> },
    /// The webhook Service's ready endpoints change (an outage at 0).
    SetWebhookReplicas(u32),
    /// Nodes join the cluster.
    AddNodes(Vec<Node>),
    /// A node is cordoned (`true`) or uncordoned.
    Cordon { node: String, cordoned: bool },
    /// Something deletes a VM's launcher pod (a controller, an operator).
    DeleteLauncher { namespace: String, vm: String },
    /// A node's kubelet stops posting status (the machine is lost, or cut off).
    NodeLost { node: String },
    /// The node lifecycle controller's grace period for a silent node ran out.
    NodeNotReady { node: String, since: Millis },
    /// The taint manager evicts the pods of a node unreachable for their toleration.
    EvictUnreachable { node: String, since: Millis },
    /// The kubelet of a lost node posts status again.
    NodeRecovered { node: String },
    /// A user asks to live-migrate a VMI.
    Migrate { namespace: String, vmi: String },
    /// The migration controller checks a target pod's pending timeouts.
    MigrationTimeout { uid: String },
    /// A migration's copy is done: the VMI switches to the target.
    MigrationHandoff { uid: String },
    /// `kubectl drain`: cordon and evacuate.
    Drain { node: String },
    /// The evacuation controller retries a drain's migrations.
    Evacuate { node: String },
    /// A GPU controller replica's process crashes (the kubelet restarts it).
    ControllerCrash { index: usize },
    /// A replica's container starts (after a crash).
    ReplicaStart { index: usize },
    /// A replica's new pod starts on another node (after an eviction).
    ReplicaMoved { index: usize, node: String },
    /// A replica's caches have synced: it serves webhooks.
    ReplicaSynced { index: usize },
    /// A standby replica's leader-election retry tick once the lease has expired.
    LeaseAcquire { index: usize },
    /// kubectl drain evicts the controller replicas on a node (retried while the budget refuses).
    EvictReplicas { node: String },
    /// A fault process ticks.
    Fault { kind: FaultKind },
    /// The device plugin reports units of a resource unhealthy.
    DeviceFailure { node: String, resource: String, units: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Log(#[from] LogError),
    /// An observer stopped the run (see [`World::run_observed`]).
    #[error("the run was stopped by its observer")]
    Stopped,
}

/// Counts a run reports besides its log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// VMIs that reached Running.
    pub vm_starts: u64,
    /// `<what>:<reason>` → how often: refused creates, refused controller writes, refused orders.
    pub refusals: BTreeMap<String, u64>,
    /// Tenant writes that landed, by write (see [`TenantWrite`]).
    pub tenant_writes: BTreeMap<String, u64>,
    /// Reconcile passes the GPU controller ran.
    pub controller_passes: u64,
    /// Passes taken again because confirming their pins showed the cache had missed a pod or a change on a pin's
    /// node.
    pub pins_rechecked: u64,
}

/// The whole twin.
pub struct World {
    seed: u64,
    faults: Faults,
    kernel: Kernel<Event>,
    pub(crate) streams: Streams,
    log: EventLog,
    pub(crate) timing: Timing,
    /// The API server and its store.
    pub api: ApiServer,
    /// The GPU controller's process, boxed so that it can be taken out while it runs with the world as its cluster
    /// (moving a pointer, not the process's 1.7 KB and an empty one in its place, at every wake).
    pub(crate) controller: Option<Box<GpuController>>,
    /// Whether references may be rendered (the `_cluster` switch).
    pub claims_enabled: bool,
    /// KubeVirt's state (its handlers are in [`crate::kubevirt`]).
    pub(crate) kubevirt: KubeVirt,
    /// The GPU controller's Deployment: replicas, the leader.
    pub(crate) deployment: Deployment,
    /// Nodes whose kubelet is silent, since when.
    silent_nodes: BTreeMap<String, Millis>,
    /// kube-scheduler's state (its handlers are in [`crate::scheduler`]).
    pub(crate) scheduler: Scheduler,
    /// The GPU controller's wakes scheduled and not yet run (one event per time).
    pub(crate) wakes: std::collections::BTreeSet<Millis>,
    pub(crate) stats: Stats,
    pub(crate) metrics: crate::metrics::Metrics,
    /// What the GPU controller processes that led before the current one measured (`controller::metrics`).
    pub(crate) retired_readings: Readings,
    workloads: Vec<Workload>,
    /// The log's hash once the log was taken.
    closed_hash: Option<String>,
    /// The Unix time virtual zero stands for (engine times are absolute).
    epoch_ms: i64,
    /// The served API's state (served mode only, [`crate::served`]).
    pub(crate) served: Option<Box<crate::served::state::ServedApi>>,
    /// The GPU controller runs outside the world ([`external`]).
    external: Option<external::External>,
}

impl World {
    /// A world whose API server holds `store`. The GPU controller runs as the chart deploys it (2 replicas, see
    /// [`World::deploy_controller`]), its cache synced with the store; unless the store's settings already name a
    /// controller user, they name the controller's service account, as the chart's settings ConfigMap does; the
    /// policies' parameter is the settings ConfigMap the chart's default values render.
    pub fn new(seed: u64, mut store: View, timing: Timing, log: EventLog) -> Self {
        let user = users::gpu_controller(keys::DEFAULT_CONTROLLER_NAMESPACE);
        store.settings.controller_user.get_or_insert_with(|| user.username.clone());
        let mut api = ApiServer::new(store.clone(), 1_000);
        api.watch().lag = timing.watch_lag;
        let mut world = World {
            seed,
            faults: Faults::default(),
            kernel: Kernel::new(),
            streams: Streams::new(seed),
            log,
            timing,
            api,
            controller: Some(Box::new(GpuController::new(store, user, Variant::SHIPPED))),
            claims_enabled: true,
            kubevirt: KubeVirt::default(),
            scheduler: Scheduler::default(),
            silent_nodes: BTreeMap::new(),
            deployment: Deployment::default(),
            wakes: std::collections::BTreeSet::new(),
            stats: Stats::default(),
            metrics: crate::metrics::Metrics::default(),
            retired_readings: Readings::default(),
            workloads: Vec::new(),
            closed_hash: None,
            epoch_ms: 1_800_000_000_000,
            served: None,
            external: None,
        };
        world.deploy_controller(DeploymentSpec::default());
        world
    }

    /// The API server's store: the cluster as it is.
    pub fn store(&self) -> &View {
        self.api.store()
    }

    /// The GPU controller's cache: the cluster as the controller last saw it.
    pub fn controller_cache(&self) -> &View {
        self.controller().cache()
    }

    pub fn now(&self) -> Millis {
        self.kernel.now()
    }

    /// The Unix time (ms) virtual zero stands for: what timestamps are written from.
    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    /// When the next event is due, if one is queued (what a paced driver sleeps until).
    pub fn next_event_at(&self) -> Option<Millis> {
        self.kernel.peek_time()
    }

    pub fn log_hash(&self) -> String {
        self.closed_hash.clone().unwrap_or_else(|| self.log.hash())
    }

    /// Ends the log (its sink flushed and closed); the hash stays readable.
    pub fn take_log(&mut self) -> EventLog {
        let hash_keeper = EventLog::new(None);
        let log = std::mem::replace(&mut self.log, hash_keeper);
        self.closed_hash = Some(log.hash());
        log
    }

    pub fn schedule_at(&mut self, at: Millis, event: Event) -> Result<(), WorldError> {
        Ok(self.kernel.schedule_at(at, event)?)
    }

    /// Runs until `until`, at most `events_max` events.
    pub fn run(&mut self, until: Millis, events_max: u64) -> Result<u64, WorldError> {
        match self.run_observed(until, events_max, |_| Ok::<(), std::convert::Infallible>(()))? {
            Ok(ran) => Ok(ran),
            Err(never) => match never {},
        }
    }

    /// Runs until `until`, at most `events_max` events, handing the world to `observe` after every event; an
    /// observer's `Err` stops the run at once (the event that caused it stays the last one handled) and is returned.
    pub fn run_observed<S>(
        &mut self,
        until: Millis,
        events_max: u64,
        mut observe: impl FnMut(&mut World) -> Result<(), S>,
    ) -> Result<Result<u64, S>, WorldError> {
        let mut kernel = std::mem::take(&mut self.kernel);
        let mut stop = None;
        let result = kernel.run(until, events_max, |kernel, at, event| {
            std::mem::swap(&mut self.kernel, kernel);
            let outcome = self.step(at, event);
            // The observer sees the kernel's count with this event included.
            let observed = if outcome.is_ok() { observe(self) } else { Ok(()) };
            std::mem::swap(&mut self.kernel, kernel);
            outcome?;
            observed.map_err(|s| {
                stop = Some(s);
                WorldError::Stopped
            })
        });
        self.kernel = kernel;
        match result {
            Ok(ran) => Ok(Ok(ran)),
            Err(RunError::Step(WorldError::Stopped)) => Ok(Err(stop.expect("set with the error"))),
            Err(RunError::Kernel(e)) => Err(WorldError::Kernel(e)),
            Err(RunError::Step(e)) => Err(e),
        }
    }

    pub(crate) fn time(&self) -> Time {
        Time::from_millisecond(self.epoch_ms + self.kernel.now().0 as i64).expect("virtual time stays in range")
    }

    /// The virtual time of `time`, never before now (a time in the past is now).
    pub(crate) fn virtual_time(&self, time: Time) -> Millis {
        let since_zero = time.as_millisecond().saturating_sub(self.epoch_ms);
        Millis(u64::try_from(since_zero).unwrap_or(0)).max(self.now())
    }

    pub(crate) fn record(
        &mut self,
        actor: &str,
        object: &dyn LogObject,
        what: &str,
        fields: &[(&str, &str)],
    ) -> Result<(), WorldError> {
        let record = Record { t_ms: self.kernel.now(), actor, object, what, fields };
        Ok(self.log.record(&record)?)
    }

    /// Counts a refusal and logs it.
    pub(crate) fn refused(
        &mut self,
        actor: &str,
        object: &dyn LogObject,
        what: &str,
        reason: &str,
        message: String,
    ) -> Result<(), WorldError> {
        *self.stats.refusals.entry(format!("{what}:{reason}")).or_insert(0) += 1;
        self.record(actor, object, what, &[("reason", reason), ("message", &message)])
    }

    fn step(&mut self, _at: Millis, event: Event) -> Result<(), WorldError> {
        let now = self.now();
        self.api.watch().tick(now);
        match event {
            Event::CreateVm(vm) => self.create_vm(*vm, None)?,
            Event::SyncVm { namespace, vm } => self.sync_vm(&namespace, &vm)?,
            Event::CreateLauncher { namespace, vmi } => self.create_launcher(&namespace, &vmi)?,
            Event::WatchDeliver => self.deliver_watch()?,
            Event::ControllerWake => self.controller_wake()?,
            Event::Schedule { namespace, pod } => self.schedule_pod(&namespace, &pod)?,
            Event::SchedulerFlush => self.flush_unschedulable()?,
            Event::PodStarted { namespace, pod } => self.pod_started(&namespace, &pod)?,
            Event::VmiRunning { namespace, vmi } => self.vmi_running(&namespace, &vmi)?,
            Event::StopVm { namespace, vm } => self.stop_vm(&namespace, &vm)?,
            Event::DeleteVmi { namespace, vmi } => self.delete_vmi(&namespace, &vmi)?,
            Event::Arrival { workload } => self.arrival(workload)?,
            Event::TenantWrite { namespace, write } => self.tenant_write(&namespace, &write)?,
            Event::SetWebhookReplicas(replicas) => self.set_webhook_replicas(replicas)?,
            Event::AddNodes(nodes) => self.add_nodes(nodes)?,
            Event::Cordon { node, cordoned } => self.cordon(&node, cordoned)?,
            Event::DeleteLauncher { namespace, vm } => self.delete_launcher(&namespace, &vm)?,
            Event::NodeLost { node } => self.node_lost(&node)?,
            Event::NodeNotReady { node, since } => self.node_not_ready(&node, since)?,
            Event::EvictUnreachable { node, since } => self.evict_unreachable(&node, since)?,
            Event::NodeRecovered { node } => self.node_recovered(&node)?,
            Event::Migrate { namespace, vmi } => self.migrate(&namespace, &vmi, false)?,
            Event::MigrationTimeout { uid } => self.migration_timeout(&uid)?,
            Event::MigrationHandoff { uid } => self.migration_handoff(&uid)?,
            Event::Drain { node } => self.drain(&node)?,
            Event::Evacuate { node } => self.evacuate(&node)?,
            Event::ControllerCrash { index } => self.replica_down(index, true)?,
            Event::ReplicaStart { index } => self.replica_start(index, None)?,
            Event::ReplicaMoved { index, node } => self.replica_start(index, Some(node))?,
            Event::ReplicaSynced { index } => self.replica_synced(index)?,
            Event::LeaseAcquire { index } => self.lease_acquire(index)?,
            Event::EvictReplicas { node } => self.evict_replicas(&node)?,
            Event::Fault { kind } => self.fault(kind)?,
            Event::DeviceFailure { node, resource, units } => self.device_failure(&node, &resource, units)?,
        }
        self.schedule_watch_delivery()
    }

    /// Whatever a step (or a served client's write) wrote reaches the controller's cache one lag later.
    pub(crate) fn schedule_watch_delivery(&mut self) -> Result<(), WorldError> {
        if let Some(due) = self.api.watch().delivery_due() {
            self.schedule_at(due.max(self.now()), Event::WatchDeliver)?;
        }
        Ok(())
    }

    fn set_webhook_replicas(&mut self, replicas: u32) -> Result<(), WorldError> {
        if self.ask_host(HostAction::WebhookEndpoints(replicas))? {
            return Ok(());
        }
        self.api.admission.ready_replicas = replicas;
        self.record("webhook", &"Service gpuclaim-webhook", "Endpoints", &[("ready", &replicas.to_string())])
    }

    /// Runs the engine's rules of `variant` in the webhooks and the GPU controller (a counterfactual, DESIGN.md §4).
    pub fn set_variant(&mut self, variant: Variant) {
        self.api.admission.variant = variant;
        self.controller_mut().set_variant(variant);
    }

    /// The engine's rules this world runs.
    pub fn variant(&self) -> Variant {
        self.controller().variant()
    }

    /// Statistics of the run so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Start waits (asked to run → Running) of the VMs started so far.
    pub fn start_waits(&self) -> crate::metrics::Percentiles {
        self.metrics.start_waits()
    }

    /// GPU units in use per resource so far: peak and time-weighted mean.
    pub fn units_in_use(&self) -> BTreeMap<String, crate::metrics::UnitsInUse> {
        self.metrics.units_in_use(self.now())
    }

    /// Pods at the placement gate now, by the reason the GPU controller gives.
    pub fn waiting_at_gate(&self) -> BTreeMap<String, u64> {
        let mut waiting = BTreeMap::new();
        for pod in self.api.store().gated_pods() {
            let reason = pod.waiting.as_ref().map_or("NotYetConsidered", |w| w.reason.as_str());
            *waiting.entry(reason.to_owned()).or_insert(0) += 1;
        }
        waiting
    }

    /// What an operator's dashboard reads of the run so far, with the live controller's names and buckets
    /// (`controller::metrics`): every leading process's gate waits and unit-seconds summed, as a Prometheus query
    /// sums the replicas' series, and the gauges of the current process's cache.
    pub fn readings(&self) -> Readings {
        let now = self.time();
        let controller = self.controller();
        let mut readings = self.retired_readings.clone();
        readings.merge(&controller.figures().readings(now));
        readings.gauges = Some(Gauges::of(controller.cache()));
        readings
    }

    /// Whether a GPU controller replica leads (reconciles) now.
    pub fn controller_leads(&self) -> bool {
        self.outside_leads().unwrap_or_else(|| self.has_leader())
    }

    /// The engine's time now (what the controller passes to `reconcile`).
    pub fn engine_time(&self) -> Time {
        self.time()
    }

    /// VMIs that reached Running so far.
    pub fn vm_starts(&self) -> u64 {
        self.stats.vm_starts
    }

    pub fn events(&self) -> u64 {
        self.kernel.handled()
    }
}

/// A VM spec ordering `count` units of `class` through a claim template (tests and examples).
pub fn template_vm(namespace: &str, name: &str, class: &str, count: u32) -> VmSpec {
    VmSpec {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        gpus: vec![GpuEntry::ClaimTemplate(ClaimTemplate { class: class.to_owned(), count })],
        cpu_millis: 4_000,
        memory_bytes: 16 << 30,
        lifetime: None,
        wffc_volume: false,
    }
}
