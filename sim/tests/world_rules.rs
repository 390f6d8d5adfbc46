//! The twin's actors around the API server's rules: KubeVirt's rate-limited retries through a webhook outage,
//! held claims ordered through the order webhook, the scheduler's queue of pods that did not fit, nodes joining,
//! and the GPU controller deciding on its own lagging cache.

use gpuclaim_engine::fixtures;
use gpuclaim_engine::model::{ClaimPhase, VmiPhase};
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{Event, Timing, VmSpec, Workload, World, template_vm};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

fn world(seed: u64) -> World {
    World::new(seed, fixtures::two_node_cluster(), Timing::default(), EventLog::new(None))
}

#[test]
fn a_vm_created_during_a_webhook_outage_starts_once_the_webhook_is_back() {
    let mut world = world(1);
    world.schedule_at(Millis(0), Event::SetWebhookReplicas(0)).unwrap();
    world.schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 2).into())).unwrap();
    world.schedule_at(Millis::seconds(60), Event::SetWebhookReplicas(2)).unwrap();
    world.run(Millis::seconds(59), 100_000).unwrap();
    assert!(world.store().vmi("tenant-a", "vm").is_none(), "fail closed: no VMI while no replica is ready");
    let refused = world.stats().refusals["FailedCreate:InternalError"];
    // The VM controller's queue retries 5 ms · 2^k after the k-th failure: attempt k+1 comes 5 ms · (2^k − 1) after
    // the first, so 14 attempts fit before 59 s and the 15th comes at 1 s + 81.9 s.
    assert_eq!(refused, 14, "rate-limited retries, not a hot loop");
    world.run(Millis::seconds(82), 100_000).unwrap();
    assert!(world.store().vmi("tenant-a", "vm").is_none(), "the webhook is back, the next retry not yet due");
    world.run(Millis::seconds(120), 100_000).unwrap();
    let vmi = world.store().vmi("tenant-a", "vm").expect("created at the 15th attempt");
    assert_eq!(vmi.phase, VmiPhase::Running);
    assert_eq!(world.stats().refusals["FailedCreate:InternalError"], 14);
}

#[test]
fn held_claims_are_ordered_through_the_order_webhook_and_deleted_with_their_vm() {
    let mut world = world(2);
    // Before the controller publishes free units, an order is refused; after, it passes.
    let template = VmSpec { gpus: Vec::new(), lifetime: None, ..template_vm("tenant-a", "held", "h100", 1) };
    let workload =
        Workload::new(template, 60.0, Millis::seconds(600)).ordering(ClaimTemplate { class: "h100".into(), count: 4 });
    world.schedule_at(Millis(0), Event::CreateVm(template_vm("tenant-a", "warm-up", "h100", 1).into())).unwrap();
    world.add_workload(workload).unwrap();
    world.run(Millis::seconds(3_600), 1_000_000).unwrap();
    let stats = world.stats().clone();
    // One held claim of 4 at a time (mean lifetime 10 min): a handful of VMs in the hour, after the warm-up.
    assert!(world.vm_starts() >= 4, "VMs with held claims run: {stats:?}");
    // Budget 8: the warm-up VM holds 1, so at most one held claim of 4 at a time fits within the remaining 7.
    assert!(stats.refusals.get("OrderRefused:BudgetExceeded").copied().unwrap_or(0) > 0, "{stats:?}");
    let held: Vec<_> = world.store().claims().filter(|c| !c.template).collect();
    assert!(held.len() <= 1, "ordered claims go with their VMs: {held:?}");
    for claim in held {
        assert!(matches!(claim.phase, ClaimPhase::Bound | ClaimPhase::Attached | ClaimPhase::Pending));
    }
    let used: u64 = world.store().tenant("tenant-a").map_or(0, |t| t.units_used("h100"));
    assert!(used <= 8, "the budget holds: {used}");
}

