//! The strategic merge patch applier, as apimachinery's `strategicpatch.StrategicMergeMapPatch` applies a patch on
//! the API server (the SMP spec: community `strategic-merge-patch.md` and `preserve-order-in-strategic-merge-patch.md`).
//!
//! - Maps merge key by key; `null` deletes a key; `{"$patch": "replace"}` in a map replaces it, `{"$patch":
//!   "delete"}` empties it; another `$patch` value is refused.
//! - A list whose field has no strategy ([`strategic_meta`]) is replaced.
//! - A list merged by key: each patch item merges into the live item of the same key, or is appended; an item
//!   `{"<key>": v, "$patch": "delete"}` removes the live one; an item `{"$patch": "replace"}` makes the patch's
//!   other items the whole list. The order is apimachinery's `normalizeElementOrder`: patch items in the patch's
//!   order, live items in the live order, a live item going ahead of a patch item only when the live list has both
//!   and has it first, so an item new to the list lands ahead of the live items not in the patch (a container
//!   added by `kubectl patch` comes first; kubectl's apply sends `$setElementOrder` to say otherwise).
//! - A list of primitives merged as a set takes the union; `$deleteFromPrimitiveList/<field>` removes values.
//! - `$setElementOrder/<field>` (what kubectl's three-way apply sends beside a changed list) sets the order of the
//!   items it names; live items it does not name keep their place relative to them.
//! - `$retainKeys` clears the map's keys it does not name (the patch's own keys must be among them).
//!
//! Where the API server keeps a patch value as sent when the field is new (a list item or a map with directives
//! left in), the twin applies it to an empty value instead, so no `$` directive is ever stored; a
//! `$deleteFromPrimitiveList` for a list the object lacks removes nothing (the API server would set the list to the
//! values to delete). Refusals carry the API server's words; the field they are about is in [`StrategicError`].
//!
//! Recursion follows the patch's nesting, which the JSON parser bounds ([`DEPTH_MAX`] levels).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::strategic_meta::{Field, Strategy, Type};

/// The deepest nesting the applier follows (serde_json refuses to parse deeper documents).
pub const DEPTH_MAX: usize = 128;

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// A strategic merge patch the API server refuses, and the field it is about (dotted, `[]` for a list's items).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct StrategicError {
    pub field: String,
    pub reason: Refusal,
}

/// Why a strategic merge patch is refused, worded as apimachinery's `mergepatch` and `strategicpatch` errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A `$patch` value other than `replace` and `delete` (and `merge` in a list).
    #[error("unknown patch type: {value} in map: {map}")]
    UnknownPatchType { value: String, map: String },
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    #[error("lists of lists are not supported")]
    ListOfLists,
    #[error("list element types are not identical: {lists}")]
    MixedList { lists: String },
    #[error("cannot merge lists without merge key for type map")]
    MapsWithoutKey,
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    #[error("invalid patch format of primitive list")]
    BadPrimitiveList,
    #[error("invalid patch format of retainKeys")]
    BadRetainKeys,
    #[error("invalid patch format of setElementOrder list")]
    BadSetElementOrder,
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    OrderMismatch { patch: String, order: String },
    /// The live value and the patch disagree on what a field is (the API server's `ErrBadArgType`).
    #[error("expected a {expected}, but received a {received}")]
    BadArgType { expected: &'static str, received: &'static str },
    /// Deeper than [`DEPTH_MAX`]: the twin's own refusal (the API server's JSON decoder stops there too).
    #[error("the patch is nested deeper than {DEPTH_MAX} levels")]
    TooDeep,
}

impl Refusal {
    /// The HTTP status the API server answers it with: 422 for the two `mergepatch` errors it maps so, 400 for the
    /// rest. (The API server answers 500 for the errors it does not map; the twin answers 400, as they are the
    /// client's.)
    pub fn code(&self) -> u16 {
        match self {
            Refusal::ListOfLists => 422,
            _ => 400,
        }
    }
}

/// Applies `patch` (an object) to `original` as a strategic merge patch on an object of type `of` (`None`: no
/// field has a strategy). Never panics; the original is left as it was.
pub fn apply(of: Option<&'static Type>, original: &Value, patch: &Map<String, Value>) -> Result<Value, StrategicError> {
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let merged = merge_map(original, patch.clone(), of, "", 0)?;
    Ok(Value::Object(merged))
}

