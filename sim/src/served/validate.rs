//! A custom resource checked against its CRD's structural schema, as the API server checks it: the fields the schema
//! does not declare (pruned when stored, refused under `fieldValidation=Strict`) and the values it does not allow
//! (`422 Invalid`, one cause per field). The CRD's CEL rules are not here: admission runs them
//! ([`crate::apiserver::admission`]).
//!
//! The API server decodes a custom resource in three steps before it validates it (apiextensions-apiserver
//! `customresource_handler.go`, `unstructuredSchemaCoercer.apply`): it prunes the fields the schema does not declare
//! (`schema/pruning`), drops a `null` where the schema allows none and has no default
//! (`PruneNonNullableNullsWithoutDefaults`) and fills in defaults. [`validate`] judges the object as those steps leave
//! it, without copying it: an undeclared field is never a violation, a dropped `null` is a missing field (`Required
//! value` if required), a defaulted one is present. It then walks the schema as kube-openapi's `SchemaValidator`
//! does (`pkg/validation/validate`: type, string, format, number, array, enum, object, in that order) and words each
//! violation as apiextensions' `kubeOpenAPIResultToFieldErrors` turns it into a field error:
//! `spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1`.
//!
//! Formats are the API server's: on an integer only `int32` and `int64` count, on a number `float` and `double`, on
//! a string the formats it supports (`date-time` is the one checked here); any other is stripped before validation
//! (apiextensions `StripUnsupportedFormatsPostProcess`), so `format: uint32` means nothing. kube-openapi's own
//! quirks are kept where they are observable: a list where a formatted string is expected passes the type check, an
//! integer field with a format refuses a boolean as `must be of type int64: ""`, and a number out of its type's range
//! (`1.5` for an integer, since kube-openapi's January 2026 `numberValidator`) is a plain error apiextensions reports
//! on the path `<nil>`.
//!
//! Updates are judged as creates: the API server's ratcheting (an unchanged invalid field of an update is let
//! through) is not modelled.
//!
//! `metadata`, `apiVersion` and `kind` are not judged here: the schema never declares them at the top and the API
//! server checks `metadata` as ObjectMeta (names are checked elsewhere in the twin; an unknown field of `metadata`
//! is ObjectMeta's strict decoding, not the schema's). Unknown fields are found on the object as decoded, `status`
//! included; [`validate`] judges the object the strategy leaves (on create the API server drops `status` first when
//! the CRD has a status subresource).
//!
//! Not every keyword a structural schema may hold is handled: [`unhandled`] names the ones a schema uses that this
//! module would ignore (`pattern`, `multipleOf`, `x-kubernetes-list-type: set`, ...), and a test holds it empty for
//! every CRD the twin serves, so a schema change cannot slip past.
//!
//! Every walk is bounded: validation follows the schema (whose depth [`unhandled`] bounds), pruning follows the
//! object no deeper than [`DEPTH_MAX`] levels, and removed values are dropped without recursion. A tenant's write is
//! an attack; nothing here panics on any JSON.
//!
//! ```
//! use gpuclaim_sim::served::{resources, validate};
//! use serde_json::json;
//!
//! let claims = resources::find("gpu.cozystack.io", "v1alpha1", "gpuclaims").unwrap();
//! let claim = json!({"spec": {"className": "h100", "count": 0, "colour": "red"}});
//! let causes = validate::validate(claims, &claim);
//! assert_eq!(causes[0].message, "Invalid value: 0: spec.count in body should be greater than or equal to 1");
//! assert_eq!(validate::unknown_fields(claims, &claim), ["spec.colour"]);
//! ```

use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::crds;
use super::go;
use super::resources::Resource;
use super::status::{self, Cause};

/// The deepest level of an object pruning looks into. A schema is far shallower; only a value of the wrong type (a
/// list where a formatted string is expected, which kube-openapi lets pass) can lead pruning below the schema, and
/// there a container this deep is emptied whole.
pub const DEPTH_MAX: usize = 64;

/// The fields at the top of every object that pruning leaves alone (the root is an embedded resource).
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The string formats the API server validates (apiextensions `supportedVersionedFormats`, dashes removed as
/// go-openapi normalizes them); any other string format is stripped.
const SERVER_STRING_FORMATS: [&str; 25] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
];

