//! In-place edits of the view keep every index exactly as taking the object out and putting the edited one back
//! does: the property the twin's API server and caches rely on when they edit instead of re-inserting.

use gpuclaim_engine::fixtures::{attached, gated_launcher, held_claim, two_node_cluster};
use gpuclaim_engine::keys;
use gpuclaim_engine::model::{ClaimPhase, PodPhase, Time, View, VmiRef};
use gpuclaim_engine::scheduling::pin_terms;
use proptest::prelude::*;

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn start() -> View {
    let mut view = two_node_cluster();
    let t0 = Time::from_second(1_800_000_000).unwrap();
    for (i, vmi) in ["a", "b", "c"].into_iter().enumerate() {
        let mut pod = gated_launcher("tenant-a", vmi, "[]", H100, 2, t0);
        pod.owner_vmi = Some(VmiRef { name: vmi.into(), uid: format!("uid-vmi-{vmi}").into() });
        view.upsert_pod(pod);
        let claim = held_claim("tenant-a", &format!("claim-{i}"), "h100", 2);
        view.upsert_claim(if i == 0 { attached(claim, "gpu-1", vmi) } else { claim });
    }
    view
}

#[derive(Clone, Debug)]
enum PodEdit {
    Phase(u8),
    Bind(Option<u8>),
    Ungate,
    Pin(u8),
    Requests(u64),
}

#[derive(Clone, Debug)]
enum ClaimEdit {
    Node(Option<u8>),
    Attach(Option<u8>),
    Phase(u8),
    Deleting(bool),
}

fn node(i: u8) -> String {
    format!("gpu-{}", 1 + i % 2)
}

fn pod_edit() -> impl Strategy<Value = (u8, PodEdit)> {
    let edit = prop_oneof![
        (0u8..4).prop_map(PodEdit::Phase),
        proptest::option::of(0u8..2).prop_map(PodEdit::Bind),
        Just(PodEdit::Ungate),
        (0u8..2).prop_map(PodEdit::Pin),
        (0u64..4).prop_map(PodEdit::Requests),
    ];
    (0u8..3, edit)
}

fn claim_edit() -> impl Strategy<Value = (u8, ClaimEdit)> {
    let edit = prop_oneof![
        proptest::option::of(0u8..2).prop_map(ClaimEdit::Node),
        proptest::option::of(0u8..3).prop_map(ClaimEdit::Attach),
        (0u8..3).prop_map(ClaimEdit::Phase),
        any::<bool>().prop_map(ClaimEdit::Deleting),
    ];
    (0u8..3, edit)
}

fn apply_pod_edit(pod: &mut gpuclaim_engine::model::Pod, edit: &PodEdit) {
    match edit {
        PodEdit::Phase(p) => {
            pod.phase = [PodPhase::Pending, PodPhase::Running, PodPhase::Succeeded, PodPhase::Failed][*p as usize]
        }
        PodEdit::Bind(n) => pod.node_name = n.map(node).map(Into::into),
        PodEdit::Ungate => pod.scheduling_gates.retain(|g| g != keys::GATE_PLACEMENT),
        PodEdit::Pin(n) => pod.required_terms = Some(pin_terms(pod.required_terms(), &node(*n)).into()),
        PodEdit::Requests(units) => {
            std::sync::Arc::make_mut(&mut pod.devices).insert(H100.to_owned(), *units);
        }
    }
}

fn apply_claim_edit(claim: &mut gpuclaim_engine::model::Claim, edit: &ClaimEdit) {
    match edit {
        ClaimEdit::Node(n) => claim.node = n.map(node).map(Into::into),
        ClaimEdit::Attach(v) => {
            claim.attached_to = v.map(|v| {
                let name = ["a", "b", "c"][v as usize];
                VmiRef { name: name.into(), uid: format!("uid-vmi-{name}").into() }
            })
        }
        ClaimEdit::Phase(p) => {
            claim.phase = [ClaimPhase::Pending, ClaimPhase::Bound, ClaimPhase::Attached][*p as usize]
        }
        ClaimEdit::Deleting(d) => claim.deleting = *d,
    }
}

