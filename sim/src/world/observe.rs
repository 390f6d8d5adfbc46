//! What a report samples from a world between runs of its loop: the run's metrics, how many VMs sit in
//! `CrashLoopBackOff` now, and how long the VMs not running yet have waited so far. Read-only: sampling never changes
//! what the run does.

use gpuclaim_engine::model::VmiPhase;

use super::World;
use crate::metrics::Metrics;

impl World {
    /// The run's metrics so far (start and gate waits, units in use, counts).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// VMs in `CrashLoopBackOff` now: a start failure whose backoff has not run out.
    pub fn vms_in_crash_loop(&self) -> u64 {
        let now = self.now();
        self.vms.values().filter(|vm| vm.start_failure.as_ref().is_some_and(|f| f.retry_after > now)).count() as u64
    }

    /// How long each VM asked to run and not Running yet has waited so far, in ms (VM order): a report counts them
    /// as start waits of at least this much, so a cluster too small to start them cannot look fast.
    pub fn waiting_to_start(&self) -> Vec<u64> {
        let now = self.now();
        let mut waiting: Vec<_> = self
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
