//! One world, one loop: the API server's store, KubeVirt's VM and VMI controllers, the scheduler, the kubelets and
//! the GPU controller, driven by the kernel's events in virtual time. This first slice carries one VM's start
//! through the whole path: render → VMI webhook → launcher → pod webhook (gate) → controller (template claim,
//! placement, pin and ungate in one update, validated as the API server would) → scheduler → kubelet → Running.
//!
//! Same-time events run in the order they were scheduled. Every transition is one event-log line.

use std::collections::BTreeMap;

use gpuclaim_engine::controller::{Action, Changes, apply, reconcile_changes};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{PodPhase, Time, View, Vmi, VmiPhase};
use gpuclaim_engine::references::GpuEntry;
use gpuclaim_engine::rules::{VmRender, admit_vmi, mutate_pod, render_vm};
use gpuclaim_engine::scheduling::is_pinned_to;
use rand::RngExt;

use crate::apiserver::gates::{validate_pod_create, validate_pod_update};
use crate::kernel::{Kernel, KernelError, Millis, RunError};
use crate::launcher::render_launcher;
use crate::log::{EventLog, LogError, Record};
use crate::rng::Streams;
use crate::scenario::exponential;
use crate::scheduler::{Requested, schedule, schedule_pinned};

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
}

/// The twin's timing (virtual), with defaults read off real clusters.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Watch delivery to the GPU controller's cache.
    pub watch_delay: Millis,
    /// Launcher start on the kubelet: image pull, sandbox, virt-launcher up (uniform in this range).
    pub pod_start: (Millis, Millis),
    /// virt-handler: pod running → VMI Running.
    pub vmi_running_after: Millis,
    /// The scheduler's retry of an unschedulable pod.
    pub unschedulable_retry: Millis,
}

impl Default for Timing {
    fn default() -> Self {
        // Fixture 07 (a real VMI): Scheduling → Scheduled 11 s (pod ready), Scheduled → Running 2 s.
        Timing {
            watch_delay: Millis(100),
            pod_start: (Millis::seconds(5), Millis::seconds(15)),
            vmi_running_after: Millis::seconds(2),
            unschedulable_retry: Millis::seconds(10),
        }
    }
}

/// What happens, one event at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A tenant creates (and starts) a VM.
    CreateVm(VmSpec),
    /// KubeVirt's VMI controller sees a new VMI and creates its launcher.
    CreateLauncher { namespace: String, vmi: String },
    /// The GPU controller's work queue runs.
    ControllerWake,
    /// The scheduler considers a pod.
    Schedule { namespace: String, pod: String },
    /// The kubelet has started a pod.
    PodStarted { namespace: String, pod: String },
    /// virt-handler reports the VMI running.
    VmiRunning { namespace: String, vmi: String },
    /// The tenant stops the VM: the VMI shuts down, its launcher exits.
    StopVm { namespace: String, vm: String },
    /// KubeVirt deletes the finished VMI and its pods; the garbage collector takes the VMI's dependents.
    DeleteVmi { namespace: String, vmi: String },
    /// The next VM of a workload arrives.
    Arrival { workload: usize },
}

/// VMs arriving as a Poisson process.
#[derive(Clone, Debug)]
struct Workload {
    template: VmSpec,
    mean_interarrival: Millis,
    mean_lifetime: Millis,
    arrived: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Log(#[from] LogError),
    /// An engine decision the API server refuses: a bug the twin exists to catch.
    #[error("event {event} at {at}: the API server refuses the GPU controller's write to {object}: {reason}")]
    InvalidWrite { event: u64, at: Millis, object: String, reason: String },
}

/// The whole twin.
pub struct World {
    kernel: Kernel<Event>,
    streams: Streams,
    log: EventLog,
    timing: Timing,
    /// The API server's store.
    pub store: View,
    /// Whether references may be rendered (the `_cluster` switch).
    pub claims_enabled: bool,
    vms: BTreeMap<(String, String), VmSpec>,
    requested: BTreeMap<String, Requested>,
    changes: Changes,
    wake_queued: bool,
    vm_starts: u64,
    workloads: Vec<Workload>,
    /// The log's hash once the log was taken.
    closed_hash: Option<String>,
    /// The Unix time virtual zero stands for (engine times are absolute).
    epoch_ms: i64,
}

impl World {
    pub fn new(seed: u64, store: View, timing: Timing, log: EventLog) -> Self {
        World {
            kernel: Kernel::new(),
            streams: Streams::new(seed),
            log,
            timing,
            store,
            claims_enabled: true,
            vms: BTreeMap::new(),
            requested: BTreeMap::new(),
            changes: Changes::default(),
            wake_queued: false,
            vm_starts: 0,
            workloads: Vec::new(),
            closed_hash: None,
            epoch_ms: 1_800_000_000_000,
        }
    }

