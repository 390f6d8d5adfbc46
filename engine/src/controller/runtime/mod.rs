//! The controller's loop, sans I/O: the work queue, the event filter, when a pass runs and over what, pin
//! confirmation, retries after a refused write, and the resync — once, for the twin and the live adapter alike.
//! Both only drive it: they hand it what happened (a watch event, a live read, a write's outcome, a change of
//! leadership, the time) and do what it asks (read a node or an object live, write an action, sleep until a time).
//! Like the engine's decisions it is pure: time is an argument; there is no clock, thread or randomness inside.
//!
//! A driver's loop:
//!
//! ```text
//! watch event      → queue.observe(cache, change); wake the loop if it returns true
//! leadership moved → runtime.set_leading(leading, now)
//! loop: match runtime.poll(cache, queue, now) {
//!     Poll::Idle { wake_at }  → sleep until wake_at (or until a watch event wakes the queue)
//!     Poll::Confirm(nodes)    → for each node: runtime.read_live(cache, queue, node, GET node + LIST its pods)
//!     Poll::Refresh(object)   → runtime.refreshed(cache, queue, GET object (a 404: a deletion))
//!     Poll::Write(action)     → runtime.wrote(cache, queue, &action, write(&action), now)
//! }
//! ```
//!
//! The policy, and why (docs/controller.md, "The loop"):
//! - **What wakes a pass**: a watch event the filter keeps (observe.rs: a claim, a run whose claims a pass reads, a
//!   node, anything every waiter reads); a refused write's retry coming due; the echo of the controller's own writes
//!   while something waits ([`echo_needs_pass`]), [`ECHO_DELAY`] after the pass that wrote them; the resync.
//! - **Over what**: the keys queued since the last pass (`reconcile_changes`), or everything — a new leader's first
//!   pass and the resync, until such a pass lands. A refused write puts the keys of the pass it stopped back on the
//!   queue with the refused object's, so the next pass visits everything the stopped one had left undone.
//! - **Remembered waiters** (`Waiting`): learnt from passes whose writes all landed, forgotten on a refused write, a
//!   lost lease, a new leadership or a resync.
//! - **Pins are confirmed** before anything of a pass is written ([`PinConfirmation`]), unless the variant says not.
//! - **A refused write** stops the pass (later writes depend on earlier ones). A stale write (409 Conflict, 404) has
//!   its object read live first; every refusal retries after client-go's per-object backoff ([`RateLimiter`]:
//!   5 ms·2^k up to 1000 s, and a shared 10/s bucket), or sooner when a watch event wakes the queue, as
//!   controller-runtime requeues a failed key rate-limited and a new event for it at once.
//! - **A write not sent** because the lease lapsed stops the pass and tries again after [`NOT_LEADING_RETRY`] in
//!   full, unless the driver says leadership is gone.
//! - **What it measures** while it leads ([`Figures`], `controller::metrics`): the wait of each pod its cache sees
//!   leave the placement gate, and the unit-seconds claims hold, accrued when a pass's writes are in. Measuring
//!   changes nothing the loop does.

mod backoff;
mod observe;
mod queue;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

pub use backoff::{BUCKET_BURST, BUCKET_PER_SECOND, ITEM_BACKOFF_BASE, ITEM_BACKOFF_MAX, RateLimiter};
pub use observe::{
    Change, Kind, Namespace, Object, ObjectKey, Quota, Touched, newer, observe, observe_noting, pod_change_wakes,
    pod_deletion_wakes, revision, run_key_visits, vmi_key_needed,
};
pub use queue::{Watches, WorkQueue};

use super::metrics::{Figures, GateExit};
use super::{Action, Changes, EventKind, PinConfirmation, Waiting, reconcile_remembering};
use crate::model::{Time, View};
use crate::variant::Variant;

/// A full pass at least this often, whatever the watches say: controller-runtime's default `SyncPeriod`. The
/// watches relist on their own after any gap (kube-runtime's watcher, client-go's reflector), so the resync is a
/// backstop against a bug of ours, not the way changes arrive; a full pass on 1,000 nodes costs milliseconds, and
/// once in 10 hours costs nothing measurable (docs/performance.md).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10 * 3_600);

/// How long after a pass its own writes' echo is served (when something still waits for it): a watch's usual lag,
/// so the echo's pass takes in whatever else the watch brings meanwhile.
pub const ECHO_DELAY: Duration = Duration::from_millis(100);

/// After a write was not sent because the lease lapsed: long enough for the leader election to say whether this
/// replica still leads (it renews every 2 s).
pub const NOT_LEADING_RETRY: Duration = Duration::from_millis(200);

