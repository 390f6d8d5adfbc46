use std::collections::BTreeMap;
use std::sync::Arc;

use gpuclaim_engine::api::{ClaimPhase, GPUClaim};
use gpuclaim_engine::convert;
use gpuclaim_engine::model::{Claim, Name, Node, Pod, PodPhase, Reason, Time, VmiRef};
use serde_json::{Value, json};

use super::*;

fn at(seconds: i64, millis: i64) -> Time {
    Time::from_millisecond(seconds * 1000 + millis).unwrap()
}

fn claim() -> Claim {
    Claim {
        namespace: "tenant-a".into(),
        name: "train".into(),
        uid: "uid-train".into(),
        resource_version: "1042".into(),
        created: at(1_800_000_000, 0),
        class: "h100".into(),
        count: 2,
        phase: ClaimPhase::Bound,
        node: Some("gpu-1".into()),
        finalizer: true,
        ..Claim::default()
    }
}

#[test]
fn a_uid_is_a_version_8_uuid_stable_per_kind_namespace_and_name() {
    let uid = uid_of(Kind::Node.name(), "", "gpu-1");
    assert_eq!(uid, uid_of(Kind::Node.name(), "", "gpu-1"));
    let text = uid.as_str();
    assert_eq!(text.len(), 36);
    assert_eq!(text.split('-').map(str::len).collect::<Vec<_>>(), [8, 4, 4, 4, 12]);
    assert_eq!(&text[14..15], "8", "version 8: {text}");
    assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"), "RFC 9562 variant: {text}");
    assert_ne!(uid, uid_of(Kind::Node.name(), "", "gpu-2"));
    assert_ne!(uid, uid_of(Kind::Namespace.name(), "", "gpu-1"));
    assert_ne!(uid_of(Kind::Claim.name(), "a", "b-c"), uid_of(Kind::Claim.name(), "a-b", "c"));
}

#[test]
fn times_are_written_as_the_api_server_writes_them() {
    assert_eq!(timestamp(at(1_800_000_000, 999)), "2027-01-15T08:00:00Z");
}

#[test]
fn a_bound_claim_renders_as_the_controller_writes_it_and_reads_back() {
    let claim = claim();
    let object = claim::render(&claim, None);
    assert_eq!(object["apiVersion"], "gpu.cozystack.io/v1alpha1");
    assert_eq!(object["metadata"]["finalizers"], json!(["gpu.cozystack.io/release"]));
    assert_eq!(object["metadata"]["creationTimestamp"], "2027-01-15T08:00:00Z");
    assert_eq!(object["spec"], json!({"className": "h100", "count": 2}));
    assert_eq!(object["status"]["phase"], "Bound");
    assert_eq!(object["status"]["nodeName"], "gpu-1");
    let condition = &object["status"]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"], &condition["reason"]),
        (&json!("Bound"), &json!("True"), &json!("Bound"))
    );
    assert_eq!(condition["message"], "bound to node gpu-1");
    assert!(object["metadata"].get("labels").is_none(), "a held claim carries no template mark");
    let typed: GPUClaim = serde_json::from_value(object).unwrap();
    assert_eq!(convert::claim_from_kube(&typed, ""), claim);
}

