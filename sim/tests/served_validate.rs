//! Custom resources checked against their CRDs' structural schemas as the API server checks them: the causes of a
//! `422 Invalid`, the unknown fields a strict write is refused for, pruning, and no panic on any JSON.

use gpuclaim_sim::served::resources::{self, Resource};
use gpuclaim_sim::served::status::Cause;
use gpuclaim_sim::served::{crds, validate};
use proptest::prelude::*;
use serde_json::{Value, json};

fn claims() -> &'static Resource {
    resources::find("gpu.cozystack.io", "v1alpha1", "gpuclaims").unwrap()
}

fn classes() -> &'static Resource {
    resources::find("gpu.cozystack.io", "v1alpha1", "gpuclasses").unwrap()
}

fn usages() -> &'static Resource {
    resources::find("gpu.cozystack.io", "v1alpha1", "gpuusages").unwrap()
}

fn vms() -> &'static Resource {
    resources::find("kubevirt.io", "v1", "virtualmachines").unwrap()
}

fn claim(spec: Value) -> Value {
    json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1",
        "kind": "GPUClaim",
        "metadata": {"name": "train", "namespace": "tenant-a"},
        "spec": spec,
    })
}

fn class(spec: Value) -> Value {
    json!({"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClass", "metadata": {"name": "h100"}, "spec": spec})
}

fn good_class_spec() -> Value {
    json!({
        "resourceName": "nvidia.com/GH100_H100_SXM5_80GB",
        "mode": "Passthrough",
        "maxCount": 8,
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
        "placement": "Spread",
    })
}

fn usage(spec: Value) -> Value {
    json!({"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUUsage", "metadata": {"name": "u"}, "spec": spec})
}

fn good_usage_spec() -> Value {
    json!({
        "claim": "train", "className": "h100", "resourceName": "nvidia.com/H100", "count": 2,
        "vmi": {"name": "vm-a", "uid": "0f1e"}, "node": "gpu-1",
        "startTime": "2026-01-02T03:04:05Z", "endTime": null,
    })
}

fn cause(reason: &str, message: &str, field: &str) -> Cause {
    Cause::new(reason, message, field)
}

#[test]
fn every_served_crd_uses_only_keywords_the_validation_handles() {
    for crd in crds::builtin() {
        let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        for version in versions {
            let schema = &version["schema"]["openAPIV3Schema"];
            assert_eq!(validate::unhandled(schema), Vec::<String>::new(), "{name} {}", version["name"]);
        }
    }
}

#[test]
fn a_keyword_the_validation_would_ignore_is_named() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": "^a", "format": "email"},
        "tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
        "count": {"type": "integer", "format": "uint32", "multipleOf": 2},
    }}}});
    assert_eq!(
        validate::unhandled(&schema),
        [
            "spec.count: multipleOf: 2",
            "spec.name: format: \"email\"",
            "spec.name: pattern: \"^a\"",
            "spec.tags: uniqueItems: true",
        ]
    );
}

#[test]
fn every_custom_resource_has_its_schema_and_others_none() {
    for row in resources::RESOURCES.iter() {
        assert_eq!(validate::schema_of(row).is_some(), row.is_custom(), "{}", row.plural);
    }
    assert_eq!(validate::schema_of(claims()).unwrap()["title"], "GPUClaim");
}

#[test]
fn valid_objects_have_no_causes_and_no_unknown_fields() {
    let objects = [
        (claims(), claim(json!({"className": "h100", "count": 2}))),
        (classes(), class(good_class_spec())),
        (usages(), usage(good_usage_spec())),
    ];
    for (resource, object) in objects {
        assert_eq!(validate::validate(resource, &object), [], "{object}");
        assert_eq!(validate::unknown_fields(resource, &object), Vec::<String>::new(), "{object}");
    }
}

#[test]
fn a_count_below_the_minimum_is_invalid_as_the_api_server_words_it() {
    let zero = validate::validate(claims(), &claim(json!({"className": "h100", "count": 0})));
    assert_eq!(
        zero,
        [cause(
            "FieldValueInvalid",
            "Invalid value: 0: spec.count in body should be greater than or equal to 1",
            "spec.count"
        )]
    );
    let negative = validate::validate(claims(), &claim(json!({"className": "h100", "count": -1})));
    assert_eq!(negative[0].message, "Invalid value: -1: spec.count in body should be greater than or equal to 1");
    // A usage's count may be zero, not negative.
    let mut spec = good_usage_spec();
    spec["count"] = json!(0);
    assert_eq!(validate::validate(usages(), &usage(spec.clone())), []);
    spec["count"] = json!(-3);
    assert_eq!(
        validate::validate(usages(), &usage(spec))[0].message,
        "Invalid value: -3: spec.count in body should be greater than or equal to 0"
    );
}

