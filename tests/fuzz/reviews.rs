//! AdmissionReviews for the three webhooks: the real fixtures of `tests/fixtures/reviews`, mutated, sent as the
//! HTTPS server reads them (content type, body bytes) and as `gpuclaim review` reads them (JSON or YAML text), and
//! every answer checked: a refusal names its field and reason on one line, a patch applies to the object it was
//! made for, and the object it gives is admitted again unchanged.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use gpuclaim_adapter::shared::SharedView;
use gpuclaim_adapter::webhook::{REVIEW_BYTES_MAX, RequestError, answer_body, read_json_body};
use gpuclaim_engine::model::View;
use gpuclaim_engine::review::{Outcome, ReviewError, Webhook, answer_review};
use serde_json::{Value, json};

use super::hostile::{Tape, hostile_string, hostile_value, mutate_text, mutate_tree, set_pointer};
use super::{Finding, Verdict, one_line};

/// The real reviews: what the API server sends for KubeVirt's VMIs and launcher pods and for `kubectl apply`'d claims.
const FIXTURES: [&str; 22] = [
    include_str!("../fixtures/reviews/order-allowed.json"),
    include_str!("../fixtures/reviews/order-budget-exceeded.json"),
    include_str!("../fixtures/reviews/order-class-missing.json"),
    include_str!("../fixtures/reviews/order-count-over-max.json"),
    include_str!("../fixtures/reviews/order-no-capacity.json"),
    include_str!("../fixtures/reviews/order-not-entitled.json"),
    include_str!("../fixtures/reviews/order-template-by-controller.json"),
    include_str!("../fixtures/reviews/order-template-mark-by-tenant.json"),
    include_str!("../fixtures/reviews/pod-launcher-trainer-already-gated.json"),
    include_str!("../fixtures/reviews/pod-launcher-trainer.json"),
    include_str!("../fixtures/reviews/pod-launcher-without-attachments.json"),
    include_str!("../fixtures/reviews/pod-migration-target-inference-0.json"),
    include_str!("../fixtures/reviews/pod-wffc-trainer.json"),
    include_str!("../fixtures/reviews/vmi-claim-in-use.json"),
    include_str!("../fixtures/reviews/vmi-claims-on-different-nodes.json"),
    include_str!("../fixtures/reviews/vmi-mixed-list.json"),
    include_str!("../fixtures/reviews/vmi-raw-gpu.json"),
    include_str!("../fixtures/reviews/vmi-template-over-max-count.json"),
    include_str!("../fixtures/reviews/vmi-trainer.json"),
    include_str!("../fixtures/reviews/vmi-unknown-claim.json"),
    include_str!("../fixtures/reviews/vmi-unreadable-claims.json"),
    include_str!("../fixtures/bad/review-claim-without-count.json"),
];

/// The fixtures parsed once: a copy of a tree costs a tenth of parsing its text.
static PARSED: std::sync::LazyLock<Vec<Value>> = std::sync::LazyLock::new(|| {
    FIXTURES.iter().map(|text| serde_json::from_str(text).expect("the fixtures are JSON")).collect()
});

/// The objects the fixtures were written against.
pub const OBJECTS: &str = include_str!("../fixtures/objects.yaml");

/// The review's envelope: a hostile value here ends the review before any rule, so these are mutated less often.
const ENVELOPE: [&str; 15] = [
    "",
    "/apiVersion",
    "/kind",
    "/request",
    "/request/uid",
    "/request/operation",
    "/request/kind",
    "/request/kind/group",
    "/request/kind/kind",
    "/request/namespace",
    "/request/name",
    "/request/object",
    "/request/oldObject",
    "/request/userInfo",
    "/request/dryRun",
];

