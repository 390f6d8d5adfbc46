//! Waiters nothing has changed for are not visited: what the passes found still waiting, why that holds, and which
//! of them a change wakes.
//!
//! A pass serves every gated pod oldest first, and one that does not fit is tried again at the next pass. With the
//! cluster full, that is every waiter at every pass, deciding nothing new (issue 32: 1,300 waiters × 12,000 passes
//! of a filled trace replay). So the controller keeps, between passes, a memo of the gated pods: the ones left
//! waiting for capacity ([`Wait::NoCapacity`], [`Wait::NeverFits`]), their budget or their entitlement whose reason
//! is already recorded (*remembered*), and the rest (*tried*: tried at every pass as before). A pass visits only
//! the tried pods and the remembered ones something woke, read from the view's journal of changes since the memo
//! ([`View::changes_since`]) and this pass's own releases:
//! - a pod stored again, come to the gate or gone from it ([`Change::Waiter`]), the pods of a run that ended or
//!   went ([`Change::Run`]), every pod of a namespace whose budgets, entitlement or unbound claims changed
//!   ([`Change::Namespace`]);
//! - a pod waiting for capacity whose first class has, on one of the nodes where room came free ([`Change::Node`],
//!   or this pass's releases), at least the units it needs *now*: those are read in the queue's order from an index
//!   by first class and creation, and a class's reading stops once the loosened nodes have fewer of its units free
//!   than the least any of its waiters needs (this pass's placements only take), so room for one VM visits about
//!   one VM, not every waiter that room could have fitted before the first took it;
//! - a pod waiting for its budget or entitlement in a namespace whose bound units moved since the memo's pass.
//!
//! A change to a node or class ([`Change::Everything`]), or a journal that no longer reaches back to the memo,
//! visits every gated pod and the memo starts afresh. Every other pod is as the memo holds it: the same
//! [edition](View::gated_edition), its run alive, and nothing that loosened could take it (every node is as it was
//! or tighter), so it is refused again for the same reason and the full scan would write nothing for it.
//!
//! One more check is on the state the pass leaves: a capacity waiter whose namespace's bound units of a budgeted
//! class grew past its budget less what it needs would now wait for its budget (a budget is checked before
//! capacity), so those (an index by namespace, class and units answers it with a range) and the pods refused for
//! their budget in a namespace whose bound units moved are judged again after serving. A capacity waiter still
//! within its budgets waits for capacity, for the same reason, whatever its namespace's bound units are.
//!
//! The visited pods are served in the queue's order, so the pass's actions are exactly a full scan's (the property
//! `remembering_waiters_decides_what_the_full_scan_decides`). Not remembered, so tried at every pass: a pod whose set
//! has a claim bound somewhere or not yet created, one whose candidate walk reached
//! [`CANDIDATES_PER_PLACEMENT_MAX`](super::CANDIDATES_PER_PLACEMENT_MAX), one waiting for another reason (a held
//! claim in use: the objects those name change without touching capacity), and held claims waiting for a node.
//!
//! A pass proposes what it judged; the memo learns it only once the pass's writes landed: a pass whose writes were
//! refused, or that was thrown away (pins confirmed against a newer store, then taken again), must not teach the
//! next one. The caller says which: [`Waiting::landed`] after every write went through, [`Waiting::forget`]
//! otherwise (the next pass visits every waiter). A pass costs what changed and what it places, not the queue.

use std::collections::{BTreeMap, BTreeSet, HashMap, btree_set};
use std::iter::Peekable;

use smallvec::SmallVec;

use super::reasons::Wait;
use crate::model::{Change, Class, Name, Pod, Time, View};

type Fixed = foldhash::fast::FixedState;

/// Bound units of each class in a namespace, in the view's class order (a class added or removed starts the memo
/// afresh).
type Bound = SmallVec<[u64; 4]>;

/// A controller's memory of the waiters its passes left, kept between passes.
#[derive(Clone, Debug, Default)]
pub struct Waiting {
    /// What the passes whose writes all landed found.
    landed: Option<Memo>,
    /// What the last pass judged, until its writes land.
    proposed: Option<Proposal>,
    /// How many gated pods the last landed pass visited before serving.
    visited: usize,
}

