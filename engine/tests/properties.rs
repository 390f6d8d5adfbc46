//! Properties of the admission rules over generated objects: idempotence, determinism, agreement of the compact
//! path (the twin's) with the JSON-patch path (the live webhook's), and budgets that orders never exceed.

use std::collections::BTreeMap;

use gpuclaim_engine::convert::{pod_from_json, pod_json_patch, vmi_from_json, vmi_json_patch};
use gpuclaim_engine::fixtures::{self, gpu_toleration, held_claim, platform};
use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::model::View;
use gpuclaim_engine::rules::{Order, admit_vmi, mutate_pod, validate_order};
use k8s_openapi::api::core::v1::Toleration;
use proptest::prelude::*;
use serde_json::{Value, json};

const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
const CLASSES: [&str; 3] = ["h100", "a100-40c", "missing"];

fn toleration_pool() -> Vec<Toleration> {
    vec![
        gpu_toleration(H100),
        gpu_toleration("nvidia.com/A100-40C"),
        Toleration {
            key: Some("dedicated".into()),
            value: Some("ml".into()),
            effect: Some("NoSchedule".into()),
            operator: Some("Equal".into()),
            ..Default::default()
        },
    ]
}

/// A launcher-shaped pod with a random role, gates, tolerations and attached classes.
fn arb_pod() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec((prop::sample::select(&CLASSES[..]), 1u32..4), 1..4),
        0u8..4, // role: launcher, volume binder, migration target, no label
        prop::option::of(prop::collection::vec(prop::bool::ANY, 2)), // gates: absent, or [other?, placement?]
        prop::option::of(prop::collection::vec(prop::bool::ANY, 3)), // tolerations: absent, or a subset
    )
        .prop_map(|(classes, role, gates, tolerations)| {
            let attachments: Vec<Value> = classes
                .iter()
                .enumerate()
                .map(|(i, (class, count))| json!({"template": i, "class": class, "count": count}))
                .collect();
            let mut pod =
                fixtures::launcher_pod_json("tenant-a", "vm-1", &Value::Array(attachments).to_string(), H100, 1);
            match role {
                1 => {
                    pod["metadata"]["labels"].as_object_mut().unwrap().remove(kubevirt::LABEL_APP);
                    pod["metadata"]["annotations"][kubevirt::ANNOTATION_EPHEMERAL_PROVISIONING] = json!("true");
                }
                2 => pod["metadata"]["labels"][kubevirt::LABEL_MIGRATION_JOB_UID] = json!("uid-migration"),
                3 => drop(pod["metadata"]["labels"].as_object_mut().unwrap().remove(keys::LABEL_CLAIMS)),
                _ => {}
            }
            if let Some(gates) = gates {
                let names = ["example.com/other", keys::GATE_PLACEMENT];
                let list: Vec<Value> =
                    names.iter().zip(gates).filter(|(_, on)| *on).map(|(n, _)| json!({"name": n})).collect();
                pod["spec"]["schedulingGates"] = Value::Array(list);
            }
            let spec = pod["spec"].as_object_mut().unwrap();
            match tolerations {
                None => drop(spec.remove("tolerations")),
                Some(pick) => {
                    let mut list = spec["tolerations"].as_array().unwrap().clone();
                    for (t, on) in toleration_pool().into_iter().zip(pick) {
                        if on {
                            list.push(serde_json::to_value(t).unwrap());
                        }
                    }
                    spec.insert("tolerations".into(), Value::Array(list));
                }
            }
            pod
        })
}

fn arb_reference() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec!["train-a", "train-b", "busy", "ghost"]).prop_map(|c| json!({"claim": c})),
        (prop::sample::select(&CLASSES[..]), 0u32..10)
            .prop_map(|(class, count)| json!({"claimTemplate": {"class": class, "count": count}})),
        Just(json!({"name": "nvidia.com/GA102GL_A10"})),
    ]
}

