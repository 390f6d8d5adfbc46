//! The parts of a write every kind shares: the body read as an object, the request's own fields checked against it
//! (kind, name, namespace), the name's form, the preconditions, the fields the API server keeps (uid, creation
//! time, generation, deletion time, status through its subresource only), and a delete's options. Each message is
//! the API server's.

use serde_json::{Map, Value, json};

use super::{Refused, Verb, WriteRequest};
use crate::served::resources::Resource;
use crate::served::status::{self, Cause};

/// The longest object name (a DNS subdomain).
pub const NAME_LENGTH_MAX: usize = 253;

/// The request body as a JSON object.
pub fn body_object(request: &WriteRequest) -> Result<Value, Refused> {
    let media = request.content_type.split(';').next().unwrap_or_default().trim();
    if media == "application/vnd.kubernetes.protobuf" {
        // kubectl's `create <kind>` generators send protobuf; `kubectl create -f` and `apply -f` send JSON.
        let message = "the twin reads JSON bodies only, not protobuf (kubectl's `create namespace`, `create \
                       configmap` ... send protobuf: write the object to a file and use `kubectl create -f` or \
                       `kubectl apply -f`)";
        return Err(status::status(415, "UnsupportedMediaType", message, None));
    }
    if !(media.is_empty() || media == "application/json" || media == "*/*") {
        return Err(status::unsupported_media_type(&["application/json"]));
    }
    let value: Value = serde_json::from_slice(&request.body)
        .map_err(|error| status::bad_request(&format!("the body of the request could not be read as JSON: {error}")))?;
    match value {
        Value::Object(_) => Ok(value),
        _ => Err(status::bad_request("the body of the request must be a JSON object")),
    }
}

/// The name a request writes: the path's, else a create's body's (`None` for a create by `generateName`).
pub fn target_name(request: &WriteRequest) -> Option<String> {
    if let Some(name) = &request.name {
        return Some(name.clone());
    }
    let body: Value = serde_json::from_slice(&request.body).ok()?;
    body.pointer("/metadata/name").and_then(Value::as_str).map(str::to_owned)
}

fn metadata(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"].as_object_mut().expect("made a map above")
}

/// Checks the object's `apiVersion`, `kind`, name and namespace against the request (filling in what it omits),
/// as the API server does before anything else. A create without a name gets one from `generateName` and
/// `suffix`.
pub fn identity(
    resource: &Resource,
    request: &WriteRequest,
    object: &mut Value,
    suffix: &str,
) -> Result<String, Refused> {
    let api_version = resource.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None => object["apiVersion"] = api_version.as_str().into(),
        Some(given) if given == api_version => {}
        Some(given) => {
            let message = format!(
                "the API version in the data ({given}) does not match the expected API version ({api_version})"
            );
            return Err(status::bad_request(&message));
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None => object["kind"] = resource.kind.into(),
        Some(given) if given == resource.kind => {}
        Some(given) => {
            let message =
                format!("the kind in the data ({given}) does not match the expected kind ({})", resource.kind);
            return Err(status::bad_request(&message));
        }
    }
    let path_namespace = request.namespace.clone().unwrap_or_default();
    let meta = metadata(object);
    match (resource.namespaced, meta.get("namespace").and_then(Value::as_str)) {
        (true, Some(given)) if !given.is_empty() && given != path_namespace => {
            return Err(status::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (true, _) => {
            meta.insert("namespace".into(), path_namespace.into());
        }
        (false, _) => {
            meta.remove("namespace");
        }
    }
    let given = meta.get("name").and_then(Value::as_str).filter(|name| !name.is_empty()).map(str::to_owned);
    let name = match (&request.name, given, request.verb) {
        (Some(path), Some(body), _) if *path != body => {
            let message = format!("the name of the object ({body}) does not match the name on the URL ({path})");
            return Err(status::bad_request(&message));
        }
        (_, Some(body), _) => body,
        (Some(path), None, _) => path.clone(),
        (None, None, Verb::Create) => match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => format!("{prefix}{suffix}"),
            _ => {
                let cause = Cause::new("FieldValueRequired", "name or generateName is required", "metadata.name");
                return Err(status::invalid(resource, "", vec![cause]));
            }
        },
        (None, None, _) => return Err(status::bad_request("the name of the object is required")),
    };
    meta.insert("name".into(), name.as_str().into());
    meta.remove("managedFields");
    meta.remove("selfLink");
    valid_name(resource, &name)?;
    Ok(name)
}

/// A name the API server takes for an object: a lowercase RFC 1123 subdomain (its message when not).
pub fn valid_name(resource: &Resource, name: &str) -> Result<(), Refused> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() <= NAME_LENGTH_MAX && name.split('.').all(label_ok) {
        return Ok(());
    }
    let message = format!(
        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
         '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
         validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    Err(status::invalid(resource, name, vec![Cause::new("FieldValueInvalid", &message, "metadata.name")]))
}

/// The resourceVersion a write names as its precondition, when it names one.
pub fn precondition(object: &Value) -> Option<&str> {
    object.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|version| !version.is_empty())
}

