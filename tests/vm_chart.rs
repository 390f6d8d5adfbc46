//! The tenant's VM chart (`charts/virtual-machine`) against the engine's VM render: one table of cases
//! (`charts/virtual-machine/tests/cases.yaml`) rendered by the real `helm template` and by `render_values`, which
//! must both give each case's answer; and the chart's VirtualMachine as KubeVirt takes it. Tests needing helm skip,
//! saying so, when there is none.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use gpuclaim_engine::keys;
use gpuclaim_engine::rules::{Refusal as _, VmRender, render_values};
use serde::Deserialize;
use serde_json::{Value, json};

#[path = "support/helm.rs"]
mod helm;
use helm::{documents, helm, helm_output, helm_run_on, vm_chart};

/// One case of the shared table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    case: String,
    #[serde(default = "empty_values")]
    values: Value,
    #[serde(default)]
    render: Option<Rendered>,
    #[serde(default)]
    refusal: Option<Refused>,
}

fn empty_values() -> Value {
    json!({})
}

/// What a render writes that concerns GPUs: the VMI template's `gpus` and claims annotation (the claims label goes
/// with the annotation).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Rendered {
    #[serde(default)]
    gpus: Option<Value>,
    #[serde(default)]
    annotation: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Refused {
    reason: String,
    message: String,
    /// Where the schema refuses the values before any template runs: helm's words for it.
    #[serde(default)]
    schema: Option<String>,
}

