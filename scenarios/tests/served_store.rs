//! The served twin's store (issue 39): after every event the snapshot clients read holds exactly the objects the
//! API server holds, rendered; each resource's history is in revision order; a paged list and a watch from its
//! revision together rebuild the current state while events run; an expired watch is told so and a watch with
//! initial events recovers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use gpuclaim_engine::model::Name;
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::served::list::{ListOptions, Selection, list};
use gpuclaim_sim::served::store::{ChangeType, ResourceId, Snapshot};
use gpuclaim_sim::served::watch::{Start, WatchOptions, next, start};
use gpuclaim_sim::served::{resource_of, stored_keys};
use gpuclaim_sim::world::World;
use serde_json::Value;

fn world(story: &str) -> (World, Millis) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("suite").join(story);
    let scenario = parse_scenario(&std::fs::read_to_string(path).unwrap()).unwrap();
    let end = scenario.duration.0;
    (scenario.build(1, EventLog::new(None)).unwrap(), end)
}

fn read(snapshot: &Arc<RwLock<Snapshot>>) -> std::sync::RwLockReadGuard<'_, Snapshot> {
    snapshot.read().unwrap()
}

/// Runs the world in served mode until `until`, syncing the snapshot after every event.
fn run_served(world: &mut World, until: Millis) {
    let sync = |world: &mut World| {
        world.served_sync();
        Ok::<(), ()>(())
    };
    world.run_observed(until, 1_000_000, sync).unwrap().unwrap();
}

const PODS: ResourceId = ResourceId { group: "", plural: "pods" };

/// Every stored object is in the snapshot as rendered now, nothing else of a modelled resource is, and the
/// snapshot's revisions are its history's.
fn one_store(world: &World, snapshot: &Snapshot, story: &str) {
    let keys = stored_keys(&world.api);
    let mut counts: BTreeMap<ResourceId, usize> = BTreeMap::new();
    for key in &keys {
        let resource = resource_of(key.kind);
        *counts.entry(resource).or_default() += 1;
        let stored = snapshot.get(resource, &key.namespace, &key.name);
        let stored = stored.unwrap_or_else(|| panic!("{story} at {:?}: {key} is not served", world.now()));
        let rendered = world.api.render(key).expect("stored");
        assert_eq!(*stored.object, rendered, "{story} at {:?}: {key} is served stale", world.now());
        let version = rendered.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap();
        assert_eq!(version, stored.revision.to_string(), "{story}: {key}");
    }
    for (resource, count) in counts {
        assert_eq!(snapshot.objects(resource, None, None).count(), count, "{story}: {resource:?} serves more");
        let mut last = 0;
        let mut latest: BTreeMap<(Name, Name), u64> = BTreeMap::new();
        for change in snapshot.changes_after(resource, snapshot.since(resource)).unwrap() {
            assert!(change.revision > last, "{story}: {resource:?} history out of order at {}", change.revision);
            last = change.revision;
            latest.insert((change.namespace.clone(), change.name.clone()), change.revision);
        }
        for ((namespace, name), revision) in latest {
            if let Some(stored) = snapshot.get(resource, &namespace, &name) {
                assert_eq!(stored.revision, revision, "{story}: {resource:?} {namespace}/{name}");
            }
        }
    }
    assert!(snapshot.head() >= world.api.revision(), "{story}: the list revision is the newest write's");
    // VirtualMachines (KubeVirt's state, not the store's): every one served, with the status KubeVirt gives it.
    let vms = ResourceId { group: "kubevirt.io", plural: "virtualmachines" };
    let names = world.vm_names();
    assert_eq!(snapshot.objects(vms, None, None).count(), names.len(), "{story}: the VMs served");
    for (namespace, name) in names {
        let stored = snapshot.get(vms, &namespace, &name).unwrap_or_else(|| panic!("{story}: VM {namespace}/{name}"));
        let printable = stored.object.pointer("/status/printableStatus").and_then(Value::as_str);
        assert_eq!(
            printable,
            world.vm_status(&namespace, &name),
            "{story} at {:?}: VM {namespace}/{name}",
            world.now()
        );
        let running = world
            .store()
            .vmi(&namespace, &name)
            .is_some_and(|vmi| vmi.phase == gpuclaim_engine::model::VmiPhase::Running);
        assert_eq!(
            stored.object.pointer("/status/ready"),
            Some(&Value::Bool(running)),
            "{story}: VM {namespace}/{name}"
        );
    }
}