/// The most polls a driver makes at one wake before it sleeps: far more than the writes of any pass (a pass over
/// 10,000 waiting VMs writes a few per VM), so reaching it means the loop does not converge: a bug. The drivers stop
/// there (the twin fails the run).
pub const POLLS_PER_WAKE_MAX: usize = 1 << 22;

/// The longest a leading loop goes without accruing the units claims hold when it writes no claim (what drops the
/// series of a class or a tenant that went, `controller::metrics::SERIES_LINGER` after).
pub const ACCRUAL_PERIOD_MAX: Duration = Duration::from_secs(60);

/// Passes one poll may start: a pass that lands leaves nothing due before the next watch event, so a second turn
/// serves only what the watches brought meanwhile (the live adapter's watches run beside its loop).
const PASSES_PER_POLL_MAX: usize = 2;

/// What the driver does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Poll {
    /// Nothing now: sleep until `wake_at` (none: until a watch event wakes the queue or leadership moves).
    Idle { wake_at: Option<Time> },
    /// Read these nodes and the pods bound there live, each through [`Runtime::read_live`].
    Confirm(BTreeSet<String>),
    /// Read this object live (a write found it stale) and hand it to [`Runtime::refreshed`].
    Refresh(ObjectKey),
    /// Write this action and hand it back with its outcome to [`Runtime::wrote`].
    Write(Action),
}

/// How a write went.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Written: the objects the API server returned (and deletions), written through to the cache.
    Written(Vec<Change>),
    /// The object changed since the cache read it (409 Conflict, AlreadyExists) or is gone (404).
    Stale,
    /// Anything else: refused (403, 422, a webhook down), the API server unreachable, no answer in time.
    Failed,
    /// Not sent: this replica's lease was last renewed longer than the renew deadline ago.
    NotSent,
}

/// What the loop did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Passes started (a pass taken again after confirming pins counts once).
    pub passes: u64,
    /// Passes taken again because a pin's node read live differed from the cache.
    pub pins_rechecked: u64,
    /// Writes refused (stale or failed).
    pub refused: u64,
}

/// The controller's loop between passes.
#[derive(Debug)]
pub struct Runtime {
    variant: Variant,
    leading: bool,
    /// The next pass covers everything (a new leader's first, a resync, a pass after a lapsed lease) until one
    /// such pass lands; when it runs is `due`'s.
    full: bool,
    /// Keys the loop queued itself (its own writes' and reads' echo, a stopped pass's keys) for the next pass.
    pending: Changes,
    /// Whether `pending` needs a pass (a change the filter keeps, which may have no key).
    pending_wakes: bool,
    /// When the pass for `pending` is due.
    due: Option<Time>,
    /// When the next resync is due (set by each full pass).
    resync_at: Option<Time>,
    waiting: Waiting,
    retries: RateLimiter<ObjectKey>,
    pass: Option<InFlight>,
    /// An object a write found stale, read live before the retry.
    refresh: Option<ObjectKey>,
    stats: Stats,
    figures: Figures,
    /// Pods its own reads took off the gate, measured at the next poll.
    exits: Vec<GateExit>,
    /// The units held may have changed since they were last accrued: a claim was written (they change only so), or
    /// this replica began leading (it accrued nothing while it followed).
    holdings_changed: bool,
}

/// A pass being confirmed and written.
#[derive(Debug)]
struct InFlight {
    /// The keys it serves.
    serving: Changes,
    /// Its writes not yet handed out, in order.
    actions: VecDeque<Action>,
    confirmation: PinConfirmation,
    /// Pins are still being confirmed.
    confirming: bool,
    /// Nodes of the round handed out that read live differently from the cache.
    moved: usize,
    /// A round of reads was handed out.
    round_out: bool,
    /// A write was handed out and its outcome is awaited.
    writing: bool,
}

impl Runtime {
    /// A controller process's loop, not leading yet, running `variant` (the shipped rules unless a scenario asks
    /// for a counterfactual).
    pub fn new(variant: Variant) -> Self {
        Runtime {
            variant,
            leading: false,
            full: true,
            pending: Changes::default(),
            pending_wakes: false,
            due: None,
            resync_at: None,
            waiting: Waiting::default(),
            retries: RateLimiter::default(),
            pass: None,
            refresh: None,
            stats: Stats::default(),
            figures: Figures::default(),
            exits: Vec::new(),
            holdings_changed: false,
        }
    }

    pub fn variant(&self) -> &Variant {
        &self.variant
    }