impl Waiting {
    /// Every write of the last pass went through: the memo learns what it judged.
    pub fn landed(&mut self) {
        let Some(proposal) = self.proposed.take() else { return };
        self.visited = proposal.visited;
        if proposal.fresh {
            self.landed = Some(Memo::default());
        }
        // A pass that amends a memo forgotten since teaches nothing (the next pass visits every waiter).
        if let Some(memo) = self.landed.as_mut() {
            memo.learn(proposal);
        }
    }

    /// A write was refused, or the pass was thrown away: the next pass visits every waiter.
    pub fn forget(&mut self) {
        self.landed = None;
        self.proposed = None;
    }

    /// How many pods the next pass may leave unvisited (for stats and tests).
    pub fn remembered(&self) -> usize {
        self.landed.as_ref().map_or(0, |memo| memo.pods.values().map(HashMap::len).sum())
    }

    /// How many gated pods the last pass whose writes landed visited before serving (for stats and tests): what it
    /// cost, where a full scan visits every one.
    pub fn visited(&self) -> usize {
        self.visited
    }

    pub(super) fn usable(&self) -> Option<&Memo> {
        self.landed.as_ref()
    }

    pub(super) fn propose(&mut self, proposal: Proposal) {
        self.proposed = Some(proposal);
    }
}

/// The gated pods as the passes left them.
#[derive(Clone, Debug, Default)]
pub(super) struct Memo {
    /// The view's generation the last pass started from.
    generation: u64,
    /// namespace → pod → what it was refused on.
    pods: HashMap<Name, HashMap<Name, Remembered, Fixed>, Fixed>,
    /// (namespace, pod) of the gated pods tried at every pass.
    tried: BTreeSet<(Name, Name)>,
    /// The pods remembered waiting for capacity, by the first class they need.
    by_class: BTreeMap<Name, ClassQueue>,
    /// (namespace, class) → (units of the class it needs, pod) of the pods remembered waiting for capacity within a
    /// budget of that class: the ones a namespace's bound units growing past `budget − units` turn to wait for it.
    budgeted: BTreeMap<(Name, Name), BTreeSet<(u64, Name)>>,
    /// namespace → the pods remembered waiting for their budget or entitlement.
    refused: BTreeMap<Name, BTreeSet<Name>>,
    /// namespace → its bound units after the last pass, for the namespaces with remembered pods.
    bound: BTreeMap<Name, Bound>,
    /// class → the pods remembered `NoCapacity` or `Fragmented` needing units of it (every class of their need).
    shorts: BTreeMap<Name, Shorts>,
}

/// The pods remembered waiting for capacity whose first class is one class.
#[derive(Clone, Debug, Default)]
struct ClassQueue {
    /// (created, namespace, pod): the queue's order.
    queue: BTreeSet<(Time, Name, Name)>,
    /// Units of the class they need → how many need that many (the least of them ends a wake early).
    units: BTreeMap<u64, usize>,
}

/// One pod left waiting for capacity, its budget or its entitlement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Remembered {
    /// The pod's edition then.
    pub(super) edition: u64,
    /// When it was created: its place in the queue.
    pub(super) created: Time,
    /// Units per class its set needs, in class name order.
    pub(super) need: SmallVec<[(Name, u64); 1]>,
    /// Why it waits when that is its budget or entitlement (read again directly: no journal needed); `None` for
    /// capacity.
    pub(super) refused: Option<Wait>,
    /// The classes it needs that have a budget in its namespace (a budget check comes before capacity: bound units
    /// grown by other pods' placements could make it wait for its budget instead).
    pub(super) budgeted: SmallVec<[Name; 1]>,
    /// Which capacity reason it waits for; `None` for its budget or entitlement.
    pub(super) short: Option<Short>,
}

/// Which capacity reason a waiter was recorded with. Other waiters' placements and releases move a class's free
/// units in total and on its largest node, and with them which of `NoCapacity` and `Fragmented` the full scan would
/// write, without loosening anything a remembered waiter could take: so the memo keeps the word, and a pass judges
/// again the waiters whose word its end state changes (an index by class and units answers it with ranges).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Short {
    NeverFits,
    NoCapacity,
    /// Fragmented in this class.
    Fragmented(Name),
}

