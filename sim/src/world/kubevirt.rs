//! KubeVirt's actors: the VM controller (render, VMI create with rate-limited retries), the VMI controller
//! (launcher create, deletion of finished VMIs), virt-handler (Running, stop).

use crate::log::Named;
use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::{Name, PodPhase, Vmi, VmiPhase};
use gpuclaim_engine::rules::{VmRender, render_vm};
use std::sync::Arc;

use std::collections::BTreeMap;

use super::{Event, StartFailure, VmSpec, VmState, World, WorldError};
use crate::kernel::Millis;
use crate::kubevirt::start::start_backoff_seconds;
use crate::launcher::render_launcher;

impl World {
    /// A tenant creates a VM (with the held claim it ordered for it, if any); the VM controller syncs it at once.
    pub(super) fn create_vm(&mut self, spec: VmSpec, ordered_claim: Option<String>) -> Result<(), WorldError> {
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
        self.vms.insert(&namespace, &name, state);
        self.sync_vm(&namespace, &name)
    }

    /// KubeVirt's VM controller (runStrategy Always): a VMI that ended goes, counting a start failure when it never
    /// ran; a new one is created once the start backoff allows (the VM shows `CrashLoopBackOff` meanwhile). The VMI is
    /// rendered and created through the VMI webhook; a refused create is retried through the work queue's rate
    /// limiter (condition `Failure`, reason `FailedCreate`), which counts no start failure: no VMI existed.
    pub(super) fn sync_vm(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(vm) = self.vms.get(namespace, name) else { return Ok(()) };
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
                self.vms.get_mut(namespace, name).expect("read above").start_failure = Some(failure);
                self.metrics.count(crate::metrics::START_FAILURE);
            }
            self.remove_vmi(namespace, name)?;
        }
        let vm = self.vms.get(namespace, name).expect("read above");
        if let Some(failure) = vm.start_failure.as_ref().filter(|failure| failure.retry_after > self.now()) {
            let (retry_after, consecutive) = (failure.retry_after, failure.consecutive);
            let fields: &[(&str, &str)] =
                &[("failures", &consecutive.to_string()), ("retry_at_ms", &retry_after.0.to_string())];
            self.record("vm-controller", &Named("VirtualMachine", namespace, name), "CrashLoopBackOff", fields)?;
            let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
            return self.schedule_at(retry_after, event);
        }
        let vm = self.vms.get(namespace, name).expect("read above");
        let object = Named("VirtualMachine", namespace, name);
        let mut vmi = Vmi {
            namespace: namespace.into(),
            name: name.into(),
            uid: ["uid-vmi-", name, "-", itoa::Buffer::new().format(self.kernel.handled())].concat().into(),
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
        match self.api.create_vmi(vmi, &self.kubevirt_controller) {
            Ok(_) => {
                if self.vm_retries.backing_off() {
                    self.vm_retries.forget(&item());
                }
                self.vms.get_mut(namespace, name).expect("read above").vmi_ran = false;
                self.record("vm-controller", &Named("VirtualMachineInstance", namespace, name), "Created", &[])?;
                let event = Event::CreateLauncher { namespace: namespace.into(), vmi: name.into() };
                self.schedule_at(self.now(), event)
            }
            Err(error) => {
                self.refused("vm-controller", &object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = self.vm_retries.when(&item(), self.now());
                let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// KubeVirt's VMI controller: the launcher pod, through the pod webhook; the VMI goes to Scheduling. A refused
    /// create is retried through the controller's rate limiter.
    pub(super) fn create_launcher(&mut self, namespace: &Name, vmi_name: &Name) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, vmi_name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Pending || self.api.store().vmi_pods(namespace, vmi_name).next().is_some() {
            return Ok(());
        }
        let Some(vm) = self.vms.get(namespace, vmi_name) else { return Ok(()) };
        let name = launcher_name(vmi_name, self.kernel.handled());
        let mut pod =
            render_launcher(vmi, &name, vm.spec.cpu_millis, vm.spec.memory_bytes, self.time(), &self.launcher_parts);
        // A WaitForFirstConsumer volume not bound yet: first the temporary pod (same labels and requests), whose
        // node the volume binds to.
        let binder = vm.spec.wffc_volume && vm.volume_node.is_none();
        if binder {
            Arc::make_mut(&mut pod.annotations)
                .insert(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING.to_owned(), keys::TRUE.to_owned());
        }
        let object = Named("Pod", namespace, &name);
        let item = || [namespace, "/", vmi_name].concat();
        match self.api.create_pod(pod, &self.kubevirt_controller) {
            Ok(pod) => {
                let gated = !pod.scheduling_gates.is_empty();
                if self.vmi_retries.backing_off() {
                    self.vmi_retries.forget(&item());
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
                        .update_vmi(namespace, vmi_name, &self.kubevirt_controller, |vmi| {
                            vmi.phase = VmiPhase::Scheduling
                        })
                        .expect("the VMI was read above");
                }
                self.schedule_at(self.now(), Event::Schedule { namespace: namespace.into(), pod: name.into() })
            }
            Err(error) => {
                let vmi_object = Named("VirtualMachineInstance", namespace, vmi_name);
                self.refused("vmi-controller", &vmi_object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = self.vmi_retries.when(&item(), self.now());
                let event = Event::CreateLauncher { namespace: namespace.into(), vmi: vmi_name.into() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// The temporary pod runs: the volume binds to its node (local storage), the pod is deleted, and the launcher
    /// follows, bound by the volume to that node.
    pub(super) fn volume_bound(&mut self, namespace: &str, pod: &str, vmi: &str, node: &str) -> Result<(), WorldError> {
        if let Some(vm) = self.vms.get_mut(namespace, vmi) {
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
    pub(super) fn vmi_running(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Scheduled {
            return Ok(());
        }
        let node = vmi.node_name.clone().unwrap_or_default();
        self.api
            .update_vmi(namespace, name, &self.kubevirt_handler, |vmi| vmi.phase = VmiPhase::Running)
            .expect("read above");
        let object = Named("VirtualMachineInstance", namespace, name);
        self.record("virt-handler", &object, "Running", &[("node", &node)])?;
        self.stats.vm_starts += 1;
        let mut units: BTreeMap<String, i64> = BTreeMap::new();
        for gpu in self.api.store().vmi(namespace, name).expect("updated above").gpus.iter() {
            *units.entry(gpu.device_name.clone()).or_insert(0) += 1;
        }
        let now = self.now();
        if let Some(vm) = self.vms.get_mut(namespace, name) {
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
        let lifetime = self.vms.get(namespace, name).and_then(|vm| vm.spec.lifetime);
        if let Some(lifetime) = lifetime {
            let stop = Event::StopVm { namespace: namespace.into(), vm: name.into() };
            self.schedule_at(self.now() + lifetime, stop)?;
        }
        Ok(())
    }

    /// The tenant stops the VM (runStrategy Halted, which also clears its start failures): the VMI ends
    /// (Succeeded), its pods exit, KubeVirt deletes it a moment later, and the tenant then deletes the VM. A VM
    /// stopped before it has a VMI (refused creates, a start backoff) is deleted at once.
    pub(super) fn stop_vm(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        if let Some(vm) = self.vms.get_mut(namespace, name) {
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
            .update_vmi(namespace, name, &self.kubevirt_handler, |vmi| vmi.phase = VmiPhase::Succeeded)
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
        if let Some(vm) = self.vms.get_mut(namespace, vmi) {
            for (resource, count) in std::mem::take(&mut vm.counted_units) {
                self.metrics.units(&resource, -count, now);
            }
        }
    }

    /// KubeVirt deletes a finished VMI. A halted VM's tenant then deletes the VM (and the held claim it ordered for
    /// it); a VM that should run gets a new VMI from the VM controller.
    pub(super) fn delete_vmi(&mut self, namespace: &Name, name: &Name) -> Result<(), WorldError> {
        if self.api.store().vmi(namespace, name).is_none_or(|vmi| !vmi.phase.is_final()) {
            return Ok(());
        }
        self.remove_vmi(namespace, name)?;
        if !self.vms.get(namespace, name).is_some_and(|vm| vm.halted) {
            let event = Event::SyncVm { namespace: namespace.into(), vm: name.into() };
            return self.schedule_at(self.now(), event);
        }
        self.forget_vm(namespace, name)
    }

    /// The tenant deletes a stopped VM, and the held claim it ordered for it.
    fn forget_vm(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        if let Some(vm) = self.vms.remove(namespace, name)
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
    pub(super) fn delete_launcher(&mut self, namespace: &str, vm: &str) -> Result<(), WorldError> {
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
    pub(super) fn launcher_gone(&mut self, namespace: &str, vmi: &str) -> Result<(), WorldError> {
        let Some(current) = self.api.store().vmi(namespace, vmi) else { return Ok(()) };
        let live = matches!(current.phase, VmiPhase::Scheduling | VmiPhase::Scheduled | VmiPhase::Running);
        if !live || self.api.store().vmi_pods(namespace, vmi).next().is_some() {
            return Ok(());
        }
        let was = format!("{:?}", current.phase);
        self.api
            .update_vmi(namespace, vmi, &self.kubevirt_controller, |vmi| vmi.phase = VmiPhase::Failed)
            .expect("read above");
        self.run_ended(namespace, vmi);
        if let Some(vm) = self.vms.get_mut(namespace, vmi) {
            vm.start_requested = self.kernel.now();
        }
        let object = Named("VirtualMachineInstance", namespace, vmi);
        self.record("vmi-controller", &object, "Failed", &[("reason", "PodNotExist"), ("was", &was)])?;
        self.schedule_at(self.now(), Event::SyncVm { namespace: namespace.into(), vm: vmi.into() })
    }
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
