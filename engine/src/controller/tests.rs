//! The reconciler, decision by decision, on small worlds; each test also checks that one more pass after applying
//! the actions yields nothing.

use super::*;
use crate::fixtures::{self, gated_launcher, gpu_node, held_claim, settle, vmi};
use crate::model::{Change, Claim, ClaimPhase, GpuMode, Published, Reason, Time, View, VmiPhase};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

/// Two H100 nodes (8 and 4 units), one class, one tenant with budget 8.
fn world() -> View {
    fixtures::two_node_cluster()
}

#[test]
fn a_gated_launcher_with_a_template_claim_is_placed_pinned_and_ungated_in_one_pass() {
    let mut view = world();
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":3}]"#, H100, 3, at(0)));
    let passes = settle(&mut view, at(1));
    assert_eq!(passes.len(), 1, "one pass does it all: {passes:#?}");
    let claim = view.claim("tenant-a", "vm-1-gpu-0").expect("the template claim exists");
    assert_eq!(
        (claim.phase, claim.node.as_deref()),
        (ClaimPhase::Attached, Some("gpu-2")),
        "best fit: 4 free > 8 free"
    );
    let pod = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap();
    assert!(pod.scheduling_gates.is_empty());
    assert_eq!(crate::scheduling::is_pinned_to(pod.required_terms().unwrap()), Some("gpu-2"));
    assert_eq!(view.open_usages().count(), 1);
    assert_eq!(view.class("h100").unwrap().published.largest_free_on_node, 8);
    assert_eq!(view.class("h100").unwrap().published.free_units, 9);
}

fn reason_of(view: &View, namespace: &str, claim: &str) -> String {
    view.claim(namespace, claim).and_then(|c| c.pending.clone()).map(|r| r.reason).unwrap_or_default()
}

fn pod_reason(view: &View, pod: &str) -> Option<Reason> {
    view.pod("tenant-a", pod).and_then(|p| p.waiting.clone())
}

fn claim_at(view: &mut View, claim: Claim, created: i64) {
    let mut claim = claim;
    claim.created = at(created);
    view.upsert_claim(claim);
}

#[test]
fn held_claims_are_bound_best_fit_first_come_first_served() {
    let mut view = world();
    claim_at(&mut view, held_claim("tenant-a", "second", "h100", 4), 2);
    claim_at(&mut view, held_claim("tenant-a", "first", "h100", 4), 1);
    claim_at(&mut view, held_claim("tenant-a", "third", "h100", 1), 3);
    let passes = settle(&mut view, at(5));
    assert_eq!(passes.len(), 1);
    // "first" takes the 4-unit node exactly (best fit), "second" then fits only gpu-1.
    assert_eq!(view.claim("tenant-a", "first").unwrap().node.as_deref(), Some("gpu-2"));
    assert_eq!(view.claim("tenant-a", "second").unwrap().node.as_deref(), Some("gpu-1"));
    // The budget of 8 is spent: the third waits with the reason, not the capacity.
    assert_eq!(view.claim("tenant-a", "third").unwrap().phase, ClaimPhase::Pending);
    assert_eq!(reason_of(&view, "tenant-a", "third"), "BudgetExceeded");
    assert_eq!(
        view.claim("tenant-a", "third").unwrap().pending.as_ref().unwrap().message,
        r#"1 more units of GPU class "h100" would exceed the namespace's budget of 8"#
    );
    assert_eq!(
        view.class("h100").unwrap().published,
        Published { allocatable_units: 12, free_units: 4, largest_free_on_node: 4, fragmented_units: 0 }
    );
}

