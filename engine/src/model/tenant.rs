//! One tenant namespace: entitlement, budgets, claims, and the units they order and hold per class.

use std::collections::{BTreeMap, HashMap};

use super::Fixed;
use super::objects::Claim;
use crate::name::Name;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenant {
    pub vgpu_entitled: bool,
    /// ResourceQuota name → class → hard units. Each quota is enforced on its own, as the API server does.
    pub(super) quotas: BTreeMap<String, BTreeMap<String, u64>>,
    /// Hashed with a fixed seed: looked up on every event, listed only by full passes, which sort what they list.
    pub(super) claims: HashMap<Name, Claim, Fixed>,
    /// class → units ordered by every claim of the namespace (held and template, any phase): the order webhook's
    /// "used".
    ordered: BTreeMap<String, u64>,
    /// class → units of claims bound to a node (Bound or Attached): what the controller keeps within the budget.
    bound: BTreeMap<String, u64>,
}

impl Tenant {
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.get(name)
    }

    /// The namespace's claims by name.
    pub fn claims(&self) -> impl Iterator<Item = &Claim> + use<'_> {
        let mut all: Vec<&Claim> = self.claims.values().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        all.into_iter()
    }

    /// Units of `class` ordered by the namespace's claims.
    pub fn units_used(&self, class: &str) -> u64 {
        self.ordered.get(class).copied().unwrap_or(0)
    }

    /// Units of `class` the namespace's claims hold on nodes.
    pub fn units_bound(&self, class: &str) -> u64 {
        self.bound.get(class).copied().unwrap_or(0)
    }

    /// Each ResourceQuota's GPU budgets (quota name → class → hard units).
    pub fn quotas(&self) -> impl Iterator<Item = (&str, &BTreeMap<String, u64>)> {
        self.quotas.iter().map(|(name, hard)| (name.as_str(), hard))
    }

    /// The tightest hard limit any quota of the namespace sets for `class`; `None` when no quota names it (then
    /// the class is not limited for this tenant, as with any ResourceQuota).
    pub fn budget(&self, class: &str) -> Option<u64> {
        self.quotas.values().filter_map(|hard| hard.get(class).copied()).min()
    }

    /// Counts (or uncounts) `count` units of `class` ordered, and bound when the claim has a node.
    pub(super) fn count(&mut self, class: &str, count: u32, bound: bool, adding: bool) {
        let edit = if adding { add } else { subtract };
        edit(&mut self.ordered, class, count);
        if bound {
            edit(&mut self.bound, class, count);
        }
    }
}

fn add(units: &mut BTreeMap<String, u64>, class: &str, count: u32) {
    match units.get_mut(class) {
        Some(total) => *total += u64::from(count),
        None => {
            units.insert(class.to_owned(), u64::from(count));
        }
    }
}

fn subtract(units: &mut BTreeMap<String, u64>, class: &str, count: u32) {
    let total = units.get_mut(class).expect("a stored claim's class is counted");
    *total = total.checked_sub(u64::from(count)).expect("units counted never go below zero");
    if *total == 0 {
        units.remove(class);
    }
}