fn refuse<T>(field: &str, reason: Refusal) -> Result<T, StrategicError> {
    let field = if field.is_empty() { "<root>".to_owned() } else { field.to_owned() };
    Err(StrategicError { field, reason })
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// The field's metadata in `of`, if any.
fn field_of(of: Option<&'static Type>, name: &str) -> Option<&'static Field> {
    of.and_then(|of| of.field(name))
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    of: Option<&'static Type>,
    path: &str,
    depth: usize,
) -> Result<Map<String, Value>, StrategicError> {
    if depth > DEPTH_MAX {
        return refuse(path, Refusal::TooDeep);
    }
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => merge_map(Map::new(), patch, of, path, depth + 1),
            Some("delete") => Ok(Map::new()),
            _ => {
                patch.insert(DIRECTIVE.to_owned(), directive.clone());
                let (value, map) = (go_format(&directive), go_format(&Value::Object(patch)));
                refuse(path, Refusal::UnknownPatchType { value, map })
            }
        };
    }
    retain_keys(&mut original, &mut patch, path)?;
    set_element_orders(&mut original, &mut patch, of, path, depth)?;
    for (key, value) in patch {
        let (name, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            Some(rest) => match rest.strip_prefix('/') {
                Some(name) => (name.to_owned(), true),
                None => return refuse(&child(path, &key), Refusal::BadPrimitiveList),
            },
            None => (key, false),
        };
        let here = child(path, &name);
        let field = field_of(of, &name);
        if value.is_null() {
            original.remove(&name);
            continue;
        }
        let Some(live) = original.remove(&name) else {
            if !delete_list {
                original.insert(name, fresh(value, field, &here, depth)?);
            }
            continue;
        };
        let merged = match (live, value) {
            (Value::Object(live), Value::Object(value)) => match field.and_then(|field| field.strategy) {
                Some(Strategy::Replace) => Value::Object(merge_map(Map::new(), value, None, &here, depth + 1)?),
                _ => Value::Object(merge_map(live, value, field.and_then(|field| field.of), &here, depth + 1)?),
            },
            (Value::Array(live), Value::Array(value)) => {
                Value::Array(merge_list(live, value, field, delete_list, &here, depth)?)
            }
            (live, _) if delete_list => live,
            (_, value) => fresh(value, field, &here, depth)?,
        };
        original.insert(name, merged);
    }
    Ok(original)
}

/// A patch value for a field the object lacks (or holds as another type): applied to an empty value, so its
/// directives take effect and are not stored.
fn fresh(value: Value, field: Option<&'static Field>, path: &str, depth: usize) -> Result<Value, StrategicError> {
    Ok(match value {
        Value::Object(map) => {
            Value::Object(merge_map(Map::new(), map, field.and_then(|field| field.of), path, depth + 1)?)
        }
        Value::Array(items) => Value::Array(merge_list(Vec::new(), items, field, false, path, depth)?),
        value => value,
    })
}

/// `$retainKeys`: clears the keys of `original` it does not name, after checking the patch sets none outside them.
fn retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    path: &str,
) -> Result<(), StrategicError> {
    let Some(retained) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(retained) = retained else { return refuse(path, Refusal::BadRetainKeys) };
    let retained: BTreeSet<&str> = retained.iter().filter_map(Value::as_str).collect();
    let named = |key: &str| retained.contains(key);
    for (key, value) in patch.iter() {
        let directive = key.starts_with(DELETE_FROM_PRIMITIVE_LIST) || key.starts_with(SET_ELEMENT_ORDER);
        if !value.is_null() && !directive && !named(key) {
            return refuse(&child(path, key), Refusal::BadRetainKeys);
        }
    }
    original.retain(|key, _| named(key));
    Ok(())
}

