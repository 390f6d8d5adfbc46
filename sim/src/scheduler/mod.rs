//! kube-scheduler, in one place: its filters and its choice of node ([`filters`]), its queue of pods that did not
//! fit ([`queue`]), the label selectors its anti-affinity filter matches ([`selector`]), its state ([`Scheduler`])
//! and its handlers of the world's events (`handlers`: a pod to schedule, the leftover flush, a cluster change, a
//! pod gone).
//!
//! The handlers are `impl World` blocks, as every actor's are: a handler reads the API server's store, writes
//! through it, logs and schedules the next events, all of which the [`World`](crate::world::World) owns. The
//! scheduler's own state is one field of the world, [`Scheduler`], whose fields only this folder reads; the world
//! sees the field, never inside it. So the world holds the state (the world imports this module's types) and the
//! handlers extend the world (they import it), and no file imports one that imports it back.

pub mod filters;
mod handlers;
pub mod queue;
pub mod selector;

use filters::{NodeRequests, NodeVerdicts};
use queue::SchedulingQueue;

/// What the scheduler keeps between events.
#[derive(Debug, Default)]
pub struct Scheduler {
    /// Its own count of what the pods bound to each node request.
    requested: NodeRequests,
    /// Where its next search of the nodes starts (kube-scheduler's `nextStartNodeIndex`).
    next_start_node: usize,
    /// Its per-node verdicts of the filters that read only pod specs and nodes (see [`NodeVerdicts`]).
    node_verdicts: NodeVerdicts,
    /// The pods that did not fit, parked.
    queue: SchedulingQueue,
}

impl Scheduler {
    /// Whether a pod is parked as unschedulable (`PodScheduled=False`, reason `Unschedulable`).
    pub fn is_parked(&self, namespace: &str, pod: &str) -> bool {
        self.queue.is_parked(namespace, pod)
    }
}
