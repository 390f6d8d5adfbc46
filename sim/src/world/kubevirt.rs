//! KubeVirt's actors: the VM controller (render, VMI create with rate-limited retries), the VMI controller
//! (launcher create, deletion of finished VMIs), virt-handler (Running, stop).

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{PodPhase, Vmi, VmiPhase};
use gpuclaim_engine::rules::{VmRender, render_vm};

use super::{Event, VmSpec, VmState, World, WorldError};
use crate::launcher::render_launcher;

impl World {
    /// A tenant creates a VM (with the held claim it ordered for it, if any); the VM controller syncs it at once.
    pub(super) fn create_vm(&mut self, spec: VmSpec, ordered_claim: Option<String>) -> Result<(), WorldError> {
        let key = (spec.namespace.clone(), spec.name.clone());
        self.vms.insert(key.clone(), VmState { spec, ordered_claim });
        self.sync_vm(&key.0, &key.1)
    }

    /// KubeVirt's VM controller: renders the VMI and creates it; a refused create is retried through the work
    /// queue's rate limiter (condition `Failure`, reason `FailedCreate`).
    pub(super) fn sync_vm(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(vm) = self.vms.get(&(namespace.to_owned(), name.to_owned())) else { return Ok(()) };
        if self.api.store().vmi(namespace, name).is_some() {
            return Ok(());
        }
        let object = format!("VirtualMachine {namespace}/{name}");
        let mut vmi = Vmi {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: format!("uid-vmi-{name}-{}", self.kernel.handled()),
            ..Vmi::default()
        };
        vmi.labels.insert("kubevirt.io/domain".to_owned(), name.to_owned());
        match render_vm(&vm.spec.gpus, self.claims_enabled) {
            Ok(VmRender::Nothing) => {}
            Ok(VmRender::Raw(gpus)) => vmi.gpus = gpus,
            Ok(VmRender::References { annotation }) => {
                vmi.labels.insert(keys::LABEL_CLAIMS.to_owned(), keys::TRUE.to_owned());
                vmi.annotations.insert(keys::ANNOTATION_CLAIMS.to_owned(), annotation);
            }
            Err(refusal) => {
                let reason = gpuclaim_engine::rules::Refusal::reason(&refusal);
                return self.refused("vm-controller", &object, "RenderRefused", reason, refusal.to_string());
            }
        }
        let item = format!("{namespace}/{name}");
        match self.api.create_vmi(vmi) {
            Ok(_) => {
                self.vm_retries.forget(&item);
                self.record("vm-controller", &format!("VirtualMachineInstance {namespace}/{name}"), "Created", vec![])?;
                let event = Event::CreateLauncher { namespace: namespace.to_owned(), vmi: name.to_owned() };
                self.schedule_at(self.now(), event)
            }
            Err(error) => {
                self.refused("vm-controller", &object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = self.vm_retries.when(&item, self.now());
                let event = Event::SyncVm { namespace: namespace.to_owned(), vm: name.to_owned() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// KubeVirt's VMI controller: the launcher pod, through the pod webhook; the VMI goes to Scheduling. A refused
    /// create is retried through the controller's rate limiter.
    pub(super) fn create_launcher(&mut self, namespace: &str, vmi_name: &str) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, vmi_name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Pending || self.api.store().vmi_pods(namespace, vmi_name).next().is_some() {
            return Ok(());
        }
        let Some(vm) = self.vms.get(&(namespace.to_owned(), vmi_name.to_owned())) else { return Ok(()) };
        let name = format!("virt-launcher-{vmi_name}-{:05}", self.kernel.handled() % 100_000);
        let pod = render_launcher(vmi, &name, vm.spec.cpu_millis, vm.spec.memory_bytes, self.time());
        let object = format!("Pod {namespace}/{name}");
        let item = format!("{namespace}/{vmi_name}");
        match self.api.create_pod(pod) {
            Ok(pod) => {
                let gated = !pod.scheduling_gates.is_empty();
                self.vmi_retries.forget(&item);
                self.record("vmi-controller", &object, "Created", vec![("gated", gated.to_string())])?;
                self.api
                    .update_vmi(namespace, vmi_name, |vmi| vmi.phase = VmiPhase::Scheduling)
                    .expect("the VMI was read above");
                self.schedule_at(self.now(), Event::Schedule { namespace: namespace.to_owned(), pod: name })
            }
            Err(error) => {
                let vmi_object = format!("VirtualMachineInstance {namespace}/{vmi_name}");
                self.refused("vmi-controller", &vmi_object, "FailedCreate", error.reason(), error.to_string())?;
                let retry = self.vmi_retries.when(&item, self.now());
                let event = Event::CreateLauncher { namespace: namespace.to_owned(), vmi: vmi_name.to_owned() };
                self.schedule_at(self.now() + retry, event)
            }
        }
    }

    /// virt-handler: the domain runs.
    pub(super) fn vmi_running(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, name) else { return Ok(()) };
        if vmi.phase != VmiPhase::Scheduled {
            return Ok(());
        }
        let node = vmi.node_name.clone().unwrap_or_default();
        self.api.update_vmi(namespace, name, |vmi| vmi.phase = VmiPhase::Running).expect("read above");
        let object = format!("VirtualMachineInstance {namespace}/{name}");
        self.record("virt-handler", &object, "Running", vec![("node", node)])?;
        self.stats.vm_starts += 1;
        let lifetime = self.vms.get(&(namespace.to_owned(), name.to_owned())).and_then(|vm| vm.spec.lifetime);
        if let Some(lifetime) = lifetime {
            let stop = Event::StopVm { namespace: namespace.to_owned(), vm: name.to_owned() };
            self.schedule_at(self.now() + lifetime, stop)?;
        }
        Ok(())
    }

    /// The tenant stops the VM: the VMI ends (Succeeded), its pods exit, KubeVirt deletes it a moment later.
    pub(super) fn stop_vm(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let Some(vmi) = self.api.store().vmi(namespace, name) else { return Ok(()) };
        if vmi.phase.is_final() {
            return Ok(());
        }
        self.api.update_vmi(namespace, name, |vmi| vmi.phase = VmiPhase::Succeeded).expect("read above");
        self.record("virt-handler", &format!("VirtualMachineInstance {namespace}/{name}"), "Succeeded", vec![])?;
        let pods: Vec<String> = self.api.store().vmi_pods(namespace, name).map(|pod| pod.name.clone()).collect();
        for pod in pods {
            self.pod_ended(namespace, &pod, PodPhase::Succeeded)?;
        }
        let delete = Event::DeleteVmi { namespace: namespace.to_owned(), vmi: name.to_owned() };
        self.schedule_at(self.now() + self.timing.vmi_delete_after, delete)
    }

    /// The VMI goes, and with it (the garbage collector) its pods and template claims; a held claim the tenant
    /// ordered for this VM is deleted by the tenant.
    pub(super) fn delete_vmi(&mut self, namespace: &str, name: &str) -> Result<(), WorldError> {
        let pods: Vec<String> = self.api.store().vmi_pods(namespace, name).map(|pod| pod.name.clone()).collect();
        for pod in &pods {
            self.scheduler_forget(namespace, pod);
        }
        if self.api.delete_vmi(namespace, name).is_err() {
            return Ok(());
        }
        self.record("vmi-controller", &format!("VirtualMachineInstance {namespace}/{name}"), "Deleted", vec![])?;
        if let Some(vm) = self.vms.remove(&(namespace.to_owned(), name.to_owned()))
            && let Some(claim) = vm.ordered_claim
            && self.api.delete_claim(namespace, &claim, None).is_ok()
        {
            self.record("tenant", &format!("GPUClaim {namespace}/{claim}"), "Deleted", vec![])?;
        }
        self.scheduler_cluster_changed()
    }
}
