//! PATCH as the API server applies it: the patch type from the request's `Content-Type`, the patch applied to the
//! current object, and the API server's answer when it refuses one.
//!
//! - JSON patch (RFC 6902, `application/json-patch+json`): at most [`JSON_PATCH_OPERATIONS_MAX`] operations; one
//!   that fails (a `test` that does not hold, a path that is missing) refuses the whole patch with the API server's
//!   generic 422, which names no cause.
//! - JSON merge patch (RFC 7386, `application/merge-patch+json`): what kubectl sends for custom resources and what
//!   the adapter sends.
//! - Strategic merge patch (`application/strategic-merge-patch+json`), built-in kinds only ([`strategic`]): a
//!   custom resource answers 415, as the API server does.
//! - Server-side apply (`application/apply-patch+yaml`, `+cbor`) is not served: 415 with a message saying so.
//!
//! A malformed body answers 400 with the API server's prefix (`error decoding patch: ` for JSON and merge patches,
//! none for a strategic one) and Go's `encoding/json` wording for the common syntax errors (`invalid character 'x'
//! looking for beginning of value`, `unexpected end of JSON input`): the wording under `fieldValidation` Warn (the
//! API server's default) and Strict (kubectl's), whose strict decoder reads the body first; duplicate fields, which
//! that decoder reports, are not (serde_json keeps the last). A result that is not an object answers 422
//! `Invalid` on the field `patch`. Preconditions a patch carries (`metadata.resourceVersion`) are the caller's to
//! check against the result.
//!
//! ```
//! use gpuclaim_sim::served::patch::{self, PatchType};
//! use gpuclaim_sim::served::resources;
//! use serde_json::json;
//!
//! let nodes = resources::find("", "v1", "nodes").unwrap();
//! let patch_type = PatchType::from_content_type("application/strategic-merge-patch+json", nodes).unwrap();
//! let node = json!({"metadata": {"name": "n1"}, "spec": {}});
//! let cordoned = patch::apply(nodes, patch_type, &node, br#"{"spec":{"unschedulable":true}}"#).unwrap();
//! assert_eq!(cordoned["spec"]["unschedulable"], true);
//! ```

pub mod strategic;
pub mod strategic_meta;

use serde_json::{Map, Value};

use super::resources::Resource;
use super::status::{self, Cause, Details};

/// The most operations a JSON patch may hold (the API server's `maxJSONPatchOperations`).
pub const JSON_PATCH_OPERATIONS_MAX: usize = 10_000;

/// The most bytes a JSON patch's `copy` operations may copy in all, so a patch cannot grow an object without bound:
/// the API server's default `JSONPatchMaxCopyBytes` (3 MiB, which arms json-patch's `AccumulatedCopySizeLimit`).
pub const JSON_PATCH_COPIED_BYTES_MAX: usize = 3 * 1024 * 1024;

