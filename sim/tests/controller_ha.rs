//! The GPU controller's Deployment in the twin: a leader crash hands the lease to the standby once it expires
//! (client-go: 15 s lease, 2 s retry), nothing reconciles meanwhile, the new leader resyncs and nothing is bound
//! twice; a drain evicts a replica only within the PodDisruptionBudget, so with two replicas admission stays up,
//! and with one the webhooks are down until the replacement has synced.

use gpuclaim_engine::fixtures;
use gpuclaim_engine::model::VmiPhase;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{DeploymentSpec, Event, ReplicaState, Timing, World, template_vm};

fn world(replicas: u32) -> World {
    let mut store = fixtures::two_node_cluster();
    store.upsert_quota("tenant-a", "gpu-budget", [("h100".to_owned(), 16)].into());
    let mut world = World::new(7, store, Timing::default(), EventLog::new(None));
    world.deploy_controller(DeploymentSpec { replicas, ..DeploymentSpec::default() });
    world
}

#[test]
fn a_leader_crash_hands_over_after_the_lease_expires_and_nothing_is_bound_twice() {
    let mut world = world(2);
    assert_eq!(world.deployment().leader, Some(0));
    world.schedule_at(Millis(10_500), Event::ControllerCrash { index: 0 }).unwrap();
    // A VM arrives while nobody leads.
    world.schedule_at(Millis::seconds(12), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 4).into())).unwrap();
    world.run(Millis(25_999), 100_000).unwrap();
    assert_eq!(world.deployment().leader, None, "last renewal at 10 s: the lease runs to 25 s");
    let pod = world.store().vmi_pods("tenant-a", "vm").next().unwrap();
    assert!(!pod.scheduling_gates.is_empty(), "the webhooks still serve (replica 1), but no one places");
    world.run(Millis::seconds(26), 100_000).unwrap();
    assert_eq!(world.deployment().leader, Some(1), "the standby's first 2 s tick after expiry: 26 s");
    assert_eq!(world.deployment().elections, 2);
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running);
    let claims: Vec<_> = world.store().claims().filter(|c| c.node.is_some()).collect();
    assert_eq!(claims.len(), 1, "one claim, bound once: {claims:?}");
    for pod in
        world.store().pods().filter(|p| gpuclaim_engine::model::is_claims_pod(p) && p.scheduling_gates.is_empty())
    {
        let pin = pod.required_terms().and_then(gpuclaim_engine::scheduling::is_pinned_to);
        assert_eq!(pin, claims[0].node.as_deref(), "ungated only with its pin, to its claim's node");
    }
    // The crashed replica came back (10 s restart, 2 s sync) as a standby.
    assert_eq!(world.deployment().replicas[0].state, ReplicaState::Ready);
    assert_eq!(world.deployment().leader, Some(1));
}

#[test]
fn a_new_leader_runs_the_same_engine_variant() {
    let mut world = world(2);
    let variant = gpuclaim_engine::variant::Variant::named("unconfirmed-pins").unwrap();
    world.set_variant(variant);
    world.schedule_at(Millis(10_500), Event::ControllerCrash { index: 0 }).unwrap();
    world.run(Millis::seconds(30), 100_000).unwrap();
    assert_eq!(world.deployment().leader, Some(1));
    assert_eq!(world.variant(), variant, "a counterfactual stays one across a failover");
}

#[test]
fn a_drain_keeps_admission_up_with_two_replicas() {
    let mut world = world(2);
    let node = world.deployment().replicas[0].node.clone();
    world.schedule_at(Millis::seconds(5), Event::Drain { node: node.clone() }).unwrap();
    world.schedule_at(Millis::seconds(6), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 2).into())).unwrap();
    world.run(Millis::seconds(60), 100_000).unwrap();
    assert!(world.stats().refusals.keys().all(|k| !k.starts_with("FailedCreate")), "{:?}", world.stats().refusals);
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running);
    let moved = &world.deployment().replicas[0];
    assert_ne!(moved.node, node, "its replacement runs elsewhere");
    assert_eq!(moved.state, ReplicaState::Ready);
}

#[test]
fn with_one_replica_a_drain_is_an_outage_until_the_replacement_has_synced() {
    let mut world = world(1);
    let node = world.deployment().replicas[0].node.clone();
    world.schedule_at(Millis::seconds(5), Event::Drain { node }).unwrap();
    world.schedule_at(Millis::seconds(6), Event::CreateVm(template_vm("tenant-a", "vm", "h100", 2).into())).unwrap();
    world.run(Millis::seconds(120), 100_000).unwrap();
    assert!(world.stats().refusals["FailedCreate:InternalError"] >= 1, "creates fail closed meanwhile");
    assert_eq!(world.store().vmi("tenant-a", "vm").unwrap().phase, VmiPhase::Running, "then everything starts");
}

#[test]
fn the_budget_refuses_a_second_eviction_while_one_replica_is_away() {
    let mut world = world(2);
    let (first, second) = (world.deployment().replicas[0].node.clone(), world.deployment().replicas[1].node.clone());
    assert_ne!(first, second, "spread over nodes");
    world.schedule_at(Millis::seconds(5), Event::Drain { node: first }).unwrap();
    world.schedule_at(Millis(5_001), Event::Drain { node: second }).unwrap();
    world.run(Millis::seconds(6), 100_000).unwrap();
    assert_eq!(world.stats().refusals["EvictionRefused:TooManyRequests"], 1);
    world.run(Millis::seconds(120), 100_000).unwrap();
    assert!(world.deployment().replicas.iter().all(|r| r.state == ReplicaState::Ready));
}

#[test]
fn a_replica_replaced_after_a_node_loss_keeps_off_the_other_replicas_node() {
    // Regression (soak of suite 14, seeds 687, 783, 921): the replacement went to the first node that takes pods,
    // the other replica's, and the next loss of that node took both replicas, and the webhooks, down at once.
    let mut store = fixtures::two_node_cluster();
    store.upsert_node(fixtures::gpu_node("gpu-3", "nvidia.com/GH100_H100_SXM5_80GB", 8));
    let mut world = World::new(7, store, Timing::default(), EventLog::new(None));
    world.deploy_controller(DeploymentSpec { replicas: 2, ..DeploymentSpec::default() });
    let nodes = |world: &World| world.deployment().replicas.iter().map(|r| r.node.clone()).collect::<Vec<_>>();
    assert_eq!(nodes(&world), ["gpu-1", "gpu-2"]);
    world.schedule_at(Millis::seconds(10), Event::NodeLost { node: "gpu-1".into() }).unwrap();
    world.run(Millis::seconds(10 * 60), 100_000).unwrap();
    assert_eq!(nodes(&world), ["gpu-3", "gpu-2"], "spread over nodes, as the chart's topology spread has it");
    assert_eq!(world.deployment().replicas[0].state, ReplicaState::Ready);
}
