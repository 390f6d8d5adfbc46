//! End-to-end tests of the `gpuclaim` binary as a process: `gpuclaim review` answers the AdmissionReviews under
//! `tests/fixtures/reviews` against `tests/fixtures/objects.yaml` exactly as the live webhooks would, refuses bad
//! input with exit code 2 and one line on stderr, and `gpuclaim crds` prints the CRDs.
//!
//! The fixtures are real payloads: virt-launcher pods as KubeVirt renders them (after the API server's defaulting
//! and the DefaultTolerationSeconds plugin), VMIs as virt-controller creates them, GPUClaims as `kubectl apply`
//! sends them. Patches are decoded and compared operation by operation, then applied to the request's object.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

const GATE: &str = "gpu.cozystack.io/placement";
const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";
/// The attachments annotation the VMI webhook writes on VMI `trainer` (held claim train-a + one template of 2
/// units); KubeVirt copies it onto the VMI's launcher and WaitForFirstConsumer pods.
const TRAINER_ATTACHMENTS: &str = concat!(
    r#"[{"claim":"train-a","uid":"3f1d6c2a-8b4e-4f0a-9c57-2e61d0a4b7c3","class":"h100","count":1},"#,
    r#"{"template":0,"class":"h100","count":2}]"#
);

// ---- running the binary ---------------------------------------------------------------------------------------

/// What one run of the binary left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn gpuclaim<S: AsRef<OsStr>>(args: &[S], stdin: Option<&[u8]>) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuclaim"));
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("gpuclaim starts");
    if let Some(input) = stdin {
        // The review is read whole before anything is written, so writing it all first cannot deadlock.
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input).expect("gpuclaim reads its standard input");
    }
    let output = child.wait_with_output().expect("gpuclaim runs to the end");
    let run = Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    };
    assert!(!run.stderr.contains("panicked"), "gpuclaim panicked:\n{}", run.stderr);
    run
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

fn objects() -> PathBuf {
    fixture("objects.yaml")
}

fn review_file(name: &str) -> PathBuf {
    fixture(&format!("reviews/{name}"))
}

/// Runs `gpuclaim review --objects tests/fixtures/objects.yaml tests/fixtures/reviews/<name>`.
fn review(name: &str) -> Run {
    gpuclaim(
        &[OsStr::new("review"), OsStr::new("--objects"), objects().as_os_str(), review_file(name).as_os_str()],
        None,
    )
}

/// Runs `gpuclaim review --objects tests/fixtures/objects.yaml -` with `review` on standard input.
fn review_stdin(review: &Value) -> Run {
    let input = serde_json::to_vec(review).expect("a review serializes");
    gpuclaim(&[OsStr::new("review"), OsStr::new("--objects"), objects().as_os_str(), OsStr::new("-")], Some(&input))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn request_of(name: &str) -> Value {
    read_json(&review_file(name))["request"].clone()
}

// ---- reading the answer ---------------------------------------------------------------------------------------

/// The `response` of the review a successful run printed, after checking the envelope and the exit.
fn response_of(run: &Run) -> Value {
    assert_eq!(run.code, Some(0), "gpuclaim review failed:\n{}", run.stderr);
    assert!(run.stdout.ends_with('\n') && run.stdout.matches('\n').count() == 1, "one compact line: {:?}", run.stdout);
    let review: Value = serde_json::from_str(&run.stdout).expect("stdout is one JSON AdmissionReview");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review.get("request"), None, "the answer carries no request");
    review["response"].clone()
}

/// The bytes of the JSON patch of a response: Kubernetes reads `patch` as a base64 string (`[]byte` in JSON).
fn patch_bytes(response: &Value) -> Vec<u8> {
    assert_eq!(response["patchType"], "JSONPatch");
    let text = response["patch"].as_str().expect("response.patch is a base64 string");
    BASE64.decode(text).expect("the patch is base64")
}

/// The decoded JSON patch operations of a response.
fn patch_of(response: &Value) -> Vec<Value> {
    serde_json::from_slice(&patch_bytes(response)).expect("the patch is a JSON array of operations")
}

/// Applies the webhook's operations with an RFC 6902 implementation, as the API server does.
fn apply_patch(document: &Value, operations: &[Value]) -> Value {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(operations.to_vec())).expect("the operations are RFC 6902");
    let mut document = document.clone();
    json_patch::patch(&mut document, &patch).expect("the patch applies to the object it was made for");
    document
}

/// Checks a refusal exactly: the whole response, and the outcome line on stderr.
fn assert_refused(run: &Run, request: &Value, code: u16, reason: &str, message: &str) {
    let response = response_of(run);
    let expected = json!({
        "uid": request["uid"],
        "allowed": false,
        "status": {
            "status": "Failure",
            "code": code,
            "message": message,
            "reason": if code == 422 { "Invalid" } else { "Forbidden" }
        },
        "auditAnnotations": {"reason": reason},
    });
    assert_eq!(response, expected);
    let webhook = webhook_of(request);
    assert_eq!(run.stderr, format!("{webhook} webhook: denied ({reason})\n"));
}

/// Checks an answer that allows the object unchanged.
fn assert_allowed_unchanged(run: &Run, request: &Value) {
    let response = response_of(run);
    assert_eq!(response, json!({"uid": request["uid"], "allowed": true, "status": {}}));
    assert_eq!(run.stderr, format!("{} webhook: allowed\n", webhook_of(request)));
}

/// Checks an answer that allows the object with a patch, and returns the patch's operations.
fn allowed_patch(run: &Run, request: &Value) -> Vec<Value> {
    let response = response_of(run);
    assert_eq!(response["uid"], request["uid"], "response.uid is the request's");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["status"], json!({}));
    let keys: Vec<&str> = response.as_object().expect("a response is a map").keys().map(String::as_str).collect();
    assert_eq!(keys, ["allowed", "patch", "patchType", "status", "uid"]);
    assert_eq!(run.stderr, format!("{} webhook: allowed with patch\n", webhook_of(request)));
    patch_of(&response)
}

