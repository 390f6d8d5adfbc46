//! The order webhook rule: refuse a tenant's GPUClaim that cannot be met now, and any later change of what was
//! ordered.

use std::fmt;

use crate::keys;
use crate::model::{
    self, BudgetExceeded, Claim, NotEntitled, Published, Shortage, Tenant, View, check_budget, check_entitlement,
    shortage,
};

use super::Refusal;

/// What the order webhook judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order<'a> {
    /// CREATE: the claim as the tenant sent it.
    Create(&'a Claim),
    /// UPDATE: the claim as stored and as the writer sent it.
    Update { old: &'a Claim, new: &'a Claim },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderRefusal {
    /// An update that changes what was ordered (class or count): the checks judged the claim as created.
    SpecImmutable {
        field: &'static str,
        from: String,
        to: String,
    },
    /// The template mark from someone other than the controller (behind the tamper policy, a second line).
    TemplateMarkForbidden {
        user: String,
    },
    /// The template mark while no settings name the controller: refused, as the tamper policy refuses without its
    /// parameter.
    SettingsMissing,
    ClassMissing {
        class: String,
    },
    CountNotPositive,
    CountOverMax {
        class: String,
        count: u32,
        max: u32,
    },
    /// The class has fewer units free in total (its published `freeUnits`) than the order's count. The message
    /// names the most free on one node, as it did before `Fragmented` was told apart (event logs unchanged).
    NoCapacity {
        class: String,
        count: u32,
        largest_free_on_node: u64,
    },
    /// The class has the units free in total (its published `freeUnits`) but no one node has them.
    Fragmented {
        class: String,
        count: u32,
        free_units: u64,
        largest_free_on_node: u64,
    },
    /// The budget counts what the namespace has ordered.
    BudgetExceeded(BudgetExceeded),
    NotEntitled(NotEntitled),
}

impl fmt::Display for OrderRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use OrderRefusal::*;
        match self {
            SpecImmutable { field, from, to } => write!(
                f,
                "{field} is immutable ({from} -> {to}): a claim's class and count were judged when it was ordered; \
                 delete it and order a new one"
            ),
            TemplateMarkForbidden { user } => write!(
                f,
                "label {} is reserved for the GPU controller; {user:?} may not set, change or remove it",
                keys::LABEL_TEMPLATE_CLAIM
            ),
            SettingsMissing => write!(
                f,
                "label {} is reserved for the GPU controller, and no settings ConfigMap {} names it ({})",
                keys::LABEL_TEMPLATE_CLAIM,
                keys::SETTINGS_CONFIGMAP,
                keys::SETTINGS_CONTROLLER_USER
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
            Fragmented { class, count, free_units, largest_free_on_node } => write!(
                f,
                "spec.count {count} fits no one node of GPU class {class:?}: {free_units} units are free in total, \
                 at most {largest_free_on_node} on one node (the class is fragmented)"
            ),
            Self::BudgetExceeded(refused) => write!(
                f,
                "ordering {} units of GPU class {:?} would exceed the namespace's budget: {} of {} already ordered \
                 ({})",
                refused.units,
                refused.class,
                refused.counted,
                refused.budget,
                keys::quota_key(&refused.class)
            ),
            Self::NotEntitled(refused) => refused.fmt(f),
        }
    }
}

impl Refusal for OrderRefusal {
    fn reason(&self) -> &'static str {
        use OrderRefusal::*;
        match self {
            SpecImmutable { .. } => "SpecImmutable",
            TemplateMarkForbidden { .. } => "TemplateMarkForbidden",
            SettingsMissing => "SettingsMissing",
            ClassMissing { .. } => "ClassMissing",
            CountNotPositive => "CountNotPositive",
            CountOverMax { .. } => "CountOverMax",
            NoCapacity { .. } => "NoCapacity",
            Fragmented { .. } => "Fragmented",
            Self::BudgetExceeded(_) => model::BudgetExceeded::REASON,
            Self::NotEntitled(_) => model::NotEntitled::REASON,
        }
    }
}

/// The order webhook. On CREATE it refuses a tenant's claim that cannot be met now ([`validate_new_order`]); on
/// UPDATE, any change of the spec, and a change of the template mark by anyone but the controller
/// ([`validate_order_change`]). Other updates (the controller's finalizer, a tenant's own labels) pass: the claim
/// was judged when it was ordered.
pub fn validate_order(view: &View, order: Order<'_>, requester: &str) -> Result<(), OrderRefusal> {
    match order {
        Order::Create(claim) => validate_new_order(view, claim, requester),
        Order::Update { old, new } => validate_order_change(view, old, new, requester),
    }
}