/// The schema keywords this module applies (or that change nothing it judges: docs, and the CEL rules admission
/// runs). [`unhandled`] names any other.
const HANDLED_KEYWORDS: [&str; 23] = [
    "type",
    "format",
    "nullable",
    "default",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "items",
    "properties",
    "additionalProperties",
    "required",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-validations",
    "description",
    "title",
    "example",
];

/// The `openAPIV3Schema` of the version of `resource`'s CRD the twin serves (none for a resource no CRD describes).
pub fn schema_of(resource: &Resource) -> Option<&'static Value> {
    static CRDS: OnceLock<Vec<Value>> = OnceLock::new();
    let name = format!("{}.{}", resource.plural, resource.group);
    let crd = CRDS
        .get_or_init(crds::builtin)
        .iter()
        .find(|crd| crd.pointer("/metadata/name").and_then(Value::as_str) == Some(&name))?;
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let version =
        versions.iter().find(|version| version.get("name").and_then(Value::as_str) == Some(resource.version))?;
    version.pointer("/schema/openAPIV3Schema")
}

/// Every violation of `object` (a whole custom resource) against its CRD's schema, worded as the API server's
/// causes; empty for a valid object or a resource no CRD describes.
pub fn validate(resource: &Resource, object: &Value) -> Vec<Cause> {
    schema_of(resource).map(|schema| validate_with(schema, object)).unwrap_or_default()
}

/// [`validate`] against a given structural schema (a CRD version's `openAPIV3Schema`).
pub fn validate_with(schema: &Value, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    value_causes(object, schema, "", 0, &mut causes);
    causes
}

/// The paths of the fields of `object` its CRD's schema does not declare (`spec.foo`, `spec.tolerations[0].bogus`),
/// sorted as the API server sorts them (`sort.Strings`). Nothing below `x-kubernetes-preserve-unknown-fields` is
/// unknown, nor `apiVersion`, `kind` or `metadata` at the top.
pub fn unknown_fields(resource: &Resource, object: &Value) -> Vec<String> {
    schema_of(resource).map(|schema| unknown_fields_with(schema, object)).unwrap_or_default()
}

/// [`unknown_fields`] under a given structural schema.
pub fn unknown_fields_with(schema: &Value, object: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    unknown_in(object, Some(schema), "", 0, true, &mut paths);
    paths.sort();
    paths
}

/// Removes from `object` the fields its CRD's schema does not declare, as the API server prunes them before it stores
/// an object (under `fieldValidation` `Ignore` or `Warn`); afterwards [`unknown_fields`] finds none.
pub fn prune(resource: &Resource, object: &mut Value) {
    if let Some(schema) = schema_of(resource) {
        prune_with(schema, object);
    }
}

/// [`prune`] under a given structural schema.
pub fn prune_with(schema: &Value, object: &mut Value) {
    prune_in(object, Some(schema), 0, true);
}

/// The `400 BadRequest` a create or update with unknown fields answers under `fieldValidation=Strict` (the decoder's
/// strict decoding error, wrapped by the handler's `transformDecodeError`): `GPUClaim in version "v1alpha1" cannot be
/// handled as a GPUClaim: strict decoding error: unknown field "spec.foo"`. No details, as `NewBadRequest` sets none.
pub fn strict_error(resource: &Resource, paths: &[String]) -> Value {
    let message = format!(
        "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {errors}",
        kind = resource.kind,
        version = resource.version,
        errors = warnings(paths).join(", "),
    );
    status::bad_request(&message)
}

/// The `Warning` texts a write with unknown fields gets under `fieldValidation=Warn` (the API server's default when a
/// request names none; kubectl asks for `Strict`), one per field: `unknown field "spec.foo"`.
pub fn warnings(paths: &[String]) -> Vec<String> {
    paths.iter().map(|path| format!("unknown field \"{path}\"")).collect()
}

/// What of `schema` this module would ignore, one line each (`spec.name: pattern: "^a"`): a keyword it does not apply, a
/// format the API server validates that it does not, a schema nested deeper than [`DEPTH_MAX`].
pub fn unhandled(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    unhandled_in(schema, "", 0, &mut found);
    found
}

