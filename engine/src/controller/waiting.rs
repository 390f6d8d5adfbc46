//! Waiters nothing has changed for are not tried again: what a pass found still waiting, and why that holds.
//!
//! A pass serves every gated pod oldest first, and one that does not fit is tried again at the next pass. With the
//! cluster full, that is every waiter at every pass, deciding nothing new (issue 32: 1,300 waiters × 12,000 passes
//! of a filled trace replay). So a pass remembers the pods it left waiting for capacity ([`Wait::NoCapacity`],
//! [`Wait::NeverFits`]) whose reason is already recorded, with the view's [generation](View::generation) it
//! started from, and the next pass skips them while that still holds:
//! - the view's generation is the same (nothing freed units, CPU or memory, and no node, class, budget or
//!   entitlement changed: every change since only took), and the pass itself freed nothing before serving, so a
//!   pod that did not fit then does not fit now;
//! - the pod is the same [edition](View::gated_edition) (not stored again since), its run is alive, and its
//!   namespace's bound units of each budgeted class it needs are what they were, so it would wait for the same
//!   reason and the pass would write nothing for it.
//!
//! Only what a full pass would decide is skipped, so the pass's actions are exactly a full scan's (the property
//! `remembering_waiters_decides_what_the_full_scan_decides`). Not remembered, so tried at every pass as before: a
//! pod whose set has a claim bound somewhere or not yet created, one whose candidate walk reached
//! [`CANDIDATES_PER_PLACEMENT_MAX`](super::CANDIDATES_PER_PLACEMENT_MAX), one waiting for another reason (a held
//! claim in use, its budget: the objects those name change without touching capacity), and held claims waiting for
//! a node.
//!
//! What a pass remembers is only true once its writes landed: a pass whose writes were refused, or that was thrown
//! away (pins confirmed against a newer store, then taken again), must not teach the next one. The caller says
//! which: [`Waiting::landed`] after every write went through, [`Waiting::forget`] otherwise.

use std::collections::HashMap;

use smallvec::SmallVec;

use super::reasons::Wait;
use crate::model::{Name, Pod, View};

type Fixed = foldhash::fast::FixedState;

/// A controller's memory of the waiters its passes left, kept between passes.
#[derive(Clone, Debug, Default)]
pub struct Waiting {
    /// What the last pass whose writes all landed found.
    landed: Option<Memo>,
    /// What the last pass found, until its writes land.
    proposed: Option<Memo>,
}

impl Waiting {
    /// Every write of the last pass went through: the next pass may skip what it found.
    pub fn landed(&mut self) {
        if let Some(memo) = self.proposed.take() {
            self.landed = Some(memo);
        }
    }

    /// A write was refused, or the pass was thrown away: the next pass tries every waiter.
    pub fn forget(&mut self) {
        self.landed = None;
        self.proposed = None;
    }

    /// How many pods the next pass may skip (for stats and tests).
    pub fn remembered(&self) -> usize {
        self.landed.as_ref().map_or(0, |memo| memo.pods.values().map(HashMap::len).sum())
    }

    pub(super) fn usable(&self, view: &View) -> Option<&Memo> {
        self.landed.as_ref().filter(|memo| memo.generation == view.generation())
    }

    pub(super) fn propose(&mut self, memo: Memo) {
        self.proposed = Some(memo);
    }
}

/// The pods one pass left waiting for capacity, with what made them wait.
#[derive(Clone, Debug, Default)]
pub(super) struct Memo {
    /// The view's generation the pass started from.
    pub(super) generation: u64,
    /// namespace → pod → what it was refused on.
    pods: HashMap<Name, HashMap<Name, Remembered, Fixed>, Fixed>,
}

/// One pod left waiting for capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Remembered {
    /// The pod's edition then.
    pub(super) edition: u64,
    /// The namespace's bound units then, of each class the pod needs that has a budget there (a budget check comes
    /// before capacity: bound units grown by other pods' placements could make it wait for its budget instead).
    pub(super) bound: SmallVec<[(Name, u64); 1]>,
}

impl Memo {
    pub(super) fn new(generation: u64) -> Self {
        Memo { generation, pods: HashMap::default() }
    }

    pub(super) fn get(&self, namespace: &str, pod: &str) -> Option<&Remembered> {
        self.pods.get(namespace)?.get(pod)
    }

    pub(super) fn insert(&mut self, namespace: &Name, pod: &Name, remembered: Remembered) {
        self.pods.entry(namespace.clone()).or_default().insert(pod.clone(), remembered);
    }
}

impl<'v> super::Pass<'v> {
    /// Whether this pass freed anything before serving (a release, a deletion, a run that moved): then what did not
    /// fit before may fit now.
    pub(super) fn freed_any(&self) -> bool {
        self.units.values().flat_map(|by_node| by_node.values()).any(|units| *units > 0)
            || self.bound.values().flat_map(|by_class| by_class.values()).any(|units| *units < 0)
    }

    /// Whether the memo holds this pod as it is now: refused then, so refused now (nothing loosened since).
    pub(super) fn still_refused(&self, memo: &Memo, namespace: &str, pod: &str) -> bool {
        memo.get(namespace, pod).is_some_and(|r| Some(r.edition) == self.view.gated_edition(namespace, pod))
    }

    /// What the memo holds of `pod` when it would wait for the reason it has recorded, on the state this pass
    /// leaves: the same pod, its run alive, its namespace's bound units of its budgeted classes unchanged.
    pub(super) fn same_reason<'m>(&self, memo: &'m Memo, pod: &Pod) -> Option<&'m Remembered> {
        let remembered = memo.get(&pod.namespace, &pod.name)?;
        if Some(remembered.edition) != self.view.gated_edition(&pod.namespace, &pod.name) {
            return None;
        }
        if !pod.owner_vmi.as_ref().is_some_and(|vmi| self.run_alive(&pod.namespace, vmi)) {
            return None;
        }
        let bound_same =
            remembered.bound.iter().all(|(class, units)| self.bound_units(&pod.namespace, class) == *units);
        bound_same.then_some(remembered)
    }

    pub(super) fn remember(&mut self, pod: &Pod, remembered: Remembered) {
        if let Some(memo) = self.remembering.as_mut() {
            memo.insert(&pod.namespace, &pod.name, remembered);
        }
    }

    /// Remembers a pod just judged to wait for `wait`, when the next pass may skip it: it waits for capacity, for
    /// the reason already recorded (no write), its walk was not cut short, and its whole set exists unbound (a
    /// claim bound somewhere or still to be created is an object of its own that changes on its own).
    pub(super) fn remember_if_capacity(&mut self, pod: &Pod, wait: &Wait) {
        if self.remembering.is_none() || self.walk_capped.get() {
            return;
        }
        if !matches!(wait, Wait::NoCapacity { .. } | Wait::NeverFits { .. }) {
            return;
        }
        if pod.waiting.as_ref() != Some(&wait.to_reason()) {
            return;
        }
        let Some(edition) = self.view.gated_edition(&pod.namespace, &pod.name) else { return };
        let Some(classes) = self.classes_of_unbound_set(pod) else { return };
        let tenant = self.view.tenant(&pod.namespace);
        let mut bound: SmallVec<[(Name, u64); 1]> = SmallVec::new();
        for class in classes {
            let budgeted = tenant.and_then(|t| t.budget(class)).is_some();
            if budgeted && !bound.iter().any(|(c, _)| c.as_str() == class) {
                bound.push((Name::from(class), self.bound_units(&pod.namespace, class)));
            }
        }
        self.remember(pod, Remembered { edition, bound });
    }
}
