//! Who may scrape the metrics: the bearer token is authenticated with a TokenReview and its user authorised with a
//! SubjectAccessReview for `get` on the non-resource URL `/metrics`, as the API server guards its own `/metrics`
//! (and as controller-runtime's `WithAuthenticationAndAuthorization` filter does). Verdicts are cached briefly, per
//! token, so a scrape every few seconds costs the API server two reviews per token and TTL, not per scrape.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

/// How long a verdict is reused: short enough that a revoked binding or token stops scrapes within seconds.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered at once; beyond it expired verdicts are dropped, then all (a flood of distinct tokens must not
/// grow memory).
pub const CACHED_TOKENS_MAX: usize = 1024;

/// The non-resource URL and verb a scrape is authorised for.
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";

/// What a token may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed {
        user: String,
    },
    /// The token does not authenticate (401): the API server's reason.
    Unauthenticated {
        reason: String,
    },
    /// The user may not get `/metrics` (403).
    Forbidden {
        user: String,
        reason: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("failed to create a TokenReview: {0}")]
    TokenReview(kube::Error),
    #[error("failed to create a SubjectAccessReview for {user}: {source}")]
    SubjectAccessReview { user: String, source: kube::Error },
}

pub struct Access {
    client: kube::Client,
    ttl: Duration,
    /// SHA-256 of the token → (when decided, verdict). Hashes, so no token stays in memory. A lock that does not
    /// poison: std's maps stay valid whatever panics, and an entry lost to a panic costs one more review.
    verdicts: parking_lot::Mutex<BTreeMap<[u8; 32], (Instant, Verdict)>>,
}

impl Access {
    pub fn new(client: kube::Client, ttl: Duration) -> Access {
        Access { client, ttl, verdicts: parking_lot::Mutex::new(BTreeMap::new()) }
    }

    /// The verdict for `token`, from the cache while fresh, else from the two reviews. An API error is returned,
    /// not cached.
    pub async fn check(&self, token: &str) -> Result<Verdict, AccessError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token).await?;
        self.remember(key, verdict.clone());
        Ok(verdict)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Verdict> {
        let verdicts = self.verdicts.lock();
        verdicts.get(key).filter(|(at, _)| at.elapsed() < self.ttl).map(|(_, verdict)| verdict.clone())
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict) {
        let mut verdicts = self.verdicts.lock();
        if verdicts.len() >= CACHED_TOKENS_MAX {
            verdicts.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if verdicts.len() >= CACHED_TOKENS_MAX {
                verdicts.clear();
            }
        }
        verdicts.insert(key, (Instant::now(), verdict));
    }

    async fn review(&self, token: &str) -> Result<Verdict, AccessError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), ..TokenReviewSpec::default() },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AccessError::TokenReview)?;
        let status = reviewed.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        let username = user.username.clone().unwrap_or_default();
        if status.authenticated != Some(true) || username.is_empty() {
            let reason = status.error.filter(|e| !e.is_empty()).unwrap_or_else(|| "the token is not valid".to_owned());
            return Ok(Verdict::Unauthenticated { reason });
        }
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(username.clone()),
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some(METRICS_VERB.to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|source| AccessError::SubjectAccessReview { user: username.clone(), source })?;
        let status = reviewed.status.unwrap_or_default();
        if status.allowed && status.denied != Some(true) {
            Ok(Verdict::Allowed { user: username })
        } else {
            let reason = status.reason.filter(|r| !r.is_empty()).unwrap_or_else(|| "no RBAC rule allows it".to_owned());
            Ok(Verdict::Forbidden { user: username, reason })
        }
    }
}
