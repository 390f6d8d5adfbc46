//! The order webhook rule: refuse a tenant's GPUClaim that cannot be met now.

use std::fmt;

use crate::keys;
use crate::model::{Claim, GpuMode, View};

use super::Refusal;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderRefusal {
    /// The template mark from someone other than the controller (behind the tamper policy, a second line).
    TemplateMarkForbidden {
        user: String,
    },
    ClassMissing {
        class: String,
    },
    CountNotPositive,
    CountOverMax {
        class: String,
        count: u32,
        max: u32,
    },
    NoCapacity {
        class: String,
        count: u32,
        largest_free_on_node: u64,
    },
    BudgetExceeded {
        class: String,
        count: u32,
        used: u64,
        budget: u64,
    },
    NotEntitled {
        class: String,
    },
}

impl fmt::Display for OrderRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use OrderRefusal::*;
        match self {
            TemplateMarkForbidden { user } => write!(
                f,
                "label {} is reserved for the GPU controller; {user:?} may not set it",
                keys::LABEL_TEMPLATE_CLAIM
            ),
            ClassMissing { class } => write!(f, "GPU class {class:?} does not exist"),
            CountNotPositive => write!(f, "spec.count must be at least 1"),
            CountOverMax { class, count, max } => {
                write!(f, "spec.count {count} is more than the maxCount {max} of GPU class {class:?}")
            }
            NoCapacity { class, count, largest_free_on_node } => write!(
                f,
                "spec.count {count} is more than the {largest_free_on_node} free units of GPU class {class:?} on \
                 any one node"
            ),
            BudgetExceeded { class, count, used, budget } => write!(
                f,
                "ordering {count} units of GPU class {class:?} would exceed the namespace's budget: {used} of \
                 {budget} already ordered ({})",
                keys::quota_key(class)
            ),
            NotEntitled { class } => write!(
                f,
                "GPU class {class:?} is a vGPU class and this namespace is not entitled to vGPUs (label {})",
                keys::LABEL_VGPU_ENTITLED
            ),
        }
    }
}

impl Refusal for OrderRefusal {
    fn reason(&self) -> &'static str {
        use OrderRefusal::*;
        match self {
            TemplateMarkForbidden { .. } => "TemplateMarkForbidden",
            ClassMissing { .. } => "ClassMissing",
            CountNotPositive => "CountNotPositive",
            CountOverMax { .. } => "CountOverMax",
            NoCapacity { .. } => "NoCapacity",
            BudgetExceeded { .. } => "BudgetExceeded",
            NotEntitled { .. } => "NotEntitled",
        }
    }
}

/// The order webhook: refuses a tenant's claim that cannot be met now, checking in this order: class exists,
/// count ≤ maxCount, count ≤ the published free units on one node, budget, vGPU entitlement. Template claims skip
/// it (the controller checks their budget when it creates them); `requester` is the user creating the claim.
///
/// The budget counts every claim of the class in the namespace, held and template, in any phase: like a
/// ResourceQuota it counts what has been ordered, not what has been placed.
pub fn validate_order(view: &View, claim: &Claim, requester: &str) -> Result<(), OrderRefusal> {
    if claim.template {
        return match view.settings.template_claim_creator.as_deref() {
            Some(creator) if creator != requester => {
                Err(OrderRefusal::TemplateMarkForbidden { user: requester.to_owned() })
            }
            _ => Ok(()),
        };
    }
    let class = view.class(&claim.class).ok_or_else(|| OrderRefusal::ClassMissing { class: claim.class.clone() })?;
    if claim.count == 0 {
        return Err(OrderRefusal::CountNotPositive);
    }
    if claim.count > class.max_count {
        return Err(OrderRefusal::CountOverMax { class: class.name.clone(), count: claim.count, max: class.max_count });
    }
    let largest_free_on_node = class.published.largest_free_on_node;
    if u64::from(claim.count) > largest_free_on_node {
        return Err(OrderRefusal::NoCapacity { class: class.name.clone(), count: claim.count, largest_free_on_node });
    }
    let tenant = view.tenant(&claim.namespace);
    if let Some(budget) = tenant.and_then(|t| t.budget(&class.name)) {
        let used = tenant.map_or(0, |t| t.units_used(&class.name));
        if used + u64::from(claim.count) > budget {
            return Err(OrderRefusal::BudgetExceeded { class: class.name.clone(), count: claim.count, used, budget });
        }
    }
    if class.mode == GpuMode::Vgpu && !tenant.is_some_and(|t| t.vgpu_entitled) {
        return Err(OrderRefusal::NotEntitled { class: class.name.clone() });
    }
    Ok(())
}
