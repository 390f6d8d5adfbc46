//! Settling the devices pods count once claims move, and publishing each class's free units as they will be.

use std::collections::{BTreeMap, BTreeSet};

use super::Pass;
use super::actions::Action;
use crate::model::{Class, Name, Published, occupied_name, typical_size};

impl Pass<'_> {
    /// A VMI's pods count the devices its claims on their node do not: when this pass moves or attaches claims,
    /// those counts change too (a migration target stops counting once the claims follow it; the source launcher
    /// starts counting until it exits). Brings the unit overlay in step; safe to call again.
    pub(super) fn settle_pods(&mut self) {
        if self.settled_at == Some(self.moves) {
            return;
        }
        self.settled_at = Some(self.moves);
        let view = self.view;
        let vmis: Vec<(Name, Name)> = self
            .attached
            .iter()
            .filter(|(_, entries)| entries.iter().any(|(_, _, units)| *units != 0))
            .map(|(key, _)| key.clone())
            .collect();
        for key in vmis {
            let (namespace, vmi) = (&key.0, &key.1);
            for pod in view.vmi_pods(namespace, vmi) {
                let node = self
                    .pinned_pods
                    .get(&(namespace.clone(), pod.name.clone()))
                    .cloned()
                    .or_else(|| occupied_name(pod).map(std::borrow::Cow::into_owned));
                let mut wanted: BTreeMap<(String, Name), i64> = BTreeMap::new();
                if let Some((old_node, devices)) = view.counted_devices(namespace, &pod.name) {
                    for (resource, units) in devices {
                        *wanted.entry((resource.clone(), old_node.clone())).or_insert(0) += *units as i64;
                    }
                }
                if let Some(node) = node {
                    // As the view counts them: resources some class publishes (the others are never read).
                    let counted = pod.devices.iter().filter(|(r, _)| view.capacity().publishes(r));
                    for (resource, units) in counted {
                        let covered = self.covered_after(&key, &node, resource);
                        let counted = units.saturating_sub(covered);
                        *wanted.entry((resource.clone(), node.clone())).or_insert(0) -= counted as i64;
                    }
                }
                let key = (namespace.clone(), pod.name.clone());
                let applied = self.settled.remove(&key).unwrap_or_default();
                for (slot, delta) in &wanted {
                    let before = applied.get(slot).copied().unwrap_or(0);
                    super::shift(&mut self.units, &slot.0, &slot.1, delta - before);
                }
                for (slot, before) in &applied {
                    if !wanted.contains_key(slot) {
                        super::shift(&mut self.units, &slot.0, &slot.1, -before);
                    }
                }
                self.settled.insert(key, wanted);
            }
        }
    }

    /// Units per resource the VMI's claims cover on `node` once this pass's writes land.
    fn covered_after(&self, run: &(Name, Name), node: &str, resource: &str) -> u64 {
        let (namespace, vmi) = run;
        let indexed =
            self.view.vmi_claim_units(namespace, vmi, node).and_then(|u| u.get(resource)).copied().unwrap_or(0);
        let moved = self.attached.get(run).and_then(|entries| {
            entries.iter().find(|(n, r, _)| n == node && r == resource).map(|(_, _, units)| *units)
        });
        indexed.saturating_add_signed(moved.unwrap_or(0))
    }

    /// Writes each class's published units where they differ from what its status says.
    pub(super) fn publish(&mut self) {
        self.settle_pods();
        let view = self.view;
        for class in view.classes() {
            let published = self.published(class);
            if published != class.published {
                self.actions.push(Action::PublishClass {
                    class: class.name.clone(),
                    precondition: class.resource_version.as_str().into(),
                    published,
                });
            }
        }
    }

    /// The most common claim size of `class` once this pass's writes land: the claims it creates count, the ones it
    /// deletes (or whose last finalizer it removes while they are deleting) do not, so the next pass publishes the
    /// same figure.
    fn typical_after(&self, class: &str) -> Option<u32> {
        let view = self.view;
        let vanishing = self.deleted.iter().copied().chain(
            self.finalizers
                .iter()
                .filter(|(key, keeps)| !**keeps && !self.deleted.contains(*key))
                .filter(|(key, _)| view.claim(key.0, key.1).is_some_and(|c| c.deleting))
                .map(|(key, _)| *key),
        );
        let gone: Vec<u32> = vanishing
            .filter_map(|(ns, name)| view.claim(ns, name))
            .filter(|c| c.class == class)
            .map(|c| c.count)
            .collect();
        let created: Vec<u32> = self.created.values().filter(|new| new.class == class).map(|new| new.count).collect();
        if gone.is_empty() && created.is_empty() {
            return view.typical_claim_size(class);
        }
        let mut sizes = view.claim_sizes(class).cloned().unwrap_or_default();
        for count in gone {
            if let Some(claims) = sizes.get_mut(&count) {
                *claims = claims.saturating_sub(1);
            }
        }
        for count in created {
            *sizes.entry(count).or_insert(0) += 1;
        }
        typical_size(&sizes)
    }

    /// The class's units once this pass's writes land: the index's figures, corrected on the nodes this pass
    /// touched.
    pub(super) fn published(&self, class: &Class) -> Published {
        self.published_with(class, self.typical_after(&class.name))
    }

    /// [`Pass::published`] with `typical` the class's most common claim size.
    fn published_with(&self, class: &Class, typical: Option<u32>) -> Published {
        let capacity = self.view.capacity();
        let mut published = capacity.published(&class.name, typical);
        // Most passes move no units of the resource: the index's figures are the class's (the walk below would
        // find its top node untouched).
        let Some(deltas) = self.units.get(class.resource_name.as_str()).filter(|deltas| !deltas.is_empty()) else {
            return published;
        };
        // Free units on a node too small for the typical claim.
        let stranded = |free: u64| if typical.is_some_and(|size| free < u64::from(size)) { free } else { 0 };
        let mut touched = BTreeSet::new();
        let mut largest_touched = 0;
        for node in deltas.keys() {
            let Some(indexed) = capacity.free(&class.name, node) else { continue };
            // As placement reads it: units freed on an overbooked node pay its debt first, so the class never
            // publishes units the next pass (reading the index with the writes in) would not see.
            let free = self.free_from(class, node, indexed);
            published.free_units = (published.free_units + free).saturating_sub(indexed);
            published.fragmented_units =
                (published.fragmented_units + stranded(free)).saturating_sub(stranded(indexed));
            largest_touched = largest_touched.max(free);
            touched.insert(node.as_str());
        }
        // The largest untouched node: walk the index from the top past the touched ones.
        let largest_untouched =
            capacity.most_free_first(&class.name).find(|(_, node)| !touched.contains(node)).map_or(0, |(free, _)| free);
        published.largest_free_on_node = largest_touched.max(largest_untouched);
        published
    }

    /// The class's free units in total and the most on one node, once this pass's writes land (as published).
    pub(super) fn free_after(&self, class: &Class) -> (u64, u64) {
        let published = self.published_with(class, None);
        (published.free_units, published.largest_free_on_node)
    }
}