/// A VMI as the render leaves it, with random references, sometimes without annotations or devices.
fn arb_vmi() -> impl Strategy<Value = Value> {
    (prop::collection::vec(arb_reference(), 0..4), prop::bool::ANY, prop::bool::ANY).prop_map(
        |(references, other_annotations, devices)| {
            let mut vmi = fixtures::vmi_json("tenant-a", "vm-1", &Value::Array(references).to_string());
            if other_annotations {
                vmi["metadata"]["annotations"]["example.com/note"] = json!("x");
            }
            if !devices {
                vmi["spec"]["domain"].as_object_mut().unwrap().remove("devices");
            }
            vmi
        },
    )
}

fn patched(object: &Value, patch: &json_patch::Patch) -> Value {
    let mut doc = object.clone();
    json_patch::patch(&mut doc, &patch.0).expect("the webhook's patch applies to the object it was made for");
    doc
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_pod_webhook_is_idempotent(object in arb_pod()) {
        let view = platform();
        let mut pod = pod_from_json(&object, "tenant-a").unwrap();
        if let Ok(patch) = mutate_pod(&view, &pod) {
            patch.apply(&mut pod);
            let again = mutate_pod(&view, &pod).unwrap();
            prop_assert!(again.is_empty(), "second call added {again:?}");
            let gates = pod.scheduling_gates.iter().filter(|g| *g == keys::GATE_PLACEMENT).count();
            prop_assert!(gates <= 1);
        }
    }

    #[test]
    fn the_pod_webhook_compact_and_json_paths_agree(object in arb_pod()) {
        let view = platform();
        let mut compact = pod_from_json(&object, "tenant-a").unwrap();
        let decision = mutate_pod(&view, &compact);
        if let Ok(patch) = decision {
            let json = patched(&object, &pod_json_patch(&patch, &object));
            patch.apply(&mut compact);
            prop_assert_eq!(&pod_from_json(&json, "tenant-a").unwrap(), &compact);
            // What the API server stores after our patch needs no further patch.
            let again = mutate_pod(&view, &pod_from_json(&json, "tenant-a").unwrap()).unwrap();
            prop_assert!(pod_json_patch(&again, &json).0.is_empty());
        }
    }

    #[test]
    fn the_vmi_webhook_compact_and_json_paths_agree(object in arb_vmi()) {
        let view = platform();
        let mut compact = vmi_from_json(&object, "tenant-a").unwrap();
        if let Ok(patch) = admit_vmi(&view, &compact) {
            let json = patched(&object, &vmi_json_patch(&patch, &object));
            patch.apply(&mut compact);
            prop_assert_eq!(&vmi_from_json(&json, "tenant-a").unwrap(), &compact);
            prop_assert!(admit_vmi(&view, &compact).unwrap().is_empty(), "admitting again changes nothing");
        }
    }

    #[test]
    fn decisions_do_not_depend_on_the_order_the_view_was_filled(
        object in arb_vmi(),
        order in Just(()).prop_perturb(|_, mut rng| { let mut v: Vec<usize> = (0..6).collect(); for i in (1..v.len()).rev() { v.swap(i, rng.random_range(0..=i)); } v }),
    ) {
        let vmi = vmi_from_json(&object, "tenant-a").unwrap();
        let mut view = View::default();
        let reference = platform();
        let classes: Vec<_> = reference.classes().cloned().collect();
        let claims: Vec<_> = reference.tenant("tenant-a").unwrap().claims().cloned().collect();
        for i in order {
            match i {
                0 | 1 => view.upsert_class(classes[i].clone()),
                2..=4 => view.upsert_claim(claims[i - 2].clone()),
                _ => {
                    view.set_vgpu_entitled("tenant-a", true);
                    view.set_vgpu_entitled("tenant-b", false);
                    view.upsert_quota("tenant-a", "gpu-budget", BTreeMap::from([("h100".to_owned(), 8)]));
                }
            }
        }
        prop_assert_eq!(&view, &reference);
        prop_assert_eq!(admit_vmi(&view, &vmi), admit_vmi(&reference, &vmi));
        let json_a = admit_vmi(&view, &vmi).map(|p| serde_json::to_string(&vmi_json_patch(&p, &object)).unwrap());
        let json_b = admit_vmi(&reference, &vmi).map(|p| serde_json::to_string(&vmi_json_patch(&p, &object)).unwrap());
        prop_assert_eq!(json_a, json_b);
    }

    #[test]
    fn allowed_orders_never_exceed_a_budget(
        orders in prop::collection::vec((prop::sample::select(vec!["tenant-a", "tenant-b"]), prop::sample::select(&CLASSES[..]), 0u32..6), 1..40),
    ) {
        let mut view = platform();
        view.upsert_quota("tenant-b", "gpu-budget", BTreeMap::from([("h100".to_owned(), 5), ("a100-40c".to_owned(), 2)]));
        for (i, (namespace, class, count)) in orders.into_iter().enumerate() {
            let claim = held_claim(namespace, &format!("order-{i}"), class, count);
            if validate_order(&view, Order::Create(&claim), "alice").is_ok() {
                view.upsert_claim(claim);
            }
            for tenant in ["tenant-a", "tenant-b"] {
                let t = view.tenant(tenant).unwrap();
                for class in CLASSES {
                    if let Some(budget) = t.budget(class) {
                        prop_assert!(t.units_used(class) <= budget, "{tenant} {class}: {} > {budget}", t.units_used(class));
                    }
                }
            }
        }
    }
}

