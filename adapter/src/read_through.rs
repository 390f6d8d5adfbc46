//! A VMI refused because a claim it names is not in the cache: the cache learns of a claim one watch delivery after
//! the API server stored it, so a tenant that orders a held claim and creates its VM at once (one `kubectl apply` of
//! both) would see the VMI refused `ClaimMissing` and KubeVirt retry it. Before refusing, the VMI webhook reads the
//! namespace's claims from the API server itself, past the watch, and answers again on its view with the claims it
//! did not have. The end-to-end test against the twin found the race (docs/adapter.md, "End to end on the twin").
//!
//! Only that refusal reads: every other answer is the cache's, and a claim the API server does not have either is
//! refused as before. The view is copied for the second answer only (the cache's own copy is the watch's to update).

use gpuclaim_engine::api::GPUClaim;
use gpuclaim_engine::convert;
use gpuclaim_engine::review::{Outcome, Webhook, answer_review};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::shared::{SharedView, ViewPoisoned};

/// The refusal that sends the VMI webhook to the API server.
pub const CLAIM_MISSING: &str = "ClaimMissing";

#[derive(Debug, thiserror::Error)]
pub enum ReadThroughError {
    #[error("failed to list the claims of namespace {namespace:?}: {source}")]
    List { namespace: String, source: kube::Error },
    #[error(transparent)]
    Poisoned(#[from] ViewPoisoned),
    #[error("cannot answer the review again: {0}")]
    Review(String),
}

/// Whether `outcome` is the refusal a read past the cache may turn.
pub fn worth_reading(outcome: &Outcome) -> bool {
    outcome.webhook == Webhook::Vmi && outcome.refusal == Some(CLAIM_MISSING)
}

/// The review answered again with the namespace's claims the view lacks, read from the API server; `None` when it
/// has them all (the refusal stands).
pub async fn answer_again(
    client: &kube::Client,
    view: &SharedView,
    review: &Value,
) -> Result<Option<(Value, Outcome)>, ReadThroughError> {
    let namespace = review.pointer("/request/namespace").and_then(Value::as_str).unwrap_or_default().to_owned();
    let listed = Api::<GPUClaim>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .map_err(|source| ReadThroughError::List { namespace: namespace.clone(), source })?;
    let fresh = {
        let view = view.read()?;
        let lacking: Vec<_> = listed
            .items
            .iter()
            .map(|claim| convert::claim_from_kube(claim, &namespace))
            .filter(|claim| view.claim(&namespace, &claim.name).is_none())
            .collect();
        if lacking.is_empty() {
            return Ok(None);
        }
        let mut fresh = view.clone();
        for claim in lacking {
            fresh.upsert_claim(claim);
        }
        fresh
    };
    answer_review(&fresh, review).map(Some).map_err(|error| ReadThroughError::Review(error.to_string()))
}