fn unhandled_in(schema: &Value, path: &str, depth: usize, found: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let Some(keywords) = schema.as_object() else {
        found.push(format!("{at}: a schema that is not an object"));
        return;
    };
    if depth >= DEPTH_MAX {
        found.push(format!("{at}: nested deeper than {DEPTH_MAX}"));
        return;
    }
    for (keyword, value) in keywords {
        let handled = match keyword.as_str() {
            "format" => value.as_str().is_some_and(|format| format_is_handled(schema, format)),
            "items" | "additionalProperties" | "properties" => value.is_object(),
            // Lists of sets and maps are checked for duplicates (`ValidateListSetsAndMaps`), which is not done here.
            "x-kubernetes-list-type" => value == "atomic",
            // Merge semantics for server-side apply: nothing to validate.
            "x-kubernetes-map-type" => true,
            keyword => HANDLED_KEYWORDS.contains(&keyword),
        };
        if !handled {
            found.push(format!("{at}: {keyword}: {value}"));
        }
    }
    for (name, property) in properties(schema) {
        unhandled_in(property, &child(path, name), depth + 1, found);
    }
    if let Some(items) = items(schema) {
        unhandled_in(items, &format!("{path}[]"), depth + 1, found);
    }
    if let Some(values) = additional(schema) {
        unhandled_in(values, &format!("{path}{{}}"), depth + 1, found);
    }
}

/// Whether validation of `format` on `schema` is all done here: the API server strips the format or this module
/// checks it as the API server does.
fn format_is_handled(schema: &Value, format: &str) -> bool {
    match effective_format(schema) {
        None => true,
        Some(_) => matches!(format, "int32" | "int64" | "float" | "double" | "date-time" | "datetime"),
    }
}

// --- Schema accessors.

fn types(schema: &Value) -> Vec<&str> {
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        return vec!["integer", "string"];
    }
    schema.get("type").and_then(Value::as_str).map(|name| vec![name]).unwrap_or_default()
}

fn flag(schema: &Value, keyword: &str) -> bool {
    schema.get(keyword).and_then(Value::as_bool) == Some(true)
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

fn property<'s>(schema: &'s Value, name: &str) -> Option<&'s Value> {
    schema.get("properties")?.get(name)
}

fn items(schema: &Value) -> Option<&Value> {
    schema.get("items").filter(|items| items.is_object())
}

/// The schema of a map's values (`additionalProperties` as a schema).
fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|values| values.is_object())
}

/// The schema a member `name` of an object under `schema` is judged by: its property, else the map's values.
fn member_schema<'s>(schema: &'s Value, name: &str) -> Option<&'s Value> {
    property(schema, name).or_else(|| additional(schema))
}

/// The format the API server keeps after stripping the ones it does not support.
fn effective_format(schema: &Value) -> Option<&str> {
    let format = schema.get("format")?.as_str().filter(|format| !format.is_empty())?;
    let types = types(schema);
    let single = if types.len() == 1 { types[0] } else { "" };
    let kept = match single {
        "" | "string" => SERVER_STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    };
    kept.then_some(format)
}

// --- Validation.

/// How a member of an object reads after the decoder's steps: absent, a value to judge, or defaulted (the default
/// fills it: judged when the CRD was).
enum Member<'v> {
    Absent,
    Present(&'v Value),
    Defaulted,
}

fn member<'v>(object: &'v Map<String, Value>, name: &str, schema: Option<&Value>) -> Member<'v> {
    let has_default = schema.is_some_and(|schema| schema.get("default").is_some());
    match object.get(name) {
        Some(Value::Null) if schema.is_some_and(|schema| !flag(schema, "nullable")) => match has_default {
            true => Member::Defaulted,
            // `PruneNonNullableNullsWithoutDefaults` drops it.
            false => Member::Absent,
        },
        Some(value) => Member::Present(value),
        None if has_default => Member::Defaulted,
        None => Member::Absent,
    }
}

fn child(path: &str, name: &str) -> String {
    match path {
        "" => name.to_owned(),
        path => format!("{path}.{name}"),
    }
}

/// kube-openapi's `SchemaValidator.Validate`: every validator that applies to the value's kind, in its order.
fn value_causes(value: &Value, schema: &Value, path: &str, depth: usize, causes: &mut Vec<Cause>) {
    if depth >= DEPTH_MAX {
        return;
    }
    type_causes(value, schema, path, causes);
    if value.is_null() {
        enum_causes(value, schema, path, causes);
        return;
    }
    match value {
        Value::String(text) => {
            string_causes(text, schema, path, causes);
            format_causes(text, schema, path, causes);
        }
        Value::Number(_) => number_causes(value, schema, path, causes),
        Value::Array(elements) => array_causes(elements, schema, path, depth, causes),
        _ => {}
    }
    enum_causes(value, schema, path, causes);
    if let Value::Object(members) = value {
        object_causes(members, schema, path, depth, causes);
    }
}

