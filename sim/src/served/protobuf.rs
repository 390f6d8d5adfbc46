//! Kubernetes' protobuf request bodies, read as far as the reviews need: kubectl sends `kubectl create token`'s
//! TokenRequest, `kubectl auth can-i`'s SelfSubjectAccessReview (SelfSubjectRulesReview with `--list`) and `kubectl
//! auth whoami`'s SelfSubjectReview as `application/vnd.kubernetes.protobuf`, so the twin reads those (and
//! TokenReview, SubjectAccessReview) into the JSON they stand for. Every other protobuf body is
//! refused by the writes ([`super::writes::meta`]).
//!
//! The wire form (apimachinery `runtime/serializer/protobuf`): the magic `k8s\0`, then a `runtime.Unknown` message
//! (1: typeMeta {1: apiVersion, 2: kind}, 2: raw, the object's own message). Field numbers are the `protobuf` tags
//! of k8s.io/api's Go types. Unknown fields are skipped, as a protobuf reader skips them.
//!
//! ```
//! use gpuclaim_sim::served::protobuf;
//!
//! // A TokenRequest asking for 600 seconds, as kubectl encodes it.
//! let raw = [0x12, 0x03, 0x20, 0xd8, 0x04];
//! let type_meta = b"\x0a\x18authentication.k8s.io/v1\x12\x0cTokenRequest";
//! let mut body = b"k8s\0".to_vec();
//! body.extend([0x0a, type_meta.len() as u8]);
//! body.extend(type_meta);
//! body.extend([0x12, raw.len() as u8]);
//! body.extend(raw);
//! let object = protobuf::decode(&body, "TokenRequest").unwrap();
//! assert_eq!(object["spec"]["expirationSeconds"], 600);
//! assert_eq!(object["apiVersion"], "authentication.k8s.io/v1");
//! ```

use serde_json::{Map, Value};

/// The media type of a protobuf body.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// A protobuf body the twin cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    #[error("the protobuf body does not start with Kubernetes' magic bytes")]
    Magic,
    #[error("the protobuf body ends inside a field")]
    Truncated,
    #[error("the protobuf body has a field of wire type {0}, which Kubernetes' types do not use")]
    WireType(u64),
    #[error("the protobuf body holds a {found}, not a {expected}")]
    Kind { found: String, expected: String },
    #[error("the twin reads protobuf bodies of reviews only, not of a {0}: send JSON")]
    Unsupported(String),
}