/// The fields of the object the engine reads, as JSON pointers: where a hostile value does the most harm.
const TARGETS: [&str; 37] = [
    "/request/userInfo/username",
    "/request/object/apiVersion",
    "/request/object/metadata",
    "/request/object/metadata/name",
    "/request/object/metadata/generateName",
    "/request/object/metadata/namespace",
    "/request/object/metadata/uid",
    "/request/object/metadata/labels",
    "/request/object/metadata/labels/gpu.cozystack.io~1claims",
    "/request/object/metadata/labels/kubevirt.io",
    "/request/object/metadata/labels/kubevirt.io~1migrationJobUID",
    "/request/object/metadata/labels/gpu.cozystack.io~1template-claim",
    "/request/object/metadata/annotations",
    "/request/object/metadata/annotations/gpu.cozystack.io~1claims",
    "/request/object/metadata/annotations/gpu.cozystack.io~1attachments",
    "/request/object/metadata/annotations/kubevirt.io~1ephemeral-provisioning",
    "/request/object/metadata/ownerReferences",
    "/request/object/metadata/ownerReferences/0/controller",
    "/request/object/metadata/creationTimestamp",
    "/request/object/metadata/deletionTimestamp",
    "/request/object/metadata/finalizers",
    "/request/object/spec",
    "/request/object/spec/count",
    "/request/object/spec/className",
    "/request/object/spec/domain",
    "/request/object/spec/domain/devices",
    "/request/object/spec/domain/devices/gpus",
    "/request/object/spec/domain/devices/gpus/0/deviceName",
    "/request/object/spec/schedulingGates",
    "/request/object/spec/tolerations",
    "/request/object/spec/tolerations/0",
    "/request/object/spec/containers/0/resources/requests/cpu",
    "/request/object/spec/containers/0/resources/requests/memory",
    "/request/object/spec/containers/0/resources/requests/nvidia.com~1GH100_H100_SXM5_80GB",
    "/request/object/spec/overhead",
    "/request/object/spec/initContainers",
    "/request/object/status",
];

/// Keys worth sending twice.
const KEYS: [&str; 10] =
    ["request", "operation", "kind", "object", "count", "metadata", "labels", "annotations", "uid", "spec"];

const CLAIMS: [&str; 7] = ["train-a", "train-b", "busy", "infer-0", "missing", "", "tenant-a"];
const CLASSES: [&str; 5] = ["h100", "a100-40c", "l40s", "missing", ""];
const COUNTS: [i128; 9] = [0, 1, 2, 8, 9, 64, 65, 4_294_967_295, 4_294_967_296];

/// The views a review is answered on: the fixtures' objects, none at all, or (rarely) a hostile objects file.
pub struct Views {
    fixtures: SharedView,
    empty: SharedView,
}

impl Views {
    pub fn new() -> Self {
        let fixtures = gpuclaim_engine::objects::load_objects(OBJECTS, "cozy-gpuclaim").expect("the fixtures load");
        Views { fixtures: SharedView::new(fixtures.view), empty: SharedView::new(View::default()) }
    }
}

/// One review as a webhook receives it.
pub struct Request {
    pub webhook: Webhook,
    pub content_type: Option<Vec<u8>>,
    pub body: Vec<u8>,
    /// The objects file it is answered on, when not one of the fixed views.
    pub objects: Option<String>,
    pub empty_view: bool,
    /// Also sent through `gpuclaim review`'s reading (YAML, about ten times the cost of the webhook's JSON).
    pub cli: bool,
}

/// Draws a review: a fixture whose fields are mutated, whose annotations carry generated reference lists, and whose
/// text is then mutated.
pub fn generate(tape: &mut Tape) -> Request {
    let mut review = tape.choose(&PARSED).clone();
    if tape.chance(1, 2) {
        reshape(tape, &mut review);
    }
    let mutations = tape.up_to(4);
    mutate_tree(tape, &mut review, &TARGETS, mutations);
    if tape.chance(1, 8) {
        mutate_tree(tape, &mut review, &ENVELOPE, 1);
    }
    let kind = review.pointer("/request/kind/kind").and_then(Value::as_str).unwrap_or_default();
    let own = match kind {
        "Pod" => Webhook::Pod,
        "GPUClaim" => Webhook::Order,
        _ => Webhook::Vmi,
    };
    let webhook = if tape.chance(1, 16) { *tape.choose(&[Webhook::Vmi, Webhook::Pod, Webhook::Order]) } else { own };
    let mut body = if tape.chance(1, 8) {
        serde_json::to_vec_pretty(&review).expect("values serialize")
    } else {
        serde_json::to_vec(&review).expect("values serialize")
    };
    if tape.chance(1, 4) {
        mutate_text(tape, &mut body, &KEYS);
    }
    if tape.chance(1, 20_000) {
        // Past the limit, by one byte or by a megabyte.
        let size = REVIEW_BYTES_MAX + if tape.chance(1, 2) { 1 } else { 1 << 20 };
        body.resize(size, b' ');
    }
    let content_type = if tape.chance(1, 16) {
        match tape.pick(7) {
            0 => None,
            1 => Some(b"text/plain".to_vec()),
            2 => Some(b"application/json; charset=utf-8".to_vec()),
            3 => Some(b"APPLICATION/JSON ; x=y".to_vec()),
            4 => Some(b"application/jsonx".to_vec()),
            5 => Some(vec![0xff, 0xfe, b'a']),
            _ => Some(Vec::new()),
        }
    } else {
        Some(b"application/json".to_vec())
    };
    // A hostile objects file costs a hundred reviews to read: its own fuzz kind covers it, this only mixes it in.
    let objects = tape.chance(1, 256).then(|| super::readers::objects_text(tape));
    Request { webhook, content_type, body, objects, empty_view: tape.chance(1, 16), cli: tape.chance(1, 32) }
}

