//! The placement policies on small worlds whose best node is known, and `Fragmented` against `NoCapacity`
//! (issue 35; docs/controller.md, "Placement policies").

use gpuclaim_engine::controller::Action;
use gpuclaim_engine::fixtures::{self, bound, gated_launcher, gpu_node, held_claim, settle, vmi};
use gpuclaim_engine::model::{ClaimPhase, GpuMode, Placement, Published, Reason, Time, View, VmiPhase};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

/// Class `h100` under `placement` on nodes `gpu-<i>` of 8 units, `taken[i]` of them held by claims of tenant `busy`
/// (one claim each, so its size is the units taken), and tenant `tenant-a` without budgets.
fn world(placement: Placement, taken: &[u32]) -> View {
    let mut view = View::default();
    let mut class = fixtures::class("h100", H100, GpuMode::Passthrough, 8, 0);
    class.placement = placement;
    view.upsert_class(class);
    view.set_vgpu_entitled("tenant-a", false);
    for (i, units) in taken.iter().enumerate() {
        let node = format!("gpu-{}", i + 1);
        view.upsert_node(gpu_node(&node, H100, 8));
        if *units > 0 {
            view.upsert_claim(bound(held_claim("busy", &format!("on-{node}"), "h100", *units), &node));
        }
    }
    settle(&mut view, at(0));
    view
}

/// Orders a held claim of `count` units and settles: the node it was bound to, if any.
fn order(view: &mut View, name: &str, count: u32, now: i64) -> Option<String> {
    let mut claim = held_claim("tenant-a", name, "h100", count);
    claim.created = at(now);
    view.upsert_claim(claim);
    settle(view, at(now));
    view.claim("tenant-a", name).unwrap().node.as_ref().map(|node| node.to_string())
}

fn pending(view: &View, name: &str) -> Reason {
    view.claim("tenant-a", name).unwrap().pending.clone().expect("a pending claim says why")
}

#[test]
fn each_policy_takes_its_known_best_node() {
    // Free units 5, 6 and 8; the class has mostly seen 4-unit claims come and go.
    for (placement, best) in
        [(Placement::BestFit, "gpu-1"), (Placement::Spread, "gpu-3"), (Placement::FragmentationAware, "gpu-2")]
    {
        let mut view = world(placement, &[3, 2, 0]);
        for i in 0..10 {
            view.upsert_claim(held_claim("gone", &format!("four-{i}"), "h100", 4));
            view.remove_claim("gone", &format!("four-{i}"));
        }
        // BestFit: the fewest free that fit (5 → 3 left); Spread: the most free (8); FragmentationAware: 6 → 4
        // left, one more of the class's usual 4-unit claims, where 5 → 3 strands three units for them and 8 → 6
        // scores the same but keeps the whole node for an 8 (ties go to the fewest free, as BestFit).
        assert_eq!(order(&mut view, "two", 2, 1).as_deref(), Some(best), "{placement:?}");
    }
}

#[test]
fn fragmentation_aware_keeps_room_for_a_later_four_unit_claim_where_best_fit_and_spread_strand_it() {
    // Two nodes of 8: 4 and 7 free; the class's claims are 1s and 4s. Claims of 1, 4, 1 and 4 units arrive.
    let mut outcomes = Vec::new();
    for placement in [Placement::BestFit, Placement::Spread, Placement::FragmentationAware] {
        let mut view = world(placement, &[4, 1]);
        let nodes: Vec<Option<String>> = [("a", 1), ("b", 4), ("c", 1), ("d", 4)]
            .iter()
            .zip(1..)
            .map(|((name, count), t)| order(&mut view, name, *count, t))
            .collect();
        outcomes.push((placement, nodes, pending_reason(&view, "d")));
    }
    let node = |n: &str| Some(n.to_owned());
    assert_eq!(
        outcomes,
        [
            // BestFit puts the first 1 on the 4-free node (3 left), so the first 4 breaks the 7 (3 left): 2 + 3.
            (Placement::BestFit, vec![node("gpu-1"), node("gpu-2"), node("gpu-1"), None], Some("Fragmented".into())),
            // Spread puts the first 4 on the emptiest node (6 → 2) and the next 1 on the other (4 → 3): 3 + 2.
            (Placement::Spread, vec![node("gpu-2"), node("gpu-2"), node("gpu-1"), None], Some("Fragmented".into())),
            // FragmentationAware puts the 1 where no 4 is lost (7 → 6) and the 4 where it fills the node exactly.
            (Placement::FragmentationAware, vec![node("gpu-2"), node("gpu-1"), node("gpu-2"), node("gpu-2")], None),
        ]
    );
}

fn waiting(view: &View, vm: &str) -> Reason {
    view.pod("tenant-a", &format!("virt-launcher-{vm}-abcde")).unwrap().waiting.clone().expect("a waiting pod says why")
}

fn pending_reason(view: &View, name: &str) -> Option<String> {
    let claim = view.claim("tenant-a", name).unwrap();
    (claim.phase == ClaimPhase::Pending).then(|| pending(view, name).reason)
}

/// Three nodes of 8 with 7, 6 and 7 units taken: 1 + 2 + 1 = 4 free in total, at most 2 on one node.
fn seven_six_seven() -> View {
    world(Placement::BestFit, &[7, 6, 7])
}

