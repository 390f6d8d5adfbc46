//! Each admission decision on a world of 1,000 nodes and 10,000 claims: the compact path (the twin's) and the
//! whole review path (the live webhook's: JSON in, JSON out). Run: `cargo bench -p gpuclaim-engine --bench admission`.

use std::sync::LazyLock;

use divan::{Bencher, black_box};
use gpuclaim_engine::convert::{pod_from_json, vmi_from_json};
use gpuclaim_engine::fixtures::{self, held_claim};
use gpuclaim_engine::model::View;
use gpuclaim_engine::review::answer_review;
use gpuclaim_engine::rules::{Order, admit_vmi, mutate_pod, validate_order};
use serde_json::{Value, json};

const NODES: usize = 1_000;
const CLAIMS: usize = 10_000;
const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const REFERENCES: &str =
    r#"[{"claim":"claim-4000"},{"claim":"claim-4004"},{"claimTemplate":{"class":"h100","count":2}}]"#;
const ATTACHMENTS: &str = r#"[{"claim":"claim-4000","uid":"u0","class":"h100","count":1},{"claim":"claim-4004","uid":"u1","class":"h100","count":1},{"template":0,"class":"h100","count":2}]"#;

static WORLD: LazyLock<View> = LazyLock::new(|| {
    let mut view = fixtures::world(NODES, CLAIMS);
    // Both held claims of the VMI on one node, so the decision resolves the whole set.
    view.upsert_claim(fixtures::bound(held_claim("tenant-0200", "claim-4004", "h100", 1), "gpu-node-0000"));
    view.upsert_claim(fixtures::bound(held_claim("tenant-0200", "claim-4000", "h100", 1), "gpu-node-0000"));
    view
});

fn main() {
    LazyLock::force(&WORLD);
    divan::main();
}

#[divan::bench]
fn vmi_webhook_compact(bencher: Bencher) {
    let vmi = vmi_from_json(&fixtures::vmi_json("tenant-0200", "vm-1", REFERENCES), "tenant-0200").unwrap();
    assert!(admit_vmi(&WORLD, &vmi).is_ok());
    bencher.bench(|| admit_vmi(black_box(&WORLD), black_box(&vmi)));
}

#[divan::bench]
fn pod_webhook_compact(bencher: Bencher) {
    let pod = fixtures::launcher_pod_json("tenant-0200", "vm-1", ATTACHMENTS, H100, 4);
    let pod = pod_from_json(&pod, "tenant-0200").unwrap();
    assert!(mutate_pod(&WORLD, &pod).unwrap().add_gate);
    bencher.bench(|| mutate_pod(black_box(&WORLD), black_box(&pod)));
}

#[divan::bench]
fn order_webhook_compact(bencher: Bencher) {
    let claim = held_claim("tenant-0200", "new", "h100", 2);
    assert!(validate_order(&WORLD, Order::Create(&claim), "alice").is_ok());
    bencher.bench(|| validate_order(black_box(&WORLD), Order::Create(black_box(&claim)), black_box("alice")));
}

fn review(kind: Value, resource: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE", "namespace": "tenant-0200",
            "name": "x", "kind": kind, "resource": {"group": kind["group"], "version": kind["version"], "resource": resource},
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]}, "object": object, "dryRun": false
        }
    })
}

#[divan::bench]
fn vmi_webhook_review(bencher: Bencher) {
    let kind = json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"});
    let review = review(kind, "virtualmachineinstances", fixtures::vmi_json("tenant-0200", "vm-1", REFERENCES));
    assert!(answer_review(&WORLD, &review).unwrap().1.patched);
    bencher.bench(|| answer_review(black_box(&WORLD), black_box(&review)));
}

#[divan::bench]
fn pod_webhook_review(bencher: Bencher) {
    let kind = json!({"group": "", "version": "v1", "kind": "Pod"});
    let review = review(kind, "pods", fixtures::launcher_pod_json("tenant-0200", "vm-1", ATTACHMENTS, H100, 4));
    assert!(answer_review(&WORLD, &review).unwrap().1.patched);
    bencher.bench(|| answer_review(black_box(&WORLD), black_box(&review)));
}

#[divan::bench]
fn order_webhook_review(bencher: Bencher) {
    let kind = json!({"group": "gpu.cozystack.io", "version": "v1alpha1", "kind": "GPUClaim"});
    let claim = json!({"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
        "metadata": {"name": "new", "namespace": "tenant-0200"}, "spec": {"className": "h100", "count": 2}});
    let review = review(kind, "gpuclaims", claim);
    assert!(answer_review(&WORLD, &review).unwrap().1.refusal.is_none());
    bencher.bench(|| answer_review(black_box(&WORLD), black_box(&review)));
}
