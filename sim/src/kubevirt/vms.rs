//! KubeVirt's actors around a VM: the VM controller (render, VMI create with rate-limited retries), the VMI
//! controller (launcher create, the VMI Scheduled once its launcher runs, deletion of finished VMIs), virt-handler
//! (Running, stop); and what a world tells of its VMs (status, start waits).

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::{Name, Pod, PodPhase, View, Vmi, VmiPhase};
use gpuclaim_engine::rules::{VmRender, render_vm};

use super::launcher::render_launcher;
use super::migrations::migration_of;
use super::start::start_backoff_seconds;
use super::{StartFailure, VmSpec, VmState};
use crate::kernel::Millis;
use crate::log::Named;
use crate::world::{Event, World, WorldError};

impl World {
    /// A tenant creates a VM (with the held claim it ordered for it, if any); the VM controller syncs it at once.
    pub(crate) fn create_vm(&mut self, spec: VmSpec, ordered_claim: Option<String>) -> Result<(), WorldError> {
        let (namespace, name) = (Name::from(&spec.namespace), Name::from(&spec.name));
        let state = VmState {
            spec,
            ordered_claim,
            halted: false,
            start_failure: None,
            vmi_ran: false,
            volume_node: None,
            start_requested: self.now(),
            last_start_wait: None,
            counted_units: Vec::new(),
        };
        self.kubevirt.vms.insert(&namespace, &name, state);
        self.note_vm(&namespace, &name);
        self.sync_vm(&namespace, &name)
    }

