//! PATCH as the twin serves it: the strategic merge patch cases of `fixtures/strategic/cases.yaml`, the patch
//! metadata checked against Kubernetes' OpenAPI, JSON and merge patches, content types, and the API server's answers
//! to patches it refuses.

use std::collections::BTreeSet;

use gpuclaim_sim::served::patch::strategic_meta::{self, Strategy as PatchStrategy, Type};
use gpuclaim_sim::served::patch::{self, PatchError, PatchType};
use gpuclaim_sim::served::resources::{self, Resource};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

const CASES: &str = include_str!("fixtures/strategic/cases.yaml");
const OPENAPI_EXTRACT: &str = include_str!("fixtures/strategic/openapi-extract.json");

#[derive(Deserialize)]
struct Case {
    name: String,
    kind: String,
    original: Value,
    patch: Value,
    expected: Option<Value>,
    error: Option<Refused>,
}

#[derive(Deserialize)]
struct Refused {
    code: u16,
    message: String,
}

fn resource_of_kind(kind: &str) -> &'static Resource {
    resources::RESOURCES.iter().find(|row| row.kind == kind && !row.is_custom()).expect("a served built-in kind")
}

fn pods() -> &'static Resource {
    resources::find("", "v1", "pods").unwrap()
}

fn claims() -> &'static Resource {
    resources::find("gpu.cozystack.io", "v1alpha1", "gpuclaims").unwrap()
}

#[test]
fn strategic_merge_patch_cases_give_what_the_api_server_gives() {
    let cases: Vec<Case> = serde_saphyr::from_str(CASES).expect("cases.yaml parses");
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let mut names = BTreeSet::new();
    for case in cases {
        assert!(names.insert(case.name.clone()), "{} is named twice", case.name);
        let resource = resource_of_kind(&case.kind);
        let body = serde_json::to_vec(&case.patch).unwrap();
        let got = patch::apply(resource, PatchType::Strategic, &case.original, &body);
        match (&case.expected, &case.error, got) {
            (Some(expected), None, Ok(got)) => assert_eq!(&got, expected, "{}", case.name),
            (None, Some(refused), Err(error)) => {
                assert_eq!(error.code(), refused.code, "{}: {error}", case.name);
                let status = error.status();
                assert_eq!(status["message"], refused.message.as_str(), "{}", case.name);
                assert_eq!(status["code"], refused.code, "{}", case.name);
            }
            (_, _, got) => panic!("{}: got {got:?}", case.name),
        }
    }
}

/// The extract's schemas: name → field → `{ref, items, strategy, key}`.
fn extract() -> Value {
    serde_json::from_str(OPENAPI_EXTRACT).expect("the extract parses")
}

fn strategy_text(strategy: Option<PatchStrategy>) -> (Option<&'static str>, Option<&'static str>) {
    match strategy {
        None => (None, None),
        Some(PatchStrategy::Merge { key, retain_keys: false }) => (Some("merge"), key),
        Some(PatchStrategy::Merge { key, retain_keys: true }) => (Some("merge,retainKeys"), key),
        Some(PatchStrategy::Replace) => (Some("replace"), None),
        Some(PatchStrategy::RetainKeys) => (Some("retainKeys"), None),
    }
}

/// Checks `of` against its schema in the extract, field by field and then the schema's own tagged fields, and walks
/// on into the types the fields lead to. Returns every (schema, field) with a strategy it checked.
fn check_type(of: &Type, schemas: &Value, checked: &mut BTreeSet<(String, String)>) {
    let schema = &schemas[of.schema];
    assert!(schema.is_object(), "{} is not in the extract", of.schema);
    for field in of.fields {
        let property = &schema[field.name];
        assert!(property.is_object() || field.strategy.is_none(), "{}.{} has no metadata", of.schema, field.name);
        let (strategy, key) = strategy_text(field.strategy);
        assert_eq!(property["strategy"].as_str(), strategy, "{}.{}: strategy", of.schema, field.name);
        assert_eq!(property["key"].as_str(), key, "{}.{}: merge key", of.schema, field.name);
        if field.strategy.is_some() {
            checked.insert((of.schema.to_owned(), field.name.to_owned()));
        }
        if let Some(child) = field.of {
            assert_eq!(property["ref"].as_str(), Some(child.schema), "{}.{}: type", of.schema, field.name);
            check_type(child, schemas, checked);
        }
    }
    let tagged = schema.as_object().unwrap().iter().filter(|(_, property)| property.get("strategy").is_some());
    for (name, _) in tagged {
        assert!(of.field(name).is_some(), "{}.{} has a strategy the table lacks", of.schema, name);
    }
}