#[test]
fn a_pod_that_did_not_fit_binds_once_a_pod_ends_on_the_node() {
    // Raw-device VMs carry no class tolerations: the nodes here are untainted.
    let mut store = fixtures::two_node_cluster();
    for name in ["gpu-1", "gpu-2"] {
        let mut node = store.node(name).unwrap().clone();
        node.taints.clear();
        store.upsert_node(node);
    }
    let mut world = World::new(3, store, Timing::default(), EventLog::new(None));
    let gpu = |units| vec![GpuEntry::Name(H100.to_owned()); units];
    // A raw-device VM takes all 8 units of gpu-1 for a minute; another raw VM wanting 8 must wait for it.
    let first =
        VmSpec { gpus: gpu(8), lifetime: Some(Millis::seconds(60)), ..template_vm("tenant-a", "first", "h100", 1) };
    let second = VmSpec { gpus: gpu(8), ..template_vm("tenant-a", "second", "h100", 1) };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(first.into())).unwrap();
    world.schedule_at(Millis::seconds(2), Event::CreateVm(second.into())).unwrap();
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "second").unwrap().phase, VmiPhase::Scheduling, "unschedulable");
    world.run(Millis::seconds(120), 100_000).unwrap();
    let second = world.store().vmi("tenant-a", "second").unwrap();
    assert_eq!((second.phase, second.node_name.as_deref()), (VmiPhase::Running, Some("gpu-1")));
}

#[test]
fn a_node_that_joins_takes_the_waiting_vm() {
    let mut world = world(4);
    let big = |name: &str| VmSpec { cpu_millis: 4_000, ..template_vm("tenant-a", name, "h100", 8) };
    let mut store_budget = fixtures::two_node_cluster();
    store_budget.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 16)].into());
    let mut world_16 = World::new(4, store_budget, Timing::default(), EventLog::new(None));
    for w in [&mut world, &mut world_16] {
        w.schedule_at(Millis::seconds(1), Event::CreateVm(big("a").into())).unwrap();
        w.schedule_at(Millis::seconds(2), Event::CreateVm(big("b").into())).unwrap();
    }
    world_16.schedule_at(Millis::seconds(30), Event::AddNodes(vec![fixtures::gpu_node("gpu-3", H100, 8)])).unwrap();
    world_16.run(Millis::seconds(29), 100_000).unwrap();
    let waiting = world_16.store().vmi_pods("tenant-a", "b").next().unwrap().waiting.clone().unwrap();
    assert_eq!(waiting.reason, "NoCapacity");
    world_16.run(Millis::seconds(90), 100_000).unwrap();
    let b = world_16.store().vmi("tenant-a", "b").unwrap();
    assert_eq!((b.phase, b.node_name.as_deref()), (VmiPhase::Running, Some("gpu-3")));
    // Without the budget for it, the second VM waits on its budget, nodes or not.
    world.run(Millis::seconds(90), 100_000).unwrap();
    assert_ne!(world.store().vmi("tenant-a", "b").unwrap().phase, VmiPhase::Running);
}

#[test]
fn the_controller_decides_on_a_cache_that_lags_the_store() {
    let mut world = world(5);
    world.schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 2).into())).unwrap();
    // The VMI is created at 1 s; the watch brings it to the controller 100 ms later.
    world.run(Millis(1_050), 10_000).unwrap();
    assert!(world.store().vmi("tenant-a", "vm").is_some());
    assert!(world.controller_cache().vmi("tenant-a", "vm").is_none(), "not delivered yet");
    world.run(Millis(1_200), 10_000).unwrap();
    assert!(world.controller_cache().vmi("tenant-a", "vm").is_some());
    world.run(Millis::seconds(60), 10_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running);
    // Once the world is quiet, the cache holds exactly what the store holds.
    let (store, cache) = (world.store(), world.controller_cache());
    assert_eq!(store.claims().collect::<Vec<_>>(), cache.claims().collect::<Vec<_>>());
    assert_eq!(store.vmis().collect::<Vec<_>>(), cache.vmis().collect::<Vec<_>>());
    let watched: Vec<_> =
        store.pods().filter(|p| gpuclaim_engine::model::is_claims_pod(p) || p.node_name.is_some()).collect();
    assert_eq!(watched, cache.pods().collect::<Vec<_>>());
}

#[test]
fn the_controller_counts_the_cpu_of_pods_without_claims() {
    for seed in 1..=6 {
        let mut store = fixtures::two_node_cluster();
        for name in ["gpu-1", "gpu-2"] {
            let mut node = store.node(name).unwrap().clone();
            node.taints.clear();
            store.upsert_node(node);
        }
        let mut world = World::new(seed, store, Timing::default(), EventLog::new(None));
        // A CPU-only VM takes 62 of a node's 64 CPUs, on whichever node the scheduler picks.
        let cpu_only = VmSpec { gpus: Vec::new(), cpu_millis: 62_000, ..template_vm("tenant-a", "cpu", "h100", 1) };
        world.schedule_at(Millis::seconds(1), Event::CreateVm(cpu_only.into())).unwrap();
        let gpu = VmSpec { cpu_millis: 8_000, ..template_vm("tenant-a", "gpu", "h100", 4) };
        world.schedule_at(Millis::seconds(30), Event::CreateVm(gpu.into())).unwrap();
        world.run(Millis::seconds(90), 100_000).unwrap();
        let cpu_node = world.store().vmi("tenant-a", "cpu").unwrap().node_name.clone();
        let vmi = world.store().vmi("tenant-a", "gpu").unwrap();
        assert_eq!(vmi.phase, VmiPhase::Running, "seed {seed}: never pinned where the CPU is gone");
        assert_ne!(vmi.node_name, cpu_node, "seed {seed}");
    }
}

