//! Decisions into RFC 6902 JSON patches on the object the webhook was sent.
//!
//! A patch must apply to the object as it is: `add` needs an existing parent, so a missing map or list is added
//! whole, and list items are appended with `/-` where the list exists. Each operation is made against the object
//! as the operations before it leave it: a pod without a `spec` gets the gate and the tolerations in the one `spec`
//! the first operation adds, not in two `spec`s the second of which replaces the first.

use std::borrow::Cow;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Map, Value, json};

use crate::keys;
use crate::rules::{PodPatch, VmiPatch};

pub fn vmi_json_patch(patch: &VmiPatch, object: &Value) -> Patch {
    let object = &mut Cow::Borrowed(object);
    let mut ops = Vec::new();
    if let Some(written) = &patch.attachments {
        let value = Value::String(written.text().to_owned());
        put(object, &["metadata", "annotations", keys::ANNOTATION_ATTACHMENTS], value, &mut ops);
    }
    if let Some(gpus) = &patch.gpus {
        let items = gpus.iter().map(|g| json!({"name": g.name, "deviceName": g.device_name})).collect();
        append(object, &["spec", "domain", "devices", "gpus"], items, &mut ops);
    }
    Patch(ops)
}

pub fn pod_json_patch(patch: &PodPatch, object: &Value) -> Patch {
    let object = &mut Cow::Borrowed(object);
    let mut ops = Vec::new();
    if patch.add_gate {
        append(object, &["spec", "schedulingGates"], vec![json!({"name": keys::GATE_PLACEMENT})], &mut ops);
    }
    if !patch.add_tolerations.is_empty() {
        let items = patch
            .add_tolerations
            .iter()
            .map(|t| serde_json::to_value(t).expect("tolerations always serialize"))
            .collect();
        append(object, &["spec", "tolerations"], items, &mut ops);
    }
    Patch(ops)
}

/// Appends `items` to the list at `path`, creating the list (and its parents) when absent.
fn append(object: &mut Cow<Value>, path: &[&str], items: Vec<Value>, ops: &mut Vec<PatchOperation>) {
    if let Some(Value::Array(_)) = lookup(object, path) {
        for item in items {
            let mut pointer = PointerBuf::from_tokens(path.iter().copied());
            pointer.push_back("-");
            ops.push(PatchOperation::Add(AddOperation { path: pointer, value: item }));
        }
    } else {
        put(object, path, Value::Array(items), ops);
    }
}

/// Sets `value` at `path`: at the deepest existing object on the way, adds the rest as nested maps. When it adds
/// maps, it applies the operation to `object` (copied once), so that later operations see them.
fn put(object: &mut Cow<Value>, path: &[&str], value: Value, ops: &mut Vec<PatchOperation>) {
    let mut existing = 0;
    let mut node: &Value = object;
    while existing + 1 < path.len() {
        match node.get(path[existing]) {
            Some(child @ Value::Object(_)) => {
                node = child;
                existing += 1;
            }
            _ => break,
        }
    }
    let mut nested = value;
    for key in path[existing + 1..].iter().rev() {
        let mut map = Map::new();
        map.insert((*key).to_owned(), nested);
        nested = Value::Object(map);
    }
    let pointer = PointerBuf::from_tokens(path[..=existing].iter().copied());
    let operation = PatchOperation::Add(AddOperation { path: pointer, value: nested });
    if existing + 1 < path.len() {
        json_patch::patch(object.to_mut(), std::slice::from_ref(&operation))
            .expect("an add at an existing map's key applies");
    }
    ops.push(operation);
}

fn lookup<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |node, key| node.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_creates_missing_parents_and_escapes_keys() {
        let object = json!({"metadata": {"name": "x"}});
        let mut ops = Vec::new();
        put(
            &mut Cow::Borrowed(&object),
            &["metadata", "annotations", "gpu.cozystack.io/attachments"],
            json!("[]"),
            &mut ops,
        );
        let text = serde_json::to_string(&ops).unwrap();
        assert_eq!(
            text,
            r#"[{"op":"add","path":"/metadata/annotations","value":{"gpu.cozystack.io/attachments":"[]"}}]"#
        );

        let object = json!({"metadata": {"annotations": {"a": "b"}}});
        let mut ops = Vec::new();
        put(
            &mut Cow::Borrowed(&object),
            &["metadata", "annotations", "gpu.cozystack.io/attachments"],
            json!("[]"),
            &mut ops,
        );
        let text = serde_json::to_string(&ops).unwrap();
        assert_eq!(text, r#"[{"op":"add","path":"/metadata/annotations/gpu.cozystack.io~1attachments","value":"[]"}]"#);
    }

    #[test]
    fn append_adds_to_an_existing_list_item_by_item() {
        let object = json!({"spec": {"schedulingGates": [{"name": "a"}]}});
        let mut ops = Vec::new();
        append(&mut Cow::Borrowed(&object), &["spec", "schedulingGates"], vec![json!({"name": "b"})], &mut ops);
        let text = serde_json::to_string(&ops).unwrap();
        assert_eq!(text, r#"[{"op":"add","path":"/spec/schedulingGates/-","value":{"name":"b"}}]"#);
    }

    #[test]
    fn a_pod_without_a_spec_gets_the_gate_and_the_tolerations_in_one_spec() {
        let object = json!({"metadata": {"name": "virt-launcher-x"}});
        let toleration = crate::fixtures::gpu_toleration("nvidia.com/H100");
        let patch = PodPatch { add_gate: true, add_tolerations: vec![toleration] };
        let ops = pod_json_patch(&patch, &object);
        let mut pod = object.clone();
        json_patch::patch(&mut pod, &ops).unwrap();
        assert_eq!(pod["spec"]["schedulingGates"], json!([{"name": keys::GATE_PLACEMENT}]));
        assert_eq!(pod["spec"]["tolerations"][0]["key"], "nvidia.com/H100");
    }

    #[test]
    fn put_replaces_a_null_parent() {
        let object = json!({"spec": {"domain": {"devices": null}}});
        let mut ops = Vec::new();
        append(&mut Cow::Borrowed(&object), &["spec", "domain", "devices", "gpus"], vec![json!(1)], &mut ops);
        let mut doc = object.clone();
        json_patch::patch(&mut doc, &ops).unwrap();
        assert_eq!(doc, json!({"spec": {"domain": {"devices": {"gpus": [1]}}}}));
    }
}
