//! Properties of the reconciler over random worlds, checked against counts made from scratch (not the engine's
//! indexes): no node holds more units than it has, budgets are never exceeded by the controller, a VMI's claims
//! share one node, a launcher is pinned exactly when it is ungated, usage records match attachments, one pass is
//! enough (idempotence), decisions do not depend on the order the view was filled, the placement index agrees
//! with a recount, and a view that keeps objects only (the twin's API server store) builds the same index.

use std::collections::{BTreeMap, BTreeSet};

use gpuclaim_engine::controller::{
    Action, Changes, Waiting, apply, reconcile, reconcile_changes, reconcile_remembering, runtime::run_key_visits,
};
use gpuclaim_engine::fixtures::{self, gated_launcher, gpu_node, held_claim};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{
    Capacity, ClaimPhase, GpuMode, Name, Placement, PodPhase, Time, View, VmiPhase, holds_placement_gate,
    is_claims_pod, occupied_node,
};
use gpuclaim_engine::scheduling::is_pinned_to;
use gpuclaim_engine::variant::Variant;
use proptest::prelude::*;

const CLASSES: [(&str, &str, GpuMode); 2] =
    [("h100", "nvidia.com/H100", GpuMode::Passthrough), ("a10", "nvidia.com/A10-12Q", GpuMode::Vgpu)];

/// A stream of random numbers from proptest, read in order.
struct Dice(Vec<u32>, usize);

impl Dice {
    fn roll(&mut self, sides: u32) -> u32 {
        let value = self.0[self.1 % self.0.len()];
        self.1 += 1;
        value % sides.max(1)
    }

    fn chance(&mut self, percent: u32) -> bool {
        self.roll(100) < percent
    }
}

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

/// A valid random world: nodes, two classes, two tenants, held claims (some bound where they fit), VMIs with gated
/// launchers referencing held claims and templates, and raw pods taking devices.
/// The number of cases, or `PROPTEST_CASES` when set (a longer soak of a property by hand).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(default)
}