#[test]
fn a_value_of_the_wrong_type_is_a_type_error_naming_the_type_found() {
    let two = validate::validate(claims(), &claim(json!({"className": "h100", "count": "two"})));
    assert_eq!(
        two,
        [cause(
            "FieldValueTypeInvalid",
            r#"Invalid value: "string": spec.count in body must be of type integer: "string""#,
            "spec.count"
        )]
    );
    // A fraction is also out of an integer's range: kube-openapi reports that as a plain error, which apiextensions
    // puts on the path it was given, none.
    let float = validate::validate(claims(), &claim(json!({"className": "h100", "count": 1.5})));
    assert_eq!(
        float,
        [
            cause(
                "FieldValueTypeInvalid",
                r#"Invalid value: "number": spec.count in body must be of type integer: "number""#,
                "spec.count"
            ),
            cause(
                "FieldValueInvalid",
                r#"Invalid value: "": Checked value must be of type integer (default format) in spec.count"#,
                "<nil>"
            ),
        ]
    );
    // A float below the minimum is all three.
    let small = validate::validate(claims(), &claim(json!({"className": "h100", "count": 0.5})));
    assert_eq!(small.len(), 3);
    assert_eq!(small[2].message, "Invalid value: 0.5: spec.count in body should be greater than or equal to 1");
    // An int64 field refuses an integer beyond int64 (a float to the decoder) by its format, then by its range.
    let mut spec = good_class_spec();
    spec["tolerations"][0]["tolerationSeconds"] = json!(1e20);
    let causes = validate::validate(classes(), &class(spec));
    assert_eq!(causes.len(), 2);
    assert_eq!(
        causes[1].message,
        r#"Invalid value: "": Checked value must be of type integer with format int64 in spec.tolerations[0].tolerationSeconds"#
    );
    // A whole float is an integer to kube-openapi.
    assert_eq!(validate::validate(claims(), &claim(json!({"className": "h100", "count": 2.0}))), []);
    let name = validate::validate(claims(), &claim(json!({"className": 7, "count": 1})));
    assert_eq!(
        name[0].message,
        r#"Invalid value: "integer": spec.className in body must be of type string: "integer""#
    );
}

#[test]
fn a_missing_required_field_is_a_required_value() {
    let causes = validate::validate(claims(), &claim(json!({"count": 1})));
    assert_eq!(causes, [cause("FieldValueRequired", "Required value", "spec.className")]);
    let no_spec = json!({"apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim", "metadata": {"name": "x"}});
    assert_eq!(validate::validate(claims(), &no_spec), [cause("FieldValueRequired", "Required value", "spec")]);
}

#[test]
fn a_null_where_none_is_allowed_is_dropped_as_the_decoder_drops_it() {
    // `PruneNonNullableNullsWithoutDefaults`: a required field set to null is missing.
    let causes = validate::validate(claims(), &claim(json!({"className": "h100", "count": null})));
    assert_eq!(causes, [cause("FieldValueRequired", "Required value", "spec.count")]);
    // An optional one is simply gone; a nullable one is kept.
    let mut spec = good_class_spec();
    spec["placement"] = Value::Null;
    assert_eq!(validate::validate(classes(), &class(spec)), []);
    assert_eq!(validate::validate(usages(), &usage(good_usage_spec())), []);
    // A null element of a list is judged as it is.
    let mut spec = good_class_spec();
    spec["tolerations"] = json!([null]);
    assert_eq!(
        validate::validate(classes(), &class(spec))[0].message,
        r#"Invalid value: "null": spec.tolerations[0] in body must be of type object: "null""#
    );
}

#[test]
fn a_value_outside_an_enum_is_unsupported_with_the_supported_values() {
    let mut spec = good_class_spec();
    spec["mode"] = json!("X");
    assert_eq!(
        validate::validate(classes(), &class(spec.clone())),
        [cause(
            "FieldValueNotSupported",
            r#"Unsupported value: "X": supported values: "Passthrough", "VGPU""#,
            "spec.mode"
        )]
    );
    spec["mode"] = json!(["VGPU"]);
    let causes = validate::validate(classes(), &class(spec));
    assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
    assert_eq!(
        causes[1].message,
        r#"Unsupported value: []interface {}{"VGPU"}: supported values: "Passthrough", "VGPU""#
    );
}