    /// Runs the engine's rules of `variant` from the next pass on.
    pub fn set_variant(&mut self, variant: Variant) {
        self.variant = variant;
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// What it measured so far (`controller::metrics`).
    pub fn figures(&self) -> &Figures {
        &self.figures
    }

    /// Leadership moved at `now`. A replica that starts leading passes over everything at once; one that stops
    /// drops its pass (nothing more of it is written), keeps its keys for when it leads again, and stops accruing
    /// the units claims hold (the next leader does).
    pub fn set_leading(&mut self, leading: bool, now: Time) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        self.start_over();
        if leading {
            self.due = Some(Time::MIN);
            self.holdings_changed = true;
        } else {
            self.figures.stop_accruing(now);
        }
    }

    /// What to do at `now`, on `cache` (the view the watches fill) and `queue` (what they queued).
    pub fn poll(&mut self, cache: &View, queue: &mut WorkQueue, now: Time) -> Poll {
        self.measure_exits(queue, now);
        if let Some(object) = self.refresh.take() {
            return Poll::Refresh(object);
        }
        for _ in 0..PASSES_PER_POLL_MAX {
            if self.pass.is_none() {
                if !self.leading || !self.is_due(queue, now) {
                    return Poll::Idle { wake_at: self.wake_at() };
                }
                self.start(cache, queue, now);
            }
            if let Some(next) = self.step(cache, queue, now) {
                return next;
            }
            self.landed(cache, now);
        }
        // Still due (the watches keep waking the queue): the driver polls again at once.
        Poll::Idle { wake_at: Some(now) }
    }

    /// The pass in flight's next step: a round of pins to confirm, or a write; `None` once it has nothing left.
    fn step(&mut self, cache: &View, queue: &mut WorkQueue, now: Time) -> Option<Poll> {
        let pass = self.pass.as_mut().expect("a pass is in flight");
        debug_assert!(!pass.writing, "a write's outcome comes before the next poll");
        if pass.confirming && pass.round_out {
            if pass.moved == 0 {
                pass.confirming = false;
            } else {
                // A pin's node differed from the cache: the pass is taken again on what was read (nothing of it
                // was written), serving its keys and whatever arrived meanwhile.
                self.stats.pins_rechecked += 1;
                let mut serving = std::mem::take(&mut pass.serving);
                merge(&mut serving, std::mem::take(&mut self.pending));
                merge(&mut serving, queue.take());
                self.pending_wakes = false;
                let changes = (!self.full).then_some(&serving);
                let actions = reconcile_remembering(cache, now, changes, &self.variant, &mut self.waiting);
                let pass = self.pass.as_mut().expect("a pass is in flight");
                pass.serving = serving;
                pass.actions = actions.into();
                pass.moved = 0;
            }
        }
        let pass = self.pass.as_mut().expect("a pass is in flight");
        if pass.confirming {
            let nodes = pass.confirmation.next_round(pass.actions.make_contiguous());
            pass.round_out = !nodes.is_empty();
            pass.confirming = pass.round_out;
            if pass.round_out {
                return Some(Poll::Confirm(nodes));
            }
        }
        let action = pass.actions.pop_front()?;
        pass.writing = true;
        Some(Poll::Write(action))
    }

    /// What a live read of a pinned `node` and the pods bound there returned (`None`: the read failed), into the
    /// cache. Returns whether it changed the node as placement sees it (the pass is then taken again).
    pub fn read_live(
        &mut self,
        cache: &mut View,
        queue: &mut WorkQueue,
        node: &str,
        live: Option<Vec<Change>>,
        now: Time,
    ) -> bool {
        let Some(live) = live else {
            self.refused(cache, ObjectKey::new(Kind::Node, "", node), now);
            return false;
        };
        if self.pass.is_none() || live.is_empty() {
            return false;
        }
        // Newer objects that leave the node as placement sees it (a pod gone Running) change no decision.
        let before = cache.node_standing(node);
        for change in live {
            self.take_own(cache, queue, change);
        }
        let moved = cache.node_standing(node) != before;
        if moved && let Some(pass) = self.pass.as_mut() {
            pass.moved += 1;
        }
        moved
    }

    /// What a live read of a stale object returned (`None`: the read failed; a deletion: it is gone).
    pub fn refreshed(&mut self, cache: &mut View, queue: &mut WorkQueue, live: Option<Change>) {
        if let Some(change) = live {
            self.take_own(cache, queue, change);
        }
    }