fn cases() -> Vec<Case> {
    let path = vm_chart().join("tests/cases.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let value = gpuclaim_engine::yaml::from_str(&text).unwrap();
    let cases: Vec<Case> = serde_json::from_value(value).unwrap();
    for case in &cases {
        assert!(case.render.is_some() != case.refusal.is_some(), "{}: give render or refusal", case.case);
    }
    cases
}

/// The labels and annotations of ours (the claims label and annotation) on a VMI template.
fn ours(map: &Value) -> BTreeMap<String, String> {
    let map = map.as_object().cloned().unwrap_or_default();
    map.into_iter()
        .filter(|(key, _)| key.contains(keys::GROUP))
        .map(|(key, value)| (key, value.as_str().unwrap().to_owned()))
        .collect()
}

fn claims_label(annotation: &Option<String>) -> BTreeMap<String, String> {
    match annotation {
        Some(_) => [(keys::LABEL_CLAIMS.to_owned(), keys::TRUE.to_owned())].into(),
        None => BTreeMap::new(),
    }
}

#[test]
fn the_engine_gives_every_case_its_answer() {
    for case in cases() {
        let got = render_values(&case.values);
        match (&case.render, &case.refusal) {
            (Some(want), _) => {
                let rendered = match got {
                    Ok(VmRender::Nothing) => Rendered::default(),
                    Ok(VmRender::Raw(devices)) => {
                        let gpus = devices.iter().map(|d| json!({"name": d.name, "deviceName": d.device_name}));
                        Rendered { gpus: Some(gpus.collect()), annotation: None }
                    }
                    Ok(VmRender::References { annotation }) => {
                        Rendered { gpus: None, annotation: Some(annotation.text().to_owned()) }
                    }
                    Err(refusal) => panic!("{}: the engine refuses: {}: {refusal}", case.case, refusal.reason()),
                };
                assert_eq!(&rendered, want, "{}", case.case);
            }
            (None, Some(want)) => {
                let refusal = got.expect_err(&case.case);
                assert_eq!((refusal.reason(), refusal.to_string()), (want.reason.as_str(), want.message.clone()));
            }
            (None, None) => unreachable!("checked by cases()"),
        }
    }
}

/// `helm template vm --namespace tenant-a -f VALUES charts/virtual-machine`.
fn helm_template(helm: &Path, values: &Value) -> Output {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    serde_json::to_writer(&mut file, values).unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    helm_output(helm, &vm_chart(), &["template", "vm", "--namespace", "tenant-a", "-f", &path])
}

/// The one VirtualMachine a render gives.
fn virtual_machine(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut vms = documents(&stdout);
    assert_eq!(vms.len(), 1, "one document: {stdout}");
    vms.remove(0)
}

#[test]
fn the_chart_gives_every_case_its_answer() {
    let Some(helm) = helm() else { return };
    for case in cases() {
        let output = helm_template(&helm, &case.values);
        let stderr = String::from_utf8_lossy(&output.stderr);
        match (&case.render, &case.refusal) {
            (Some(want), _) => {
                assert!(output.status.success(), "{}: helm refuses: {stderr}", case.case);
                let template = &virtual_machine(&output)["spec"]["template"];
                let annotations = ours(&template["metadata"]["annotations"]);
                let rendered = Rendered {
                    gpus: template["spec"]["domain"]["devices"].get("gpus").cloned(),
                    annotation: annotations.get(keys::ANNOTATION_CLAIMS).cloned(),
                };
                assert_eq!(&rendered, want, "{}", case.case);
                assert_eq!(annotations.len(), usize::from(want.annotation.is_some()), "{}", case.case);
                assert_eq!(ours(&template["metadata"]["labels"]), claims_label(&want.annotation), "{}", case.case);
            }
            (None, Some(want)) => {
                assert!(!output.status.success(), "{}: helm renders it", case.case);
                let said = match &want.schema {
                    Some(_) => "values don't meet the specifications of the schema(s)".to_owned(),
                    None => format!("{}: {}", want.reason, want.message),
                };
                assert!(stderr.contains(&said), "{}: helm says {stderr}", case.case);
                if let Some(schema) = &want.schema {
                    assert!(stderr.contains(schema.as_str()), "{}: helm says {stderr}", case.case);
                }
            }
            (None, None) => unreachable!("checked by cases()"),
        }
    }
}

#[test]
fn the_table_has_a_case_for_every_refusal_of_the_render() {
    let reasons: Vec<String> = cases().into_iter().filter_map(|c| c.refusal.map(|r| r.reason)).collect();
    for reason in ["Malformed", "NotOneKind", "EmptyField", "CountNotPositive", "MixedList", "ClaimsDisabled"] {
        assert!(reasons.iter().any(|r| r == reason), "no case is refused {reason}");
    }
}

#[test]
fn helm_lint_passes_on_the_vm_chart() {
    let Some(helm) = helm() else { return };
    helm_run_on(&helm, &vm_chart(), &["lint", "--strict"]);
    let claims = ["--set-string", "_cluster.gpu-claims-enabled=true", "--set", "gpus[0].claim=train-a"];
    helm_run_on(&helm, &vm_chart(), &[&["lint", "--strict"][..], &claims].concat());
}

#[test]
fn the_chart_renders_a_kubevirt_virtual_machine_sized_by_its_instance_type() {
    let Some(helm) = helm() else { return };
    let vm = virtual_machine(&helm_template(&helm, &json!({"gpus": [{"name": "nvidia.com/GA102GL_A10"}]})));
    assert_eq!((&vm["apiVersion"], &vm["kind"]), (&json!(keys::kubevirt::API_VERSION), &json!("VirtualMachine")));
    assert_eq!((&vm["metadata"]["name"], &vm["metadata"]["namespace"]), (&json!("vm"), &json!("tenant-a")));
    assert_eq!(vm["spec"]["runStrategy"], "Always");
    assert_eq!(vm["spec"]["instancetype"], json!({"kind": "VirtualMachineClusterInstancetype", "name": "u1.medium"}));
    let spec = &vm["spec"]["template"]["spec"];
    assert_eq!(spec["domain"].get("cpu"), None, "an instancetype and a domain that sizes the VM conflict");
    assert_eq!(spec["volumes"][0]["containerDisk"]["image"], "quay.io/containerdisks/ubuntu:24.04");
    assert_eq!(vm["spec"]["template"]["metadata"]["labels"]["kubevirt.io/domain"], "vm");
}

#[test]
fn resources_size_the_vm_instead_and_disks_come_as_data_volumes() {
    let Some(helm) = helm() else { return };
    let values = json!({
        "resources": {"cpu": 4, "memory": "16Gi"},
        "runStrategy": "RerunOnFailure",
        "containerDisk": {"image": ""},
        "disks": [{"name": "system", "size": "20Gi", "storageClass": "local", "image": "https://example.org/a.img"}],
    });
    let vm = virtual_machine(&helm_template(&helm, &values));
    assert_eq!(vm["spec"]["runStrategy"], "RerunOnFailure");
    assert_eq!(vm["spec"].get("instancetype"), None);
    let domain = &vm["spec"]["template"]["spec"]["domain"];
    assert_eq!((&domain["cpu"]["cores"], &domain["memory"]["guest"]), (&json!(4), &json!("16Gi")));
    let volume = &vm["spec"]["dataVolumeTemplates"][0];
    assert_eq!(volume["metadata"]["name"], "vm-system");
    assert_eq!(volume["spec"]["source"]["http"]["url"], "https://example.org/a.img");
    assert_eq!(volume["spec"]["storage"]["storageClassName"], "local");
    assert_eq!(volume["spec"]["storage"]["resources"]["requests"]["storage"], "20Gi");
    let spec = &vm["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"], json!([{"name": "system", "dataVolume": {"name": "vm-system"}}]));
    assert_eq!(domain["devices"]["disks"], json!([{"name": "system", "disk": {"bus": "virtio"}}]));
}

#[test]
fn the_chart_refuses_a_vm_it_cannot_boot_or_size() {
    let Some(helm) = helm() else { return };
    let refused = |values: Value| {
        let output = helm_template(&helm, &values);
        assert!(!output.status.success(), "{values} renders");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let diskless = refused(json!({"containerDisk": {"image": ""}}));
    assert!(diskless.contains("the VM has no disk: give containerDisk.image or at least one of disks"), "{diskless}");
    let sizeless = refused(json!({"instanceType": ""}));
    assert!(sizeless.contains("the VM has no size: give instanceType, or resources.cpu and resources.memory"));
    let half = refused(json!({"resources": {"cpu": 4}}));
    assert!(half.contains("at '/resources': properties 'memory' required, if 'cpu' exists"), "{half}");
    let strategy = refused(json!({"runStrategy": "Sometimes"}));
    assert!(strategy.contains("at '/runStrategy'"), "{strategy}");
    let unknown = refused(json!({"gpu": []}));
    assert!(unknown.contains("additional properties 'gpu' not allowed"), "{unknown}");
}