/// One `gpus` entry of a VM chart's values: every kind, and the malformed and broken shapes a tenant may write.
fn arb_values_entry() -> impl Strategy<Value = Value> {
    let count = prop_oneof![
        (0i64..4).prop_map(Value::from),
        Just(json!(-1)),
        Just(json!(2.0)),
        Just(json!(1.5)),
        Just(json!("2")),
        Just(json!(4294967296u64))
    ];
    prop_oneof![
        prop::sample::select(vec!["nvidia.com/GA102GL_A10", ""]).prop_map(|name| json!({"name": name})),
        prop::sample::select(vec!["train-a", ""]).prop_map(|claim| json!({"claim": claim})),
        (prop::sample::select(&CLASSES[..]), count)
            .prop_map(|(class, count)| { json!({"claimTemplate": {"class": class, "count": count}}) }),
        Just(json!({})),
        Just(json!({"name": "nvidia.com/GA102GL_A10", "claim": "train-a"})),
        Just(json!({"claim": 7})),
        Just(json!({"claim": "train-a", "node": "n"})),
        Just(json!("h100")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The chart's values render as their entries do; a render's annotation reads back as those entries; a refusal
    /// names an entry of the list (or the field whose shape is wrong).
    #[test]
    fn the_vm_render_of_values_agrees_with_the_render_of_their_entries(
        entries in prop::collection::vec(arb_values_entry(), 0..5),
        switch in prop::sample::select(vec![None, Some("true"), Some("false")]),
    ) {
        use gpuclaim_engine::rules::{RenderRefusal, VmRender, read_values, render_values, render_vm};
        let mut values = json!({"gpus": entries});
        if let Some(switch) = switch {
            values["_cluster"] = json!({"gpu-claims-enabled": switch});
        }
        let rendered = render_values(&values);
        match read_values(&values) {
            Ok(read) => {
                prop_assert_eq!(&rendered, &render_vm(&read.gpus, read.claims_enabled));
                if let Ok(VmRender::References { annotation }) = &rendered {
                    prop_assert_eq!(&gpuclaim_engine::references::parse_entries(annotation.text()).unwrap(), &read.gpus);
                }
            }
            Err(refusal) => prop_assert_eq!(&rendered, &Err(refusal)),
        }
        if let Err(refusal) = rendered {
            let index = match &refusal {
                RenderRefusal::Malformed { field, .. } => {
                    prop_assert!(field.starts_with("gpus") || field.starts_with("_cluster"), "{}", field);
                    None
                }
                RenderRefusal::NotOneKind { index, .. }
                | RenderRefusal::EmptyField { index, .. }
                | RenderRefusal::CountNotPositive { index }
                | RenderRefusal::ClaimsDisabled { index } => Some(*index),
                RenderRefusal::MixedList { raw, reference } => {
                    prop_assert!(*reference < entries.len());
                    Some(*raw)
                }
            };
            if let Some(index) = index {
                prop_assert!(index < entries.len());
                let named = format!("gpus[{index}]");
                prop_assert!(refusal.to_string().starts_with(&named), "{}", refusal);
            }
        }
    }
}