#[test]
fn the_run_measures_start_waits_units_in_use_and_what_waits_at_the_gate() {
    let mut world = world(8);
    let first = VmSpec { lifetime: Some(Millis::seconds(60)), ..template_vm("tenant-a", "first", "h100", 8) };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(first.into())).unwrap();
    world
        .schedule_at(Millis::seconds(2), Event::CreateVm(template_vm("tenant-a", "second", "h100", 8).into()))
        .unwrap();
    world.schedule_at(Millis::seconds(3), Event::CreateVm(template_vm("tenant-a", "third", "h100", 8).into())).unwrap();
    world.run(Millis::seconds(200), 100_000).unwrap();
    let waits = world.start_waits();
    assert_eq!(waits.count, 2, "first and second ran; third waits on the budget");
    assert!(waits.p50_ms < 30_000, "the first starts in seconds: {waits:?}");
    assert!(waits.max_ms > 60_000, "the second waited for the first's minute: {waits:?}");
    let used = &world.units_in_use()[H100];
    assert_eq!(used.peak, 8, "never both at once");
    assert!(used.mean > 6.0 && used.mean < 8.0, "{used:?}");
    assert_eq!(world.waiting_at_gate(), [("BudgetExceeded".to_owned(), 1)].into());
}

#[test]
fn the_run_measures_gate_waits_and_counts_pods_set_waiting_by_reason() {
    let mut world = world(8);
    let first = VmSpec { lifetime: Some(Millis::seconds(60)), ..template_vm("tenant-a", "first", "h100", 8) };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(first.into())).unwrap();
    world
        .schedule_at(Millis::seconds(2), Event::CreateVm(template_vm("tenant-a", "second", "h100", 8).into()))
        .unwrap();
    world.schedule_at(Millis::seconds(3), Event::CreateVm(template_vm("tenant-a", "third", "h100", 8).into())).unwrap();
    world.run(Millis::seconds(200), 100_000).unwrap();
    let gate_waits = world.metrics().gate_wait_samples();
    assert_eq!(gate_waits.len(), 2, "first and second left the gate: {gate_waits:?}");
    assert!(gate_waits[0] < 5_000, "the first is placed at once: {gate_waits:?}");
    assert!(gate_waits[1] > 60_000, "the second waited at the gate for the first's minute: {gate_waits:?}");
    assert!(world.metrics().counts()["Waiting:BudgetExceeded"] >= 1, "{:?}", world.metrics().counts());
    assert_eq!(world.vms_in_crash_loop(), 0);
    // The first ran its minute and stopped; the second runs; the third has waited since it was created at 3 s.
    assert_eq!(world.waiting_to_start(), vec![197_000]);
}

#[test]
fn a_vm_life_wakes_the_controller_only_where_a_pass_reads_something_new() {
    let mut world = world(6);
    let mut vm = template_vm("tenant-a", "vm", "h100", 2);
    vm.lifetime = Some(Millis::seconds(60));
    world.schedule_at(Millis::seconds(1), Event::CreateVm(vm.into())).unwrap();
    // Each pass, with the phase the controller's cache held for the VMI when it ran.
    let mut passes = Vec::new();
    world
        .run_observed(Millis::seconds(300), 100_000, |world| {
            if world.stats().controller_passes > passes.len() as u64 {
                let phase = world.controller_cache().vmi("tenant-a", "vm").map(|vmi| vmi.phase);
                passes.push(phase);
            }
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm"), None, "the run ended and its VMI went");
    // The first pass publishes the classes; then the placement, and the release at its end. Their writes' echoes
    // find nothing waiting (no pod at the gate, no held claim pending), so they wake no pass. Scheduled (bound, not
    // running) changes nothing a pass reads, nor does Running on the node its claims are bound to; the VMI's
    // deletion names a run with no claims left, and its launcher's deletion frees nothing its end had not freed.
    use VmiPhase::{Scheduling, Succeeded};
    let expected = [None, Some(Scheduling), Some(Succeeded)];
    assert_eq!(passes, expected);
}