#[test]
fn a_set_with_its_units_free_in_total_but_on_no_one_node_waits_fragmented() {
    let mut view = seven_six_seven();
    assert_eq!(
        view.class("h100").unwrap().published,
        // The claims held are 7, 6 and 7 units: every free unit is on a node that cannot take a 7.
        Published { allocatable_units: 24, free_units: 4, largest_free_on_node: 2, fragmented_units: 4 }
    );
    for (vm, count) in [("four", 4_u32), ("five", 5)] {
        view.upsert_vmi(vmi("tenant-a", vm, VmiPhase::Scheduling, None));
        let attachments = format!(r#"[{{"template":0,"class":"h100","count":{count}}}]"#);
        view.upsert_pod(gated_launcher("tenant-a", vm, &attachments, H100, u64::from(count), at(1)));
    }
    let passes = settle(&mut view, at(1));
    assert_eq!(
        waiting(&view, "four"),
        Reason {
            reason: "Fragmented".into(),
            message: r#"4 units of GPU class "h100" wait for one node to have them: 4 units are free in total, at most 2 on one node"#.into(),
        }
    );
    assert_eq!(
        waiting(&view, "five"),
        Reason {
            reason: "NoCapacity".into(),
            message: "waiting for capacity: no node has 5 × h100 free with room for the pod".into(),
        }
    );
    let events: Vec<(&str, &str)> = passes
        .iter()
        .flatten()
        .filter_map(|action| match action {
            Action::Event { reason, message, .. } => Some((*reason, message.as_str())),
            _ => None,
        })
        .collect();
    // No node has 4 or 5 free, so none refused the pods: a fragmented class says so in an event all the same.
    assert_eq!(
        events,
        [(
            "Waiting",
            r#"4 units of GPU class "h100" wait for one node to have them: 4 units are free in total, at most 2 on one node"#
        )]
    );
    // The template claims wait with the pod's reason.
    assert_eq!(view.claim("tenant-a", "four-gpu-0").unwrap().pending.as_ref().unwrap().reason, "Fragmented");
    assert_eq!(view.claim("tenant-a", "five-gpu-0").unwrap().pending.as_ref().unwrap().reason, "NoCapacity");

    // A unit freed on gpu-3 makes 5 free in total, still at most 2 on one node: the condition is not rewritten for
    // its figures alone.
    view.remove_claim("busy", "on-gpu-3");
    view.upsert_claim(bound(held_claim("busy", "on-gpu-3", "h100", 6), "gpu-3"));
    let passes = settle(&mut view, at(2));
    let written: Vec<&Action> = passes.iter().flatten().filter(|a| matches!(a, Action::SetPodWaiting { .. })).collect();
    assert_eq!(written.len(), 1, "only five changes its word: {written:#?}");
    assert_eq!(
        waiting(&view, "four").message,
        r#"4 units of GPU class "h100" wait for one node to have them: 4 units are free in total, at most 2 on one node"#
    );
    assert_eq!(
        waiting(&view, "five").message,
        r#"5 units of GPU class "h100" wait for one node to have them: 5 units are free in total, at most 2 on one node"#
    );
}

#[test]
fn a_held_claim_waits_fragmented_or_for_capacity_on_the_seven_six_seven_world() {
    let mut view = seven_six_seven();
    assert_eq!(order(&mut view, "four", 4, 1), None);
    assert_eq!(
        pending(&view, "four"),
        Reason {
            reason: "Fragmented".into(),
            message: r#"4 units of GPU class "h100" wait for one node to have them: 4 units are free in total, at most 2 on one node"#.into(),
        }
    );
    assert_eq!(order(&mut view, "five", 5, 2), None);
    assert_eq!(pending(&view, "five").reason, "NoCapacity");
    assert_eq!(order(&mut view, "two", 2, 3).as_deref(), Some("gpu-2"), "a block of 2 takes a 2");
}

/// What placing `units` on a node with `free` free adds to the class's expected fragmentation, times the histogram's
/// weight: `(f − n) · W(size > f − n) − f · W(size > f)` (docs/controller.md, "Placement policies").
fn fragmentation_added(seen: Option<&gpuclaim_engine::model::SizesSeen>, free: u64, units: u64) -> i128 {
    let term = |f: u64| i128::from(f) * i128::from(seen.map_or(0, |seen| seen.weight_above(f)));
    term(free - units) - term(free)
}

proptest::proptest! {
    /// On any cluster of 8-unit nodes with nothing but units to tell them apart, each policy binds a new claim to
    /// the node its rule names: BestFit the fewest free that fit, Spread the most, FragmentationAware the least
    /// growth of expected fragmentation (then the fewest free); ties by name.
    #[test]
    fn each_policy_binds_a_claim_to_the_node_its_rule_names(
        taken in proptest::collection::vec(0_u32..=8, 1..24),
        units in 1_u32..=8,
        policy in 0_usize..3,
    ) {
        let placement = [Placement::BestFit, Placement::Spread, Placement::FragmentationAware][policy];
        let mut view = world(placement, &taken);
        let mut claim = held_claim("tenant-a", "new", "h100", units);
        claim.created = at(1);
        view.upsert_claim(claim);
        // (free, name) of the nodes that fit, read before the pass; the new claim has arrived in the histogram.
        let fit: Vec<(u64, String)> =
            view.capacity().candidates("h100", u64::from(units)).map(|(f, n)| (f, n.to_owned())).collect();
        let seen = view.sizes_seen("h100").cloned();
        let key = |(free, name): &(u64, String)| match placement {
            Placement::BestFit => (0, *free as i128, name.clone()),
            Placement::Spread => (0, -(*free as i128), name.clone()),
            Placement::FragmentationAware => {
                (fragmentation_added(seen.as_ref(), *free, u64::from(units)), *free as i128, name.clone())
            }
        };
        let expected = fit.iter().min_by_key(|node| key(node)).map(|(_, name)| name.clone());
        settle(&mut view, at(1));
        let node = view.claim("tenant-a", "new").unwrap().node.as_ref().map(|node| node.to_string());
        proptest::prop_assert_eq!(node, expected);
    }
}