/// The JSON type kube-openapi infers for a value, and the format it infers with it.
fn kind_of(value: &Value) -> (&'static str, &'static str) {
    match value {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::Number(number) if number.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::String(_) => ("string", ""),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

/// swag's `IsFloat64AJSONInteger` (go-openapi/swag `conv`): within ±(2^53 - 1), a whole number or one within a
/// relative 1e-9 of it.
fn is_json_integer(float: f64) -> bool {
    const JSON_FLOAT_MAX: f64 = 9_007_199_254_740_991.0;
    if !float.is_finite() || float.abs() > JSON_FLOAT_MAX {
        return false;
    }
    let rounded = float.round();
    float == rounded || (rounded != 0.0 && (float - rounded).abs() < 1e-9 * rounded.abs())
}

/// kube-openapi's `typeValidator`.
fn type_causes(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let types = types(schema);
    let format = effective_format(schema);
    if types.is_empty() && format.is_none() {
        return;
    }
    if value.is_null() {
        if !types.is_empty() && !types.contains(&"null") && !flag(schema, "nullable") {
            causes.push(type_invalid(path, &types.join(","), "null"));
        }
        return;
    }
    let (kind, data_format) = kind_of(value);
    let float_int = kind == "number" && value.as_f64().is_some_and(is_json_integer) && types.contains(&"integer");
    let int_float = kind == "integer" && types.contains(&"number");
    let string_or_list = value.is_string() || value.is_array();
    if let Some(format) = format
        && !string_or_list
        && !(types.contains(&kind) || data_format == format || float_int || int_float)
    {
        causes.push(type_invalid(path, format, data_format));
        return;
    }
    if format.is_some() && string_or_list && !types.contains(&"number") && !types.contains(&"integer") {
        return;
    }
    if !(types.contains(&kind) || float_int || int_float) {
        causes.push(type_invalid(path, &types.join(","), kind));
    }
}

/// kube-openapi's `InvalidType` as apiextensions reports it (`field.TypeInvalid`, the value being the type or the
/// text found, which the message quotes too).
fn type_invalid(path: &str, type_name: &str, found: &str) -> Cause {
    let found = go::quote(found);
    let message = format!("Invalid value: {found}: {path} in body must be of type {type_name}: {found}");
    Cause::new("FieldValueTypeInvalid", &message, path)
}

/// `field.Invalid` with kube-openapi's message as detail.
fn invalid(path: &str, value: &str, detail: &str) -> Cause {
    Cause::new("FieldValueInvalid", &format!("Invalid value: {value}: {path} in body {detail}"), path)
}

fn limit(schema: &Value, keyword: &str) -> Option<i64> {
    schema.get(keyword).and_then(Value::as_i64)
}

/// kube-openapi's `stringValidator`: the first of maxLength, minLength that fails (lengths in characters).
fn string_causes(text: &str, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let length = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
    if let Some(max) = limit(schema, "maxLength")
        && length > max
    {
        // `field.TooLongMaxLength`: the value is left out.
        causes.push(Cause::new("FieldValueTooLong", &format!("Too long: may not be longer than {max}"), path));
        return;
    }
    if let Some(min) = limit(schema, "minLength")
        && length < min
    {
        causes.push(invalid(path, &go::quote(text), &format!("should be at least {min} chars long")));
    }
}

/// kube-openapi's `formatValidator` for the one string format checked here.
fn format_causes(text: &str, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(format) = effective_format(schema) else { return };
    if format.replace('-', "") == "datetime" && !is_date_time(text) {
        causes.push(type_invalid(path, format, text));
    }
}

/// kube-openapi's `numberValidator`: whether the value fits its type and format, then minimum, maximum. A bound that
/// fits the schema's type is compared natively (an integer against the bound truncated to an integer, a float
/// against the bound); one that does not is reported and compared as floats.
fn number_causes(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let float = value.as_f64().unwrap_or(0.0);
    if let Some(error) = range_error(value.as_i64().map_or(Number::Float(float), Number::Int), "Checked", schema, path)
    {
        causes.push(range_cause(&error));
    }
    for (keyword, exclusive_keyword, lower) in
        [("minimum", "exclusiveMinimum", true), ("maximum", "exclusiveMaximum", false)]
    {
        let Some(bound) = schema.get(keyword).and_then(Value::as_f64) else { continue };
        let exclusive = flag(schema, exclusive_keyword);
        let prefix = if lower { "Minimum boundary" } else { "Maximum boundary" };
        let bound_error = range_error(Number::Float(bound), prefix, schema, path);
        let (outside, shown_value, shown_bound) = match (value.as_i64(), &bound_error) {
            (Some(integer), None) => {
                // Go's int64(float64), saturating here where Go's is undefined.
                let bound = bound as i64;
                (out_of_bound(integer.cmp(&bound), lower, exclusive), integer.to_string(), bound.to_string())
            }
            (integer, _) => {
                let Some(ordering) = float.partial_cmp(&bound) else { continue };
                // Compared as floats the value is reported as one, unless it was one natively already.
                let shown = match integer {
                    Some(_) if bound_error.is_some() => go_float(float),
                    _ => go_value(value),
                };
                (out_of_bound(ordering, lower, exclusive), shown, go_float(bound))
            }
        };
        if let Some(error) = bound_error {
            causes.push(range_cause(&error));
        }
        if outside {
            let relation = match (lower, exclusive) {
                (true, false) => "greater than or equal to",
                (true, true) => "greater than",
                (false, false) => "less than or equal to",
                (false, true) => "less than",
            };
            causes.push(invalid(path, &shown_value, &format!("should be {relation} {shown_bound}")));
        }
    }
}

/// A number as the decoder reads it: an int64 if it fits one, else a float64.
#[derive(Clone, Copy)]
enum Number {
    Int(i64),
    Float(f64),
}

/// kube-openapi's `IsValueValidAgainstRange` for a schema of one numeric type: whether the number, written as
/// swag writes it (`%d`, or `'f'` with the shortest digits), parses as that type and format.
fn range_error(number: Number, prefix: &str, schema: &Value, path: &str) -> Option<String> {
    let types = types(schema);
    let type_name = match types.as_slice() {
        ["integer"] => "integer",
        ["number"] => "number",
        _ => return None,
    };
    let format = effective_format(schema).unwrap_or("");
    let text = match number {
        Number::Int(integer) => integer.to_string(),
        Number::Float(float) => format!("{float}"),
    };
    let fits = match (type_name, format) {
        ("integer", "int32") => text.parse::<i32>().is_ok(),
        ("integer", _) => text.parse::<i64>().is_ok(),
        (_, "float") => text.parse::<f32>().is_ok_and(f32::is_finite),
        _ => true,
    };
    match (fits, format) {
        (true, _) => None,
        (false, "") => Some(format!("{prefix} value must be of type {type_name} (default format) in {path}")),
        (false, format) => Some(format!("{prefix} value must be of type {type_name} with format {format} in {path}")),
    }
}

/// A range error is a plain error, not a kube-openapi validation error: apiextensions reports it as `field.Invalid`
/// of an empty value on the path it was given, which is none (`<nil>`) for a custom resource's whole object.
fn range_cause(error: &str) -> Cause {
    Cause::new("FieldValueInvalid", &format!("Invalid value: \"\": {error}"), "<nil>")
}

fn out_of_bound(ordering: std::cmp::Ordering, lower: bool, exclusive: bool) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (ordering, lower) {
        (Less, true) | (Greater, false) => true,
        (Equal, _) => exclusive,
        _ => false,
    }
}

/// kube-openapi's `schemaSliceValidator`: each element against `items`, then minItems, maxItems.
fn array_causes(elements: &[Value], schema: &Value, path: &str, depth: usize, causes: &mut Vec<Cause>) {
    if let Some(items) = items(schema) {
        for (index, element) in elements.iter().enumerate() {
            value_causes(element, items, &format!("{path}[{index}]"), depth + 1, causes);
        }
    }
    let size = elements.len();
    if let Some(min) = limit(schema, "minItems")
        && i64::try_from(size).unwrap_or(i64::MAX) < min
    {
        causes.push(invalid(path, &size.to_string(), &format!("should have at least {min} items")));
    }
    if let Some(max) = limit(schema, "maxItems")
        && i64::try_from(size).unwrap_or(i64::MAX) > max
    {
        let message = format!("Too many: {size}: must have at most {max} items");
        causes.push(Cause::new("FieldValueTooMany", &message, path));
    }
}

/// kube-openapi's `basicCommonValidator` (enum), reported as `field.NotSupported` with the allowed values quoted.
fn enum_causes(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else { return };
    if allowed.is_empty() || (!value.is_null() && allowed.iter().any(|choice| shallow_eq(value, choice))) {
        return;
    }
    let choices: Vec<String> = allowed
        .iter()
        .map(|choice| match choice {
            Value::String(text) => go::quote(text),
            other => go::quote(&other.to_string()),
        })
        .collect();
    let message = format!("Unsupported value: {}: supported values: {}", go_value(value), choices.join(", "));
    causes.push(Cause::new("FieldValueNotSupported", &message, path));
}

/// Equality of a value with an enum choice, comparing containers only if the choice is one (an enum of scalars never
/// walks a deep value).
fn shallow_eq(value: &Value, choice: &Value) -> bool {
    match (value, choice) {
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => {
            bounded_eq(value, choice, 0)
        }
        (Value::Number(number), Value::Number(other)) => number.as_f64() == other.as_f64(),
        _ => value == choice,
    }
}

fn bounded_eq(left: &Value, right: &Value, depth: usize) -> bool {
    if depth >= DEPTH_MAX {
        return false;
    }
    match (left, right) {
        (Value::Array(left), Value::Array(right)) => {
            left.len() == right.len() && left.iter().zip(right).all(|(left, right)| bounded_eq(left, right, depth + 1))
        }
        (Value::Object(left), Value::Object(right)) => {
            left.len() == right.len()
                && left.iter().all(|(key, left)| right.get(key).is_some_and(|right| bounded_eq(left, right, depth + 1)))
        }
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        (left, right) => shallow_eq(left, right),
    }
}

/// kube-openapi's `objectValidator`: the map's values against `additionalProperties`, each property, then required.
fn object_causes(members: &Map<String, Value>, schema: &Value, path: &str, depth: usize, causes: &mut Vec<Cause>) {
    if let Some(values) = additional(schema) {
        for name in members.keys().filter(|name| property(schema, name).is_none()) {
            if let Member::Present(value) = member(members, name, Some(values)) {
                value_causes(value, values, &child(path, name), depth + 1, causes);
            }
        }
    }
    for (name, declared) in properties(schema) {
        if let Member::Present(value) = member(members, name, Some(declared)) {
            value_causes(value, declared, &child(path, name), depth + 1, causes);
        }
    }
    let required = schema.get("required").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for name in required.iter().filter_map(Value::as_str) {
        let declared = member_schema(schema, name);
        // A required field the schema does not declare is pruned before validation: never present.
        let kept = declared.is_some()
            || flag(schema, "x-kubernetes-preserve-unknown-fields")
            || (path.is_empty() && META_FIELDS.contains(&name));
        if !kept || matches!(member(members, name, declared), Member::Absent) {
            causes.push(Cause::new("FieldValueRequired", "Required value", &child(path, name)));
        }
    }
}

/// go-openapi's `IsDateTime`: a full date, `t`, then `hh:mm:ss`, an optional fraction and a zone, case-insensitive.
fn is_date_time(text: &str) -> bool {
    if text.len() < 4 {
        return false;
    }
    let lower = text.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else { return false };
    is_full_date(date) && is_time_of_day(time)
}

/// Go's `time.Parse("2006-01-02", ...)`: exactly `yyyy-mm-dd`, a real day of that month.
fn is_full_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' || !digits(0..4) || !digits(5..7) || !digits(8..10) {
        return false;
    }
    let number = |range: std::ops::Range<usize>| text[range].parse::<u32>().unwrap_or(0);
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// go-openapi's `DateTimePattern` after the `t`: `^(\d{2}):(\d{2}):(\d{2})(.\d+)?(z|[+-]\d{2}:\d{2})$`, the clock
/// no later than `23:59:59`.
fn is_time_of_day(text: &str) -> bool {
    let bytes = text.as_bytes();
    let two_digits = |at: usize| bytes.get(at..at + 2).is_some_and(|pair| pair.iter().all(u8::is_ascii_digit));
    if !(two_digits(0) && bytes.get(2) == Some(&b':') && two_digits(3) && bytes.get(5) == Some(&b':') && two_digits(6))
    {
        return false;
    }
    if &text[0..2] > "23" || &text[3..5] > "59" || &text[6..8] > "59" {
        return false;
    }
    let rest = &text[8..];
    let zone = |zone: &str| {
        let bytes = zone.as_bytes();
        zone == "z"
            || (bytes.len() == 6
                && matches!(bytes[0], b'+' | b'-')
                && bytes[1..3].iter().all(u8::is_ascii_digit)
                && bytes[3] == b':'
                && bytes[4..6].iter().all(u8::is_ascii_digit))
    };
    if zone(rest) {
        return true;
    }
    // The fraction: any one character (the pattern's unescaped `.`), then digits.
    let mut chars = rest.chars();
    match chars.next() {
        Some('\n') | None => false,
        Some(_) => {
            let after = chars.as_str();
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && zone(&after[digits..])
        }
    }
}

