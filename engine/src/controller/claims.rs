//! Claims on their own: release when a run ends, follow a migration, finalizers, deleting claims, and binding held
//! claims that wait for a node.

use super::actions::{ClaimStatus, EventKind, ObjectRef};
use super::reasons::Wait;
use super::{CANDIDATES_PER_PLACEMENT_MAX, Pass, attached_status, follow_to, is_live_run, key_of};
use crate::model::{Claim, ClaimPhase, check_budget, check_entitlement};

impl<'v> Pass<'v> {
    /// Runs that ended give their claims back; runs that migrated take them along; finalizers follow; claims
    /// stranded on a lost node let go of it, so every waiter served after sees their units and budget free.
    pub(super) fn release_and_follow(&mut self, claims: &[&'v Claim]) {
        for &claim in claims {
            self.settle_attachment(claim);
            self.settle_finalizer(claim);
            if self.needs_node(claim) {
                if self.node_of(claim).is_some() {
                    let pending = self.status_of(claim).pending;
                    self.set_status(
                        claim,
                        ClaimStatus { phase: ClaimPhase::Pending, pending, ..ClaimStatus::default() },
                    );
                }
                self.waiting_claims.insert(key_of(claim), claim);
            }
        }
        // Pending held claims wait in their queue whether or not anything about them changed.
        for claim in self.view.pending_held_claims() {
            if self.needs_node(claim) {
                self.waiting_claims.insert(key_of(claim), claim);
            }
        }
    }

    fn settle_attachment(&mut self, claim: &'v Claim) {
        let Some(vmi) = &claim.attached_to else {
            // A template claim that was never attached goes with its run.
            let owner_alive = claim.owner_vmi.as_ref().is_some_and(|owner| self.run_alive(&claim.namespace, owner));
            if claim.template && !owner_alive {
                self.release_template(claim, "its run ended before it was placed");
            }
            return;
        };
        let run = self.view.vmi(&claim.namespace, &vmi.name);
        if !run.is_some_and(|stored| is_live_run(vmi, stored)) {
            if claim.template {
                self.release_template(claim, &format!("run {:?} ended", vmi.name));
            } else if !claim.deleting {
                let detached = ClaimStatus {
                    phase: ClaimPhase::Bound,
                    node: claim.node.clone(),
                    attached_to: None,
                    pending: None,
                };
                self.set_status(claim, detached);
                let message = format!("detached from ended run {:?}; still held", vmi.name);
                self.event(EventKind::Claim, ObjectRef::new(&claim.namespace, &claim.name), "Released", message);
            }
            return;
        }
        // A completed migration moves the run: its claims follow to the node it runs on now.
        if let Some(node) = run.and_then(|run| follow_to(claim, run)) {
            let from = claim.node.clone().unwrap_or_default();
            self.set_status(claim, attached_status(node, vmi));
            let message = format!("followed run {:?} from node {from:?} to {node:?}", vmi.name);
            self.event(EventKind::Claim, ObjectRef::new(&claim.namespace, &claim.name), "Moved", message);
        }
    }

    fn release_template(&mut self, claim: &'v Claim, why: &str) {
        if self.deleted.contains(&key_of(claim)) {
            return;
        }
        if claim.deleting {
            // Already going (the VMI's garbage collection): only our finalizer holds it.
            return;
        }
        self.delete(claim);
        let message = format!("template claim released: {why}");
        self.event(EventKind::Claim, ObjectRef::new(&claim.namespace, &claim.name), "Released", message);
    }

    /// Every live claim carries the release finalizer; a deleting claim keeps it only while a run holds it.
    fn settle_finalizer(&mut self, claim: &'v Claim) {
        if self.deleted.contains(&key_of(claim)) {
            return;
        }
        if !claim.deleting {
            if !claim.finalizer {
                self.finalizers.insert(key_of(claim), true);
            }
            return;
        }
        let held = self.attached_of(claim).is_some_and(|vmi| self.run_alive(&claim.namespace, vmi));
        if claim.finalizer && !held {
            // The claim vanishes once the finalizer is gone: its units with it.
            let status = self.status_of(claim);
            self.account(&claim.namespace, &claim.class, claim.count, &status, false);
            self.statuses.remove(&key_of(claim));
            self.finalizers.insert(key_of(claim), false);
        }
    }

    /// A held claim that needs a node: Pending, or bound to a node that is lost or NotReady while unattached.
    pub(super) fn needs_node(&self, claim: &Claim) -> bool {
        if claim.template || claim.deleting || self.deleted.contains(&key_of(claim)) {
            return false;
        }
        if self.attached_of(claim).is_some() {
            return false;
        }
        match self.node_of(claim) {
            None => true,
            Some(node) => self.view.is_unavailable(node),
        }
    }

    /// Binds a held claim to one node (best fit); `false` when it waits (the reason is recorded at the end of the
    /// pass).
    pub(super) fn serve_claim(&mut self, claim: &'v Claim) -> bool {
        if !self.needs_node(claim) {
            return true;
        }
        let Ok(node) = self.find_node_for_claim(claim) else { return false };
        let from = claim.node.clone().filter(|lost| *lost != node);
        let status =
            ClaimStatus { phase: ClaimPhase::Bound, node: Some(node.as_str().into()), ..ClaimStatus::default() };
        self.set_status(claim, status);
        let message = match from {
            Some(lost) => format!("rebound from unavailable node {lost:?} to {node:?}"),
            None => format!("bound to node {node:?}"),
        };
        self.event(EventKind::Claim, ObjectRef::new(&claim.namespace, &claim.name), "Bound", message);
        true
    }

    pub(super) fn find_node_for_claim(&self, claim: &Claim) -> Result<String, Wait> {
        let view = self.view;
        let class = view.class(&claim.class).ok_or_else(|| Wait::ClassMissing { class: claim.class.to_string() })?;
        let units = u64::from(claim.count);
        // Its own units, if still counted on a lost node, move rather than add.
        let own = if self.node_of(claim).is_some() { units } else { 0 };
        self.within_budget(&claim.namespace, &class.name, units, own)?;
        check_entitlement(view.tenant(&claim.namespace), class).map_err(Wait::NotEntitled)?;
        let lost = self.node_of(claim);
        let found = self
            .candidates(class, units)
            .take(CANDIDATES_PER_PLACEMENT_MAX)
            .find(|(_, node)| Some(*node) != lost)
            .map(|(_, node)| node.to_owned());
        let detail = || "no node has that many free units".to_owned();
        found.ok_or_else(|| self.short_of(class, units, std::iter::once((class, units)), detail()))
    }

    /// The budget rule on the units bound in the namespace as this pass leaves them, less `own` (units the claim
    /// itself still holds on a lost node: they move rather than add).
    pub(super) fn within_budget(&self, namespace: &str, class: &str, units: u64, own: u64) -> Result<(), Wait> {
        let bound = |_: &_| self.bound_units(namespace, class).saturating_sub(own);
        check_budget(self.view.tenant(namespace), class, units, bound).map_err(Wait::from)
    }
}
