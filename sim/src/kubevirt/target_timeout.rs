//! When KubeVirt's migration controller deletes a pending migration target pod
//! (pkg/virt-controller/watch/migration/migration.go, `handlePendingPodTimeout`).

/// migration.go: a target pod Pending with `PodScheduled=False/Unschedulable` is deleted after this long.
pub const UNSCHEDULABLE_TIMEOUT_SECONDS: u64 = 300;
/// migration.go: a target pod Pending for any other reason (a gated pod among them) is deleted after this long.
pub const PENDING_TIMEOUT_SECONDS: u64 = 900;

/// The migration's phase, as far as the timeouts care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationPhase {
    Pending,
    Scheduling,
    /// Scheduled or any later phase: the timeouts are no longer checked.
    Scheduled,
}

/// Why a target pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetTimeout {
    /// Event message `unschedulable pod <ns>/<name> timeout period exceeded`.
    Unschedulable,
    /// Event message `pending pod <ns>/<name> timeout period exceeded`.
    Pending,
}

/// The target pod's state the decision reads.
#[derive(Clone, Copy, Debug)]
pub struct TargetPod {
    pub pending: bool,
    /// `PodScheduled=False` with reason `Unschedulable` (not `SchedulingGated`).
    pub unschedulable: bool,
    /// Seconds since the pod's creationTimestamp.
    pub age_seconds: u64,
}

/// Whether the target pod times out now. The per-migration annotations
/// `kubevirt.io/migrationUnschedulablePodTimeoutSeconds` / `kubevirt.io/migrationPendingPodTimeoutSeconds` override
/// the constants (KubeVirt's functional-test hooks).
pub fn target_timeout(
    phase: MigrationPhase,
    pod: TargetPod,
    unschedulable_override: Option<u64>,
    pending_override: Option<u64>,
) -> Option<TargetTimeout> {
    if phase == MigrationPhase::Scheduled || !pod.pending {
        return None;
    }
    let unschedulable_after = unschedulable_override.unwrap_or(UNSCHEDULABLE_TIMEOUT_SECONDS);
    let pending_after = pending_override.unwrap_or(PENDING_TIMEOUT_SECONDS);
    if pod.unschedulable && pod.age_seconds >= unschedulable_after {
        return Some(TargetTimeout::Unschedulable);
    }
    (pod.age_seconds >= pending_after).then_some(TargetTimeout::Pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gated_target_waits_the_catch_all_timeout_not_the_unschedulable_one() {
        let gated = TargetPod { pending: true, unschedulable: false, age_seconds: 899 };
        assert_eq!(target_timeout(MigrationPhase::Pending, gated, None, None), None);
        let gated = TargetPod { age_seconds: 900, ..gated };
        assert_eq!(target_timeout(MigrationPhase::Pending, gated, None, None), Some(TargetTimeout::Pending));
        let unschedulable = TargetPod { pending: true, unschedulable: true, age_seconds: 300 };
        assert_eq!(
            target_timeout(MigrationPhase::Scheduling, unschedulable, None, None),
            Some(TargetTimeout::Unschedulable)
        );
        assert_eq!(target_timeout(MigrationPhase::Scheduled, unschedulable, None, None), None);
    }
}