/// Refuses a write whose precondition is not the current object's revision (409, the API server's text).
pub fn check_precondition(resource: &Resource, name: &str, object: &Value, current: &Value) -> Result<(), Refused> {
    match precondition(object) {
        Some(version) if Some(version) != precondition(current) => Err(status::conflict(resource, name)),
        _ => Ok(()),
    }
}

/// Whether the parts of an object other than its metadata and status differ (what moves `generation`).
pub fn spec_changed(old: &Value, new: &Value) -> bool {
    let rest = |object: &Value| -> Map<String, Value> {
        let mut map = object.as_object().cloned().unwrap_or_default();
        for system in ["metadata", "status", "apiVersion", "kind"] {
            map.remove(system);
        }
        map
    };
    rest(old) != rest(new)
}

/// Writes into `new` what a client cannot change by an update: uid, creation time, deletion time and generation
/// from `current` (generation moving on when the spec changed), and the status or the rest, whichever the request
/// does not write (with a `status` subresource, the resource itself keeps its status and the subresource writes
/// only the status).
pub fn keep_system_fields(resource: &Resource, subresource: Option<&str>, new: &mut Value, current: &Value) {
    let has_status = resource.subresource("status").is_some();
    if subresource == Some("status") {
        let status = new.get("status").cloned();
        *new = current.clone();
        match status {
            Some(status) => new["status"] = status,
            None => {
                new.as_object_mut().map(|map| map.remove("status"));
            }
        }
        return;
    }
    if has_status {
        match current.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                new.as_object_mut().map(|map| map.remove("status"));
            }
        }
    }
    let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
    let generation = if spec_changed(current, new) { generation + 1 } else { generation };
    let meta = metadata(new);
    for kept in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"] {
        match current.pointer(&format!("/metadata/{kept}")) {
            Some(value) => meta.insert(kept.into(), value.clone()),
            None => meta.remove(kept),
        };
    }
    meta.insert("generation".into(), generation.into());
}

/// What a DELETE's body (`DeleteOptions`) asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation: Option<String>,
}

impl DeleteOptions {
    /// Reads a DELETE's body (empty: no options).
    pub fn read(body: &[u8]) -> Result<DeleteOptions, Refused> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(DeleteOptions::default());
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|error| status::bad_request(&format!("the DeleteOptions could not be read: {error}")))?;
        let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
        let options = DeleteOptions {
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
            propagation: text("/propagationPolicy"),
        };
        match options.propagation.as_deref() {
            None | Some("Background") | Some("Orphan") => Ok(options),
            Some("Foreground") => Err(status::status(
                422,
                "Invalid",
                "propagationPolicy: Foreground is not served by the twin (Background and Orphan are)",
                None,
            )),
            Some(other) => Err(status::bad_request(&format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \
                 \"Orphan\""
            ))),
        }
    }

    /// Refuses the delete when a precondition is not the object's (409, the API server's text).
    pub fn check(&self, resource: &Resource, name: &str, current: &Value) -> Result<(), Refused> {
        let actual = |pointer: &str| current.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
        if let Some(uid) = &self.uid
            && *uid != actual("/metadata/uid")
        {
            let message = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                actual("/metadata/uid")
            );
            return Err(status::status(409, "Conflict", &message, Some(status::Details::of(resource, name))));
        }
        if let Some(version) = &self.resource_version
            && *version != actual("/metadata/resourceVersion")
        {
            let message = format!(
                "Precondition failed: ResourceVersion in precondition: {version}, ResourceVersion in object meta: {}",
                actual("/metadata/resourceVersion")
            );
            return Err(status::status(409, "Conflict", &message, Some(status::Details::of(resource, name))));
        }
        Ok(())
    }
}

/// The five characters `generateName` is completed with, from a revision (deterministic, as everything the world
/// writes): the API server's alphabet (no vowels, no ambiguous characters).
pub fn generated_suffix(revision: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash = revision.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xcbf2_9ce4_8422_2325;
    (0..5)
        .map(|_| {
            let index = (hash % ALPHABET.len() as u64) as usize;
            hash /= ALPHABET.len() as u64;
            ALPHABET[index] as char
        })
        .collect()
}

/// A custom resource checked against its CRD's structural schema, as the API server checks it before any rule or
/// admission: fields the schema does not declare refused (`fieldValidation=Strict`, kubectl's), or pruned with a
/// warning each (`Warn`, the default) or silently (`Ignore`); then every value the schema refuses, one cause each
/// (422). Returns the warnings. Built-in kinds are not checked here (their fields are the typed objects').
pub fn check_schema(request: &WriteRequest, name: &str, object: &mut Value) -> Result<Vec<String>, Refused> {
    let resource = request.resource;
    if crate::served::validate::schema_of(resource).is_none() {
        return Ok(Vec::new());
    }
    let unknown = crate::served::validate::unknown_fields(resource, object);
    let mut warnings = Vec::new();
    if !unknown.is_empty() {
        match request.field_validation.as_deref() {
            Some("Strict") => return Err(crate::served::validate::strict_error(resource, &unknown)),
            Some("Ignore") => {}
            _ => warnings = crate::served::validate::warnings(&unknown),
        }
        crate::served::validate::prune(resource, object);
    }
    let causes = crate::served::validate::validate(resource, object);
    if !causes.is_empty() {
        return Err(status::invalid(resource, name, causes));
    }
    Ok(warnings)
}