#[test]
fn a_held_claim_waits_with_its_reason() {
    let mut view = world();
    view.upsert_class(fixtures::class("a10", "nvidia.com/A10-12Q", GpuMode::Vgpu, 4, 0));
    let mut huge = fixtures::class("huge", H100, GpuMode::Passthrough, 16, 0);
    huge.name = "huge".into();
    view.upsert_class(huge);
    claim_at(&mut view, held_claim("tenant-a", "ghost", "l40", 1), 1);
    claim_at(&mut view, held_claim("tenant-a", "vgpu", "a10", 1), 2);
    claim_at(&mut view, held_claim("tenant-a", "nine", "huge", 9), 3);
    claim_at(&mut view, held_claim("tenant-b", "five", "h100", 5), 4);
    claim_at(&mut view, held_claim("tenant-b", "six", "h100", 5), 5);
    settle(&mut view, at(6));
    assert_eq!(reason_of(&view, "tenant-a", "ghost"), "ClassMissing");
    assert_eq!(reason_of(&view, "tenant-a", "vgpu"), "NotEntitled");
    assert_eq!(
        view.claim("tenant-a", "vgpu").unwrap().pending.as_ref().unwrap().message,
        r#"GPU class "a10" is a vGPU class and this namespace is not entitled to vGPUs (label gpu.cozystack.io/vgpu-entitled)"#,
        "the order webhook's words"
    );
    assert_eq!(reason_of(&view, "tenant-a", "nine"), "NeverFits");
    assert_eq!(view.claim("tenant-b", "five").unwrap().node.as_deref(), Some("gpu-1"));
    // 3 free on gpu-1 and 4 on gpu-2: the units are there in total, on no one node.
    assert_eq!(reason_of(&view, "tenant-b", "six"), "Fragmented");
    let six = view.claim("tenant-b", "six").unwrap().pending.clone().unwrap();
    assert_eq!(
        six.message,
        r#"5 units of GPU class "h100" wait for one node to have them: 7 units are free in total, at most 4 on one node"#
    );
}

#[test]
fn a_set_with_a_bound_held_claim_goes_to_its_node_or_says_why_not() {
    let mut view = world();
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "train-a", "h100", 2), "gpu-2"), 0);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"claim":"train-a","class":"h100","count":2},{"template":0,"class":"h100","count":3}]"#;
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 5, at(1)));
    settle(&mut view, at(2));
    // gpu-2 has 4 units: 2 held + 3 more do not fit there, though gpu-1 has 8 free.
    let waiting = pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap();
    assert_eq!(waiting.reason, "NodeUnfit");
    assert_eq!(
        waiting.message,
        r#"node "gpu-2" holds the claims but cannot take the pod: fewer than the 3 units of h100 it needs are free"#
    );
    assert_eq!(reason_of(&view, "tenant-a", "vm-1-gpu-0"), "NodeUnfit", "the template claim waits with the pod");
}

#[test]
fn the_whole_set_lands_on_the_node_of_its_held_claim() {
    let mut view = world();
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1"), 0);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"claim":"train-a","uid":"uid-tenant-a-train-a","class":"h100","count":1},{"template":0,"class":"h100","count":2}]"#;
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 3, at(1)));
    let passes = settle(&mut view, at(2));
    assert_eq!(passes.len(), 1);
    for claim in ["train-a", "vm-1-gpu-0"] {
        let claim = view.claim("tenant-a", claim).unwrap();
        assert_eq!((claim.phase, claim.node.as_deref()), (ClaimPhase::Attached, Some("gpu-1")));
        assert_eq!(claim.attached_to.as_ref().unwrap().uid, "uid-vmi-vm-1");
    }
    assert_eq!(view.open_usages().count(), 2);
}

#[test]
fn held_claims_on_two_nodes_keep_the_pod_waiting() {
    let mut view = world();
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "a", "h100", 1), "gpu-1"), 0);
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "b", "h100", 1), "gpu-2"), 0);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"claim":"a","class":"h100","count":1},{"claim":"b","class":"h100","count":1}]"#;
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 2, at(1)));
    settle(&mut view, at(2));
    assert_eq!(pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap().reason, "HeldClaimsOnDifferentNodes");
}