#[test]
fn nested_list_items_and_map_values_are_judged_by_their_schemas() {
    let mut spec = good_class_spec();
    spec["tolerations"][0]["tolerationSeconds"] = json!("30");
    spec["tolerations"][0]["key"] = json!(true);
    spec["nodeSelector"]["zone"] = json!(3);
    let causes = validate::validate(classes(), &class(spec));
    assert_eq!(
        causes,
        [
            cause(
                "FieldValueTypeInvalid",
                r#"Invalid value: "integer": spec.nodeSelector.zone in body must be of type string: "integer""#,
                "spec.nodeSelector.zone"
            ),
            cause(
                "FieldValueTypeInvalid",
                r#"Invalid value: "boolean": spec.tolerations[0].key in body must be of type string: "boolean""#,
                "spec.tolerations[0].key"
            ),
            cause(
                "FieldValueTypeInvalid",
                r#"Invalid value: "string": spec.tolerations[0].tolerationSeconds in body must be of type integer: "string""#,
                "spec.tolerations[0].tolerationSeconds"
            ),
        ]
    );
    // An int64 field refuses a float by its format, as kube-openapi words it.
    let mut spec = good_class_spec();
    spec["tolerations"][0]["tolerationSeconds"] = json!(1.5);
    assert_eq!(
        validate::validate(classes(), &class(spec))[0].message,
        r#"Invalid value: "float64": spec.tolerations[0].tolerationSeconds in body must be of type int64: "float64""#
    );
    let mut spec = good_class_spec();
    spec["tolerations"] = json!({"key": "gpu"});
    assert_eq!(
        validate::validate(classes(), &class(spec))[0].message,
        r#"Invalid value: "object": spec.tolerations in body must be of type array: "object""#
    );
}

#[test]
fn a_date_time_is_checked_as_the_api_server_checks_its_format() {
    let mut spec = good_usage_spec();
    spec["startTime"] = json!("yesterday");
    assert_eq!(
        validate::validate(usages(), &usage(spec.clone())),
        [cause(
            "FieldValueTypeInvalid",
            r#"Invalid value: "yesterday": spec.startTime in body must be of type date-time: "yesterday""#,
            "spec.startTime"
        )]
    );
    spec["startTime"] = json!(5);
    assert_eq!(
        validate::validate(usages(), &usage(spec))[0].message,
        r#"Invalid value: "int64": spec.startTime in body must be of type date-time: "int64""#
    );
}

#[test]
fn unknown_fields_are_found_at_every_depth_with_their_paths_sorted() {
    let mut spec = good_class_spec();
    spec["colour"] = json!("red");
    spec["tolerations"][0]["bogus"] = json!({"deep": [1, 2]});
    spec["tolerations"].as_array_mut().unwrap().push(json!({"key": "b", "extra": 1}));
    let mut object = class(spec);
    object["extraTop"] = json!(1);
    object["status"] = json!({"freeUnits": 1, "allocatableUnits": 1, "largestFreeOnNode": 1, "stale": true});
    object["metadata"]["labels"] = json!({"a": "b"});
    let unknown = validate::unknown_fields(classes(), &object);
    assert_eq!(
        unknown,
        ["extraTop", "spec.colour", "spec.tolerations[0].bogus", "spec.tolerations[1].extra", "status.stale"]
    );
    // Unknown fields are not violations: the API server prunes them before it validates.
    assert_eq!(validate::validate(classes(), &object), []);
}

#[test]
fn pruning_removes_exactly_the_unknown_fields() {
    let mut spec = good_class_spec();
    spec["colour"] = json!("red");
    spec["tolerations"][0]["bogus"] = json!(1);
    let mut object = class(spec);
    object["extraTop"] = json!(1);
    validate::prune(classes(), &mut object);
    assert_eq!(object, class(good_class_spec()));
    assert_eq!(validate::unknown_fields(classes(), &object), Vec::<String>::new());
}

#[test]
fn a_virtual_machine_keeps_anything_under_its_preserving_schema() {
    let vm = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm-a"},
        "spec": {"runStrategy": "Always", "anything": [{"goes": null}], "count": "two"},
        "whatever": 1,
    });
    assert_eq!(validate::validate(vms(), &vm), []);
    assert_eq!(validate::unknown_fields(vms(), &vm), Vec::<String>::new());
    let mut pruned = vm.clone();
    validate::prune(vms(), &mut pruned);
    assert_eq!(pruned, vm);
}

