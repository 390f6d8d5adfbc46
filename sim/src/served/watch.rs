//! WATCH as the API server answers it, without the stream: where a watch starts, what it is sent first, and which
//! changes it is sent after that. The HTTPS layer carries the events and the bookmarks; this decides them.
//!
//! - No `resourceVersion`, or `0`: an addition for every selected object, then every change ("get state and start
//!   at most recent").
//! - `resourceVersion=N`: every change after N, then on. N older than the resource's history: the watch has
//!   expired. The API server answers that with a 200 and one `ERROR` event (410 `Expired`) in the stream, not an
//!   HTTP 410, since kubernetes#25369; a client (a reflector, kube-rs's watcher) relists on that event.
//! - `sendInitialEvents=true` (needs `resourceVersionMatch=NotOlderThan` and `allowWatchBookmarks=true`, as the API
//!   server checks): additions for the current state, then a bookmark at the head annotated
//!   `k8s.io/initial-events-end`, then changes. The current state is never older than N, so this never expires:
//!   it is how `kubectl wait` starts, and how it recovers after an expired watch.
//!
//! With a selector, a change is seen through it: an object that stops matching is a deletion to the watch, one that
//! starts matching an addition (as the API server's watch cache filters).

use std::sync::Arc;

use serde_json::Value;

use super::list::Selection;
use super::store::{Change, ChangeType, Expired, ResourceId, Snapshot};

/// The annotation of the bookmark that ends a watch's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How a watch was asked to start.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub send_initial_events: bool,
    pub allow_bookmarks: bool,
}

/// One event a watch is sent.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    pub change: ChangeType,
    pub object: Arc<Value>,
}

/// Where a watch starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Start {
    /// Send `initial`, then (when `initial_events_end`) a bookmark at that revision, then every change after
    /// `cursor`.
    Stream { initial: Vec<WatchEvent>, initial_events_end: Option<u64>, cursor: u64 },
    /// The resume point is older than the history kept: send one `ERROR` event (410 `Expired`) and end.
    Expired { asked: u64, since: u64 },
}

/// A watch the API server refuses before it starts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// 400 `BadRequest` (a malformed revision) or 422 `Invalid` (options that do not go together).
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
    /// 504 `Timeout`: a revision newer than any the server has.
    #[error("Too large resource version: {asked}, current: {head}")]
    TooLarge { asked: u64, head: u64 },
}

impl WatchError {
    pub fn code(&self) -> u16 {
        match self {
            WatchError::BadRequest(_) => 400,
            WatchError::Invalid(_) => 422,
            WatchError::TooLarge { .. } => 504,
        }
    }
}

/// The message of the `ERROR` event an expired watch is sent.
pub fn expired_message(asked: u64, since: u64) -> String {
    format!("too old resource version: {asked} ({since})")
}

/// Where a watch of `resource` selecting `selection` starts, as `options` ask.
pub fn start(
    snapshot: &Snapshot,
    resource: ResourceId,
    selection: &Selection,
    options: &WatchOptions,
) -> Result<Start, WatchError> {
    let head = snapshot.head();
    let asked = match options.resource_version.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<u64>().map_err(|_| WatchError::BadRequest(format!("invalid resource version: {text:?}")))?,
        ),
    };
    let current = || -> Vec<WatchEvent> {
        snapshot
            .objects(resource, selection.namespace.as_deref(), None)
            .filter(|(_, stored)| selection.matches(&stored.object))
            .map(|(_, stored)| WatchEvent { change: ChangeType::Added, object: Arc::clone(&stored.object) })
            .collect()
    };
    if options.send_initial_events {
        if options.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(WatchError::Invalid(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to \
                 NotOlderThan"
                    .to_owned(),
            ));
        }
        if !options.allow_bookmarks {
            return Err(WatchError::Invalid(
                "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"
                    .to_owned(),
            ));
        }
        if let Some(asked) = asked.filter(|asked| *asked > head) {
            return Err(WatchError::TooLarge { asked, head });
        }
        return Ok(Start::Stream { initial: current(), initial_events_end: Some(head), cursor: head });
    }
    match asked {
        None | Some(0) => Ok(Start::Stream { initial: current(), initial_events_end: None, cursor: head }),
        Some(asked) if asked > head => Err(WatchError::TooLarge { asked, head }),
        Some(asked) => match snapshot.changes_after(resource, asked) {
            Ok(_) => Ok(Start::Stream { initial: Vec::new(), initial_events_end: None, cursor: asked }),
            Err(Expired { since }) => Ok(Start::Expired { asked, since }),
        },
    }
}

/// The events of the changes after `cursor` as `selection` sees them, moving `cursor` past them; [`Expired`] when
/// the history no longer holds them (the watch is then sent the `ERROR` event and ends).
pub fn next(
    snapshot: &Snapshot,
    resource: ResourceId,
    selection: &Selection,
    cursor: &mut u64,
) -> Result<Vec<WatchEvent>, Expired> {
    let mut events = Vec::new();
    for change in snapshot.changes_after(resource, *cursor)? {
        *cursor = change.revision;
        events.extend(seen(change, selection));
    }
    *cursor = (*cursor).max(snapshot.head());
    Ok(events)
}

/// A change as a watch with `selection` sees it.
fn seen(change: &Change, selection: &Selection) -> Option<WatchEvent> {
    let before = change.before.as_deref().is_some_and(|before| selection.matches(before));
    let after = change.change != ChangeType::Deleted && selection.matches(&change.object);
    let seen = match (before, after) {
        (false, false) => return None,
        (false, true) => ChangeType::Added,
        (true, true) => ChangeType::Modified,
        (true, false) => ChangeType::Deleted,
    };
    Some(WatchEvent { change: seen, object: Arc::clone(&change.object) })
}