/// A patch's type, from its `Content-Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 (`application/json-patch+json`).
    Json,
    /// RFC 7386 (`application/merge-patch+json`).
    Merge,
    /// Kubernetes' strategic merge patch (`application/strategic-merge-patch+json`).
    Strategic,
    /// Server-side apply (`application/apply-patch+yaml` or `+cbor`): refused.
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type`, parameters (`; charset=utf-8`) dropped as the API server drops them (at
    /// the first `;`, the media type compared exactly). A type `resource` does not take answers 415.
    pub fn from_content_type(content_type: &str, resource: &Resource) -> Result<PatchType, PatchError> {
        let media_type = match content_type.find(';') {
            Some(at) if at > 0 => &content_type[..at],
            _ => content_type,
        };
        let patch_type = match media_type {
            "application/json-patch+json" => PatchType::Json,
            "application/merge-patch+json" => PatchType::Merge,
            "application/strategic-merge-patch+json" => PatchType::Strategic,
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => PatchType::Apply,
            _ => return Err(PatchError::UnsupportedMediaType { accepted: resource.patch_types() }),
        };
        if patch_type == PatchType::Strategic && resource.is_custom() {
            return Err(PatchError::UnsupportedMediaType { accepted: resource.patch_types() });
        }
        Ok(patch_type)
    }
}

/// A patch the API server refuses; [`PatchError::status`] is its answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A content type the resource does not take (any but the four patch types; a strategic merge patch on a
    /// custom resource).
    #[error("the body of the request was in an unknown format - accepted media types include: {}", accepted.join(", "))]
    UnsupportedMediaType { accepted: &'static [&'static str] },
    #[error(
        "server-side apply is not served by the twin: apply with kubectl's client-side apply (--server-side=false, \
         the default)"
    )]
    ServerSideApply,
    /// A body that is not the JSON its type needs; the message is the API server's.
    #[error("{message}")]
    Malformed { message: String },
    #[error(
        "Request entity too large: The allowed maximum operations in a JSON patch is {JSON_PATCH_OPERATIONS_MAX}, got {count}"
    )]
    TooManyOperations { count: usize },
    /// A JSON patch operation that does not apply; `why` is the twin's reason (the API server's answer names none).
    #[error("the server rejected our request due to an error in our request")]
    OperationFailed { why: String },
    /// The patched object is not an object.
    #[error("patch: Invalid value: {patched:?}: the patched value is not an object")]
    NotAnObject { patched: String },
    #[error(transparent)]
    Strategic(#[from] strategic::StrategicError),
}

impl PatchError {
    /// The HTTP status code of the answer.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::UnsupportedMediaType { .. } | PatchError::ServerSideApply => 415,
            PatchError::Malformed { .. } => 400,
            PatchError::TooManyOperations { .. } => 413,
            PatchError::OperationFailed { .. } | PatchError::NotAnObject { .. } => 422,
            PatchError::Strategic(refused) => refused.reason.code(),
        }
    }

    /// The API server's `Status` body for it.
    pub fn status(&self) -> Value {
        match self {
            PatchError::UnsupportedMediaType { accepted } => status::unsupported_media_type(accepted),
            PatchError::ServerSideApply => status::status(415, "UnsupportedMediaType", &self.to_string(), None),
            PatchError::Malformed { message } => status::bad_request(message),
            PatchError::TooManyOperations { .. } => {
                status::status(413, "RequestEntityTooLarge", &self.to_string(), None)
            }
            // `NewGenericServerResponse(422, ...)`: the generic message, empty details.
            PatchError::OperationFailed { .. } => {
                status::status(422, "Invalid", &self.to_string(), Some(Details::default()))
            }
            // `NewInvalid` with an empty group kind and name, one cause on the field `patch`.
            PatchError::NotAnObject { .. } => {
                let body = self.to_string();
                let cause = Cause {
                    reason: "FieldValueInvalid".to_owned(),
                    message: body.trim_start_matches("patch: ").to_owned(),
                    field: "patch".to_owned(),
                };
                let message = format!(" \"\" is invalid: {body}");
                status::status(422, "Invalid", &message, Some(Details { causes: vec![cause], ..Details::default() }))
            }
            PatchError::Strategic(refused) => match refused.reason.code() {
                422 => status::status(422, "Invalid", &refused.reason.to_string(), Some(Details::default())),
                _ => status::bad_request(&refused.reason.to_string()),
            },
        }
    }
}

/// Applies a patch of `patch_type` to `current`, an object of `resource`, and returns the patched object. Never
/// panics, whatever the body; `current` is left as it was.
pub fn apply(resource: &Resource, patch_type: PatchType, current: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let patched = match patch_type {
        PatchType::Apply => return Err(PatchError::ServerSideApply),
        PatchType::Strategic if resource.is_custom() => {
            return Err(PatchError::UnsupportedMediaType { accepted: resource.patch_types() });
        }
        PatchType::Json => json_patch_apply(current, body)?,
        PatchType::Merge => {
            let patch = decode_object(body, "error decoding patch: ")?;
            let mut patched = current.clone();
            json_patch::merge(&mut patched, &Value::Object(patch));
            patched
        }
        PatchType::Strategic => {
            let patch = decode_object(body, "")?;
            strategic::apply(strategic_meta::of_kind(resource.kind), current, &patch)?
        }
    };
    match patched {
        Value::Object(_) => Ok(patched),
        other => Err(PatchError::NotAnObject { patched: other.to_string() }),
    }
}

/// A body that must be a JSON object (a merge or strategic patch), or the API server's 400 (`prefix` before Go's
/// decoding error).
fn decode_object(body: &[u8], prefix: &str) -> Result<Map<String, Value>, PatchError> {
    match decode(body, prefix)? {
        Value::Object(map) => Ok(map),
        other => {
            let message = format!(
                "{prefix}json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_type(&other)
            );
            Err(PatchError::Malformed { message })
        }
    }
}

fn decode(body: &[u8], prefix: &str) -> Result<Value, PatchError> {
    serde_json::from_slice(body)
        .map_err(|error| PatchError::Malformed { message: format!("{prefix}{}", go_json_error(&error, body)) })
}

/// The JSON type's name as Go's `UnmarshalTypeError` writes it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's `encoding/json` wording for a syntax error serde_json reports: the character it stopped at and what the
/// scanner was looking for, or the end of input.
fn go_json_error(error: &serde_json::Error, body: &[u8]) -> String {
    if error.is_eof() {
        return "unexpected end of JSON input".to_owned();
    }
    let Some(found) = char_at(body, error.line(), error.column()) else {
        return "unexpected end of JSON input".to_owned();
    };
    let text = error.to_string();
    let context = if text.starts_with("expected `:`") {
        "after object key"
    } else if text.starts_with("expected `,` or `}`") {
        "after object key:value pair"
    } else if text.starts_with("expected `,` or `]`") {
        "after array element"
    } else if text.starts_with("key must be a string") {
        "looking for beginning of object key string"
    } else if text.starts_with("trailing characters") {
        "after top-level value"
    } else {
        "looking for beginning of value"
    };
    format!("invalid character {} {context}", go_quote_char(found))
}

/// The character at a 1-based line and column (serde_json's position of an error; 0 when no column).
fn char_at(body: &[u8], line: usize, column: usize) -> Option<char> {
    let text = String::from_utf8_lossy(body);
    let line_text = text.split('\n').nth(line.checked_sub(1)?)?;
    line_text.chars().nth(column.saturating_sub(1))
}

/// Go's `quoteChar`: `'x'`, with `'\''` and `'"'` special.
fn go_quote_char(found: char) -> String {
    match found {
        '\'' => r"'\''".to_owned(),
        '"' => "'\"'".to_owned(),
        found => {
            let escaped: String = found.escape_debug().collect();
            format!("'{escaped}'")
        }
    }
}

/// A JSON patch (RFC 6902) applied to `current`.
fn json_patch_apply(current: &Value, body: &[u8]) -> Result<Value, PatchError> {
    const PREFIX: &str = "error decoding patch: ";
    let operations = match decode(body, PREFIX)? {
        Value::Array(operations) => operations,
        other => {
            let message = format!(
                "{PREFIX}json: cannot unmarshal {} into Go value of type []handlers.jsonPatchOp",
                go_type(&other)
            );
            return Err(PatchError::Malformed { message });
        }
    };
    if let Some(other) = operations.iter().find(|operation| !operation.is_object()) {
        let message =
            format!("{PREFIX}json: cannot unmarshal {} into Go value of type handlers.jsonPatchOp", go_type(other));
        return Err(PatchError::Malformed { message });
    }
    if operations.len() > JSON_PATCH_OPERATIONS_MAX {
        return Err(PatchError::TooManyOperations { count: operations.len() });
    }
    let failed = |why: String| PatchError::OperationFailed { why };
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(operations)).map_err(|error| failed(error.to_string()))?;
    // One operation at a time on a copy: a failure discards the copy, so nothing is undone.
    let mut patched = current.clone();
    let mut bounds = Bounds { depth: depth_of(current), copied_bytes: 0 };
    for operation in &patch.0 {
        bounds.admit(operation, &patched).map_err(failed)?;
        json_patch::patch_unsafe(&mut patched, std::slice::from_ref(operation))
            .map_err(|error| failed(error.to_string()))?;
    }
    Ok(patched)
}

/// What a JSON patch's operations may grow an object to: each operation is admitted before it runs, so a patch
/// cannot build an object too deep to drop or print without exhausting the stack, nor copy without bound.
struct Bounds {
    /// An upper bound on the object's depth.
    depth: usize,
    copied_bytes: usize,
}

impl Bounds {
    fn admit(&mut self, operation: &json_patch::PatchOperation, patched: &Value) -> Result<(), String> {
        use json_patch::PatchOperation;
        let depth = match operation {
            PatchOperation::Add(add) => add.path.count() + depth_of(&add.value),
            PatchOperation::Replace(replace) => replace.path.count() + depth_of(&replace.value),
            // The value moved or copied sits `from.count()` levels down, so it is at most `depth - that` deep.
            PatchOperation::Move(moved) => moved.path.count() + self.depth.saturating_sub(moved.from.count()),
            PatchOperation::Copy(copy) => {
                let size = patched.pointer(copy.from.as_str()).map(|from| from.to_string().len()).unwrap_or(0);
                self.copied_bytes = self.copied_bytes.saturating_add(size);
                if self.copied_bytes > JSON_PATCH_COPIED_BYTES_MAX {
                    return Err(format!("the copies would use more than {JSON_PATCH_COPIED_BYTES_MAX} bytes"));
                }
                copy.path.count() + self.depth.saturating_sub(copy.from.count())
            }
            PatchOperation::Remove(_) | PatchOperation::Test(_) => 0,
        };
        self.depth = self.depth.max(depth);
        if self.depth > strategic::DEPTH_MAX {
            return Err(format!("the patched object would be nested deeper than {} levels", strategic::DEPTH_MAX));
        }
        Ok(())
    }
}

/// How many levels of arrays and objects `value` nests (0 for a scalar), without recursion.
fn depth_of(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go_error(body: &str) -> String {
        let error = serde_json::from_str::<Value>(body).unwrap_err();
        go_json_error(&error, body.as_bytes())
    }

    #[test]
    fn syntax_errors_are_worded_as_go_words_them() {
        assert_eq!(go_error(""), "unexpected end of JSON input");
        assert_eq!(go_error("{\"a\":"), "unexpected end of JSON input");
        assert_eq!(go_error("}"), "invalid character '}' looking for beginning of value");
        assert_eq!(go_error("{\"a\" 1}"), "invalid character '1' after object key");
        assert_eq!(go_error("{\"a\":1 \"b\":2}"), "invalid character '\"' after object key:value pair");
        assert_eq!(go_error("[1 2]"), "invalid character '2' after array element");
        assert_eq!(go_error("{'a':1}"), r"invalid character '\'' looking for beginning of object key string");
    }

    #[test]
    fn depth_counts_levels_of_nesting() {
        assert_eq!(depth_of(&serde_json::json!(1)), 0);
        assert_eq!(depth_of(&serde_json::json!({"a": [1, {"b": {}}]})), 4);
    }
}