fn webhook_of(request: &Value) -> &'static str {
    match request["kind"]["kind"].as_str() {
        Some("Pod") => "pod",
        Some("VirtualMachineInstance") => "vmi",
        Some("GPUClaim") => "order",
        other => panic!("no webhook for {other:?}"),
    }
}

/// A review of `object` in place of the request's, under a new uid.
fn with_object(name: &str, uid: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut review = read_json(&review_file(name));
    review["request"]["uid"] = json!(uid);
    edit(&mut review["request"]["object"]);
    review
}

fn h100_tolerations() -> [Value; 2] {
    [
        json!({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}),
        json!({"key": "gpu.cozystack.io/dedicated", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}),
    ]
}

fn launcher_patch() -> Vec<Value> {
    let [present, dedicated] = h100_tolerations();
    vec![
        json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}),
        json!({"op": "add", "path": "/spec/tolerations/-", "value": present}),
        json!({"op": "add", "path": "/spec/tolerations/-", "value": dedicated}),
    ]
}

fn gates_of(pod: &Value) -> Vec<&str> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|gates| gates.iter().map(|gate| gate["name"].as_str().expect("a gate has a name")).collect())
        .unwrap_or_default()
}

// ---- pod webhook --------------------------------------------------------------------------------------------

#[test]
fn launcher_pod_gets_the_gate_and_class_tolerations() {
    let request = request_of("pod-launcher-trainer.json");
    let run = review("pod-launcher-trainer.json");
    assert_eq!(allowed_patch(&run, &request), launcher_patch());
}

#[test]
fn launcher_patch_is_written_byte_for_byte_as_the_api_server_receives_it() {
    let response = response_of(&review("pod-launcher-trainer.json"));
    let patch = String::from_utf8(patch_bytes(&response)).expect("the patch is UTF-8");
    assert_eq!(
        patch,
        concat!(
            r#"[{"op":"add","path":"/spec/schedulingGates","value":[{"name":"gpu.cozystack.io/placement"}]},"#,
            r#"{"op":"add","path":"/spec/tolerations/-","value":{"effect":"NoSchedule","key":"nvidia.com/gpu","#,
            r#""operator":"Equal","value":"present"}},"#,
            r#"{"op":"add","path":"/spec/tolerations/-","value":{"effect":"NoSchedule","#,
            r#""key":"gpu.cozystack.io/dedicated","operator":"Equal","value":"h100"}}]"#
        )
    );
}

#[test]
fn patched_launcher_pod_has_exactly_one_placement_gate_and_nothing_else_changed() {
    let request = request_of("pod-launcher-trainer.json");
    let pod = &request["object"];
    let patched = apply_patch(pod, &allowed_patch(&review("pod-launcher-trainer.json"), &request));

    assert_eq!(gates_of(&patched), [GATE]);
    let mut tolerations = pod["spec"]["tolerations"].as_array().expect("KubeVirt pods carry tolerations").clone();
    tolerations.extend(h100_tolerations());
    assert_eq!(patched["spec"]["tolerations"], Value::Array(tolerations));

    let mut unchanged = patched.clone();
    let spec = unchanged["spec"].as_object_mut().expect("a pod has a spec");
    spec.remove("schedulingGates");
    spec.insert("tolerations".to_owned(), pod["spec"]["tolerations"].clone());
    assert_eq!(&unchanged, pod, "the patch touches only the gate and the tolerations");
}

#[test]
fn patched_launcher_pod_reviewed_again_gets_no_patch() {
    // The API server may call a mutating webhook again (reinvocationPolicy IfNeeded): a duplicate gate would
    // fail pod validation.
    let request = request_of("pod-launcher-trainer.json");
    let patched = apply_patch(&request["object"], &launcher_patch());
    let again = with_object("pod-launcher-trainer.json", "2f6c0b9e-8d41-4a7e-b3c5-91e0d7a2f648", |object| {
        *object = patched;
    });
    assert_allowed_unchanged(&review_stdin(&again), &again["request"]);
}

#[test]
fn launcher_pod_that_already_carries_the_gate_and_tolerations_is_allowed_without_a_patch() {
    let request = request_of("pod-launcher-trainer-already-gated.json");
    assert_eq!(gates_of(&request["object"]), [GATE]);
    assert_allowed_unchanged(&review("pod-launcher-trainer-already-gated.json"), &request);
}

#[test]
fn launcher_pod_with_another_gate_gets_the_placement_gate_appended() {
    let review = with_object("pod-launcher-trainer.json", "7b3e9d15-6c2a-4f80-9e4d-0a8b1c5f3e72", |pod| {
        pod["spec"]["schedulingGates"] = json!([{"name": "example.com/storage-ready"}]);
    });
    let request = &review["request"];
    let patch = allowed_patch(&review_stdin(&review), request);
    let mut expected = launcher_patch();
    expected[0] = json!({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}});
    assert_eq!(patch, expected);
    assert_eq!(gates_of(&apply_patch(&request["object"], &patch)), ["example.com/storage-ready", GATE]);
}

#[test]
fn launcher_pod_with_only_some_class_tolerations_gets_the_missing_ones() {
    let review = with_object("pod-launcher-trainer.json", "c9a1e4f7-2b6d-4e38-8f0a-5d7c3b9e1a26", |pod| {
        let [present, _] = h100_tolerations();
        pod["spec"]["tolerations"].as_array_mut().expect("tolerations").push(present);
    });
    let patch = allowed_patch(&review_stdin(&review), &review["request"]);
    let [_, dedicated] = h100_tolerations();
    assert_eq!(
        patch,
        [
            json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}),
            json!({"op": "add", "path": "/spec/tolerations/-", "value": dedicated}),
        ]
    );
}

