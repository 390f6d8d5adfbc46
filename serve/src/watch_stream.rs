//! A WATCH answered as a stream: one JSON object per line (`{"type": ..., "object": ...}`), sent as the snapshot
//! changes, with bookmarks, until the client goes, its `timeoutSeconds` pass, or the server stops.
//!
//! Where the watch starts and which changes it is sent are `gpuclaim_sim::served::watch`'s decisions; this carries
//! them. A watch keeps only a cursor into the snapshot's history and wakes when the head moves, so an open watch
//! costs nothing while nothing changes, and a slow one never holds back the world: if it falls out of the history
//! it is sent the `ERROR` event (410 `Expired`) and ends, and its client relists.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use gpuclaim_sim::served::list::Selection;
use gpuclaim_sim::served::resources::Resource;
use gpuclaim_sim::served::status;
use gpuclaim_sim::served::store::{Expired, ResourceId};
use gpuclaim_sim::served::table::{self, TableOptions};
use gpuclaim_sim::served::watch::{self, INITIAL_EVENTS_END, Start, WatchError, WatchEvent, WatchOptions};
use serde_json::{Value, json};

use crate::respond::{body_response, stream_headers};
use crate::shared::Shared;

/// How often a watch that allows bookmarks is sent one while nothing it selects changes (the API server's is about
/// a minute; shorter here, so a client's resume point keeps up with a fast-running twin).
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// How long a watch lasts without `timeoutSeconds` (the API server picks 30 to 60 minutes).
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(1800);

/// A watch as asked.
pub struct WatchRequest {
    resource: &'static Resource,
    selection: Selection,
    options: WatchOptions,
    timeout: Duration,
    /// Events' objects as one-row Tables (the first with the column definitions), when asked.
    table: Option<TableOptions>,
}

impl WatchRequest {
    pub fn new(
        resource: &'static Resource,
        selection: Selection,
        parameters: &BTreeMap<String, String>,
        table: Option<TableOptions>,
    ) -> Self {
        let flag = |name: &str| parameters.get(name).is_some_and(|value| value == "true" || value == "1");
        let options = WatchOptions {
            resource_version: parameters.get("resourceVersion").cloned(),
            resource_version_match: parameters.get("resourceVersionMatch").cloned(),
            send_initial_events: flag("sendInitialEvents"),
            allow_bookmarks: flag("allowWatchBookmarks"),
        };
        let timeout = parameters
            .get("timeoutSeconds")
            .and_then(|seconds| seconds.parse::<u64>().ok())
            .filter(|seconds| *seconds > 0)
            .map_or(TIMEOUT_DEFAULT, Duration::from_secs);
        WatchRequest { resource, selection, options, timeout, table }
    }
}

fn line(change: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": change, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// How a watch's events carry their objects: as they are, or as one-row Tables.
struct Rows {
    resource: &'static Resource,
    table: Option<TableOptions>,
}

impl Rows {
    fn line(&mut self, shared: &Shared, event: &WatchEvent) -> Bytes {
        let Some(options) = &mut self.table else { return line(event.change.name(), &event.object) };
        let row = table::of_object(self.resource, &event.object, shared.virtual_now(), options);
        // The column definitions come with the first event only, as the API server sends them.
        options.no_headers = true;
        line(event.change.name(), &row)
    }
}

/// A bookmark at `revision`: the kind's object with only its resourceVersion (and the initial-events-end mark).
fn bookmark(resource: &Resource, revision: u64, initial_events_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    line("BOOKMARK", &json!({"kind": resource.kind, "apiVersion": resource.api_version(), "metadata": metadata}))
}

fn expired(asked: u64, since: u64) -> Bytes {
    line("ERROR", &status::gone_expired(&watch::expired_message(asked, since)))
}

/// Answers a watch: a 200 stream, or the refusal's `Status`.
pub fn respond(shared: &Arc<Shared>, request: WatchRequest) -> Response {
    let id = ResourceId { group: request.resource.group, plural: request.resource.plural };
    let started = {
        let snapshot = shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        watch::start(&snapshot, id, &request.selection, &request.options)
    };
    let (initial, initial_events_end, cursor) = match started {
        Err(refusal) => return refused(&refusal),
        Ok(Start::Expired { asked, since }) => return body_response(Body::from(expired(asked, since))),
        Ok(Start::Stream { initial, initial_events_end, cursor }) => (initial, initial_events_end, cursor),
    };
    let mut rows = Rows { resource: request.resource, table: request.table };
    let mut first = Vec::new();
    for event in &initial {
        first.extend_from_slice(&rows.line(shared, event));
    }
    if let Some(revision) = initial_events_end {
        first.extend_from_slice(&bookmark(request.resource, revision, true));
    }
    let stream = Stream {
        shared: Arc::clone(shared),
        head: shared.head.clone(),
        stopping: shared.stopping.clone(),
        id,
        first: (!first.is_empty()).then(|| Bytes::from(first)),
        cursor,
        deadline: tokio::time::Instant::now() + request.timeout,
        bookmarks: request.options.allow_bookmarks,
        resource: request.resource,
        selection: request.selection,
        rows,
        ended: false,
    };
    let body = futures::stream::unfold(stream, |mut stream| async move {
        let chunk = stream.next().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(chunk), stream))
    });
    body_response(Body::from_stream(body))
}

fn refused(refusal: &WatchError) -> Response {
    let (reason, code) = match refusal {
        WatchError::BadRequest(_) => ("BadRequest", 400),
        WatchError::Invalid(_) => ("Invalid", 422),
        WatchError::TooLarge { .. } => ("Timeout", 504),
    };
    let body = status::status(code, reason, &refusal.to_string(), None);
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = axum::http::StatusCode::from_u16(code).expect("a valid code");
    stream_headers(response.headers_mut());
    response
}

/// One open watch.
struct Stream {
    shared: Arc<Shared>,
    head: tokio::sync::watch::Receiver<u64>,
    stopping: tokio::sync::watch::Receiver<bool>,
    id: ResourceId,
    resource: &'static Resource,
    selection: Selection,
    rows: Rows,
    /// The initial events (and their bookmark), sent first.
    first: Option<Bytes>,
    cursor: u64,
    deadline: tokio::time::Instant,
    bookmarks: bool,
    ended: bool,
}

impl Stream {
    /// The next chunk to send, or `None` when the watch ends.
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        loop {
            if self.ended || *self.stopping.borrow() {
                return None;
            }
            let changes = {
                let snapshot = self.shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
                watch::next(&snapshot, self.id, &self.selection, &mut self.cursor)
            };
            match changes {
                Ok(events) if !events.is_empty() => {
                    let mut chunk = Vec::new();
                    for event in &events {
                        chunk.extend_from_slice(&self.rows.line(&self.shared, event));
                    }
                    return Some(Bytes::from(chunk));
                }
                Ok(_) => {}
                Err(Expired { since }) => {
                    self.ended = true;
                    return Some(expired(self.cursor, since));
                }
            }
            let bookmark_due = tokio::time::sleep(BOOKMARK_INTERVAL);
            tokio::select! {
                changed = self.head.changed() => if changed.is_err() { return None },
                _ = self.stopping.changed() => return None,
                () = tokio::time::sleep_until(self.deadline) => return None,
                () = bookmark_due, if self.bookmarks => {
                    return Some(bookmark(self.resource, self.cursor, false));
                }
            }
        }
    }
}