/// A new claim, checking in this order: class exists,
/// count ≤ maxCount, count ≤ the published free units on one node (`NoCapacity` when the class has fewer free in
/// total, `Fragmented` when it has them in total but on no one node), budget, vGPU entitlement. Template claims skip
/// it (the controller checks their budget when it creates them) when the settings name `requester`, the user
/// creating the claim, as their creator.
///
/// The budget counts every claim of the class in the namespace, held and template, in any phase: like a
/// ResourceQuota it counts what has been ordered, not what has been placed.
fn validate_new_order(view: &View, claim: &Claim, requester: &str) -> Result<(), OrderRefusal> {
    if claim.template {
        return may_write_template_mark(view, requester);
    }
    let class =
        view.class(&claim.class).ok_or_else(|| OrderRefusal::ClassMissing { class: claim.class.to_string() })?;
    if claim.count == 0 {
        return Err(OrderRefusal::CountNotPositive);
    }
    if claim.count > class.max_count {
        return Err(OrderRefusal::CountOverMax { class: class.name.clone(), count: claim.count, max: class.max_count });
    }
    let Published { free_units, largest_free_on_node, .. } = class.published;
    match shortage(u64::from(claim.count), free_units, largest_free_on_node) {
        Some(Shortage::NoCapacity) => {
            let class = class.name.clone();
            return Err(OrderRefusal::NoCapacity { class, count: claim.count, largest_free_on_node });
        }
        Some(Shortage::Fragmented) => {
            let class = class.name.clone();
            return Err(OrderRefusal::Fragmented { class, count: claim.count, free_units, largest_free_on_node });
        }
        None => {}
    }
    let tenant = view.tenant(&claim.namespace);
    let ordered = |tenant: &Tenant| tenant.units_used(&class.name);
    check_budget(tenant, &class.name, u64::from(claim.count), ordered).map_err(OrderRefusal::BudgetExceeded)?;
    check_entitlement(tenant, class).map_err(OrderRefusal::NotEntitled)
}

/// A change to a stored claim: the spec never changes (`SpecImmutable`, class first), and the template mark only
/// by the controller. Nothing else is judged again.
fn validate_order_change(view: &View, old: &Claim, new: &Claim, requester: &str) -> Result<(), OrderRefusal> {
    if old.class != new.class {
        let (from, to) = (format!("{:?}", old.class.as_str()), format!("{:?}", new.class.as_str()));
        return Err(OrderRefusal::SpecImmutable { field: "spec.className", from, to });
    }
    if old.count != new.count {
        let (from, to) = (old.count.to_string(), new.count.to_string());
        return Err(OrderRefusal::SpecImmutable { field: "spec.count", from, to });
    }
    if old.template != new.template {
        return may_write_template_mark(view, requester);
    }
    Ok(())
}