#[test]
fn tolerations_shared_by_two_classes_are_added_once_in_class_order() {
    // A VM with a vGPU and whole H100s: both classes tolerate nvidia.com/gpu=present.
    let attachments = concat!(
        r#"[{"claim":"infer-a","uid":"c47b2e90-5d1f-4a36-8e0b-7f3a9d6c2e18","class":"a100-40c","count":1},"#,
        r#"{"template":0,"class":"h100","count":2}]"#
    );
    let review = with_object("pod-launcher-trainer.json", "e2d84b6a-0f3c-4a95-b7e1-6c9d2a5f8b03", |pod| {
        pod["metadata"]["annotations"]["gpu.cozystack.io/attachments"] = json!(attachments);
    });
    let patch = allowed_patch(&review_stdin(&review), &review["request"]);
    assert_eq!(patch, launcher_patch(), "a100-40c adds nvidia.com/gpu=present, h100 only what a100-40c lacked");
}

#[test]
fn migration_target_is_allowed_without_a_patch() {
    let request = request_of("pod-migration-target-inference-0.json");
    assert!(request["object"]["metadata"]["labels"]["kubevirt.io/migrationJobUID"].is_string());
    assert_allowed_unchanged(&review("pod-migration-target-inference-0.json"), &request);
}

#[test]
fn wffc_temporary_pod_is_gated_like_the_launcher() {
    let request = request_of("pod-wffc-trainer.json");
    assert_eq!(request["object"]["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"], "true");
    let patch = allowed_patch(&review("pod-wffc-trainer.json"), &request);
    assert_eq!(patch, launcher_patch());
    assert_eq!(gates_of(&apply_patch(&request["object"], &patch)), [GATE]);
}

#[test]
fn launcher_pod_without_attachments_is_refused_as_unreadable() {
    assert_refused(
        &review("pod-launcher-without-attachments.json"),
        &request_of("pod-launcher-without-attachments.json"),
        422,
        "MissingAttachments",
        "the pod carries label gpu.cozystack.io/claims but no annotation gpu.cozystack.io/attachments: its VMI was \
         not admitted by the GPU claims webhook",
    );
}

#[test]
fn launcher_pod_with_an_unreadable_attachments_annotation_is_refused_as_unreadable() {
    let review = with_object("pod-launcher-trainer.json", "4d8f2a6c-1e9b-4c37-a5d0-8b3e7f1c9a64", |pod| {
        pod["metadata"]["annotations"]["gpu.cozystack.io/attachments"] = json!(r#"[{"class":"h100"}]"#);
    });
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        422,
        "MalformedAttachments",
        "annotation gpu.cozystack.io/attachments cannot be read: missing field `count` at line 1 column 17",
    );
}

#[test]
fn pod_without_the_claims_label_is_left_alone() {
    let review = with_object("pod-launcher-trainer.json", "91b5c3e8-7a2d-4f60-8c1b-3e9a5d7f2b40", |pod| {
        let labels = pod["metadata"]["labels"].as_object_mut().expect("labels");
        labels.remove("gpu.cozystack.io/claims");
    });
    assert_allowed_unchanged(&review_stdin(&review), &review["request"]);
}

#[test]
fn operations_other_than_create_pass_unchanged() {
    let mut review = read_json(&review_file("pod-launcher-trainer.json"));
    review["request"]["operation"] = json!("UPDATE");
    review["request"]["oldObject"] = review["request"]["object"].clone();
    assert_allowed_unchanged(&review_stdin(&review), &review["request"]);
}

// ---- VMI webhook ---------------------------------------------------------------------------------------------

#[test]
fn vmi_with_held_and_template_references_gets_attachments_and_one_gpu_per_unit() {
    let request = request_of("vmi-trainer.json");
    let gpus: Vec<Value> = (0..3).map(|unit| json!({"name": format!("gpuclaim-{unit}"), "deviceName": H100})).collect();
    assert_eq!(
        allowed_patch(&review("vmi-trainer.json"), &request),
        [
            json!({
                "op": "add",
                "path": "/metadata/annotations/gpu.cozystack.io~1attachments",
                "value": TRAINER_ATTACHMENTS,
            }),
            json!({"op": "add", "path": "/spec/domain/devices/gpus", "value": gpus}),
        ]
    );
}

#[test]
fn attachments_the_vmi_webhook_writes_are_those_the_launcher_pods_carry() {
    let request = request_of("vmi-trainer.json");
    let vmi = apply_patch(&request["object"], &allowed_patch(&review("vmi-trainer.json"), &request));
    let written = &vmi["metadata"]["annotations"]["gpu.cozystack.io/attachments"];
    for pod in ["pod-launcher-trainer.json", "pod-wffc-trainer.json", "pod-launcher-trainer-already-gated.json"] {
        let annotations = &request_of(pod)["object"]["metadata"]["annotations"];
        assert_eq!(&annotations["gpu.cozystack.io/attachments"], written, "{pod}");
        assert_eq!(annotations["gpu.cozystack.io/claims"], vmi["metadata"]["annotations"]["gpu.cozystack.io/claims"]);
    }
    let requests = &request_of("pod-launcher-trainer.json")["object"]["spec"]["containers"][0]["resources"];
    let units = vmi["spec"]["domain"]["devices"]["gpus"].as_array().expect("gpus").len().to_string();
    assert_eq!(requests["requests"][H100], units.as_str(), "KubeVirt requests one unit per GPU entry");
    assert_eq!(requests["limits"][H100], units.as_str());
}

#[test]
fn patched_vmi_reviewed_again_gets_no_patch() {
    let request = request_of("vmi-trainer.json");
    let patched = apply_patch(&request["object"], &allowed_patch(&review("vmi-trainer.json"), &request));
    let again = with_object("vmi-trainer.json", "5a0c7e3b-9f24-4d18-b6a2-e1d3c8f50b97", |object| *object = patched);
    assert_allowed_unchanged(&review_stdin(&again), &again["request"]);
}

