//! The GPU controller as it runs in a cluster, in one place: one replica's process driven in virtual time (this
//! file: its own cache, fed by the API server's watch after a lag, and the engine's controller runtime —
//! `engine::controller::runtime`, the loop the live adapter drives too — deciding when to pass, over what, what to
//! confirm and when to retry), its Deployment ([`deployment`]: replicas, the lease, the timings), and its
//! handlers of the world's events (`handlers`: watch deliveries, wakes, and the world as its [`Cluster`]: the API
//! server as the controller's service account, the event log, the scheduler set going by a pin; `replicas`: the
//! Deployment's replicas crashing, restarting, evicted, and the leader election among them).
//!
//! This file only drives the runtime: it hands it watch events and the outcomes of what it asked for, and does what
//! it asks through a [`Cluster`]. The handlers are `impl World` blocks, as every actor's are (see
//! `crate::scheduler`): the process and the Deployment are fields of the world, the handlers extend the world.

pub mod deployment;
mod handlers;
mod replicas;

use gpuclaim_engine::controller::Action;
use gpuclaim_engine::controller::metrics::Figures;
use gpuclaim_engine::controller::runtime::{
    self, Change, ObjectKey, Outcome, POLLS_PER_WAKE_MAX, Poll, Runtime, Watches, WorkQueue,
};
use gpuclaim_engine::model::{Time, View};
use gpuclaim_engine::variant::Variant;

use crate::users::User;

/// What the controller does through the cluster it runs in.
pub trait Cluster {
    type Error;
    /// Writes `action` as the controller's `user`; `Err` only for the world's own failures (the log), never for a
    /// refused write, which is an [`Outcome`].
    fn write(&mut self, action: &Action, user: &User) -> Result<Outcome, Self::Error>;
    /// A GET of `node` and a LIST of the pods bound there: what of it is newer than `cache` holds.
    fn read_node(&mut self, node: &str, cache: &View) -> Vec<Change>;
    /// A GET of `object`: its current state, or its deletion when it is gone (`None`: nothing read).
    fn read(&mut self, object: &ObjectKey) -> Option<Change>;
    /// A pin's node read live was not as the cache had it (`objects` newer objects came in).
    fn node_refreshed(&mut self, node: &str, objects: usize) -> Result<(), Self::Error>;
}

/// One replica's controller process: its cache, its work queue and its loop.
#[derive(Debug)]
pub struct GpuController {
    cache: View,
    queue: WorkQueue,
    runtime: Runtime,
    /// Who its writes are made as (its service account: the settings name it as `controllerUser`).
    pub user: User,
}

impl GpuController {
    /// A process whose cache starts as `synced` (the initial list), acting as `user`, running `variant`; it
    /// reconciles once it leads ([`GpuController::lead`]).
    pub fn new(mut synced: View, user: User, variant: Variant) -> Self {
        // A copy of the API server's store keeps objects only: the controller places, so its cache indexes them.
        synced.keep_placement(true);
        // The API server's watch is one stream of every kind, in revision order.
        GpuController { cache: synced, queue: WorkQueue::new(Watches::One), runtime: Runtime::new(variant), user }
    }

    pub fn cache(&self) -> &View {
        &self.cache
    }

    /// The engine's rules it runs (the shipped ones unless a scenario asks for a counterfactual).
    pub fn variant(&self) -> Variant {
        *self.runtime.variant()
    }

    pub fn stats(&self) -> runtime::Stats {
        self.runtime.stats()
    }

    /// What its loop measured while it led (`controller::metrics`).
    pub fn figures(&self) -> &Figures {
        self.runtime.figures()
    }

    /// This replica leads from `now`: its next pass goes over everything.
    pub fn lead(&mut self, now: Time) {
        self.runtime.set_leading(true, now);
    }

    /// This replica stopped leading at `now` (its process went down).
    pub fn step_down(&mut self, now: Time) {
        self.runtime.set_leading(false, now);
    }

    /// A watch event: into the cache, its keys onto the work queue. Returns whether a pass has work now.
    pub fn observe(&mut self, change: Change) -> bool {
        self.queue.observe(&mut self.cache, change)
    }

    /// Runs the engine's rules of `variant` (set before the run starts).
    pub fn set_variant(&mut self, variant: Variant) {
        self.runtime.set_variant(variant);
    }

    /// Runs the loop at `now` until it has nothing to do; returns when it wants to run again.
    pub fn wake<C: Cluster>(&mut self, now: Time, cluster: &mut C) -> Result<Option<Time>, C::Error> {
        // Each poll hands out a write, a read or a round of confirmation; a pass has a bounded number of each (its
        // actions, CONFIRMATION_ROUNDS_MAX rounds) and a wake at `now` ends once nothing is due before a later time.
        for _ in 0..POLLS_PER_WAKE_MAX {
            match self.runtime.poll(&self.cache, &mut self.queue, now) {
                Poll::Idle { wake_at } => return Ok(wake_at),
                Poll::Confirm(nodes) => {
                    for node in &nodes {
                        let live = cluster.read_node(node, &self.cache);
                        let objects = live.len();
                        if self.runtime.read_live(&mut self.cache, &mut self.queue, node, Some(live), now) {
                            cluster.node_refreshed(node, objects)?;
                        }
                    }
                }
                Poll::Refresh(object) => {
                    let live = cluster.read(&object);
                    self.runtime.refreshed(&mut self.cache, &mut self.queue, live);
                }
                Poll::Write(action) => {
                    let outcome = cluster.write(&action, &self.user)?;
                    self.runtime.wrote(&mut self.cache, &mut self.queue, &action, outcome, now);
                }
            }
        }
        panic!("the GPU controller's loop polled {POLLS_PER_WAKE_MAX} times at {now} without going idle");
    }
}