    pub fn now(&self) -> Millis {
        self.kernel.now()
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
        let mut kernel = std::mem::take(&mut self.kernel);
        let result = kernel.run(until, events_max, |kernel, at, event| {
            std::mem::swap(&mut self.kernel, kernel);
            let outcome = self.step(at, event);
            std::mem::swap(&mut self.kernel, kernel);
            outcome
        });
        self.kernel = kernel;
        result.map_err(|e| match e {
            RunError::Kernel(e) => WorldError::Kernel(e),
            RunError::Step(e) => e,
        })
    }

    fn time(&self) -> Time {
        Time::from_millisecond(self.epoch_ms + self.kernel.now().0 as i64).expect("virtual time stays in range")
    }

    fn record(&mut self, actor: &str, object: &str, what: &str, fields: Vec<(&str, String)>) -> Result<(), WorldError> {
        let record = Record { t_ms: self.kernel.now(), actor, object, what, fields };
        Ok(self.log.record(&record)?)
    }

    fn step(&mut self, _at: Millis, event: Event) -> Result<(), WorldError> {
        match event {
            Event::CreateVm(vm) => self.create_vm(vm),
            Event::CreateLauncher { namespace, vmi } => self.create_launcher(&namespace, &vmi),
            Event::ControllerWake => self.controller_wake(),
            Event::Schedule { namespace, pod } => self.schedule_pod(&namespace, &pod),
            Event::PodStarted { namespace, pod } => self.pod_started(&namespace, &pod),
            Event::VmiRunning { namespace, vmi } => self.vmi_running(&namespace, &vmi),
            Event::StopVm { namespace, vm } => self.stop_vm(&namespace, &vm),
            Event::DeleteVmi { namespace, vmi } => self.delete_vmi(&namespace, &vmi),
            Event::Arrival { workload } => self.arrival(workload),
        }
    }

    /// KubeVirt's VM controller: renders the VMI and creates it through the VMI webhook.
    fn create_vm(&mut self, vm: VmSpec) -> Result<(), WorldError> {
        let object = format!("VirtualMachine {}/{}", vm.namespace, vm.name);
        let mut vmi = Vmi {
            namespace: vm.namespace.clone(),
            name: vm.name.clone(),
            uid: format!("uid-vmi-{}-{}", vm.name, self.kernel.handled()),
            ..Vmi::default()
        };
        vmi.labels.insert("kubevirt.io/domain".to_owned(), vm.name.clone());
        match render_vm(&vm.gpus, self.claims_enabled) {
            Ok(VmRender::Nothing) => {}
            Ok(VmRender::Raw(gpus)) => vmi.gpus = gpus,
            Ok(VmRender::References { annotation }) => {
                vmi.labels.insert(keys::LABEL_CLAIMS.to_owned(), keys::TRUE.to_owned());
                vmi.annotations.insert(keys::ANNOTATION_CLAIMS.to_owned(), annotation);
            }
            Err(refusal) => {
                return self.record("vm-controller", &object, "RenderRefused", vec![("reason", refusal.to_string())]);
            }
        }
        match admit_vmi(&self.store, &vmi) {
            Ok(patch) => patch.apply(&mut vmi),
            Err(refusal) => {
                return self.record("api-server", &object, "FailedCreate", vec![("reason", refusal.to_string())]);
            }
        }
        let key = (vm.namespace.clone(), vm.name.clone());
        self.vms.insert(key.clone(), vm);
        self.store.upsert_vmi(vmi);
        self.record("api-server", &format!("VirtualMachineInstance {}/{}", key.0, key.1), "Created", vec![])?;
        self.changes.vmis.insert(key.clone());
        self.wake_controller()?;
        let (namespace, vmi) = key;
        self.schedule_at(self.now(), Event::CreateLauncher { namespace, vmi })
    }