    /// The outcome of writing `action`, which [`Poll::Write`] handed out.
    pub fn wrote(&mut self, cache: &mut View, queue: &mut WorkQueue, action: &Action, outcome: Outcome, now: Time) {
        let Some(pass) = self.pass.as_mut().filter(|pass| pass.writing) else {
            debug_assert!(false, "an outcome answers a write handed out");
            return;
        };
        pass.writing = false;
        match outcome {
            Outcome::Written(changes) => {
                self.holdings_changed |= matches!(
                    action,
                    Action::CreateClaim { .. } | Action::UpdateClaim { .. } | Action::DeleteClaim { .. }
                );
                // Naming the object costs a copy of its names per write: only worth it when something backs off.
                if self.retries.backing_off() {
                    self.retries.forget(&target(action));
                }
                // Written through: the next pass sees its own writes at once; the watch's echo of them is older
                // than the cache by then and changes nothing.
                for change in changes {
                    if let Change::Delete { .. } = &change {
                        queue.bury(change.key(), change.revision());
                    }
                    if let Some(touched) = observe_noting(cache, change, Some(&mut self.exits)) {
                        self.pending_wakes |= queue::queue(&mut self.pending, touched);
                    }
                }
                for exit in self.exits.drain(..) {
                    self.figures.left_gate(&exit, now);
                }
            }
            Outcome::Stale => {
                let object = target(action);
                self.refresh = Some(object.clone());
                self.refused(cache, object, now);
            }
            Outcome::Failed => self.refused(cache, target(action), now),
            Outcome::NotSent => {
                self.start_over();
                self.schedule(now, NOT_LEADING_RETRY);
            }
        }
    }

    /// Whether a pass is due: the queue woke, or a new leadership's first pass, a retry, an echo or the resync came
    /// due.
    fn is_due(&self, queue: &WorkQueue, now: Time) -> bool {
        queue.is_woken() || self.due.is_some_and(|due| due <= now) || self.resync_at.is_some_and(|at| at <= now)
    }

    /// When to poll again while idle.
    fn wake_at(&self) -> Option<Time> {
        if !self.leading {
            return None;
        }
        match (self.due, self.resync_at) {
            (Some(due), Some(resync)) => Some(due.min(resync)),
            (due, resync) => due.or(resync),
        }
    }

    /// Decides a pass over the queued keys, or over everything.
    fn start(&mut self, cache: &View, queue: &mut WorkQueue, now: Time) {
        if self.resync_at.is_some_and(|at| at <= now) {
            self.start_over();
        }
        if self.full {
            self.resync_at = Some(after(now, RESYNC_PERIOD));
        }
        self.stats.passes += 1;
        let mut serving = queue.take();
        merge(&mut serving, std::mem::take(&mut self.pending));
        self.pending_wakes = false;
        self.due = None;
        let changes = (!self.full).then_some(&serving);
        let actions = reconcile_remembering(cache, now, changes, &self.variant, &mut self.waiting);
        self.pass = Some(InFlight {
            serving,
            actions: actions.into(),
            confirmation: PinConfirmation::default(),
            confirming: !self.variant.unconfirmed_pins,
            moved: 0,
            round_out: false,
            writing: false,
        });
    }

    /// Every write of the pass landed: a pass over everything is done, the waiters it left are remembered, and the
    /// echo of its writes is served after [`ECHO_DELAY`] when something still waits for it ([`echo_needs_pass`]).
    fn landed(&mut self, cache: &View, now: Time) {
        self.accrue(cache, now);
        self.pass = None;
        self.full = false;
        self.waiting.landed();
        if !self.pending_wakes || !echo_needs_pass(cache) {
            self.pending = Changes::default();
            self.pending_wakes = false;
        } else {
            self.schedule(now, ECHO_DELAY);
        }
    }

    /// A write or read of `object` was refused: the pass stops there, its keys and the object's go back on the
    /// queue, and the next pass is due after the object's backoff.
    fn refused(&mut self, cache: &View, object: ObjectKey, now: Time) {
        // Some of the pass's writes may have landed.
        self.accrue(cache, now);
        self.stats.refused += 1;
        self.waiting.forget();
        if let Some(pass) = self.pass.take() {
            merge(&mut self.pending, pass.serving);
        }
        match object.kind {
            Kind::Claim => {
                self.pending.claims.insert((object.namespace.clone(), object.name.clone()));
            }
            Kind::Pod => {
                if let Some(vmi) = cache.pod(&object.namespace, &object.name).and_then(|p| p.owner_vmi.as_ref()) {
                    self.pending.vmis.insert((object.namespace.clone(), vmi.name.clone()));
                }
            }
            _ => {}
        }
        self.pending_wakes = true;
        let since_epoch = Duration::from_millis(u64::try_from(now.as_millisecond()).unwrap_or(0));
        let delay = self.retries.when(&object, since_epoch);
        self.schedule(now, delay);
    }