impl Short {
    /// The capacity reason of a wait, if it is one.
    pub(super) fn of(wait: &Wait) -> Option<Short> {
        match wait {
            Wait::NeverFits { .. } => Some(Short::NeverFits),
            Wait::NoCapacity { .. } => Some(Short::NoCapacity),
            Wait::Fragmented { class, .. } => Some(Short::Fragmented(Name::from(class.as_str()))),
            _ => None,
        }
    }
}

/// The remembered waiters recorded `NoCapacity` or `Fragmented` that need units of one class: (units, namespace,
/// pod) by the word they were recorded with.
#[derive(Clone, Debug, Default)]
struct Shorts {
    no_capacity: BTreeSet<(u64, Name, Name)>,
    fragmented: BTreeSet<(u64, Name, Name)>,
}

impl Remembered {
    /// Units of `class` its set needs.
    fn units_of(&self, class: &str) -> u64 {
        self.need.iter().find(|(name, _)| name.as_str() == class).map_or(0, |(_, units)| *units)
    }
}

impl Memo {
    pub(super) fn get(&self, namespace: &str, pod: &str) -> Option<&Remembered> {
        self.pods.get(namespace)?.get(pod)
    }

    fn learn(&mut self, proposal: Proposal) {
        self.generation = proposal.generation;
        for (namespace, pod, judged) in proposal.judged {
            self.drop(&namespace, &pod);
            match judged {
                Judged::Remembered(remembered) => self.insert(namespace, pod, remembered),
                Judged::Tried => {
                    self.tried.insert((namespace, pod));
                }
                Judged::Gone => {}
            }
        }
        self.bound = proposal.bound;
        let pods = &self.pods;
        self.bound.retain(|namespace, _| pods.contains_key(namespace));
    }

    fn insert(&mut self, namespace: Name, pod: Name, remembered: Remembered) {
        self.index(&namespace, &pod, &remembered, true);
        self.pods.entry(namespace).or_default().insert(pod, remembered);
    }

    /// Adds the pod to the indexes of why it waits, or takes it out of them.
    fn index(&mut self, namespace: &Name, pod: &Name, remembered: &Remembered, add: bool) {
        if remembered.refused.is_some() {
            let refused = self.refused.entry(namespace.clone()).or_default();
            edit_set(refused, pod.clone(), add);
            if refused.is_empty() {
                self.refused.remove(namespace);
            }
            return;
        }
        if let Some((class, units)) = remembered.need.first() {
            let waiters = self.by_class.entry(class.clone()).or_default();
            edit_set(&mut waiters.queue, (remembered.created, namespace.clone(), pod.clone()), add);
            let count = waiters.units.entry(*units).or_default();
            *count = if add { *count + 1 } else { count.saturating_sub(1) };
            if *count == 0 {
                waiters.units.remove(units);
            }
            if waiters.queue.is_empty() {
                self.by_class.remove(class);
            }
        }
        if let Some(short) = remembered.short.as_ref().filter(|short| **short != Short::NeverFits) {
            for (class, units) in &remembered.need {
                let shorts = self.shorts.entry(class.clone()).or_default();
                let words = match short {
                    Short::Fragmented(_) => &mut shorts.fragmented,
                    _ => &mut shorts.no_capacity,
                };
                edit_set(words, (*units, namespace.clone(), pod.clone()), add);
                if shorts.no_capacity.is_empty() && shorts.fragmented.is_empty() {
                    self.shorts.remove(class);
                }
            }
        }
        for class in &remembered.budgeted {
            let key = (namespace.clone(), class.clone());
            let waiters = self.budgeted.entry(key.clone()).or_default();
            edit_set(waiters, (remembered.units_of(class), pod.clone()), add);
            if waiters.is_empty() {
                self.budgeted.remove(&key);
            }
        }
    }

    fn drop(&mut self, namespace: &Name, pod: &Name) {
        self.tried.remove(&(namespace.clone(), pod.clone()));
        let Some(pods) = self.pods.get_mut(namespace.as_str()) else { return };
        let Some(old) = pods.remove(pod.as_str()) else { return };
        if pods.is_empty() {
            self.pods.remove(namespace.as_str());
        }
        self.index(namespace, pod, &old, false);
    }
}

