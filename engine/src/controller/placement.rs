//! Serving the waiters first come, first served: gated pods get their whole set placed on one node (then pinned and
//! ungated in one update), held claims get bound.

use std::collections::BTreeMap;

use super::actions::{Action, ClaimStatus, EventKind, ObjectRef};
use super::names::template_claim_name;
use super::reasons::Wait;
use super::waiting::Judged;
use super::{CANDIDATES_PER_PLACEMENT_MAX, NewClaim, Pass, attached_status, key_of};
use crate::model::{Claim, ClaimPhase, Class, Name, Pod, Shortage, Time, View, VmiRef, check_entitlement, shortage};
use crate::scheduling::{matches_node_selector, matches_required_terms, pin_terms, untolerated_taint};

/// One claim of a pod's set.
struct Member<'v> {
    name: Name,
    class: &'v Class,
    count: u32,
    /// The stored claim; `None` for a template claim that does not exist yet.
    claim: Option<&'v Claim>,
    /// A template claim this pass already creates (for another pod of the same run).
    creating: bool,
    /// Where it is bound now (after this pass's decisions so far).
    node: Option<Name>,
}

/// Units per class a set still needs: class name → (class, units).
pub(super) type Need<'c> = BTreeMap<&'c str, (&'c Class, u64)>;

/// Which waiter comes next.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Waiter {
    Pod,
    Claim,
}

impl<'v> Pass<'v> {
    /// Gated pods and held claims needing a node, oldest first (creation time, then kind, namespace and name). A
    /// waiter that does not fit does not block the ones behind it. With a memo of the last passes (`Waiting`), the
    /// pods it holds that nothing woke are not visited: they would be refused again, for the reason recorded.
    pub(super) fn serve_waiters(&mut self) {
        let view = self.view;
        let memo = self.remembered.flatten();
        let woken = memo.and_then(|memo| self.woken(memo));
        let amending = memo.zip(woken.as_ref());
        let pods: Vec<(&str, &str)> = match amending {
            Some((memo, woken)) => self.to_visit(memo, woken),
            None => view.gated_pods().map(|p| (p.namespace.as_str(), p.name.as_str())).collect(),
        };
        let mut waiters = self.at_the_gate(pods);
        if let Some(proposal) = self.remembering.as_mut() {
            proposal.fresh = amending.is_none();
            proposal.visited = waiters.len();
        }
        let claims = std::mem::take(&mut self.waiting_claims);
        waiters.extend(claims.values().map(|c| (c.created, Waiter::Claim, c.namespace.as_str(), c.name.as_str())));
        waiters.sort_unstable();
        let mut listed = waiters.into_iter().peekable();
        // The remembered capacity waiters the room that came free may take, merged into the queue's order and read
        // only while some room is left: a pass costs what it places, not the queue behind it.
        let mut woke = amending.map(|(memo, _)| self.woke(memo));
        let mut waiting = Vec::new();
        let mut last = None;
        loop {
            let candidate = match (woke.as_mut(), amending) {
                (Some(woke), Some((_, woken))) => self.peek_woke(woke, woken),
                _ => None,
            };
            let woke_first = candidate.map(|(created, namespace, pod)| (created, Waiter::Pod, namespace, pod));
            let next = match (listed.peek(), woke_first) {
                (Some(listed), Some(woke)) if woke < *listed => None,
                (Some(_), _) => listed.next(),
                (None, Some(_)) => None,
                (None, None) => break,
            };
            let next = match (next, woke_first, woke.as_mut()) {
                (Some(next), _, _) => next,
                (None, Some(key), Some(woke)) => {
                    woke.advance(key.0, key.2, key.3);
                    if last == Some(key) {
                        continue;
                    }
                    let (memo, woken) = amending.expect("woken waiters come from a memo");
                    // Room came free, but not enough for it: it stays as the memo holds it, unvisited.
                    if self.still_refused(memo, woken, key.2, key.3) {
                        continue;
                    }
                    if let Some(proposal) = self.remembering.as_mut() {
                        proposal.visited += 1;
                    }
                    match self.at_the_gate(vec![(key.2, key.3)]).pop() {
                        Some(gated) => gated,
                        None => continue,
                    }
                }
                (None, _, _) => unreachable!("a waiter was peeked"),
            };
            if last == Some(next) {
                continue;
            }
            last = Some(next);
            let (created, waiter, namespace, name) = next;
            let refused = |(memo, woken)| self.still_refused(memo, woken, namespace, name);
            let served = match waiter {
                Waiter::Pod if amending.is_some_and(refused) => false,
                Waiter::Pod => {
                    let pod = view.pod(namespace, name).expect("a gated pod is stored");
                    let served = self.serve_pod(pod);
                    if served {
                        self.judge(pod, Judged::Gone);
                    }
                    served
                }
                Waiter::Claim => self.serve_claim(view.claim(namespace, name).expect("a waiting claim is stored")),
            };
            if !served {
                waiting.push((created, waiter, namespace, name));
            }
        }
        // Why the rest wait is judged on the state the pass leaves, so the next pass, which starts from there, finds
        // the same reasons and writes nothing; with them the remembered pods whose reason reads bound units that
        // moved.
        if let Some((memo, _)) = amending {
            let again = self.to_judge_again(memo);
            waiting.extend(self.at_the_gate(again));
            waiting.sort_unstable();
            waiting.dedup();
        }
        for (_, waiter, namespace, name) in waiting {
            match waiter {
                Waiter::Pod => {
                    let pod = view.pod(namespace, name).expect("a gated pod is stored");
                    if let Some(remembered) = amending.and_then(|(memo, woken)| self.same_reason(memo, woken, pod)) {
                        self.judge(pod, Judged::Remembered(remembered.clone()));
                        continue;
                    }
                    let wait = self.why_pod_waits(pod);
                    if self.remembering.is_some() {
                        let judged = self.judgement(pod, &wait);
                        self.judge(pod, judged);
                    }
                    self.record_pod_wait(pod, wait);
                }
                Waiter::Claim => {
                    let claim = view.claim(namespace, name).expect("a waiting claim is stored");
                    if let Err(wait) = self.find_node_for_claim(claim) {
                        let pending = Some(wait.to_reason_over(self.status_of(claim).pending.as_ref()));
                        self.set_status(
                            claim,
                            ClaimStatus { phase: ClaimPhase::Pending, pending, ..ClaimStatus::default() },
                        );
                    }
                }
            }
        }
        self.close_proposal(amending.map(|(memo, _)| memo));
    }

