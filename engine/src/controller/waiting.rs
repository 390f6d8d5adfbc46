//! Waiters nothing has changed for are not tried again: what a pass found still waiting, and why that holds.
//!
//! A pass serves every gated pod oldest first, and one that does not fit is tried again at the next pass. With the
//! cluster full, that is every waiter at every pass, deciding nothing new (issue 32: 1,300 waiters × 12,000 passes
//! of a filled trace replay). So a pass remembers the pods it left waiting for capacity ([`Wait::NoCapacity`],
//! [`Wait::NeverFits`]) whose reason is already recorded, with the view's [generation](View::generation) it
//! started from, and the next pass skips one while both hold:
//! - nothing that loosened since could take it: the view's journal ([`View::loosened_since`]) names the nodes where
//!   room came free (units, CPU or memory), and with this pass's own releases, on each of them some class of the
//!   pod's set has fewer units free than it needs; no node or class changed (that wakes every waiter), nor the
//!   namespace's budgets, entitlement or unbound claims. Every other node is as it was or tighter, so a pod that
//!   did not fit then does not fit now;
//! - for its reason to stand too, on the state the pass leaves: the pod is the same [edition](View::gated_edition)
//!   (not stored again since), its run is alive, and its namespace's bound units of each budgeted class it needs
//!   are what they were (a budget is checked before capacity), so the pass would write nothing for it.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use smallvec::SmallVec;

use super::reasons::Wait;
use crate::model::{Class, Loosened, Name, Pod, View};

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

    pub(super) fn usable(&self) -> Option<&Memo> {
        self.landed.as_ref()
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

/// One pod left waiting for capacity, its budget or its entitlement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Remembered {
    /// The pod's edition then.
    pub(super) edition: u64,
    /// Units per class its set needs, in class name order.
    pub(super) need: SmallVec<[(Name, u64); 1]>,
    /// Why it waits when that is its budget or entitlement (read again directly: no journal needed); `None` for
    /// capacity.
    pub(super) refused: Option<Wait>,
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

/// What loosened since the remembered pass, as the remembered waiters read it: the nodes where room came free and
/// the most units of each class free on one of them now, and the namespaces whose budgets, entitlement or claims
/// changed.
pub(super) struct Woken<'a> {
    max_free: BTreeMap<&'a str, u64>,
    namespaces: BTreeSet<&'a str>,
}