#[test]
fn the_patch_metadata_agrees_with_the_kubernetes_openapi() {
    let extract = extract();
    assert!(extract["header"]["source"].as_str().is_some_and(|source| source.contains("kubernetes")));
    let schemas = &extract["schemas"];
    let mut checked = BTreeSet::new();
    for (kind, of) in strategic_meta::KINDS {
        if let Some(root) = extract["roots"][*kind].as_str() {
            assert_eq!(root, of.schema, "{kind}");
        }
        check_type(of, schemas, &mut checked);
    }
    // Every tagged field a patch can reach from the served kinds is in the table. A patch does not reach below a
    // list it replaces (one without a merge strategy, as a CRD's `spec.versions`) or a field tagged `replace`.
    let mut reachable = BTreeSet::new();
    let mut queue: Vec<String> =
        extract["roots"].as_object().unwrap().values().map(|root| root.as_str().unwrap().to_owned()).collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        for (field, property) in schemas[&name].as_object().into_iter().flatten() {
            if property.get("strategy").is_some() {
                reachable.insert((name.clone(), field.clone()));
            }
            let strategy = property["strategy"].as_str().unwrap_or_default();
            let replaced = (property["items"] == true && !strategy.starts_with("merge")) || strategy == "replace";
            if let Some(next) = property["ref"].as_str().filter(|_| !replaced) {
                queue.push(next.to_owned());
            }
        }
    }
    let missing: Vec<_> = reachable.difference(&checked).collect();
    assert!(missing.is_empty(), "tagged in the OpenAPI, not in the table: {missing:?}");
}

#[test]
fn strategies_are_found_by_path() {
    let by_name = Some(PatchStrategy::Merge { key: Some("name"), retain_keys: false });
    assert_eq!(strategic_meta::strategy_at("Pod", "spec.containers"), by_name);
    assert_eq!(strategic_meta::strategy_at("Pod", "spec.initContainers[].env"), by_name);
    assert_eq!(
        strategic_meta::strategy_at("Pod", "spec.volumes"),
        Some(PatchStrategy::Merge { key: Some("name"), retain_keys: true })
    );
    let by_type = Some(PatchStrategy::Merge { key: Some("type"), retain_keys: false });
    assert_eq!(strategic_meta::strategy_at("Pod", "status.conditions"), by_type);
    assert_eq!(strategic_meta::strategy_at("Node", "status.addresses"), by_type);
    let set = Some(PatchStrategy::Merge { key: None, retain_keys: false });
    assert_eq!(strategic_meta::strategy_at("Secret", "metadata.finalizers"), set);
    assert_eq!(strategic_meta::strategy_at("Pod", "spec.tolerations"), None);
    assert_eq!(strategic_meta::strategy_at("Node", "spec.taints"), None);
    assert_eq!(strategic_meta::strategy_at("ServiceAccount", "imagePullSecrets"), None);
    assert_eq!(strategic_meta::strategy_at("Pod", "spec.tolerations.key"), None);
    assert_eq!(strategic_meta::strategy_at("GPUClaim", "metadata.finalizers"), None);
}

#[test]
fn content_types_are_read_as_the_api_server_reads_them() {
    let from = |content_type| PatchType::from_content_type(content_type, pods());
    assert_eq!(from("application/json-patch+json"), Ok(PatchType::Json));
    assert_eq!(from("application/merge-patch+json; charset=utf-8"), Ok(PatchType::Merge));
    assert_eq!(from("application/strategic-merge-patch+json;charset=UTF-8"), Ok(PatchType::Strategic));
    assert_eq!(from("application/apply-patch+yaml"), Ok(PatchType::Apply));
    assert_eq!(from("application/apply-patch+cbor"), Ok(PatchType::Apply));
    // The media type is compared exactly, as the API server compares it.
    for refused in ["application/json", "", "APPLICATION/MERGE-PATCH+JSON", "application/merge-patch+json ;x=y"] {
        let error = from(refused).unwrap_err();
        assert_eq!(error.code(), 415, "{refused:?}");
        assert_eq!(
            error.status()["message"],
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, \
             application/apply-patch+yaml"
        );
    }
}

