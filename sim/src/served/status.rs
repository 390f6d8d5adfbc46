//! The API server's `Status` bodies: what a refused request answers, shaped and worded as k8s.io/apimachinery's
//! `errors` package builds them (`NewNotFound`, `NewConflict`, `NewInvalid`, ...), and from the twin's own refusals
//! ([`from_api_error`]).
//!
//! Empty fields are left out as Go's `omitempty` leaves them; `details` is present (possibly `{}`) exactly when the
//! API server sets it. Messages the twin's API server already words ([`ApiError`], admission's errors) are reused,
//! not rewritten: a test holds the two equal.
//!
//! ```
//! use gpuclaim_sim::served::{resources, status};
//!
//! let claims = resources::find("gpu.cozystack.io", "v1alpha1", "gpuclaims").unwrap();
//! let body = status::not_found(claims, "train");
//! assert_eq!(body["message"], r#"gpuclaims.gpu.cozystack.io "train" not found"#);
//! assert_eq!(body["details"]["kind"], "gpuclaims");
//! ```

use serde_json::{Map, Value, json};

use super::go;
use super::rbac::Attributes;
use super::resources::{self, Resource};
use crate::apiserver::ApiError;
use crate::apiserver::admission::AdmissionError;

/// `metav1.StatusDetails`: the object a refusal is about, and why field by field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub name: String,
    pub group: String,
    /// The resource (`gpuclaims`) for most refusals, the kind (`GPUClaim`) for `Invalid`.
    pub kind: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: u32,
}

/// `metav1.StatusCause`: one reason of a refusal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// The cause type (`FieldValueForbidden`); empty for none.
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn new(reason: &str, message: &str, field: &str) -> Cause {
        Cause { reason: reason.to_owned(), message: message.to_owned(), field: field.to_owned() }
    }
}

impl Details {
    /// The object a refusal about `resource` names: the resource's plural and group.
    pub fn of(resource: &Resource, name: &str) -> Details {
        Details {
            name: name.to_owned(),
            group: resource.group.to_owned(),
            kind: resource.plural.to_owned(),
            ..Details::default()
        }
    }
}

/// 500 `InternalError`: the twin failed while it applied a write (a world error), worded by the error.
pub fn internal_error(error: impl std::fmt::Display) -> Value {
    status(500, "InternalError", &error.to_string(), None)
}

/// A failure `Status` body.
pub fn status(code: u16, reason: &str, message: &str, details: Option<Details>) -> Value {
    let mut body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"});
    insert_nonempty(&mut body, "message", message);
    insert_nonempty(&mut body, "reason", reason);
    if let Some(details) = details {
        body["details"] = details_json(&details);
    }
    body["code"] = code.into();
    body
}

fn details_json(details: &Details) -> Value {
    let mut json = Value::Object(Map::new());
    insert_nonempty(&mut json, "name", &details.name);
    insert_nonempty(&mut json, "group", &details.group);
    insert_nonempty(&mut json, "kind", &details.kind);
    if !details.causes.is_empty() {
        let causes: Vec<Value> = details
            .causes
            .iter()
            .map(|cause| {
                let mut json = Value::Object(Map::new());
                insert_nonempty(&mut json, "reason", &cause.reason);
                insert_nonempty(&mut json, "message", &cause.message);
                insert_nonempty(&mut json, "field", &cause.field);
                json
            })
            .collect();
        json["causes"] = causes.into();
    }
    if details.retry_after_seconds > 0 {
        json["retryAfterSeconds"] = details.retry_after_seconds.into();
    }
    json
}

fn insert_nonempty(object: &mut Value, key: &str, value: &str) {
    if !value.is_empty() {
        object[key] = value.into();
    }
}

/// 404 `NotFound` for an object: `gpuclaims.gpu.cozystack.io "x" not found`.
pub fn not_found(resource: &Resource, name: &str) -> Value {
    let message = format!("{} {} not found", resource.qualified(), quoted(name));
    status(404, "NotFound", &message, Some(Details::of(resource, name)))
}

/// 409 `AlreadyExists` for a create of a name taken.
pub fn already_exists(resource: &Resource, name: &str) -> Value {
    let message = format!("{} {} already exists", resource.qualified(), quoted(name));
    status(409, "AlreadyExists", &message, Some(Details::of(resource, name)))
}

