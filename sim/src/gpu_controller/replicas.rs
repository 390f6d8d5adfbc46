//! The GPU controller's Deployment at work: its replicas placed, crashing, restarting, evicted and replaced, and the
//! leader election among them (the state and the timings are in [`super::deployment`]).

use super::GpuController;
use super::deployment::{
    Deployment, DeploymentSpec, EVICTION_RETRY, LEASE_DURATION, RETRY_PERIOD, Replica, ReplicaState,
};
use crate::kernel::Millis;
use crate::world::{Event, HostAction, World, WorldError};

impl World {
    /// Places the replicas on the first nodes by name (the chart spreads them over nodes), ready, replica 0 leading.
    pub fn deploy_controller(&mut self, spec: DeploymentSpec) {
        let nodes: Vec<String> = self.api.store().nodes().map(|n| n.name.clone()).collect();
        let replicas = (0..spec.replicas as usize)
            .map(|i| Replica {
                name: format!("gpuclaim-controller-{i}"),
                node: nodes.get(i % nodes.len().max(1)).cloned().unwrap_or_default(),
                state: ReplicaState::Ready,
                started: self.now(),
            })
            .collect();
        self.deployment =
            Deployment { spec, replicas, leader: None, lease_renewed: self.now(), ..Deployment::default() };
        if !self.deployment.replicas.is_empty() {
            self.deployment.leader = Some(0);
            self.deployment.elections = 1;
            // The leader's first pass goes over everything at once (it publishes the classes before any order
            // reads them), as the live controller's first pass after its caches sync.
            let now = self.time();
            self.controller_mut().lead(now);
            self.wake_controller_at(self.now()).expect("now is never in the past");
        }
        self.api.admission.ready_replicas = self.deployment.ready();
    }

    pub fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// Whether a leader reconciles now.
    pub(crate) fn has_leader(&self) -> bool {
        self.deployment.leader.is_some()
    }

    fn publish_endpoints(&mut self) -> Result<(), WorldError> {
        let ready = self.deployment.ready();
        if ready != self.api.admission.ready_replicas {
            self.api.admission.ready_replicas = ready;
            self.record("webhook", &"Service gpuclaim-webhook", "Endpoints", &[("ready", &ready.to_string())])?;
        }
        Ok(())
    }

    /// A replica's process dies (crash, or its node lost); the kubelet restarts it unless `restart` is false (its
    /// pod is gone: the Deployment makes a new one elsewhere later).
    pub(crate) fn replica_down(&mut self, index: usize, restart: bool) -> Result<(), WorldError> {
        if self.ask_host(HostAction::CrashReplica { index, restart })? {
            return Ok(());
        }
        let Some(replica) = self.deployment.replicas.get(index) else { return Ok(()) };
        if replica.state == ReplicaState::Down {
            return Ok(());
        }
        let (name, started) = (replica.name.clone(), replica.started);
        self.deployment.replicas[index].state = ReplicaState::Down;
        self.record("gpu-controller", &format_args!("Pod {name}"), "Down", &[])?;
        if self.deployment.leader == Some(index) {
            // Its process stops: what it measured stays with it until the next leader's process replaces it.
            let now = self.time();
            self.controller_mut().step_down(now);
            // Its last renewal: the latest tick of its retry grid.
            let since = self.now().0.saturating_sub(started.0);
            self.deployment.lease_renewed = Millis(started.0 + since / RETRY_PERIOD.0 * RETRY_PERIOD.0);
            self.deployment.leader = None;
            self.deployment.leader_stopped = true;
            self.schedule_takeovers()?;
        }
        self.publish_endpoints()?;
        if restart {
            let at = self.now() + self.deployment.spec.restart_after;
            self.schedule_at(at, Event::ReplicaStart { index })?;
        }
        Ok(())
    }

    /// The replica's container starts; its caches sync, then it is ready.
    pub(crate) fn replica_start(&mut self, index: usize, node: Option<String>) -> Result<(), WorldError> {
        let now = self.now();
        let Some(replica) = self.deployment.replicas.get_mut(index) else { return Ok(()) };
        if replica.state != ReplicaState::Down {
            return Ok(());
        }
        replica.state = ReplicaState::Starting;
        replica.started = now;
        if let Some(node) = node {
            replica.node = node;
        }
        let name = replica.name.clone();
        self.record("gpu-controller", &format_args!("Pod {name}"), "Started", &[])?;
        let at = now + self.deployment.spec.cache_sync;
        self.schedule_at(at, Event::ReplicaSynced { index })
    }

    pub(crate) fn replica_synced(&mut self, index: usize) -> Result<(), WorldError> {
        let Some(replica) = self.deployment.replicas.get_mut(index) else { return Ok(()) };
        if replica.state != ReplicaState::Starting {
            return Ok(());
        }
        replica.state = ReplicaState::Ready;
        let name = replica.name.clone();
        self.record("gpu-controller", &format_args!("Pod {name}"), "Ready", &[])?;
        self.publish_endpoints()?;
        self.schedule_takeovers()
    }

