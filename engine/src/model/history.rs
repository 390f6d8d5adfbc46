//! What a view remembers of its own changes, for a controller that skips waiters nothing has changed for
//! (`controller::Waiting`): a generation that moves whenever something happens that could let a waiter through or
//! change why it waits, a journal of the latest such changes (which node or namespace loosened, which waiter or run
//! changed), and an edition per gated pod that moves whenever the pod is stored again.
//!
//! Bookkeeping about the view's history, not its contents: two views holding the same objects are equal whatever
//! their histories (`PartialEq` ignores it).

use std::collections::{HashMap, VecDeque};

use crate::name::Name;

type Fixed = foldhash::fast::FixedState;

/// What changed for waiters: where a waiter refused before might now get through, or wait for another reason, or
/// a waiter that came, changed or left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Room came free on this node (units, CPU or memory).
    Node(Name),
    /// A namespace's budgets, entitlement or unbound claims changed.
    Namespace(Name),
    /// A pod at the gate was stored (created, replaced or edited), or left the gate (ungated or deleted):
    /// (namespace, pod).
    Waiter(Name, Name),
    /// A run ended, was replaced by another of the same name or went: (namespace, VMI). Its pods at the gate wait
    /// for another reason.
    Run(Name, Name),
    /// Something every waiter reads changed: a node itself, a class, the index rebuilt.
    Everything,
}

/// The most changes the journal keeps: a controller further behind than this tries every waiter.
const JOURNAL_MAX: usize = 4_096;

#[derive(Clone, Debug, Default)]
pub(super) struct History {
    /// How many changes were journaled, ever: the generation. Moves on every change that could let a waiting pod
    /// through or change why it waits, and on every store of a waiter; a change that only takes (a claim bound, a
    /// pod bound where it was pinned) leaves it.
    generation: u64,
    /// The latest of those changes, the last at `generation`.
    journal: VecDeque<Change>,
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

    /// Something happened that could let a waiter through or change why it waits.
    pub(super) fn changed(&mut self, what: Change) {
        self.generation += 1;
        if self.journal.len() == JOURNAL_MAX {
            self.journal.pop_front();
        }
        self.journal.push_back(what);
    }

    /// What changed since `generation`, oldest first; `None` when the journal no longer reaches back that far.
    pub(super) fn since(&self, generation: u64) -> Option<impl Iterator<Item = &Change>> {
        let behind = usize::try_from(self.generation.checked_sub(generation)?).ok()?;
        (behind <= self.journal.len()).then(|| self.journal.iter().skip(self.journal.len() - behind))
    }

    pub(super) fn edition(&self, namespace: &str, pod: &str) -> Option<u64> {
        self.gated.get(namespace)?.get(pod).copied()
    }

    /// A pod was stored (created, replaced or edited): a new edition while it is gated, none once not; either is
    /// journaled when the pod is or was at the gate.
    pub(super) fn stored(&mut self, namespace: &Name, pod: &Name, gated: bool) {
        if gated {
            self.editions += 1;
            self.gated.entry(namespace.clone()).or_default().insert(pod.clone(), self.editions);
        } else {
            let Some(pods) = self.gated.get_mut(namespace.as_str()) else { return };
            if pods.remove(pod.as_str()).is_none() {
                return;
            }
            if pods.is_empty() {
                self.gated.remove(namespace.as_str());
            }
        }
        self.changed(Change::Waiter(namespace.clone(), pod.clone()));
    }
}