#[test]
fn a_strategic_merge_patch_on_a_custom_resource_is_refused_with_415() {
    let error = PatchType::from_content_type("application/strategic-merge-patch+json", claims()).unwrap_err();
    let accepted = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";
    assert_eq!(
        error.status(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("the body of the request was in an unknown format - accepted media types include: {accepted}"),
            "reason": "UnsupportedMediaType", "code": 415})
    );
    let claim = json!({"metadata": {"name": "c"}});
    let applied = patch::apply(claims(), PatchType::Strategic, &claim, b"{}").unwrap_err();
    assert_eq!(applied, error);
    assert_eq!(PatchType::from_content_type("application/merge-patch+json", claims()), Ok(PatchType::Merge));
}

#[test]
fn server_side_apply_is_refused_with_a_message_saying_so() {
    let error = patch::apply(pods(), PatchType::Apply, &json!({}), b"metadata: {}").unwrap_err();
    assert_eq!(error, PatchError::ServerSideApply);
    let status = error.status();
    assert_eq!((status["code"].as_u64(), status["reason"].as_str()), (Some(415), Some("UnsupportedMediaType")));
    assert!(status["message"].as_str().unwrap().contains("--server-side=false"), "{status}");
}

#[test]
fn a_merge_patch_merges_and_deletes_with_null() {
    let claim = json!({"metadata": {"name": "c", "labels": {"a": "1"}, "finalizers": ["x"]},
        "status": {"phase": "Pending", "units": [1, 2]}});
    let body = br#"{"metadata":{"labels":{"a":null,"b":"2"},"finalizers":["y"]},"status":{"units":null}}"#;
    let patched = patch::apply(claims(), PatchType::Merge, &claim, body).unwrap();
    assert_eq!(
        patched,
        json!({"metadata": {"name": "c", "labels": {"b": "2"}, "finalizers": ["y"]}, "status": {"phase": "Pending"}})
    );
}

#[test]
fn a_json_patch_applies_its_operations_in_order() {
    let pod = json!({"metadata": {"name": "p", "resourceVersion": "7"}, "spec": {"schedulingGates": [{"name": "g"}]}});
    let body = br#"[{"op":"test","path":"/metadata/resourceVersion","value":"7"},
        {"op":"remove","path":"/spec/schedulingGates/0"},
        {"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#;
    let patched = patch::apply(pods(), PatchType::Json, &pod, body).unwrap();
    assert_eq!(
        patched,
        json!({"metadata": {"name": "p", "resourceVersion": "7", "labels": {"a": "b"}}, "spec": {"schedulingGates": []}})
    );
}

/// The API server's answer to a JSON patch operation that does not apply: `NewGenericServerResponse(422, ...)`.
fn generic_invalid() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server rejected our request due to an error in our request",
        "reason": "Invalid", "details": {}, "code": 422})
}

