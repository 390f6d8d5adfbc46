//! Faults a scenario switches on, by time (timed events) or by rate (here): API conflicts on the GPU controller's
//! writes at probability p (another writer got in first), a watch lag drawn per change, controller crashes, node
//! losses and device failures as Poisson processes. Each draws from its own stream, so switching one on changes no
//! other actor's draws.

use gpuclaim_engine::model::Node;
use rand::RngExt;

use super::{Event, World, WorldError};
use crate::kernel::Millis;
use crate::rng::exponential;

/// The faults of a run (all off by default).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability that one of the GPU controller's writes meets a conflict.
    pub conflict_rate: f64,
    /// Each watch change arrives after a lag drawn uniformly from [the base lag, this].
    pub watch_lag_max: Option<Millis>,
    /// Mean time between crashes of a (random) controller replica.
    pub controller_crash_every: Option<Millis>,
    /// Mean time between losses of a (random) node; a lost node comes back after `node_loss_duration`.
    pub node_loss_every: Option<Millis>,
    pub node_loss_duration: Option<Millis>,
    /// Mean time between device failures (one unit of one GPU resource on a random node).
    pub device_failure_every: Option<Millis>,
}

/// Which Poisson process ticked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    ControllerCrash,
    NodeLoss,
    DeviceFailure,
}

impl World {
    /// Switches the faults on from now.
    pub fn set_faults(&mut self, faults: Faults) -> Result<(), WorldError> {
        if let Some(max) = faults.watch_lag_max {
            let stream = crate::rng::actor_stream(self.seed, "faults/watch-lag");
            self.api.watch().jitter(max, stream);
        }
        for (kind, every) in [
            (FaultKind::ControllerCrash, faults.controller_crash_every),
            (FaultKind::NodeLoss, faults.node_loss_every),
            (FaultKind::DeviceFailure, faults.device_failure_every),
        ] {
            if let Some(every) = every {
                let first = exponential(self.streams.of(stream_of(kind)), every);
                self.schedule_at(self.now() + first, Event::Fault { kind })?;
            }
        }
        self.faults = faults;
        Ok(())
    }

    /// Whether the controller's next write meets an injected conflict.
    pub(crate) fn injected_conflict(&mut self) -> bool {
        self.faults.conflict_rate > 0.0 && {
            let draw = self.streams.of("faults/conflicts").random_range(0..1_000_000u32);
            f64::from(draw) < self.faults.conflict_rate * 1_000_000.0
        }
    }

    pub(super) fn fault(&mut self, kind: FaultKind) -> Result<(), WorldError> {
        let every = match kind {
            FaultKind::ControllerCrash => self.faults.controller_crash_every,
            FaultKind::NodeLoss => self.faults.node_loss_every,
            FaultKind::DeviceFailure => self.faults.device_failure_every,
        };
        let Some(every) = every else { return Ok(()) };
        let next = exponential(self.streams.of(stream_of(kind)), every);
        self.schedule_at(self.now() + next, Event::Fault { kind })?;
        match kind {
            FaultKind::ControllerCrash => {
                let replicas = self.deployment().replicas.len();
                if replicas > 0 {
                    let index = self.streams.of(stream_of(kind)).random_range(0..replicas);
                    self.replica_down(index, true)?;
                }
            }
            FaultKind::NodeLoss => {
                let Some(node) = self.pick_node(kind, |_| true) else { return Ok(()) };
                self.node_lost(&node)?;
                if let Some(duration) = self.faults.node_loss_duration {
                    self.schedule_at(self.now() + duration, Event::NodeRecovered { node })?;
                }
            }
            FaultKind::DeviceFailure => {
                let gpu = |node: &Node| node.devices.iter().any(|(resource, units)| is_gpu(resource) && *units > 0);
                let Some(node) = self.pick_node(kind, gpu) else { return Ok(()) };
                let resource = self.api.store().node(&node).and_then(|n| {
                    n.devices.iter().find(|(resource, units)| is_gpu(resource) && **units > 0).map(|(r, _)| r.clone())
                });
                if let Some(resource) = resource {
                    self.device_failure(&node, &resource, 1)?;
                }
            }
        }
        Ok(())
    }

    fn pick_node(&mut self, kind: FaultKind, eligible: impl Fn(&Node) -> bool) -> Option<String> {
        let nodes: Vec<String> =
            self.api.store().nodes().filter(|node| eligible(node)).map(|node| node.name.clone()).collect();
        if nodes.is_empty() {
            return None;
        }
        let index = self.streams.of(stream_of(kind)).random_range(0..nodes.len());
        Some(nodes[index].clone())
    }

    /// The device plugin reports `units` of `resource` unhealthy: the node's allocatable drops; pods already using
    /// devices keep running (the kubelet evicts nothing for it).
    pub(super) fn device_failure(&mut self, name: &str, resource: &str, units: u64) -> Result<(), WorldError> {
        let Some(mut node) = self.api.store().node(name).cloned() else { return Ok(()) };
        let Some(allocatable) = node.devices.get_mut(resource) else { return Ok(()) };
        *allocatable = allocatable.saturating_sub(units);
        let left = *allocatable;
        self.api.put_node(node);
        let fields: &[(&str, &str)] = &[("resource", resource), ("allocatable", &left.to_string())];
        self.record("device-plugin", &format_args!("Node {name}"), "DeviceUnhealthy", fields)
    }
}

fn stream_of(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::ControllerCrash => "faults/controller-crash",
        FaultKind::NodeLoss => "faults/node-loss",
        FaultKind::DeviceFailure => "faults/device-failure",
    }
}

/// GPU resources (not KubeVirt's own device plugins: kvm, tun, vhost-net).
fn is_gpu(resource: &str) -> bool {
    !resource.starts_with("devices.kubevirt.io/")
}