    /// KubeVirt's VMI controller: the launcher pod, through the pod webhook; the VMI goes to Scheduling.
    fn create_launcher(&mut self, namespace: &str, vmi_name: &str) -> Result<(), WorldError> {
        let Some(vmi) = self.store.vmi(namespace, vmi_name).cloned() else { return Ok(()) };
        let vm = &self.vms[&(namespace.to_owned(), vmi_name.to_owned())];
        let name = format!("virt-launcher-{vmi_name}-{:05}", self.kernel.handled() % 100_000);
        let mut pod = render_launcher(&vmi, &name, vm.cpu_millis, vm.memory_bytes, self.time());
        let object = format!("Pod {namespace}/{name}");
        match mutate_pod(&self.store, &pod) {
            Ok(patch) => patch.apply(&mut pod),
            Err(refusal) => {
                return self.record("api-server", &object, "FailedCreate", vec![("reason", refusal.to_string())]);
            }
        }
        if let Err(invalid) = validate_pod_create(&pod) {
            return self.record("api-server", &object, "FailedCreate", vec![("reason", invalid.to_string())]);
        }
        pod.resource_version = "1".to_owned();
        let gated = !pod.scheduling_gates.is_empty();
        self.store.upsert_pod(pod);
        self.record("api-server", &object, "Created", vec![("gated", gated.to_string())])?;
        let mut vmi = vmi;
        vmi.phase = VmiPhase::Scheduling;
        self.store.upsert_vmi(vmi);
        self.changes.vmis.insert((namespace.to_owned(), vmi_name.to_owned()));
        self.wake_controller()?;
        self.schedule_at(self.now(), Event::Schedule { namespace: namespace.to_owned(), pod: name })
    }

    fn wake_controller(&mut self) -> Result<(), WorldError> {
        if self.wake_queued {
            return Ok(());
        }
        self.wake_queued = true;
        self.schedule_at(self.now() + self.timing.watch_delay, Event::ControllerWake)
    }

    /// The GPU controller: one pass over what changed; its writes go through the API server's validation.
    fn controller_wake(&mut self) -> Result<(), WorldError> {
        self.wake_queued = false;
        let changes = std::mem::take(&mut self.changes);
        let now = self.time();
        let actions = reconcile_changes(&self.store, now, &changes);
        for action in &actions {
            if let Action::PinAndUngate { pod, terms, .. } = action {
                let old = self.store.pod(&pod.namespace, &pod.name).cloned().expect("the controller pins a stored pod");
                let mut new = old.clone();
                new.scheduling_gates.retain(|gate| gate != keys::GATE_PLACEMENT);
                new.required_terms = Some(terms.clone());
                if let Err(invalid) = validate_pod_update(&old, &new) {
                    return Err(WorldError::InvalidWrite {
                        event: self.kernel.handled(),
                        at: self.now(),
                        object: format!("Pod {pod}"),
                        reason: invalid.to_string(),
                    });
                }
            }
            if let Err(conflict) = apply(&mut self.store, std::slice::from_ref(action), now) {
                // A conflict: the controller refreshes and reconciles again.
                self.record("gpu-controller", &conflict.object, "Conflict", vec![("reason", conflict.reason)])?;
                self.wake_controller()?;
                break;
            }
            self.after_write(action)?;
        }
        Ok(())
    }

    fn after_write(&mut self, action: &Action) -> Result<(), WorldError> {
        match action {
            Action::CreateClaim { claim, .. }
            | Action::UpdateClaim { claim, .. }
            | Action::DeleteClaim { claim, .. } => {
                let what = match action {
                    Action::CreateClaim { .. } => "Created",
                    Action::DeleteClaim { .. } => "Deleted",
                    _ => "Updated",
                };
                let node =
                    self.store.claim(&claim.namespace, &claim.name).and_then(|c| c.node.clone()).unwrap_or_default();
                self.record("gpu-controller", &format!("GPUClaim {claim}"), what, vec![("node", node)])?;
                self.changes.claims.insert((claim.namespace.clone(), claim.name.clone()));
                self.wake_controller()?;
            }
            Action::PinAndUngate { pod, node, .. } => {
                self.record("gpu-controller", &format!("Pod {pod}"), "PinnedAndUngated", vec![("node", node.clone())])?;
                self.schedule_at(
                    self.now(),
                    Event::Schedule { namespace: pod.namespace.clone(), pod: pod.name.clone() },
                )?;
            }
            Action::SetPodWaiting { pod, waiting, .. } => {
                let fields = vec![("reason", waiting.reason.clone())];
                self.record("gpu-controller", &format!("Pod {pod}"), "Waiting", fields)?;
            }
            Action::OpenUsage { usage } => {
                let object = format!("GPUUsage {}/{}", usage.namespace, usage.name);
                self.record("gpu-controller", &object, "Opened", vec![("node", usage.node.clone())])?;
            }
            Action::CloseUsage { usage, .. } => {
                self.record("gpu-controller", &format!("GPUUsage {usage}"), "Closed", vec![])?
            }
            Action::PublishClass { class, published, .. } => {
                let fields = vec![("free", published.free_units.to_string())];
                self.record("gpu-controller", &format!("GPUClass {class}"), "Published", fields)?;
            }
            Action::Event { .. } => {}
        }
        Ok(())
    }

