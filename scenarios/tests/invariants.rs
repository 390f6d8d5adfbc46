//! Each invariant the checked runs hold, broken on purpose: the check names it, with the exact detail.

use gpuclaim_engine::controller::runtime::ObjectKey;
use gpuclaim_engine::fixtures::{attached, bound, gated_launcher, held_claim, two_node_cluster};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Pod, PodPhase, Time, View};
use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::{Invariant, Invariants, REACTION_TIME_DEFAULT, Violation};
use gpuclaim_sim::apiserver::{ApiServer, Kind};
use gpuclaim_sim::kernel::Millis;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};

const RESOURCE: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const EPOCH_MS: i64 = 1_800_000_000_000;

fn time(at: Millis) -> Time {
    Time::from_millisecond(EPOCH_MS + at.0 as i64).unwrap()
}

fn key(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey { kind, namespace: namespace.into(), name: name.into() }
}

fn claim_key(name: &str) -> ObjectKey {
    key(Kind::Claim, "tenant-a", name)
}

/// Checks `touched` as the API server's journal hands it over (the checks read keys only: any revision will do).
fn check(invariants: &mut Invariants, view: &View, touched: Vec<ObjectKey>, at: Millis) -> Result<(), Violation> {
    invariants.check(view, touched.into_iter().map(|key| (key, 0)).collect(), at, time(at), true)
}

fn broken(result: Result<(), Violation>) -> (Invariant, String) {
    let violation = result.expect_err("the invariant must break");
    (violation.invariant, violation.detail)
}

fn pinned(mut pod: Pod, node: &str) -> Pod {
    pod.scheduling_gates.retain(|gate| gate != keys::GATE_PLACEMENT);
    pod.required_terms = Some(
        vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec![node.to_owned()]),
            }]),
            ..NodeSelectorTerm::default()
        }]
        .into(),
    );
    pod
}