/// Only the user the settings name as the template-claim creator writes the template mark; nobody while no
/// settings name one (closed, as the tamper policy is without its parameter).
fn may_write_template_mark(view: &View, requester: &str) -> Result<(), OrderRefusal> {
    match view.settings.controller_user.as_deref() {
        None => Err(OrderRefusal::SettingsMissing),
        Some(creator) if creator != requester => {
            Err(OrderRefusal::TemplateMarkForbidden { user: requester.to_owned() })
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{held_claim, platform};

    fn order(namespace: &str, class: &str, count: u32) -> Result<(), OrderRefusal> {
        validate_order(&platform(), Order::Create(&held_claim(namespace, "new", class, count)), "alice")
    }

    #[test]
    fn an_order_that_can_be_met_is_allowed() {
        // 3 of 8 already ordered; 5 more fit the budget, and 8 are free on one node.
        assert_eq!(order("tenant-a", "h100", 5), Ok(()));
        // No quota names h100 in tenant-b: not limited.
        assert_eq!(order("tenant-b", "h100", 8), Ok(()));
    }

    #[test]
    fn refusals_name_their_reason() {
        let cases = [
            (order("tenant-a", "l40", 1), "ClassMissing", r#"GPU class "l40" does not exist"#.to_owned()),
            (order("tenant-a", "h100", 0), "CountNotPositive", "spec.count must be at least 1".to_owned()),
            (
                order("tenant-a", "h100", 9),
                "CountOverMax",
                r#"spec.count 9 is more than the maxCount 8 of GPU class "h100""#.to_owned(),
            ),
            (
                order("tenant-a", "h100", 6),
                "BudgetExceeded",
                r#"ordering 6 units of GPU class "h100" would exceed the namespace's budget: 3 of 8 already ordered (requests.gpu.cozystack.io/h100)"#.to_owned(),
            ),
            (
                order("tenant-b", "a100-40c", 1),
                "NotEntitled",
                r#"GPU class "a100-40c" is a vGPU class and this namespace is not entitled to vGPUs (label gpu.cozystack.io/vgpu-entitled)"#.to_owned(),
            ),
        ];
        for (got, reason, message) in cases {
            let refusal = got.unwrap_err();
            assert_eq!(refusal.reason(), reason);
            assert_eq!(refusal.to_string(), message);
        }
    }

    #[test]
    fn fragmented_and_no_capacity_read_the_free_units_in_total_and_on_one_node() {
        // Three nodes of eight with 7, 6 and 7 taken: 1 + 2 + 1 = 4 free in total, at most 2 on one node.
        let mut view = platform();
        let mut h100 = view.class("h100").unwrap().clone();
        h100.published.free_units = 4;
        h100.published.largest_free_on_node = 2;
        view.upsert_class(h100);
        let order =
            |count| validate_order(&view, Order::Create(&held_claim("tenant-a", "new", "h100", count)), "alice");
        let refusal = order(4).unwrap_err();
        assert_eq!(
            refusal,
            OrderRefusal::Fragmented { class: "h100".into(), count: 4, free_units: 4, largest_free_on_node: 2 }
        );
        assert_eq!(refusal.reason(), "Fragmented");
        assert_eq!(
            refusal.to_string(),
            r#"spec.count 4 fits no one node of GPU class "h100": 4 units are free in total, at most 2 on one node (the class is fragmented)"#
        );
        let refusal = order(5).unwrap_err();
        assert_eq!(refusal, OrderRefusal::NoCapacity { class: "h100".into(), count: 5, largest_free_on_node: 2 });
        assert_eq!(refusal.reason(), "NoCapacity");
        assert_eq!(
            refusal.to_string(),
            r#"spec.count 5 is more than the 2 free units of GPU class "h100" on any one node"#
        );
        assert_eq!(order(2), Ok(()));
    }

    #[test]
    fn checks_run_in_the_documented_order() {
        // Over maxCount, over capacity, over budget and not entitled at once: maxCount speaks first.
        let mut view = platform();
        view.upsert_quota("tenant-b", "q", [("a100-40c".to_owned(), 0)].into());
        let refusal =
            validate_order(&view, Order::Create(&held_claim("tenant-b", "new", "a100-40c", 5)), "bob").unwrap_err();
        assert_eq!(refusal.reason(), "CountOverMax");
        // Within maxCount, capacity 4: over budget and not entitled: budget speaks first.
        let refusal =
            validate_order(&view, Order::Create(&held_claim("tenant-b", "new", "a100-40c", 1)), "bob").unwrap_err();
        assert_eq!(refusal.reason(), "BudgetExceeded");
    }

    #[test]
    fn the_tightest_of_several_quotas_is_the_budget() {
        let mut view = platform();
        view.upsert_quota("tenant-a", "team-cap", [("h100".to_owned(), 4)].into());
        let refusal =
            validate_order(&view, Order::Create(&held_claim("tenant-a", "new", "h100", 2)), "alice").unwrap_err();
        let refused = BudgetExceeded { class: "h100".into(), units: 2, counted: 3, budget: 4 };
        assert_eq!(refusal, OrderRefusal::BudgetExceeded(refused));
        view.remove_quota("tenant-a", "team-cap");
        assert_eq!(validate_order(&view, Order::Create(&held_claim("tenant-a", "new", "h100", 2)), "alice"), Ok(()));
    }

    #[test]
    fn a_class_never_published_has_no_capacity_yet() {
        let mut view = platform();
        let mut h100 = view.class("h100").unwrap().clone();
        h100.published = Default::default();
        view.upsert_class(h100);
        let refusal =
            validate_order(&view, Order::Create(&held_claim("tenant-a", "new", "h100", 1)), "alice").unwrap_err();
        assert_eq!(refusal.reason(), "NoCapacity");
    }

    #[test]
    fn template_claims_skip_the_checks_but_only_from_the_controller() {
        let mut view = platform();
        let mut template = held_claim("tenant-b", "vm-1-0", "a100-40c", 99);
        template.template = true;
        let refusal =
            validate_order(&view, Order::Create(&template), "system:serviceaccount:cozy-gpu:gpuclaim").unwrap_err();
        assert_eq!(refusal, OrderRefusal::SettingsMissing, "no creator configured: closed");
        assert_eq!(
            refusal.to_string(),
            "label gpu.cozystack.io/template-claim is reserved for the GPU controller, and no settings ConfigMap \
             gpu-claims-settings names it (controllerUser)"
        );
        view.settings.controller_user = Some("system:serviceaccount:cozy-gpu:gpuclaim".into());
        assert_eq!(validate_order(&view, Order::Create(&template), "system:serviceaccount:cozy-gpu:gpuclaim"), Ok(()));
        let refusal = validate_order(&view, Order::Create(&template), "alice").unwrap_err();
        assert_eq!(
            refusal.to_string(),
            r#"label gpu.cozystack.io/template-claim is reserved for the GPU controller; "alice" may not set, change or remove it"#
        );
    }

    const CONTROLLER: &str = "system:serviceaccount:cozy-gpu:gpuclaim";

    fn change(old: &Claim, new: &Claim, requester: &str) -> Result<(), OrderRefusal> {
        let mut view = platform();
        view.settings.controller_user = Some(CONTROLLER.into());
        validate_order(&view, Order::Update { old, new }, requester)
    }

    #[test]
    fn a_bound_claims_count_and_class_never_change() {
        let old = crate::fixtures::bound(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1");
        let mut raised = old.clone();
        raised.count = 8;
        let refusal = change(&old, &raised, "alice").unwrap_err();
        assert_eq!(refusal.reason(), "SpecImmutable");
        assert_eq!(
            refusal.to_string(),
            "spec.count is immutable (1 -> 8): a claim's class and count were judged when it was ordered; delete it \
             and order a new one"
        );
        let mut switched = old.clone();
        switched.class = "a100-40c".into();
        let refusal = change(&old, &switched, CONTROLLER).unwrap_err();
        assert_eq!(
            refusal,
            OrderRefusal::SpecImmutable {
                field: "spec.className",
                from: r#""h100""#.into(),
                to: r#""a100-40c""#.into()
            },
            "not even the controller changes what was ordered"
        );
    }

    #[test]
    fn updates_that_keep_the_order_pass_without_judging_it_again() {
        // Over budget now (tenant-a holds 3 of 8 and the class has shrunk), yet its own finalizer and labels pass.
        let old = held_claim("tenant-a", "train-a", "h100", 1);
        let mut released = old.clone();
        released.finalizer = false;
        assert_eq!(change(&old, &released, CONTROLLER), Ok(()));
        assert_eq!(change(&old, &old.clone(), "alice"), Ok(()));
    }

    #[test]
    fn the_template_mark_changes_only_by_the_controller() {
        let mut old = held_claim("tenant-a", "vm-1-0", "h100", 2);
        old.template = true;
        let mut unmarked = old.clone();
        unmarked.template = false;
        let refusal = change(&old, &unmarked, "alice").unwrap_err();
        assert_eq!(refusal, OrderRefusal::TemplateMarkForbidden { user: "alice".into() });
        assert_eq!(change(&unmarked, &old, "alice").unwrap_err().reason(), "TemplateMarkForbidden");
        assert_eq!(change(&old, &unmarked, CONTROLLER), Ok(()));
        let no_settings = validate_order(&platform(), Order::Update { old: &old, new: &unmarked }, CONTROLLER);
        assert_eq!(no_settings, Err(OrderRefusal::SettingsMissing));
    }

    #[test]
    fn removing_and_replacing_claims_keeps_the_budget_in_step() {
        let mut view = platform();
        assert_eq!(view.tenant("tenant-a").unwrap().units_used("h100"), 3);
        view.upsert_claim(held_claim("tenant-a", "train-a", "h100", 4)); // replaces the 1-unit claim
        assert_eq!(view.tenant("tenant-a").unwrap().units_used("h100"), 6);
        view.remove_claim("tenant-a", "train-a");
        assert_eq!(view.tenant("tenant-a").unwrap().units_used("h100"), 2);
    }
}