#[test]
fn vmi_without_a_devices_map_gets_one_with_the_gpus() {
    // A JSON patch `add` needs the parent to exist: the webhook adds the missing map whole.
    let review = with_object("vmi-trainer.json", "0e7b4c9a-3d15-4f82-a6c0-b9e2d5f1a837", |vmi| {
        vmi["spec"]["domain"].as_object_mut().expect("a domain").remove("devices");
    });
    let request = &review["request"];
    let patch = allowed_patch(&review_stdin(&review), request);
    let gpus: Vec<Value> = (0..3).map(|unit| json!({"name": format!("gpuclaim-{unit}"), "deviceName": H100})).collect();
    assert_eq!(patch[1], json!({"op": "add", "path": "/spec/domain/devices", "value": {"gpus": gpus}}));
    let vmi = apply_patch(&request["object"], &patch);
    assert_eq!(vmi["spec"]["domain"]["devices"], json!({"gpus": gpus}));
}

#[test]
fn vmi_referencing_an_unknown_claim_is_refused() {
    assert_refused(
        &review("vmi-unknown-claim.json"),
        &request_of("vmi-unknown-claim.json"),
        403,
        "ClaimMissing",
        r#"GPU claim "train-z" does not exist in this namespace"#,
    );
}

#[test]
fn vmi_referencing_a_claim_in_use_by_another_vmi_is_refused() {
    assert_refused(
        &review("vmi-claim-in-use.json"),
        &request_of("vmi-claim-in-use.json"),
        403,
        "ClaimInUse",
        r#"GPU claim "infer-a" is in use by VMI "inference-0""#,
    );
}

#[test]
fn vmi_referencing_a_claim_attached_to_its_own_previous_run_is_allowed() {
    // VMI names are unique while they exist: a claim still attached to a VMI of the same name is the previous run.
    let mut review = with_object("vmi-claim-in-use.json", "a7d2f9c1-4b8e-4063-9d5a-2c6e0b8f4a19", |vmi| {
        vmi["metadata"]["name"] = json!("inference-0");
        vmi["metadata"]["ownerReferences"][0]["name"] = json!("inference-0");
    });
    review["request"]["name"] = json!("inference-0");
    let request = &review["request"];
    let patch = allowed_patch(&review_stdin(&review), request);
    let vmi = apply_patch(&request["object"], &patch);
    assert_eq!(
        vmi["spec"]["domain"]["devices"]["gpus"],
        json!([{"name": "gpuclaim-0", "deviceName": "nvidia.com/A100-40C"}])
    );
}

#[test]
fn vmi_with_held_claims_on_different_nodes_is_refused() {
    assert_refused(
        &review("vmi-claims-on-different-nodes.json"),
        &request_of("vmi-claims-on-different-nodes.json"),
        403,
        "HeldClaimsOnDifferentNodes",
        concat!(
            r#"held GPU claims "train-a" (node "gpu-h100-1") and "train-b" (node "gpu-h100-2") are bound to "#,
            "different nodes; a VM's claims must share one node"
        ),
    );
}

#[test]
fn vmi_with_a_template_over_max_count_is_refused() {
    assert_refused(
        &review("vmi-template-over-max-count.json"),
        &request_of("vmi-template-over-max-count.json"),
        403,
        "CountOverMax",
        r#"claim template orders 9 units of class "h100", more than its maxCount 8"#,
    );
}

#[test]
fn vmi_listing_raw_gpus_beside_references_is_refused_as_a_mixed_list() {
    assert_refused(
        &review("vmi-mixed-list.json"),
        &request_of("vmi-mixed-list.json"),
        403,
        "MixedList",
        "the VMI lists raw GPUs and claim references together; use one or the other",
    );
}

#[test]
fn vmi_with_a_raw_name_in_its_claims_annotation_is_refused_as_a_mixed_list() {
    let review = with_object("vmi-trainer.json", "3c9e1a7f-5b0d-4e26-8a4c-f7d1b9e3c058", |vmi| {
        vmi["metadata"]["annotations"]["gpu.cozystack.io/claims"] =
            json!(r#"[{"claim":"train-a"},{"name":"nvidia.com/GA102GL_A10"}]"#);
    });
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "MixedList",
        "the VMI lists raw GPUs and claim references together; use one or the other",
    );
}

#[test]
fn vmi_with_an_unreadable_claims_annotation_is_refused_as_unreadable() {
    assert_refused(
        &review("vmi-unreadable-claims.json"),
        &request_of("vmi-unreadable-claims.json"),
        422,
        "MalformedReferences",
        "annotation gpu.cozystack.io/claims cannot be read: missing field `count` at line 1 column 54",
    );
}

#[test]
fn vmi_with_raw_gpus_only_is_left_alone() {
    assert_allowed_unchanged(&review("vmi-raw-gpu.json"), &request_of("vmi-raw-gpu.json"));
}

// ---- order webhook -------------------------------------------------------------------------------------------

#[test]
fn order_that_fits_is_allowed() {
    assert_allowed_unchanged(&review("order-allowed.json"), &request_of("order-allowed.json"));
}

#[test]
fn order_of_a_missing_class_is_refused() {
    assert_refused(
        &review("order-class-missing.json"),
        &request_of("order-class-missing.json"),
        403,
        "ClassMissing",
        r#"GPU class "b200" does not exist"#,
    );
}

#[test]
fn order_over_the_class_max_count_is_refused() {
    assert_refused(
        &review("order-count-over-max.json"),
        &request_of("order-count-over-max.json"),
        403,
        "CountOverMax",
        r#"spec.count 9 is more than the maxCount 8 of GPU class "h100""#,
    );
}

