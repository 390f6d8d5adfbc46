//! The invariants every run is checked against after every event, whatever its scenario expects.
//!
//! The checks keep their own ledgers (devices booked per node, units bound per budget, the runs holding each held
//! claim), updated from the keys the event changed (the API server's journal), so a check costs what the event
//! touched, not the cluster's size, and it counts independently of the engine's own index it is checking.
//!
//! Safety invariants hold after every event. Two are about settling and allow the controller's reaction time (the
//! watch lag, a pass, a refused write's retry): usage records agreeing with attachments, and liveness (no pod left
//! at the gate while its whole set fits). Liveness is sampled every quarter of the reaction time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use gpuclaim_engine::controller::runtime::ObjectKey;
use gpuclaim_engine::controller::{Action, Changes, reconcile_changes_with, template_claim_name};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::pod_role;
use gpuclaim_engine::model::{Claim, GpuMode, Name, Pod, Time, View};
use gpuclaim_engine::scheduling::is_pinned_to;
use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::apiserver::Kind;
use gpuclaim_sim::apiserver::watch::Journaled;
use gpuclaim_sim::kernel::Millis;

/// One invariant, by the name scenario files and reports use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// A node got more devices booked (by bound pods, or by claims) than it has.
    DeviceDoubleBooked,
    /// A namespace got more units of a class bound than its budget.
    BudgetExceeded,
    /// Two runs hold one held claim at once (each with a live, ungated pod listing it).
    ClaimAttachedTwice,
    /// A pod the gate holds was ungated without being pinned to one node.
    UngatedWithoutPin,
    /// A pod the gate held was ungated or bound where its claims are not all bound.
    SetSplit,
    /// A claim's open usage records disagree with its attachment (one open record iff attached) for longer than
    /// the reaction time.
    UsageRecordMismatch,
    /// A pod waited at the gate while its whole set fit on some node for longer than the reaction time.
    WaitingWhileFits,
    /// A namespace the platform did not entitle to vGPU classes got units of one bound (the platform's grant is the
    /// entitlement the run started with: a label a tenant set itself grants nothing).
    VgpuWithoutEntitlement,
}

impl Invariant {
    pub const ALL: [Invariant; 8] = [
        Invariant::DeviceDoubleBooked,
        Invariant::BudgetExceeded,
        Invariant::ClaimAttachedTwice,
        Invariant::UngatedWithoutPin,
        Invariant::SetSplit,
        Invariant::UsageRecordMismatch,
        Invariant::WaitingWhileFits,
        Invariant::VgpuWithoutEntitlement,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invariant::DeviceDoubleBooked => "DeviceDoubleBooked",
            Invariant::BudgetExceeded => "BudgetExceeded",
            Invariant::ClaimAttachedTwice => "ClaimAttachedTwice",
            Invariant::UngatedWithoutPin => "UngatedWithoutPin",
            Invariant::SetSplit => "SetSplit",
            Invariant::UsageRecordMismatch => "UsageRecordMismatch",
            Invariant::WaitingWhileFits => "WaitingWhileFits",
            Invariant::VgpuWithoutEntitlement => "VgpuWithoutEntitlement",
        }
    }

    pub fn named(name: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|invariant| invariant.name() == name)
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken invariant: which, and what exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub detail: String,
}

