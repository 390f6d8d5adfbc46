//! One tenant namespace: entitlement, budgets, claims, and the units they order and hold per class; and the two
//! rules on them (DESIGN.md §2), [`check_budget`] and [`check_entitlement`], which the order webhook, the controller
//! and the refusing VMI webhook variant all call.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::Fixed;
use super::objects::{Claim, Class, GpuMode};
use crate::keys;
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

    /// Units the namespace's claims hold on nodes, by class.
    pub fn bound_units(&self) -> impl Iterator<Item = (&str, u64)> {
        self.bound.iter().map(|(class, units)| (class.as_str(), *units))
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

/// The budget rule: `units` more of `class` fit a namespace's budget when the units it already counts against it
/// (`counted`, read only when a quota names the class) and these stay within its tightest quota. A class no quota
/// names is not limited, as with any ResourceQuota. What counts is the caller's: the order webhook counts what is
/// ordered ([`Tenant::units_used`]), the controller and the refusing VMI webhook what is bound.
pub fn check_budget(
    tenant: Option<&Tenant>,
    class: &str,
    units: u64,
    counted: impl FnOnce(&Tenant) -> u64,
) -> Result<(), BudgetExceeded> {
    let Some(tenant) = tenant else { return Ok(()) };
    let Some(budget) = tenant.budget(class) else { return Ok(()) };
    let counted = counted(tenant);
    if counted + units > budget {
        return Err(BudgetExceeded { class: class.to_owned(), units, counted, budget });
    }
    Ok(())
}

/// The vGPU entitlement rule: a vGPU class only for a namespace the platform entitled (label
/// `gpu.cozystack.io/vgpu-entitled`); a passthrough class for every namespace.
pub fn check_entitlement(tenant: Option<&Tenant>, class: &Class) -> Result<(), NotEntitled> {
    if class.mode == GpuMode::Vgpu && !tenant.is_some_and(|t| t.vgpu_entitled) {
        return Err(NotEntitled { class: class.name.clone() });
    }
    Ok(())
}

/// Refused by [`check_budget`]: the figures each rule's message names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetExceeded {
    pub class: String,
    /// The units asked for.
    pub units: u64,
    /// The units the namespace already counts against the budget.
    pub counted: u64,
    /// The tightest quota's hard units.
    pub budget: u64,
}

impl BudgetExceeded {
    pub const REASON: &str = "BudgetExceeded";
}

/// Refused by [`check_entitlement`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotEntitled {
    pub class: String,
}

impl NotEntitled {
    pub const REASON: &str = "NotEntitled";
}

impl fmt::Display for NotEntitled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU class {:?} is a vGPU class and this namespace is not entitled to vGPUs (label {})",
            self.class,
            keys::LABEL_VGPU_ENTITLED
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::class;

    fn tenant(quotas: &[(&str, u64)]) -> Tenant {
        let mut tenant = Tenant::default();
        for (index, (class, hard)) in quotas.iter().enumerate() {
            tenant.quotas.insert(format!("q{index}"), [((*class).to_owned(), *hard)].into());
        }
        tenant
    }

    #[test]
    fn the_budget_is_the_tightest_quota_and_a_class_no_quota_names_is_not_limited() {
        let tenant = tenant(&[("h100", 8), ("h100", 6)]);
        assert_eq!(check_budget(Some(&tenant), "h100", 2, |_| 4), Ok(()));
        let refused = BudgetExceeded { class: "h100".into(), units: 3, counted: 4, budget: 6 };
        assert_eq!(check_budget(Some(&tenant), "h100", 3, |_| 4), Err(refused));
        let unread = |_: &Tenant| -> u64 { panic!("nothing is counted where no quota names the class") };
        assert_eq!(check_budget(Some(&tenant), "a100", 99, unread), Ok(()));
        assert_eq!(check_budget(None, "h100", 99, unread), Ok(()));
    }

    #[test]
    fn only_an_entitled_namespace_takes_a_vgpu_class() {
        let vgpu = class("a100-40c", "nvidia.com/A100-40C", GpuMode::Vgpu, 1, 4);
        let passthrough = class("h100", "nvidia.com/H100", GpuMode::Passthrough, 8, 8);
        let mut entitled = tenant(&[]);
        entitled.vgpu_entitled = true;
        assert_eq!(check_entitlement(Some(&entitled), &vgpu), Ok(()));
        assert_eq!(check_entitlement(Some(&tenant(&[])), &vgpu), Err(NotEntitled { class: "a100-40c".into() }));
        assert_eq!(
            check_entitlement(None, &vgpu).unwrap_err().to_string(),
            "GPU class \"a100-40c\" is a vGPU class \
            and this namespace is not entitled to vGPUs (label gpu.cozystack.io/vgpu-entitled)"
        );
        assert_eq!(check_entitlement(None, &passthrough), Ok(()));
    }
}