#[test]
fn a_json_patch_whose_test_fails_is_refused_with_the_generic_422() {
    let pod = json!({"metadata": {"name": "p", "resourceVersion": "8"}});
    for body in [
        &br#"[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/metadata/name"}]"#[..],
        br#"[{"op":"remove","path":"/spec/schedulingGates/0"}]"#,
        br#"[{"op":"frobnicate","path":"/metadata"}]"#,
        br#"[{"op":"add"}]"#,
    ] {
        let error = patch::apply(pods(), PatchType::Json, &pod, body).unwrap_err();
        assert!(matches!(error, PatchError::OperationFailed { .. }), "{error:?}");
        assert_eq!(error.status(), generic_invalid(), "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn a_patch_whose_result_is_not_an_object_is_refused_with_422() {
    let pod = json!({"metadata": {"name": "p"}});
    let error =
        patch::apply(pods(), PatchType::Json, &pod, br#"[{"op":"replace","path":"","value":[1]}]"#).unwrap_err();
    assert_eq!(error.code(), 422);
    let status = error.status();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    assert_eq!(status["details"]["causes"][0]["reason"], "FieldValueInvalid");
    assert!(status["message"].as_str().unwrap().starts_with(" \"\" is invalid: patch: Invalid value: \"[1]\""));
}

#[test]
fn a_json_patch_of_more_than_ten_thousand_operations_is_refused_with_413() {
    let operation = json!({"op": "test", "path": "/metadata", "value": {}});
    let body = serde_json::to_vec(&vec![operation; patch::JSON_PATCH_OPERATIONS_MAX + 1]).unwrap();
    let error = patch::apply(pods(), PatchType::Json, &json!({"metadata": {}}), &body).unwrap_err();
    assert_eq!(
        error.status(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001",
            "reason": "RequestEntityTooLarge", "code": 413})
    );
}

#[test]
fn copies_that_would_grow_an_object_without_bound_are_refused() {
    let copy = json!({"op": "copy", "from": "/a", "path": "/b"});
    let double = json!({"op": "copy", "from": "/b", "path": "/a/-"});
    let mut operations = vec![json!({"op": "add", "path": "/a", "value": ["x".repeat(1000)]})];
    for _ in 0..40 {
        operations.push(copy.clone());
        operations.push(double.clone());
    }
    let body = serde_json::to_vec(&operations).unwrap();
    let error = patch::apply(pods(), PatchType::Json, &json!({}), &body).unwrap_err();
    assert_eq!(error.status(), generic_invalid());
}

#[test]
fn copies_into_their_own_child_cannot_nest_an_object_without_bound() {
    let mut operations = vec![json!({"op": "add", "path": "/a", "value": {}})];
    operations.extend((0..5_000).map(|_| json!({"op": "copy", "from": "/a", "path": "/a/x"})));
    let body = serde_json::to_vec(&operations).unwrap();
    let error = patch::apply(pods(), PatchType::Json, &json!({}), &body).unwrap_err();
    assert_eq!(error.status(), generic_invalid());
    // A few levels are fine.
    let body = serde_json::to_vec(&operations[..20]).unwrap();
    let patched = patch::apply(pods(), PatchType::Json, &json!({}), &body).unwrap();
    assert!(patched.pointer(&"/x".repeat(19).replacen("/x", "/a/x", 1)).is_some());
}

#[test]
fn malformed_bodies_get_the_api_servers_400() {
    let pod = json!({"metadata": {"name": "p"}});
    let cases: &[(PatchType, &[u8], &str)] = &[
        (PatchType::Merge, b"{\"metadata\":", "error decoding patch: unexpected end of JSON input"),
        (
            PatchType::Merge,
            b"{x}",
            "error decoding patch: invalid character 'x' looking for beginning of object key string",
        ),
        (PatchType::Merge, b"x", "error decoding patch: invalid character 'x' looking for beginning of value"),
        (
            PatchType::Merge,
            b"[1]",
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            PatchType::Json,
            b"{}",
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp",
        ),
        (
            PatchType::Json,
            b"[1]",
            "error decoding patch: json: cannot unmarshal number into Go value of type handlers.jsonPatchOp",
        ),
        (PatchType::Strategic, b"{\"spec\" 1}", "invalid character '1' after object key"),
        (PatchType::Strategic, b"{} {}", "invalid character '{' after top-level value"),
        (PatchType::Strategic, b"\"x\"", "json: cannot unmarshal string into Go value of type map[string]interface {}"),
    ];
    for (patch_type, body, message) in cases {
        let error = patch::apply(pods(), *patch_type, &pod, body).unwrap_err();
        let status = error.status();
        assert_eq!(status["code"], 400, "{}", String::from_utf8_lossy(body));
        assert_eq!(status["reason"], "BadRequest");
        assert_eq!(status["message"], *message, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn long_lists_merge_by_lookups_not_scans() {
    // 20,000 live items and 20,000 patch items: quadratic work would take minutes in a debug build.
    let count = 20_000;
    let live_env: Vec<Value> = (0..count).map(|at| json!({"name": format!("L{at}"), "value": "1"})).collect();
    let patch_env: Vec<Value> = (0..count).map(|at| json!({"name": format!("P{at}"), "value": "2"})).collect();
    let live_finalizers: Vec<Value> = (0..count).map(|at| json!(format!("l{at}"))).collect();
    let patch_finalizers: Vec<Value> = (0..count).map(|at| json!(format!("p{at}"))).collect();
    let pod = json!({"metadata": {"finalizers": live_finalizers}, "spec": {"containers": [{"name": "app", "env": live_env}]}});
    let body = serde_json::to_vec(&json!({"metadata": {"finalizers": patch_finalizers},
        "spec": {"containers": [{"name": "app", "env": patch_env}]}}))
    .unwrap();
    let patched = patch::apply(pods(), PatchType::Strategic, &pod, &body).unwrap();
    assert_eq!(patched["metadata"]["finalizers"].as_array().unwrap().len(), 2 * count);
    let env = patched["spec"]["containers"][0]["env"].as_array().unwrap();
    assert_eq!((env.len(), &env[0]["name"], &env[count]["name"]), (2 * count, &json!("P0"), &json!("L0")));
}

#[test]
fn a_refused_strategic_patch_names_the_field() {
    let pod = json!({"spec": {"containers": [{"name": "app"}]}});
    let body = br#"{"spec":{"containers":[{"image":"x"}]}}"#;
    let error = patch::apply(pods(), PatchType::Strategic, &pod, body).unwrap_err();
    assert_eq!(error.to_string(), "spec.containers: map: map[image:x] does not contain declared merge key: name");
}

/// Any JSON value, nested a few levels, with keys that meet the patch metadata and its directives.
fn any_json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "metadata",
        "spec",
        "status",
        "containers",
        "env",
        "name",
        "finalizers",
        "conditions",
        "type",
        "volumes",
        "$patch",
        "$retainKeys",
        "$setElementOrder/containers",
        "$setElementOrder/env",
        "$deleteFromPrimitiveList/finalizers",
        "replace",
        "delete",
        "merge",
        "a",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec!["replace", "delete", "merge", "name", "app", "x"]).prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone().prop_map(str::to_owned), inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A JSON patch operation of any kind on paths that may or may not exist.
fn any_operation() -> impl Strategy<Value = Value> {
    let op = prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "bogus"]);
    let path = || {
        prop::sample::select(vec![
            "",
            "/a",
            "/a/0",
            "/a/-",
            "/a/name",
            "/metadata",
            "/metadata/name",
            "/a/b/c",
            "/~1x",
            "a",
        ])
    };
    (op, path(), path(), any_json())
        .prop_map(|(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(39), ..ProptestConfig::default() })]

    #[test]
    fn no_patch_panics(current in any_json(), patch_value in any_json(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let body = serde_json::to_vec(&patch_value).unwrap();
        for patch_type in [PatchType::Merge, PatchType::Json, PatchType::Strategic] {
            for resource in [pods(), resource_of_kind("Deployment"), claims()] {
                let _ = patch::apply(resource, patch_type, &current, &body);
                let _ = patch::apply(resource, patch_type, &current, &bytes);
            }
        }
    }

    #[test]
    fn no_json_patch_panics(current in any_json(), operations in prop::collection::vec(any_operation(), 0..12)) {
        let body = serde_json::to_vec(&operations).unwrap();
        let current = json!({"metadata": {"name": "p"}, "a": current});
        if let Ok(patched) = patch::apply(pods(), PatchType::Json, &current, &body) {
            prop_assert!(patched.is_object());
        }
    }

    #[test]
    fn an_empty_strategic_patch_returns_the_object_unchanged(current in any_json()) {
        let current = match current {
            Value::Object(_) => current,
            other => json!({"metadata": {"name": "p"}, "spec": other}),
        };
        for kind in ["Pod", "Deployment", "Node", "ConfigMap"] {
            let patched = patch::apply(resource_of_kind(kind), PatchType::Strategic, &current, b"{}").unwrap();
            prop_assert_eq!(&patched, &current);
        }
    }
}
