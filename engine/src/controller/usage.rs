//! Usage records follow attachments: one open record per claim attached to a run on a node; closed when that ends.

use super::actions::{Action, ObjectRef};
use super::names::usage_name;
use super::{ClaimStatus, Pass, key_of};
use crate::model::{Claim, Usage};

impl Pass<'_> {
    pub(super) fn reconcile_usages(&mut self) {
        let view = self.view;
        for usage in view.open_usages() {
            let live =
                view.claim(&usage.namespace, &usage.claim).and_then(|claim| self.after(claim)).is_some_and(|status| {
                    status.attached_to.as_ref().is_some_and(|vmi| vmi.uid == usage.vmi.uid)
                        && status.node.as_deref() == Some(usage.node.as_str())
                });
            if !live {
                self.actions.push(Action::CloseUsage {
                    usage: ObjectRef::new(&usage.namespace, &usage.name),
                    precondition: usage.resource_version.clone(),
                    end: self.now,
                });
            }
        }
        for claim in view.claims() {
            if let Some(status) = self.after(claim) {
                self.open_usage(&claim.namespace, &claim.name, &claim.uid, &claim.class, claim.count, &status);
            }
        }
        let created: Vec<_> = self
            .created
            .iter()
            .map(|((namespace, name), new)| {
                (namespace.clone(), name.clone(), new.class.clone(), new.count, new.status.clone())
            })
            .collect();
        for (namespace, name, class, count, status) in created {
            self.open_usage(&namespace, &name, "", &class, count, &status);
        }
    }

    /// A claim's status once this pass's writes land; `None` when it will be gone.
    fn after(&self, claim: &Claim) -> Option<ClaimStatus> {
        let key = key_of(claim);
        let vanishing = claim.deleting && self.finalizers.get(&key) == Some(&false);
        if self.deleted.contains(&key) || vanishing {
            return None;
        }
        Some(self.status_of(claim))
    }

    /// Opens a record for an attachment that has none. `claim_uid` is empty for a claim this pass creates: the
    /// writer sets the ownerReference from the claim it created.
    fn open_usage(
        &mut self,
        namespace: &str,
        claim: &str,
        claim_uid: &str,
        class: &str,
        count: u32,
        status: &ClaimStatus,
    ) {
        let (Some(vmi), Some(node)) = (&status.attached_to, &status.node) else { return };
        let view = self.view;
        if view.open_usages_of(namespace, claim).any(|u| u.vmi.uid == vmi.uid && u.node == *node) {
            return;
        }
        let resource_name = view.class(class).map(|c| c.resource_name.clone()).unwrap_or_default();
        self.actions.push(Action::OpenUsage {
            usage: Usage {
                namespace: namespace.to_owned(),
                name: usage_name(claim, &vmi.uid, node, self.now.as_millisecond()),
                resource_version: String::new(),
                claim: claim.to_owned(),
                claim_uid: claim_uid.to_owned(),
                class: class.to_owned(),
                resource_name,
                count,
                vmi: vmi.clone(),
                node: node.clone(),
                start: self.now,
                end: None,
            },
        });
    }
}
