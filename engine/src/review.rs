//! Answering an `admission.k8s.io/v1` AdmissionReview: route by kind to one rule, turn its decision into the
//! response the live webhook sends. `gpuclaim review` and the HTTPS server both call [`answer`], so they agree
//! byte for byte.

use std::fmt;

use base64::Engine;
use kube_core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube_core::response::StatusSummary;
use kube_core::{DynamicObject, GroupVersionKind, TypeMeta};
use serde_json::Value;

use crate::api::GPUClaim;
use crate::convert::{self, ConvertError};
use crate::keys;
use crate::message::readable;
use crate::model::{Claim, View};
use crate::rules::{self, Order, Refusal};

/// The three webhooks, each serving one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Webhook {
    /// Mutating, VirtualMachineInstance CREATE.
    Vmi,
    /// Mutating, Pod CREATE.
    Pod,
    /// Validating, GPUClaim CREATE and UPDATE.
    Order,
}

impl Webhook {
    /// The kind a review must carry to reach this webhook.
    pub fn route(kind: &GroupVersionKind) -> Option<Webhook> {
        match (kind.group.as_str(), kind.kind.as_str()) {
            ("kubevirt.io", keys::kubevirt::KIND_VMI) => Some(Webhook::Vmi),
            ("", "Pod") => Some(Webhook::Pod),
            (keys::GROUP, keys::KIND_CLAIM) => Some(Webhook::Order),
            _ => None,
        }
    }

    /// The HTTPS path the webhook configuration points at.
    pub fn path(self) -> &'static str {
        match self {
            Webhook::Vmi => "/mutate-vmi",
            Webhook::Pod => "/mutate-pod",
            Webhook::Order => "/validate-order",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Webhook::Vmi => "vmi",
            Webhook::Pod => "pod",
            Webhook::Order => "order",
        }
    }

    /// The chart's registrations that call it, by name (`<name>.gpu.cozystack.io`): the order webhook is
    /// registered twice, for creates (failing closed) and for updates (failing open: a second line).
    pub fn registrations(self) -> &'static [&'static str] {
        match self {
            Webhook::Vmi => &["vmi"],
            Webhook::Pod => &["pod"],
            Webhook::Order => &["order", "order-update"],
        }
    }
}

/// A review that cannot be answered: the webhook answers HTTP 400, `gpuclaim review` exits with an error.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReviewError {
    #[error("field {}: {}", readable(.field), readable(.reason))]
    Malformed { field: String, reason: String },
    #[error("field request: missing (the AdmissionReview carries no request)")]
    NoRequest,
    #[error("field request.kind: no webhook serves kind {} of group {}", readable(&format!("{kind:?}")), readable(&format!("{group:?}")))]
    UnsupportedKind { group: String, kind: String },
    #[error("field request.object: missing")]
    NoObject,
    #[error("field request.object.{}: {}", readable(.0.field.trim_start_matches('.')), readable(&.0.reason))]
    Object(ConvertError),
    #[error("field request.oldObject: missing (an UPDATE carries the stored object)")]
    NoOldObject,
    #[error("field request.oldObject.{}: {}", .0.field.trim_start_matches('.'), .0.reason)]
    OldObject(ConvertError),
}

/// The decision behind an answer, for logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub webhook: Webhook,
    /// The refusal's reason word; `None` when allowed.
    pub refusal: Option<&'static str>,
    pub patched: bool,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.refusal {
            Some(reason) => write!(f, "{} webhook: denied ({reason})", self.webhook.name()),
            None if self.patched => write!(f, "{} webhook: allowed with patch", self.webhook.name()),
            None => write!(f, "{} webhook: allowed", self.webhook.name()),
        }
    }
}

/// Parses the request of an AdmissionReview (JSON). Only `apiVersion`, `kind` and `request` are read: a review
/// that carries a response instead (or besides) is judged by its request alone.
pub fn parse_review(review: &Value) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let Some(envelope) = review.as_object() else {
        let reason = if review.is_null() { "the review is empty" } else { "must be an AdmissionReview object" };
        return Err(ReviewError::Malformed { field: "(review)".to_owned(), reason: reason.to_owned() });
    };
    let text = |field: &str| envelope.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if kind != "AdmissionReview" || !api_version.starts_with("admission.k8s.io/") {
        return Err(ReviewError::Malformed {
            field: "apiVersion/kind".to_owned(),
            reason: format!("expected admission.k8s.io/v1 AdmissionReview, got {api_version:?} {kind:?}"),
        });
    }
    let request = envelope.get("request").filter(|r| !r.is_null()).ok_or(ReviewError::NoRequest)?;
    let mut request: AdmissionRequest<DynamicObject> = convert::typed(request)
        .map_err(|e| ReviewError::Malformed { field: format!("request.{}", e.field), reason: e.reason })?;
    // The response echoes the review's version, as the API server expects.
    request.types = TypeMeta { api_version, kind };
    Ok(request)
}