fn violation(invariant: Invariant, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The default reaction time: watch lag, a pass, retries after refused writes, with room to spare.
pub const REACTION_TIME_DEFAULT: Millis = Millis::seconds(60);

type Key = (Name, Name);

/// The ledgers that are only looked up by key are hashed with a fixed seed: nothing reads their order.
type Ledger<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// What the checks remember of a pod.
#[derive(Clone, Debug, Default, PartialEq)]
struct SeenPod {
    /// Bound and not finished: the node its devices are booked on.
    booked_on: Option<Name>,
    /// The pod's requests (shared with it); counted only while it is booked.
    devices: Arc<BTreeMap<String, u64>>,
    /// A role the gate holds (under the run's variant).
    gated_role: bool,
    gated: bool,
    /// Live and ungated with a gated role: it holds its held claims (uid of its VMI).
    holds: Option<Name>,
    /// A gated role's attachments, as read from its annotations.
    attachments: Option<Attachments>,
    /// What it requests of its node's CPU (millis) and memory (bytes).
    cpu_millis: u64,
    memory_bytes: u64,
}

impl SeenPod {
    /// The held claims it holds (none unless it holds its set).
    fn held(&self) -> impl Iterator<Item = &str> {
        let attachments = self.attachments.as_ref().filter(|_| self.holds.is_some());
        attachments.into_iter().flat_map(|a| a.held.iter().map(Name::as_str))
    }
}

/// A pod's attachments, as read once from the annotations they came from: a pod written again with the same
/// (shared) annotations has the same attachments, so the JSON is not parsed again.
#[derive(Clone, Debug)]
struct Attachments {
    from: Arc<BTreeMap<String, String>>,
    /// The held claims' names.
    held: Arc<[Name]>,
    /// Every claim of the set, held ones and the run's template claims, in list order.
    claims: Arc<[Name]>,
    /// Whether every attachment names a claim (one naming neither a claim nor a template is malformed).
    named: bool,
    /// The units the set needs per class, in class order.
    units: Arc<[(String, u64)]>,
}

impl Attachments {
    /// The pod's attachments (a run's template claims are named after its VMI).
    fn read(pod: &Pod) -> Attachments {
        let vmi = pod.owner_vmi.as_ref().map_or("", |vmi| vmi.name.as_str());
        let listed = pod.attachments().and_then(Result::ok).unwrap_or_default();
        let mut units: BTreeMap<String, u64> = BTreeMap::new();
        for attachment in listed.iter() {
            *units.entry(attachment.class.clone()).or_default() += u64::from(attachment.count);
        }
        let claims = listed.iter().filter_map(|a| match (&a.claim, a.template) {
            (Some(name), _) => Some(Name::from(name.as_str())),
            (None, Some(index)) => Some(Name::from(template_claim_name(vmi, index).as_str())),
            (None, None) => None,
        });
        Attachments {
            from: Arc::clone(&pod.annotations),
            held: listed.iter().filter_map(|a| a.claim.as_deref().map(Name::from)).collect(),
            claims: claims.collect(),
            named: listed.iter().all(|a| a.claim.is_some() || a.template.is_some()),
            units: units.into_iter().collect(),
        }
    }
}

/// Equal when they list the same attachments, whichever annotations they were read from (`Arc`'s equality looks at
/// the address first: a pod's unchanged attachments compare without reading them).
impl PartialEq for Attachments {
    fn eq(&self, other: &Self) -> bool {
        (&self.held, &self.claims, self.named, &self.units) == (&other.held, &other.claims, other.named, &other.units)
    }
}

/// What the checks remember of a claim.
#[derive(Clone, Debug)]
struct SeenClaim {
    node: Option<Name>,
    // Names, as they key the ledgers below: a claim moved is two reference counts, not two copies.
    resource: Name,
    class: Name,
    units: u64,
}

impl SeenClaim {
    /// Whether `claim` (whose class counts `resource`) would be remembered as this, compared without copying it.
    fn is(&self, claim: &Claim, resource: &str) -> bool {
        self.node.as_deref() == claim.node.as_deref()
            && self.resource == resource
            && self.class == claim.class
            && self.units == u64::from(claim.count)
    }
}

/// The run's invariant checks and their ledgers.
#[derive(Debug)]
pub struct Invariants {
    reaction: Millis,
    variant: Variant,
    pods: Ledger<Key, SeenPod>,
    /// node → resource → units the bound, live pods there request.
    pod_devices: Ledger<Name, BTreeMap<String, u64>>,
    claims: Ledger<Key, SeenClaim>,
    /// (node, resource) → units of the claims bound there.
    claim_units: Ledger<Key, u64>,
    /// (namespace, class) → units bound.
    bound: Ledger<Key, u64>,
    /// (namespace, held claim) → uids of the VMIs whose live, ungated pods list it.
    holders: Ledger<Key, BTreeSet<Name>>,
    /// usage record → its claim (to find the claim when the record is gone).
    usage_claims: Ledger<Key, Name>,
    /// Claims whose usage records disagree with their attachment, since when.
    mismatched: BTreeMap<Key, Millis>,
    /// Gated pods whose set fits on some node, since when (continuously at every sample).
    fitting: BTreeMap<Key, (Millis, String)>,
    /// The gated pods, as the liveness sample's shortcut counts them (see [`Invariants::none_can_fit`]).
    waiters: Ledger<Key, Waiter>,
    /// How many of them have each demand.
    demands: BTreeMap<Demand, u32>,
    /// How many of them have none the shortcut can judge (a claim of theirs bound, attachments unread).
    unjudged: u32,
    /// (namespace, claim) → the gated pods that list it (whose demand its binding moves).
    listing: Ledger<Key, BTreeSet<Key>>,
    next_sample: Millis,
    /// The buffer the last event's keys came in, kept so the next event's fit without growing one again.
    journal: Vec<Journaled>,
    /// The namespaces the platform entitled to vGPU classes (as the run started).
    entitled: BTreeSet<Name>,
    /// (node, resource) → the allocatable units last seen.
    allocatable: Ledger<Key, u64>,
    /// (node, resource) → when its allocatable last fell, and what it was before (the most within one reaction
    /// time): a bind decided on a cache one watch lag behind the device plugin is judged against that.
    lowered: Ledger<Key, (Millis, u64)>,
}

impl Invariants {
    /// An empty buffer for the next event's keys (see [`gpuclaim_sim::apiserver::watch::Watch::take_journal`]).
    pub fn spent_journal(&mut self) -> Vec<Journaled> {
        std::mem::take(&mut self.journal)
    }

    /// Checks starting on `store` (the objects a scenario starts with are taken into the ledgers as they are).
    pub fn new(store: &View, variant: Variant, reaction: Millis) -> Self {
        let mut invariants = Invariants {
            reaction,
            variant,
            pods: Ledger::default(),
            pod_devices: Ledger::default(),
            claims: Ledger::default(),
            claim_units: Ledger::default(),
            bound: Ledger::default(),
            holders: Ledger::default(),
            usage_claims: Ledger::default(),
            mismatched: BTreeMap::new(),
            fitting: BTreeMap::new(),
            waiters: Ledger::default(),
            demands: BTreeMap::new(),
            unjudged: 0,
            listing: Ledger::default(),
            next_sample: Millis::ZERO,
            journal: Vec::new(),
            entitled: store.tenants().filter(|(_, t)| t.vgpu_entitled).map(|(namespace, _)| namespace.into()).collect(),
            allocatable: Ledger::default(),
            lowered: Ledger::default(),
        };
        for node in store.nodes() {
            for (resource, units) in &node.devices {
                invariants.allocatable.insert((node.name.as_str().into(), resource.as_str().into()), *units);
            }
        }
        let keys: Vec<Journaled> = store
            .pods()
            .map(|p| key(Kind::Pod, &p.namespace, &p.name))
            .chain(store.claims().map(|c| key(Kind::Claim, &c.namespace, &c.name)))
            .chain(store.usages().map(|u| key(Kind::Usage, &u.namespace, &u.name)))
            .map(|key| (key, 0))
            .collect();
        // What a scenario starts with is not a booking this run made: ledgers only.
        invariants.touched(store, keys, Millis::ZERO, &mut Vec::new());
        invariants
    }

    /// Checks what one event changed (`touched`, from the API server's journal) at `now` (`time` as the engine
    /// reads it); `leader` says whether a controller replica leads (liveness waits for one).
    pub fn check(
        &mut self,
        store: &View,
        touched: Vec<Journaled>,
        now: Millis,
        time: Time,
        leader: bool,
    ) -> Result<(), Violation> {
        match self.check_all(store, touched, now, time, leader).into_iter().next() {
            Some(violation) => Err(violation),
            None => Ok(()),
        }
    }

    /// [`Invariants::check`], every invariant the event broke (at most one each per object), the ledgers kept whole:
    /// a run that expects some of them broken (a counterfactual) goes on checking the others.
    pub fn check_all(
        &mut self,
        store: &View,
        touched: Vec<Journaled>,
        now: Millis,
        time: Time,
        leader: bool,
    ) -> Vec<Violation> {
        let mut found = Vec::new();
        self.touched(store, touched, now, &mut found);
        if let Some((claim, since)) = self.mismatched.iter().find(|(_, since)| now.0 - since.0 > self.reaction.0) {
            let detail = usage_detail(store, claim);
            found.push(violation(
                Invariant::UsageRecordMismatch,
                format!("GPUClaim {}/{}: {detail} since {since}", claim.0, claim.1),
            ));
        }
        if now >= self.next_sample {
            self.next_sample = now + Millis(self.reaction.0 / 4).max(Millis(1));
            found.extend(self.sample_liveness(store, now, time, leader).err());
        }
        found
    }

    fn touched(&mut self, store: &View, mut touched: Vec<Journaled>, now: Millis, found: &mut Vec<Violation>) {
        // In key order, each once whatever its revisions (an event touches a handful of objects: sorted in place,
        // not through a set). The checks read the store as the event left it, so the revisions are not needed.
        touched.sort_unstable();
        touched.dedup_by(|later, earlier| later.0 == earlier.0);
        let mut usage_checks: BTreeSet<Key> = BTreeSet::new();
        let mut grown = Vec::new();
        for (object, _) in &touched {
            match object.kind {
                Kind::Node => self.node(store, &object.name, now),
                Kind::Claim => {
                    grown.extend(self.claim(store, object));
                    usage_checks.insert((object.namespace.clone(), object.name.clone()));
                }
                Kind::Usage => {
                    let usage_key = (object.namespace.clone(), object.name.clone());
                    let claim = match store.usage(&object.namespace, &object.name) {
                        Some(usage) => {
                            self.usage_claims.insert(usage_key, usage.claim.clone());
                            Some(usage.claim.clone())
                        }
                        None => self.usage_claims.remove(&usage_key),
                    };
                    if let Some(claim) = claim {
                        usage_checks.insert((object.namespace.clone(), claim));
                    }
                }
                _ => {}
            }
        }
        for claim in &grown {
            found.extend(self.judge_claim(store, claim, now).err());
        }
        // Pods after claims: a pod ungated in this event is judged on the claims as this event left them.
        let mut booked = Vec::new();
        for (object, _) in touched.iter().filter(|(o, _)| o.kind == Kind::Pod) {
            booked.extend(self.pod(store, (object.namespace.clone(), object.name.clone()), found));
        }
        // Handed back for the next event's keys (see [`Invariants::spent_journal`]).
        touched.clear();
        self.journal = touched;
        for (pod, node) in booked {
            found.extend(self.judge_pod_devices(store, &pod, &node).err());
        }
        for claim in usage_checks {
            if usage_agrees(store, &claim) {
                self.mismatched.remove(&claim);
            } else {
                self.mismatched.entry(claim).or_insert(now);
            }
        }
    }

    /// Takes a claim's new state into the ledgers; returns the claim when it took units it did not hold before (to
    /// be judged once every change of the event is in: a release and a bind in one pass are one step).
    fn claim(&mut self, store: &View, object: &ObjectKey) -> Option<Key> {
        let key = (object.namespace.clone(), object.name.clone());
        let stored = store.claim(&object.namespace, &object.name);
        let resource = |claim: &Claim| store.class(&claim.class).map_or("", |class| class.resource_name.as_str());
        // Most claim writes change neither its node nor its units (a condition, a finalizer): nothing to move.
        if let (Some(claim), Some(old)) = (stored, self.claims.get(&key))
            && old.is(claim, resource(claim))
        {
            return None;
        }
        let old = self.claims.remove(&key);
        if old.as_ref().and_then(|old| old.node.as_ref()) != stored.and_then(|claim| claim.node.as_ref()) {
            let listing: Vec<Key> = self.listing.get(&key).into_iter().flatten().cloned().collect();
            for pod in listing {
                self.judge_waiter(store, &pod);
            }
        }
        let new = stored.map(|claim| SeenClaim {
            node: claim.node.clone(),
            resource: resource(claim).into(),
            class: claim.class.as_str().into(),
            units: u64::from(claim.count),
        });
        if let Some(old) = &old
            && let Some(node) = &old.node
        {
            subtract(&mut self.claim_units, (node.clone(), old.resource.clone()), old.units);
            subtract(&mut self.bound, (key.0.clone(), old.class.clone()), old.units);
        }
        let new = new?;
        let mut grew = false;
        if let Some(node) = &new.node {
            grew = old.as_ref().is_none_or(|old| old.node.as_ref() != Some(node) || old.units < new.units);
            add(&mut self.claim_units, (node.clone(), new.resource.clone()), new.units);
            add(&mut self.bound, (key.0.clone(), new.class.clone()), new.units);
        }
        self.claims.insert(key.clone(), new);
        grew.then_some(key)
    }

    /// A node's new allocatable: where a resource's fell, when and from what.
    fn node(&mut self, store: &View, name: &str, now: Millis) {
        let Some(node) = store.node(name) else { return };
        for (resource, units) in &node.devices {
            let key: Key = (name.into(), resource.as_str().into());
            let before = self.allocatable.insert(key.clone(), *units).unwrap_or(*units);
            if *units < before {
                let recent = self.lowered.get(&key).filter(|(at, _)| now.0 - at.0 <= self.reaction.0);
                let from = recent.map_or(before, |(_, from)| (*from).max(before));
                self.lowered.insert(key, (now, from));
            }
        }
    }

    /// What a bind onto `node` is judged against: its allocatable, or what it had before it fell within the last
    /// reaction time. The device plugin's report reaches the controller one watch lag late (a bind decided on the
    /// units a moment before they failed is the same race as units failing a moment after the bind), and the claims
    /// a failure leaves over a node's units are a debt the engine pays before it hands out units there again.
    fn bind_allowance(&self, store: &View, node: &str, resource: &str, now: Millis) -> u64 {
        let allocatable = store.node(node).and_then(|n| n.devices.get(resource).copied()).unwrap_or(0);
        let key: Key = (node.into(), resource.into());
        let recent = self.lowered.get(&key).filter(|(at, _)| now.0 - at.0 <= self.reaction.0);
        recent.map_or(allocatable, |(_, before)| allocatable.max(*before))
    }

    /// A claim that took units: its node's claims within the node's devices (see [`Invariants::bind_allowance`]),
    /// its namespace within its budget.
    fn judge_claim(&self, store: &View, key: &Key, now: Millis) -> Result<(), Violation> {
        let Some(claim) = self.claims.get(key) else { return Ok(()) };
        let Some(node) = &claim.node else { return Ok(()) };
        let booked = self.claim_units.get(&(node.clone(), claim.resource.clone())).copied().unwrap_or(0);
        let allocatable = self.bind_allowance(store, node, &claim.resource, now);
        if booked > allocatable {
            let there: Vec<String> =
                store.claims_on_node(node).map(|c| format!("{}/{} ({})", c.namespace, c.name, c.count)).collect();
            return Err(violation(
                Invariant::DeviceDoubleBooked,
                format!(
                    "GPUClaim {}/{} bound to node {node}: claims there hold {booked} units of {}, the node has \
                     {allocatable} (claims there: {})",
                    key.0,
                    key.1,
                    claim.resource,
                    there.join(", ")
                ),
            ));
        }
        let bound = self.bound.get(&(key.0.clone(), claim.class.clone())).copied().unwrap_or(0);
        let budget = store.tenant(&key.0).and_then(|t| t.budget(&claim.class));
        if let Some(budget) = budget.filter(|budget| bound > *budget) {
            return Err(violation(
                Invariant::BudgetExceeded,
                format!(
                    "GPUClaim {}/{} bound: namespace {} holds {bound} units of class {}, its budget is {budget}",
                    key.0, key.1, key.0, claim.class
                ),
            ));
        }
        let vgpu = store.class(&claim.class).is_some_and(|class| class.mode == GpuMode::Vgpu);
        if vgpu && !self.entitled.contains(&key.0) {
            return Err(violation(
                Invariant::VgpuWithoutEntitlement,
                format!(
                    "GPUClaim {}/{} bound: namespace {} holds {} units of vGPU class {}, and the platform never \
                     entitled it",
                    key.0, key.1, key.0, claim.units, claim.class
                ),
            ));
        }
        Ok(())
    }

    /// Takes a pod's new state into the ledgers and judges its gate and its set; returns the pod and its node when it
    /// was bound there in this event (its devices are judged once every change of the event is in).
    fn pod(&mut self, store: &View, key: Key, found: &mut Vec<Violation>) -> Option<(Key, Name)> {
        let old = self.pods.remove(&key).unwrap_or_default();
        let pod = store.pod(&key.0, &key.1);
        let new = pod.map(|pod| self.seen(pod, &old)).unwrap_or_default();
        // A write that changed nothing the checks follow (a condition, a phase before binding): nothing to move.
        if pod.is_some() && new == old {
            self.pods.insert(key, new);
            return None;
        }
        if let Some(node) = &old.booked_on {
            unbook(&mut self.pod_devices, node, &old.devices);
        }
        if let Some(uid) = &old.holds {
            for claim in old.held() {
                if let Some(holders) = self.holders.get_mut(&(key.0.clone(), claim.into())) {
                    holders.remove(uid);
                }
            }
        }
        let mut fresh = None;
        if let Some(node) = &new.booked_on {
            if old.booked_on.as_ref() != Some(node) {
                fresh = Some((key.clone(), node.clone()));
            }
            book(&mut self.pod_devices, node, &new.devices);
        }
        if let Some(pod) = pod.filter(|_| new.gated_role) {
            let ungated_now = old.gated && !new.gated && !pod.phase.is_terminal();
            let bound_now = new.booked_on.is_some() && old.booked_on.is_none();
            if ungated_now {
                match pod.required_terms().and_then(is_pinned_to) {
                    Some(node) => found.extend(self.whole_set_on(store, pod, &new, node).err()),
                    None => found.push(violation(
                        Invariant::UngatedWithoutPin,
                        format!("Pod {}/{} left the gate without a pin to one node", key.0, key.1),
                    )),
                }
            }
            if bound_now {
                let node = new.booked_on.as_deref().expect("bound");
                found.extend(self.whole_set_on(store, pod, &new, node).err());
            }
        }
        if let Some(uid) = &new.holds {
            for claim in new.held() {
                let holders = self.holders.entry((key.0.clone(), claim.into())).or_default();
                holders.insert(uid.clone());
                if holders.len() > 1 {
                    let runs: Vec<&str> = holders.iter().map(Name::as_str).collect();
                    found.push(violation(
                        Invariant::ClaimAttachedTwice,
                        format!("GPUClaim {}/{claim} is held by VMIs {} at once", key.0, runs.join(" and ")),
                    ));
                }
            }
        }
        // Its demand moves only with its gate, its attachments or what it requests (booking it moves nothing).
        let demand_moved = (old.gated || new.gated)
            && (old.gated != new.gated
                || old.attachments != new.attachments
                || (old.cpu_millis, old.memory_bytes) != (new.cpu_millis, new.memory_bytes));
        if pod.is_some() {
            self.pods.insert(key.clone(), new);
        }
        if demand_moved {
            self.judge_waiter(store, &key);
        }
        fresh
    }

    /// A pod bound to `node` in this event: the live pods there request no more of a device than the node has.
    fn judge_pod_devices(&self, store: &View, pod: &Key, node: &str) -> Result<(), Violation> {
        let Some(seen) = self.pods.get(pod) else { return Ok(()) };
        let allocatable = store.node(node).map(|n| &n.devices);
        for resource in seen.devices.keys() {
            let booked = self.pod_devices.get(node).and_then(|d| d.get(resource)).copied().unwrap_or(0);
            let has = allocatable.and_then(|a| a.get(resource).copied()).unwrap_or(0);
            if booked > has {
                return Err(violation(
                    Invariant::DeviceDoubleBooked,
                    format!(
                        "Pod {}/{} bound to node {node}: pods there request {booked} {resource}, it has {has}",
                        pod.0, pod.1
                    ),
                ));
            }
        }
        Ok(())
    }

    fn seen(&self, pod: &Pod, old: &SeenPod) -> SeenPod {
        let live = !pod.phase.is_terminal();
        let gated_role = pod_role(pod).is_gated_under(&self.variant);
        let gated = pod.scheduling_gates.iter().any(|gate| gate == keys::GATE_PLACEMENT);
        let holds = pod.owner_vmi.as_ref().filter(|_| live && gated_role && !gated).map(|vmi| vmi.uid.clone());
        // Only a pod the gate holds needs them read (the annotation is JSON: read again only when it changed).
        let attachments = gated_role.then(|| match &old.attachments {
            Some(read) if Arc::ptr_eq(&read.from, &pod.annotations) => read.clone(),
            _ => Attachments::read(pod),
        });
        let booked_on = pod.node_name.clone().filter(|_| live);
        SeenPod {
            devices: Arc::clone(&pod.devices),
            booked_on,
            gated_role,
            gated: gated_role && gated,
            holds,
            attachments,
            cpu_millis: pod.cpu_millis,
            memory_bytes: pod.memory_bytes,
        }
    }

    /// Every claim of the pod's set is bound to `node`.
    fn whole_set_on(&self, store: &View, pod: &Pod, seen: &SeenPod, node: &str) -> Result<(), Violation> {
        let claims = seen.attachments.as_ref().map_or(&[][..], |a| &a.claims[..]);
        for name in claims {
            let at = store.claim(&pod.namespace, name).and_then(|claim| claim.node.as_deref());
            if at != Some(node) {
                return Err(violation(
                    Invariant::SetSplit,
                    format!(
                        "Pod {}/{} placed on node {node}, but its GPUClaim {name} is bound to {}",
                        pod.namespace,
                        pod.name,
                        at.map_or_else(|| "no node".to_owned(), |n| format!("node {n}"))
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Runs the engine on the cluster as it is (not on the controller's lagging cache): a gated pod it would place
    /// now fits. One that keeps fitting at every sample for longer than the reaction time is a liveness failure.
    fn sample_liveness(&mut self, store: &View, now: Millis, time: Time, leader: bool) -> Result<(), Violation> {
        // On a store keeping objects only the engine finds no free units anywhere, and nothing would ever fit.
        assert!(
            store.keeps_placement(),
            "the liveness sample runs the engine on a store that keeps its placement index"
        );
        let reaction_ms = i64::try_from(self.reaction.0).unwrap_or(i64::MAX);
        let old_enough = |pod: &Pod| time.as_millisecond().saturating_sub(pod.created.as_millisecond()) > reaction_ms;
        // Without a leader nothing reconciles: the clock starts again once one leads.
        // The gated pods come oldest first: if the first is not old enough, none is.
        if !leader || !store.gated_pods().next().is_some_and(old_enough) {
            self.fitting.clear();
            return Ok(());
        }
        if self.none_can_fit(store) {
            self.fitting.clear();
            return Ok(());
        }
        let mut fits: BTreeMap<Key, String> = BTreeMap::new();
        for action in reconcile_changes_with(store, time, &Changes::default(), &self.variant) {
            match action {
                Action::PinAndUngate { pod, node, .. } | Action::Pin { pod, node, .. } => {
                    fits.insert((pod.namespace.clone(), pod.name.clone()), node);
                }
                _ => {}
            }
        }
        self.fitting.retain(|pod, _| fits.contains_key(pod));
        for (pod, node) in fits {
            let (since, _) = self.fitting.entry(pod.clone()).or_insert((now, node.clone()));
            if now.0 - since.0 > self.reaction.0 {
                return Err(violation(
                    Invariant::WaitingWhileFits,
                    format!(
                        "Pod {}/{} has waited at the gate since {since} while its whole set fits on node {node}",
                        pod.0, pod.1
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether no gated pod can be placed now, as the engine's pass would find it, read from the store's placement
    /// index without judging a pod on a node: every gated pod has its whole set unbound, and for one of its classes
    /// no node with the units it needs free has the pod's CPU and memory free as well. A pass with no changes visits
    /// no claims, so it frees nothing before it serves the waiters, and serving only takes: the full scan refuses
    /// such a pod too. The gated pods are counted by demand as they change, so this costs the demands, not the
    /// queue; one with a claim bound (its node is fixed), or whose attachments the checks did not read, is not
    /// judged here: while there is one, the sample runs the engine.
    fn none_can_fit(&self, store: &View) -> bool {
        if self.unjudged > 0 {
            return false;
        }
        // (class, units) → the room its candidate nodes have, read once per sample.
        let mut rooms: BTreeMap<(&str, u64), Room> = BTreeMap::new();
        self.demands.keys().all(|demand| {
            !demand.units.is_empty()
                && demand.units.iter().any(|(class, units)| {
                    let room = rooms.entry((class, *units)).or_insert_with(|| Room::of(store, class, *units));
                    !room.takes(demand.cpu_millis, demand.memory_bytes)
                })
        })
    }

    /// Counts a pod's demand again (after it or a claim it lists changed): gated, its listed claims' keys and, if
    /// none of them is bound, the units per class it needs on one node with its CPU and memory.
    fn judge_waiter(&mut self, store: &View, key: &Key) {
        if let Some(old) = self.waiters.remove(key) {
            for claim in &old.claims {
                if let Some(pods) = self.listing.get_mut(claim) {
                    pods.remove(key);
                    if pods.is_empty() {
                        self.listing.remove(claim);
                    }
                }
            }
            match old.demand {
                Some(demand) => {
                    if let Some(count) = self.demands.get_mut(&demand) {
                        *count -= 1;
                        if *count == 0 {
                            self.demands.remove(&demand);
                        }
                    }
                }
                None => self.unjudged -= 1,
            }
        }
        let Some(seen) = self.pods.get(key).filter(|seen| seen.gated) else { return };
        let attachments = seen.attachments.as_ref();
        let claims: Vec<Key> =
            attachments.into_iter().flat_map(|a| a.claims.iter()).map(|name| (key.0.clone(), name.clone())).collect();
        let unbound =
            claims.iter().all(|(namespace, name)| store.claim(namespace, name).is_none_or(|c| c.node.is_none()));
        let demand = attachments.filter(|a| a.named && unbound).map(|a| Demand {
            units: Arc::clone(&a.units),
            cpu_millis: seen.cpu_millis,
            memory_bytes: seen.memory_bytes,
        });
        match &demand {
            Some(demand) => *self.demands.entry(demand.clone()).or_insert(0) += 1,
            None => self.unjudged += 1,
        }
        for claim in &claims {
            self.listing.entry(claim.clone()).or_default().insert(key.clone());
        }
        self.waiters.insert(key.clone(), Waiter { claims, demand });
    }
}

/// What a gated pod asks of the one node its set goes to: units per class (in class order), CPU and memory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Demand {
    units: Arc<[(String, u64)]>,
    cpu_millis: u64,
    memory_bytes: u64,
}

/// A gated pod, as the liveness sample's shortcut counts it.
#[derive(Debug)]
struct Waiter {
    /// The claims it lists.
    claims: Vec<Key>,
    /// Its demand; none when the shortcut cannot judge it.
    demand: Option<Demand>,
}

/// The CPU and memory free on the nodes that have some units of a class free: the nodes no other of them has more
/// of both free than (the Pareto front), most CPU first.
struct Room(Vec<(u64, u64)>);

impl Room {
    /// The room on the nodes with `units` of `class` free (the class's eligible nodes, as its index holds them).
    fn of(store: &View, class: &str, units: u64) -> Room {
        let capacity = store.capacity();
        let mut free: Vec<(u64, u64)> = capacity
            .candidates(class, units)
            .filter_map(|(_, name)| {
                let node = store.node(name)?;
                let load = capacity.load(name);
                let cpu = node.cpu_millis.saturating_sub(load.map_or(0, |l| l.cpu_millis));
                let memory = node.memory_bytes.saturating_sub(load.map_or(0, |l| l.memory_bytes));
                Some((cpu, memory))
            })
            .collect();
        free.sort_unstable_by(|a, b| b.cmp(a));
        let mut front: Vec<(u64, u64)> = Vec::new();
        for (cpu, memory) in free {
            if front.last().is_none_or(|(_, most)| memory > *most) {
                front.push((cpu, memory));
            }
        }
        Room(front)
    }

    /// Whether one of the nodes has `cpu` millis and `memory` bytes free.
    fn takes(&self, cpu: u64, memory: u64) -> bool {
        self.0.iter().take_while(|(free, _)| *free >= cpu).any(|(_, free)| *free >= memory)
    }
}

fn key(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey { kind, namespace: namespace.into(), name: name.into() }
}

/// One open usage record iff the claim is attached (none once it is gone).
fn usage_agrees(store: &View, (namespace, name): &Key) -> bool {
    let attached = store.claim(namespace, name).is_some_and(|claim| claim.attached_to.is_some());
    let open = store.open_usages_of(namespace, name).count();
    open == usize::from(attached)
}

fn usage_detail(store: &View, (namespace, name): &Key) -> String {
    let attached = store.claim(namespace, name).and_then(|claim| claim.attached_to.as_ref());
    let open = store.open_usages_of(namespace, name).count();
    match attached {
        Some(vmi) => format!("attached to VMI {} with {open} open usage records", vmi.name),
        None => format!("not attached, with {open} open usage records"),
    }
}

/// Books a pod's devices on `node`: the node's entry is found once for all of them, and names are copied only when
/// first entered (a pod's every device is booked and unbooked once per pod, and copying the keys each time was most
/// of that cost).
fn book(ledger: &mut Ledger<Name, BTreeMap<String, u64>>, node: &Name, devices: &BTreeMap<String, u64>) {
    if !ledger.contains_key(node) {
        ledger.insert(node.clone(), BTreeMap::new());
    }
    let booked = ledger.get_mut(node).expect("entered above");
    for (resource, units) in devices {
        match booked.get_mut(resource.as_str()) {
            Some(booked) => *booked += units,
            None => {
                booked.insert(resource.clone(), *units);
            }
        }
    }
}

/// Takes a pod's devices off `node` (what was never booked stays at nothing).
fn unbook(ledger: &mut Ledger<Name, BTreeMap<String, u64>>, node: &Name, devices: &BTreeMap<String, u64>) {
    let Some(booked) = ledger.get_mut(node) else { return };
    for (resource, units) in devices {
        if let Some(booked) = booked.get_mut(resource.as_str()) {
            *booked = booked.saturating_sub(*units);
        }
    }
}

fn add(ledger: &mut Ledger<Key, u64>, key: Key, units: u64) -> u64 {
    let entry = ledger.entry(key).or_insert(0);
    *entry += units;
    *entry
}

fn subtract(ledger: &mut Ledger<Key, u64>, key: Key, units: u64) {
    if let Some(entry) = ledger.get_mut(&key) {
        *entry = entry.saturating_sub(units);
    }
}