#[test]
fn waiting_pods_are_served_first_come_first_served() {
    let mut view = world();
    view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 100)].into());
    for (vm, created) in [("vm-b", 1), ("vm-a", 2)] {
        view.upsert_vmi(vmi("tenant-a", vm, VmiPhase::Scheduling, None));
        let attachments = r#"[{"template":0,"class":"h100","count":8}]"#;
        view.upsert_pod(gated_launcher("tenant-a", vm, attachments, H100, 8, at(created)));
    }
    settle(&mut view, at(3));
    assert_eq!(view.claim("tenant-a", "vm-b-gpu-0").unwrap().node.as_deref(), Some("gpu-1"), "the older pod wins");
    let waiting = pod_reason(&view, "virt-launcher-vm-a-abcde").unwrap();
    assert_eq!(
        (waiting.reason.as_str(), waiting.message.as_str()),
        ("NoCapacity", "waiting for capacity: no node has 8 × h100 free with room for the pod")
    );
}

#[test]
fn a_template_set_over_budget_waits_and_its_claims_wait_with_it() {
    let mut view = world();
    view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 2)].into());
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":3}]"#, H100, 3, at(1)));
    settle(&mut view, at(2));
    assert_eq!(pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap().reason, "BudgetExceeded");
    let claim = view.claim("tenant-a", "vm-1-gpu-0").unwrap();
    assert_eq!((claim.phase, claim.template), (ClaimPhase::Pending, true));
    assert_eq!(claim.owner_vmi.as_ref().unwrap().uid, "uid-vmi-vm-1");
    // Budget raised: the next pass places it.
    view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 3)].into());
    settle(&mut view, at(3));
    assert_eq!(view.claim("tenant-a", "vm-1-gpu-0").unwrap().phase, ClaimPhase::Attached);
}

#[test]
fn cpu_and_taints_are_checked_like_the_scheduler() {
    let mut view = world();
    let mut small = gpu_node("gpu-0", H100, 4);
    small.cpu_millis = 2_000; // the launcher asks for 4 CPUs
    view.upsert_node(small);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let mut pod = gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":4}]"#, H100, 4, at(1));
    std::sync::Arc::make_mut(&mut pod.tolerations).clear(); // without the class toleration, no GPU node takes it
    view.upsert_pod(pod.clone());
    let passes = settle(&mut view, at(2));
    let waiting = pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap();
    assert_eq!(waiting.reason, "NoCapacity");
    let event = passes[0].iter().find_map(|a| match a {
        Action::Event { reason: "Waiting", message, .. } => Some(message.clone()),
        _ => None,
    });
    assert!(event.unwrap().contains(&format!("taint {H100}:NoSchedule is not tolerated")));
    std::sync::Arc::make_mut(&mut pod.tolerations).push(fixtures::gpu_toleration(H100));
    pod.resource_version = view.pod("tenant-a", &pod.name).unwrap().resource_version.clone();
    view.upsert_pod(pod);
    settle(&mut view, at(3));
    // gpu-0 is the best fit by units but has too little CPU; gpu-2 is next.
    assert_eq!(view.claim("tenant-a", "vm-1-gpu-0").unwrap().node.as_deref(), Some("gpu-2"));
}

#[test]
fn the_pin_is_appended_to_kubevirts_existing_term() {
    let mut view = world();
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(1)));
    let actions = reconcile(&view, at(2));
    let Some(Action::PinAndUngate { terms, node, .. }) =
        actions.iter().find(|a| matches!(a, Action::PinAndUngate { .. }))
    else {
        panic!("no pin in {actions:#?}")
    };
    assert_eq!(node, "gpu-2");
    assert_eq!(terms.len(), 1, "a second term would be refused while gated");
    let expressions = terms[0].match_expressions.as_ref().unwrap();
    assert_eq!(expressions[0].key, "node-labeller.kubevirt.io/obsolete-host-model");
    let fields = terms[0].match_fields.as_ref().unwrap();
    assert_eq!(
        (fields[0].key.as_str(), fields[0].values.as_deref()),
        ("metadata.name", Some(&["gpu-2".to_owned()][..]))
    );
    // Claims are written before the pod: a pod is never pinned to a node its claims do not hold.
    let claim_write = actions.iter().position(|a| matches!(a, Action::CreateClaim { .. })).unwrap();
    let pin = actions.iter().position(|a| matches!(a, Action::PinAndUngate { .. })).unwrap();
    assert!(claim_write < pin);
}

