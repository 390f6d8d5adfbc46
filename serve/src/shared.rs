//! What every request handler shares: the snapshot and its head, the twin's clock, the tokens and the authorizer,
//! where the writes go, and the signal that ends open watches.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use gpuclaim_engine::model::Time;
use gpuclaim_sim::served::store::Snapshot;

use gpuclaim_sim::served::rbac::Authorizer;

use crate::auth::Tokens;
use crate::world_thread::Writes;

/// What every request handler shares.
pub struct Shared {
    pub snapshot: Arc<RwLock<Snapshot>>,
    pub head: tokio::sync::watch::Receiver<u64>,
    /// The world's virtual time (ms since its zero).
    pub now: Arc<AtomicU64>,
    /// The Unix time (ms) virtual zero stands for.
    pub epoch_ms: i64,
    /// The tokens the twin issued: the kubeconfig's, and service accounts' ([`Tokens::mint`]).
    pub tokens: Arc<Tokens>,
    /// RBAC over the stored roles and bindings, its index kept between requests.
    pub authorizer: Authorizer,
    /// `host:port` clients reach the twin at.
    pub address: String,
    /// Tells open watches to end (the server is stopping).
    pub stopping: tokio::sync::watch::Receiver<bool>,
    pub writes: Writes,
}

impl Shared {
    /// The twin's clock now: what Tables age objects by.
    pub fn virtual_now(&self) -> Time {
        let since_zero = self.now.load(std::sync::atomic::Ordering::Relaxed);
        Time::from_millisecond(self.epoch_ms.saturating_add(since_zero as i64)).unwrap_or_default()
    }
}