    /// The pods named that are at the gate, as the queue orders them; the others are judged gone.
    fn at_the_gate(&mut self, pods: Vec<(&'v str, &'v str)>) -> Vec<(Time, Waiter, &'v str, &'v str)> {
        let view: &'v View = self.view;
        let mut gated = Vec::with_capacity(pods.len());
        for (namespace, name) in pods {
            match view.pod(namespace, name).filter(|_| view.gated_edition(namespace, name).is_some()) {
                Some(pod) => gated.push((pod.created, Waiter::Pod, pod.namespace.as_str(), pod.name.as_str())),
                None => self.judge_gone(namespace, name),
            }
        }
        gated
    }

    /// Places the pod's whole set if it fits now; `false` when it waits.
    fn serve_pod(&mut self, pod: &Pod) -> bool {
        let Ok((vmi, members)) = self.resolve(pod) else { return false };
        match self.place(pod, &members) {
            Ok(node) => {
                self.attach_and_pin(pod, &vmi, &members, &node);
                true
            }
            Err(_) => false,
        }
    }

    fn resolve(&self, pod: &Pod) -> Result<(VmiRef, Vec<Member<'v>>), Wait> {
        let Some(vmi) = pod.owner_vmi.as_ref().filter(|vmi| self.run_alive(&pod.namespace, vmi)) else {
            let name = pod.owner_vmi.as_ref().map(|v| v.name.to_string()).unwrap_or_default();
            return Err(Wait::VmiMissing { vmi: name });
        };
        // The live VMI's uid: the attachment must carry the run, not just the name.
        let vmi = self.view.vmi(&pod.namespace, &vmi.name).map(|v| v.reference()).expect("alive runs are stored");
        let members = self.members(pod, &vmi)?;
        Ok((vmi, members))
    }

