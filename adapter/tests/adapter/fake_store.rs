//! A fake API server that stores objects: GET, POST, PUT, merge PATCH and DELETE on paths of the Kubernetes REST
//! layout, with resourceVersion preconditions and the API server's Status bodies (404 NotFound, 409 Conflict and
//! AlreadyExists). Every request is recorded, so tests can assert what was sent. A collection GET lists (label
//! selectors of `k=v` and `k!=v` terms honoured, field selectors ignored); a watch stays open and sends nothing, so caches see exactly the listed state plus their own writes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One request as the fake API server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub content_type: String,
    pub body: Value,
}

#[derive(Default)]
pub struct Objects {
    /// Object path (collection path + "/" + name) → object.
    pub objects: BTreeMap<String, Value>,
    pub requests: Vec<Recorded>,
    /// While set, every request gets this status (an outage).
    pub failing: Option<StatusCode>,
    /// While set, every request but a GET is recorded and never answered (an API server that hangs writes).
    pub hanging_writes: bool,
    resource_version: u64,
}

#[derive(Clone, Default)]
pub struct FakeStore(pub Arc<Mutex<Objects>>);

impl FakeStore {
    pub fn router(&self) -> axum::Router {
        axum::Router::new().fallback(handle).with_state(self.clone())
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.0.lock().unwrap().objects.get(path).cloned()
    }

    /// Puts an object as if someone else wrote it: a new resourceVersion.
    pub fn put(&self, path: &str, mut object: Value) -> String {
        let mut objects = self.0.lock().unwrap();
        let version = objects.next_version();
        object["metadata"]["resourceVersion"] = json!(version);
        objects.objects.insert(path.to_owned(), object);
        version
    }

    /// Deletes an object as if someone else did.
    pub fn delete(&self, path: &str) -> Option<Value> {
        self.0.lock().unwrap().objects.remove(path)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.0.lock().unwrap().requests.clone()
    }

    pub fn set_failing(&self, status: Option<StatusCode>) {
        self.0.lock().unwrap().failing = status;
    }

    pub fn set_hanging_writes(&self, hanging: bool) {
        self.0.lock().unwrap().hanging_writes = hanging;
    }
}

impl Objects {
    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()});
    (code, Json(body)).into_response()
}

/// The object path a request addresses: subresources (`/status`) address their object.
fn object_path(path: &str) -> &str {
    path.strip_suffix("/status").unwrap_or(path)
}

async fn handle(State(store): State<FakeStore>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let content_type =
        request.headers().get("content-type").map(|v| v.to_str().unwrap_or_default().to_owned()).unwrap_or_default();
    let bytes: Bytes = axum::body::to_bytes(request.into_body(), usize::MAX).await.unwrap();
    let body: Value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    let recorded = Recorded { method: method.clone(), path: path.clone(), content_type, body: body.clone() };
    let hanging = {
        let mut objects = store.0.lock().unwrap();
        let hanging = objects.hanging_writes && method != Method::GET && objects.failing.is_none();
        if hanging {
            objects.requests.push(recorded.clone());
        }
        hanging
    };
    if hanging {
        return std::future::pending().await;
    }
    let mut objects = store.0.lock().unwrap();
    objects.requests.push(recorded);
    if let Some(code) = objects.failing {
        return status(code, "InternalError", "etcdserver: request timed out".to_owned());
    }
    let key = object_path(&path).to_owned();
    match method {
        Method::GET if query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1") => {
            axum::body::Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()).into_response()
        }
        Method::GET => match objects.objects.get(&key) {
            Some(object) => Json(object.clone()).into_response(),
            None if is_collection(&path) => {
                let selector = label_selector(&query);
                let fields = field_selector(&query);
                let items: Vec<Value> = objects
                    .objects
                    .iter()
                    .filter(|(k, v)| in_collection(k, &path) && selector.iter().all(|s| s.matches(v)))
                    .filter(|(_, v)| fields.iter().all(|f| f.matches(v)))
                    .map(|(_, v)| v.clone())
                    .collect();
                let version = objects.resource_version.to_string();
                Json(json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": version}, "items": items}))
                    .into_response()
            }
            None => status(StatusCode::NOT_FOUND, "NotFound", format!("{key} not found")),
        },
        Method::POST => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let key = format!("{path}/{name}");
            if objects.objects.contains_key(&key) {
                return status(StatusCode::CONFLICT, "AlreadyExists", format!("{key} already exists"));
            }
            let mut object = body;
            object["metadata"]["resourceVersion"] = json!(objects.next_version());
            object["metadata"]["uid"] = json!(format!("uid-{name}"));
            objects.objects.insert(key, object.clone());
            (StatusCode::CREATED, Json(object)).into_response()
        }
        Method::PUT | Method::PATCH => {
            let Some(stored) = objects.objects.get(&key).cloned() else {
                return status(StatusCode::NOT_FOUND, "NotFound", format!("{key} not found"));
            };
            let precondition = body["metadata"]["resourceVersion"].as_str().map(str::to_owned);
            let current = stored["metadata"]["resourceVersion"].as_str().unwrap_or_default();
            if (method == Method::PUT || precondition.is_some()) && precondition.as_deref() != Some(current) {
                let message = format!(
                    "Operation cannot be fulfilled on {key}: the object has been modified; please apply your \
                     changes to the latest version and try again"
                );
                return status(StatusCode::CONFLICT, "Conflict", message);
            }
            let mut object = if method == Method::PUT { body } else { merge(stored, &body) };
            object["metadata"]["resourceVersion"] = json!(objects.next_version());
            objects.objects.insert(key, object.clone());
            Json(object).into_response()
        }
        Method::DELETE => {
            let Some(stored) = objects.objects.get(&key).cloned() else {
                return status(StatusCode::NOT_FOUND, "NotFound", format!("{key} not found"));
            };
            if let Some(uid) = body["preconditions"]["uid"].as_str()
                && stored["metadata"]["uid"].as_str() != Some(uid)
            {
                return status(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!("Precondition failed: UID in precondition: {uid}"),
                );
            }
            objects.objects.remove(&key);
            Json(stored).into_response()
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", format!("{method} is not supported")),
    }
}

