//! Tenants' workloads: VMs arriving as a Poisson process with exponential lifetimes, for the whole run or within a
//! window of it (a surge); a workload that orders held claims first orders one per VM through the order webhook (a
//! refused order is counted, and no VM is created), and deletes it when the VM is gone.

use gpuclaim_engine::model::Claim;
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};

use super::{Event, VmSpec, World, WorldError};
use crate::kernel::Millis;
use crate::rng::exponential;

/// VMs arriving as a Poisson process.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The VMs' template (named `<template name>-<n>`).
    pub template: VmSpec,
    /// A held claim each VM's tenant orders first (`None`: the template's `gpus` as they are).
    pub held_claim: Option<ClaimTemplate>,
    pub mean_interarrival: Millis,
    pub mean_lifetime: Millis,
    /// Arrivals begin at this time.
    pub from: Millis,
    /// No arrival after this time (`None`: to the run's end).
    pub until: Option<Millis>,
    arrived: u64,
}

impl Workload {
    /// VMs like `template` arriving `arrivals_per_hour` on average, each running an exponentially distributed time
    /// of mean `mean_lifetime`.
    pub fn new(template: VmSpec, arrivals_per_hour: f64, mean_lifetime: Millis) -> Self {
        let mean_interarrival = Millis(((3_600_000.0 / arrivals_per_hour) as u64).max(1));
        Workload {
            template,
            held_claim: None,
            mean_interarrival,
            mean_lifetime,
            from: Millis(0),
            until: None,
            arrived: 0,
        }
    }

    /// Arrivals only from `from` until `until` (the first drawn from `from`).
    pub fn within(mut self, from: Millis, until: Option<Millis>) -> Self {
        (self.from, self.until) = (from, until);
        self
    }

    /// Each VM's tenant orders a held claim of `count` units of `class` first, and the VM uses it.
    pub fn ordering(mut self, held_claim: ClaimTemplate) -> Self {
        self.held_claim = Some(held_claim);
        self
    }
}

impl World {
    /// Adds a workload; its first arrival is drawn at once.
    pub fn add_workload(&mut self, workload: Workload) -> Result<(), WorldError> {
        let index = self.workloads.len();
        let first = exponential(self.streams.of(&format!("workload/{index}")), workload.mean_interarrival);
        let at = self.now().max(workload.from) + first;
        let open = workload.until.is_none_or(|until| at <= until);
        self.workloads.push(workload);
        if !open {
            return Ok(());
        }
        self.schedule_at(at, Event::Arrival { workload: index })
    }

    pub(super) fn arrival(&mut self, index: usize) -> Result<(), WorldError> {
        let stream = format!("workload/{index}");
        let workload = &mut self.workloads[index];
        workload.arrived += 1;
        let mut vm = workload.template.clone();
        vm.name = format!("{}-{}", vm.name, workload.arrived);
        let held_claim = workload.held_claim.clone();
        let (mean_lifetime, mean_interarrival, until) =
            (workload.mean_lifetime, workload.mean_interarrival, workload.until);
        vm.lifetime = Some(exponential(self.streams.of(&stream), mean_lifetime));
        let next = self.now() + exponential(self.streams.of(&stream), mean_interarrival);
        if until.is_none_or(|until| next <= until) {
            self.schedule_at(next, Event::Arrival { workload: index })?;
        }
        let Some(order) = held_claim else { return self.create_vm(vm, None) };
        let claim = Claim {
            namespace: vm.namespace.clone().into(),
            name: vm.name.clone().into(),
            uid: format!("uid-claim-{}-{}", vm.name, self.kernel.handled()).into(),
            created: self.time(),
            class: order.class.into(),
            count: order.count,
            ..Claim::default()
        };
        let object = format!("GPUClaim {}/{}", claim.namespace, claim.name);
        match self.api.create_claim(claim, &crate::users::tenant(&vm.namespace)) {
            Ok(_) => {
                self.metrics.count(crate::metrics::ORDER_ACCEPTED);
                self.record("tenant", &object, "Ordered", &[])?;
                vm.gpus = vec![GpuEntry::Claim(vm.name.clone())];
                let claim = vm.name.clone();
                self.create_vm(vm, Some(claim))
            }
            Err(error) => self.refused("tenant", &object, "OrderRefused", error.reason(), error.to_string()),
        }
    }
}