    /// The pass in flight is dropped and the next one covers everything, with nothing remembered.
    fn start_over(&mut self) {
        if let Some(pass) = self.pass.take() {
            merge(&mut self.pending, pass.serving);
        }
        self.full = true;
        self.waiting.forget();
    }

    /// A pass is due `delay` after `now`, unless one is due by then.
    fn schedule(&mut self, now: Time, delay: Duration) {
        let at = after(now, delay);
        self.due = Some(self.due.map_or(at, |due| due.min(at)));
    }

    /// Own reads into the cache (past the tombstones), their keys for the next pass.
    fn take_own(&mut self, cache: &mut View, queue: &WorkQueue, change: Change) {
        if queue.buried(&change) {
            return;
        }
        if let Some(touched) = observe_noting(cache, change, Some(&mut self.exits)) {
            self.pending_wakes |= queue::queue(&mut self.pending, touched);
        }
    }

    /// The units claims hold, accrued up to `now` and read again from `cache` when they may have changed since the
    /// last time (nothing else changes them: accruing later gives the same sum), or when the last time is
    /// [`ACCRUAL_PERIOD_MAX`] ago (a series whose class or tenant went is dropped then).
    fn accrue(&mut self, cache: &View, now: Time) {
        if std::mem::take(&mut self.holdings_changed) || self.figures.accrued_before(now, ACCRUAL_PERIOD_MAX) {
            self.figures.accrue(cache, now);
        }
    }

    /// Pods the watch (while this replica leads) or its own reads took off the gate since the last poll: their
    /// waits, measured now (a deletion wakes the loop, so now is when it came).
    fn measure_exits(&mut self, queue: &mut WorkQueue, now: Time) {
        let (leading, figures) = (self.leading, &mut self.figures);
        queue.drain_exits(leading, |exit| {
            if leading {
                figures.left_gate(exit, now);
            }
        });
        if !self.exits.is_empty() {
            for exit in self.exits.drain(..).filter(|_| leading) {
                figures.left_gate(&exit, now);
            }
        }
    }
}

/// Whether the echo of a pass's own writes needs a pass of its own, `view` being the cache with every write of that
/// pass in. A pass takes each decision that waits on nothing whole — a second pass over the state its writes leave
/// writes nothing (the property `the_controller_keeps_every_invariant_and_one_pass_is_enough`) — so its writes can
/// only matter to waiters: a pod at the gate or a held claim pending, which a release lets through (a template
/// claim's name freed once its deletion lands). With none left, the echo's pass would decide nothing.
pub fn echo_needs_pass(view: &View) -> bool {
    view.gated_pods().next().is_some() || view.pending_held_claims().next().is_some()
}

/// The object an action writes: what its retries are counted by.
pub fn target(action: &Action) -> ObjectKey {
    let (kind, namespace, name) = match action {
        Action::CreateClaim { claim, .. } | Action::UpdateClaim { claim, .. } | Action::DeleteClaim { claim, .. } => {
            (Kind::Claim, &claim.namespace, &claim.name)
        }
        Action::PinAndUngate { pod, .. }
        | Action::Ungate { pod, .. }
        | Action::Pin { pod, .. }
        | Action::SetPodWaiting { pod, .. } => (Kind::Pod, &pod.namespace, &pod.name),
        Action::OpenUsage { usage } => (Kind::Usage, &usage.namespace, &usage.name),
        Action::CloseUsage { usage, .. } => (Kind::Usage, &usage.namespace, &usage.name),
        Action::PublishClass { class, .. } => return ObjectKey::new(Kind::Class, "", class.as_str()),
        Action::Event { kind: EventKind::Claim, object, .. } => (Kind::Claim, &object.namespace, &object.name),
        Action::Event { kind: EventKind::Pod, object, .. } => (Kind::Pod, &object.namespace, &object.name),
    };
    ObjectKey { kind, namespace: namespace.clone(), name: name.clone() }
}

fn merge(into: &mut Changes, from: Changes) {
    into.claims.extend(from.claims);
    into.vmis.extend(from.vmis);
    into.nodes.extend(from.nodes);
}

fn after(now: Time, delay: Duration) -> Time {
    now.checked_add(delay).unwrap_or(now)
}

#[cfg(test)]
mod tests;