/// A run placed on gpu-1 with a held claim and a template claim, its launcher bound and running there.
fn running_world() -> View {
    let mut view = world();
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1"), 0);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"claim":"train-a","class":"h100","count":1},{"template":0,"class":"h100","count":2}]"#;
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 3, at(1)));
    settle(&mut view, at(2));
    let mut pod = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap().clone();
    pod.node_name = Some("gpu-1".into());
    pod.phase = crate::model::PodPhase::Running;
    view.upsert_pod(pod);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Running, Some("gpu-1")));
    assert!(settle(&mut view, at(3)).is_empty(), "a running launcher changes nothing: its devices are its claims'");
    view
}

#[test]
fn an_ended_run_gives_back_its_claims_and_closes_its_records() {
    let mut view = running_world();
    assert_eq!(view.class("h100").unwrap().published.free_units, 9);
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Succeeded, Some("gpu-1")));
    let mut launcher = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap().clone();
    launcher.phase = crate::model::PodPhase::Succeeded;
    view.upsert_pod(launcher);
    let passes = settle(&mut view, at(100));
    assert_eq!(passes.len(), 1, "{passes:#?}");
    assert!(view.claim("tenant-a", "vm-1-gpu-0").is_none(), "the template claim went");
    let held = view.claim("tenant-a", "train-a").unwrap();
    assert_eq!((held.phase, held.node.as_deref(), held.attached_to.clone()), (ClaimPhase::Bound, Some("gpu-1"), None));
    assert_eq!(view.open_usages().count(), 0);
    let ended: Vec<_> = view.usages().filter(|u| u.claim == "train-a").map(|u| (u.start, u.end)).collect();
    assert_eq!(ended, [(at(2), Some(at(100)))]);
    // The held unit stays reserved; the template's two come back.
    assert_eq!(view.class("h100").unwrap().published.free_units, 11);
}

#[test]
fn deleting_an_attached_claim_waits_for_its_run() {
    let mut view = running_world();
    let mut held = view.claim("tenant-a", "train-a").unwrap().clone();
    held.deleting = true;
    view.upsert_claim(held);
    assert!(settle(&mut view, at(10)).is_empty(), "the finalizer holds while the run does");
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Failed, Some("gpu-1")));
    settle(&mut view, at(20));
    assert!(view.claim("tenant-a", "train-a").is_none(), "the finalizer let go once the run ended");
}

#[test]
fn claims_follow_a_completed_migration() {
    let mut view = running_world();
    // The migration target ran on gpu-2 (not gated: KubeVirt deletes targets that stay pending).
    let mut target = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap().clone();
    target.name = "virt-launcher-vm-1-target".into();
    std::sync::Arc::make_mut(&mut target.labels)
        .insert(crate::keys::kubevirt::LABEL_MIGRATION_JOB_UID.into(), "uid-migration".into());
    target.node_name = Some("gpu-2".into());
    target.required_terms = None;
    view.upsert_pod(target);
    assert_eq!(view.capacity().free("h100", "gpu-2"), Some(1), "the target's devices count until the claims follow");
    settle(&mut view, at(50));
    assert_eq!(view.claim("tenant-a", "train-a").unwrap().node.as_deref(), Some("gpu-1"), "no move before completion");
    assert_eq!(view.class("h100").unwrap().published.free_units, 6, "the target's devices are published as taken");
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Running, Some("gpu-2")));
    let passes = settle(&mut view, at(60));
    assert_eq!(passes.len(), 1, "{passes:#?}");
    for claim in ["train-a", "vm-1-gpu-0"] {
        assert_eq!(view.claim("tenant-a", claim).unwrap().node.as_deref(), Some("gpu-2"));
    }
    let open: Vec<_> = view.open_usages().map(|u| (u.claim.clone(), u.node.clone(), u.start)).collect();
    assert_eq!(open, [("train-a".into(), "gpu-2".into(), at(60)), ("vm-1-gpu-0".into(), "gpu-2".into(), at(60))]);
    // The source launcher still holds its devices until it exits.
    assert_eq!(view.capacity().free("h100", "gpu-1"), Some(5));
    assert_eq!(view.capacity().free("h100", "gpu-2"), Some(1));
}