    /// kube-scheduler: a gated pod waits; an ungated one is bound where it fits.
    fn schedule_pod(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(pod) = self.store.pod(namespace, name).cloned() else { return Ok(()) };
        if pod.node_name.is_some() {
            return Ok(());
        }
        let object = format!("Pod {namespace}/{name}");
        if !pod.scheduling_gates.is_empty() {
            return self.record("scheduler", &object, "SchedulingGated", vec![]);
        }
        let empty = Requested::default();
        let total = self.store.node_count() as u32;
        let verdict = match pod.required_terms.as_deref().and_then(is_pinned_to) {
            // Pinned by the GPU controller: only that node can pass node affinity.
            Some(pinned) => {
                let node = self.store.node(pinned).map(|n| (n, self.requested.get(pinned).unwrap_or(&empty)));
                schedule_pinned(&pod, node, total).map(str::to_owned)
            }
            None => {
                let candidates = self.store.nodes().map(|n| (n, self.requested.get(&n.name).unwrap_or(&empty)));
                schedule(&pod, candidates, self.streams.of("scheduler")).map(str::to_owned)
            }
        };
        match verdict {
            Ok(node) => {
                let mut bound = pod;
                bound.node_name = Some(node.clone());
                self.requested.entry(node.clone()).or_default().add(&bound);
                self.store.upsert_pod(bound);
                self.record("scheduler", &object, "Bound", vec![("node", node)])?;
                let (low, high) = self.timing.pod_start;
                let delay = Millis(self.streams.of("kubelet").random_range(low.0..=high.0));
                let event = Event::PodStarted { namespace: namespace.to_owned(), pod: name.to_owned() };
                self.schedule_at(self.now() + delay, event)
            }
            Err(unschedulable) => {
                self.record("scheduler", &object, "Unschedulable", vec![("message", unschedulable.message)])?;
                let retry = Event::Schedule { namespace: namespace.to_owned(), pod: name.to_owned() };
                self.schedule_at(self.now() + self.timing.unschedulable_retry, retry)
            }
        }
    }

    /// The kubelet started the launcher; the VMI is Scheduled on its node.
    fn pod_started(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(mut pod) = self.store.pod(namespace, name).cloned() else { return Ok(()) };
        pod.phase = PodPhase::Running;
        let node = pod.node_name.clone().unwrap_or_default();
        let vmi_name = pod.owner_vmi.as_ref().map(|v| v.name.clone()).unwrap_or_default();
        self.store.upsert_pod(pod);
        self.record("kubelet", &format!("Pod {namespace}/{name}"), "Running", vec![("node", node.clone())])?;
        if let Some(mut vmi) = self.store.vmi(namespace, &vmi_name).cloned() {
            vmi.phase = VmiPhase::Scheduled;
            vmi.node_name = Some(node);
            self.store.upsert_vmi(vmi);
            let event = Event::VmiRunning { namespace: namespace.to_owned(), vmi: vmi_name };
            self.schedule_at(self.now() + self.timing.vmi_running_after, event)?;
        }
        Ok(())
    }

    fn vmi_running(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(mut vmi) = self.store.vmi(namespace, name).cloned() else { return Ok(()) };
        vmi.phase = VmiPhase::Running;
        let node = vmi.node_name.clone().unwrap_or_default();
        self.store.upsert_vmi(vmi);
        let object = format!("VirtualMachineInstance {namespace}/{name}");
        self.record("virt-handler", &object, "Running", vec![("node", node)])?;
        self.vm_starts += 1;
        self.changes.vmis.insert((namespace.to_owned(), name.to_owned()));
        if let Some(lifetime) = self.vms.get(&(namespace.to_owned(), name.to_owned())).and_then(|vm| vm.lifetime) {
            let stop = Event::StopVm { namespace: namespace.to_owned(), vm: name.to_owned() };
            self.schedule_at(self.now() + lifetime, stop)?;
        }
        self.wake_controller()
    }