#[test]
fn order_over_the_largest_free_units_on_one_node_is_refused_fragmented_or_for_capacity() {
    // 6 units of h100 are free in total, but at most 3 on any one node: 4 are there, on no one node.
    assert_refused(
        &review("order-no-capacity.json"),
        &request_of("order-no-capacity.json"),
        403,
        "Fragmented",
        concat!(
            r#"spec.count 4 fits no one node of GPU class "h100": 6 units are free in total, at most 3 on one node "#,
            "(the class is fragmented)"
        ),
    );
    // 7 are more than the class has free at all.
    let review = with_object("order-no-capacity.json", "5d0c8e6a-2b4f-4c31-9a7e-0f6b2d8c4e19", |claim| {
        claim["spec"]["count"] = json!(7);
    });
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "NoCapacity",
        r#"spec.count 7 is more than the 3 free units of GPU class "h100" on any one node"#,
    );
}

#[test]
fn order_over_the_namespace_budget_is_refused() {
    // tenant-a holds train-a and train-b (1 unit each) of a budget of 4.
    assert_refused(
        &review("order-budget-exceeded.json"),
        &request_of("order-budget-exceeded.json"),
        403,
        "BudgetExceeded",
        concat!(
            r#"ordering 3 units of GPU class "h100" would exceed the namespace's budget: 2 of 4 already ordered "#,
            "(requests.gpu.cozystack.io/h100)"
        ),
    );
}

#[test]
fn order_of_a_vgpu_class_in_a_namespace_without_the_entitlement_is_refused() {
    assert_refused(
        &review("order-not-entitled.json"),
        &request_of("order-not-entitled.json"),
        403,
        "NotEntitled",
        concat!(
            r#"GPU class "a100-40c" is a vGPU class and this namespace is not entitled to vGPUs "#,
            "(label gpu.cozystack.io/vgpu-entitled)"
        ),
    );
}

#[test]
fn order_of_a_vgpu_class_in_an_entitled_namespace_is_allowed() {
    let mut review = with_object("order-not-entitled.json", "8f4b2d0e-6a1c-4937-b5e8-c2a7d9f3e061", |claim| {
        claim["metadata"]["namespace"] = json!("tenant-a");
    });
    review["request"]["userInfo"] = request_of("order-allowed.json")["userInfo"].clone();
    review["request"]["namespace"] = json!("tenant-a");
    assert_allowed_unchanged(&review_stdin(&review), &review["request"]);
}

/// The order webhook's refusal of a tenant's write of the template mark, as alice.
const MARK_FORBIDDEN_FOR_ALICE: &str = concat!(
    "label gpu.cozystack.io/template-claim is reserved for the GPU controller; ",
    r#""alice@example.com" may not set, change or remove it"#
);

#[test]
fn order_carrying_the_template_mark_from_a_tenant_is_refused() {
    assert_refused(
        &review("order-template-mark-by-tenant.json"),
        &request_of("order-template-mark-by-tenant.json"),
        403,
        "TemplateMarkForbidden",
        MARK_FORBIDDEN_FOR_ALICE,
    );
}

#[test]
fn update_raising_a_bound_claims_count_is_refused_as_spec_immutable() {
    // train-a was ordered (1 unit, within tenant-a's budget of 4) and bound; raising it to 8 would take 7 units
    // no check has seen.
    assert_refused(
        &review("order-update-raises-count.json"),
        &request_of("order-update-raises-count.json"),
        403,
        "SpecImmutable",
        "spec.count is immutable (1 -> 8): a claim's class and count were judged when it was ordered; delete it and \
         order a new one",
    );
}

#[test]
fn update_switching_a_claims_class_is_refused_as_spec_immutable() {
    let mut review = read_json(&review_file("order-update-raises-count.json"));
    review["request"]["object"]["spec"] = json!({"className": "a100-40c", "count": 1});
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "SpecImmutable",
        r#"spec.className is immutable ("h100" -> "a100-40c"): a claim's class and count were judged when it was ordered; delete it and order a new one"#,
    );
}

#[test]
fn update_that_keeps_the_spec_is_allowed_without_judging_the_order_again() {
    // tenant-a's own label on its claim; the claim would not fit the budget if ordered now at count 8, but its
    // count stays 1 and nothing is judged again.
    let mut review = read_json(&review_file("order-update-raises-count.json"));
    review["request"]["object"] = review["request"]["oldObject"].clone();
    review["request"]["object"]["metadata"]["labels"] = json!({"team": "vision"});
    assert_allowed_unchanged(&review_stdin(&review), &review["request"]);
}

#[test]
fn update_removing_the_template_mark_by_a_tenant_is_refused() {
    let mut review = read_json(&review_file("order-update-raises-count.json"));
    review["request"]["oldObject"]["metadata"]["labels"] = json!({"gpu.cozystack.io/template-claim": "true"});
    review["request"]["object"] = review["request"]["oldObject"].clone();
    review["request"]["object"]["metadata"]["labels"] = json!({"gpu.cozystack.io/template-claim": "false"});
    assert_refused(&review_stdin(&review), &review["request"], 403, "TemplateMarkForbidden", MARK_FORBIDDEN_FOR_ALICE);
}

#[test]
fn update_without_the_stored_object_is_an_input_error() {
    let mut review = read_json(&review_file("order-update-raises-count.json"));
    review["request"]["oldObject"] = Value::Null;
    let run = review_stdin(&review);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("field request.oldObject: missing (an UPDATE carries the stored object)"),
        "{}",
        run.stderr
    );
}

#[test]
fn template_claim_created_by_the_settings_creator_is_allowed() {
    let request = request_of("order-template-by-controller.json");
    assert_eq!(request["userInfo"]["username"], "system:serviceaccount:cozy-gpuclaim:gpuclaim-controller");
    assert_allowed_unchanged(&review("order-template-by-controller.json"), &request);
}

