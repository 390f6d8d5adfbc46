//! The view the webhooks and the reconciler decide on, behind one lock, and what a panic half-way through a change
//! of it leaves.
//!
//! Changes are made in place: a watch event updates an object and the engine's indexes over it. Building a new view
//! and swapping it in would copy the whole cluster's view on every event, so a change that panics half-way can leave
//! the indexes disagreeing with the objects. The lock is therefore std's, which poisons: poisoning is the one record
//! that a change did not finish, and a lock that cannot poison would hide it. A poisoned view is never read again:
//! readers get [`ViewPoisoned`] (the webhooks answer 503, the caches and the reconciler stop), `/healthz` and
//! `/readyz` fail naming it (health.rs), and the kubelet restarts the replica, whose caches list everything anew.
//! Reading a Kubernetes object into the engine's types, the step that meets untrusted input, happens before the lock
//! is taken (cache.rs), so only the engine's own bookkeeping runs under it, where a panic is our bug.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use gpuclaim_engine::model::View;

/// The view, shared by the caches (which fill it), the webhooks and the reconciler (which read it) and the writer
/// (which puts what it wrote into it).
#[derive(Clone, Debug, Default)]
pub struct SharedView(Arc<RwLock<View>>);

/// A change of the view panicked before it finished: the view may be half-written and is not read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the view is unusable: a change panicked half-way through it (its lock is poisoned); the replica must restart")]
pub struct ViewPoisoned;

impl SharedView {
    pub fn new(view: View) -> SharedView {
        SharedView(Arc::new(RwLock::new(view)))
    }

    pub fn read(&self) -> Result<RwLockReadGuard<'_, View>, ViewPoisoned> {
        self.0.read().map_err(|_| ViewPoisoned)
    }

    /// Write access for one change: a panic before the guard drops poisons the view for good.
    pub fn write(&self) -> Result<RwLockWriteGuard<'_, View>, ViewPoisoned> {
        self.0.write().map_err(|_| ViewPoisoned)
    }

    pub fn is_poisoned(&self) -> bool {
        self.0.is_poisoned()
    }
}
