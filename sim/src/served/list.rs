//! LIST as the API server answers it: the objects of one resource that match a namespace and selectors, in
//! (namespace, name) order, a page at a time.
//!
//! A list reports the snapshot's head revision. With `limit`, it returns that many and a `continue` token holding
//! the first page's revision and the last key served. A continued page serves the objects after that key as they
//! are now, and reports the first page's revision; a client then watches from that revision and sees every change
//! made between pages (a change to an object already listed arrives as a modification, a deletion of one never
//! listed is harmless). That is sound for a reflector, as the API server's own answer is, while the revision is
//! still inside the resource's history; after that the token has expired (`410 Gone`), as the API server's does
//! once etcd compacted it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gpuclaim_engine::model::Name;
use serde_json::{Value, json};

use super::select::{FieldSelector, LabelSelector};
use super::store::{ResourceId, Snapshot};

/// What a list or a watch selects: a namespace (none: all), labels and fields.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

/// Field selector labels whose value is a boolean the API server writes even when the field is unset.
const BOOLEAN_FIELDS: [&str; 2] = ["spec.unschedulable", "spec.hostNetwork"];

/// The value of a field selector's label in `object`: the field at that dotted path, written as text (an unset
/// boolean field reads `false`, as the API server's field sets write it; another unset field reads empty).
pub fn field_value<'a>(object: &'a Value, label: &str) -> Option<Cow<'a, str>> {
    let found = label.split('.').try_fold(object, |at, part| at.get(part));
    match found {
        Some(Value::String(text)) => Some(Cow::Borrowed(text)),
        Some(Value::Bool(flag)) => Some(Cow::Owned(flag.to_string())),
        Some(Value::Number(number)) => Some(Cow::Owned(number.to_string())),
        _ if BOOLEAN_FIELDS.contains(&label) => Some(Cow::Borrowed("false")),
        _ => None,
    }
}

impl Selection {
    /// Whether `object` is selected (its namespace, its labels, its fields).
    pub fn matches(&self, object: &Value) -> bool {
        let metadata = object.get("metadata");
        if let Some(namespace) = &self.namespace {
            let own = metadata.and_then(|m| m.get("namespace")).and_then(Value::as_str).unwrap_or_default();
            if own != namespace {
                return false;
            }
        }
        if !self.labels.is_empty() {
            let labels: BTreeMap<String, String> = metadata
                .and_then(|m| m.get("labels"))
                .and_then(|labels| serde_json::from_value(labels.clone()).ok())
                .unwrap_or_default();
            if !self.labels.matches(&labels) {
                return false;
            }
        }
        self.fields.is_empty() || self.fields.matches(|label| field_value(object, label))
    }
}

/// What a list is asked for beyond its selection.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub limit: Option<usize>,
    /// The `continue` token of the page before.
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub revision: u64,
    pub items: Vec<Arc<Value>>,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
}

/// A list the API server refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// 400: a malformed token or option.
    #[error("{0}")]
    BadRequest(String),
    /// 410 `Expired`: the continue token's revision left the history, or an exact revision no longer served.
    #[error("{0}")]
    Expired(String),
}

/// The API server's message for a continue token whose revision was compacted.
pub const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. \
     You can start a new list without the continue parameter, or use the continue token in this response to \
     retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - \
     objects that were created, modified, or deleted between the time the first chunk was returned and now may \
     show up in the list.";

/// A continue token: the first page's revision and the last key served (`namespace/name`, or `name`).
fn encode(revision: u64, last: &(Name, Name)) -> String {
    let start = match last.0.is_empty() {
        true => last.1.to_string(),
        false => format!("{}/{}", last.0, last.1),
    };
    URL_SAFE_NO_PAD.encode(json!({"v": "meta.k8s.io/v1", "rv": revision, "start": start}).to_string())
}

fn decode(token: &str, namespaced: bool) -> Result<(u64, (Name, Name)), ListError> {
    let bad = || ListError::BadRequest(format!("continue key is not valid: {token:?}"));
    let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = value.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    let key = match (namespaced, start.split_once('/')) {
        (true, Some((namespace, name))) => (Name::from(namespace), Name::from(name)),
        (false, None) => (Name::default(), Name::from(start)),
        _ => return Err(bad()),
    };
    Ok((revision, key))
}

/// Lists `resource` (`namespaced`: keyed by namespace and name) as `selection` and `options` ask.
pub fn list(
    snapshot: &Snapshot,
    resource: ResourceId,
    namespaced: bool,
    selection: &Selection,
    options: &ListOptions,
) -> Result<Page, ListError> {
    let head = snapshot.head();
    if options.resource_version_match.as_deref() == Some("Exact") {
        let asked = options.resource_version.as_deref().unwrap_or_default();
        if asked.parse::<u64>() != Ok(head) {
            return Err(ListError::Expired(format!(
                "too old resource version: {asked} ({head}): the twin serves lists at its newest revision only"
            )));
        }
    }
    let (revision, after) = match &options.continue_token {
        Some(token) => {
            let (revision, after) = decode(token, namespaced)?;
            if revision < snapshot.since(resource) {
                return Err(ListError::Expired(CONTINUE_EXPIRED.to_owned()));
            }
            (revision, Some(after))
        }
        None => (head, None),
    };
    let limit = options.limit.filter(|limit| *limit > 0);
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    let namespace = selection.namespace.as_deref();
    for (key, stored) in snapshot.objects(resource, namespace, after.as_ref()) {
        if !selection.matches(&stored.object) {
            continue;
        }
        if limit.is_some_and(|limit| items.len() == limit) {
            more = true;
            break;
        }
        items.push(Arc::clone(&stored.object));
        last = Some(key);
    }
    let continue_token = match (more, last) {
        (true, Some(last)) => Some(encode(revision, last)),
        _ => None,
    };
    Ok(Page { revision, items, continue_token })
}