fn world(dice: &mut Dice) -> View {
    let mut view = View::default();
    for (name, resource, mode) in CLASSES {
        view.upsert_class(fixtures::class(name, resource, mode, 8, 0));
    }
    let mut free: BTreeMap<(String, String), u64> = BTreeMap::new();
    for n in 0..1 + dice.roll(6) {
        let (_, resource, _) = CLASSES[dice.roll(2) as usize];
        let units = 1 + u64::from(dice.roll(8));
        let mut node = gpu_node(&format!("node-{n}"), resource, units);
        node.ready = !dice.chance(10);
        node.unschedulable = dice.chance(10);
        node.cpu_millis = 4_000 * (1 + u64::from(dice.roll(4)));
        free.insert((node.name.clone(), resource.to_owned()), units);
        view.upsert_node(node);
    }
    for tenant in ["t0", "t1"] {
        view.set_vgpu_entitled(tenant, tenant == "t0");
        let mut budgets = BTreeMap::new();
        for (class, _, _) in CLASSES {
            if dice.chance(70) {
                budgets.insert(class.to_owned(), 2 + u64::from(dice.roll(16)));
            }
        }
        view.upsert_quota(tenant, "gpu-budget", budgets);
    }
    let mut held = Vec::new();
    for i in 0..dice.roll(7) {
        let tenant = ["t0", "t1"][dice.roll(2) as usize];
        let (class, resource, _) = CLASSES[dice.roll(2) as usize];
        let mut claim = held_claim(tenant, &format!("held-{i}"), class, 1 + dice.roll(4));
        claim.created = at(i64::from(dice.roll(100)));
        let within_budget = view
            .tenant(tenant)
            .and_then(|t| t.budget(class))
            .is_none_or(|b| view.tenant(tenant).unwrap().units_bound(class) + u64::from(claim.count) <= b);
        if dice.chance(60) && within_budget {
            let fitting = free.iter_mut().find(|((_, r), units)| r == resource && **units >= u64::from(claim.count));
            if let Some(((node, _), units)) = fitting {
                *units -= u64::from(claim.count);
                claim = fixtures::bound(claim, node);
            }
        }
        held.push((tenant, claim.name.clone(), claim.uid.clone(), class, claim.count));
        view.upsert_claim(claim);
    }
    let mut used = BTreeSet::new();
    for v in 0..dice.roll(5) {
        let tenant = ["t0", "t1"][dice.roll(2) as usize];
        let vmi_name = format!("vm-{v}");
        view.upsert_vmi(fixtures::vmi(tenant, &vmi_name, VmiPhase::Scheduling, None));
        let mut attachments = Vec::new();
        let mut units = 0;
        let mut template = 0;
        for _ in 0..1 + dice.roll(3) {
            let candidate = &held[dice.roll(held.len().max(1) as u32) as usize % held.len().max(1)..];
            match candidate.first().filter(|h| h.0 == tenant && dice.chance(40) && !used.contains(&h.1)) {
                Some((_, name, uid, class, count)) => {
                    used.insert(name.clone());
                    attachments
                        .push(format!(r#"{{"claim":"{name}","uid":"{uid}","class":"{class}","count":{count}}}"#));
                    units += count;
                }
                None => {
                    let (class, _, _) = CLASSES[dice.roll(2) as usize];
                    let count = 1 + dice.roll(4);
                    attachments.push(format!(r#"{{"template":{template},"class":"{class}","count":{count}}}"#));
                    template += 1;
                    units += count;
                }
            }
        }
        let json = format!("[{}]", attachments.join(","));
        let mut pod = gated_launcher(
            tenant,
            &vmi_name,
            &json,
            "nvidia.com/H100",
            u64::from(units),
            at(i64::from(dice.roll(100))),
        );
        std::sync::Arc::make_mut(&mut pod.tolerations).push(fixtures::gpu_toleration("nvidia.com/A10-12Q"));
        view.upsert_pod(pod);
    }
    for p in 0..dice.roll(3) {
        let Some(((node, resource), units)) = free.iter_mut().find(|(_, units)| **units > 0) else { break };
        let mut pod = gated_launcher("t1", &format!("raw-{p}"), "[]", resource, 1, at(0));
        std::sync::Arc::make_mut(&mut pod.labels).remove(keys::LABEL_CLAIMS);
        pod.scheduling_gates.clear();
        pod.owner_vmi = None;
        pod.node_name = Some(node.as_str().into());
        pod.phase = PodPhase::Running;
        *units -= 1;
        view.upsert_pod(pod);
    }
    view
}

/// Each class's placement policy drawn from `policies`: the policies change which node a set takes, never what the
/// passes must keep.
fn with_policies(view: &mut View, dice: &mut Dice, policies: &[Placement]) {
    for (name, _, _) in CLASSES {
        let mut class = view.class(name).unwrap().clone();
        class.placement = policies[dice.roll(policies.len() as u32) as usize];
        view.upsert_class(class);
    }
}

/// Units of `resource` taken on `node`, counted from the objects: claims bound there, and pods' devices beyond
/// what their VMI's claims there cover.
fn used_from_scratch(view: &View, node: &str, resource: &str) -> u64 {
    let of_class = |class: &str| view.class(class).is_some_and(|c| c.resource_name == resource);
    let claims: u64 = view
        .claims()
        .filter(|c| c.node.as_deref() == Some(node) && of_class(&c.class))
        .map(|c| u64::from(c.count))
        .sum();
    let pods: u64 = view
        .pods()
        .filter(|p| occupied_node(p) == Some(node))
        .map(|p| {
            let units = p.devices.get(resource).copied().unwrap_or(0);
            let covered: u64 = match (&p.owner_vmi, is_claims_pod(p)) {
                (Some(vmi), true) => view
                    .claims()
                    .filter(|c| c.node.as_deref() == Some(node) && of_class(&c.class))
                    .filter(|c| c.attached_to.as_ref().is_some_and(|a| a.name == vmi.name))
                    .map(|c| u64::from(c.count))
                    .sum(),
                _ => 0,
            };
            units.saturating_sub(covered)
        })
        .sum();
    claims + pods
}

fn check_invariants(before: &View, view: &View) -> Result<(), TestCaseError> {
    for node in view.nodes() {
        for (resource, allocatable) in &node.devices {
            let used = used_from_scratch(view, &node.name, resource);
            let used_before = used_from_scratch(before, &node.name, resource);
            prop_assert!(used <= (*allocatable).max(used_before), "{} {resource}: {used} > {allocatable}", node.name);
            for class in view.classes().filter(|c| &c.resource_name == resource) {
                if Capacity::eligible(class, node) {
                    let free = view.capacity().free(&class.name, &node.name);
                    prop_assert_eq!(
                        free,
                        Some(allocatable.saturating_sub(used)),
                        "index of {} on {}",
                        class.name,
                        node.name
                    );
                }
            }
        }
    }
    for (namespace, tenant) in view.tenants() {
        for (class, _, _) in CLASSES {
            let bound: u64 =
                tenant.claims().filter(|c| c.class == class && c.node.is_some()).map(|c| u64::from(c.count)).sum();
            prop_assert_eq!(bound, tenant.units_bound(class));
            let bound_before = before.tenant(namespace).map_or(0, |t| t.units_bound(class));
            if let Some(budget) = tenant.budget(class) {
                prop_assert!(bound <= budget.max(bound_before), "{namespace} {class}: {bound} bound > budget {budget}");
            }
        }
    }
    let mut nodes_of_run: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for claim in view.claims() {
        if let Some(vmi) = &claim.attached_to {
            prop_assert_eq!(claim.phase, ClaimPhase::Attached);
            nodes_of_run
                .entry(vmi.uid.to_string())
                .or_default()
                .insert(claim.node.as_deref().unwrap_or_default().to_owned());
            let open: Vec<_> = view.open_usages_of(&claim.namespace, &claim.name).collect();
            prop_assert_eq!(open.len(), 1, "one open record per attachment of {}", claim.name);
            prop_assert!(open[0].vmi.uid == vmi.uid && Some(&open[0].node) == claim.node.as_ref());
        } else {
            prop_assert_eq!(view.open_usages_of(&claim.namespace, &claim.name).count(), 0);
        }
    }
    for (run, nodes) in &nodes_of_run {
        prop_assert_eq!(nodes.len(), 1, "the claims of run {} span {:?}", run, nodes);
    }
    let live = |pod: &&gpuclaim_engine::model::Pod| {
        !pod.phase.is_terminal()
            && pod
                .owner_vmi
                .as_ref()
                .and_then(|v| view.vmi(&pod.namespace, &v.name))
                .is_some_and(|v| !v.phase.is_final())
    };
    for pod in view.pods().filter(|p| is_claims_pod(p)).filter(live) {
        let pinned = pod.required_terms().and_then(is_pinned_to);
        if holds_placement_gate(pod) {
            prop_assert!(pinned.is_none(), "{} is pinned but gated", pod.name);
        } else {
            let vmi = pod.owner_vmi.as_ref().unwrap();
            let run_nodes = nodes_of_run.get(vmi.uid.as_str());
            prop_assert!(pinned.is_some(), "{} is ungated without its pin", pod.name);
            prop_assert_eq!(
                run_nodes.map(|n| n.iter().next().unwrap().as_str()),
                pinned,
                "{} pinned off its claims",
                pod.name
            );
        }
    }
    Ok(())
}

/// The same world, filled in the opposite order.
fn refilled(view: &View) -> View {
    let mut copy = View::default();
    copy.settings = view.settings.clone();
    for pod in view.pods().collect::<Vec<_>>().into_iter().rev() {
        copy.upsert_pod(pod.clone());
    }
    for claim in view.claims().collect::<Vec<_>>().into_iter().rev() {
        copy.upsert_claim(claim.clone());
    }
    for node in view.nodes().collect::<Vec<_>>().into_iter().rev() {
        copy.upsert_node(node.clone());
    }
    for class in view.classes().collect::<Vec<_>>().into_iter().rev() {
        copy.upsert_class(class.clone());
    }
    for vmi in view.vmis() {
        copy.upsert_vmi(vmi.clone());
    }
    for usage in view.usages() {
        copy.upsert_usage(usage.clone());
    }
    copy_tenants(view, &mut copy);
    copy
}

/// The tenants' entitlement and quotas of `view`, into `copy`.
fn copy_tenants(view: &View, copy: &mut View) {
    for (namespace, tenant) in view.tenants() {
        copy.set_vgpu_entitled(namespace, tenant.vgpu_entitled);
        for (quota, hard) in tenant.quotas() {
            copy.upsert_quota(namespace, quota, hard.clone());
        }
    }
}

/// `lean` brought to hold exactly `view`'s objects through its own upserts and removals (edits in place where the
/// object exists), as the twin's API server store follows every write.
fn follow(lean: &mut View, view: &View) {
    for class in view.classes() {
        lean.upsert_class(class.clone());
    }
    for node in view.nodes() {
        lean.upsert_node(node.clone());
    }
    copy_tenants(view, lean);
    // (namespace, name) of what `lean` holds and `view` no longer does.
    fn gone<'a>(
        held: impl Iterator<Item = (&'a Name, &'a Name)>,
        kept: impl Fn(&str, &str) -> bool,
    ) -> Vec<(Name, Name)> {
        held.filter(|(namespace, name)| !kept(namespace, name)).map(|(n, m)| (n.clone(), m.clone())).collect()
    }
    let claims = gone(lean.claims().map(|c| (&c.namespace, &c.name)), |n, m| view.claim(n, m).is_some());
    let pods = gone(lean.pods().map(|p| (&p.namespace, &p.name)), |n, m| view.pod(n, m).is_some());
    let usages = gone(lean.usages().map(|u| (&u.namespace, &u.name)), |n, m| view.usage(n, m).is_some());
    for (namespace, name) in claims {
        lean.remove_claim(&namespace, &name);
    }
    for claim in view.claims() {
        lean.upsert_claim(claim.clone());
    }
    for (namespace, name) in pods {
        lean.remove_pod(&namespace, &name);
    }
    for (namespace, name) in usages {
        lean.remove_usage(&namespace, &name);
    }
    for pod in view.pods() {
        lean.upsert_pod(pod.clone());
    }
    for vmi in view.vmis() {
        lean.upsert_vmi(vmi.clone());
    }
    for usage in view.usages() {
        lean.upsert_usage(usage.clone());
    }
}

/// A view that keeps objects only answers with the placement index the full view keeps, and once it keeps the
/// index again it decides exactly as the full view.
fn check_objects_only(lean: &View, view: &View, now: Time, actions: &[Action]) -> Result<(), TestCaseError> {
    prop_assert!(lean.capacity().published("h100", None) == Default::default(), "an objects-only view keeps no index");
    let (built, kept) = (lean.placement_index(), view.capacity());
    for (class, resource, _) in CLASSES {
        prop_assert_eq!(
            built.published(class, lean.typical_claim_size(class)),
            kept.published(class, view.typical_claim_size(class)),
            "published figures of {}",
            class
        );
        prop_assert_eq!(
            built.most_free_first(class).collect::<Vec<_>>(),
            kept.most_free_first(class).collect::<Vec<_>>(),
            "free units per node of {}",
            class
        );
        prop_assert_eq!(built.node_count(class), kept.node_count(class), "nodes offering {}", class);
        prop_assert_eq!(built.largest_allocatable(class), kept.largest_allocatable(class), "largest node of {}", class);
        for node in view.nodes() {
            prop_assert_eq!(built.used(resource, &node.name), kept.used(resource, &node.name));
        }
    }
    let mut rebuilt = lean.clone();
    rebuilt.keep_placement(true);
    prop_assert_eq!(&reconcile(&rebuilt, now), actions, "the index rebuilt from the objects decides the same");
    Ok(())
}

/// The scheduler binds most pinned pods where they are pinned, and their runs go Running there.
fn bind_pinned(view: &mut View, dice: &mut Dice) {
    let pods: Vec<_> = view.pods().filter(|p| is_claims_pod(p) && p.node_name.is_none()).cloned().collect();
    for mut pod in pods {
        let pinned = pod.required_terms().and_then(is_pinned_to).map(str::to_owned);
        if let Some(node) = pinned.filter(|_| dice.chance(70)) {
            pod.node_name = Some(node.as_str().into());
            pod.phase = PodPhase::Running;
            let mut vmi = view.vmi(&pod.namespace, &pod.owner_vmi.as_ref().unwrap().name).unwrap().clone();
            vmi.phase = VmiPhase::Running;
            vmi.node_name = Some(node.into());
            view.upsert_vmi(vmi);
            view.upsert_pod(pod);
        }
    }
}

/// What happens between passes: the scheduler binds pinned pods, runs start and end, budgets and nodes change.
/// Records the keys a controller's watches would queue.
fn world_moves(view: &mut View, dice: &mut Dice, changes: &mut Changes) {
    bind_pinned(view, dice);
    let vmis: Vec<_> = view.vmis().filter(|v| v.phase == VmiPhase::Running).cloned().collect();
    for mut vmi in vmis {
        if dice.chance(25) {
            vmi.phase = VmiPhase::Succeeded;
            let pods: Vec<_> = view.vmi_pods(&vmi.namespace, &vmi.name).cloned().collect();
            for mut pod in pods {
                pod.phase = PodPhase::Succeeded;
                view.upsert_pod(pod);
            }
            let key = (vmi.namespace.clone(), vmi.name.clone());
            view.upsert_vmi(vmi);
            // A controller's event filter queues a run's key only when a pass would find claims of it.
            if run_key_visits(view, &key.0, &key.1) {
                changes.vmis.insert(key);
            }
        }
    }
    if dice.chance(20) {
        let budget = u64::from(dice.roll(12));
        view.upsert_quota("t1", "gpu-budget", [("h100".to_owned(), budget)].into());
    }
    if dice.chance(15) {
        let picked = view.nodes().nth(dice.roll(6) as usize).cloned();
        if let Some(mut node) = picked {
            node.ready = !node.ready;
            changes.nodes.insert(node.name.clone());
            view.upsert_node(node);
        }
    }
    // Devices fail: the node may be left overbooked under its claims until some of them go.
    if dice.chance(25) {
        let picked = view.nodes().nth(dice.roll(6) as usize).cloned();
        let failed = 1 + dice.roll(4);
        // A GPU resource's devices (KubeVirt's kvm, tun and vhost-net are plentiful and come first by name).
        if let Some(mut node) = picked
            && let Some((_, units)) = node
                .devices
                .iter_mut()
                .find(|(resource, units)| CLASSES.iter().any(|(_, gpu, _)| gpu == resource) && **units > 1)
        {
            *units = units.saturating_sub(u64::from(failed)).max(1);
            changes.nodes.insert(node.name.clone());
            view.upsert_node(node);
        }
    }
}

/// Moves of the waiters themselves: a waiting VM stopped (its run ends; KubeVirt deletes it and, maybe not yet, its
/// launcher), a waiting launcher stored again (a label added).
fn waiter_moves(view: &mut View, dice: &mut Dice, changes: &mut Changes) {
    let gated: Vec<_> = view.gated_pods().cloned().collect();
    if gated.is_empty() {
        return;
    }
    let mut pod = gated[dice.roll(gated.len() as u32) as usize].clone();
    if dice.chance(50) {
        std::sync::Arc::make_mut(&mut pod.labels).insert("edited".to_owned(), dice.roll(3).to_string());
        view.upsert_pod(pod);
        return;
    }
    let Some(mut vmi) = pod.owner_vmi.as_ref().and_then(|run| view.vmi(&pod.namespace, &run.name)).cloned() else {
        return;
    };
    let key = (vmi.namespace.clone(), vmi.name.clone());
    match dice.roll(3) {
        0 => {
            vmi.phase = VmiPhase::Succeeded;
            view.upsert_vmi(vmi);
        }
        1 => {
            view.remove_vmi(&key.0, &key.1);
        }
        _ => {
            view.remove_vmi(&key.0, &key.1);
            view.remove_pod(&pod.namespace, &pod.name);
        }
    }
    if run_key_visits(view, &key.0, &key.1) {
        changes.vmis.insert(key);
    }
}

/// Moves that only take or add waiters (nothing loosens, so remembered waiters stay skipped): pinned pods bound,
/// new VMs ordering templates arrive, a few at once so queues grow long.
fn taking_moves(view: &mut View, dice: &mut Dice, step: i64) {
    bind_pinned(view, dice);
    for arrival in 0..dice.roll(4) {
        let tenant = ["t0", "t1"][dice.roll(2) as usize];
        let name = format!("late-{step}-{arrival}");
        view.upsert_vmi(fixtures::vmi(tenant, &name, VmiPhase::Scheduling, None));
        let (class, _, _) = CLASSES[dice.roll(2) as usize];
        let count = 1 + dice.roll(8);
        let json = format!(r#"[{{"template":0,"class":"{class}","count":{count}}}]"#);
        let mut pod = gated_launcher(tenant, &name, &json, "nvidia.com/H100", u64::from(count), at(200 + step));
        std::sync::Arc::make_mut(&mut pod.tolerations).push(fixtures::gpu_toleration("nvidia.com/A10-12Q"));
        view.upsert_pod(pod);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// A pass that skips the waiters nothing has changed for (`Waiting`) writes exactly what the full scan writes,
    /// over passes whose writes land, with moves that loosen (runs end, budgets and nodes change) and moves that
    /// only take (pods bound, new waiters), so that both skipping and waking are exercised.
    #[test]
    fn remembering_waiters_decides_what_the_full_scan_decides(numbers in prop::collection::vec(any::<u32>(), 64..256)) {
        let mut dice = Dice(numbers, 0);
        let mut view = world(&mut dice);
        with_policies(&mut view, &mut dice, &[Placement::BestFit, Placement::Spread, Placement::FragmentationAware]);
        let mut waiting = Waiting::default();
        let mut changes: Option<Changes> = None;
        for step in 0..16 {
            let now = at(1_000 + step);
            let actions = reconcile(&view, now);
            let remembering = reconcile_remembering(&view, now, changes.as_ref(), &Variant::SHIPPED, &mut waiting);
            prop_assert_eq!(&remembering, &actions, "step {}: skipping remembered waiters changes nothing", step);
            apply(&mut view, &actions, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
            waiting.landed();
            let mut moved = Changes::default();
            for action in &actions {
                if let Action::CreateClaim { claim, .. } | Action::UpdateClaim { claim, .. } | Action::DeleteClaim { claim, .. } = action {
                    moved.claims.insert((claim.namespace.clone(), claim.name.clone()));
                }
            }
            match dice.roll(10) {
                0..4 => world_moves(&mut view, &mut dice, &mut moved),
                4..6 => waiter_moves(&mut view, &mut dice, &mut moved),
                _ => taking_moves(&mut view, &mut dice, step),
            }
            changes = Some(moved);
        }
    }

    #[test]
    fn the_controller_keeps_every_invariant_and_one_pass_is_enough(numbers in prop::collection::vec(any::<u32>(), 64..256)) {
        let mut dice = Dice(numbers, 0);
        let mut view = world(&mut dice);
        // Not FragmentationAware: it reads the sizes a view has seen arrive (history), so a view filled afresh, as
        // below, may place differently; the property above runs it.
        with_policies(&mut view, &mut dice, &[Placement::BestFit, Placement::Spread]);
        let mut lean = view.clone();
        lean.keep_placement(false);
        let mut changes: Option<Changes> = None;
        for step in 0..6 {
            let now = at(1_000 + step);
            let actions = reconcile(&view, now);
            follow(&mut lean, &view);
            check_objects_only(&lean, &view, now, &actions)?;
            if let Some(changes) = changes.take() {
                prop_assert_eq!(&reconcile_changes(&view, now, &changes), &actions, "a pass over the changes alone decides the same");
            }
            prop_assert_eq!(&actions, &reconcile(&view.clone(), now), "deterministic");
            prop_assert_eq!(&actions, &reconcile(&refilled(&view), now), "independent of the order the view was filled");
            let before = view.clone();
            apply(&mut view, &actions, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
            check_invariants(&before, &view)?;
            let again = reconcile(&view, now);
            let writes: Vec<&Action> = again.iter().filter(|a| !matches!(a, Action::Event { .. })).collect();
            prop_assert!(writes.is_empty(), "a second pass still writes {writes:#?}\nafter {actions:#?}");
            let mut moved = Changes::default();
            for action in &actions {
                match action {
                    Action::CreateClaim { claim, .. } | Action::UpdateClaim { claim, .. } | Action::DeleteClaim { claim, .. } => {
                        moved.claims.insert((claim.namespace.clone(), claim.name.clone()));
                    }
                    _ => {}
                }
            }
            world_moves(&mut view, &mut dice, &mut moved);
            changes = Some(moved);
        }
    }
}
