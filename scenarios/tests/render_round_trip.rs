//! Every object the twin's actors make, rendered as the API server serves it, reads back as the same compact object
//! (issue 39's first invariant): on suite stories, at checkpoints through each run. Times read back to the second,
//! the API server's precision.

use std::path::Path;

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::controller::runtime::ObjectKey;
use gpuclaim_engine::convert;
use gpuclaim_engine::keys;
use gpuclaim_engine::model::Time;
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::apiserver::Kind;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::World;
use serde_json::Value;

fn second(time: Time) -> Time {
    Time::from_second(time.as_second()).unwrap()
}

fn typed<T: serde::de::DeserializeOwned>(object: Value, key: &ObjectKey) -> T {
    serde_json::from_value(object).unwrap_or_else(|e| panic!("{key}: the render does not read as its kind: {e}"))
}

/// Renders every object of the world's store and reads it back; returns how many were checked.
fn every_object_reads_back(world: &World, story: &str) -> usize {
    let api = &world.api;
    let store = api.store();
    let render = |kind, namespace: &str, name: &str| {
        let key = ObjectKey::new(kind, namespace, name);
        let object = api.render(&key).unwrap_or_else(|| panic!("{story}: {key} is stored but does not render"));
        (key, object)
    };
    let mut checked = 0;
    for claim in store.claims() {
        let (key, object) = render(Kind::Claim, &claim.namespace, &claim.name);
        let mut expected = claim.clone();
        expected.created = second(claim.created);
        assert_eq!(convert::claim_from_kube(&typed::<GPUClaim>(object, &key), ""), expected, "{story}: {key}");
        checked += 1;
    }
    for pod in store.pods() {
        let (key, object) = render(Kind::Pod, &pod.namespace, &pod.name);
        let mut expected = pod.clone();
        expected.created = second(pod.created);
        assert_eq!(convert::pod_from_json(&object, "").unwrap(), expected, "{story}: {key}");
        checked += 1;
    }
    for vmi in store.vmis() {
        let (key, object) = render(Kind::Vmi, &vmi.namespace, &vmi.name);
        assert_eq!(&convert::vmi_from_json(&object, "").unwrap(), vmi, "{story}: {key}");
        checked += 1;
    }
    for usage in store.usages() {
        let (key, object) = render(Kind::Usage, &usage.namespace, &usage.name);
        let mut expected = usage.clone();
        expected.start = second(usage.start);
        expected.end = usage.end.map(second);
        assert_eq!(convert::usage_from_kube(&typed::<GPUUsage>(object, &key), ""), expected, "{story}: {key}");
        checked += 1;
    }
    for node in store.nodes() {
        let (key, object) = render(Kind::Node, "", &node.name);
        assert_eq!(&convert::node_from_kube(&typed(object, &key)).unwrap(), node, "{story}: {key}");
        checked += 1;
    }
    for class in store.classes() {
        let (key, object) = render(Kind::Class, "", &class.name);
        assert_eq!(&convert::class_from_kube(&typed::<GPUClass>(object, &key)), class, "{story}: {key}");
        checked += 1;
    }
    for (namespace, tenant) in store.tenants() {
        let (key, object) = render(Kind::Namespace, "", namespace);
        assert_eq!(convert::vgpu_entitled(&typed(object, &key)), tenant.vgpu_entitled, "{story}: {key}");
        for (quota, budgets) in tenant.quotas() {
            let (key, object) = render(Kind::Quota, namespace, quota);
            assert_eq!(&convert::quota_budgets(&typed(object, &key)).unwrap(), budgets, "{story}: {key}");
            checked += 1;
        }
        checked += 1;
    }
    let settings = ObjectKey::new(Kind::Settings, keys::DEFAULT_CONTROLLER_NAMESPACE, keys::SETTINGS_CONFIGMAP);
    if let Some(object) = api.render(&settings) {
        assert_eq!(convert::settings_from_kube(&typed(object, &settings)), store.settings, "{story}: {settings}");
        checked += 1;
    }
    checked
}

#[test]
fn every_object_of_the_suite_stories_reads_back_from_its_render() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("suite");
    // Held and template claims, budgets, vGPU entitlement, failover, node loss, migrations, tampering, fragmentation.
    let stories = [
        "01-migration-targets-ungated.yaml",
        "03-pin-and-ungate-in-one-update.yaml",
        "04-wait-for-first-consumer.yaml",
        "08-budgets.yaml",
        "09-vgpu-entitlement.yaml",
        "11-node-loss-held-claims-move.yaml",
        "12-template-claims-released.yaml",
        "16-tenant-tampering.yaml",
        "20-fragmented-waits.yaml",
    ];
    for story in stories {
        let text = std::fs::read_to_string(suite.join(story)).unwrap();
        let scenario = parse_scenario(&text).unwrap();
        let mut world = scenario.build(1, EventLog::new(None)).unwrap();
        let (end, steps) = (scenario.duration.0, 12);
        let mut checked = 0;
        for step in 1..=steps {
            world.run(gpuclaim_sim::kernel::Millis(end.0 * step / steps), 1_000_000).unwrap();
            checked += every_object_reads_back(&world, story);
        }
        eprintln!("{story}: {checked} renders read back");
        assert!(checked > 0, "{story}: nothing was checked");
    }
}