/// The shape-aware mutations: the operation, the kind, the envelope, and the reference lists in the annotations.
fn reshape(tape: &mut Tape, review: &mut Value) {
    match tape.pick(6) {
        0 => {
            let operation = *tape.choose(&["CREATE", "UPDATE", "DELETE", "CONNECT", "create", "", "PATCH"]);
            set_pointer(review, "/request/operation", json!(operation), false);
            match tape.pick(3) {
                0 => {
                    let old = review.pointer("/request/object").cloned().unwrap_or(Value::Null);
                    set_pointer(review, "/request/oldObject", old, false);
                }
                1 => set_pointer(review, "/request/object", Value::Null, tape.chance(1, 2)),
                _ => {}
            }
        }
        1 => {
            let kinds = [
                json!({"group": "", "version": "v1", "kind": "Pod"}),
                json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"}),
                json!({"group": "gpu.cozystack.io", "version": "v1alpha1", "kind": "GPUClaim"}),
                json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
                json!({"group": "kubevirt.io", "kind": "VirtualMachineInstance"}),
                json!({"kind": "Pod"}),
            ];
            let kind = tape.choose(&kinds);
            set_pointer(review, "/request/kind", kind.clone(), false);
        }
        2 => {
            let version = *tape.choose(&["admission.k8s.io/v1beta1", "admission.k8s.io/v2", "admission.k8s.io", "v1"]);
            set_pointer(review, "/apiVersion", json!(version), false);
            if tape.chance(1, 4) {
                set_pointer(review, "/kind", json!("AdmissionReviewList"), false);
            }
            if tape.chance(1, 4) {
                set_pointer(review, "/response", json!({"uid": "x", "allowed": true}), false);
            }
        }
        3 | 4 => {
            let (pointer, list) = if tape.chance(1, 2) {
                ("/request/object/metadata/annotations/gpu.cozystack.io~1claims", references(tape))
            } else {
                ("/request/object/metadata/annotations/gpu.cozystack.io~1attachments", attachments(tape))
            };
            let text = if tape.chance(1, 8) {
                let mut bytes = list.to_string().into_bytes();
                mutate_text(tape, &mut bytes, &["claim", "class", "count", "claimTemplate", "template", "uid"]);
                String::from_utf8_lossy(&bytes).into_owned()
            } else {
                list.to_string()
            };
            set_pointer(review, pointer, json!(text), false);
            set_pointer(review, "/request/object/metadata/labels/gpu.cozystack.io~1claims", json!("true"), false);
        }
        _ => {
            let (pointer, value) = *tape.choose(&[
                ("/request/object/metadata/labels/kubevirt.io", "virt-launcher"),
                ("/request/object/metadata/labels/kubevirt.io~1migrationJobUID", "uid-migration"),
                ("/request/object/metadata/annotations/kubevirt.io~1ephemeral-provisioning", "true"),
                ("/request/object/metadata/labels/gpu.cozystack.io~1template-claim", "true"),
                ("/request/object/metadata/labels/gpu.cozystack.io~1claims", "true"),
                ("/request/userInfo/username", "system:serviceaccount:cozy-gpuclaim:gpuclaim"),
            ]);
            set_pointer(review, pointer, json!(value), tape.chance(1, 4));
        }
    }
}