/// One field of a message: its number, its JSON name and what it holds.
#[derive(Clone, Copy, Debug)]
enum Field {
    Text(u64, &'static str),
    Texts(u64, &'static str),
    Int(u64, &'static str),
    Message(u64, &'static str, &'static [Field]),
}

use Field::{Int, Message, Text, Texts};

const OBJECT_META: &[Field] = &[Text(1, "name"), Text(2, "generateName"), Text(3, "namespace")];
const BOUND_OBJECT_REFERENCE: &[Field] = &[Text(1, "kind"), Text(2, "apiVersion"), Text(3, "name"), Text(4, "uid")];
const TOKEN_REQUEST: &[Field] = &[
    Message(1, "metadata", OBJECT_META),
    Message(
        2,
        "spec",
        &[Texts(1, "audiences"), Message(3, "boundObjectRef", BOUND_OBJECT_REFERENCE), Int(4, "expirationSeconds")],
    ),
];
const TOKEN_REVIEW: &[Field] =
    &[Message(1, "metadata", OBJECT_META), Message(2, "spec", &[Text(1, "token"), Texts(2, "audiences")])];
const RESOURCE_ATTRIBUTES: &[Field] = &[
    Text(1, "namespace"),
    Text(2, "verb"),
    Text(3, "group"),
    Text(4, "version"),
    Text(5, "resource"),
    Text(6, "subresource"),
    Text(7, "name"),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[Text(1, "path"), Text(2, "verb")];
const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    Message(1, "metadata", OBJECT_META),
    Message(
        2,
        "spec",
        &[
            Message(1, "resourceAttributes", RESOURCE_ATTRIBUTES),
            Message(2, "nonResourceAttributes", NON_RESOURCE_ATTRIBUTES),
        ],
    ),
];
const SUBJECT_ACCESS_REVIEW: &[Field] = &[
    Message(1, "metadata", OBJECT_META),
    Message(
        2,
        "spec",
        &[
            Message(1, "resourceAttributes", RESOURCE_ATTRIBUTES),
            Message(2, "nonResourceAttributes", NON_RESOURCE_ATTRIBUTES),
            Text(3, "user"),
            Texts(4, "groups"),
            Text(6, "uid"),
        ],
    ),
];
const SELF_SUBJECT_RULES_REVIEW: &[Field] =
    &[Message(1, "metadata", OBJECT_META), Message(2, "spec", &[Text(1, "namespace")])];
const SELF_SUBJECT_REVIEW: &[Field] = &[Message(1, "metadata", OBJECT_META)];
const UNKNOWN: &[Field] = &[
    Message(1, "typeMeta", &[Text(1, "apiVersion"), Text(2, "kind")]),
    Text(3, "contentEncoding"),
    Text(4, "contentType"),
];

/// The message of a kind the twin reads from protobuf.
fn schema(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "TokenRequest" => Some(TOKEN_REQUEST),
        "TokenReview" => Some(TOKEN_REVIEW),
        "SubjectAccessReview" => Some(SUBJECT_ACCESS_REVIEW),
        "SelfSubjectAccessReview" => Some(SELF_SUBJECT_ACCESS_REVIEW),
        "SelfSubjectRulesReview" => Some(SELF_SUBJECT_RULES_REVIEW),
        "SelfSubjectReview" => Some(SELF_SUBJECT_REVIEW),
        _ => None,
    }
}

/// Reads a protobuf body holding a `kind` (one of the reviews) into its JSON, `apiVersion` and `kind` included.
pub fn decode(body: &[u8], kind: &str) -> Result<Value, ProtobufError> {
    let fields = schema(kind).ok_or_else(|| ProtobufError::Unsupported(kind.to_owned()))?;
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::Magic)?;
    let unknown = message(envelope, UNKNOWN)?;
    let found = unknown.pointer("/typeMeta/kind").and_then(Value::as_str).unwrap_or_default();
    if !found.is_empty() && found != kind {
        return Err(ProtobufError::Kind { found: found.to_owned(), expected: kind.to_owned() });
    }
    let raw = field_bytes(envelope, 2)?.unwrap_or_default();
    let mut object = message(raw, fields)?;
    for key in ["apiVersion", "kind"] {
        if let Some(value) = unknown.pointer(&format!("/typeMeta/{key}")) {
            object[key] = value.clone();
        }
    }
    Ok(object)
}

/// A cursor over a message's bytes.
struct Reader<'b> {
    bytes: &'b [u8],
}

impl<'b> Reader<'b> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        // A varint is at most 10 bytes.
        for shift in (0..70).step_by(7) {
            let (&byte, rest) = self.bytes.split_first().ok_or(ProtobufError::Truncated)?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Truncated)
    }

    fn take(&mut self, count: usize) -> Result<&'b [u8], ProtobufError> {
        if self.bytes.len() < count {
            return Err(ProtobufError::Truncated);
        }
        let (taken, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(taken)
    }

    /// The next field: its number and its value (a varint, or the bytes of a length-delimited or fixed field).
    fn field(&mut self) -> Result<(u64, Wire<'b>), ProtobufError> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Bytes(self.take(8)?),
            2 => {
                let length = usize::try_from(self.varint()?).map_err(|_| ProtobufError::Truncated)?;
                Wire::Bytes(self.take(length)?)
            }
            5 => Wire::Bytes(self.take(4)?),
            other => return Err(ProtobufError::WireType(other)),
        };
        Ok((key >> 3, value))
    }
}

/// A field's value on the wire.
enum Wire<'b> {
    Varint(u64),
    Bytes(&'b [u8]),
}

/// The bytes of the last field numbered `number` of a message (the last one wins, as protobuf reads it).
fn field_bytes(bytes: &[u8], number: u64) -> Result<Option<&[u8]>, ProtobufError> {
    let mut reader = Reader { bytes };
    let mut found = None;
    while !reader.bytes.is_empty() {
        if let (seen, Wire::Bytes(value)) = reader.field()?
            && seen == number
        {
            found = Some(value);
        }
    }
    Ok(found)
}