    /// Each ready standby tries at its first retry tick once the lease has expired.
    fn schedule_takeovers(&mut self) -> Result<(), WorldError> {
        if self.deployment.leader.is_some() || !self.deployment.leader_stopped {
            return Ok(());
        }
        let expiry = self.deployment.lease_renewed + LEASE_DURATION;
        let ready: Vec<(usize, Millis)> = self
            .deployment
            .replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.state == ReplicaState::Ready)
            .map(|(i, r)| (i, r.started))
            .collect();
        for (index, started) in ready {
            let from = expiry.max(self.now());
            let ticks = (from.0.saturating_sub(started.0)).div_ceil(RETRY_PERIOD.0);
            let at = Millis(started.0 + ticks * RETRY_PERIOD.0).max(from);
            self.schedule_at(at, Event::LeaseAcquire { index })?;
        }
        Ok(())
    }

    /// A standby's retry tick: it takes the expired lease, lists the store afresh and resyncs.
    pub(crate) fn lease_acquire(&mut self, index: usize) -> Result<(), WorldError> {
        let expired = self.now() >= self.deployment.lease_renewed + LEASE_DURATION;
        let ready = self.deployment.replicas.get(index).is_some_and(|r| r.state == ReplicaState::Ready);
        if self.deployment.leader.is_some() || !expired || !ready {
            return Ok(());
        }
        self.deployment.leader = Some(index);
        self.deployment.leader_stopped = false;
        self.deployment.lease_renewed = self.now();
        self.deployment.elections += 1;
        let name = self.deployment.replicas[index].name.clone();
        self.record("gpu-controller", &"Lease cozy-gpuclaim/gpuclaim", "Acquired", &[("holder", &name)])?;
        let (user, variant) = (self.controller().user.clone(), self.controller().variant());
        // The new leader runs the same engine: a counterfactual must not turn back into the shipped rules at the
        // first failover.
        let mut controller = GpuController::new(self.api.store().clone(), user, variant);
        let now = self.time();
        controller.lead(now);
        // The process it replaces measured what it measured while it led (its own series, as a replica's are).
        let retired = self.controller().figures().readings(now);
        self.retired_readings.merge(&retired);
        self.controller = Some(Box::new(controller));
        let now = self.now();
        self.wake_controller_at(now)
    }

    /// kubectl drain's eviction of the controller replicas on `node`, within the PodDisruptionBudget.
    pub(crate) fn evict_replicas(&mut self, node: &str) -> Result<(), WorldError> {
        let on_node: Vec<usize> = (0..self.deployment.replicas.len())
            .filter(|i| {
                self.deployment.replicas[*i].node == node && self.deployment.replicas[*i].state != ReplicaState::Down
            })
            .collect();
        for index in on_node {
            let all_others_ready =
                self.deployment.replicas.iter().enumerate().all(|(i, r)| i == index || r.state == ReplicaState::Ready);
            let name = self.deployment.replicas[index].name.clone();
            if !all_others_ready {
                let message = "Cannot evict pod as it would violate the pod's disruption budget.".to_owned();
                self.refused("operator", &format_args!("Pod {name}"), "EvictionRefused", "TooManyRequests", message)?;
                let node = node.to_owned();
                self.schedule_at(self.now() + EVICTION_RETRY, Event::EvictReplicas { node })?;
                continue;
            }
            self.record("operator", &format_args!("Pod {name}"), "Evicted", &[])?;
            self.replica_down(index, false)?;
            // The Deployment's new pod: scheduled on another schedulable node, started by its kubelet.
            let target = self.replacement_node(node).unwrap_or_default();
            let delay = self.pod_start_delay();
            self.schedule_at(self.now() + delay, Event::ReplicaMoved { index, node: target })?;
        }
        Ok(())
    }

    /// Replicas on a lost node die with it; the Deployment replaces them once their pods are evicted.
    pub(crate) fn replicas_lost_with(&mut self, node: &str) -> Result<(), WorldError> {
        let on_node: Vec<usize> =
            (0..self.deployment.replicas.len()).filter(|i| self.deployment.replicas[*i].node == node).collect();
        for index in on_node {
            self.replica_down(index, false)?;
        }
        Ok(())
    }

    /// The taint manager evicted the lost node's pods: the Deployment's replacements start elsewhere.
    pub(crate) fn replace_replicas_from(&mut self, node: &str) -> Result<(), WorldError> {
        let on_node: Vec<usize> = (0..self.deployment.replicas.len())
            .filter(|i| {
                self.deployment.replicas[*i].node == node && self.deployment.replicas[*i].state == ReplicaState::Down
            })
            .collect();
        for index in on_node {
            let target = self.replacement_node(node);
            self.replica_start(index, target)?;
        }
        Ok(())
    }

    /// Where the Deployment's replacement for a replica leaving `leaving` runs: as the chart's topology spread on the
    /// hostname (`maxSkew: 1`) has it, a node that takes pods with the fewest other live replicas, the first by name
    /// among those. Taking the first node that takes pods instead put both replicas on one node after a node loss,
    /// and the next loss of that node took the controller and the webhooks down together for minutes (soak: suite
    /// 14, seeds 687, 783 and 921).
    fn replacement_node(&self, leaving: &str) -> Option<String> {
        let live_on = |node: &str| {
            self.deployment.replicas.iter().filter(|r| r.node == node && r.state != ReplicaState::Down).count()
        };
        self.api
            .store()
            .nodes()
            .filter(|n| n.name != leaving && !n.unschedulable && n.ready)
            .min_by_key(|n| live_on(&n.name))
            .map(|n| n.name.clone())
    }
}
