//! The engine on real KubeVirt payloads from `../shared/kubevirt/` (skipped when that folder is absent, as on a
//! clone without the workplace's shared data).

use std::path::PathBuf;

use gpuclaim_engine::convert::{pod_from_json, vmi_from_json};
use gpuclaim_engine::fixtures::platform;
use gpuclaim_engine::keys;
use gpuclaim_engine::rules::{admit_vmi, mutate_pod};
use serde_json::Value;

fn shared(name: &str) -> Option<Vec<Value>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/kubevirt").join(name);
    let text = std::fs::read_to_string(&path).ok()?;
    let documents =
        gpuclaim_engine::yaml::documents(&text).map(|value| value.expect("shared fixtures are YAML")).collect();
    Some(documents)
}

#[test]
fn a_real_launcher_pod_converts_and_is_gated_once_it_carries_claims() {
    let Some(documents) = shared("06-real-virt-launcher-pod-running.yaml") else {
        eprintln!("skipped: ../shared/kubevirt is absent");
        return;
    };
    let mut object = documents.into_iter().find(|d| d["kind"] == "Pod").expect("the fixture holds a pod");
    let pod = pod_from_json(&object, "default").expect("a real launcher converts");
    assert_eq!(pod.cpu_millis, 100, "requests read from the compute container");
    assert_eq!(pod.memory_bytes, 4_555_014_145);
    assert_eq!(pod.devices.get("devices.kubevirt.io/kvm"), Some(&1));
    assert_eq!(pod.owner_vmi.as_ref().map(|v| v.name.as_str()), Some("cat8kv-01"));
    assert!(mutate_pod(&platform(), &pod).unwrap().is_empty(), "no claims label: untouched");

    object["metadata"]["labels"][keys::LABEL_CLAIMS] = "true".into();
    object["metadata"]["annotations"][keys::ANNOTATION_ATTACHMENTS] =
        r#"[{"template":0,"class":"h100","count":1}]"#.into();
    object["spec"].as_object_mut().unwrap().remove("nodeName");
    let pod = pod_from_json(&object, "default").unwrap();
    let patch = mutate_pod(&platform(), &pod).unwrap();
    assert!(patch.add_gate);
    assert_eq!(patch.add_tolerations.len(), 1);
}

#[test]
fn a_real_vmi_with_a_raw_gpu_is_left_to_kubevirt() {
    let Some(documents) = shared("01-kubevirt-vmi-gpu.yaml") else {
        eprintln!("skipped: ../shared/kubevirt is absent");
        return;
    };
    let object = documents.into_iter().find(|d| d["kind"] == "VirtualMachineInstance").unwrap();
    let vmi = vmi_from_json(&object, "default").expect("a real VMI converts");
    assert_eq!(vmi.gpus[0].device_name, "nvidia.com/GP102GL_Tesla_P40");
    assert!(admit_vmi(&platform(), &vmi).unwrap().is_empty());
}