/// Every `$setElementOrder/<field>` of the patch: merges the field's list and orders it (and removes both from
/// the patch).
fn set_element_orders(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    of: Option<&'static Type>,
    path: &str,
    depth: usize,
) -> Result<(), StrategicError> {
    let keys: Vec<String> = patch.keys().filter(|key| key.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
    for key in keys {
        let order = patch.remove(&key).unwrap_or_default();
        let Some(name) = key.strip_prefix(SET_ELEMENT_ORDER).and_then(|rest| rest.strip_prefix('/')) else {
            return refuse(&child(path, &key), Refusal::BadSetElementOrder);
        };
        let here = child(path, name);
        let Value::Array(order) = order else { return refuse(&here, Refusal::BadSetElementOrder) };
        let field = field_of(of, name);
        let merge_key = merge_key_of(field);
        let live = match original.remove(name) {
            None => None,
            Some(Value::Array(live)) => Some(live),
            Some(other) => return refuse(&here, bad_arg_type("[]interface {}", &other)),
        };
        let patched = match patch.remove(name) {
            None => None,
            Some(Value::Array(items)) => Some(items),
            Some(other) => return refuse(&here, bad_arg_type("[]interface {}", &other)),
        };
        check_order(patched.as_deref().unwrap_or_default(), &order, merge_key, &here)?;
        let live_order = live.clone().unwrap_or_default();
        let merged = match (live, patched) {
            (Some(live), None) => live,
            (live, Some(items)) => merge_list(live.unwrap_or_default(), items, field, false, &here, depth)?,
            (None, None) => continue,
        };
        let (named, unnamed) = partition(merged, &order, merge_key, &here)?;
        let ordered = interleave(named, unnamed, &order, &live_order, merge_key);
        original.insert(name.to_owned(), Value::Array(ordered));
    }
    Ok(())
}

/// The merge key of a field merged by key.
fn merge_key_of(field: Option<&'static Field>) -> Option<&'static str> {
    match field.and_then(|field| field.strategy) {
        Some(Strategy::Merge { key, .. }) => key,
        _ => None,
    }
}

/// The patch's items (but deletions and directives) must come in the `$setElementOrder` list's order.
fn check_order(patch: &[Value], order: &[Value], merge_key: Option<&str>, path: &str) -> Result<(), StrategicError> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let kept: Vec<&Value> = match merge_key {
        Some(_) => {
            let mut kept = Vec::new();
            for item in patch {
                let Value::Object(map) = item else {
                    return refuse(path, bad_arg_type("map[string]interface {}", item));
                };
                if map.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                    kept.push(item);
                }
            }
            kept
        }
        None => patch.iter().collect(),
    };
    let (mut at_patch, mut at_order) = (0, 0);
    while at_patch < kept.len() && at_order < order.len() {
        if kept[at_patch].get(DIRECTIVE).is_some() {
            at_patch += 1;
            continue;
        }
        if same_key(kept[at_patch], &order[at_order], merge_key, path)? {
            at_patch += 1;
        }
        at_order += 1;
    }
    if at_patch < kept.len() {
        let (patch, order) = (go_format(&Value::Array(patch.to_vec())), go_format(&Value::Array(order.to_vec())));
        return refuse(path, Refusal::OrderMismatch { patch, order });
    }
    Ok(())
}

fn same_key(left: &Value, right: &Value, merge_key: Option<&str>, path: &str) -> Result<bool, StrategicError> {
    let Some(key) = merge_key else { return Ok(left == right) };
    Ok(key_value(left, key, path)? == key_value(right, key, path)?)
}

/// The value of `key` in a list item, which must be a map holding it.
fn key_value<'a>(item: &'a Value, key: &str, path: &str) -> Result<&'a Value, StrategicError> {
    let Value::Object(map) = item else { return refuse(path, bad_arg_type("map[string]interface {}", item)) };
    match map.get(key) {
        Some(value) => Ok(value),
        None => refuse(path, Refusal::NoMergeKey { map: go_format(item), key: key.to_owned() }),
    }
}

