//! One reconcile pass: placing one gated pod among 1,000 to 100,000 nodes (the placement index's walk), a pass over
//! 10,000 claims that places 10 gated pods, the steady-state pass over the same world with nothing waiting (the
//! pass the controller runs on every event), and the pass that places one VM with 10,000 waiting in a full cluster
//! (issue 32). Run: `cargo bench -p gpuclaim-engine --bench reconcile`.
//!
//! The placement world keeps its claims few: nodes are partly used by pods outside claims (other workloads), which
//! the placement index counts but the pass never scans, so the figure follows placement's cost as nodes grow, not
//! the claim scans' (what it holds besides placement is the pass's fixed work: ten claims, two classes published).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use divan::{Bencher, black_box};
use gpuclaim_engine::controller::{
    Action, Changes, Waiting, apply, reconcile, reconcile_changes, reconcile_remembering,
};
use gpuclaim_engine::fixtures::{self, gated_launcher, gpu_node, held_claim, vmi};
use gpuclaim_engine::model::{GpuMode, Pod, PodPhase, Time, View, VmiPhase};
use gpuclaim_engine::variant::Variant;

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const L40S: &str = "nvidia.com/AD102GL_L40S";
const A10: &str = "nvidia.com/NVIDIA_A10-12Q";
/// Units a gated launcher's template claim asks for.
const TEMPLATE_UNITS: u64 = 2;

fn at(seconds: i64) -> Time {
    Time::from_second(1_800_000_000 + seconds).unwrap()
}

fn tenant(index: usize) -> String {
    format!("tenant-{index:04}")
}

/// `count` tenants, each vGPU-entitled with a budget of 64 units of every class in `classes`.
fn add_tenants(view: &mut View, count: usize, classes: &[&str]) {
    for index in 0..count {
        let namespace = tenant(index);
        view.set_vgpu_entitled(&namespace, true);
        let budgets: BTreeMap<String, u64> = classes.iter().map(|c| ((*c).to_owned(), 64)).collect();
        view.upsert_quota(&namespace, "gpu-budget", budgets);
    }
}

/// Reconciles and applies until a pass has nothing to do (at most 10 passes); returns how many passes wrote.
fn settle(view: &mut View, now: Time) -> usize {
    for passes in 0..10 {
        let actions = reconcile(view, now);
        if actions.is_empty() {
            return passes;
        }
        apply(view, &actions, now).expect("the pass's own writes apply");
    }
    panic!("reconcile did not settle in 10 passes");
}

/// A running pod outside claims (no claims label, no VMI) bound to `node`, taking `units` of `resource`, 4 CPUs and
/// 16 GiB: counted by the placement index, never scanned by the pass.
fn raw_pod(name: &str, node: &str, resource: &str, units: u64) -> Pod {
    Pod {
        namespace: "batch".into(),
        name: name.into(),
        uid: format!("uid-pod-{name}").into(),
        resource_version: "1".into(),
        node_name: Some(node.into()),
        phase: PodPhase::Running,
        cpu_millis: 4_000,
        memory_bytes: 16 << 30,
        devices: std::sync::Arc::new(BTreeMap::from([(resource.to_owned(), units)])),
        ..Pod::default()
    }
}