proptest! {
    #[test]
    fn edits_in_place_index_like_remove_and_insert(
        pods in proptest::collection::vec(pod_edit(), 0..12),
        claims in proptest::collection::vec(claim_edit(), 0..12),
    ) {
        let mut edited = start();
        let mut reinserted = start();
        let names: Vec<String> = edited.pods().map(|p| p.name.to_string()).collect();
        for (i, edit) in &pods {
            let name = &names[*i as usize % names.len()];
            edited.edit_pod("tenant-a", name, |pod| apply_pod_edit(pod, edit));
            let mut pod = reinserted.remove_pod("tenant-a", name).unwrap();
            apply_pod_edit(&mut pod, edit);
            reinserted.upsert_pod(pod);
            prop_assert_eq!(&edited, &reinserted);
        }
        for (i, edit) in &claims {
            let name = format!("claim-{i}");
            edited.edit_claim("tenant-a", &name, |claim| apply_claim_edit(claim, edit));
            let mut claim = reinserted.remove_claim("tenant-a", &name).unwrap();
            apply_claim_edit(&mut claim, edit);
            reinserted.upsert_claim(claim);
            prop_assert_eq!(&edited, &reinserted);
        }
    }
}

#[test]
fn pods_on_a_node_are_those_bound_or_pinned_there_until_they_finish() {
    let mut view = start();
    let names = |view: &View, node: &str| view.pods_on_node(node).map(|p| p.name.clone()).collect::<Vec<_>>();
    assert!(names(&view, "gpu-1").is_empty(), "gated pods occupy no node");
    view.edit_pod("tenant-a", "virt-launcher-a-abcde", |pod| pod.node_name = Some("gpu-1".into()));
    view.edit_pod("tenant-a", "virt-launcher-b-abcde", |pod| {
        pod.scheduling_gates.clear();
        pod.required_terms = Some(std::sync::Arc::new(pin_terms(None, "gpu-1")));
    });
    assert_eq!(names(&view, "gpu-1"), ["virt-launcher-a-abcde", "virt-launcher-b-abcde"]);
    assert!(names(&view, "gpu-2").is_empty());
    view.edit_pod("tenant-a", "virt-launcher-a-abcde", |pod| pod.phase = PodPhase::Succeeded);
    assert_eq!(names(&view, "gpu-1"), ["virt-launcher-b-abcde"], "a finished pod no longer occupies its node");
    view.remove_pod("tenant-a", "virt-launcher-b-abcde");
    assert!(names(&view, "gpu-1").is_empty());
}

#[test]
fn a_node_stands_the_same_when_only_what_placement_ignores_changed() {
    let mut view = start();
    view.edit_pod("tenant-a", "virt-launcher-a-abcde", |pod| pod.node_name = Some("gpu-1".into()));
    let before = view.node_standing("gpu-1");
    assert!(before.0.is_some() && before.1.is_some());
    // A newer version of the node, and the pod going Running: nothing placement reads moved.
    let mut node = view.node("gpu-1").unwrap().clone();
    node.resource_version = "999".into();
    view.upsert_node(node);
    view.edit_pod("tenant-a", "virt-launcher-a-abcde", |pod| pod.phase = PodPhase::Running);
    assert_eq!(view.node_standing("gpu-1"), before);
    // A pod bound there that takes CPU, or a device fewer: it stands differently.
    view.edit_pod("tenant-a", "virt-launcher-b-abcde", |pod| pod.node_name = Some("gpu-1".into()));
    assert_ne!(view.node_standing("gpu-1"), before);
    let after_pod = view.node_standing("gpu-1");
    let mut node = view.node("gpu-1").unwrap().clone();
    *node.devices.get_mut(H100).unwrap() -= 1;
    view.upsert_node(node);
    assert_ne!(view.node_standing("gpu-1"), after_pod);
}

/// A raw-device VM's launcher asking for two H100s, not bound yet: no claims cover its GPUs.
fn raw_launcher() -> gpuclaim_engine::model::Pod {
    let mut raw = gated_launcher("tenant-a", "raw", "[]", H100, 2, Time::from_second(1_800_000_000).unwrap());
    raw.labels = Default::default();
    raw.scheduling_gates.clear();
    raw
}