/// A message read into JSON by its fields; fields the schema does not name are skipped.
fn message(bytes: &[u8], fields: &[Field]) -> Result<Value, ProtobufError> {
    let mut object = Map::new();
    let mut reader = Reader { bytes };
    while !reader.bytes.is_empty() {
        let (number, wire) = reader.field()?;
        let Some(field) = fields.iter().find(|field| field.number() == number) else { continue };
        match (field, wire) {
            (Text(_, name), Wire::Bytes(value)) => {
                object.insert((*name).to_owned(), String::from_utf8_lossy(value).into_owned().into());
            }
            (Texts(_, name), Wire::Bytes(value)) => {
                let list = object.entry(*name).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = list {
                    items.push(String::from_utf8_lossy(value).into_owned().into());
                }
            }
            // int64 on the wire: two's complement in a varint.
            (Int(_, name), Wire::Varint(value)) => {
                object.insert((*name).to_owned(), (value as i64).into());
            }
            (Message(_, name, inner), Wire::Bytes(value)) => {
                object.insert((*name).to_owned(), message(value, inner)?);
            }
            // A field of another wire type than its schema's is not one of ours: skipped.
            _ => {}
        }
    }
    Ok(Value::Object(object))
}

impl Field {
    fn number(&self) -> u64 {
        match *self {
            Text(number, _) | Texts(number, _) | Int(number, _) | Message(number, _, _) => number,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A length-delimited field.
    fn bytes(number: u8, value: &[u8]) -> Vec<u8> {
        let mut field = vec![number << 3 | 2, value.len() as u8];
        field.extend(value);
        field
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [bytes(1, api_version.as_bytes()), bytes(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), bytes(1, &type_meta), bytes(2, raw), bytes(4, b"application/vnd.kubernetes.protobuf")].concat()
    }

    #[test]
    fn a_self_subject_access_review_reads_as_its_json() {
        let attributes = [bytes(1, b"team"), bytes(2, b"create"), bytes(5, b"configmaps")].concat();
        let spec = bytes(1, &attributes);
        let raw = [bytes(1, &[]), bytes(2, &spec), bytes(3, &[0x08, 0x00])].concat();
        let body = envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", &raw);
        assert_eq!(
            decode(&body, "SelfSubjectAccessReview").unwrap(),
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                "spec": {"resourceAttributes": {"namespace": "team", "verb": "create", "resource": "configmaps"}}})
        );
    }

    #[test]
    fn a_subject_access_reviews_groups_are_a_list() {
        let spec = [
            bytes(2, &[bytes(1, b"/metrics"), bytes(2, b"get")].concat()),
            bytes(3, b"u"),
            bytes(4, b"a"),
            bytes(4, b"b"),
        ]
        .concat();
        let body = envelope("authorization.k8s.io/v1", "SubjectAccessReview", &bytes(2, &spec));
        let object = decode(&body, "SubjectAccessReview").unwrap();
        assert_eq!(
            object["spec"],
            json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}, "user": "u", "groups": ["a", "b"]})
        );
    }

    #[test]
    fn other_bodies_are_refused_with_the_reason() {
        let body = envelope("v1", "ConfigMap", &[]);
        assert_eq!(
            decode(&body, "TokenReview"),
            Err(ProtobufError::Kind { found: "ConfigMap".into(), expected: "TokenReview".into() })
        );
        assert_eq!(decode(&body, "ConfigMap"), Err(ProtobufError::Unsupported("ConfigMap".into())));
        assert_eq!(decode(b"{}", "TokenReview"), Err(ProtobufError::Magic));
        let truncated = [MAGIC, &[0x12, 0x05, 0x12]].concat();
        assert_eq!(decode(&truncated, "TokenReview"), Err(ProtobufError::Truncated));
        let group = [MAGIC, &[0x13]].concat();
        assert_eq!(decode(&group, "TokenReview"), Err(ProtobufError::WireType(3)));
    }
}