    /// The units per class (in class name order) of the pod's set when it is all template claims of its run,
    /// created and unbound: claims no other run can take or change; `None` otherwise.
    pub(super) fn need_of_template_set(&self, pod: &Pod) -> Option<Need<'v>> {
        let (_, members) = self.resolve(pod).ok()?;
        if !members.iter().all(|m| m.claim.is_some_and(|c| c.template) && m.node.is_none()) {
            return None;
        }
        let mut need: Need<'v> = BTreeMap::new();
        for member in &members {
            need.entry(member.class.name.as_str()).or_insert((member.class, 0)).1 += u64::from(member.count);
        }
        Some(need)
    }

    /// Why a pod that was not placed waits, on the state after this pass's placements.
    fn why_pod_waits(&self, pod: &Pod) -> Wait {
        // What a candidate walk leaves is this pod's, not one tried before it.
        self.last_refusal.take();
        self.walk_capped.set(false);
        match self.resolve(pod) {
            Err(wait) => wait,
            Ok((_, members)) => match self.place(pod, &members) {
                Err(wait) => wait,
                // Not reachable (placements only take capacity), but a pod that fits is not said to wait for it.
                Ok(node) => Wait::NodeUnfit { node, detail: "placed by the next pass".to_owned() },
            },
        }
    }

    fn record_pod_wait(&mut self, pod: &Pod, wait: Wait) {
        if let Ok((vmi, members)) = self.resolve(pod) {
            self.create_missing_templates(pod, &vmi, &members, Some(&wait));
        }
        self.wait(pod, wait);
    }

    /// Resolves the pod's attachments into its set, refusing what can never be placed as it stands.
    fn members(&self, pod: &Pod, vmi: &VmiRef) -> Result<Vec<Member<'v>>, Wait> {
        let view: &'v View = self.view;
        let attachments = pod.attachments().ok_or(Wait::MissingAttachments)?;
        let attachments = attachments.map_err(|detail| Wait::MalformedAttachments { detail })?;
        if attachments.is_empty() {
            return Err(Wait::NoClaims);
        }
        let mut members = Vec::with_capacity(attachments.len());
        for attachment in attachments.iter() {
            let class =
                view.class(&attachment.class).ok_or_else(|| Wait::ClassMissing { class: attachment.class.clone() })?;
            let (name, claim) = match (&attachment.claim, attachment.template) {
                (Some(name), _) => {
                    let claim = view
                        .claim(&pod.namespace, name)
                        .filter(|c| attachment.uid.as_ref().is_none_or(|uid| *uid == c.uid))
                        .filter(|c| !self.deleted.contains(&key_of(c)))
                        .ok_or_else(|| Wait::ClaimMissing { claim: name.clone() })?;
                    if claim.deleting {
                        return Err(Wait::ClaimDeleting { claim: name.clone() });
                    }
                    (claim.name.clone(), Some(claim))
                }
                (None, Some(index)) => {
                    let name = Name::from(template_claim_name(&vmi.name, index));
                    let claim = view.claim(&pod.namespace, &name);
                    if claim.is_some_and(|c| c.owner_vmi.as_ref().is_none_or(|o| o.uid != vmi.uid) || c.deleting) {
                        return Err(Wait::PreviousRunReleasing { claim: name.to_string() });
                    }
                    (name, claim)
                }
                (None, None) => {
                    return Err(Wait::MalformedAttachments { detail: "an attachment names no claim".into() });
                }
            };
            let creating = self.created.get(&(pod.namespace.clone(), name.clone()));
            let node = match claim {
                Some(claim) => {
                    let status = self.status_of(claim);
                    let holder = status.attached_to.as_ref().filter(|h| h.uid != vmi.uid);
                    if let Some(holder) = holder.filter(|h| self.run_alive(&pod.namespace, h)) {
                        return Err(Wait::ClaimInUse { claim: name.to_string(), vmi: holder.name.to_string() });
                    }
                    status.node
                }
                None => creating.and_then(|new| new.status.node.clone()),
            };
            let creating = creating.is_some();
            members.push(Member { name, class, count: attachment.count, claim, creating, node });
        }
        Ok(members)
    }

    /// Finds the one node where the whole set fits.
    fn place(&self, pod: &Pod, members: &[Member<'_>]) -> Result<String, Wait> {
        let mut fixed: Option<(&str, &str)> = None;
        for member in members {
            if let Some(node) = member.node.as_deref() {
                match fixed {
                    Some((first, first_node)) if first_node != node => {
                        return Err(Wait::HeldClaimsOnDifferentNodes {
                            first: format!("{first} on {first_node}"),
                            second: format!("{} on {node}", member.name),
                        });
                    }
                    Some(_) => {}
                    None => fixed = Some((&member.name, node)),
                }
            }
        }
        let need = self.units_needed(pod, members)?;
        if let Some((_, node)) = fixed {
            return self
                .fits(pod, node, &need)
                .map(|()| node.to_owned())
                .map_err(|unfit| Wait::NodeUnfit { node: node.to_owned(), detail: unfit.to_string() });
        }
        // Walk the class needing the most units best fit first; check the rest of the set on each candidate.
        let (primary, units) = need
            .values()
            .max_by_key(|(class, units)| (*units, std::cmp::Reverse(class.name.as_str())))
            .copied()
            .ok_or(Wait::NoClaims)?;
        let mut last_refusal = None;
        let mut walked = 0;
        for (_, node) in self.candidates(primary, units).take(CANDIDATES_PER_PLACEMENT_MAX) {
            walked += 1;
            match self.fits(pod, node, &need) {
                Ok(()) => return Ok(node.to_owned()),
                Err(unfit) => last_refusal = Some((node, unfit)),
            }
        }
        self.walk_capped.set(walked == CANDIDATES_PER_PLACEMENT_MAX);
        self.last_refusal.replace(last_refusal.map(|(node, unfit)| format!("node {node:?}: {unfit}")));
        let summary =
            need.iter().map(|(class, (_, units))| format!("{units} × {class}")).collect::<Vec<_>>().join(" + ");
        let detail = format!("no node has {summary} free with room for the pod");
        Err(self.short_of(primary, units, need.values().copied(), detail))
    }

    /// Units per class the set still needs on its node (members not bound yet), within budget and entitlement.
    fn units_needed<'c>(&self, pod: &Pod, members: &[Member<'c>]) -> Result<Need<'c>, Wait> {
        let mut need: Need<'c> = BTreeMap::new();
        for member in members.iter().filter(|m| m.node.is_none()) {
            need.entry(member.class.name.as_str()).or_insert((member.class, 0)).1 += u64::from(member.count);
        }
        self.check_need(&pod.namespace, need.values().map(|(class, units)| (*class, *units)))?;
        Ok(need)
    }

    /// The budget and entitlement of each class of a set's need, in class name order: the first refused is why it
    /// waits.
    pub(super) fn check_need<'c>(
        &self,
        namespace: &str,
        need: impl Iterator<Item = (&'c Class, u64)>,
    ) -> Result<(), Wait> {
        let tenant = self.view.tenant(namespace);
        for (class, units) in need {
            self.within_budget(namespace, &class.name, units, 0)?;
            check_entitlement(tenant, class).map_err(Wait::NotEntitled)?;
        }
        Ok(())
    }

    /// Whether `node` takes the pod with `need` units: the scheduler's filters, on the state after this pass's
    /// decisions. Returns what does not fit, formatted only by whoever reports it (most refusals of a candidate walk
    /// are never read).
    fn fits<'a>(&'a self, pod: &'a Pod, node_name: &str, need: &Need<'a>) -> Result<(), Unfit<'a>> {
        let node = self.view.node(node_name).ok_or(Unfit::Gone)?;
        if !node.ready {
            return Err(Unfit::NotReady);
        }
        if node.unschedulable {
            return Err(Unfit::Cordoned);
        }
        for (class, units) in need.values() {
            if self.free(class, node_name).unwrap_or(0) < *units {
                return Err(Unfit::FewerUnits { units: *units, class: &class.name });
            }
        }
        if !matches_node_selector(&pod.node_selector, &node.labels) {
            return Err(Unfit::NodeSelector);
        }
        if pod.required_terms.as_ref().is_some_and(|terms| !matches_required_terms(terms, node_name, &node.labels)) {
            return Err(Unfit::NodeAffinity);
        }
        if let Some(taint) = untolerated_taint(&pod.tolerations, &node.taints) {
            return Err(Unfit::Taint { key: &taint.key, effect: &taint.effect });
        }
        let load = self.view.capacity().load(node_name);
        let (pinned_cpu, pinned_memory) = self.pinned.get(node_name).copied().unwrap_or((0, 0));
        let cpu_used = load.map_or(0, |l| l.cpu_millis) + pinned_cpu;
        let memory_used = load.map_or(0, |l| l.memory_bytes) + pinned_memory;
        if cpu_used + pod.cpu_millis > node.cpu_millis {
            return Err(Unfit::Insufficient("cpu"));
        }
        if memory_used + pod.memory_bytes > node.memory_bytes {
            return Err(Unfit::Insufficient("memory"));
        }
        // Devices outside GPU classes (KubeVirt's kvm, tun, vhost-net) are plentiful; only their presence is checked.
        for (resource, units) in pod.devices.iter() {
            let class_resource = self.view.capacity().publishes(resource);
            if !class_resource && node.devices.get(resource).copied().unwrap_or(0) < *units {
                return Err(Unfit::Insufficient(resource));
            }
        }
        Ok(())
    }

    /// Binds and attaches the whole set on `node`, then pins and ungates the pod in one update.
    fn attach_and_pin(&mut self, pod: &Pod, vmi: &VmiRef, members: &[Member<'v>], node: &str) {
        let node_name = Name::from(node);
        for member in members {
            match member.claim {
                Some(claim) => self.set_status(claim, attached_status(&node_name, vmi)),
                // Created attached for another pod of this run, on this node (a set is placed whole).
                None if member.creating && member.node.is_some() => {}
                None => {
                    if let Some(pending) = self.created.get(&(pod.namespace.clone(), member.name.clone())) {
                        let old = pending.status.clone();
                        self.account(&pod.namespace, &member.class.name, member.count, &old, false);
                    }
                    let status = attached_status(&node_name, vmi);
                    self.account(&pod.namespace, &member.class.name, member.count, &status, true);
                    self.created.insert(
                        (pod.namespace.clone(), member.name.clone()),
                        NewClaim { class: member.class.name.clone(), count: member.count, owner: vmi.clone(), status },
                    );
                }
            }
        }
        self.pinned_pods.insert((pod.namespace.clone(), pod.name.clone()), node_name);
        self.moves += 1;
        let pinned = self.pinned.entry(node.to_owned()).or_insert((0, 0));
        pinned.0 += pod.cpu_millis;
        pinned.1 += pod.memory_bytes;
        let key = ObjectRef::new(&pod.namespace, &pod.name);
        // Shared with the pod it is written into: the store and every cache copy of the pod hold these terms.
        let terms = std::sync::Arc::new(pin_terms(pod.required_terms(), node));
        if self.variant.two_update_pin {
            let precondition = pod.resource_version.clone();
            self.actions.push(Action::Ungate { pod: key.clone(), precondition });
            self.actions.push(Action::Pin { pod: key, node: node.to_owned(), terms });
        } else {
            let precondition = pod.resource_version.clone();
            self.actions.push(Action::PinAndUngate { pod: key, precondition, node: node.to_owned(), terms });
        }
        let units: u32 = members.iter().map(|m| m.count).sum();
        let message = format!("placed on node {node:?} with {units} GPU units of {} claims", members.len());
        self.event(EventKind::Pod, ObjectRef::new(&pod.namespace, &pod.name), "Placed", message);
    }

    /// Template claims exist while their run waits, Pending with the pod's reason.
    fn create_missing_templates(&mut self, pod: &Pod, vmi: &VmiRef, members: &[Member<'_>], wait: Option<&Wait>) {
        for member in members.iter().filter(|m| m.claim.is_none() && !m.creating) {
            let status = ClaimStatus {
                phase: ClaimPhase::Pending,
                node: None,
                attached_to: None,
                pending: wait.map(Wait::to_reason),
            };
            let new = NewClaim { class: member.class.name.clone(), count: member.count, owner: vmi.clone(), status };
            self.created.insert((pod.namespace.clone(), member.name.clone()), new);
        }
    }

    /// Records why the pod waits (only when that changed), with the last node refused as a `Waiting` event (the
    /// detail changes with every other placement, so it goes where it does not cause writes on its own); a pod that
    /// begins to wait `Fragmented` gets the event even when no node was tried.
    fn wait(&mut self, pod: &Pod, wait: Wait) {
        let reason = wait.to_reason_over(pod.waiting.as_ref());
        let refusal = self.last_refusal.take();
        if pod.waiting.as_ref() != Some(&reason) {
            let message = match refusal {
                Some(detail) => Some(format!("{}; last refused by {detail}", reason.message)),
                // No node was tried: a fragmented class still says so, with its figures.
                None => matches!(wait, Wait::Fragmented { .. }).then(|| reason.message.clone()),
            };
            if let Some(message) = message {
                self.event(EventKind::Pod, ObjectRef::new(&pod.namespace, &pod.name), "Waiting", message);
            }
            self.actions.push(Action::SetPodWaiting {
                pod: ObjectRef::new(&pod.namespace, &pod.name),
                precondition: pod.resource_version.clone(),
                waiting: reason,
            });
        }
    }

    /// Why a set no node takes waits for capacity, on the state this pass leaves: `NeverFits` when no node could
    /// ever hold the units of its primary class (the one it needs most of); `NoCapacity` when one of its classes
    /// has fewer units free in total than it needs, or every class has a node with its units (that node refuses
    /// the pod for something else); `Fragmented` when a class has the units free in total on its nodes but no one
    /// node has them (the first such class, by name).
    pub(super) fn short_of<'c>(
        &self,
        primary: &Class,
        units: u64,
        need: impl Iterator<Item = (&'c Class, u64)>,
        detail: String,
    ) -> Wait {
        let largest = self.view.capacity().largest_allocatable(&primary.name);
        if self.view.capacity().node_count(&primary.name) > 0 && units > largest {
            return Wait::NeverFits { class: primary.name.clone(), units, largest };
        }
        let mut fragmented = None;
        for (class, units) in need {
            let (free, largest) = self.free_after(class);
            match shortage(units, free, largest) {
                Some(Shortage::NoCapacity) => return Wait::NoCapacity { detail },
                Some(Shortage::Fragmented) if fragmented.is_none() => {
                    fragmented = Some(Wait::Fragmented { class: class.name.clone(), units, free, largest });
                }
                _ => {}
            }
        }
        fragmented.unwrap_or(Wait::NoCapacity { detail })
    }
}

/// Why a candidate node does not take a pod, kept unformatted until a refusal is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unfit<'a> {
    Gone,
    NotReady,
    Cordoned,
    FewerUnits { units: u64, class: &'a str },
    NodeSelector,
    NodeAffinity,
    Taint { key: &'a str, effect: &'a str },
    Insufficient(&'a str),
}

impl std::fmt::Display for Unfit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::Gone => f.write_str("the node is gone"),
            Unfit::NotReady => f.write_str("the node is not Ready"),
            Unfit::Cordoned => f.write_str("the node is cordoned"),
            Unfit::FewerUnits { units, class } => {
                write!(f, "fewer than the {units} units of {class} it needs are free")
            }
            Unfit::NodeSelector => f.write_str("the pod's nodeSelector does not match"),
            Unfit::NodeAffinity => f.write_str("the pod's required node affinity does not match"),
            Unfit::Taint { key, effect } => write!(f, "taint {key}:{effect} is not tolerated"),
            Unfit::Insufficient(resource) => write!(f, "Insufficient {resource}"),
        }
    }
}