#[test]
fn template_claim_skips_the_budget_and_capacity_checks() {
    // 4 units would be refused from a tenant twice over (3 free on one node; 2 of 4 budgeted units ordered); the
    // controller checks template claims itself when it creates them.
    let review = with_object("order-template-by-controller.json", "1b7e3f9d-2c5a-4816-9e0b-d4a8c6f2b375", |claim| {
        claim["spec"]["count"] = json!(4);
    });
    assert_allowed_unchanged(&review_stdin(&review), &review["request"]);
}

#[test]
fn order_checks_run_in_the_documented_order() {
    // A count over maxCount in a class tenant-b is not entitled to and has no free units for: count comes first.
    let mut review = with_object("order-not-entitled.json", "d0a6c2e8-4f19-4b73-8e5d-a1c9b7f3e026", |claim| {
        claim["spec"]["count"] = json!(2);
    });
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "CountOverMax",
        r#"spec.count 2 is more than the maxCount 1 of GPU class "a100-40c""#,
    );
    // Over the budget (2 of h100 in tenant-b) and over the free units in total: capacity before budget.
    review["request"]["object"]["spec"] = json!({"className": "h100", "count": 7});
    review["request"]["uid"] = json!("f3b9d5a1-7c2e-4068-b4f0-e6a2c8d1b947");
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "NoCapacity",
        r#"spec.count 7 is more than the 3 free units of GPU class "h100" on any one node"#,
    );
    // Over the budget and fragmented (4 of the 6 free, at most 3 on one node): capacity before budget too.
    review["request"]["object"]["spec"] = json!({"className": "h100", "count": 4});
    assert_refused(
        &review_stdin(&review),
        &review["request"],
        403,
        "Fragmented",
        concat!(
            r#"spec.count 4 fits no one node of GPU class "h100": 6 units are free in total, at most 3 on one node "#,
            "(the class is fragmented)"
        ),
    );
}

// ---- bad input -----------------------------------------------------------------------------------------------

/// Checks a run that failed on its input: exit code 2, nothing on stdout, exactly `message` on stderr.
fn assert_input_error(run: &Run, message: &str) {
    assert_eq!(run.stdout, "", "nothing is answered");
    assert_eq!(run.stderr, format!("error: {message}\n"));
    assert_eq!(run.code, Some(2));
}

fn review_with_objects(objects: &Path, review: &Path) -> Run {
    gpuclaim(&[OsStr::new("review"), OsStr::new("--objects"), objects.as_os_str(), review.as_os_str()], None)
}

#[test]
fn missing_objects_file_exits_2_naming_the_file() {
    let missing = fixture("no-such-objects.yaml");
    let run = review_with_objects(&missing, &review_file("order-allowed.json"));
    assert_input_error(
        &run,
        &format!("failed to read objects {}: No such file or directory (os error 2)", missing.display()),
    );
}

#[test]
fn objects_directory_exits_2_naming_it() {
    let directory = fixture("reviews");
    let run = review_with_objects(&directory, &review_file("order-allowed.json"));
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.starts_with(&format!("error: failed to read objects {}: ", directory.display())),
        "{}",
        run.stderr
    );
}

#[test]
fn objects_file_with_bad_yaml_exits_2_naming_the_document_and_line() {
    let path = fixture("bad/objects-bad-yaml.yaml");
    let run = review_with_objects(&path, &review_file("order-allowed.json"));
    assert_input_error(
        &run,
        &format!(
            "objects {}: document 2: field (document): not valid YAML: mapping values are not allowed in this \
             context at line 17, column 14",
            path.display()
        ),
    );
}

#[test]
fn objects_file_with_an_unknown_kind_exits_2_naming_the_object() {
    let path = fixture("bad/objects-unknown-kind.yaml");
    let run = review_with_objects(&path, &review_file("order-allowed.json"));
    assert_input_error(
        &run,
        &format!(
            "objects {}: document 2 (VirtualMachine tenant-a/trainer): field kind: unknown kind \"VirtualMachine\" \
             of apiVersion \"kubevirt.io/v1\"; expected GPUClass, GPUClaim, GPUUsage (gpu.cozystack.io/v1alpha1), \
             Namespace, ResourceQuota, ConfigMap, Node, Pod (v1) or VirtualMachineInstance (kubevirt.io/v1)",
            path.display()
        ),
    );
}

#[test]
fn gpuclaim_without_spec_count_in_the_objects_exits_2_naming_the_field() {
    let path = fixture("bad/objects-claim-without-count.yaml");
    let run = review_with_objects(&path, &review_file("order-allowed.json"));
    assert_input_error(
        &run,
        &format!(
            "objects {}: document 2 (GPUClaim tenant-a/train-a): field spec.count: missing field `count`",
            path.display()
        ),
    );
}

#[test]
fn missing_review_file_exits_2_naming_the_file() {
    let missing = fixture("reviews/no-such-review.json");
    let run = review_with_objects(&objects(), &missing);
    assert_input_error(
        &run,
        &format!("failed to read review {}: No such file or directory (os error 2)", missing.display()),
    );
}

#[test]
fn truncated_review_exits_2_saying_it_is_not_json() {
    let path = fixture("bad/review-truncated.json");
    let run = review_with_objects(&objects(), &path);
    assert_eq!(run.code, Some(2));
    let prefix = format!("error: review {}: not valid JSON or YAML: ", path.display());
    assert!(run.stderr.starts_with(&prefix) && run.stderr.lines().count() == 1, "{}", run.stderr);
}

#[test]
fn review_without_request_exits_2() {
    // A response fed back in by mistake.
    let path = fixture("bad/review-without-request.json");
    assert_input_error(
        &review_with_objects(&objects(), &path),
        &format!("review {}: field request: missing (the AdmissionReview carries no request)", path.display()),
    );
}

