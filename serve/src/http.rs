//! The served twin's HTTP side: one handler that reads a request as the API server does ([`crate::route`]),
//! authenticates it ([`crate::auth`]: 401 when no token the twin issued), authorises it (RBAC from the stored roles
//! and bindings: 403 as the API server words it), answers reads from the snapshot, reviews from the snapshot and
//! the tokens ([`crate::reviews`]), and everything else with the API server's `Status`.
//!
//! Reads never reach the world's thread: GET and LIST read the snapshot under its read lock; a WATCH streams from
//! it ([`crate::watch_stream`]). Writes go to the world's thread, which applies them between two events
//! (`gpuclaim_sim::served::writes`) and answers once the snapshot shows them.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpuclaim_sim::served::list::{ListError, ListOptions, Selection, list};
use gpuclaim_sim::served::rbac::Attributes;
use gpuclaim_sim::served::resources::Resource;
use gpuclaim_sim::served::select::{FieldOperator, FieldSelector, LabelSelector};
use gpuclaim_sim::served::store::{ResourceId, Snapshot};
use gpuclaim_sim::served::table::{self, TableOptions};
use gpuclaim_sim::served::{discovery, status};
use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::respond::{json_response, status_response};
use crate::reviews::{self, Review};
use crate::route::{self, Endpoint, Target};
use crate::shared::Shared;
use crate::watch_stream::{self, WatchRequest};
use gpuclaim_sim::served::writes::{Verb, WriteRequest};
use gpuclaim_sim::users::User;

/// How a read is answered: a Table (and its options) or plain JSON.
pub fn table_options(accept: &str, parameters: &BTreeMap<String, String>) -> Result<Option<TableOptions>, Value> {
    let Some(version) = table::wants_table(accept) else { return Ok(None) };
    let include = table::include_object(parameters.get("includeObject").map(String::as_str))
        .map_err(|error| status::bad_request(&error.to_string()))?;
    Ok(Some(TableOptions { version, include, no_headers: false }))
}

/// A Table answer, with its content type.
fn table_response(options: &TableOptions, body: &Value) -> Response {
    let mut response = json_response(200, body);
    let content_type = HeaderValue::from_static(options.version.content_type());
    response.headers_mut().insert(header::CONTENT_TYPE, content_type);
    response
}

/// The largest request body taken (the API server's limit is 3 MiB for most writes).
pub const BODY_MAX: usize = 3 << 20;