/// Whether a path names a collection: `/api/v1/<plural>`, `/api/v1/namespaces/<ns>/<plural>`,
/// `/apis/<group>/<version>/<plural>` or `/apis/<group>/<version>/namespaces/<ns>/<plural>`.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match segments.first() {
        Some(&"api") => &segments[2.min(segments.len())..],
        Some(&"apis") => &segments[3.min(segments.len())..],
        _ => return false,
    };
    matches!(rest, [_] | ["namespaces", _, _])
}

/// One term of a label selector: `key=value` or `key!=value`.
struct LabelTerm {
    key: String,
    value: String,
    equal: bool,
}

impl LabelTerm {
    fn matches(&self, object: &Value) -> bool {
        let value = object["metadata"]["labels"][&self.key].as_str();
        (value == Some(self.value.as_str())) == self.equal
    }
}

fn label_selector(query: &str) -> Vec<LabelTerm> {
    let Some(encoded) = query.split('&').find_map(|pair| pair.strip_prefix("labelSelector=")) else {
        return Vec::new();
    };
    percent_decode(encoded)
        .split(',')
        .filter_map(|term| match term.split_once("!=") {
            Some((key, value)) => Some(LabelTerm { key: key.to_owned(), value: value.to_owned(), equal: false }),
            None => term.split_once('=').map(|(key, value)| LabelTerm {
                key: key.to_owned(),
                value: value.to_owned(),
                equal: true,
            }),
        })
        .collect()
}

/// One term of a field selector: `path=value` or `path!=value`, the path dotted into the object (`spec.nodeName`),
/// a missing field reading as empty, as the API server's field selectors do.
struct FieldTerm {
    path: String,
    value: String,
    equal: bool,
}

impl FieldTerm {
    fn matches(&self, object: &Value) -> bool {
        let field = self.path.split('.').fold(object, |value, key| &value[key]);
        (field.as_str().unwrap_or_default() == self.value) == self.equal
    }
}

fn field_selector(query: &str) -> Vec<FieldTerm> {
    let Some(encoded) = query.split('&').find_map(|pair| pair.strip_prefix("fieldSelector=")) else {
        return Vec::new();
    };
    percent_decode(encoded)
        .split(',')
        .filter_map(|term| {
            let (path, value, equal) = match term.split_once("!=") {
                Some((path, value)) => (path, value, false),
                None => term.split_once('=').map(|(path, value)| (path, value, true))?,
            };
            Some(FieldTerm { path: path.to_owned(), value: value.to_owned(), equal })
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// Whether the object at `key` belongs to the collection at `path`, which may span all namespaces.
fn in_collection(key: &str, path: &str) -> bool {
    let Some((collection, _name)) = key.rsplit_once('/') else { return false };
    if collection == path {
        return true;
    }
    // `/apis/g/v/namespaces/ns/plural` belongs to the all-namespaces collection `/apis/g/v/plural`.
    let segments: Vec<&str> = collection.split('/').collect();
    match segments.iter().position(|s| *s == "namespaces") {
        Some(at) if at + 2 < segments.len() => {
            let mut all = segments.clone();
            all.drain(at..at + 2);
            all.join("/") == path
        }
        _ => false,
    }
}

/// The REST path of an object: where the fake store keeps it.
pub fn rest_path(object: &Value) -> String {
    let api_version = object["apiVersion"].as_str().unwrap();
    let kind = object["kind"].as_str().unwrap();
    let name = object["metadata"]["name"].as_str().unwrap();
    let plural = match kind {
        "GPUClass" => "gpuclasses",
        "GPUClaim" => "gpuclaims",
        "GPUUsage" => "gpuusages",
        "VirtualMachineInstance" => "virtualmachineinstances",
        other => return rest_path_core(other, object, name),
    };
    let base = format!("/apis/{api_version}");
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) if kind != "GPUClass" => format!("{base}/namespaces/{namespace}/{plural}/{name}"),
        _ => format!("{base}/{plural}/{name}"),
    }
}

fn rest_path_core(kind: &str, object: &Value, name: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    match (kind, object["metadata"]["namespace"].as_str()) {
        ("Node" | "Namespace", _) => format!("/api/v1/{plural}/{name}"),
        (_, Some(namespace)) => format!("/api/v1/namespaces/{namespace}/{plural}/{name}"),
        (_, None) => format!("/api/v1/namespaces/default/{plural}/{name}"),
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge(mut target: Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else { return patch.clone() };
    if !target.is_object() {
        target = json!({});
    }
    let map = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            let merged = merge(map.remove(key).unwrap_or(Value::Null), value);
            map.insert(key.clone(), merged);
        }
    }
    target
}