#[test]
fn empty_envelope_on_standard_input_exits_2_saying_the_request_is_missing() {
    let run = review_stdin(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}));
    assert_input_error(&run, "review <stdin>: field request: missing (the AdmissionReview carries no request)");
}

#[test]
fn a_response_fed_back_in_is_judged_by_its_missing_request() {
    let run = review_stdin(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": "x", "allowed": true}}),
    );
    assert_input_error(&run, "review <stdin>: field request: missing (the AdmissionReview carries no request)");
}

#[test]
fn empty_standard_input_says_the_review_is_empty() {
    let run = gpuclaim(&[OsStr::new("review"), OsStr::new("--objects"), objects().as_os_str()], Some(b""));
    assert_input_error(&run, "review <stdin>: field (review): the review is empty");
}

#[test]
fn a_document_that_is_not_an_admission_review_names_what_it_is() {
    let run = review_stdin(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}));
    assert_input_error(
        &run,
        "review <stdin>: field apiVersion/kind: expected admission.k8s.io/v1 AdmissionReview, got \"v1\" \"Pod\"",
    );
}

#[test]
fn review_of_an_unsupported_kind_exits_2_naming_the_kind() {
    let path = fixture("bad/review-unsupported-kind.json");
    assert_input_error(
        &review_with_objects(&objects(), &path),
        &format!(
            "review {}: field request.kind: no webhook serves kind \"VirtualMachine\" of group \"kubevirt.io\"",
            path.display()
        ),
    );
}

#[test]
fn review_of_a_gpuclaim_without_spec_count_exits_2_naming_the_field() {
    let path = fixture("bad/review-claim-without-count.json");
    assert_input_error(
        &review_with_objects(&objects(), &path),
        &format!("review {}: field request.object.spec.count: missing field `count`", path.display()),
    );
}

#[test]
fn review_without_a_uid_exits_2_naming_the_field() {
    let mut review = read_json(&review_file("order-allowed.json"));
    review["request"].as_object_mut().expect("a request").remove("uid");
    assert_input_error(&review_stdin(&review), "review <stdin>: field request.uid: missing field `uid`");
}

#[test]
fn review_without_objects_option_is_a_usage_error() {
    let run = gpuclaim(&[OsStr::new("review"), review_file("order-allowed.json").as_os_str()], None);
    assert_eq!(run.code, Some(2));
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("--objects <OBJECTS.yaml>"), "{}", run.stderr);
}

// ---- input forms, output forms, determinism ------------------------------------------------------------------

#[test]
fn review_read_from_standard_input_with_a_dash_answers_like_the_file() {
    let from_file = review("vmi-trainer.json");
    let text = std::fs::read(review_file("vmi-trainer.json")).expect("the fixture reads");
    let objects = objects();
    let args = [OsStr::new("review"), OsStr::new("--objects"), objects.as_os_str(), OsStr::new("-")];
    let from_stdin = gpuclaim(&args, Some(&text));
    assert_eq!(from_stdin.code, Some(0), "{}", from_stdin.stderr);
    assert_eq!(from_stdin.stdout, from_file.stdout);
    assert_eq!(from_stdin.stderr, from_file.stderr);
}

#[test]
fn review_read_from_standard_input_without_an_argument_answers_like_the_file() {
    let from_file = review("pod-launcher-trainer.json");
    let text = std::fs::read(review_file("pod-launcher-trainer.json")).expect("the fixture reads");
    let objects = objects();
    let args = [OsStr::new("review"), OsStr::new("--objects"), objects.as_os_str()];
    let from_stdin = gpuclaim(&args, Some(&text));
    assert_eq!(from_stdin.code, Some(0), "{}", from_stdin.stderr);
    assert_eq!(from_stdin.stdout, from_file.stdout);
}

#[test]
fn yaml_review_answers_byte_for_byte_like_its_json_twin() {
    let yaml = review("vmi-trainer.yaml");
    let json = review("vmi-trainer.json");
    assert_eq!(yaml.code, Some(0), "{}", yaml.stderr);
    assert_eq!(yaml.stdout, json.stdout);
    assert_eq!(yaml.stderr, json.stderr);
}

#[test]
fn yaml_review_on_standard_input_is_read_too() {
    let text = std::fs::read(review_file("vmi-trainer.yaml")).expect("the fixture reads");
    let objects = objects();
    let args = [OsStr::new("review"), OsStr::new("--objects"), objects.as_os_str(), OsStr::new("-")];
    assert_eq!(gpuclaim(&args, Some(&text)).stdout, review("vmi-trainer.json").stdout);
}

#[test]
fn pretty_output_is_the_same_answer_indented() {
    let compact = review("order-budget-exceeded.json");
    let (objects, review) = (objects(), review_file("order-budget-exceeded.json"));
    let args = [
        OsStr::new("review"),
        OsStr::new("--objects"),
        objects.as_os_str(),
        review.as_os_str(),
        OsStr::new("--pretty"),
    ];
    let pretty = gpuclaim(&args, None);
    assert_eq!(pretty.code, Some(0), "{}", pretty.stderr);
    assert!(pretty.stdout.starts_with("{\n  \"apiVersion\": \"admission.k8s.io/v1\",\n"), "{}", pretty.stdout);
    let pretty: Value = serde_json::from_str(&pretty.stdout).expect("pretty output is JSON");
    let compact: Value = serde_json::from_str(&compact.stdout).expect("compact output is JSON");
    assert_eq!(pretty, compact);
}

fn all_reviews() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture("reviews"))
        .expect("the reviews directory reads")
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 name"))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "the fixtures are all there: {names:?}");
    names
}