// --- Values as Go prints them in field errors.

/// A field error's value as apimachinery's `ErrorBody` prints it: simple types with `%v`, a string with `%q`, null
/// as `"null"`, a list or a map with `%#v`.
fn go_value(value: &Value) -> String {
    match value {
        Value::Null => go::quote("null"),
        value => go_syntax(value, 0),
    }
}

/// Go's `%#v` of a decoded JSON value (`[]interface {}{"a", 1}`, `map[string]interface {}{"k":true}`), elided below
/// a few levels.
fn go_syntax(value: &Value, depth: usize) -> String {
    const SHOWN_DEPTH_MAX: usize = 8;
    if depth >= SHOWN_DEPTH_MAX {
        return "...".to_owned();
    }
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => integer.to_string(),
            None => go_float(number.as_f64().unwrap_or(0.0)),
        },
        Value::String(text) => go::quote(text),
        Value::Array(elements) => {
            let shown: Vec<String> = elements.iter().map(|element| go_syntax(element, depth + 1)).collect();
            format!("[]interface {{}}{{{}}}", shown.join(", "))
        }
        Value::Object(members) => {
            let shown: Vec<String> = members
                .iter()
                .map(|(key, member)| format!("{}:{}", go::quote(key), go_syntax(member, depth + 1)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", shown.join(", "))
        }
    }
}