#[test]
fn an_unattached_claim_on_a_lost_node_is_rebound() {
    let mut view = world();
    claim_at(&mut view, fixtures::bound(held_claim("tenant-a", "train-a", "h100", 2), "gpu-2"), 0);
    view.remove_node("gpu-2");
    settle(&mut view, at(1));
    assert_eq!(view.claim("tenant-a", "train-a").unwrap().node.as_deref(), Some("gpu-1"));
    let mut not_ready = gpu_node("gpu-2", H100, 4);
    not_ready.ready = false;
    view.upsert_node(not_ready);
    let mut gpu1 = view.node("gpu-1").unwrap().clone();
    gpu1.ready = false;
    view.upsert_node(gpu1);
    settle(&mut view, at(2));
    let claim = view.claim("tenant-a", "train-a").unwrap();
    assert_eq!((claim.phase, claim.node.clone()), (ClaimPhase::Pending, None), "nowhere to go: it waits");
    assert_eq!(reason_of(&view, "tenant-a", "train-a"), "NoCapacity");
}

#[test]
fn devices_of_pods_outside_claims_are_taken() {
    let mut view = world();
    let mut raw = fixtures::gated_launcher("tenant-a", "raw", "[]", H100, 3, at(0));
    std::sync::Arc::make_mut(&mut raw.labels).remove(crate::keys::LABEL_CLAIMS);
    raw.scheduling_gates.clear();
    raw.node_name = Some("gpu-1".into());
    raw.phase = crate::model::PodPhase::Running;
    view.upsert_pod(raw);
    settle(&mut view, at(1));
    assert_eq!(
        view.class("h100").unwrap().published,
        Published { allocatable_units: 12, free_units: 9, largest_free_on_node: 5, fragmented_units: 0 }
    );
}

#[test]
fn a_template_claim_of_a_run_that_ended_before_placement_goes() {
    let mut view = world();
    view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 0)].into());
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(1)));
    settle(&mut view, at(2));
    assert!(view.claim("tenant-a", "vm-1-gpu-0").is_some());
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Failed, None));
    settle(&mut view, at(3));
    assert!(view.claim("tenant-a", "vm-1-gpu-0").is_none());
}

#[test]
fn every_claim_gets_the_release_finalizer() {
    let mut view = world();
    let mut claim = fixtures::bound(held_claim("tenant-a", "train-a", "h100", 1), "gpu-1");
    claim.finalizer = false;
    view.upsert_claim(claim);
    let actions = reconcile(&view, at(1));
    assert!(matches!(&actions[0], Action::UpdateClaim { finalizer: Some(true), status: None, .. }), "{actions:#?}");
}

#[test]
fn a_pod_whose_run_is_gone_says_so() {
    let mut view = world();
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(1)));
    settle(&mut view, at(2));
    assert_eq!(pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap().reason, "VMIMissing");
}

#[test]
fn a_pod_without_attachments_waits_with_the_pod_webhooks_word() {
    let mut view = world();
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let mut pod = gated_launcher("tenant-a", "vm-1", "[]", H100, 1, at(1));
    view.upsert_pod(pod.clone());
    settle(&mut view, at(2));
    assert_eq!(pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap().reason, "NoClaims");
    std::sync::Arc::make_mut(&mut pod.annotations).remove(crate::keys::ANNOTATION_ATTACHMENTS);
    view.upsert_pod(pod);
    settle(&mut view, at(3));
    assert_eq!(pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap().reason, "MissingAttachments");
}