/// The router: every path goes to one handler.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn read(snapshot: &RwLock<Snapshot>) -> std::sync::RwLockReadGuard<'_, Snapshot> {
    snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The query parameters of a request, by name (the last one of a name wins, as the API server's decoder takes it).
fn query(request: &Request) -> std::collections::BTreeMap<String, String> {
    let text = request.uri().query().unwrap_or_default();
    form_urlencoded::parse(text.as_bytes()).map(|(key, value)| (key.into_owned(), value.into_owned())).collect()
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let parameters = query(&request);
    let endpoint = route::endpoint(&path);
    // Authenticated, then authorised, before anything is read or written (the API server's filter order).
    let user = {
        let snapshot = read(&shared.snapshot);
        let Some(user) = shared.tokens.authenticate(request.headers(), &snapshot) else {
            return status_response(status::unauthorized());
        };
        if impersonates(request.headers()) {
            return status_response(status::bad_request(IMPERSONATION_NOT_SERVED));
        }
        let attributes = attributes(request.method(), endpoint.as_ref().ok(), &path, &parameters);
        let decision = shared.authorizer.authorize(&snapshot, &user, &attributes);
        if !decision.allowed() {
            return status_response(status::forbidden(&attributes, &user.username, decision.reason()));
        }
        user
    };
    let Ok(endpoint) = endpoint else { return status_response(status::not_found_path()) };
    let accept = request.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    if !matches!(endpoint, Endpoint::Resource(_)) && request.method() != Method::GET {
        return status_response(status::method_not_allowed());
    }
    match endpoint {
        Endpoint::Version => json_response(200, &discovery::version()),
        Endpoint::Health => (StatusCode::OK, "ok").into_response(),
        Endpoint::Api | Endpoint::Apis if discovery::accepts_aggregated(&accept) => {
            let body = discovery::aggregated(matches!(endpoint, Endpoint::Api));
            let mut response = json_response(200, &body);
            let content_type = HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE);
            response.headers_mut().insert(header::CONTENT_TYPE, content_type);
            response
        }
        Endpoint::Api => json_response(200, &discovery::api_versions(&shared.address)),
        Endpoint::Apis => json_response(200, &discovery::api_group_list()),
        Endpoint::Group(group) => match discovery::api_group(group) {
            Some(body) => json_response(200, &body),
            None => status_response(status::not_found_path()),
        },
        Endpoint::ResourceList { group, version } => match discovery::api_resource_list(group, version) {
            Some(body) => json_response(200, &body),
            None => status_response(status::not_found_path()),
        },
        Endpoint::OpenApiIndex => json_response(200, &discovery::openapi_index()),
        Endpoint::OpenApiDocument(path) => match discovery::openapi_bytes(&path) {
            Some(bytes) => {
                let mut response = (StatusCode::OK, bytes).into_response();
                response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
            None => status_response(status::not_found_path()),
        },
        Endpoint::Resource(target) => resource(&shared, request, target, user, parameters).await,
    }
}

/// The refusal of a request that impersonates: acting as the caller instead would grant what was not asked.
pub const IMPERSONATION_NOT_SERVED: &str = "impersonation (Impersonate-User, Impersonate-Group, kubectl --as) is not served by the twin: use a token of \
     the user (kubectl create token, then kubectl --token)";

/// Whether a request carries an `Impersonate-*` header.
fn impersonates(headers: &axum::http::HeaderMap) -> bool {
    headers.keys().any(|name| name.as_str().starts_with("impersonate-"))
}

/// Whether a list asks to watch.
fn watching(parameters: &BTreeMap<String, String>) -> bool {
    parameters.get("watch").is_some_and(|value| value == "true" || value == "1")
}

/// The attributes the authorizer decides a request by, as the API server's `RequestInfo` reads them: a resource
/// request's verb, group, resource, subresource, namespace (a namespace's own, for `/api/v1/namespaces/NAME`) and
/// name (a list or watch selecting one `metadata.name` names it); any other path is a non-resource request whose
/// verb is the method, lowercased.
fn attributes(
    method: &Method,
    endpoint: Option<&Endpoint<'_>>,
    path: &str,
    parameters: &BTreeMap<String, String>,
) -> Attributes {
    let Some(Endpoint::Resource(target)) = endpoint else {
        return Attributes::non_resource(&method.as_str().to_ascii_lowercase(), path);
    };
    let verb = verb(method, target, watching(parameters));
    let resource = target.resource;
    let namespace = match (resource.group, resource.plural, target.name) {
        ("", "namespaces", Some(name)) => name,
        _ => target.namespace.unwrap_or_default(),
    };
    let name = match (target.name, verb) {
        (Some(name), _) => name.to_owned(),
        (None, "list" | "watch") => selected_name(parameters).unwrap_or_default(),
        (None, _) => String::new(),
    };
    let subresource = target.subresource.unwrap_or_default();
    Attributes::resource(verb, resource.group, resource.plural, subresource, namespace, &name)
}

/// The one name a list's field selector requires (`metadata.name=x`), if it is a valid path segment.
fn selected_name(parameters: &BTreeMap<String, String>) -> Option<String> {
    let selector = FieldSelector::parse(parameters.get("fieldSelector")?).ok()?;
    let term = selector.terms().iter().find(|term| term.field == "metadata.name")?;
    let valid = !matches!(term.value.as_str(), "" | "." | "..") && !term.value.contains(['/', '%']);
    (term.operator == FieldOperator::Equals && valid).then(|| term.value.clone())
}

/// The verb a method and a target make, as authorization and discovery name it.
fn verb(method: &Method, target: &Target<'_>, watch: bool) -> &'static str {
    match (method.as_str(), target.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

async fn resource(
    shared: &Arc<Shared>,
    request: Request,
    target: Target<'_>,
    user: User,
    parameters: BTreeMap<String, String>,
) -> Response {
    let verb = verb(request.method(), &target, watching(&parameters));
    let resource = target.resource;
    let served = match target.subresource {
        None => resource.serves(verb),
        Some(name) => resource.subresource(name).is_some_and(|sub| sub.verbs.contains(&verb)),
    };
    if !served {
        return status_response(status::method_not_supported(resource, verb));
    }
    let write = match verb {
        "create" => Some(Verb::Create),
        "update" => Some(Verb::Update),
        "patch" => Some(Verb::Patch),
        "delete" => Some(Verb::Delete),
        _ => None,
    };
    if let (Some(review), Some(Verb::Create)) = (Review::of(&target), write) {
        return review_response(shared, request, &target, review, &user).await;
    }
    if let Some(write) = write {
        return write_response(shared, request, &target, write, &parameters, user).await;
    }
    let accept = request.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let table = match table_options(&accept, &parameters) {
        Ok(table) => table,
        Err(refusal) => return status_response(refusal),
    };
    let id = ResourceId { group: resource.group, plural: resource.plural };
    match verb {
        "get" => {
            let name = target.name.expect("a get names its object");
            let namespace = target.namespace.unwrap_or_default();
            let found = read(&shared.snapshot).get(id, namespace, name).map(|stored| Arc::clone(&stored.object));
            match (found, table) {
                (Some(object), Some(options)) => {
                    table_response(&options, &table::of_object(resource, &object, shared.virtual_now(), &options))
                }
                (Some(object), None) => json_response(200, &object),
                (None, _) => status_response(status::not_found(resource, name)),
            }
        }
        _ => {
            let selection = match selection(resource, target.namespace, &parameters) {
                Ok(selection) => selection,
                Err(refusal) => return status_response(refusal),
            };
            if verb == "watch" {
                return watch_stream::respond(shared, WatchRequest::new(resource, selection, &parameters, table));
            }
            list_response(shared, resource, &selection, &parameters, table)
        }
    }
}

/// The namespace and selectors of a list or a watch, refused with 400 as the API server words it.
fn selection(
    resource: &Resource,
    namespace: Option<&str>,
    parameters: &std::collections::BTreeMap<String, String>,
) -> Result<Selection, Value> {
    let labels = parameters.get("labelSelector").map(String::as_str).unwrap_or_default();
    let labels = LabelSelector::parse(labels).map_err(|error| status::bad_request(&error.to_string()))?;
    let fields = parameters.get("fieldSelector").map(String::as_str).unwrap_or_default();
    let fields = FieldSelector::parse(fields).map_err(|error| status::bad_request(&error.to_string()))?;
    let supported = resource.field_selector_labels();
    fields.check_supported(&supported).map_err(|error| status::bad_request(&error.to_string()))?;
    Ok(Selection { namespace: namespace.map(str::to_owned), labels, fields })
}

fn list_response(
    shared: &Arc<Shared>,
    resource: &'static Resource,
    selection: &Selection,
    parameters: &std::collections::BTreeMap<String, String>,
    table: Option<TableOptions>,
) -> Response {
    let limit = match parameters.get("limit").map(|limit| limit.parse::<usize>()) {
        None => None,
        Some(Ok(limit)) => Some(limit),
        Some(Err(_)) => return status_response(status::bad_request("limit: must be a non-negative integer")),
    };
    let options = ListOptions {
        limit,
        continue_token: parameters.get("continue").filter(|token| !token.is_empty()).cloned(),
        resource_version: parameters.get("resourceVersion").cloned(),
        resource_version_match: parameters.get("resourceVersionMatch").cloned(),
    };
    let id = ResourceId { group: resource.group, plural: resource.plural };
    let page = match list(&read(&shared.snapshot), id, resource.namespaced, selection, &options) {
        Ok(page) => page,
        Err(ListError::BadRequest(message)) => return status_response(status::bad_request(&message)),
        Err(ListError::Expired(message)) => return status_response(status::gone_expired(&message)),
    };
    if let Some(options) = table {
        return table_response(&options, &table::of_page(resource, &page, shared.virtual_now(), &options));
    }
    let mut metadata = json!({"resourceVersion": page.revision.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = token.as_str().into();
    }
    let items: Vec<&Value> = page.items.iter().map(|item| &**item).collect();
    let body = json!({
        "kind": resource.list_kind(),
        "apiVersion": resource.api_version(),
        "metadata": metadata,
        "items": items,
    });
    json_response(200, &body)
}

/// A request body, or the 413 refusing it.
async fn body_of(request: Request) -> Result<bytes::Bytes, Response> {
    axum::body::to_bytes(request.into_body(), BODY_MAX).await.map_err(|_| {
        let message = format!("the request body is larger than {BODY_MAX} bytes, or could not be read");
        status_response(status::status(413, "RequestEntityTooLarge", &message, None))
    })
}

/// Answers a review (or a TokenRequest) from the snapshot and the tokens, on this thread: nothing is stored.
async fn review_response(
    shared: &Arc<Shared>,
    request: Request,
    target: &Target<'_>,
    review: Review,
    user: &User,
) -> Response {
    let content_type =
        request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = match body_of(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let snapshot = read(&shared.snapshot);
    let context = reviews::Context {
        snapshot: &snapshot,
        tokens: &shared.tokens,
        authorizer: &shared.authorizer,
        now: shared.virtual_now(),
    };
    let (code, body) = reviews::answer(review, &context, target, user, &content_type, &body);
    json_response(code, &body)
}

/// Sends a write to the world and answers what it says.
async fn write_response(
    shared: &Arc<Shared>,
    request: Request,
    target: &Target<'_>,
    verb: Verb,
    parameters: &std::collections::BTreeMap<String, String>,
    user: User,
) -> Response {
    if target.resource.namespaced && target.namespace.is_none() {
        return status_response(status::bad_request("the request must name a namespace for a namespaced resource"));
    }
    let content_type =
        request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = match body_of(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let write = WriteRequest {
        verb,
        resource: target.resource,
        namespace: target.namespace.map(str::to_owned),
        name: target.name.map(str::to_owned),
        subresource: target.subresource.map(str::to_owned),
        content_type,
        body: body.to_vec(),
        user,
        dry_run: parameters.get("dryRun").is_some_and(|value| !value.is_empty()),
        field_validation: parameters.get("fieldValidation").cloned(),
    };
    let Some(answer) = shared.writes.send(write) else {
        return status_response(status::too_many_requests(1));
    };
    match answer.await {
        Ok(answer) => {
            let mut response = json_response(answer.code, &answer.body);
            for warning in &answer.warnings {
                // RFC 7234 warn-code 299 ("miscellaneous persistent warning"), as the API server sends them.
                let text = format!("299 - {}", serde_json::Value::from(warning.as_str()));
                if let Ok(value) = HeaderValue::from_str(&text) {
                    response.headers_mut().append(header::WARNING, value);
                }
            }
            response
        }
        Err(_) => status_response(status::status(503, "ServiceUnavailable", "the twin's world has stopped", None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes_of(method: Method, path_and_query: &str) -> Attributes {
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let parameters = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        attributes(&method, route::endpoint(path).ok().as_ref(), path, &parameters)
    }

    #[test]
    fn requests_are_authorised_by_the_attributes_the_api_server_reads() {
        let pods = |verb: &str, subresource: &str, namespace: &str, name: &str| {
            Attributes::resource(verb, "", "pods", subresource, namespace, name)
        };
        assert_eq!(attributes_of(Method::GET, "/api/v1/namespaces/a/pods/p"), pods("get", "", "a", "p"));
        assert_eq!(attributes_of(Method::GET, "/api/v1/pods"), pods("list", "", "", ""));
        assert_eq!(attributes_of(Method::GET, "/api/v1/namespaces/a/pods?watch=true"), pods("watch", "", "a", ""));
        assert_eq!(
            attributes_of(Method::PATCH, "/api/v1/namespaces/a/pods/p/status"),
            pods("patch", "status", "a", "p")
        );
        assert_eq!(attributes_of(Method::POST, "/api/v1/namespaces/a/pods"), pods("create", "", "a", ""));
        assert_eq!(attributes_of(Method::DELETE, "/api/v1/namespaces/a/pods/p"), pods("delete", "", "a", "p"));
        // A list selecting one name names it; a namespace is in itself.
        let one = "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dp&watch=1";
        assert_eq!(attributes_of(Method::GET, one), pods("watch", "", "a", "p"));
        let other = "/api/v1/namespaces/a/pods?fieldSelector=metadata.name!%3Dp";
        assert_eq!(attributes_of(Method::GET, other), pods("list", "", "a", ""));
        assert_eq!(
            attributes_of(Method::GET, "/api/v1/namespaces/a"),
            Attributes::resource("get", "", "namespaces", "", "a", "a")
        );
        assert_eq!(
            attributes_of(Method::GET, "/apis/gpu.cozystack.io/v1alpha1/gpuclasses/gpu"),
            Attributes::resource("get", "gpu.cozystack.io", "gpuclasses", "", "", "gpu")
        );
        assert_eq!(attributes_of(Method::GET, "/apis/apps/v1"), Attributes::non_resource("get", "/apis/apps/v1"));
        assert_eq!(attributes_of(Method::POST, "/version"), Attributes::non_resource("post", "/version"));
        assert_eq!(attributes_of(Method::GET, "/metrics"), Attributes::non_resource("get", "/metrics"));
    }

    #[test]
    fn impersonation_headers_are_noticed() {
        let mut headers = axum::http::HeaderMap::new();
        assert!(!impersonates(&headers));
        headers.insert("Impersonate-Group", HeaderValue::from_static("system:masters"));
        assert!(impersonates(&headers));
    }
}