/// Go's `%v` of a float64: the shortest digits, with an exponent below 1e-4 and from 1e6 on, as `%g` decides for the
/// shortest precision (`1e+06`, `1.5`, `100000`).
fn go_float(float: f64) -> String {
    let scientific = format!("{float:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..6).contains(&exponent) {
        return format!("{float}");
    }
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
}

// --- Unknown fields and pruning (apiextensions `schema/pruning`).

/// The unknown fields of `value` under `schema` (none: no field is declared), appended as paths.
fn unknown_in(value: &Value, schema: Option<&Value>, path: &str, depth: usize, root: bool, paths: &mut Vec<String>) {
    if let Some(schema) = schema.filter(|schema| flag(schema, "x-kubernetes-preserve-unknown-fields")) {
        unknown_below_preserved(value, schema, path, depth, root, paths);
        return;
    }
    if depth >= DEPTH_MAX {
        if is_nonempty_container(value) {
            paths.push(path.to_owned());
        }
        return;
    }
    match value {
        Value::Object(members) => {
            for (name, member) in members {
                if root && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                match schema.and_then(|schema| member_schema(schema, name)) {
                    Some(declared) => unknown_in(member, Some(declared), &child(path, name), depth + 1, false, paths),
                    None => paths.push(child(path, name)),
                }
            }
        }
        Value::Array(elements) => {
            let items = schema.and_then(items);
            for (index, element) in elements.iter().enumerate() {
                unknown_in(element, items, &format!("{path}[{index}]"), depth + 1, false, paths);
            }
        }
        _ => {}
    }
}