impl<'v> super::Pass<'v> {
    /// What loosened since `memo`'s pass, in the view and in this pass before serving (its releases); `None` when
    /// anything may have (a node or class changed, or the view does not remember that far back).
    pub(super) fn woken(&self, memo: &Memo) -> Option<Woken<'v>> {
        let view: &'v View = self.view;
        let mut nodes: BTreeSet<&str> = BTreeSet::new();
        let mut namespaces = BTreeSet::new();
        for loosened in view.loosened_since(memo.generation)? {
            match loosened {
                Loosened::Node(node) => {
                    nodes.insert(node.as_str());
                }
                Loosened::Namespace(namespace) => {
                    namespaces.insert(namespace.as_str());
                }
                Loosened::Everything => return None,
            }
        }
        let freed_here = self.units.values().flat_map(|by_node| by_node.iter()).filter(|(_, units)| **units > 0);
        let freed_here: Vec<&str> = freed_here.map(|(node, _)| node.as_str()).collect();
        let max_free = view
            .classes()
            .map(|class| {
                let free = nodes.iter().copied().chain(freed_here.iter().copied()).map(|n| self.free(class, n));
                (class.name.as_str(), free.map(|units| units.unwrap_or(0)).max().unwrap_or(0))
            })
            .collect();
        Some(Woken { max_free, namespaces })
    }

    /// Whether the memo holds this pod as it is now, and nothing that loosened could take it: refused then, so
    /// refused now. Room that came free is on nodes with fewer units of one of its classes than it needs.
    pub(super) fn still_refused(&self, memo: &Memo, woken: &Woken<'_>, namespace: &str, pod: &str) -> bool {
        let Some(remembered) = self.same_edition(memo, namespace, pod) else { return false };
        match &remembered.refused {
            // Its budget or entitlement, read now: refused still, so refused whatever capacity does.
            Some(_) => self.need_refused(namespace, remembered).is_some_and(|wait| wait.is_err()),
            None => Self::no_room_for(remembered, woken, namespace),
        }
    }

    /// What the memo holds of `pod` when it would wait for the reason it has recorded, on the state this pass
    /// leaves: refused still, its run alive, and for capacity its namespace's bound units of its budgeted classes
    /// unchanged (a budget is checked first).
    pub(super) fn same_reason<'m>(&self, memo: &'m Memo, woken: &Woken<'_>, pod: &Pod) -> Option<&'m Remembered> {
        let remembered = self.same_edition(memo, &pod.namespace, &pod.name)?;
        if !pod.owner_vmi.as_ref().is_some_and(|vmi| self.run_alive(&pod.namespace, vmi)) {
            return None;
        }
        let same = match &remembered.refused {
            Some(refused) => {
                self.need_refused(&pod.namespace, remembered).is_some_and(|wait| wait.as_ref().err() == Some(refused))
            }
            None => {
                Self::no_room_for(remembered, woken, &pod.namespace)
                    && remembered.bound.iter().all(|(class, units)| self.bound_units(&pod.namespace, class) == *units)
            }
        };
        same.then_some(remembered)
    }

    /// The memo's entry for a pod not stored again since.
    fn same_edition<'m>(&self, memo: &'m Memo, namespace: &str, pod: &str) -> Option<&'m Remembered> {
        memo.get(namespace, pod).filter(|r| Some(r.edition) == self.view.gated_edition(namespace, pod))
    }

    /// Whether nothing that loosened has room for a pod remembered waiting for capacity: its namespace did not
    /// change, and one of its classes has fewer units free than it needs on every node where room came free.
    fn no_room_for(remembered: &Remembered, woken: &Woken<'_>, namespace: &str) -> bool {
        let short = |(class, units): &(Name, u64)| woken.max_free.get(class.as_str()).copied().unwrap_or(0) < *units;
        !woken.namespaces.contains(namespace) && remembered.need.iter().any(short)
    }

    /// The budget and entitlement check of a remembered need, now; `None` when one of its classes is gone.
    fn need_refused(&self, namespace: &str, remembered: &Remembered) -> Option<Result<(), Wait>> {
        let mut classes: SmallVec<[(&Class, u64); 1]> = SmallVec::new();
        for (name, units) in &remembered.need {
            classes.push((self.view.class(name)?, *units));
        }
        Some(self.check_need(namespace, classes.into_iter()))
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
        // A walk cut short is only for capacity; a budget refusal walks nothing (the flag is the last walk's).
        let capacity = matches!(wait, Wait::NoCapacity { .. } | Wait::NeverFits { .. });
        if self.remembering.is_none() || (capacity && self.walk_capped.get()) {
            return;
        }
        let refused = match wait {
            Wait::NoCapacity { .. } | Wait::NeverFits { .. } => None,
            Wait::BudgetExceeded { .. } | Wait::NotEntitled { .. } => Some(wait.clone()),
            _ => return,
        };
        if pod.waiting.as_ref() != Some(&wait.to_reason()) {
            return;
        }
        let Some(edition) = self.view.gated_edition(&pod.namespace, &pod.name) else { return };
        let Some(need) = self.need_of_template_set(pod) else { return };
        let tenant = self.view.tenant(&pod.namespace);
        let budgeted = need.keys().filter(|class| tenant.and_then(|t| t.budget(class)).is_some());
        let bound = budgeted.map(|class| (Name::from(*class), self.bound_units(&pod.namespace, class))).collect();
        let need = need.iter().map(|(class, (_, units))| (Name::from(*class), *units)).collect();
        self.remember(pod, Remembered { edition, need, bound, refused });
    }
}
