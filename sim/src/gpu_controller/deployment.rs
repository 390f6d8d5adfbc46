//! The GPU controller's Deployment: replicas on nodes, each serving the webhooks once its caches have synced, one
//! leader elected on a coordination.k8s.io Lease reconciling; crashes, restarts, evictions within the PodDisruptionBudget.
//!
//! Leader election follows client-go's defaults: lease duration 15 s, retry period 2 s (the renew deadline, 10 s,
//! matters only to a leader that cannot reach the API server, which the twin does not model yet). A live
//! leader renews on its retry grid, so no event is spent on renewals: a standby takes over at its first retry tick
//! at or after the last renewal plus the lease duration. A standby's informers are in sync all along; its taking
//! over is modelled by a fresh list of the store and a full reconcile pass (a resync), as a new leader's first pass
//! is.
//!
//! The chart's PodDisruptionBudget has `maxUnavailable: 1`: a drain evicts a replica only while every other one is
//! ready, and retries (kubectl drain retries refused evictions every 5 s).

use crate::kernel::Millis;

pub const LEASE_DURATION: Millis = Millis(15_000);
pub const RETRY_PERIOD: Millis = Millis(2_000);
/// kubectl drain's wait between refused evictions.
pub const EVICTION_RETRY: Millis = Millis(5_000);

/// A replica's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    /// Started at this time; ready once its caches have synced.
    Starting,
    /// Serving webhooks; a leader candidate.
    Ready,
    Down,
}

#[derive(Clone, Debug)]
pub struct Replica {
    pub name: String,
    pub node: String,
    pub state: ReplicaState,
    /// The phase of its retry grid (its start time).
    pub(super) started: Millis,
}

/// The Deployment's settings.
#[derive(Clone, Debug)]
pub struct DeploymentSpec {
    pub replicas: u32,
    /// Informers' initial list and sync.
    pub cache_sync: Millis,
    /// A crashed container's restart (kubelet's first CrashLoop backoff is 10 s).
    pub restart_after: Millis,
}

impl Default for DeploymentSpec {
    fn default() -> Self {
        DeploymentSpec { replicas: 2, cache_sync: Millis(2_000), restart_after: Millis(10_000) }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Deployment {
    pub spec: DeploymentSpec,
    pub replicas: Vec<Replica>,
    pub leader: Option<usize>,
    /// The Lease's `renewTime` as of the leader's last renewal (known once it stops renewing).
    pub(super) lease_renewed: Millis,
    pub(super) leader_stopped: bool,
    /// Leader elections won so far (the first included).
    pub elections: u32,
}

impl Deployment {
    pub(super) fn ready(&self) -> u32 {
        self.replicas.iter().filter(|r| r.state == ReplicaState::Ready).count() as u32
    }
}