/// `skipPrune`: below `x-kubernetes-preserve-unknown-fields` only the declared fields are judged.
fn unknown_below_preserved(
    value: &Value,
    schema: &Value,
    path: &str,
    depth: usize,
    root: bool,
    paths: &mut Vec<String>,
) {
    if depth >= DEPTH_MAX {
        return;
    }
    match value {
        Value::Object(members) => {
            for (name, member) in members {
                if root && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                if let Some(declared) = member_schema(schema, name) {
                    unknown_in(member, Some(declared), &child(path, name), depth + 1, false, paths);
                }
            }
        }
        Value::Array(elements) => {
            let Some(items) = items(schema) else { return };
            for (index, element) in elements.iter().enumerate() {
                unknown_below_preserved(element, items, &format!("{path}[{index}]"), depth + 1, false, paths);
            }
        }
        _ => {}
    }
}

/// [`unknown_in`]'s twin that removes what it would report.
fn prune_in(value: &mut Value, schema: Option<&Value>, depth: usize, root: bool) {
    if let Some(schema) = schema.filter(|schema| flag(schema, "x-kubernetes-preserve-unknown-fields")) {
        prune_below_preserved(value, schema, depth, root);
        return;
    }
    if depth >= DEPTH_MAX {
        if is_nonempty_container(value) {
            drop_flat(std::mem::replace(value, empty_like(value)));
        }
        return;
    }
    match value {
        Value::Object(members) => {
            let unknown: Vec<String> = members
                .keys()
                .filter(|name| !(root && META_FIELDS.contains(&name.as_str())))
                .filter(|name| schema.and_then(|schema| member_schema(schema, name)).is_none())
                .cloned()
                .collect();
            for name in unknown {
                if let Some(removed) = members.remove(&name) {
                    drop_flat(removed);
                }
            }
            for (name, member) in members.iter_mut() {
                if root && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                prune_in(member, schema.and_then(|schema| member_schema(schema, name)), depth + 1, false);
            }
        }
        Value::Array(elements) => {
            let items = schema.and_then(items);
            for element in elements {
                prune_in(element, items, depth + 1, false);
            }
        }
        _ => {}
    }
}