fn edit_set<T: Ord>(set: &mut BTreeSet<T>, item: T, add: bool) {
    if add {
        set.insert(item);
    } else {
        set.remove(&item);
    }
}

/// What a pass judged of the pods it visited, for the memo to learn once its writes land.
#[derive(Clone, Debug)]
pub(super) struct Proposal {
    /// The pass visited every gated pod: the memo starts afresh from what it judged.
    pub(super) fresh: bool,
    generation: u64,
    /// (namespace, pod, judgement), in the order judged: the last of a pod's stands.
    judged: Vec<(Name, Name, Judged)>,
    /// Bound units after the pass, of the namespaces with remembered pods.
    bound: BTreeMap<Name, Bound>,
    /// How many gated pods it visited before serving.
    pub(super) visited: usize,
}

impl Proposal {
    pub(super) fn new(generation: u64) -> Self {
        Proposal { fresh: true, generation, judged: Vec::new(), bound: BTreeMap::new(), visited: 0 }
    }
}

#[derive(Clone, Debug)]
pub(super) enum Judged {
    /// Waits for a reason recorded, and until something wakes it is not visited.
    Remembered(Remembered),
    /// Waits, and is tried at every pass.
    Tried,
    /// No longer at the gate (placed, ungated or deleted).
    Gone,
}

/// What changed since the memo's pass, as its pods read it: the nodes where room came free, and the namespaces,
/// waiters and runs that changed.
pub(super) struct Woken<'a> {
    /// The nodes where room came free (since the memo's pass, or released by this one), by name.
    loosened: Vec<Name>,
    namespaces: BTreeSet<&'a str>,
    waiters: BTreeSet<(&'a str, &'a str)>,
    runs: BTreeSet<(&'a str, &'a str)>,
}

