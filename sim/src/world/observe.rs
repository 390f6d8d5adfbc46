//! What a report samples from a world between runs of its loop: the run's metrics, and how many VMs sit in
//! `CrashLoopBackOff` now. Read-only: sampling never changes what the run does.

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
}