#[test]
fn a_stored_pod_carries_what_its_attachments_read_as_and_a_changed_annotation_is_read_again() {
    let mut view = world();
    let mut pod = gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(1));
    pod.attachments_read = Default::default();
    view.upsert_pod(pod.clone());
    let stored = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap();
    assert!(matches!(stored.attachments(), Some(Ok(std::borrow::Cow::Borrowed(_)))), "read once, when stored");
    let forged = r#"[{"template":0,"class":"h100","count":8}]"#;
    std::sync::Arc::make_mut(&mut pod.annotations).insert(crate::keys::ANNOTATION_ATTACHMENTS.into(), forged.into());
    view.upsert_pod(pod);
    let stored = view.pod("tenant-a", "virt-launcher-vm-1-abcde").unwrap();
    assert_eq!(stored.attachments_read.kept().map(|read| read.text()), Some(forged));
    assert_eq!(stored.attachments().unwrap().unwrap()[0].count, 8);
}

#[test]
fn the_volume_binder_and_the_launcher_of_one_run_share_one_set() {
    let mut view = world();
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"template":0,"class":"h100","count":3}]"#;
    let mut binder = gated_launcher("tenant-a", "vm-1", attachments, H100, 3, at(1));
    binder.name = "virt-launcher-vm-1-binder".into();
    std::sync::Arc::make_mut(&mut binder.labels).remove(crate::keys::kubevirt::LABEL_APP);
    std::sync::Arc::make_mut(&mut binder.annotations)
        .insert(crate::keys::kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING.into(), "true".into());
    view.upsert_pod(binder);
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 3, at(2)));
    let passes = settle(&mut view, at(3));
    assert_eq!(passes.len(), 1);
    let creates = passes[0].iter().filter(|a| matches!(a, Action::CreateClaim { .. })).count();
    assert_eq!(creates, 1, "the template claim is ordered once");
    let pins: Vec<&str> = passes[0]
        .iter()
        .filter_map(|a| match a {
            Action::PinAndUngate { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(pins, ["gpu-2", "gpu-2"], "both pods go where the volume and the claims are");
    assert_eq!(view.class("h100").unwrap().published.free_units, 9, "three units taken, once");
}

#[test]
fn a_set_that_can_never_fit_says_so() {
    let mut view = world();
    view.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 100)].into());
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    let attachments = r#"[{"template":0,"class":"h100","count":8},{"template":1,"class":"h100","count":2}]"#;
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", attachments, H100, 10, at(1)));
    settle(&mut view, at(2));
    let waiting = pod_reason(&view, "virt-launcher-vm-1-abcde").unwrap();
    assert_eq!(waiting.reason, "NeverFits");
    assert_eq!(waiting.message, r#"10 units of GPU class "h100" can never fit: no node has more than 8"#);
}