/// A claims annotation's list: held claims, templates and raw names, with counts at the edges and hostile entries.
fn references(tape: &mut Tape) -> Value {
    let count = *tape.choose(&[0, 1, 2, 3, 5, 65, 1, 2, 3, 1_000]);
    let entries = (0..count)
        .map(|_| match tape.pick(6) {
            0 | 1 => json!({"claim": tape.choose(&CLAIMS)}),
            2 | 3 => json!({"claimTemplate": {"class": tape.choose(&CLASSES), "count": edge_count(tape)}}),
            4 => json!({"name": "nvidia.com/GH100_H100_SXM5_80GB"}),
            _ => hostile_entry(tape, &["claim", "claimTemplate", "name", "class", "count"]),
        })
        .collect();
    Value::Array(entries)
}

/// An attachments annotation's list: held and template attachments, with counts at the edges and hostile entries.
fn attachments(tape: &mut Tape) -> Value {
    let count = *tape.choose(&[0, 1, 2, 3, 65, 1_000]);
    let entries = (0..count)
        .map(|index| match tape.pick(4) {
            0 => json!({"claim": tape.choose(&CLAIMS), "uid": "u", "class": tape.choose(&CLASSES), "count": edge_count(tape)}),
            1 | 2 => json!({"template": index, "class": tape.choose(&CLASSES), "count": edge_count(tape)}),
            _ => hostile_entry(tape, &["claim", "uid", "template", "class", "count"]),
        })
        .collect();
    Value::Array(entries)
}

fn edge_count(tape: &mut Tape) -> Value {
    let count = *tape.choose(&COUNTS);
    if tape.chance(1, 8) { hostile_value(tape) } else { json!(count as u64) }
}

/// An entry whose keys are the right ones, but whose values, nesting and extra keys are not.
fn hostile_entry(tape: &mut Tape, keys: &[&str]) -> Value {
    let mut entry = serde_json::Map::new();
    for _ in 0..tape.up_to(3) + 1 {
        let key = if tape.chance(1, 8) { hostile_string(tape) } else { tape.choose(keys).to_string() };
        entry.insert(key, hostile_value(tape));
    }
    if tape.chance(1, 4) { hostile_value(tape) } else { Value::Object(entry) }
}

/// Sends `request` as the HTTPS server reads it and, when its body is text, as `gpuclaim review` reads it; checks
/// each answer.
pub fn run(views: &Views, request: &Request, runtime: &tokio::runtime::Runtime) -> Result<Verdict, Finding> {
    let loaded;
    let view = match &request.objects {
        Some(text) => match gpuclaim_engine::objects::load_objects(text, "cozy-gpuclaim") {
            Ok(objects) => {
                loaded = SharedView::new(objects.view);
                &loaded
            }
            Err(_) => &views.fixtures,
        },
        None if request.empty_view => &views.empty,
        None => &views.fixtures,
    };
    let mut headers = HeaderMap::new();
    if let Some(value) = request.content_type.as_deref().and_then(|v| HeaderValue::from_bytes(v).ok()) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    let body = Body::from(request.body.clone());
    let answered =
        runtime.block_on(read_json_body(&headers, body)).and_then(|bytes| answer_body(view, request.webhook, &bytes));
    let verdict = match answered {
        Ok((response, outcome)) => {
            let review: Value = serde_json::from_slice(&request.body).expect("the webhook parsed it");
            check_answer(view, &review, &response, &outcome)?;
            answered_verdict(&outcome)
        }
        Err(error) => Verdict::Refused(request_error_key(&error, &error.to_string())?),
    };
    if let Ok(text) = std::str::from_utf8(&request.body)
        && request.cli
        && request.body.len() <= REVIEW_BYTES_MAX
    {
        check_cli(view, text)?;
    }
    Ok(verdict)
}