/// 409 `Conflict` for a write whose resourceVersion precondition is stale.
pub fn conflict(resource: &Resource, name: &str) -> Value {
    conflict_because(
        resource,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// 409 `Conflict` with its reason: `Operation cannot be fulfilled on <resource> "<name>": <why>`.
fn conflict_because(resource: &Resource, name: &str, why: &str) -> Value {
    let message = format!("Operation cannot be fulfilled on {} {}: {why}", resource.qualified(), quoted(name));
    status(409, "Conflict", &message, Some(Details::of(resource, name)))
}

/// 422 `Invalid`: `GPUClaim.gpu.cozystack.io "x" is invalid: <field>: <cause>, ...`, with the kind (not the
/// resource) in the details and one cause per field error.
pub fn invalid(resource: &Resource, name: &str, causes: Vec<Cause>) -> Value {
    let errors: Vec<String> = causes
        .iter()
        .map(|cause| match cause.field.as_str() {
            "" => cause.message.clone(),
            field => format!("{field}: {}", cause.message),
        })
        .collect();
    let mut message = format!("{} {} is invalid", resource.qualified_kind(), quoted(name));
    match errors.len() {
        0 => {}
        1 => message = format!("{message}: {}", errors[0]),
        _ => message = format!("{message}: [{}]", errors.join(", ")),
    }
    let details = Details { kind: resource.kind.to_owned(), causes, ..Details::of(resource, name) };
    status(422, "Invalid", &message, Some(details))
}

/// The twin's refusal as the API server's Status. `resource` and `name` are the request's: the error's own kind and
/// name win where it carries them (a write can fail on another object than the one asked for).
pub fn from_api_error(error: &ApiError, resource: &Resource, name: &str) -> Value {
    let row = |kind| resources::modelled(kind).unwrap_or(resource);
    match error {
        ApiError::NotFound { kind, name } => not_found(row(*kind), name),
        ApiError::AlreadyExists { kind, name } => already_exists(row(*kind), name),
        ApiError::Conflict { kind, name } => conflict(row(*kind), name),
        // The real server's reason is the storage error around this text (`StorageError: invalid object, Code: 4,
        // Key: /registry/..., ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: ...`); the twin has no
        // etcd key, so the reason is the precondition's text alone.
        ApiError::UidPrecondition { .. } => conflict_because(resource, name, &error.to_string()),
        ApiError::Invalid { kind, name, invalid: refused } => {
            let cause = Cause {
                reason: cause_type(&refused.message).to_owned(),
                message: refused.message.clone(),
                field: refused.field.clone(),
            };
            invalid(row(*kind), name, vec![cause])
        }
        ApiError::Rule { kind, name, broken } => {
            let cause = Cause {
                reason: cause_type(broken.reason).to_owned(),
                message: format!("{}: {}", broken.reason, broken.message),
                field: broken.field.clone(),
            };
            invalid(row(*kind), name, vec![cause])
        }
        ApiError::Admission(refused) => from_admission_error(refused, error, resource, name),
    }
}

fn from_admission_error(refused: &AdmissionError, error: &ApiError, resource: &Resource, name: &str) -> Value {
    let (code, reason, text) = (error.code(), error.reason(), error.to_string());
    match refused {
        // The webhook's own Status, its message prefixed (apiserver webhook/errors `ToStatusErr`): no details.
        AdmissionError::Denied { .. } => status(code, reason, &text, None),
        // `admission.NewForbidden` on the request's resource and name, then the policy's reason and code, with the
        // denial as the one cause (apiserver validating policy dispatcher).
        AdmissionError::Policy(_) => {
            let subject = match name {
                "" => resource.qualified(),
                name => format!("{} {}", resource.qualified(), quoted(name)),
            };
            let message = format!("{subject} is forbidden: {text}");
            let details =
                Details { causes: vec![Cause { message: text, ..Cause::default() }], ..Details::of(resource, name) };
            status(code, reason, &message, Some(details))
        }
        // `apierrors.NewInternalError` around the call's failure.
        AdmissionError::Condition { .. }
        | AdmissionError::Unavailable { .. }
        | AdmissionError::Failed { .. }
        | AdmissionError::Internal(_) => {
            let inner = text.strip_prefix(INTERNAL_ERROR).unwrap_or(&text);
            let message = format!("{INTERNAL_ERROR}{inner}");
            let details =
                Details { causes: vec![Cause { message: inner.to_owned(), ..Cause::default() }], ..Details::default() };
            status(code, reason, &message, Some(details))
        }
    }
}

const INTERNAL_ERROR: &str = "Internal error occurred: ";

/// The cause type of a field error from its body's leading words (apimachinery `field.Error.ErrorBody` writes the
/// type first; a CRD rule's `RuleBroken::reason` is those words alone). A body the twin words without a type is one
/// of the pod update rules, which the API server reports as `Forbidden` (with a `Forbidden: ` prefix that
/// [`crate::apiserver::gates`] leaves out).
fn cause_type(body: &str) -> &'static str {
    const TYPES: &[(&str, &str)] = &[
        ("Invalid value", "FieldValueInvalid"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Forbidden", "FieldValueForbidden"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Internal error", "InternalError"),
    ];
    let reason = TYPES.iter().find(|(words, _)| body.starts_with(words)).map(|(_, reason)| *reason);
    reason.unwrap_or("FieldValueForbidden")
}

/// Go's `%q` of a name: for DNS labels and subdomains Rust's `{:?}` writes the same (they differ on control
/// characters, which no stored name holds).
fn quoted(name: &str) -> String {
    format!("{name:?}")
}

/// 403 `Forbidden` for a request the authorizer refused `username` (apiserver `responsewriters.Forbidden`, then
/// apimachinery's `NewForbidden`): `pods "x" is forbidden: User "u" cannot patch resource "pods" in API group ""
/// in the namespace "ns"`; `at the cluster scope` for a request in no namespace; `pods/status` for a subresource;
/// no name for a list; `forbidden: User "u" cannot get path "/metrics"` for a non-resource path. A non-empty
/// `reason` (the authorizer's, `RBAC: ...`) follows the message after `: `.
pub fn forbidden(attributes: &Attributes, username: &str, reason: &str) -> Value {
    let user = go::quote(username);
    let (message, details) = match attributes {
        Attributes::NonResource { verb, path } => {
            (format!("User {user} cannot {verb} path {}", go::quote(path)), Details::default())
        }
        Attributes::Resource(asked) => {
            let resource = match asked.subresource.as_str() {
                "" => asked.resource.clone(),
                subresource => format!("{}/{subresource}", asked.resource),
            };
            let scope = match asked.namespace.as_str() {
                "" => "at the cluster scope".to_owned(),
                namespace => format!("in the namespace {}", go::quote(namespace)),
            };
            let message = format!(
                "User {user} cannot {} resource {} in API group {} {scope}",
                asked.verb,
                go::quote(&resource),
                go::quote(&asked.group)
            );
            let details = Details {
                name: asked.name.clone(),
                group: asked.group.clone(),
                kind: asked.resource.clone(),
                ..Details::default()
            };
            (message, details)
        }
    };
    let message = match reason {
        "" => message,
        reason => format!("{message}: {reason}"),
    };
    // apimachinery's `GroupResource.String()`: empty for a non-resource request.
    let qualified = match details.group.as_str() {
        "" => details.kind.clone(),
        group => format!("{}.{group}", details.kind),
    };
    let message = match (qualified.as_str(), details.name.as_str()) {
        ("", _) => format!("forbidden: {message}"),
        (qualified, "") => format!("{qualified} is forbidden: {message}"),
        (qualified, name) => format!("{qualified} {} is forbidden: {message}", go::quote(name)),
    };
    status(403, "Forbidden", &message, Some(details))
}

/// 401 `Unauthorized`: a request with no token, or one the server does not know (apimachinery's
/// `NewUnauthorized("Unauthorized")`, as the authentication filter answers it).
pub fn unauthorized() -> Value {
    status(401, "Unauthorized", "Unauthorized", None)
}

/// 404 for a path under `/api` or `/apis` the server does not route (an unknown resource or group version):
/// go-restful's answer through apimachinery's `NewGenericServerResponse`, with empty details. (A path outside them
/// gets Go's plain-text `404 page not found` from the real server.)
pub fn not_found_path() -> Value {
    status(404, "NotFound", "the server could not find the requested resource", Some(Details::default()))
}

/// 405 for a method the server has no route for on a path (PUT on a collection, DELETE of a collection):
/// go-restful's answer, with empty details.
pub fn method_not_allowed() -> Value {
    status(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        Some(Details::default()),
    )
}

/// 405 for a verb a resource's storage does not implement (apimachinery's `NewMethodNotSupported`):
/// `deletecollection is not supported on resources of kind "pods"`.
pub fn method_not_supported(resource: &Resource, verb: &str) -> Value {
    let message = format!("{verb} is not supported on resources of kind {}", quoted(&resource.qualified()));
    let details = Details { group: resource.group.to_owned(), kind: resource.plural.to_owned(), ..Details::default() };
    status(405, "MethodNotAllowed", &message, Some(details))
}

/// 400 `BadRequest` with the reason as message (apimachinery's `NewBadRequest`: no details).
pub fn bad_request(message: &str) -> Value {
    status(400, "BadRequest", message, None)
}

/// 415 `UnsupportedMediaType` for a body (a patch) in a content type the resource does not take, naming the ones it
/// takes (apiserver negotiation's `errUnsupportedMediaType`): pass [`Resource::patch_types`].
pub fn unsupported_media_type(accepted: &[&str]) -> Value {
    let message = format!(
        "the body of the request was in an unknown format - accepted media types include: {}",
        accepted.join(", ")
    );
    status(415, "UnsupportedMediaType", &message, None)
}

/// 410 `Expired` (apimachinery's `NewResourceExpired`): a resourceVersion or continue token too old.
pub fn gone_expired(message: &str) -> Value {
    status(410, "Expired", message, None)
}

/// 429 `TooManyRequests` (apimachinery's `NewTooManyRequests`, with the max-in-flight filter's message). The real
/// filter writes this message as plain text with a `Retry-After` header; clients read either.
pub fn too_many_requests(retry_after_seconds: u32) -> Value {
    let details = Details { retry_after_seconds, ..Details::default() };
    status(429, "TooManyRequests", "Too many requests, please try again later.", Some(details))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cause_types_come_from_the_bodys_first_words() {
        assert_eq!(cause_type("Invalid value: \"x\": bad"), "FieldValueInvalid");
        assert_eq!(cause_type("Duplicate value: \"x\""), "FieldValueDuplicate");
        assert_eq!(cause_type("cannot be set until all schedulingGates have been cleared"), "FieldValueForbidden");
    }

    #[test]
    fn empty_fields_are_left_out() {
        let body = status(400, "BadRequest", "", Some(Details::default()));
        assert_eq!(
            body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "reason": "BadRequest", "details": {}, "code": 400})
        );
    }
}
