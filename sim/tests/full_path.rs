//! One VM with a claim template, through the whole path in the twin: render, VMI webhook, launcher, pod webhook
//! (gated), GPU controller (template claim, placement, pin and ungate in one update the API server accepts),
//! scheduler, kubelet, Running, on the node its claim is bound to; and the same seed gives the same log hash.

mod common;

use common::Lines;
use gpuclaim_engine::fixtures;
use gpuclaim_engine::model::{ClaimPhase, PodPhase, View, VmiPhase};
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_engine::scheduling::is_pinned_to;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{Event, Timing, VmSpec, World};

fn cluster() -> View {
    fixtures::two_node_cluster()
}

fn run(seed: u64) -> (World, String) {
    let lines = Lines::default();
    let mut world = World::new(seed, cluster(), Timing::default(), EventLog::new(Some(Box::new(lines.clone()))));
    let vm = VmSpec {
        namespace: "tenant-a".into(),
        name: "trainer".into(),
        gpus: vec![GpuEntry::ClaimTemplate(ClaimTemplate { class: "h100".into(), count: 3 })],
        cpu_millis: 4_000,
        memory_bytes: 16 << 30,
        lifetime: None,
        wffc_volume: false,
    };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(vm.into())).unwrap();
    world.run(Millis::seconds(120), 10_000).expect("the run ends within its bounds");
    let text = lines.text();
    (world, text)
}

#[test]
fn a_vm_with_a_claim_template_runs_on_the_node_its_claim_is_bound_to() {
    let (world, log) = run(1);
    let store = world.store();
    let vmi = store.vmi("tenant-a", "trainer").expect("the VMI exists");
    assert_eq!(vmi.phase, VmiPhase::Running, "log:\n{log}");
    let claim = store.claim("tenant-a", "trainer-gpu-0").expect("the template claim exists");
    assert_eq!((claim.phase, claim.node.as_deref()), (ClaimPhase::Attached, Some("gpu-2")), "best fit");
    let pod = store.vmi_pods("tenant-a", "trainer").next().expect("the launcher");
    assert_eq!((pod.phase, pod.node_name.as_deref()), (PodPhase::Running, Some("gpu-2")));
    assert!(pod.scheduling_gates.is_empty());
    let terms = pod.required_terms().unwrap();
    assert_eq!(terms.len(), 1, "KubeVirt's one term, with the pin appended");
    assert_eq!(terms[0].match_expressions.as_ref().unwrap()[0].key, "node-labeller.kubevirt.io/obsolete-host-model");
    assert_eq!(is_pinned_to(terms), Some("gpu-2"));
    assert_eq!(vmi.node_name.as_deref(), Some("gpu-2"));
    // The launcher was created gated, waited, then was pinned and ungated in one update, then bound.
    let launcher = &pod.name;
    let order: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(launcher.as_str()))
        .map(|line| line.split("\"what\":\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(order, ["Created", "SchedulingGated", "PinnedAndUngated", "Bound", "Running"], "log:\n{log}");
    assert_eq!(store.open_usages().count(), 1);
    assert_eq!(store.class("h100").unwrap().published.free_units, 9);
}

#[test]
fn the_same_seed_gives_the_same_event_log() {
    let (a, log_a) = run(7);
    let (b, log_b) = run(7);
    assert_eq!(log_a, log_b);
    assert_eq!(a.log_hash(), b.log_hash());
    let (c, _) = run(8);
    assert_ne!(a.log_hash(), c.log_hash(), "another seed, another kubelet start latency");
}

#[test]
fn a_stopped_vm_gives_its_units_to_the_vm_waiting_for_them() {
    let mut store = cluster();
    store.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 16)].into());
    let mut world = World::new(3, store, Timing::default(), EventLog::new(None));
    let vm = |name: &str, count: u32, lifetime: Option<u64>| VmSpec {
        namespace: "tenant-a".into(),
        name: name.into(),
        gpus: vec![GpuEntry::ClaimTemplate(ClaimTemplate { class: "h100".into(), count })],
        cpu_millis: 4_000,
        memory_bytes: 16 << 30,
        lifetime: lifetime.map(Millis::seconds),
        wffc_volume: false,
    };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(vm("first", 8, Some(60)).into())).unwrap();
    world.schedule_at(Millis::seconds(2), Event::CreateVm(vm("second", 8, None).into())).unwrap();
    world.run(Millis::seconds(30), 10_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "first").unwrap().phase, VmiPhase::Running);
    let second = world.store().vmi_pods("tenant-a", "second").next().unwrap();
    assert_eq!(second.waiting.as_ref().unwrap().reason, "NoCapacity", "8 units on one node are taken");
    world.run(Millis::seconds(120), 10_000).unwrap();
    assert!(world.store().vmi("tenant-a", "first").is_none(), "stopped and deleted");
    assert!(world.store().claim("tenant-a", "first-gpu-0").is_none(), "its template claim went with it");
    assert_eq!(world.store().vmi("tenant-a", "second").unwrap().phase, VmiPhase::Running);
    assert_eq!(world.store().claim("tenant-a", "second-gpu-0").unwrap().node.as_deref(), Some("gpu-1"));
    assert_eq!(world.vm_starts(), 2);
    let closed: Vec<_> = world.store().usages().filter(|u| u.claim == "first-gpu-0").map(|u| u.end.is_some()).collect();
    assert!(closed.is_empty() || closed == [true], "the record closed (or went with its claim)");
}