fn merge_list(
    live: Vec<Value>,
    patch: Vec<Value>,
    field: Option<&'static Field>,
    delete_list: bool,
    path: &str,
    depth: usize,
) -> Result<Vec<Value>, StrategicError> {
    let Some(Strategy::Merge { key, .. }) = field.and_then(|field| field.strategy) else {
        // No merge strategy: the patch replaces the list (a deletion list for it removes nothing).
        return Ok(if delete_list { live } else { patch });
    };
    if live.is_empty() && patch.is_empty() {
        return Ok(live);
    }
    let items_path = format!("{path}[]");
    match element_kind(&live, &patch, path)? {
        ElementKind::Scalar if delete_list => {
            let doomed = identities(&patch, None);
            Ok(live.into_iter().filter(|item| !identity(item, None).is_some_and(|id| doomed.contains(&id))).collect())
        }
        ElementKind::Scalar => {
            let mut merged: Vec<Value> = Vec::with_capacity(live.len() + patch.len());
            let mut seen = BTreeSet::new();
            for item in live.iter().chain(&patch) {
                if identity(item, None).is_some_and(|id| seen.insert(id)) {
                    merged.push(item.clone());
                }
            }
            let (named, unnamed) = partition(merged, &patch, None, path)?;
            Ok(interleave(named, unnamed, &patch, &live, None))
        }
        ElementKind::Map => {
            let Some(key) = key else { return refuse(path, Refusal::MapsWithoutKey) };
            let (live, patch) = special_items(live, patch, key, path)?;
            let mut merged = live.clone();
            let mut by_key = positions(&merged, Some(key));
            let of = field.and_then(|field| field.of);
            for item in &patch {
                let wanted = key_value(item, key, path)?.to_string();
                let Value::Object(item_map) = item.clone() else { continue };
                match by_key.get(&wanted) {
                    Some(&index) => {
                        let Value::Object(live_item) = std::mem::take(&mut merged[index]) else { continue };
                        merged[index] = Value::Object(merge_map(live_item, item_map, of, &items_path, depth + 1)?);
                    }
                    None => {
                        by_key.insert(wanted, merged.len());
                        merged.push(Value::Object(merge_map(Map::new(), item_map, of, &items_path, depth + 1)?));
                    }
                }
            }
            let (named, unnamed) = partition(merged, &patch, Some(key), path)?;
            Ok(interleave(named, unnamed, &patch, &live, Some(key)))
        }
    }
}

enum ElementKind {
    Scalar,
    Map,
}

/// What a list's items are: all maps or all scalars of one JSON type, never lists.
fn element_kind(live: &[Value], patch: &[Value], path: &str) -> Result<ElementKind, StrategicError> {
    let type_of = |item: &Value| match item {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    };
    let mut first = None;
    for item in live.iter().chain(patch) {
        let kind = type_of(item);
        match first {
            None if kind == 4 => return refuse(path, Refusal::ListOfLists),
            None => first = Some(kind),
            Some(first) if first != kind => {
                let lists = format!(
                    "[{} {}]",
                    go_format(&Value::Array(live.to_vec())),
                    go_format(&Value::Array(patch.to_vec()))
                );
                return refuse(path, Refusal::MixedList { lists });
            }
            Some(_) => {}
        }
    }
    Ok(if first == Some(5) { ElementKind::Map } else { ElementKind::Scalar })
}

/// Applies the patch list's directive items: deletions remove live items, a `replace` makes the patch's other items
/// the live list. Returns the live list and the patch's plain items.
fn special_items(
    mut live: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    path: &str,
) -> Result<(Vec<Value>, Vec<Value>), StrategicError> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    let mut doomed = BTreeSet::new();
    for item in patch {
        let Some(directive) = item.get(DIRECTIVE) else {
            plain.push(item);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                doomed.insert(key_value(&item, key, path)?.to_string());
            }
            Some("replace") => replace = true,
            Some("merge") => return refuse(path, Refusal::MergeDirectiveInList),
            _ => {
                let value = go_format(directive);
                return refuse(path, Refusal::UnknownPatchType { value, map: go_format(&item) });
            }
        }
    }
    live.retain(|candidate| !identity(candidate, Some(key)).is_some_and(|id| doomed.contains(&id)));
    Ok(if replace { (plain, Vec::new()) } else { (live, plain) })
}

/// Splits `items` into those `by` names (by merge key, or by value for scalars) and the others.
fn partition(
    items: Vec<Value>,
    by: &[Value],
    merge_key: Option<&str>,
    path: &str,
) -> Result<(Vec<Value>, Vec<Value>), StrategicError> {
    let named_ids = identities(by, merge_key);
    let (mut named, mut unnamed) = (Vec::new(), Vec::new());
    for item in items {
        let id = match merge_key {
            None => item.to_string(),
            Some(key) => key_value(&item, key, path)?.to_string(),
        };
        if named_ids.contains(&id) { named.push(item) } else { unnamed.push(item) }
    }
    Ok((named, unnamed))
}

/// What identifies a list item: the value of its merge key, or the item itself for primitives, as JSON text (so
/// lookups are by ordered maps, not by scanning: a patch's lists are as long as its sender makes them).
fn identity(item: &Value, merge_key: Option<&str>) -> Option<String> {
    let value = match merge_key {
        None => item,
        Some(key) => item.get(key)?,
    };
    Some(value.to_string())
}