fn template_launcher(vmi: &str, units: u64) -> Pod {
    let attachments = format!(r#"[{{"template":0,"class":"h100","count":{units}}}]"#);
    gated_launcher("tenant-a", vmi, &attachments, RESOURCE, units, time(Millis::ZERO))
}

fn held_launcher(vmi: &str, claim: &str, units: u64) -> Pod {
    let attachments = format!(r#"[{{"claim":"{claim}","uid":"uid-tenant-a-{claim}","class":"h100","count":{units}}}]"#);
    gated_launcher("tenant-a", vmi, &attachments, RESOURCE, units, time(Millis::ZERO))
}

#[test]
fn claims_booked_past_a_nodes_devices_break_device_double_booked() {
    let mut view = two_node_cluster();
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(bound(held_claim("tenant-a", "a", "h100", 3), "gpu-2"));
    assert_eq!(check(&mut invariants, &view, vec![claim_key("a")], Millis(1)), Ok(()));
    view.upsert_claim(bound(held_claim("tenant-a", "b", "h100", 2), "gpu-2"));
    assert_eq!(
        broken(check(&mut invariants, &view, vec![claim_key("b")], Millis(2))),
        (
            Invariant::DeviceDoubleBooked,
            format!(
                "GPUClaim tenant-a/b bound to node gpu-2: claims there hold 5 units of {RESOURCE}, the node has 4 \
                 (claims there: tenant-a/a (3), tenant-a/b (2))"
            )
        )
    );
}

#[test]
fn a_release_and_a_bind_in_one_event_are_one_step() {
    let mut view = two_node_cluster();
    view.upsert_claim(bound(held_claim("tenant-a", "z-old", "h100", 4), "gpu-2"));
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.remove_claim("tenant-a", "z-old");
    view.upsert_claim(bound(held_claim("tenant-a", "a-new", "h100", 4), "gpu-2"));
    // Keys come in name order: the bind is seen before the release, and still judged after it.
    assert_eq!(check(&mut invariants, &view, vec![claim_key("a-new"), claim_key("z-old")], Millis(1)), Ok(()));
}

#[test]
fn units_bound_past_the_budget_break_budget_exceeded() {
    let mut view = two_node_cluster();
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(bound(held_claim("tenant-a", "a", "h100", 6), "gpu-1"));
    view.upsert_claim(bound(held_claim("tenant-a", "b", "h100", 4), "gpu-2"));
    assert_eq!(
        broken(check(&mut invariants, &view, vec![claim_key("a"), claim_key("b")], Millis(1))),
        (
            Invariant::BudgetExceeded,
            "GPUClaim tenant-a/a bound: namespace tenant-a holds 10 units of class h100, its budget is 8".to_owned()
        )
    );
}

#[test]
fn a_gate_removed_without_a_pin_breaks_ungated_without_pin() {
    let mut view = two_node_cluster();
    let pod = template_launcher("train", 2);
    let name = pod.name.clone();
    view.upsert_pod(pod.clone());
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    let mut ungated = pod;
    ungated.scheduling_gates.clear();
    view.upsert_pod(ungated);
    assert_eq!(
        broken(check(&mut invariants, &view, vec![key(Kind::Pod, "tenant-a", &name)], Millis(1))),
        (Invariant::UngatedWithoutPin, format!("Pod tenant-a/{name} left the gate without a pin to one node"))
    );
}

#[test]
fn a_pin_away_from_the_claims_breaks_set_split() {
    let mut view = two_node_cluster();
    let pod = template_launcher("train", 2);
    let name = pod.name.clone();
    view.upsert_pod(pod.clone());
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(attached(held_claim("tenant-a", "train-gpu-0", "h100", 2), "gpu-1", "train"));
    view.upsert_pod(pinned(pod.clone(), "gpu-1"));
    let touched = vec![claim_key("train-gpu-0"), key(Kind::Pod, "tenant-a", &name)];
    assert_eq!(check(&mut invariants, &view, touched, Millis(1)), Ok(()), "pinned where its claim is: fine");

    let mut view = two_node_cluster();
    view.upsert_pod(pod.clone());
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(attached(held_claim("tenant-a", "train-gpu-0", "h100", 2), "gpu-1", "train"));
    view.upsert_pod(pinned(pod, "gpu-2"));
    let touched = vec![claim_key("train-gpu-0"), key(Kind::Pod, "tenant-a", &name)];
    assert_eq!(
        broken(check(&mut invariants, &view, touched, Millis(1))),
        (
            Invariant::SetSplit,
            format!("Pod tenant-a/{name} placed on node gpu-2, but its GPUClaim train-gpu-0 is bound to node gpu-1")
        )
    );
}

#[test]
fn two_runs_holding_one_held_claim_break_claim_attached_twice() {
    let mut view = two_node_cluster();
    view.upsert_claim(attached(held_claim("tenant-a", "shared", "h100", 2), "gpu-1", "first"));
    let first = held_launcher("first", "shared", 2);
    let second = held_launcher("second", "shared", 2);
    let (first_name, second_name) = (first.name.clone(), second.name.clone());
    view.upsert_pod(first.clone());
    view.upsert_pod(second.clone());
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_pod(pinned(first, "gpu-1"));
    assert_eq!(check(&mut invariants, &view, vec![key(Kind::Pod, "tenant-a", &first_name)], Millis(1)), Ok(()));
    view.upsert_pod(pinned(second, "gpu-1"));
    assert_eq!(
        broken(check(&mut invariants, &view, vec![key(Kind::Pod, "tenant-a", &second_name)], Millis(2))),
        (
            Invariant::ClaimAttachedTwice,
            "GPUClaim tenant-a/shared is held by VMIs uid-vmi-first and uid-vmi-second at once".to_owned()
        )
    );
}

#[test]
fn an_attachment_without_its_usage_record_breaks_usage_record_mismatch_after_the_reaction_time() {
    let mut view = two_node_cluster();
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(attached(held_claim("tenant-a", "a", "h100", 1), "gpu-1", "train"));
    assert_eq!(check(&mut invariants, &view, vec![claim_key("a")], Millis(1_000)), Ok(()), "the controller may lag");
    assert_eq!(check(&mut invariants, &view, Vec::new(), Millis(61_000)), Ok(()), "exactly the reaction time");
    assert_eq!(
        broken(check(&mut invariants, &view, Vec::new(), Millis(61_001))),
        (
            Invariant::UsageRecordMismatch,
            "GPUClaim tenant-a/a: attached to VMI train with 0 open usage records since 1.000s".to_owned()
        )
    );
}

#[test]
fn a_pod_left_at_the_gate_while_its_set_fits_breaks_waiting_while_fits() {
    let mut view = two_node_cluster();
    let pod = template_launcher("train", 2);
    let name = pod.name.clone();
    view.upsert_pod(pod);
    view.upsert_vmi(gpuclaim_engine::fixtures::vmi("tenant-a", "train", Default::default(), None));
    // As a checked twin run holds it: the API server's store, which keeps objects only unless the checks ask it to
    // keep the placement index the sample runs the engine on.
    let mut api = ApiServer::new(view, 0);
    api.keep_placement_index();
    let view = api.store();
    let mut invariants = Invariants::new(view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    let mut outcome = Ok(());
    // Sampled every quarter of the reaction time; the pod is old enough once the reaction time has passed.
    for second in (0..=150).step_by(5) {
        outcome = check(&mut invariants, view, Vec::new(), Millis::seconds(second));
        if outcome.is_err() {
            break;
        }
    }
    let (invariant, detail) = broken(outcome);
    assert_eq!(invariant, Invariant::WaitingWhileFits);
    assert!(
        detail.starts_with(&format!("Pod tenant-a/{name} has waited at the gate since ")) && detail.ends_with("gpu-2"),
        "{detail}"
    );

    // Without a leader nothing reconciles: no liveness failure however long it waits.
    let mut invariants = Invariants::new(view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    for second in (0..=600).step_by(5) {
        let at = Millis::seconds(second);
        assert_eq!(invariants.check(view, Vec::new(), at, time(at), false), Ok(()));
    }
}

/// Samples liveness every five seconds from `from` to `to` (seconds), `touched` handed in at the first: the first
/// violation, with the second it came at.
fn sample_from(
    invariants: &mut Invariants,
    view: &View,
    touched: Vec<ObjectKey>,
    from: u64,
    to: u64,
) -> Result<(), (u64, Violation)> {
    let mut touched = Some(touched);
    for second in (from..=to).step_by(5) {
        let at = Millis::seconds(second);
        check(invariants, view, touched.take().unwrap_or_default(), at).map_err(|violation| (second, violation))?;
    }
    Ok(())
}

/// Where a sample found the pod waiting while it fits: the second, and the node it fits on.
fn waited_while_fitting(result: Result<(), (u64, Violation)>, pod: &str) -> (u64, String) {
    let (second, violation) = result.expect_err("the pod must be reported");
    assert_eq!(violation.invariant, Invariant::WaitingWhileFits, "{}", violation.detail);
    let prefix = format!("Pod tenant-a/{pod} has waited at the gate since ");
    assert!(violation.detail.starts_with(&prefix), "{}", violation.detail);
    let node = violation.detail.rsplit(' ').next().unwrap_or_default().to_owned();
    (second, node)
}

#[test]
fn a_pod_with_no_room_anywhere_is_not_reported_until_room_comes_free() {
    let mut view = two_node_cluster();
    view.upsert_claim(bound(held_claim("tenant-b", "fill-1", "h100", 8), "gpu-1"));
    view.upsert_claim(bound(held_claim("tenant-b", "fill-2", "h100", 4), "gpu-2"));
    let pod = template_launcher("train", 2);
    let name = pod.name.to_string();
    view.upsert_pod(pod);
    view.upsert_vmi(gpuclaim_engine::fixtures::vmi("tenant-a", "train", Default::default(), None));
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    assert_eq!(sample_from(&mut invariants, &view, Vec::new(), 0, 600), Ok(()), "no node has 2 units free");
    // Room comes free on gpu-2 at 605 s: from then on the pod fits, and waiting past the reaction time breaks.
    view.remove_claim("tenant-b", "fill-2");
    let touched = vec![key(Kind::Claim, "tenant-b", "fill-2")];
    let (second, node) = waited_while_fitting(sample_from(&mut invariants, &view, touched, 605, 900), &name);
    assert_eq!(node, "gpu-2");
    assert!(second > 605 + 60, "the clock starts when room comes free, not before: broke at {second} s");
}

#[test]
fn a_pod_whose_units_are_free_only_where_the_cpu_is_taken_is_not_reported_until_the_cpu_comes_free() {
    let mut view = two_node_cluster();
    view.upsert_claim(bound(held_claim("tenant-b", "fill-2", "h100", 4), "gpu-2"));
    // gpu-1 has its 8 units free, but a running pod takes all its 64 CPUs.
    let mut hog = template_launcher("hog", 0);
    hog.scheduling_gates.clear();
    hog.node_name = Some("gpu-1".into());
    hog.phase = PodPhase::Running;
    hog.cpu_millis = 64_000;
    let hog_name = hog.name.to_string();
    view.upsert_pod(hog.clone());
    let pod = template_launcher("train", 2);
    let name = pod.name.to_string();
    view.upsert_pod(pod);
    view.upsert_vmi(gpuclaim_engine::fixtures::vmi("tenant-a", "train", Default::default(), None));
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    assert_eq!(sample_from(&mut invariants, &view, Vec::new(), 0, 600), Ok(()), "no node has the units and the CPU");
    hog.phase = PodPhase::Succeeded;
    view.upsert_pod(hog);
    let touched = vec![key(Kind::Pod, "tenant-a", &hog_name)];
    let (second, node) = waited_while_fitting(sample_from(&mut invariants, &view, touched, 605, 900), &name);
    assert_eq!(node, "gpu-1");
    assert!(second > 605 + 60, "broke at {second} s");
}

#[test]
fn a_pod_whose_held_claim_is_bound_where_the_rest_fits_is_reported_on_a_full_cluster() {
    // Every unit is taken, one node's by the pod's own held claim: its set needs nothing more there.
    let mut view = two_node_cluster();
    view.upsert_claim(bound(held_claim("tenant-b", "fill-1", "h100", 8), "gpu-1"));
    view.upsert_claim(bound(held_claim("tenant-b", "fill-2", "h100", 2), "gpu-2"));
    view.upsert_claim(bound(held_claim("tenant-a", "a", "h100", 2), "gpu-2"));
    let pod = held_launcher("train", "a", 2);
    let name = pod.name.to_string();
    view.upsert_pod(pod);
    view.upsert_vmi(gpuclaim_engine::fixtures::vmi("tenant-a", "train", Default::default(), None));
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    let (_, node) = waited_while_fitting(sample_from(&mut invariants, &view, Vec::new(), 0, 300), &name);
    assert_eq!(node, "gpu-2");
}

#[test]
#[should_panic(expected = "the liveness sample runs the engine on a store that keeps its placement index")]
fn the_liveness_sample_refuses_a_store_that_keeps_objects_only() {
    // Regression: the twin's store kept objects only (9a62f19), so the sample's engine found no free units anywhere
    // and no pod ever fitted: the check passed blind. Sampling such a store is a mistake, not a pass.
    let mut view = two_node_cluster();
    view.upsert_pod(template_launcher("train", 2));
    view.upsert_vmi(gpuclaim_engine::fixtures::vmi("tenant-a", "train", Default::default(), None));
    let api = ApiServer::new(view, 0);
    let mut invariants = Invariants::new(api.store(), Variant::SHIPPED, REACTION_TIME_DEFAULT);
    for second in (0..=150).step_by(5) {
        let _ = check(&mut invariants, api.store(), Vec::new(), Millis::seconds(second));
    }
}

#[test]
fn a_bind_one_watch_lag_behind_a_device_failure_is_a_debt_not_a_double_booking() {
    // Regression (a harsher mix of suite 14's faults, seed 195): a held claim bound 1 s after the device plugin
    // lowered its node's allocatable, on a cache that had not seen it yet.
    let mut view = two_node_cluster();
    let mut invariants = Invariants::new(&view, Variant::SHIPPED, REACTION_TIME_DEFAULT);
    view.upsert_claim(bound(held_claim("tenant-a", "a", "h100", 3), "gpu-2"));
    assert_eq!(check(&mut invariants, &view, vec![claim_key("a")], Millis::seconds(1)), Ok(()));
    let mut node = view.node("gpu-2").unwrap().clone();
    node.devices.insert(RESOURCE.into(), 3);
    view.upsert_node(node);
    assert_eq!(check(&mut invariants, &view, vec![key(Kind::Node, "", "gpu-2")], Millis::seconds(10)), Ok(()));
    view.upsert_claim(bound(held_claim("tenant-a", "b", "h100", 1), "gpu-2"));
    assert_eq!(check(&mut invariants, &view, vec![claim_key("b")], Millis::seconds(11)), Ok(()), "within the lag");
    // Past the reaction time the fall is known: a bind onto it is a double booking.
    view.remove_claim("tenant-a", "b");
    check(&mut invariants, &view, vec![claim_key("b")], Millis::seconds(12)).unwrap();
    view.upsert_claim(bound(held_claim("tenant-a", "c", "h100", 1), "gpu-2"));
    let late = Millis(Millis::seconds(10).0 + REACTION_TIME_DEFAULT.0 + 1);
    assert_eq!(broken(check(&mut invariants, &view, vec![claim_key("c")], late)).0, Invariant::DeviceDoubleBooked);
}