#[test]
fn only_devices_a_class_publishes_are_counted_where_pods_run() {
    let mut view = two_node_cluster();
    let mut raw = raw_launcher();
    raw.node_name = Some("gpu-1".into());
    std::sync::Arc::make_mut(&mut raw.devices).insert("devices.kubevirt.io/kvm".into(), 1);
    view.upsert_pod(raw);
    let (node, counted) = view.counted_devices("tenant-a", "virt-launcher-raw-abcde").expect("counted");
    assert_eq!(node.as_str(), "gpu-1");
    assert_eq!(counted.keys().collect::<Vec<_>>(), [H100], "kvm is plentiful: placement checks it is there, no more");
    assert_eq!(view.capacity().used(H100, "gpu-1"), 2);
    assert_eq!(view.capacity().used("devices.kubevirt.io/kvm", "gpu-1"), 0);
    assert_eq!(view.capacity().free("h100", "gpu-1"), Some(6));
}

/// A usage record written again: closed, opened again, moved to another claim, or only a new revision.
#[derive(Clone, Debug)]
enum UsageEdit {
    Close(bool),
    Claim(u8),
    Revision(u8),
}

fn usage_edit() -> impl Strategy<Value = (u8, UsageEdit)> {
    let edit = prop_oneof![
        any::<bool>().prop_map(UsageEdit::Close),
        (0u8..3).prop_map(UsageEdit::Claim),
        (0u8..9).prop_map(UsageEdit::Revision),
    ];
    (0u8..3, edit)
}

proptest! {
    #[test]
    fn a_usage_record_written_again_indexes_like_remove_and_insert(edits in proptest::collection::vec(usage_edit(), 0..16)) {
        let t0 = Time::from_second(1_800_000_000).unwrap();
        let record = |i: u8| gpuclaim_engine::model::Usage {
            namespace: "tenant-a".into(),
            name: format!("usage-{i}").into(),
            claim: format!("claim-{i}").into(),
            start: t0,
            ..Default::default()
        };
        let mut written = start();
        for i in 0..3 {
            written.upsert_usage(record(i));
        }
        let mut reinserted = written.clone();
        for (i, edit) in &edits {
            let mut usage = written.usage("tenant-a", &format!("usage-{i}")).unwrap().clone();
            match edit {
                UsageEdit::Close(closed) => usage.end = closed.then_some(t0),
                UsageEdit::Claim(c) => usage.claim = format!("claim-{c}").into(),
                UsageEdit::Revision(r) => usage.resource_version = r.to_string().into(),
            }
            written.upsert_usage(usage.clone());
            reinserted.remove_usage(&usage.namespace, &usage.name);
            reinserted.upsert_usage(usage.clone());
            prop_assert_eq!(&written, &reinserted);
            let open: Vec<_> = written.open_usages_of("tenant-a", &usage.claim).map(|u| u.name.clone()).collect();
            prop_assert_eq!(open.contains(&usage.name), usage.end.is_none());
        }
    }
}

#[test]
fn an_upsert_says_whether_the_devices_counted_for_a_pod_moved() {
    let mut view = two_node_cluster();
    let mut raw = raw_launcher();
    let mut lean = view.clone();
    lean.keep_placement(false);
    let mut steps = Vec::new();
    steps.push(raw.clone()); // created, not bound: counts nothing
    raw.node_name = Some("gpu-1".into());
    steps.push(raw.clone()); // bound: its two units count on gpu-1
    raw.phase = PodPhase::Running;
    steps.push(raw.clone()); // running where it was bound: nothing moved
    raw.phase = PodPhase::Succeeded;
    steps.push(raw.clone()); // ended: its units are free again
    let moved: Vec<bool> = steps.iter().map(|pod| view.upsert_pod_counting(pod.clone())).collect();
    assert_eq!(moved, [false, true, false, true]);
    let lean_moved: Vec<bool> = steps.into_iter().map(|pod| lean.upsert_pod_counting(pod)).collect();
    assert_eq!(lean_moved, [false; 4], "a view that keeps objects only counts nothing");
}
