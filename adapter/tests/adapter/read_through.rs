//! The VMI webhook reads the claims past its cache before refusing a VMI for a claim it lacks (src/read_through.rs):
//! the race the end-to-end test found, a claim and its VM created at once.

use gpuclaim_adapter::read_through;
use gpuclaim_adapter::webhook::answer_body;
use gpuclaim_engine::review::{Webhook, answer_review};
use serde_json::Value;

use crate::controller::cluster_objects;
use crate::fake_store::{FakeStore, rest_path};
use crate::support::{self, FakeApi};

fn vmi_review() -> Value {
    let reviews = support::example_reviews();
    reviews.into_iter().find(|(name, _)| name == "vmi-trainer.json").expect("the example VMI review").1
}

#[tokio::test]
async fn a_vmi_naming_a_claim_the_cache_lacks_is_answered_with_the_claim_the_api_server_has() {
    let review = vmi_review();
    let body = serde_json::to_vec(&review).unwrap();
    let full = support::example_view();
    let (expected, _) = answer_review(&full.read().unwrap(), &review).unwrap();
    // The cache has not seen train-a yet.
    let view = support::example_view();
    view.write().unwrap().remove_claim("tenant-a", "train-a").expect("the example has train-a");
    let (refused, outcome) = answer_body(&view, Webhook::Vmi, &body).unwrap();
    assert_eq!(outcome.refusal, Some("ClaimMissing"), "{refused}");
    assert!(read_through::worth_reading(&outcome));
    // The API server has it.
    let store = FakeStore::default();
    let claim = cluster_objects().into_iter().find(|o| o["kind"] == "GPUClaim" && o["metadata"]["name"] == "train-a");
    let claim = claim.expect("train-a among the example objects");
    let path = rest_path(&claim);
    store.put(&path, claim);
    let api = FakeApi::start(store.router()).await;
    let (answer, outcome) = read_through::answer_again(&api.client, &view, &review).await.unwrap().expect("answered");
    assert_eq!(outcome.refusal, None, "{answer}");
    assert_eq!(answer, expected, "the answer a cache holding the claim gives");
    assert!(view.read().unwrap().claim("tenant-a", "train-a").is_none(), "the cache stays the watch's");
    let listed = store
        .requests()
        .iter()
        .filter(|r| r.path == "/apis/gpu.cozystack.io/v1alpha1/namespaces/tenant-a/gpuclaims")
        .count();
    assert_eq!(listed, 1, "one list of the VMI's namespace");
    // A claim the API server does not have either: the refusal stands.
    store.delete(&path);
    assert!(read_through::answer_again(&api.client, &view, &review).await.unwrap().is_none());
}

#[tokio::test]
async fn only_a_vmi_refused_for_a_missing_claim_reads_past_the_cache() {
    let view = support::example_view();
    for (name, review) in support::example_reviews() {
        let webhook = match name.split('-').next() {
            Some("vmi") => Webhook::Vmi,
            Some("pod") => Webhook::Pod,
            _ => Webhook::Order,
        };
        let (_, outcome) = answer_body(&view, webhook, &serde_json::to_vec(&review).unwrap()).unwrap();
        assert!(!read_through::worth_reading(&outcome), "{name}: {outcome}");
    }
}