/// `gpuclaim review`'s path: the review as YAML (JSON is YAML), answered by the engine.
fn check_cli(view: &SharedView, text: &str) -> Result<(), Finding> {
    let Ok(review) = gpuclaim_engine::yaml::from_str(text) else { return Ok(()) };
    let view = view.read().expect("never poisoned");
    match answer_review(&view, &review) {
        Ok((response, outcome)) => check_answer_on(&view, &review, &response, &outcome),
        Err(error) => review_error_field(&error).map(drop),
    }
}

fn answered_verdict(outcome: &Outcome) -> Verdict {
    let decision = match (outcome.refusal, outcome.patched) {
        (Some(reason), _) => format!("denied {reason}"),
        (None, true) => "allowed with patch".to_owned(),
        (None, false) => "allowed".to_owned(),
    };
    Verdict::Answered(format!("{} webhook: {decision}", outcome.webhook.name()))
}

/// The refusal's kind and field, for the tally; an unclear message is a finding.
fn request_error_key(error: &RequestError, message: &str) -> Result<String, Finding> {
    one_line("webhook refusal", message)?;
    Ok(match error {
        RequestError::ContentType(_) => "415 content type".to_owned(),
        RequestError::TooLarge => "413 too large".to_owned(),
        RequestError::Body(_) => "400 body".to_owned(),
        RequestError::NotJson(e) => format!("400 not JSON ({:?})", e.classify()),
        RequestError::Review(e) => format!("400 review: {}", review_error_field(e)?),
        RequestError::WrongEndpoint { .. } => "400 wrong endpoint".to_owned(),
        RequestError::Timeout(_) => "408 timeout".to_owned(),
        RequestError::ViewPoisoned(_) => "503 view poisoned".to_owned(),
    })
}

/// The field a review error names, generalised for the tally (indices and hostile keys dropped).
fn review_error_field(error: &ReviewError) -> Result<String, Finding> {
    let message = error.to_string();
    one_line("review refusal", &message)?;
    let Some((field, reason)) = message.strip_prefix("field ").and_then(|rest| rest.split_once(": ")) else {
        return Err(Finding::new("review refusal names no field", &message));
    };
    if field.is_empty() || reason.trim().is_empty() {
        return Err(Finding::new("review refusal names no field or no reason", &message));
    }
    Ok(super::generalise(field))
}

fn check_answer(view: &SharedView, review: &Value, response: &Value, outcome: &Outcome) -> Result<(), Finding> {
    let view = view.read().expect("never poisoned");
    check_answer_on(&view, review, response, outcome)
}

/// An answer echoes the review's version and uid; a denial says why on one line with a reason word; a patch is
/// base64 JSON Patch that applies to the object, and the patched object is admitted again with no patch.
fn check_answer_on(view: &View, review: &Value, response: &Value, outcome: &Outcome) -> Result<(), Finding> {
    let answer = &response["response"];
    if response["apiVersion"] != review["apiVersion"] || answer["uid"] != review["request"]["uid"] {
        return Err(Finding::new("the answer does not echo the review's version and uid", response));
    }
    if let Some(reason) = outcome.refusal {
        let message = answer["status"]["message"].as_str().unwrap_or_default();
        one_line("denial", message)?;
        let code = answer["status"]["code"].as_u64();
        let reason_word = reason.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && reason.chars().all(|c| c.is_ascii_alphanumeric());
        if message.is_empty() || !reason_word || !matches!(code, Some(403 | 422)) || answer["allowed"] != false {
            return Err(Finding::new("a denial without message, reason word or code", response));
        }
        return Ok(());
    }
    let Some(patch) = answer.get("patch") else { return Ok(()) };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch.as_str().unwrap_or_default())
        .map_err(|e| Finding::new("the patch is not base64", e))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| Finding::new("the patch is not a JSON Patch", e))?;
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).map_err(|e| {
        Finding::new("the patch does not apply to the object it was made for", format!("{e}: {patch:?}"))
    })?;
    let mut again = review.clone();
    again["request"]["object"] = object;
    match answer_review(view, &again) {
        Ok((second, outcome)) if outcome.refusal.is_none() && second["response"].get("patch").is_none() => Ok(()),
        other => {
            let second = other.map(|(review, _)| review["response"].clone());
            Err(Finding::new("the patched object is not admitted unchanged", format!("{patch:?} then {second:?}")))
        }
    }
}