/// Answers one request against `view`. CREATE is decided by every webhook, UPDATE by the order webhook (a
/// GPUClaim's spec and template mark); the configurations register nothing else, and anything else that arrives
/// passes unchanged.
pub fn answer(
    view: &View,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<(AdmissionResponse, Outcome), ReviewError> {
    let webhook = Webhook::route(&request.kind).ok_or_else(|| ReviewError::UnsupportedKind {
        group: request.kind.group.clone(),
        kind: request.kind.kind.clone(),
    })?;
    let allowed = AdmissionResponse::from(request);
    let decided = match request.operation {
        Operation::Create => true,
        Operation::Update => webhook == Webhook::Order,
        Operation::Delete | Operation::Connect => false,
    };
    if !decided {
        return Ok((allowed, Outcome { webhook, refusal: None, patched: false }));
    }
    let object = request.object.as_ref().ok_or(ReviewError::NoObject)?;
    let object = serde_json::to_value(object).expect("a DynamicObject always serializes");
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let requester = request.user_info.username.as_deref().unwrap_or_default();
    let decision = match webhook {
        Webhook::Vmi => {
            let vmi = convert::vmi_from_json(&object, namespace).map_err(ReviewError::Object)?;
            rules::admit_vmi(view, &vmi).map(|patch| convert::vmi_json_patch(&patch, &object)).map_err(refusal)
        }
        Webhook::Pod => {
            let pod = convert::pod_from_json(&object, namespace).map_err(ReviewError::Object)?;
            rules::mutate_pod(view, &pod).map(|patch| convert::pod_json_patch(&patch, &object)).map_err(refusal)
        }
        Webhook::Order => {
            let claim = claim_of(&object, namespace).map_err(ReviewError::Object)?;
            let order = match request.operation {
                Operation::Update => {
                    let old = request.old_object.as_ref().ok_or(ReviewError::NoOldObject)?;
                    let old = serde_json::to_value(old).expect("a DynamicObject always serializes");
                    let old = claim_of(&old, namespace).map_err(ReviewError::OldObject)?;
                    rules::validate_order(view, Order::Update { old: &old, new: &claim }, requester)
                }
                _ => rules::validate_order(view, Order::Create(&claim), requester),
            };
            order.map(|()| json_patch::Patch(Vec::new())).map_err(refusal)
        }
    };
    Ok(match decision {
        Ok(patch) if patch.0.is_empty() => (allowed, Outcome { webhook, refusal: None, patched: false }),
        Ok(patch) => {
            let response = allowed.with_patch(patch).expect("a JSON patch always serializes");
            (response, Outcome { webhook, refusal: None, patched: true })
        }
        Err(denial) => {
            let outcome = Outcome { webhook, refusal: Some(denial.reason), patched: false };
            (denial.into_response(allowed), outcome)
        }
    })
}

fn claim_of(object: &Value, namespace: &str) -> Result<Claim, ConvertError> {
    let claim: GPUClaim = convert::typed(object)?;
    Ok(convert::claim_from_kube(&claim, namespace))
}

/// A refusal, flattened for the response.
struct Denial {
    reason: &'static str,
    code: u16,
    message: String,
}

fn refusal<R: Refusal>(refusal: R) -> Denial {
    // The message quotes names the review carried, which may be any length before the API server validates them.
    Denial { reason: refusal.reason(), code: refusal.code(), message: readable(&refusal.to_string()).into_owned() }
}

impl Denial {
    fn into_response(self, allowed: AdmissionResponse) -> AdmissionResponse {
        let mut response = allowed.deny(self.message);
        response.result.status = Some(StatusSummary::Failure);
        response.result.code = self.code;
        response.result.reason = match self.code {
            422 => "Invalid".to_owned(),
            _ => "Forbidden".to_owned(),
        };
        // The API server prefixes the key with the webhook's name in the audit log.
        response.audit_annotations.insert("reason".to_owned(), self.reason.to_owned());
        response
    }
}

/// Answers a whole AdmissionReview (JSON) with the response review (JSON), as the webhook sends it.
pub fn answer_review(view: &View, review: &Value) -> Result<(Value, Outcome), ReviewError> {
    let request = parse_review(review)?;
    let (response, outcome) = answer(view, &request)?;
    let mut review = serde_json::to_value(response.into_review()).expect("a review always serializes");
    // admission.k8s.io/v1 carries the patch as base64 (Go's []byte); kube-core serializes the bytes as a number
    // list, so encode it here, where both the CLI and the HTTPS server pass.
    if let Some(patch) = review.pointer_mut("/response/patch") {
        let bytes: Vec<u8> = serde_json::from_value(patch.take()).expect("the patch is a byte list");
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok((review, outcome))
}