fn identities(list: &[Value], merge_key: Option<&str>) -> BTreeSet<String> {
    list.iter().filter_map(|item| identity(item, merge_key)).collect()
}

/// The first position of each item of `list`, by identity.
fn positions(list: &[Value], merge_key: Option<&str>) -> BTreeMap<String, usize> {
    let mut positions = BTreeMap::new();
    for (index, item) in list.iter().enumerate() {
        if let Some(id) = identity(item, merge_key) {
            positions.entry(id).or_insert(index);
        }
    }
    positions
}

/// The final order: `named` sorted by `order`, `unnamed` by the live list, then interleaved, an unnamed item going
/// before a named one exactly when the live list has both and has it first (apimachinery's
/// `normalizeElementOrder`).
fn interleave(
    named: Vec<Value>,
    unnamed: Vec<Value>,
    order: &[Value],
    live: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let (order_at, live_at) = (positions(order, merge_key), positions(live, merge_key));
    let place = |positions: &BTreeMap<String, usize>, item: &Value| {
        identity(item, merge_key).and_then(|id| positions.get(&id).copied())
    };
    let sorted = |items: Vec<Value>, by: &BTreeMap<String, usize>| {
        let mut keyed: Vec<(usize, Value)> =
            items.into_iter().map(|item| (place(by, &item).unwrap_or(usize::MAX), item)).collect();
        keyed.sort_by_key(|(at, _)| *at);
        keyed.into_iter().map(|(_, item)| (place(&live_at, &item), item)).collect::<Vec<_>>()
    };
    let (named, unnamed) = (sorted(named, &order_at), sorted(unnamed, &live_at));
    let mut all = Vec::with_capacity(named.len() + unnamed.len());
    let (mut named, mut unnamed) = (named.into_iter().peekable(), unnamed.into_iter().peekable());
    loop {
        let take_unnamed = match (unnamed.peek(), named.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((Some(left), _)), Some((Some(right), _))) => left < right,
            (Some(_), Some(_)) => false,
        };
        let next = if take_unnamed { unnamed.next() } else { named.next() };
        all.extend(next.map(|(_, item)| item));
    }
    all
}

fn bad_arg_type(expected: &'static str, received: &Value) -> Refusal {
    let received = match received {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    };
    Refusal::BadArgType { expected, received }
}

/// A JSON value as Go's `%v` prints the decoded value: `map[a:1 b:[x y]]`, `<nil>` for null.
pub fn go_format(value: &Value) -> String {
    let mut out = String::new();
    write_go(&mut out, value);
    out
}

fn write_go(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(flag) => {
            let _ = write!(out, "{flag}");
        }
        Value::Number(number) => {
            let _ = write!(out, "{number}");
        }
        Value::String(text) => out.push_str(text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                write_go(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                write_go(out, &map[key.as_str()]);
            }
            out.push(']');
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn values(names: &[&str]) -> Vec<Value> {
        names.iter().map(|name| json!(name)).collect()
    }

    #[test]
    fn live_items_keep_their_place_around_patch_items() {
        let live = values(&["a", "b", "c", "d"]);
        // `c` and the new `x` are the patch's; `a`, `b`, `d` stay where the live list has them relative to `c`.
        let order = values(&["x", "c"]);
        let merged = interleave(values(&["x", "c"]), values(&["a", "b", "d"]), &order, &live, None);
        assert_eq!(merged, values(&["x", "a", "b", "c", "d"]));
    }

    #[test]
    fn go_formats_values_as_percent_v_prints_them() {
        let value = json!({"b": [1, "x", null], "a": {"c": true}});
        assert_eq!(go_format(&value), "map[a:map[c:true] b:[1 x <nil>]]");
    }

    #[test]
    fn a_refusal_names_the_list_it_is_about() {
        let patch = json!({"spec": {"containers": [{"name": "app", "env": [{"value": "1"}]}]}});
        let original = json!({"spec": {"containers": [{"name": "app"}]}});
        let of = super::super::strategic_meta::of_kind("Pod");
        let refused = apply(of, &original, patch.as_object().unwrap()).unwrap_err();
        assert_eq!(refused.field, "spec.containers[].env");
        assert_eq!(refused.reason, Refusal::NoMergeKey { map: "map[value:1]".into(), key: "name".into() });
    }
}