#[test]
fn the_two_update_variant_removes_the_gate_and_writes_the_pin_apart() {
    let mut view = world();
    view.upsert_vmi(vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-1", r#"[{"template":0,"class":"h100","count":1}]"#, H100, 1, at(1)));
    let variant = crate::variant::Variant::named("two-update-pin").unwrap();
    let actions = reconcile_with(&view, at(2), &variant);
    assert!(!actions.iter().any(|a| matches!(a, Action::PinAndUngate { .. })), "{actions:#?}");
    let ungate = actions.iter().position(|a| matches!(a, Action::Ungate { .. })).expect("an ungate");
    let pin = actions.iter().position(|a| matches!(a, Action::Pin { .. })).expect("a pin");
    assert_eq!(pin, ungate + 1, "the pin is the update right after the gate's removal");
    let shipped = reconcile(&view, at(2));
    let Some(Action::PinAndUngate { terms, node, .. }) =
        shipped.iter().find(|a| matches!(a, Action::PinAndUngate { .. }))
    else {
        panic!("no pin in {shipped:#?}")
    };
    assert!(
        matches!(&actions[pin], Action::Pin { terms: t, node: n, .. } if t == terms && n == node),
        "the same pin, written apart"
    );
}

/// gpu-1 with four runs of two template units each (8 of its 8), then one device failed (7 left): overbooked.
fn overbooked_gpu_1() -> View {
    let mut view = world();
    view.upsert_quota("tenant-a", "gpu-budget", std::collections::BTreeMap::from([("h100".to_owned(), 100)]));
    for vm in ["vm-a", "vm-b", "vm-c", "vm-d"] {
        view.upsert_vmi(vmi("tenant-a", vm, VmiPhase::Running, Some("gpu-1")));
        let mut claim = fixtures::attached(held_claim("tenant-a", &format!("{vm}-gpu-0"), "h100", 2), "gpu-1", vm);
        claim.template = true;
        claim.owner_vmi = claim.attached_to.clone();
        view.upsert_claim(claim);
    }
    let mut node = view.node("gpu-1").unwrap().clone();
    node.devices.insert(H100.to_owned(), 7);
    view.upsert_node(node);
    view
}

#[test]
fn units_freed_on_a_node_overbooked_by_a_device_failure_pay_its_debt_first() {
    // gpu-1 overbooked (8 units of claims on 7 devices); then a run of 2 ends.
    let mut view = overbooked_gpu_1();
    view.upsert_vmi(vmi("tenant-a", "vm-d", VmiPhase::Succeeded, Some("gpu-1")));
    view.upsert_vmi(vmi("tenant-a", "vm-e", VmiPhase::Scheduling, None));
    view.upsert_pod(gated_launcher("tenant-a", "vm-e", r#"[{"template":0,"class":"h100","count":2}]"#, H100, 2, at(1)));
    let actions = reconcile(&view, at(2));
    let pinned = actions.iter().find_map(|a| match a {
        Action::PinAndUngate { node, .. } => Some(node.as_str()),
        _ => None,
    });
    // 7 allocatable, 6 still held after the release: 1 free on gpu-1, so the pair goes elsewhere.
    assert_eq!(pinned, Some("gpu-2"), "{actions:#?}");
}

#[test]
fn a_class_publishes_units_freed_on_an_overbooked_node_as_the_next_pass_will_read_them() {
    // gpu-1 overbooked (8 units of claims on 7 devices); then a run of 2 ends. The release pays the node's debt
    // first: 1 unit free there, 4 on gpu-2.
    let mut view = overbooked_gpu_1();
    settle(&mut view, at(1));
    assert_eq!(view.class("h100").unwrap().published.free_units, 4, "gpu-1 overbooked: nothing free there");
    view.upsert_vmi(vmi("tenant-a", "vm-d", VmiPhase::Succeeded, Some("gpu-1")));
    let passes = settle(&mut view, at(2));
    // One pass: what it publishes is what the index shows once its writes are in (a second pass publishing a
    // correction is the echo the twin's controller would otherwise need).
    assert_eq!(passes.len(), 1, "{passes:#?}");
    let published = passes[0].iter().find_map(|a| match a {
        Action::PublishClass { published, .. } => Some(*published),
        _ => None,
    });
    assert_eq!(published.map(|p| (p.free_units, p.largest_free_on_node)), Some((5, 4)), "{passes:#?}");
    assert_eq!(view.capacity().free("h100", "gpu-1"), Some(1));
}

#[test]
fn a_vmi_change_matters_only_where_a_pass_reads_it() {
    let pending = vmi("tenant-a", "vm-1", VmiPhase::Pending, None);
    let scheduling = vmi("tenant-a", "vm-1", VmiPhase::Scheduling, None);
    let scheduled = vmi("tenant-a", "vm-1", VmiPhase::Scheduled, Some("gpu-1"));
    let running = vmi("tenant-a", "vm-1", VmiPhase::Running, Some("gpu-1"));
    assert!(vmi_change_matters(None, &pending), "a new run");
    assert!(!vmi_change_matters(Some(&pending), &scheduling), "on its way to Running");
    assert!(!vmi_change_matters(Some(&scheduling), &scheduled), "scheduled: its node is not read until it runs");
    assert!(vmi_change_matters(Some(&scheduled), &running), "running on a node: claims follow it there");
    let mut migrated = running.clone();
    migrated.node_name = Some("gpu-2".into());
    assert!(vmi_change_matters(Some(&running), &migrated), "a completed migration moves it");
    let mut relabelled = running.clone();
    std::sync::Arc::make_mut(&mut relabelled.labels).insert("example.com/team".into(), "ml".into());
    relabelled.resource_version = "99".into();
    assert!(!vmi_change_matters(Some(&running), &relabelled), "labels and revisions are not read");
    for ended in [VmiPhase::Succeeded, VmiPhase::Failed] {
        assert!(vmi_change_matters(Some(&running), &vmi("tenant-a", "vm-1", ended, Some("gpu-1"))), "{ended:?}");
        assert!(vmi_change_matters(Some(&scheduling), &vmi("tenant-a", "vm-1", ended, None)), "{ended:?}");
    }
    let mut another_run = scheduling.clone();
    another_run.uid = "uid-another-run".into();
    assert!(vmi_change_matters(Some(&scheduling), &another_run), "a new run under the same name");
}

/// One remembering pass, checked against the full scan, its writes applied and landed.
fn remembering_pass(view: &mut View, waiting: &mut Waiting, now: Time) -> Vec<Action> {
    let actions = reconcile_remembering(view, now, None, &Variant::SHIPPED, waiting);
    assert_eq!(actions, reconcile(view, now), "skipping remembered waiters changes nothing");
    apply(view, &actions, now).expect("the pass's own writes apply");
    waiting.landed();
    actions
}

#[test]
fn a_waiter_for_capacity_is_skipped_until_something_loosens() {
    let mut view = world();
    let launcher = |vm: &str, count: u32, created: i64| {
        let json = format!(r#"[{{"template":0,"class":"h100","count":{count}}}]"#);
        gated_launcher("tenant-b", vm, &json, H100, u64::from(count), at(created))
    };
    for (vm, count, created) in [("vm-1", 8, 0), ("vm-2", 4, 1), ("vm-3", 4, 2)] {
        view.upsert_vmi(vmi("tenant-b", vm, VmiPhase::Scheduling, None));
        view.upsert_pod(launcher(vm, count, created));
    }
    let mut waiting = Waiting::default();
    // The first pass places two and records why the third waits; the next finds it waiting as recorded.
    remembering_pass(&mut view, &mut waiting, at(1));
    assert_eq!(pod_reason_in(&view, "tenant-b", "virt-launcher-vm-3-abcde").as_deref(), Some("NoCapacity"));
    assert_eq!(waiting.remembered(), 0, "its reason was written by that pass: not yet as recorded");
    assert!(remembering_pass(&mut view, &mut waiting, at(2)).iter().all(|a| matches!(a, Action::Event { .. })));
    assert_eq!(waiting.remembered(), 1);
    // A new waiter takes nothing from it: the remembered one is skipped, and stays remembered.
    view.upsert_vmi(vmi("tenant-b", "vm-4", VmiPhase::Scheduling, None));
    view.upsert_pod(launcher("vm-4", 2, 3));
    let generation = view.generation();
    remembering_pass(&mut view, &mut waiting, at(3));
    let changes: Vec<&Change> = view.changes_since(generation).expect("journaled").collect();
    assert!(changes.iter().all(|c| matches!(c, Change::Waiter(..))), "only taken, waiters stored: {changes:?}");
    assert_eq!(waiting.remembered(), 1);
    assert_eq!(waiting.visited(), 1, "the new waiter only");
    // vm-1's run ends: its units come free, the generation moves and the pass places the waiter.
    let pod = view.pod("tenant-b", "virt-launcher-vm-1-abcde").unwrap().clone();
    view.upsert_pod(crate::model::Pod { phase: crate::model::PodPhase::Succeeded, ..pod });
    view.upsert_vmi(vmi("tenant-b", "vm-1", VmiPhase::Succeeded, None));
    assert_ne!(view.generation(), generation);
    let actions = remembering_pass(&mut view, &mut waiting, at(4));
    let placed = |name: &str| actions.iter().any(|a| matches!(a, Action::PinAndUngate { pod, .. } if pod.name == name));
    assert!(placed("virt-launcher-vm-3-abcde"), "{actions:#?}");
}

fn pod_reason_in(view: &View, namespace: &str, pod: &str) -> Option<String> {
    view.pod(namespace, pod).and_then(|p| p.waiting.as_ref()).map(|r| r.reason.clone())
}
