//! What a view remembers of its own changes, for a controller that skips waiters nothing has changed for
//! (`controller::Waiting`): a generation that moves whenever something happens that could let a waiter through,
//! and an edition per gated pod that moves whenever the pod is stored again.
//!
//! Bookkeeping about the view's history, not its contents: two views holding the same objects are equal whatever
//! their histories (`PartialEq` ignores it).

use std::collections::HashMap;

use super::Name;

type Fixed = foldhash::fast::FixedState;

#[derive(Clone, Debug, Default)]
pub(super) struct History {
    /// Moves on every change that could let a waiting pod through or change why it waits: capacity freed on a node
    /// (a claim released, unbound, moved or deleted; a pod that occupied a node gone, ended, moved or shrunk), a
    /// node, class, budget or entitlement changed. A change that only takes (a claim bound, a pod bound where it was
    /// pinned) or adds a waiter leaves it.
    generation: u64,
    editions: u64,
    /// namespace → gated pod → the edition it was last stored at.
    gated: HashMap<Name, HashMap<Name, u64, Fixed>, Fixed>,
}

impl PartialEq for History {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl History {
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Something happened that could let a waiter through.
    pub(super) fn loosened(&mut self) {
        self.generation += 1;
    }

    pub(super) fn edition(&self, namespace: &str, pod: &str) -> Option<u64> {
        self.gated.get(namespace)?.get(pod).copied()
    }

    /// A pod was stored (created, replaced or edited): a new edition while it is gated, none once not.
    pub(super) fn stored(&mut self, namespace: &Name, pod: &Name, gated: bool) {
        if gated {
            self.editions += 1;
            self.gated.entry(namespace.clone()).or_default().insert(pod.clone(), self.editions);
        } else if let Some(pods) = self.gated.get_mut(namespace.as_str()) {
            pods.remove(pod.as_str());
            if pods.is_empty() {
                self.gated.remove(namespace.as_str());
            }
        }
    }
}
