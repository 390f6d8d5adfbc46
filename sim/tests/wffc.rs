//! WaitForFirstConsumer volumes in the twin: the temporary pod carries the launcher's labels and GPU requests, is
//! gated and placed by the GPU controller like a launcher, and once it runs the local volume binds to its node and
//! the pod goes; the launcher then lands on that node. A temporary pod that never runs leaves the VM stuck.

use gpuclaim_engine::fixtures;
use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::VmiPhase;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{Event, Timing, VmSpec, World, template_vm};

fn world() -> World {
    let mut store = fixtures::two_node_cluster();
    store.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 16)].into());
    World::new(9, store, Timing::default(), EventLog::new(None))
}

#[test]
fn the_temporary_pod_is_placed_and_the_launcher_follows_the_volume() {
    let mut world = world();
    let vm = VmSpec { wffc_volume: true, ..template_vm("tenant-a", "vm", "h100", 4) };
    world.schedule_at(Millis::seconds(1), Event::CreateVm(vm.into())).unwrap();
    world.run(Millis(1_050), 10_000).unwrap();
    let binder = world.store().vmi_pods("tenant-a", "vm").next().unwrap().clone();
    assert_eq!(binder.annotations[kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING], keys::TRUE);
    assert_eq!(binder.scheduling_gates, [keys::GATE_PLACEMENT], "the pod webhook gates it");
    assert_eq!(binder.labels[keys::LABEL_CLAIMS], keys::TRUE, "the launcher's labels");
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Pending, "waiting for its volume");
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert!(world.store().pod("tenant-a", &binder.name).is_none(), "deleted once it ran");
    let vmi = world.store().vmi("tenant-a", "vm").unwrap();
    assert_eq!(vmi.phase, VmiPhase::Running);
    let claim = world.store().claim("tenant-a", "vm-gpu-0").unwrap();
    assert_eq!(vmi.node_name, claim.node, "the launcher landed where the volume and the claim are");
}

#[test]
fn a_temporary_pod_that_never_runs_leaves_the_vm_stuck() {
    let mut world = world();
    // 8 units fit nowhere once `holder` takes gpu-1's 8: the temporary pod waits at the gate.
    world
        .schedule_at(Millis::seconds(1), Event::CreateVm(template_vm("tenant-a", "holder", "h100", 8).into()))
        .unwrap();
    let vm = VmSpec { wffc_volume: true, ..template_vm("tenant-a", "vm", "h100", 8) };
    world.schedule_at(Millis::seconds(2), Event::CreateVm(vm.into())).unwrap();
    world.run(Millis::seconds(3_600), 100_000).unwrap();
    let binder = world.store().vmi_pods("tenant-a", "vm").next().unwrap();
    assert!(binder.annotations.contains_key(kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING));
    assert_eq!(binder.waiting.as_ref().unwrap().reason, "NoCapacity");
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Pending, "stuck");
}
