//! What a view remembers of its own changes, for a controller that skips waiters nothing has changed for
//! (`controller::Waiting`): a generation that moves whenever something happens that could let a waiter through,
//! a journal of the latest such changes (which node or namespace loosened), and an edition per gated pod that
//! moves whenever the pod is stored again.
//!
//! Bookkeeping about the view's history, not its contents: two views holding the same objects are equal whatever
//! their histories (`PartialEq` ignores it).

use std::collections::{HashMap, VecDeque};

use super::Name;

type Fixed = foldhash::fast::FixedState;

/// What loosened: where a waiter refused before might now get through, or wait for another reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loosened {
    /// Room came free on this node (units, CPU or memory).
    Node(Name),
    /// A namespace's budgets, entitlement or unbound claims changed.
    Namespace(Name),
    /// Something every waiter reads changed: a node itself, a class, the index rebuilt.
    Everything,
}

/// The most changes the journal keeps: a controller further behind than this tries every waiter.
const JOURNAL_MAX: usize = 4_096;

#[derive(Clone, Debug, Default)]
pub(super) struct History {
    /// How many changes loosened anything, ever: the generation. Moves on every change that could let a waiting pod
    /// through or change why it waits; a change that only takes (a claim bound, a pod bound where it was pinned) or
    /// adds a waiter leaves it.
    generation: u64,
    /// The latest of those changes, the last at `generation`.
    journal: VecDeque<Loosened>,
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
    pub(super) fn loosened(&mut self, what: Loosened) {
        self.generation += 1;
        if self.journal.len() == JOURNAL_MAX {
            self.journal.pop_front();
        }
        self.journal.push_back(what);
    }

    /// What loosened since `generation`, oldest first; `None` when the journal no longer reaches back that far.
    pub(super) fn since(&self, generation: u64) -> Option<impl Iterator<Item = &Loosened>> {
        let behind = usize::try_from(self.generation.checked_sub(generation)?).ok()?;
        (behind <= self.journal.len()).then(|| self.journal.iter().skip(self.journal.len() - behind))
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
