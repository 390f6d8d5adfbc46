//! What a report samples from a world between runs of its loop: the run's metrics (what it samples of KubeVirt's VMs,
//! how many sit in `CrashLoopBackOff` and how long those not running yet have waited, is read beside KubeVirt's
//! handlers, in `crate::kubevirt`). Read-only: sampling never changes what the run does.

use super::World;
use crate::metrics::Metrics;

impl World {
    /// The run's metrics so far (start and gate waits, units in use, counts).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