    /// The VMI ends (Succeeded) and its pods exit; KubeVirt deletes it a moment later.
    fn stop_vm(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(mut vmi) = self.store.vmi(namespace, name).cloned() else { return Ok(()) };
        if vmi.phase.is_final() {
            return Ok(());
        }
        vmi.phase = VmiPhase::Succeeded;
        self.store.upsert_vmi(vmi);
        self.record("virt-handler", &format!("VirtualMachineInstance {namespace}/{name}"), "Succeeded", vec![])?;
        let pods: Vec<_> = self.store.vmi_pods(namespace, name).cloned().collect();
        for mut pod in pods {
            if let (Some(node), false) = (pod.node_name.clone(), pod.phase.is_terminal()) {
                self.requested.get_mut(&node).expect("a bound pod is counted").remove(&pod);
            }
            pod.phase = PodPhase::Succeeded;
            self.store.upsert_pod(pod);
        }
        self.changes.vmis.insert((namespace.to_owned(), name.to_owned()));
        self.wake_controller()?;
        let delete = Event::DeleteVmi { namespace: namespace.to_owned(), vmi: name.to_owned() };
        self.schedule_at(self.now() + Millis::seconds(1), delete)
    }

    /// The VMI and its pods go; its dependents (template claims) are deleted by the garbage collector, and wait on
    /// their finalizer until the controller lets go.
    fn delete_vmi(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(vmi) = self.store.remove_vmi(namespace, name) else { return Ok(()) };
        let pods: Vec<String> = self.store.vmi_pods(namespace, name).map(|p| p.name.clone()).collect();
        for pod in pods {
            let Some(pod) = self.store.remove_pod(namespace, &pod) else { continue };
            if let (Some(node), false) = (pod.node_name.clone(), pod.phase.is_terminal()) {
                self.requested.get_mut(&node).expect("a bound pod is counted").remove(&pod);
            }
        }
        let owned: Vec<_> = self
            .store
            .claims_of_run(namespace, name)
            .filter(|c| c.owner_vmi.as_ref().is_some_and(|o| o.uid == vmi.uid))
            .cloned()
            .collect();
        for mut claim in owned {
            self.changes.claims.insert((claim.namespace.clone(), claim.name.clone()));
            if claim.finalizer {
                claim.deleting = true;
                self.store.upsert_claim(claim);
            } else {
                self.store.remove_claim(&claim.namespace, &claim.name);
            }
        }
        self.vms.remove(&(namespace.to_owned(), name.to_owned()));
        self.record("api-server", &format!("VirtualMachineInstance {namespace}/{name}"), "Deleted", vec![])?;
        self.changes.vmis.insert((namespace.to_owned(), name.to_owned()));
        self.wake_controller()
    }

    /// Adds a workload: VMs like `template` (named `<template name>-<n>`) arriving `arrivals_per_hour` on
    /// average, each running an exponentially distributed time of mean `mean_lifetime`.
    pub fn add_workload(
        &mut self,
        template: VmSpec,
        arrivals_per_hour: f64,
        mean_lifetime: Millis,
    ) -> Result<(), WorldError> {
        let mean_interarrival = Millis(((3_600_000.0 / arrivals_per_hour) as u64).max(1));
        let index = self.workloads.len();
        self.workloads.push(Workload { template, mean_interarrival, mean_lifetime, arrived: 0 });
        let first = exponential(self.streams.of(&format!("workload/{index}")), mean_interarrival);
        self.schedule_at(self.now() + first, Event::Arrival { workload: index })
    }

    fn arrival(&mut self, index: usize) -> Result<(), WorldError> {
        let stream = format!("workload/{index}");
        let workload = &mut self.workloads[index];
        workload.arrived += 1;
        let mut vm = workload.template.clone();
        vm.name = format!("{}-{}", vm.name, workload.arrived);
        let (mean_lifetime, mean_interarrival) = (workload.mean_lifetime, workload.mean_interarrival);
        vm.lifetime = Some(exponential(self.streams.of(&stream), mean_lifetime));
        let next = exponential(self.streams.of(&stream), mean_interarrival);
        self.schedule_at(self.now() + next, Event::Arrival { workload: index })?;
        self.create_vm(vm)
    }

    /// VMIs that reached Running so far.
    pub fn vm_starts(&self) -> u64 {
        self.vm_starts
    }

    pub fn events(&self) -> u64 {
        self.kernel.handled()
    }
}