#[test]
fn a_waiting_template_claim_says_why_and_carries_its_mark_and_owner() {
    let mut claim = claim();
    claim.phase = ClaimPhase::Pending;
    claim.node = None;
    claim.template = true;
    claim.owner_vmi = Some(VmiRef { name: "vm".into(), uid: "uid-vmi".into() });
    claim.pending = Some(Reason { reason: "NoCapacity".into(), message: "no node has 2 free".into() });
    let object = claim::render(&claim, None);
    assert_eq!(object["metadata"]["labels"], json!({"gpu.cozystack.io/template-claim": "true"}));
    assert_eq!(object["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(object["status"]["conditions"][0]["status"], "False");
    assert_eq!(object["status"]["conditions"][0]["reason"], "NoCapacity");
    assert!(object["status"].get("nodeName").is_none());
    let typed: GPUClaim = serde_json::from_value(object).unwrap();
    assert_eq!(convert::claim_from_kube(&typed, ""), claim);
}

#[test]
fn a_manifest_keeps_what_the_twin_does_not_model_and_shows_what_it_does() {
    let mut claim = claim();
    let written = json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClaim",
        "metadata": {
            "name": "train",
            "namespace": "tenant-a",
            "labels": {"team": "vision", "gpu.cozystack.io/template-claim": "true"},
            "annotations": {"note": "kept"},
            "finalizers": ["example.com/audit"],
        },
        "spec": {"className": "h100", "count": 2},
        "status": {"conditions": [{"type": "Audited", "status": "True", "lastTransitionTime": "2027-01-15T08:00:00Z"}]},
    });
    let since = at(1_800_000_060, 0);
    let manifest = Manifest {
        json: written,
        generation: 1,
        transitions: BTreeMap::from([("Bound".to_owned(), ("True".to_owned(), since))]),
        ..Manifest::default()
    };
    let object = claim::render(&claim, Some(&manifest));
    // Not modelled: kept as written.
    assert_eq!(object["metadata"]["labels"], json!({"team": "vision"}), "the mark is the compact claim's");
    assert_eq!(object["metadata"]["annotations"], json!({"note": "kept"}));
    assert_eq!(object["metadata"]["finalizers"], json!(["example.com/audit", "gpu.cozystack.io/release"]));
    assert_eq!(object["metadata"]["generation"], 1);
    // Modelled: the compact claim's, with the transition time recorded.
    let conditions = object["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 2);
    assert_eq!(conditions[0]["type"], "Audited");
    assert_eq!(conditions[1]["lastTransitionTime"], "2027-01-15T08:01:00Z");
    assert_eq!(object["metadata"]["uid"], "uid-train");
    // Deleting: the manifest's time if it has one, else the creation time.
    claim.deleting = true;
    let object = claim::render(&claim, Some(&manifest));
    assert_eq!(object["metadata"]["deletionTimestamp"], "2027-01-15T08:00:00Z");
    let mut stamped = manifest.clone();
    stamped.json["metadata"]["deletionTimestamp"] = "2027-01-15T09:00:00Z".into();
    let object = claim::render(&claim, Some(&stamped));
    assert_eq!(object["metadata"]["deletionTimestamp"], "2027-01-15T09:00:00Z");
    claim.deleting = false;
    claim.finalizer = false;
    let object = claim::render(&claim, Some(&stamped));
    assert!(object["metadata"].get("deletionTimestamp").is_none());
    assert_eq!(object["metadata"]["finalizers"], json!(["example.com/audit"]));
}

fn launcher() -> Pod {
    Pod {
        namespace: "tenant-a".into(),
        name: "virt-launcher-vm-x".into(),
        uid: "uid-virt-launcher-vm-x".into(),
        resource_version: "77".into(),
        created: at(1_800_000_000, 250),
        labels: Arc::new(BTreeMap::from([("gpu.cozystack.io/claims".to_owned(), "true".to_owned())])),
        scheduling_gates: vec![Name::from("gpu.cozystack.io/placement")],
        cpu_millis: 1500,
        memory_bytes: 17 << 30,
        devices: Arc::new(BTreeMap::from([("nvidia.com/H100".to_owned(), 2)])),
        owner_vmi: Some(VmiRef { name: "vm".into(), uid: "uid-vmi".into() }),
        waiting: Some(Reason { reason: "NoCapacity".into(), message: "no node".into() }),
        ..Pod::default()
    }
}

#[test]
fn a_pod_an_actor_made_renders_one_container_with_its_sums() {
    let pod = launcher();
    let object = pod::render(&pod, None);
    let container = &object["spec"]["containers"][0];
    assert_eq!(container["name"], "compute");
    assert_eq!(container["resources"]["requests"], json!({"cpu": "1500m", "memory": "17Gi", "nvidia.com/H100": "2"}));
    assert_eq!(container["resources"]["limits"], json!({"nvidia.com/H100": "2"}));
    assert_eq!(object["spec"]["schedulingGates"], json!([{"name": "gpu.cozystack.io/placement"}]));
    let types: Vec<&Value> = object["status"]["conditions"].as_array().unwrap().iter().map(|c| &c["type"]).collect();
    assert_eq!(types, [&json!("gpu.cozystack.io/Placement"), &json!("PodScheduled")]);
    assert_eq!(object["status"]["conditions"][1]["reason"], "SchedulingGated");
    let mut expected = pod.clone();
    expected.created = at(1_800_000_000, 0);
    expected.read_attachments();
    assert_eq!(convert::pod_from_json(&object, "").unwrap(), expected);
}

#[test]
fn a_bound_pod_is_scheduled_and_a_client_pod_keeps_its_containers() {
    let mut pod = launcher();
    pod.scheduling_gates.clear();
    pod.node_name = Some("gpu-1".into());
    pod.phase = PodPhase::Running;
    pod.waiting = None;
    let manifest = Manifest {
        json: json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "virt-launcher-vm-x"},
            "spec": {"containers": [{"name": "main", "image": "example.com/app:1", "resources": {"requests": {"cpu": "1500m", "memory": "17Gi"}, "limits": {"nvidia.com/H100": "2"}}}],
                     "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}},
        }),
        ..Manifest::default()
    };
    let object = pod::render(&pod, Some(&manifest));
    assert_eq!(object["spec"]["containers"][0]["image"], "example.com/app:1");
    assert_eq!(object["spec"]["nodeName"], "gpu-1");
    assert!(object["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].is_array());
    assert_eq!(object["status"]["phase"], "Running");
    let conditions = object["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1);
    assert_eq!((&conditions[0]["type"], &conditions[0]["status"]), (&json!("PodScheduled"), &json!("True")));
    assert!(conditions[0].get("reason").is_none(), "no empty strings: {conditions:?}");
    let mut expected = pod.clone();
    expected.created = at(1_800_000_000, 0);
    expected.read_attachments();
    assert_eq!(convert::pod_from_json(&object, "").unwrap(), expected);
}

#[test]
fn a_lost_node_is_unknown_and_reads_back_not_ready() {
    let node = Node {
        name: "gpu-1".into(),
        resource_version: "9".into(),
        labels: BTreeMap::from([("pool".to_owned(), "h100".to_owned())]),
        unschedulable: true,
        ready: false,
        cpu_millis: 64_000,
        memory_bytes: 512 << 30,
        devices: BTreeMap::from([("nvidia.com/H100".to_owned(), 8)]),
        ..Node::default()
    };
    let object = node::render(&node, None);
    assert_eq!(object["metadata"]["uid"], json!(uid_of(Kind::Node.name(), "", "gpu-1").as_str()));
    assert_eq!(object["spec"]["unschedulable"], true);
    assert_eq!(
        object["status"]["allocatable"],
        json!({"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/H100": "8"})
    );
    assert_eq!(object["status"]["conditions"][0]["status"], "Unknown");
    let typed = serde_json::from_value(object).unwrap();
    assert_eq!(convert::node_from_kube(&typed).unwrap(), node);
}

#[test]
fn a_quota_owns_its_gpu_budgets_and_keeps_the_other_keys() {
    let manifest = Manifest {
        json: json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                     "spec": {"hard": {"requests.cpu": "10", "requests.gpu.cozystack.io/a100": "4"}}}),
        ..Manifest::default()
    };
    let budgets = BTreeMap::from([("h100".to_owned(), 8)]);
    let object = quota::render("tenant-a", "gpus", &budgets, Some(&manifest));
    assert_eq!(object["spec"]["hard"], json!({"requests.cpu": "10", "requests.gpu.cozystack.io/h100": "8"}));
    let typed = serde_json::from_value(object).unwrap();
    assert_eq!(convert::quota_budgets(&typed).unwrap(), budgets);
}

#[test]
fn a_namespace_carries_its_name_label_and_its_entitlement() {
    let object = namespace::render("tenant-a", true, None);
    assert_eq!(
        object["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "tenant-a", "gpu.cozystack.io/vgpu-entitled": "true"})
    );
    assert_eq!(object["status"]["phase"], "Active");
    let typed = serde_json::from_value(object).unwrap();
    assert!(convert::vgpu_entitled(&typed));
    let object = namespace::render("tenant-a", false, None);
    assert_eq!(object["metadata"]["labels"], json!({"kubernetes.io/metadata.name": "tenant-a"}));
}