impl<'v> super::Pass<'v> {
    /// What changed since `memo`'s pass, in the view and in this pass before serving (its releases); `None` when
    /// anything may have (a node or class changed, or the view does not remember that far back).
    pub(super) fn woken(&self, memo: &Memo) -> Option<Woken<'v>> {
        let view: &'v View = self.view;
        let mut nodes: BTreeSet<Name> = BTreeSet::new();
        let mut woken = Woken {
            loosened: Vec::new(),
            namespaces: BTreeSet::new(),
            waiters: BTreeSet::new(),
            runs: BTreeSet::new(),
        };
        for change in view.changes_since(memo.generation)? {
            match change {
                Change::Node(node) => {
                    nodes.insert(node.clone());
                }
                Change::Namespace(namespace) => {
                    woken.namespaces.insert(namespace.as_str());
                }
                Change::Waiter(namespace, pod) => {
                    woken.waiters.insert((namespace.as_str(), pod.as_str()));
                }
                Change::Run(namespace, vmi) => {
                    woken.runs.insert((namespace.as_str(), vmi.as_str()));
                }
                Change::Everything => return None,
            }
        }
        let freed_here = self.units.values().flat_map(|by_node| by_node.iter()).filter(|(_, units)| **units > 0);
        nodes.extend(freed_here.map(|(node, _)| node.clone()));
        woken.loosened = nodes.into_iter().collect();
        Some(woken)
    }

    /// The most units of `class` free on one of the nodes where room came free, now: this pass's placements only
    /// take, so what a waiter found short earlier in the pass is short still.
    fn room(&self, woken: &Woken<'_>, class: &Class) -> u64 {
        woken.loosened.iter().map(|node| self.free(class, node).unwrap_or(0)).max().unwrap_or(0)
    }

    /// The remembered capacity waiters the room that came free may take, ready to be read in the queue's order.
    pub(super) fn woke(&self, memo: &'v Memo) -> Woke<'v> {
        let streams = memo.by_class.iter().filter_map(|(class, waiters)| {
            let class = self.view.class(class)?;
            let least = *waiters.units.keys().next()?;
            Some(Stream { class, least, queue: waiters.queue.iter().peekable() })
        });
        Woke { streams: streams.collect(), pruned_at: None }
    }

    /// The next remembered capacity waiter in the queue's order whose first class has room on a loosened node for
    /// the least any waiter of that class needs; a class whose room is below that ends (room only shrinks within a
    /// pass). What it returns is a candidate: [`Self::still_refused`] says whether it is visited.
    pub(super) fn peek_woke(&self, woke: &mut Woke<'v>, woken: &Woken<'_>) -> Option<(Time, &'v str, &'v str)> {
        // Re-read the room only when this pass acted since: its placements take it.
        if woke.pruned_at != Some(self.actions.len()) {
            woke.streams.retain(|stream| self.room(woken, stream.class) >= stream.least);
            woke.pruned_at = Some(self.actions.len());
        }
        woke.streams.retain_mut(|stream| stream.queue.peek().is_some());
        let next = woke.streams.iter_mut().filter_map(|stream| stream.queue.peek().copied()).min()?;
        Some((next.0, next.1.as_str(), next.2.as_str()))
    }

    /// The gated pods to visit before serving, besides those the memo holds unwoken: the tried ones and the ones
    /// something woke (see the module's documentation), unordered and possibly repeated.
    pub(super) fn to_visit(&self, memo: &'v Memo, woken: &Woken<'v>) -> Vec<(&'v str, &'v str)> {
        let view: &'v View = self.view;
        let mut visit: Vec<(&'v str, &'v str)> =
            memo.tried.iter().map(|(ns, pod)| (ns.as_str(), pod.as_str())).collect();
        visit.extend(woken.waiters.iter().copied());
        for (namespace, vmi) in &woken.runs {
            visit.extend(view.vmi_pods(namespace, vmi).map(|pod| (pod.namespace.as_str(), pod.name.as_str())));
        }
        for namespace in &woken.namespaces {
            let (namespace, pods) = match memo.pods.get_key_value(*namespace) {
                Some(found) => found,
                None => continue,
            };
            visit.extend(pods.keys().map(|pod| (namespace.as_str(), pod.as_str())));
        }
        // A budget or entitlement refusal reads the bound units, which releases lower without naming the namespace.
        for namespace in self.bound_moved(memo) {
            let refused = memo.refused.get(namespace).into_iter().flatten();
            visit.extend(refused.map(|pod| (namespace.as_str(), pod.as_str())));
        }
        visit
    }

    /// The remembered pods whose reason the bound units that moved since the memo's pass may change, now (after
    /// serving), judged again on the state the pass leaves (unless this pass placed them): those refused for their
    /// budget or entitlement, and those waiting for capacity that the budget now leaves too little room.
    pub(super) fn to_judge_again(&self, memo: &'v Memo) -> Vec<(&'v str, &'v str)> {
        let mut judge = self.short_flipped(memo);
        for namespace in self.bound_moved(memo) {
            let placed = |pod: &Name| self.pinned_pods.contains_key(&(namespace.clone(), pod.clone()));
            let refused = memo.refused.get(namespace).into_iter().flatten().filter(|pod| !placed(pod));
            judge.extend(refused.map(|pod| (namespace.as_str(), pod.as_str())));
            let tenant = self.view.tenant(namespace);
            let classes = memo.budgeted.range((namespace.clone(), Name::default())..);
            for ((_, class), waiters) in classes.take_while(|((of, _), _)| of == namespace) {
                let Some(budget) = tenant.and_then(|t| t.budget(class)) else { continue };
                let left = budget.saturating_sub(self.bound_units(namespace, class));
                let over = waiters.range((left + 1, Name::default())..).filter(|(_, pod)| !placed(pod));
                judge.extend(over.map(|(_, pod)| (namespace.as_str(), pod.as_str())));
            }
        }
        judge
    }

    /// The remembered waiters whose capacity word the state this pass leaves may change: of a class with `free`
    /// units in total and at most `largest` on one node, a need of `n` units is `Fragmented` when
    /// `largest < n ≤ free`, else `NoCapacity`; those recorded with the other word (for a set of several classes, by
    /// one of them: judged again, it may keep its word).
    fn short_flipped(&self, memo: &'v Memo) -> Vec<(&'v str, &'v str)> {
        let mut judge = Vec::new();
        for (class, shorts) in &memo.shorts {
            let Some(class) = self.view.class(class) else { continue };
            let (free, largest) = self.free_after(class);
            let mut flipped: Vec<&(u64, Name, Name)> = Vec::new();
            if largest < free {
                let from = (largest + 1, Name::default(), Name::default());
                flipped.extend(shorts.no_capacity.range(from..(free + 1, Name::default(), Name::default())));
            }
            flipped.extend(shorts.fragmented.range(..(largest + 1, Name::default(), Name::default())));
            flipped.extend(shorts.fragmented.range((free + 1, Name::default(), Name::default())..));
            let placed =
                |namespace: &Name, pod: &Name| self.pinned_pods.contains_key(&(namespace.clone(), pod.clone()));
            let flipped = flipped.into_iter().filter(|(_, namespace, pod)| !placed(namespace, pod));
            judge.extend(flipped.map(|(_, namespace, pod)| (namespace.as_str(), pod.as_str())));
        }
        judge
    }

    /// The capacity word a remembered waiter would be recorded with on the state this pass leaves.
    fn short_now(&self, remembered: &Remembered) -> Option<Short> {
        let mut need: SmallVec<[(&Class, u64); 1]> = SmallVec::new();
        for (name, units) in &remembered.need {
            need.push((self.view.class(name)?, *units));
        }
        // As the walk picks its primary class: the most units, then the first name.
        let (primary, units) =
            need.iter().max_by_key(|(class, units)| (*units, std::cmp::Reverse(class.name.as_str()))).copied()?;
        Short::of(&self.short_of(primary, units, need.iter().copied(), String::new()))
    }

    /// The namespaces whose bound units are not what the memo's pass left.
    fn bound_moved<'m>(&self, memo: &'m Memo) -> impl Iterator<Item = &'m Name> {
        let moved = |(namespace, bound): &(&Name, &Bound)| **bound != self.bound_of(namespace);
        memo.bound.iter().filter(moved).map(|(namespace, _)| namespace)
    }

    /// The namespace's bound units of every class, after this pass's decisions so far.
    fn bound_of(&self, namespace: &str) -> Bound {
        self.view.classes().map(|class| self.bound_units(namespace, &class.name)).collect()
    }

    /// Whether the memo holds this pod as it is now, and nothing that loosened could take it: refused then, so
    /// refused now. Room that came free is on nodes with fewer units of one of its classes than it needs.
    pub(super) fn still_refused(&self, memo: &Memo, woken: &Woken<'_>, namespace: &str, pod: &str) -> bool {
        let Some(remembered) = self.same_edition(memo, namespace, pod) else { return false };
        match &remembered.refused {
            // Its budget or entitlement, read now: refused still, so refused whatever capacity does.
            Some(_) => self.need_refused(namespace, remembered).is_some_and(|wait| wait.is_err()),
            None => self.no_room_for(remembered, woken, namespace),
        }
    }

    /// What the memo holds of `pod` when it would wait for the reason it has recorded, on the state this pass
    /// leaves: refused still, its run alive, and for capacity still within its budgets (a budget is checked first).
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
                self.no_room_for(remembered, woken, &pod.namespace)
                    && (remembered.budgeted.is_empty() || self.need_refused(&pod.namespace, remembered) == Some(Ok(())))
                    && self.short_now(remembered) == remembered.short
            }
        };
        same.then_some(remembered)
    }

    /// The memo's entry for a pod not stored again since.
    fn same_edition<'m>(&self, memo: &'m Memo, namespace: &str, pod: &str) -> Option<&'m Remembered> {
        memo.get(namespace, pod).filter(|r| Some(r.edition) == self.view.gated_edition(namespace, pod))
    }

    /// Whether nothing that loosened has room for a pod remembered waiting for capacity: its namespace did not
    /// change, and one of its classes has fewer units free now than it needs on every node where room came free.
    fn no_room_for(&self, remembered: &Remembered, woken: &Woken<'_>, namespace: &str) -> bool {
        let short =
            |(class, units): &(Name, u64)| self.view.class(class).is_none_or(|class| self.room(woken, class) < *units);
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

    /// Notes what this pass judged of a gated pod, when it remembers.
    pub(super) fn judge(&mut self, pod: &Pod, judged: Judged) {
        if let Some(proposal) = self.remembering.as_mut() {
            proposal.judged.push((pod.namespace.clone(), pod.name.clone(), judged));
        }
    }

    /// A pod visited that is no longer at the gate.
    pub(super) fn judge_gone(&mut self, namespace: &'v str, pod: &'v str) {
        if let Some(proposal) = self.remembering.as_mut() {
            proposal.judged.push((Name::from(namespace), Name::from(pod), Judged::Gone));
        }
    }

    /// How a pod just judged to wait for `wait` is held: remembered when the next pass may leave it unvisited — it
    /// waits for capacity, budget or entitlement, for the reason already recorded (no write), its walk was not cut
    /// short, and its whole set exists unbound (a claim bound somewhere or still to be created is an object of its
    /// own that changes on its own) —, tried otherwise.
    pub(super) fn judgement(&self, pod: &Pod, wait: &Wait) -> Judged {
        // A walk cut short is only for capacity; a budget refusal walks nothing (the flag is the last walk's).
        let short = Short::of(wait);
        if short.is_some() && self.walk_capped.get() {
            return Judged::Tried;
        }
        let refused = match wait {
            Wait::NoCapacity { .. } | Wait::NeverFits { .. } | Wait::Fragmented { .. } => None,
            Wait::BudgetExceeded { .. } | Wait::NotEntitled { .. } => Some(wait.clone()),
            _ => return Judged::Tried,
        };
        if pod.waiting.as_ref() != Some(&wait.to_reason_over(pod.waiting.as_ref())) {
            return Judged::Tried;
        }
        let Some(edition) = self.view.gated_edition(&pod.namespace, &pod.name) else { return Judged::Tried };
        let Some(need) = self.need_of_template_set(pod) else { return Judged::Tried };
        let tenant = self.view.tenant(&pod.namespace);
        let budgeted = need.keys().filter(|class| tenant.and_then(|t| t.budget(class)).is_some());
        let budgeted = budgeted.map(|class| Name::from(*class)).collect();
        let need = need.iter().map(|(class, (_, units))| (Name::from(*class), *units)).collect();
        Judged::Remembered(Remembered { edition, created: pod.created, need, budgeted, refused, short })
    }

    /// Ends the proposal: the bound units the pass leaves, of every namespace with remembered pods.
    pub(super) fn close_proposal(&mut self, memo: Option<&Memo>) {
        let Some(proposal) = self.remembering.as_ref() else { return };
        let kept = memo.filter(|_| !proposal.fresh).into_iter().flat_map(|memo| memo.pods.keys());
        let judged = proposal.judged.iter().filter(|(_, _, judged)| matches!(judged, Judged::Remembered(_)));
        let namespaces: BTreeSet<&Name> = kept.chain(judged.map(|(namespace, _, _)| namespace)).collect();
        let bound = namespaces.into_iter().map(|namespace| (namespace.clone(), self.bound_of(namespace))).collect();
        if let Some(proposal) = self.remembering.as_mut() {
            proposal.bound = bound;
        }
    }
}

/// The remembered capacity waiters that room which came free may take, class by class, read in the queue's order.
pub(super) struct Woke<'m> {
    streams: Vec<Stream<'m>>,
    /// How many actions the pass had when the room was last read.
    pruned_at: Option<usize>,
}

/// One class's capacity waiters, the next first.
struct Stream<'m> {
    class: &'m Class,
    /// The fewest units of the class any of them needs.
    least: u64,
    queue: Peekable<btree_set::Iter<'m, (Time, Name, Name)>>,
}

impl Woke<'_> {
    /// Moves past the waiter [`super::Pass::peek_woke`] returned.
    pub(super) fn advance(&mut self, created: Time, namespace: &str, pod: &str) {
        for stream in &mut self.streams {
            let next = stream.queue.peek();
            if next.is_some_and(|(c, n, p)| *c == created && n.as_str() == namespace && p.as_str() == pod) {
                stream.queue.next();
                return;
            }
        }
    }
}