/// A VMI in phase Scheduling and its gated launcher asking for one template claim of `class`.
fn add_waiting_run(view: &mut View, namespace: &str, vm: &str, class: &str, resource: &str, created: Time) {
    view.upsert_vmi(vmi(namespace, vm, VmiPhase::Scheduling, None));
    let attachments = format!(r#"[{{"template":0,"class":"{class}","count":{TEMPLATE_UNITS}}}]"#);
    view.upsert_pod(gated_launcher(namespace, vm, &attachments, resource, TEMPLATE_UNITS, created));
}

fn pins(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::PinAndUngate { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect()
}

/// `nodes` GPU nodes of 8 units: every fourth of class `l40s`, the rest `h100`. Node i has (i mod 9) units taken by
/// a pod outside claims, so free units run 8, 7, …, 0 (one node in nine fully free, one in nine full). 100 tenants
/// have budgets; ten of them hold one bound claim of 1 unit on a fully free node. Settled, then one gated launcher
/// waits (2 × h100).
fn placement_world(nodes: usize) -> View {
    let mut view = View::default();
    view.upsert_class(fixtures::class("h100", H100, GpuMode::Passthrough, 8, 0));
    view.upsert_class(fixtures::class("l40s", L40S, GpuMode::Passthrough, 8, 0));
    let resource_of = |i: usize| if i % 4 == 3 { ("l40s", L40S) } else { ("h100", H100) };
    for i in 0..nodes {
        let name = format!("gpu-node-{i:06}");
        let (_, resource) = resource_of(i);
        view.upsert_node(gpu_node(&name, resource, 8));
        let taken = (i % 9) as u64;
        if taken > 0 {
            view.upsert_pod(raw_pod(&format!("job-{i:06}"), &name, resource, taken));
        }
    }
    add_tenants(&mut view, 100, &["h100", "l40s"]);
    // Every pass walks every claim (finalizers, release, waiters, usage): ten keep that walk small next to placement.
    for t in 0..10 {
        let i = (9 * t) % nodes.max(1);
        let (class, _) = resource_of(i);
        let claim = held_claim(&tenant(t), "train-0", class, 1);
        view.upsert_claim(fixtures::bound(claim, &format!("gpu-node-{i:06}")));
    }
    settle(&mut view, at(1));
    add_waiting_run(&mut view, &tenant(0), "vm-waiting", "h100", H100, at(10));
    view
}

#[divan::bench(args = [1_000, 10_000, 100_000])]
fn placement_of_one_gated_pod(bencher: Bencher, nodes: usize) {
    let view = placement_world(nodes);
    let now = at(20);
    let actions = reconcile(&view, now);
    // Best fit: the first node by name with exactly 2 free units of h100 (i mod 9 = 6, i mod 4 ≠ 3).
    assert_eq!(pins(&actions), ["gpu-node-000006"], "{actions:#?}");
    bencher.bench(|| reconcile(black_box(&view), black_box(now)));
}

const STEADY_NODES: usize = 1_000;
const STEADY_CLAIMS: usize = 10_000;

/// 1,000 nodes: even ones 8 × h100, odd ones 16 × a10-12q (vGPU), each leaving 0–3 units unreserved. 10,000 held
/// claims of 1 unit bound round-robin over the nodes' reservable units, 20 per tenant (500 tenants); every fourth
/// claim attached to its own VMI Running on the claim's node, with its launcher running there. Settled: the first
/// pass opens the 2,500 usage records and publishes the classes, the second has nothing to do.
static STEADY: LazyLock<View> = LazyLock::new(|| {
    let mut view = View::default();
    view.upsert_class(fixtures::class("h100", H100, GpuMode::Passthrough, 8, 0));
    view.upsert_class(fixtures::class("a10-12q", A10, GpuMode::Vgpu, 16, 0));
    let kind_of = |j: usize| if j.is_multiple_of(2) { ("h100", H100, 8) } else { ("a10-12q", A10, 16) };
    let mut reservable = Vec::with_capacity(STEADY_NODES);
    for j in 0..STEADY_NODES {
        let (_, resource, units) = kind_of(j);
        view.upsert_node(gpu_node(&format!("gpu-node-{j:04}"), resource, units));
        reservable.push(units - ((j / 2) % 4) as u64);
    }
    let rounds = *reservable.iter().max().unwrap();
    let reservable = &reservable;
    let slots: Vec<usize> =
        (0..rounds).flat_map(|r| (0..STEADY_NODES).filter(move |j| r < reservable[*j])).take(STEADY_CLAIMS).collect();
    assert_eq!(slots.len(), STEADY_CLAIMS, "the nodes reserve room for every claim");
    add_tenants(&mut view, STEADY_CLAIMS / 20, &["h100", "a10-12q"]);
    for (k, j) in slots.into_iter().enumerate() {
        let (class, resource, _) = kind_of(j);
        let (namespace, name, node) = (tenant(k / 20), format!("claim-{k}"), format!("gpu-node-{j:04}"));
        let claim = held_claim(&namespace, &name, class, 1);
        if !k.is_multiple_of(4) {
            view.upsert_claim(fixtures::bound(claim, &node));
            continue;
        }
        let vm = format!("vm-{k}");
        let uid = claim.uid.clone();
        view.upsert_claim(fixtures::attached(claim, &node, &vm));
        view.upsert_vmi(vmi(&namespace, &vm, VmiPhase::Running, Some(&node)));
        let attachments = format!(r#"[{{"claim":"{name}","uid":"{uid}","class":"{class}","count":1}}]"#);
        let mut launcher = gated_launcher(&namespace, &vm, &attachments, resource, 1, at(0));
        launcher.scheduling_gates.clear();
        launcher.node_name = Some(node.into());
        launcher.phase = PodPhase::Running;
        view.upsert_pod(launcher);
    }
    let passes = settle(&mut view, at(1));
    assert_eq!(passes, 1, "one pass opens the usage records and publishes; the next has nothing to do");
    assert_eq!(view.open_usages().count(), STEADY_CLAIMS / 4);
    view
});

fn main() {
    LazyLock::force(&STEADY);
    divan::main();
}

#[divan::bench]
fn full_reconcile_pass(bencher: Bencher) {
    let mut view = STEADY.clone();
    for r in 0..10_usize {
        let (class, resource) = if r.is_multiple_of(2) { ("h100", H100) } else { ("a10-12q", A10) };
        add_waiting_run(&mut view, &tenant(r * 50), &format!("vm-waiting-{r}"), class, resource, at(10 + r as i64));
    }
    let now = at(100);
    let actions = reconcile(&view, now);
    assert_eq!(pins(&actions).len(), 10, "{actions:#?}");
    bencher.bench(|| reconcile(black_box(&view), black_box(now)));
}

#[divan::bench]
fn steady_state_pass(bencher: Bencher) {
    // A clone, as in `full_reconcile_pass`: the pass is bound by memory access, so both measure the same heap layout
    // and differ by the ten placements only (the world as built, its objects scattered, passes about 30% slower).
    let view = STEADY.clone();
    let now = at(100);
    let actions = reconcile(&view, now);
    assert!(actions.is_empty(), "the settled world has nothing to do: {actions:#?}");
    bencher.bench(|| reconcile(black_box(&view), black_box(now)));
}

#[divan::bench]
fn pass_over_one_vm_start(bencher: Bencher) {
    // The pass a controller runs for one VM start in the settled 10,000-claim world: the new run's launcher waits at
    // the gate; only that run changed.
    let mut view = STEADY.clone();
    add_waiting_run(&mut view, &tenant(7), "vm-new", "h100", H100, at(10));
    let mut changes = Changes::default();
    changes.vmis.insert((tenant(7).into(), "vm-new".into()));
    let now = at(100);
    let actions = reconcile_changes(&view, now, &changes);
    assert_eq!(actions, reconcile(&view, now), "the pass over the change decides what the full pass does");
    assert_eq!(pins(&actions).len(), 1);
    bencher.bench(|| reconcile_changes(black_box(&view), black_box(now), black_box(&changes)));
}

const QUEUE_NODES: usize = 1_000;
const QUEUE_WAITING: usize = 10_000;

/// A full cluster with a long queue: 1,000 nodes of 8 × h100, each full with a pod outside claims, and 10,000 gated
/// launchers (1,000 tenants × 10, created one second apart) each asking for 2 units. Settled with a controller's
/// memo (`Waiting`) of the passes that left them waiting; then one node's pod shrinks to 6 units, so 2 come free.
fn queue_world() -> (View, Waiting) {
    let mut view = View::default();
    view.upsert_class(fixtures::class("h100", H100, GpuMode::Passthrough, 8, 0));
    for i in 0..QUEUE_NODES {
        let name = format!("gpu-node-{i:04}");
        view.upsert_node(gpu_node(&name, H100, 8));
        view.upsert_pod(raw_pod(&format!("job-{i:04}"), &name, H100, 8));
    }
    add_tenants(&mut view, QUEUE_WAITING / 10, &["h100"]);
    for k in 0..QUEUE_WAITING {
        add_waiting_run(&mut view, &tenant(k / 10), &format!("vm-{k:05}"), "h100", H100, at(10 + k as i64));
    }
    let (now, mut waiting) = (at(20_000), Waiting::default());
    for _ in 0..10 {
        let actions = reconcile_remembering(&view, now, None, &Variant::SHIPPED, &mut waiting);
        apply(&mut view, &actions, now).expect("the pass's own writes apply");
        waiting.landed();
        if actions.is_empty() {
            break;
        }
    }
    assert_eq!(waiting.remembered(), QUEUE_WAITING, "every waiter is remembered waiting for capacity");
    view.upsert_pod(raw_pod("job-0500", "gpu-node-0500", H100, 6));
    (view, waiting)
}

#[divan::bench(sample_count = 30)]
fn pass_placing_one_of_10k_waiting(bencher: Bencher) {
    let (view, mut waiting) = queue_world();
    let now = at(20_001);
    let changes = Changes::default();
    let actions = reconcile_remembering(&view, now, Some(&changes), &Variant::SHIPPED, &mut waiting);
    assert_eq!(actions, reconcile(&view, now), "the remembering pass decides what the full scan decides");
    assert_eq!(pins(&actions), ["gpu-node-0500"], "the oldest waiter takes the room");
    let mut probe = waiting.clone();
    reconcile_remembering(&view, now, Some(&changes), &Variant::SHIPPED, &mut probe);
    probe.landed();
    assert!(probe.visited() < 10, "the pass visits about the one it places, not the queue: {}", probe.visited());
    bencher.bench_local(|| {
        reconcile_remembering(black_box(&view), black_box(now), Some(&changes), &Variant::SHIPPED, &mut waiting)
    });
}

#[divan::bench(sample_count = 10)]
fn full_scan_placing_one_of_10k_waiting(bencher: Bencher) {
    // The same pass without the memo: every waiter tried.
    let (view, _) = queue_world();
    let now = at(20_001);
    bencher.bench(|| reconcile(black_box(&view), black_box(now)));
}