#[test]
fn every_fixture_review_is_answered_with_its_request_uid() {
    for name in all_reviews() {
        let run = review(&name);
        let response = response_of(&run);
        let request =
            if name.ends_with(".yaml") { request_of(&name.replace(".yaml", ".json")) } else { request_of(&name) };
        assert_eq!(response["uid"], request["uid"], "{name}");
        assert!(response["allowed"].is_boolean(), "{name}");
    }
}

#[test]
fn every_review_answers_byte_for_byte_the_same_twice() {
    for name in all_reviews() {
        let first = review(&name);
        let second = review(&name);
        assert_eq!(first.code, Some(0), "{name}: {}", first.stderr);
        assert_eq!(first.stdout, second.stdout, "{name}");
        assert_eq!(first.stderr, second.stderr, "{name}");
    }
}

#[test]
fn objects_in_another_document_order_give_the_same_answers() {
    // The view is keyed, not ordered by the file: reversing the documents changes nothing.
    let text = std::fs::read_to_string(objects()).expect("the objects read");
    let mut documents: Vec<&str> = text.split("\n---\n").collect();
    documents.reverse();
    let reversed = Path::new(env!("CARGO_TARGET_TMPDIR")).join("objects-reversed.yaml");
    std::fs::write(&reversed, documents.join("\n---\n")).expect("the reversed objects write");
    for name in
        ["vmi-trainer.json", "pod-launcher-trainer.json", "order-budget-exceeded.json", "order-not-entitled.json"]
    {
        let run = review_with_objects(&reversed, &review_file(name));
        assert_eq!(run.code, Some(0), "{name}: {}", run.stderr);
        assert_eq!(run.stdout, review(name).stdout, "{name}");
    }
}

#[test]
fn patch_is_sent_base64_encoded_as_kubernetes_documents_it() {
    let response = response_of(&review("pod-launcher-trainer.json"));
    let patch = response["patch"].as_str().expect("response.patch is a base64 string");
    let decoded = BASE64.decode(patch).expect("response.patch is standard base64");
    assert_eq!(serde_json::from_slice::<Vec<Value>>(&decoded).expect("a JSON patch"), launcher_patch());
}

// ---- examples and CRDs ---------------------------------------------------------------------------------------

#[test]
fn every_example_review_answers_as_the_readme_says() {
    let expected = [
        ("order-allowed.json", "order webhook: allowed"),
        ("order-budget-exceeded.json", "order webhook: denied (BudgetExceeded)"),
        ("order-not-entitled.json", "order webhook: denied (NotEntitled)"),
        ("order-update-raises-count.json", "order webhook: denied (SpecImmutable)"),
        ("pod-launcher-trainer.json", "pod webhook: allowed with patch"),
        ("pod-migration-target-inference-0.json", "pod webhook: allowed"),
        ("vmi-trainer.json", "vmi webhook: allowed with patch"),
    ];
    let mut names: Vec<String> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews"))
        .expect("examples/reviews reads")
        .map(|entry| entry.expect("a directory entry").file_name().into_string().expect("a UTF-8 name"))
        .collect();
    names.sort();
    assert_eq!(names, expected.map(|(name, _)| name), "every example has its expected answer here");
    for (name, outcome) in expected {
        // As the README runs it, from the repository root with relative paths.
        let review = format!("examples/reviews/{name}");
        let run = gpuclaim(&["review", "--objects", "examples/objects.yaml", review.as_str()], None);
        assert_eq!(run.code, Some(0), "{name}: {}", run.stderr);
        assert_eq!(run.stderr, format!("{outcome}\n"), "{name}");
        assert_eq!(run.stdout, self::review(name).stdout, "{name}: the example answers like its fixture");
    }
}

#[test]
fn the_readme_review_example_prints_the_answer_and_its_decoded_patch() {
    let args = ["review", "--objects", "examples/objects.yaml", "examples/reviews/vmi-trainer.json", "--pretty"];
    let plain = gpuclaim(&args, None);
    let run = gpuclaim(&[&args[..], &["--show-patch"]].concat(), None);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, plain.stdout, "standard output stays the webhook's answer");
    let (outcome, patch) = run.stderr.split_once('\n').expect("an outcome line, then the patch");
    assert_eq!(outcome, "vmi webhook: allowed with patch");
    let decoded: Value = serde_json::from_str(patch.strip_prefix("patch (decoded):\n").expect("a patch heading"))
        .expect("the decoded patch is JSON");
    let response: Value = serde_json::from_str(&run.stdout).expect("the answer is JSON");
    assert_eq!(decoded, Value::Array(patch_of(&response["response"])));
}

#[test]
fn crds_prints_three_crds() {
    let run = gpuclaim(&["crds"], None);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stderr, "");
    let crds: Vec<Value> = run
        .stdout
        .split("---\n")
        .filter(|document| !document.trim().is_empty())
        .map(|document| gpuclaim_engine::yaml::from_str(document).expect("each document is YAML"))
        .collect();
    let summary: Vec<(&str, &str, &str, &str)> = crds
        .iter()
        .map(|crd| {
            assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
            assert_eq!(crd["kind"], "CustomResourceDefinition");
            assert_eq!(crd["spec"]["group"], "gpu.cozystack.io");
            let version = &crd["spec"]["versions"][0];
            assert_eq!(
                (&version["name"], &version["served"], &version["storage"]),
                (&json!("v1alpha1"), &json!(true), &json!(true))
            );
            (
                crd["metadata"]["name"].as_str().expect("a name"),
                crd["spec"]["names"]["kind"].as_str().expect("a kind"),
                crd["spec"]["scope"].as_str().expect("a scope"),
                if version["subresources"]["status"].is_object() { "status" } else { "" },
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("gpuclasses.gpu.cozystack.io", "GPUClass", "Cluster", "status"),
            ("gpuclaims.gpu.cozystack.io", "GPUClaim", "Namespaced", "status"),
            ("gpuusages.gpu.cozystack.io", "GPUUsage", "Namespaced", ""),
        ]
    );
}
