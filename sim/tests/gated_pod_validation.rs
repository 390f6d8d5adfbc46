//! Every case of `../shared/kubevirt/12-derived-k8s-gated-pod-update-validation-cases.yaml` (the API server's rules
//! for gated pods, read from Kubernetes' validation code) against the twin's validation; skipped when that folder
//! is absent. The same rules are also tested case by case below without the shared data.

use std::path::PathBuf;

use gpuclaim_engine::convert::pod_from_json;
use gpuclaim_engine::model::Pod;
use gpuclaim_sim::apiserver::gates::{FORBIDDEN_UPDATE, validate_pod_create, validate_pod_update};
use serde::Deserialize;
use serde_json::{Value, json};

/// A case's spec with the container every pod has.
fn with_container(spec: &Value) -> Value {
    let mut spec = spec.clone();
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "compute", "image": "virt-launcher"}]);
    }
    spec
}

fn pod(spec: &Value) -> Pod {
    let spec = with_container(spec);
    pod_from_json(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}), "default")
        .expect("the case's pod converts")
}

/// Splits `a.b[0].c[nvidia.com/gpu]` into steps: map keys and list indexes.
fn steps(path: &str) -> Vec<Result<String, usize>> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        if end > 0 {
            out.push(Ok(rest[..end].to_owned()));
        }
        rest = &rest[end..];
        if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']').expect("a closing bracket");
            let inner = &after[..close];
            out.push(inner.parse::<usize>().map_err(|_| inner.to_owned()).map_or_else(Ok, Err));
            rest = &after[close + 1..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    out
}

fn set(target: &mut Value, path: &str, value: Value) {
    let steps = steps(path);
    let mut node = target;
    for (i, step) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        node = match step {
            Ok(key) => {
                if !node.is_object() {
                    *node = json!({});
                }
                let map = node.as_object_mut().unwrap();
                if last {
                    map.insert(key.clone(), value);
                    return;
                }
                map.entry(key.clone()).or_insert(Value::Null)
            }
            Err(index) => {
                let list = node.as_array_mut().expect("an index into a list");
                if last {
                    list[*index] = value;
                    return;
                }
                &mut list[*index]
            }
        };
    }
}

#[derive(Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    id: String,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    spec: Option<Value>,
    #[serde(default)]
    old: Option<Value>,
    #[serde(default)]
    new: Option<Value>,
    #[serde(default)]
    change: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    new_changes: Option<serde_json::Map<String, Value>>,
    expect: Expect,
}

#[derive(Deserialize)]
struct Expect {
    result: String,
    #[serde(default)]
    field: Option<String>,
    #[serde(default)]
    msg: Option<String>,
}

#[test]
fn every_shared_gated_pod_case_is_decided_as_the_api_server_does() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/kubevirt/12-derived-k8s-gated-pod-update-validation-cases.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: {} is absent", path.display());
        return;
    };
    let cases: Cases = serde_json::from_value(gpuclaim_engine::yaml::from_str(&text).expect("the cases file is YAML"))
        .expect("the cases file holds cases");
    assert!(cases.cases.len() >= 20, "all cases read");
    for case in &cases.cases {
        let verdict = if case.op.as_deref() == Some("CREATE") {
            validate_pod_create(&pod(case.spec.as_ref().unwrap()))
        } else {
            let old = with_container(case.old.as_ref().unwrap());
            let mut new = case.new.clone().unwrap_or_else(|| old.clone());
            for (path, value) in case.change.iter().chain(case.new_changes.iter()).flatten() {
                set(&mut new, path, value.clone());
            }
            validate_pod_update(&pod(&old), &pod(&new))
        };
        match (case.expect.result.as_str(), &verdict) {
            ("allow", Ok(())) => {}
            ("reject", Err(invalid)) => {
                if let Some(field) = &case.expect.field {
                    assert_eq!(&invalid.field, field, "{}", case.id);
                }
                if let Some(message) = &case.expect.msg {
                    assert!(invalid.message.contains(message.as_str()), "{}: {:?} lacks {message:?}", case.id, invalid);
                }
            }
            (expected, got) => panic!("{}: expected {expected}, got {got:?}", case.id),
        }
    }
}

fn gated_launcher() -> Value {
    json!({
        "schedulingGates": [{"name": "gpu.cozystack.io/placement"}],
        "nodeSelector": {"kubevirt.io/schedulable": "true"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}]}
        ]}}}
    })
}

#[test]
fn pin_and_ungate_in_one_update_is_allowed() {
    let old = gated_launcher();
    let mut new = old.clone();
    new["schedulingGates"] = json!([]);
    new["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"] =
        json!([{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]);
    assert_eq!(validate_pod_update(&pod(&old), &pod(&new)), Ok(()));
}

#[test]
fn pin_then_ungate_in_two_updates_is_refused_at_the_second() {
    let old = gated_launcher();
    let mut ungated = old.clone();
    ungated["schedulingGates"] = json!([]);
    assert_eq!(validate_pod_update(&pod(&old), &pod(&ungated)), Ok(()));
    let mut pinned = ungated.clone();
    pinned["nodeSelector"]["kubernetes.io/hostname"] = json!("gpu-1");
    let refusal = validate_pod_update(&pod(&ungated), &pod(&pinned)).unwrap_err();
    assert_eq!((refusal.field.as_str(), refusal.message.as_str()), ("spec", FORBIDDEN_UPDATE));
}

#[test]
fn a_second_term_is_refused_while_gated() {
    let old = gated_launcher();
    let mut new = old.clone();
    new["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array_mut()
        .unwrap()
        .push(json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}));
    let refusal = validate_pod_update(&pod(&old), &pod(&new)).unwrap_err();
    assert_eq!(refusal.message, "no additions/deletions to non-empty NodeSelectorTerms list are allowed");
}

#[test]
fn gates_are_only_removed_and_never_duplicated() {
    let old = gated_launcher();
    let mut new = old.clone();
    new["schedulingGates"] = json!([{"name": "gpu.cozystack.io/placement"}, {"name": "example.com/other"}]);
    let refusal = validate_pod_update(&pod(&old), &pod(&new)).unwrap_err();
    assert_eq!(refusal.field, "spec.schedulingGates[1].name");
    assert_eq!(refusal.message, "only deletion is allowed, but found new scheduling gate 'example.com/other'");
    let duplicate = pod(&json!({"schedulingGates": [{"name": "a.io/x"}, {"name": "a.io/x"}]}));
    assert_eq!(validate_pod_create(&duplicate).unwrap_err().field, "spec.schedulingGates[1]");
    let bound = pod(&json!({"schedulingGates": [{"name": "a.io/x"}], "nodeName": "n1"}));
    assert_eq!(
        validate_pod_create(&bound).unwrap_err().message,
        "cannot be set until all schedulingGates have been cleared"
    );
    let bad = pod(&json!({"schedulingGates": [{"name": "not a qualified name"}]}));
    assert_eq!(validate_pod_create(&bad).unwrap_err().field, "spec.schedulingGates[0]");
}

#[test]
fn tolerations_may_be_added_to_any_pod_but_not_removed() {
    let old = pod(&json!({"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}]}));
    let added = pod(&json!({"tolerations": [
        {"key": "a", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]}));
    assert_eq!(validate_pod_update(&old, &added), Ok(()));
    let removed = pod(&json!({"tolerations": []}));
    assert_eq!(validate_pod_update(&old, &removed).unwrap_err().field, "spec.tolerations");
}
