//! Who a request comes from: the bearer tokens the twin issued. The kubeconfig's token is the platform's
//! administrator (`platform-admin`, group `system:masters`); service-account tokens are minted for a ServiceAccount
//! (by a TokenRequest, `kubectl create token`, or the twin's kubelet for a pod) and authenticate as
//! `system:serviceaccount:NS:NAME` with the groups the API server gives every service account. Any other request
//! is refused with 401, as the API server refuses an unauthenticated one (the served twin has no anonymous access).
//!
//! Tokens are opaque random strings from the operating system's source; only their SHA-256 is kept, so a lookup
//! compares digests, never the secret itself. A service account's token stops authenticating once its
//! ServiceAccount is no longer stored (as the API server's token validator checks it; by name only: one created
//! again under that name takes the old tokens back, where the API server also compares uids); tokens do not expire
//! (a TokenRequest's `expirationTimestamp` is reported, not enforced: the twin's virtual clock runs faster than the
//! clients that hold them).

use std::collections::HashMap;
use std::sync::RwLock;

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use gpuclaim_sim::served::resources;
use gpuclaim_sim::served::store::Snapshot;
use gpuclaim_sim::users::User;
use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};

/// A token the operating system's random source could not make.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a token: the system's random source failed")]
pub struct MintError;

/// A token's digest: what is kept of it.
type Digest = [u8; 32];

fn digest_of(token: &str) -> Digest {
    let mut kept = [0u8; 32];
    kept.copy_from_slice(digest(&SHA256, token.as_bytes()).as_ref());
    kept
}

/// Whom a token stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A user the twin knows without an object (the kubeconfig's administrator).
    User(User),
    /// A ServiceAccount, by namespace and name: authenticated while it is stored.
    ServiceAccount { namespace: String, name: String },
}

impl Holder {
    /// The user the holder authenticates as.
    pub fn user(&self) -> User {
        match self {
            Holder::User(user) => user.clone(),
            Holder::ServiceAccount { namespace, name } => User::service_account(namespace, name),
        }
    }
}

/// The tokens the twin issued, by digest.
#[derive(Debug, Default)]
pub struct Tokens {
    holders: RwLock<HashMap<Digest, Holder>>,
}

/// A random token: 32 bytes from the system's source, as hex.
fn random_token() -> Result<String, MintError> {
    let mut bytes = [0u8; 32];
    SystemRandom::new().fill(&mut bytes).map_err(|_| MintError)?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

impl Tokens {
    /// The tokens of a run whose kubeconfig holds `admin_token` (the platform's administrator, `system:masters`).
    pub fn new(admin_token: &str) -> Tokens {
        let tokens = Tokens::default();
        tokens.insert(admin_token, Holder::User(gpuclaim_sim::users::platform_admin()));
        tokens
    }

    fn insert(&self, token: &str, holder: Holder) {
        let mut holders = self.holders.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        holders.insert(digest_of(token), holder);
    }

    /// A new token for the ServiceAccount `namespace`/`service_account` (it authenticates while that ServiceAccount
    /// is stored). The kubelet mints one for each pod; a TokenRequest mints one for its caller.
    pub fn mint(&self, namespace: &str, service_account: &str) -> Result<String, MintError> {
        let token = random_token()?;
        let holder = Holder::ServiceAccount { namespace: namespace.to_owned(), name: service_account.to_owned() };
        self.insert(&token, holder);
        Ok(token)
    }

    /// Whom `token` stands for, if the twin issued it and (for a service account) its ServiceAccount is stored.
    pub fn holder(&self, token: &str, snapshot: &Snapshot) -> Option<Holder> {
        let holders = self.holders.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let holder = holders.get(&digest_of(token))?.clone();
        match &holder {
            Holder::User(_) => Some(holder),
            Holder::ServiceAccount { namespace, name } => {
                let accounts = resources::find("", "v1", "serviceaccounts").expect("served").id();
                snapshot.get(accounts, namespace, name).map(|_| holder)
            }
        }
    }

    /// The user a request's `Authorization: Bearer <token>` authenticates, if any.
    pub fn authenticate(&self, headers: &HeaderMap, snapshot: &Snapshot) -> Option<User> {
        let token = bearer(headers)?;
        self.holder(token, snapshot).map(|holder| holder.user())
    }
}

/// The token of `Authorization: Bearer <token>`, if the header is there and says so.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;

    fn headers(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
        headers
    }

    #[test]
    fn the_admin_token_is_the_platform_admin_in_system_masters() {
        let tokens = Tokens::new("admin-token");
        let snapshot = Snapshot::new(1, 10);
        let admin = tokens.authenticate(&headers("admin-token"), &snapshot).unwrap();
        assert_eq!(admin.username, "platform-admin");
        assert_eq!(admin.groups, ["system:masters", "system:authenticated"]);
        assert_eq!(tokens.authenticate(&headers("other"), &snapshot), None);
        assert_eq!(tokens.authenticate(&HeaderMap::new(), &snapshot), None);
        let mut basic = HeaderMap::new();
        basic.insert(AUTHORIZATION, HeaderValue::from_static("Basic admin-token"));
        assert_eq!(tokens.authenticate(&basic, &snapshot), None);
    }

    #[test]
    fn a_minted_token_is_its_service_account_while_that_is_stored() {
        let tokens = Tokens::new("admin-token");
        let mut snapshot = Snapshot::new(1, 10);
        let token = tokens.mint("tenant-a", "reader").unwrap();
        assert_ne!(token, tokens.mint("tenant-a", "reader").unwrap(), "every token is new");
        assert_eq!(tokens.authenticate(&headers(&token), &snapshot), None, "no ServiceAccount stored");
        let accounts = resources::find("", "v1", "serviceaccounts").unwrap().id();
        snapshot.upsert(accounts, "tenant-a", "reader", 2, json!({"metadata": {"name": "reader"}}));
        let user = tokens.authenticate(&headers(&token), &snapshot).unwrap();
        assert_eq!(user.username, "system:serviceaccount:tenant-a:reader");
        assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:tenant-a", "system:authenticated"]);
        snapshot.remove(accounts, "tenant-a", "reader", 3);
        assert_eq!(tokens.authenticate(&headers(&token), &snapshot), None);
    }
}