#[test]
fn a_strict_write_with_unknown_fields_is_a_bad_request_naming_each() {
    let paths = ["spec.colour".to_owned(), "spec.tolerations[0].bogus".to_owned()];
    assert_eq!(
        validate::strict_error(classes(), &paths),
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "GPUClass in version \"v1alpha1\" cannot be handled as a GPUClass: strict decoding error: \
                unknown field \"spec.colour\", unknown field \"spec.tolerations[0].bogus\"",
            "reason": "BadRequest", "code": 400,
        })
    );
    assert_eq!(
        validate::warnings(&paths),
        ["unknown field \"spec.colour\"", "unknown field \"spec.tolerations[0].bogus\""]
    );
}

/// A value nested `depth` lists deep around `inner`, built without recursion.
fn nested(depth: usize, inner: Value) -> Value {
    (0..depth).fold(inner, |value, _| Value::Array(vec![value]))
}

/// Drops a deeply nested value without recursion (the drop glue of `Value` recurses once per level).
fn dismantle(value: Value) {
    let mut pending = vec![value];
    while let Some(mut next) = pending.pop() {
        match &mut next {
            Value::Array(elements) => pending.append(elements),
            Value::Object(members) => pending.extend(std::mem::take(members).into_iter().map(|(_, member)| member)),
            _ => {}
        }
    }
}

#[test]
fn deep_nesting_is_bounded() {
    const DEPTH: usize = 10_000;
    // Under a preserving schema nothing is looked into.
    let mut vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "spec": {}});
    vm["spec"]["deep"] = nested(DEPTH, json!({"x": 1}));
    assert_eq!(validate::validate(vms(), &vm), []);
    assert_eq!(validate::unknown_fields(vms(), &vm), Vec::<String>::new());
    validate::prune(vms(), &mut vm);
    dismantle(vm);

    // Under a typed field it is a cause, and pruning empties what it cannot look into.
    let mut object = class(good_class_spec());
    object["spec"]["tolerations"] = nested(DEPTH, json!({"x": 1}));
    object["spec"]["unknownDeep"] = nested(DEPTH, json!(1));
    object["spec"]["mode"] = nested(DEPTH, json!("VGPU"));
    let causes = validate::validate(classes(), &object);
    let messages: Vec<&str> = causes.iter().map(|cause| cause.message.as_str()).collect();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[0], r#"Invalid value: "array": spec.mode in body must be of type string: "array""#);
    // The value is shown as Go shows it, elided a few levels down.
    assert!(messages[1].starts_with("Unsupported value: []interface {}{[]interface {}{"), "{}", messages[1]);
    assert!(messages[1].ends_with(r#"...}}}}}}}}: supported values: "Passthrough", "VGPU""#), "{}", messages[1]);
    assert_eq!(messages[2], r#"Invalid value: "array": spec.tolerations[0] in body must be of type object: "array""#);
    // Below a field whose schema declares nothing for lists, pruning looks as deep as DEPTH_MAX, then names the
    // container it cannot look into.
    let unknown = validate::unknown_fields(classes(), &object);
    let too_deep = "[0]".repeat(validate::DEPTH_MAX - 2);
    assert_eq!(
        unknown,
        [format!("spec.mode{too_deep}"), format!("spec.tolerations{too_deep}"), "spec.unknownDeep".to_owned()]
    );
    validate::prune(classes(), &mut object);
    assert_eq!(validate::unknown_fields(classes(), &object), Vec::<String>::new());
    dismantle(object);
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |float| float.is_finite()).prop_map(Value::from),
        "[a-zA-Z0-9 \\-:.]{0,12}".prop_map(Value::from),
        prop_oneof![Just("Passthrough"), Just("VGPU"), Just("2026-01-02T03:04:05Z")].prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        let keys = prop_oneof![
            Just("spec".to_owned()),
            Just("status".to_owned()),
            Just("count".to_owned()),
            Just("className".to_owned()),
            Just("mode".to_owned()),
            Just("tolerations".to_owned()),
            Just("nodeSelector".to_owned()),
            Just("vmi".to_owned()),
            Just("metadata".to_owned()),
            "[a-z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn any_json_is_judged_without_panic_and_pruning_leaves_nothing_unknown(value in any_json()) {
        let schema = keywords_schema();
        for object in [value.clone(), json!({"spec": value.clone()}), json!({"spec": {"shape": value.clone()}})] {
            let _ = validate::validate_with(&schema, &object);
            let mut pruned = object.clone();
            validate::prune_with(&schema, &mut pruned);
            prop_assert_eq!(validate::unknown_fields_with(&schema, &pruned), Vec::<String>::new());
        }
        for resource in [claims(), classes(), usages(), vms()] {
            for object in [value.clone(), json!({"spec": value.clone(), "status": value.clone()})] {
                let _ = validate::validate(resource, &object);
                let unknown = validate::unknown_fields(resource, &object);
                let mut pruned = object.clone();
                validate::prune(resource, &mut pruned);
                prop_assert_eq!(validate::unknown_fields(resource, &pruned), Vec::<String>::new());
                if unknown.is_empty() {
                    prop_assert_eq!(&pruned, &object);
                }
                let _ = validate::validate(resource, &pruned);
            }
        }
    }
}

/// A schema with the keywords no served CRD uses yet, to hold their wording.
fn keywords_schema() -> Value {
    json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "required": ["name", "ghost"],
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 4},
            "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
            "ratio": {"type": "number", "minimum": 0.5, "exclusiveMinimum": true, "maximum": 2, "exclusiveMaximum": true},
            "replicas": {"type": "integer", "maximum": 3},
            "port": {"x-kubernetes-int-or-string": true},
            "level": {"type": "string", "nullable": true, "enum": ["low", "high"]},
            "shape": {"x-kubernetes-preserve-unknown-fields": true, "enum": [[1, {"a": []}], {"a": [1]}, "round"]},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                "typed": {"type": "object", "properties": {"a": {"type": "integer"}}},
            }},
        },
    }}})
}

