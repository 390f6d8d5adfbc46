//! Usage records follow attachments: one open record per claim attached to a run on a node; closed when that ends.

use std::collections::BTreeMap;

use super::actions::{Action, ObjectRef};
use super::names::usage_name;
use super::{Changes, ClaimKey, Pass, key_of};
use crate::model::{Claim, Name, Usage, View, VmiRef};

impl<'v> Pass<'v> {
    pub(super) fn reconcile_usages(&mut self) {
        let view = self.view;
        // Claims and the claims with open records are both ordered by namespace then name: walk them side by side
        // instead of looking each up in the other.
        let mut open = view.open_usage_claims().peekable();
        let mut writes = Vec::new();
        let mut missing = Vec::new();
        for claim in view.claims() {
            let key = (claim.namespace.as_str(), claim.name.as_str());
            while let Some((namespace, _, names)) = open.next_if(|(ns, c, _)| (*ns, *c) < key) {
                self.close_usages(named(view, namespace, names), |_| false, &mut writes); // the claim is gone
            }
            let names = open.next_if(|(ns, c, _)| (*ns, *c) == key).map(|(_, _, names)| names);
            let (vmi, node) = self.after(claim).unwrap_or((None, None));
            let live = |usage: &Usage| vmi.is_some_and(|v| v.uid == usage.vmi.uid) && node == Some(usage.node.as_str());
            let matched =
                names.is_some_and(|names| self.close_usages(named(view, &claim.namespace, names), live, &mut writes));
            if let (Some(vmi), Some(node), false) = (vmi, node, matched) {
                missing.push((claim, vmi.clone(), node.to_owned()));
            }
        }
        for (namespace, _, names) in open {
            self.close_usages(named(view, namespace, names), |_| false, &mut writes);
        }
        self.actions.extend(writes);
        for (claim, vmi, node) in missing {
            self.open_usage(&claim.namespace, &claim.name, &claim.uid, &claim.class, claim.count, &vmi, &node);
        }
        self.open_created_usages();
    }

    /// Template claims this pass creates attached get their record at once.
    fn open_created_usages(&mut self) {
        let created: Vec<_> = self
            .created
            .iter()
            .filter_map(|((namespace, name), new)| {
                let status = &new.status;
                let (vmi, node) = (status.attached_to.clone()?, status.node.clone()?);
                Some((namespace.clone(), name.clone(), new.class.clone(), new.count, vmi, node))
            })
            .collect();
        for (namespace, name, class, count, vmi, node) in created {
            self.open_usage(&namespace, &name, "", &class, count, &vmi, &node);
        }
    }

    /// Usage records of the claims a change can affect: those visited, those this pass decided on, and the
    /// changed claims that are gone (their open records close).
    pub(super) fn reconcile_usages_of(&mut self, visited: &[&'v Claim], changes: &Changes) {
        let view = self.view;
        let mut claims: BTreeMap<ClaimKey<'v>, &'v Claim> = visited.iter().map(|c| (key_of(c), *c)).collect();
        let decided = self.statuses.keys().chain(self.finalizers.keys()).chain(self.deleted.iter());
        for (namespace, name) in decided.copied().collect::<Vec<_>>() {
            if let Some(claim) = view.claim(namespace, name) {
                claims.insert(key_of(claim), claim);
            }
        }
        let mut writes = Vec::new();
        for (namespace, name) in changes.claims.iter().filter(|(ns, name)| view.claim(ns, name).is_none()) {
            self.close_usages(view.open_usages_of(namespace, name), |_| false, &mut writes);
        }
        let mut missing = Vec::new();
        for claim in claims.into_values() {
            let (vmi, node) = self.after(claim).unwrap_or((None, None));
            let live = |usage: &Usage| vmi.is_some_and(|v| v.uid == usage.vmi.uid) && node == Some(usage.node.as_str());
            let matched = self.close_usages(view.open_usages_of(&claim.namespace, &claim.name), live, &mut writes);
            if let (Some(vmi), Some(node), false) = (vmi, node, matched) {
                missing.push((claim, vmi.clone(), node.to_owned()));
            }
        }
        self.actions.extend(writes);
        for (claim, vmi, node) in missing {
            self.open_usage(&claim.namespace, &claim.name, &claim.uid, &claim.class, claim.count, &vmi, &node);
        }
        self.open_created_usages();
    }

    /// Closes the open records among `usages` that are not `live`; returns whether one is.
    fn close_usages<'u>(
        &self,
        usages: impl Iterator<Item = &'u Usage>,
        live: impl Fn(&Usage) -> bool,
        writes: &mut Vec<Action>,
    ) -> bool {
        let mut matched = false;
        for usage in usages {
            if live(usage) {
                matched = true;
                continue;
            }
            writes.push(Action::CloseUsage {
                usage: ObjectRef::new(&usage.namespace, &usage.name),
                precondition: usage.resource_version.clone(),
                end: self.now,
            });
        }
        matched
    }

    /// The run and node of a claim once this pass's writes land; `None` when the claim will be gone.
    fn after<'a>(&'a self, claim: &'a Claim) -> Option<(Option<&'a VmiRef>, Option<&'a str>)> {
        let key = key_of(claim);
        let vanishing = claim.deleting && self.finalizers.get(&key) == Some(&false);
        if self.deleted.contains(&key) || vanishing {
            return None;
        }
        Some((self.attached_of(claim), self.node_of(claim)))
    }

    /// Opens a record for an attachment that has none. `claim_uid` is empty for a claim this pass creates: the
    /// writer sets the ownerReference from the claim it created.
    #[allow(clippy::too_many_arguments)]
    fn open_usage(
        &mut self,
        namespace: &str,
        claim: &str,
        claim_uid: &str,
        class: &str,
        count: u32,
        vmi: &VmiRef,
        node: &str,
    ) {
        let resource_name = self.view.class(class).map(|c| c.resource_name.as_str()).unwrap_or_default().into();
        self.actions.push(Action::OpenUsage {
            usage: Usage {
                namespace: namespace.into(),
                name: usage_name(claim, &vmi.uid, node, self.now.as_millisecond()).into(),
                resource_version: Name::default(),
                claim: claim.into(),
                claim_uid: claim_uid.into(),
                class: class.into(),
                resource_name,
                count,
                vmi: vmi.clone(),
                node: node.into(),
                start: self.now,
                end: None,
            },
        });
    }
}

/// The stored usage records of `namespace` among `names`.
fn named<'v>(view: &'v View, namespace: &'v str, names: &'v [Name]) -> impl Iterator<Item = &'v Usage> {
    names.iter().filter_map(move |name| view.usage(namespace, name))
}