fn prune_below_preserved(value: &mut Value, schema: &Value, depth: usize, root: bool) {
    if depth >= DEPTH_MAX {
        return;
    }
    match value {
        Value::Object(members) => {
            for (name, member) in members.iter_mut() {
                if root && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                if let Some(declared) = member_schema(schema, name) {
                    prune_in(member, Some(declared), depth + 1, false);
                }
            }
        }
        Value::Array(elements) => {
            let Some(items) = items(schema) else { return };
            for element in elements {
                prune_below_preserved(element, items, depth + 1, false);
            }
        }
        _ => {}
    }
}

fn is_nonempty_container(value: &Value) -> bool {
    match value {
        Value::Array(elements) => !elements.is_empty(),
        Value::Object(members) => !members.is_empty(),
        _ => false,
    }
}

fn empty_like(value: &Value) -> Value {
    match value {
        Value::Object(_) => Value::Object(Map::new()),
        _ => Value::Array(Vec::new()),
    }
}

/// Drops a value without recursion: a removed field may be nested as deep as a tenant likes, and the drop glue of
/// `Value` recurses once per level.
fn drop_flat(value: Value) {
    let mut pending = vec![value];
    while let Some(mut next) = pending.pop() {
        match &mut next {
            Value::Array(elements) => pending.append(elements),
            Value::Object(members) => pending.extend(std::mem::take(members).into_iter().map(|(_, member)| member)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn strings_quote_as_go_quotes_them() {
        assert_eq!(go::quote("two"), "\"two\"");
        assert_eq!(go::quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(go::quote("\u{1}\u{7f}"), "\"\\x01\\x7f\"");
        assert_eq!(go::quote("\u{a0}é"), "\"\\u00a0é\"");
    }

    #[test]
    fn lists_and_maps_print_as_go_syntax() {
        let value = serde_json::json!([1, "a", null, {"k": true, "f": 1.5}]);
        assert_eq!(
            go_value(&value),
            r#"[]interface {}{1, "a", interface {}(nil), map[string]interface {}{"f":1.5, "k":true}}"#
        );
    }

    #[test]
    fn enum_choices_compare_containers_without_looping() {
        let choices = serde_json::json!([["a", {"b": 1}], {"k": [1]}, "x", 2]);
        let schema = serde_json::json!({"enum": choices});
        for allowed in choices.as_array().unwrap() {
            assert!(validate_with(&schema, allowed).is_empty(), "{allowed}");
        }
        for refused in [serde_json::json!({"a": 1}), serde_json::json!([["a", {"b": 2}]]), serde_json::json!(2.5)] {
            assert_eq!(validate_with(&schema, &refused).len(), 1, "{refused}");
        }
        assert!(validate_with(&schema, &serde_json::json!(2.0)).is_empty());
    }

    #[test]
    fn date_times_are_the_ones_go_openapi_accepts() {
        for good in ["2024-02-29T23:59:59Z", "2024-01-01t00:00:00.123+02:00", "2024-01-01T00:00:00,5Z"] {
            assert!(is_date_time(good), "{good}");
        }
        for bad in ["2023-02-29T00:00:00Z", "2024-01-01", "2024-01-01T24:00:00Z", "2024-1-01T00:00:00Z", "", "tttt"] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }
}