    /// KubeVirt's VM controller (runStrategy Always): a VMI that ended goes, counting a start failure when it never
    /// ran; a new one is created once the start backoff allows (the VM shows `CrashLoopBackOff` meanwhile). The VMI is
    /// rendered and created through the VMI webhook; a refused create is retried through the work queue's rate
    /// limiter (condition `Failure`, reason `FailedCreate`), which counts no start failure: no VMI existed.
    pub(crate) fn sync_vm(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(vm) = self.kubevirt.vms.get(namespace, name) else { return Ok(()) };
        if vm.halted {
            return Ok(());
        }
        if let Some(vmi) = self.api.store().vmi(namespace, name) {
            if !vmi.phase.is_final() {
                return Ok(());
            }
            let uid = vmi.uid.clone();
            let counted = vm.start_failure.as_ref().is_some_and(|failure| failure.last_failed_vmi_uid == uid);
            if !vm.vmi_ran && !counted {
                let consecutive = vm.start_failure.as_ref().map_or(0, |failure| failure.consecutive) + 1;
                let delay = Millis::seconds(start_backoff_seconds(consecutive, self.streams.of("vm-controller")));
                let retry_after = self.now() + delay;
                let failure = StartFailure { consecutive, last_failed_vmi_uid: uid.to_string(), retry_after };
                self.kubevirt.vms.get_mut(namespace, name).expect("read above").start_failure = Some(failure);
                self.metrics.count(crate::metrics::START_FAILURE);
            }
            self.remove_vmi(namespace, name)?;
        }
        let vm = self.kubevirt.vms.get(namespace, name).expect("read above");
        if let Some(failure) = vm.start_failure.as_ref().filter(|failure| failure.retry_after > self.now()) {
            let (retry_after, consecutive) = (failure.retry_after, failure.consecutive);
            let fields: &[(&str, &str)] =
                &[("failures", &consecutive.to_string()), ("retry_at_ms", &retry_after.0.to_string())];
            self.record("vm-controller", &Named("VirtualMachine", namespace, name), "CrashLoopBackOff", fields)?;
            let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
            return self.schedule_at(retry_after, event);
        }
        let vm = self.kubevirt.vms.get(namespace, name).expect("read above");
        let object = Named("VirtualMachine", namespace, name);
        let mut vmi = Vmi {
            namespace: namespace.into(),
            name: name.into(),
            uid: ["uid-vmi-", name, "-", itoa::Buffer::new().format(self.events())].concat().into(),
            ..Vmi::default()
        };
        Arc::make_mut(&mut vmi.labels).insert("kubevirt.io/domain".to_owned(), name.to_string());
        match render_vm(&vm.spec.gpus, self.claims_enabled) {
            Ok(VmRender::Nothing) => {}
            Ok(VmRender::Raw(gpus)) => vmi.gpus = gpus.into(),
            Ok(VmRender::References { annotation }) => {
                Arc::make_mut(&mut vmi.labels).insert(keys::LABEL_CLAIMS.to_owned(), keys::TRUE.to_owned());
                let value = annotation.text().to_owned();
                Arc::make_mut(&mut vmi.annotations).insert(keys::ANNOTATION_CLAIMS.to_owned(), value);
                vmi.references_read.set(annotation);
            }
            Err(refusal) => {
                let reason = gpuclaim_engine::rules::Refusal::reason(&refusal);
                return self.refused("vm-controller", &object, "RenderRefused", reason, refusal.to_string());
            }
        }
        let item = || [namespace, "/", name].concat();
        self.sync_before_admission();
        match self.api.create_vmi(vmi, &self.kubevirt.controller) {
            Ok(_) => {
                if self.kubevirt.vm_retries.backing_off() {
                    self.kubevirt.vm_retries.forget(&item());
                }
                self.kubevirt.vms.get_mut(namespace, name).expect("read above").vmi_ran = false;
                self.record("vm-controller", &Named("VirtualMachineInstance", namespace, name), "Created", &[])?;
                let event = Event::CreateLauncher { namespace: namespace.into(), vmi: name.into() };
                self.schedule_at(self.now(), event)
            }
            Err(error) => {
                self.refused("vm-controller", &object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = Millis::from(self.kubevirt.vm_retries.when(&item(), self.now().into()));
                let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// KubeVirt's VMI controller: the launcher pod, through the pod webhook; the VMI goes to Scheduling. A refused
    /// create is retried through the controller's rate limiter.
    pub(crate) fn create_launcher(&mut self, namespace: &Name, vmi_name: &Name) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, vmi_name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Pending || self.api.store().vmi_pods(namespace, vmi_name).next().is_some() {
            return Ok(());
        }
        let Some(vm) = self.kubevirt.vms.get(namespace, vmi_name) else { return Ok(()) };
        let name = launcher_name(vmi_name, self.events());
        let mut pod = self.launcher_of(vmi, vm, &name);
        // A WaitForFirstConsumer volume not bound yet: first the temporary pod (same labels and requests), whose
        // node the volume binds to.
        let binder = vm.spec.wffc_volume && vm.volume_node.is_none();
        if binder {
            Arc::make_mut(&mut pod.annotations)
                .insert(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING.to_owned(), keys::TRUE.to_owned());
        }
        let object = Named("Pod", namespace, &name);
        let item = || [namespace, "/", vmi_name].concat();
        self.sync_before_admission();
        match self.api.create_pod(pod, &self.kubevirt.controller) {
            Ok(pod) => {
                let gated = !pod.scheduling_gates.is_empty();
                if self.kubevirt.vmi_retries.backing_off() {
                    self.kubevirt.vmi_retries.forget(&item());
                }
                let role = if binder { "volume binder" } else { "launcher" };
                self.record(
                    "vmi-controller",
                    &object,
                    "Created",
                    &[("gated", if gated { "true" } else { "false" }), ("role", role)],
                )?;
                if !binder {
                    self.api
                        .update_vmi(namespace, vmi_name, &self.kubevirt.controller, |vmi| {
                            vmi.phase = VmiPhase::Scheduling
                        })
                        .expect("the VMI was read above");
                }
                self.schedule_at(self.now(), Event::Schedule { namespace: namespace.into(), pod: name.into() })
            }
            Err(error) => {
                let vmi_object = Named("VirtualMachineInstance", namespace, vmi_name);
                self.refused("vmi-controller", &vmi_object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = Millis::from(self.kubevirt.vmi_retries.when(&item(), self.now().into()));
                let event = Event::CreateLauncher { namespace: namespace.into(), vmi: vmi_name.into() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// The pod KubeVirt renders to run a VMI of `vm`, named `name`: its launcher, or a migration's target.
    pub(super) fn launcher_of(&self, vmi: &Vmi, vm: &VmState, name: &str) -> Pod {
        let parts = &self.kubevirt.launcher_parts;
        render_launcher(vmi, name, vm.spec.cpu_millis, vm.spec.memory_bytes, self.time(), parts)
    }

    /// KubeVirt sees one of its pods run (the kubelet started it): a migration target's copy starts, a volume
    /// binder's volume binds, and a launcher's VMI is Scheduled on its node (virt-handler reports it Running a moment
    /// later).
    pub(crate) fn kubevirt_pod_running(
        &mut self,
        namespace: &Name,
        pod: &Name,
        vmi: Name,
        node: Name,
    ) -> Result<(), WorldError> {
        if let Some(uid) = migration_of(self.api.store(), namespace, pod) {
            return self.migration_target_running(&uid);
        }
        if is_volume_binder(self.api.store(), namespace, pod) {
            return self.volume_bound(namespace, pod, &vmi, &node);
        }
        let scheduled = self.api.update_vmi(namespace, &vmi, &self.kubevirt.controller, |vmi| {
            vmi.phase = VmiPhase::Scheduled;
            vmi.node_name = Some(node);
        });
        if scheduled.is_ok() {
            let event = Event::VmiRunning { namespace: namespace.into(), vmi };
            self.schedule_at(self.now() + self.timing.vmi_running_after, event)?;
        }
        Ok(())
    }

    /// The temporary pod runs: the volume binds to its node (local storage), the pod is deleted, and the launcher
    /// follows, bound by the volume to that node.
    fn volume_bound(&mut self, namespace: &str, pod: &str, vmi: &str, node: &str) -> Result<(), WorldError> {
        if let Some(vm) = self.kubevirt.vms.get_mut(namespace, vmi) {
            vm.volume_node = Some(node.to_owned());
        }
        self.record("cdi", &Named("DataVolume", namespace, vmi), "Bound", &[("node", node)])?;
        self.scheduler_forget(namespace, pod);
        if self.api.delete_pod(namespace, pod).is_ok() {
            self.record("vmi-controller", &Named("Pod", namespace, pod), "Deleted", &[])?;
        }
        self.scheduler_cluster_changed()?;
        self.schedule_at(self.now(), Event::CreateLauncher { namespace: namespace.into(), vmi: vmi.into() })
    }

    /// virt-handler: the domain runs.
    pub(crate) fn vmi_running(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Scheduled {
            return Ok(());
        }
        let node = vmi.node_name.clone().unwrap_or_default();
        self.api
            .update_vmi(namespace, name, &self.kubevirt.handler, |vmi| vmi.phase = VmiPhase::Running)
            .expect("read above");
        let object = Named("VirtualMachineInstance", namespace, name);
        self.record("virt-handler", &object, "Running", &[("node", &node)])?;
        self.stats.vm_starts += 1;
        let mut units: BTreeMap<String, i64> = BTreeMap::new();
        for gpu in self.api.store().vmi(namespace, name).expect("updated above").gpus.iter() {
            *units.entry(gpu.device_name.clone()).or_insert(0) += 1;
        }
        let now = self.now();
        if let Some(vm) = self.kubevirt.vms.get_mut(namespace, name) {
            vm.vmi_ran = true;
            vm.start_failure = None;
            let waited = Millis(now.0 - vm.start_requested.0);
            vm.last_start_wait = Some(waited);
            self.metrics.started(waited);
            for (resource, count) in &units {
                self.metrics.units(resource, *count, now);
            }
            vm.counted_units = units.into_iter().collect();
        }
        let lifetime = self.kubevirt.vms.get(namespace, name).and_then(|vm| vm.spec.lifetime);
        if let Some(lifetime) = lifetime {
            let stop = Event::StopVm { namespace: namespace.into(), vm: name.into() };
            self.schedule_at(self.now() + lifetime, stop)?;
        }
        Ok(())
    }

    /// The tenant stops the VM (runStrategy Halted, which also clears its start failures): the VMI ends
    /// (Succeeded), its pods exit, KubeVirt deletes it a moment later, and the tenant then deletes the VM. A VM
    /// stopped before it has a VMI (refused creates, a start backoff) is deleted at once.
    pub(crate) fn stop_vm(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        self.note_vm(namespace, name);
        if let Some(vm) = self.kubevirt.vms.get_mut(namespace, name) {
            vm.halted = true;
            vm.start_failure = None;
        }
        let Some(vmi) = self.api.store().vmi(namespace, name) else {
            return self.forget_vm(namespace, name);
        };
        if vmi.phase.is_final() {
            return Ok(());
        }
        self.api
            .update_vmi(namespace, name, &self.kubevirt.handler, |vmi| vmi.phase = VmiPhase::Succeeded)
            .expect("read above");
        self.run_ended(namespace, name);
        self.record("virt-handler", &Named("VirtualMachineInstance", namespace, name), "Succeeded", &[])?;
        let pods: Vec<Name> = self.api.store().vmi_pods(namespace, name).map(|pod| pod.name.clone()).collect();
        for pod in pods {
            self.pod_ended(namespace, &pod, PodPhase::Succeeded)?;
        }
        let delete = Event::DeleteVmi { namespace: namespace.into(), vmi: name.into() };
        self.schedule_at(self.now() + self.timing.vmi_delete_after, delete)
    }

    /// The VMI's run ended: its units leave the metrics.
    fn run_ended(&mut self, namespace: &str, vmi: &str) {
        let now = self.now();
        if let Some(vm) = self.kubevirt.vms.get_mut(namespace, vmi) {
            for (resource, count) in std::mem::take(&mut vm.counted_units) {
                self.metrics.units(&resource, -count, now);
            }
        }
    }

    /// KubeVirt deletes a finished VMI. A halted VM's tenant then deletes the VM (and the held claim it ordered for
    /// it); a VM that should run gets a new VMI from the VM controller.
    pub(crate) fn delete_vmi(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        if self.api.store().vmi(namespace, name).is_none_or(|vmi| !vmi.phase.is_final()) {
            return Ok(());
        }
        self.remove_vmi(namespace, name)?;
        if !self.kubevirt.vms.get(namespace, name).is_some_and(|vm| vm.halted) {
            let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
            return self.schedule_at(self.now(), event);
        }
        self.forget_vm(namespace, name)
    }

    /// The tenant deletes a stopped VM, and the held claim it ordered for it.
    fn forget_vm(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        self.note_vm(namespace, name);
        if let Some(vm) = self.kubevirt.vms.remove(namespace, name)
            && let Some(claim) = vm.ordered_claim
            && self.api.delete_claim(namespace, &claim, None).is_ok()
        {
            self.record("tenant", &Named("GPUClaim", namespace, &claim), "Deleted", &[])?;
        }
        Ok(())
    }

    /// The VMI goes, and with it (the garbage collector) its pods and template claims.
    fn remove_vmi(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let pods: Vec<Name> = self.api.store().vmi_pods(namespace, name).map(|pod| pod.name.clone()).collect();
        for pod in &pods {
            self.scheduler_forget(namespace, pod);
        }
        if self.api.delete_vmi(namespace, name).is_err() {
            return Ok(());
        }
        self.record("vmi-controller", &Named("VirtualMachineInstance", namespace, name), "Deleted", &[])?;
        self.scheduler_cluster_changed()
    }

    /// Something deletes a VM's launcher.
    pub(crate) fn delete_launcher(&mut self, namespace: &str, vm: &str) -> Result<(), WorldError> {
        let pods: Vec<Name> = self.api.store().vmi_pods(namespace, vm).map(|pod| pod.name.clone()).collect();
        for pod in pods {
            self.scheduler_forget(namespace, &pod);
            if self.api.delete_pod(namespace, &pod).is_ok() {
                self.record("operator", &Named("Pod", namespace, &pod), "Deleted", &[])?;
            }
        }
        self.scheduler_cluster_changed()?;
        self.launcher_gone(namespace, vm)
    }

    /// KubeVirt's VMI controller: a VMI whose pods are all gone while it is scheduling or running has failed
    /// ("setting VMI to failed during scheduling because pod does not exist"); the VM controller takes it from there.
    pub(crate) fn launcher_gone(&mut self, namespace: &str, vmi: &str) -> Result<(), WorldError> {
        let Some(current) = self.api.store().vmi(namespace, vmi) else { return Ok(()) };
        let live = matches!(current.phase, VmiPhase::Scheduling | VmiPhase::Scheduled | VmiPhase::Running);
        if !live || self.api.store().vmi_pods(namespace, vmi).next().is_some() {
            return Ok(());
        }
        let was = format!("{:?}", current.phase);
        self.api
            .update_vmi(namespace, vmi, &self.kubevirt.controller, |vmi| vmi.phase = VmiPhase::Failed)
            .expect("read above");
        self.run_ended(namespace, vmi);
        let now = self.now();
        if let Some(vm) = self.kubevirt.vms.get_mut(namespace, vmi) {
            vm.start_requested = now;
        }
        let object = Named("VirtualMachineInstance", namespace, vmi);
        self.record("vmi-controller", &object, "Failed", &[("reason", "PodNotExist"), ("was", &was)])?;
        self.schedule_at(self.now(), Event::SyncVm { namespace: namespace.into(), vm: vmi.into() })
    }
}

/// What a world tells of its VMs: read-only, for the scheduler's volume binding, tests and reports.
impl World {
    /// The node a VM's WaitForFirstConsumer volume is bound to (local storage: its pods can run nowhere else).
    pub(crate) fn volume_node(&self, namespace: &str, vm: &str) -> Option<&str> {
        self.kubevirt.vms.get(namespace, vm)?.volume_node.as_deref()
    }

    /// A VM's status as `kubectl get vm` prints it (KubeVirt's `printableStatus`), of the states the twin has:
    /// `Stopped` (halted, or its VMI ended and no new one exists), `CrashLoopBackOff` (a start backoff is running),
    /// `Starting` (asked to run, its VMI not Running yet, including while its VMI create is refused), `Running`.
    pub fn vm_status(&self, namespace: &str, name: &str) -> Option<&'static str> {
        let vm = self.kubevirt.vms.get(namespace, name)?;
        let vmi = self.api.store().vmi(namespace, name);
        if vm.start_failure.as_ref().is_some_and(|failure| failure.retry_after > self.now()) {
            return Some("CrashLoopBackOff");
        }
        Some(match vmi.map(|vmi| vmi.phase) {
            Some(VmiPhase::Running) => "Running",
            _ if vm.halted => "Stopped",
            Some(phase) if phase.is_final() => "Stopped",
            _ => "Starting",
        })
    }

    /// A VM as KubeVirt's VM controller holds it: its spec and whether it was stopped (`None`: no such VM).
    pub fn vm(&self, namespace: &str, name: &str) -> Option<(&VmSpec, bool)> {
        self.kubevirt.vms.get(namespace, name).map(|vm| (&vm.spec, vm.halted))
    }

    /// Every VM's namespace and name, sorted.
    pub fn vm_names(&self) -> Vec<(String, String)> {
        let mut names: Vec<(String, String)> =
            self.kubevirt.vms.iter().map(|(namespace, name, _)| (namespace.to_owned(), name.to_owned())).collect();
        names.sort();
        names
    }

    /// How long a VM's last start waited (asked to run → Running), once it ran.
    pub fn last_start_wait(&self, namespace: &str, name: &str) -> Option<Millis> {
        self.kubevirt.vms.get(namespace, name)?.last_start_wait
    }

    /// VMs in `CrashLoopBackOff` now: a start failure whose backoff has not run out.
    pub fn vms_in_crash_loop(&self) -> u64 {
        let now = self.now();
        self.kubevirt.vms.values().filter(|vm| vm.start_failure.as_ref().is_some_and(|f| f.retry_after > now)).count()
            as u64
    }

    /// How long each VM asked to run and not Running yet has waited so far, in ms (VM order): a report counts them
    /// as start waits of at least this much, so a cluster too small to start them cannot look fast.
    pub fn waiting_to_start(&self) -> Vec<u64> {
        let now = self.now();
        let mut waiting: Vec<_> = self
            .kubevirt
            .vms
            .iter()
            .filter(|(_, _, vm)| !vm.halted)
            .filter(|(namespace, name, _)| {
                self.api.store().vmi(namespace, name).is_none_or(|vmi| vmi.phase != VmiPhase::Running)
            })
            .map(|(namespace, name, vm)| ((namespace, name), vm))
            .collect();
        waiting.sort_unstable_by_key(|(key, _)| *key);
        waiting.into_iter().map(|(_, vm)| now.0.saturating_sub(vm.start_requested.0)).collect()
    }
}

/// Whether a pod is the temporary pod that binds a WaitForFirstConsumer volume.
fn is_volume_binder(store: &View, namespace: &str, pod: &str) -> bool {
    store.pod(namespace, pod).is_some_and(|pod| {
        pod.annotations.get(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING).map(String::as_str) == Some(keys::TRUE)
    })
}

/// `virt-launcher-<vmi>-<five digits>`: KubeVirt's generated suffix, here the kernel's event count (deterministic).
fn launcher_name(vmi: &str, handled: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(handled % 100_000);
    ["virt-launcher-", vmi, "-", &"00000"[digits.len()..], digits].concat()
}

#[cfg(test)]
mod tests {
    use super::launcher_name;

    #[test]
    fn launcher_names_carry_five_digits() {
        assert_eq!(launcher_name("vm-1", 42), "virt-launcher-vm-1-00042");
        assert_eq!(launcher_name("vm-1", 1_234_567), "virt-launcher-vm-1-34567");
        assert_eq!(launcher_name("vm-1", 0), format!("virt-launcher-vm-1-{:05}", 0));
    }
}