#[test]
fn after_every_event_the_snapshot_serves_exactly_the_store_rendered() {
    for story in [
        "02-start-backoff-avoidance.yaml",
        "03-pin-and-ungate-in-one-update.yaml",
        "07-controller-failover.yaml",
        "12-template-claims-released.yaml",
        "16-tenant-tampering.yaml",
    ] {
        let (mut world, end) = world(story);
        let snapshot = world.serve(10_000);
        one_store(&world, &read(&snapshot), story);
        let mut events = 0;
        world
            .run_observed(end, 1_000_000, |world| {
                world.served_sync();
                one_store(world, &read(&snapshot), story);
                events += 1;
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
        assert!(events > 10, "{story}: {events} events");
    }
}

/// Applies watch events to a reflector's state, as client-go's and kube-rs's do.
fn apply(state: &mut BTreeMap<String, Arc<Value>>, change: ChangeType, object: &Arc<Value>) {
    let key = format!(
        "{}/{}",
        object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default(),
        object.pointer("/metadata/name").and_then(Value::as_str).unwrap()
    );
    match change {
        ChangeType::Added | ChangeType::Modified => state.insert(key, Arc::clone(object)),
        ChangeType::Deleted => state.remove(&key),
    };
}

/// Two nodes and a tenant whose VMs with template claims arrive every 30 s on average and live 5 minutes: pods
/// come and go all the time.
fn churning_world() -> World {
    let text = "name: churn\nduration: 3h\ncluster:\n  classes: [{name: gpu, resourceName: example.com/gpu, mode: \
                Passthrough, maxCount: 1}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: \
                {example.com/gpu: 8}}]\n  tenants: [{name: team}]\nworkloads:\n- {tenant: team, prefix: vm, cpu: '1', \
                memory: 1Gi, arrivalsPerHour: 120, meanLifetime: 5m, gpus: [{claimTemplate: {class: gpu, count: 1}}]}\n";
    parse_scenario(text).unwrap().build(1, EventLog::new(None)).unwrap()
}

#[test]
fn a_paged_list_and_a_watch_from_its_revision_rebuild_the_pods_while_events_run() {
    let mut world = churning_world();
    let end = Millis::seconds(3 * 3600);
    let snapshot = world.serve(10_000);
    run_served(&mut world, Millis(end.0 / 4));
    let everything = Selection::default();
    let mut state: BTreeMap<String, Arc<Value>> = BTreeMap::new();
    let mut options = ListOptions { limit: Some(1), ..ListOptions::default() };
    let mut pages = 0;
    let mut first_revision = None;
    let mut at = Millis(end.0 / 4);
    loop {
        let page = list(&read(&snapshot), PODS, true, &everything, &options).unwrap();
        assert!(page.items.len() <= 1);
        first_revision.get_or_insert(page.revision);
        assert_eq!(Some(page.revision), first_revision, "a continued page reports the first page's revision");
        for item in &page.items {
            apply(&mut state, ChangeType::Added, item);
        }
        pages += 1;
        // Events run between pages.
        at = at + Millis::seconds(20);
        run_served(&mut world, at);
        match page.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => break,
        }
    }
    assert!(pages >= 3, "{pages} pages");
    let options = WatchOptions { resource_version: Some(first_revision.unwrap().to_string()), ..Default::default() };
    let Start::Stream { initial, mut cursor, .. } = start(&read(&snapshot), PODS, &everything, &options).unwrap()
    else {
        panic!("the first page's revision is still in the history");
    };
    assert!(initial.is_empty());
    let mut events = 0;
    for _ in 0..5 {
        for event in next(&read(&snapshot), PODS, &everything, &mut cursor).unwrap() {
            apply(&mut state, event.change, &event.object);
            events += 1;
        }
        let served: BTreeMap<String, Arc<Value>> = read(&snapshot)
            .objects(PODS, None, None)
            .map(|((namespace, name), stored)| (format!("{namespace}/{name}"), Arc::clone(&stored.object)))
            .collect();
        assert_eq!(state, served, "the reflector's pods are the served pods");
        at = at + Millis::seconds(60);
        run_served(&mut world, at);
    }
    assert!(events > 10, "the pods changed while watched: {events} events");
}

#[test]
fn a_watch_from_a_revision_the_history_dropped_expires_and_initial_events_recover() {
    let (mut world, end) = world("12-template-claims-released.yaml");
    let snapshot = world.serve(3);
    let old = read(&snapshot).head();
    run_served(&mut world, end);
    let everything = Selection::default();
    let resume = WatchOptions { resource_version: Some(old.to_string()), ..Default::default() };
    let since = read(&snapshot).since(PODS);
    assert!(since > old, "three changes kept: the start's revision is gone");
    assert_eq!(start(&read(&snapshot), PODS, &everything, &resume).unwrap(), Start::Expired { asked: old, since });
    let recover = WatchOptions {
        resource_version: Some(old.to_string()),
        resource_version_match: Some("NotOlderThan".to_owned()),
        send_initial_events: true,
        allow_bookmarks: true,
    };
    let Start::Stream { initial, initial_events_end, .. } =
        start(&read(&snapshot), PODS, &everything, &recover).unwrap()
    else {
        panic!("initial events never expire");
    };
    assert_eq!(initial.len(), read(&snapshot).objects(PODS, None, None).count());
    assert_eq!(initial_events_end, Some(read(&snapshot).head()));
    let unbookmarked = WatchOptions { allow_bookmarks: false, ..recover };
    let refused = start(&read(&snapshot), PODS, &everything, &unbookmarked).unwrap_err();
    assert_eq!(refused.code(), 422);
}