#[test]
fn string_list_and_bound_keywords_are_worded_as_the_api_server_words_them() {
    let schema = keywords_schema();
    assert_eq!(validate::unhandled(&schema), Vec::<String>::new());
    let object = json!({"spec": {
        "name": "abcde", "tags": ["a", "b", "c"], "ratio": 2, "replicas": 4, "port": "http", "level": null,
    }});
    assert_eq!(
        validate::validate_with(&schema, &object),
        [
            cause(
                "FieldValueNotSupported",
                r#"Unsupported value: "null": supported values: "low", "high""#,
                "spec.level"
            ),
            cause("FieldValueTooLong", "Too long: may not be longer than 4", "spec.name"),
            cause("FieldValueInvalid", "Invalid value: 2: spec.ratio in body should be less than 2", "spec.ratio"),
            cause(
                "FieldValueInvalid",
                "Invalid value: 4: spec.replicas in body should be less than or equal to 3",
                "spec.replicas"
            ),
            cause("FieldValueTooMany", "Too many: 3: must have at most 2 items", "spec.tags"),
            // Required but not declared: pruned before validation, so never present.
            cause("FieldValueRequired", "Required value", "spec.ghost"),
        ]
    );
    let object = json!({"spec": {"name": "a", "tags": [], "ratio": 0.5, "port": 8080, "level": "low"}});
    assert_eq!(
        validate::validate_with(&schema, &object),
        [
            cause(
                "FieldValueInvalid",
                r#"Invalid value: "a": spec.name in body should be at least 2 chars long"#,
                "spec.name"
            ),
            cause(
                "FieldValueInvalid",
                "Invalid value: 0.5: spec.ratio in body should be greater than 0.5",
                "spec.ratio"
            ),
            cause("FieldValueInvalid", "Invalid value: 0: spec.tags in body should have at least 1 items", "spec.tags"),
            cause("FieldValueRequired", "Required value", "spec.ghost"),
        ]
    );
    let port = validate::validate_with(&schema, &json!({"spec": {"name": "ab", "port": true}}));
    assert_eq!(
        port[0].message,
        r#"Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#
    );
}

#[test]
fn below_a_preserving_field_its_declared_fields_are_still_judged_and_pruned() {
    let schema = keywords_schema();
    let mut object = json!({"spec": {"name": "ab", "extra": {"free": {"x": 1}, "typed": {"a": "one", "b": 2}}}});
    assert_eq!(validate::unknown_fields_with(&schema, &object), ["spec.extra.typed.b"]);
    assert_eq!(
        validate::validate_with(&schema, &object)[0].message,
        r#"Invalid value: "string": spec.extra.typed.a in body must be of type integer: "string""#
    );
    validate::prune_with(&schema, &mut object);
    assert_eq!(object, json!({"spec": {"name": "ab", "extra": {"free": {"x": 1}, "typed": {"a": "one"}}}}));
}
