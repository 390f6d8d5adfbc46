//! Remote admission: the webhooks the stored MutatingWebhookConfigurations and ValidatingWebhookConfigurations
//! register, called as the API server calls them (`k8s.io/apiserver/pkg/admission/plugin/webhook`), without I/O:
//! the chain builds each `admission.k8s.io/v1` AdmissionReview and reads each answer; a [`WebhookTransport`] the
//! caller installs carries the call (over HTTPS in `gpuclaim twin serve`, in memory in tests).
//!
//! What the API server does, and this module with it:
//!
//! 1. Configurations are taken in name order, their webhooks in the order written. A webhook is called when its
//!    rules select the request, its `namespaceSelector` the request's namespace (the object's own labels for a
//!    Namespace; cluster-scoped objects always), its `objectSelector` the object or the old object, and its
//!    `matchConditions` hold.
//! 2. Mutating webhooks one after another, each seeing the object as the previous ones left it; a JSONPatch answer
//!    is applied to it. When a webhook changed the object, the webhooks with `reinvocationPolicy: IfNeeded` called
//!    before it are called once more, in order, after the first round.
//! 3. Validating webhooks (after the CRDs' rules and the policies, which the caller runs).
//! 4. An answer `allowed: false` refuses the request with the answer's status; a call that fails (no endpoints, a
//!    TLS error, the timeout) or an answer the API server cannot use (another uid, a patch from a validating
//!    webhook, ...) refuses it under `failurePolicy: Fail` and is skipped under `Ignore`, with the API server's
//!    texts (`failed calling webhook "N": failed to call webhook: Post "URL": MESSAGE`).
//!
//! Not served: `clientConfig.url` (the twin reaches webhooks through Services only: such a webhook's call fails with
//! a message saying so, under its failure policy), AdmissionReview versions other than `v1`, and dry run (the served
//! API refuses dry-run requests before admission, so `sideEffects` is kept but never consulted).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_cel::cel::Context;
use kube_core::{Selector, SelectorExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AdmissionError;
use super::registration::{Matcher, RegistrationError, RegistrationSpec, fail_closed};
use super::request::{Operation, Request, Served};

/// `timeoutSeconds` when a registration names none (admissionregistration/v1's default).
pub const TIMEOUT_SECONDS_DEFAULT: u32 = 10;

/// The Service port when a registration names none.
pub const PORT_DEFAULT: i32 = 443;

/// The one AdmissionReview version the twin sends.
pub const REVIEW_VERSION: &str = "v1";

/// Where a webhook is served: a Service and the path on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    /// The path posted to (`/mutate-pod`), `""` when the registration names none.
    pub path: String,
    pub port: i32,
}

impl ServiceRef {
    /// The name the API server dials and checks the serving certificate for: `NAME.NAMESPACE.svc`.
    pub fn host(&self) -> String {
        format!("{}.{}.svc", self.name, self.namespace)
    }
}

/// One call the API server makes: the AdmissionReview to post to a Service, the CA bundle the serving certificate
/// must chain to, and how long the call may take.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookCall {
    pub service: ServiceRef,
    /// The registration's `caBundle`, decoded: PEM certificates (empty when none is set).
    pub ca_bundle: Vec<u8>,
    pub timeout: Duration,
    /// The AdmissionReview (`admission.k8s.io/v1`) with its request.
    pub body: Value,
}

impl WebhookCall {
    /// The URL posted to, as the API server writes it in its errors: `https://NAME.NS.svc:PORT/PATH?timeout=Ns`.
    pub fn url(&self) -> String {
        service_url(&self.service, self.timeout)
    }
}

/// `https://NAME.NS.svc:PORT/PATH?timeout=Ns`: where the API server posts a review for `service` (the timeout in
/// whole seconds, as registrations give it).
fn service_url(service: &ServiceRef, timeout: Duration) -> String {
    format!("https://{}:{}{}?timeout={}s", service.host(), service.port, service.path, timeout.as_secs())
}

/// Why a call brought no answer, in the transport's words (`no endpoints available for service "x"`, `context
/// deadline exceeded`, `tls: failed to verify certificate: ...`): the API server quotes it after the URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CallFailure {
    pub message: String,
}

impl CallFailure {
    pub fn new(message: impl Into<String>) -> CallFailure {
        CallFailure { message: message.into() }
    }
}

/// What carries a call: posts the review to the Service and returns the answer's body as JSON, or why it could not.
/// The call blocks the API server (the world's thread) until it is answered or its timeout passes.
pub trait WebhookTransport: Send {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure>;
}

/// Where a registration sends its reviews.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientConfig {
    Service(ServiceRef),
    /// `clientConfig.url`: not served by the twin (see the module's doc).
    Url(String),
}

/// A webhook of a stored configuration, compiled.
pub struct Hook {
    /// Its name in the configuration (`pod.gpu.cozystack.io`).
    pub name: String,
    /// The configuration that holds it.
    pub configuration: String,
    pub client: ClientConfig,
    pub ca_bundle: Vec<u8>,
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke: bool,
    /// `failurePolicy: Fail` (the default).
    pub fail_closed: bool,
    pub side_effects: Option<String>,
    matcher: Matcher,
    namespace_selector: Option<Selector>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("name", &self.name).field("client", &self.client).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookSpec {
    #[serde(default)]
    name: String,
    #[serde(default)]
    client_config: ClientConfigSpec,
    timeout_seconds: Option<u32>,
    reinvocation_policy: Option<String>,
    namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    admission_review_versions: Vec<String>,
    side_effects: Option<String>,
    #[serde(flatten)]
    matching: RegistrationSpec,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientConfigSpec {
    service: Option<ServiceSpec>,
    url: Option<String>,
    ca_bundle: Option<String>,
}

#[derive(Deserialize)]
struct ServiceSpec {
    namespace: String,
    name: String,
    path: Option<String>,
    port: Option<i32>,
}

impl Hook {
    /// Compiles one entry of a configuration's `webhooks` (`mutating`: of a MutatingWebhookConfiguration).
    pub fn compile(configuration: &str, entry: &Value, mutating: bool) -> Result<Hook, RegistrationError> {
        let named = entry.get("name").and_then(Value::as_str).unwrap_or_default();
        let invalid = |reason: String| RegistrationError::Invalid { webhook: named.to_owned(), reason };
        let spec: HookSpec = serde_json::from_value(entry.clone()).map_err(|e| invalid(e.to_string()))?;
        let HookSpec { name, client_config, timeout_seconds, reinvocation_policy, .. } = spec;
        if !spec.admission_review_versions.iter().any(|v| v == REVIEW_VERSION) {
            let listed = spec.admission_review_versions;
            return Err(invalid(format!(
                "admissionReviewVersions {listed:?} lists no version the twin sends ({REVIEW_VERSION})"
            )));
        }
        let client = match (client_config.service, client_config.url) {
            (Some(service), None) => ClientConfig::Service(ServiceRef {
                namespace: service.namespace,
                name: service.name,
                path: service.path.unwrap_or_default(),
                port: service.port.unwrap_or(PORT_DEFAULT),
            }),
            (None, Some(url)) => ClientConfig::Url(url),
            _ => return Err(invalid("clientConfig: exactly one of url or service is required".to_owned())),
        };
        let ca_bundle = base64::engine::general_purpose::STANDARD
            .decode(client_config.ca_bundle.unwrap_or_default())
            .map_err(|e| invalid(format!("clientConfig.caBundle: {e}")))?;
        let timeout_seconds = timeout_seconds.unwrap_or(TIMEOUT_SECONDS_DEFAULT);
        if !(1..=30).contains(&timeout_seconds) {
            return Err(invalid(format!("timeoutSeconds: {timeout_seconds} is not between 1 and 30")));
        }
        let reinvoke = match reinvocation_policy.as_deref() {
            None | Some("Never") => false,
            Some("IfNeeded") => true,
            Some(other) => return Err(invalid(format!("reinvocationPolicy {other:?} is neither Never nor IfNeeded"))),
        };
        let namespace_selector = spec
            .namespace_selector
            .map(Selector::try_from)
            .transpose()
            .map_err(|e| invalid(format!("namespaceSelector: {e}")))?;
        Ok(Hook {
            fail_closed: fail_closed(&name, spec.matching.failure_policy.as_deref())?,
            matcher: Matcher::compile(&name, spec.matching)?,
            name,
            configuration: configuration.to_owned(),
            client,
            ca_bundle,
            timeout: Duration::from_secs(timeout_seconds.into()),
            reinvoke: mutating && reinvoke,
            side_effects: spec.side_effects,
            namespace_selector,
        })
    }

    /// The URL the API server names in its errors for a call of this webhook.
    fn url(&self) -> String {
        match &self.client {
            ClientConfig::Service(service) => service_url(service, self.timeout),
            ClientConfig::Url(url) => format!("{url}?timeout={}s", self.timeout.as_secs()),
        }
    }
}

/// The webhooks of the stored configurations, in the order the API server calls them.
#[derive(Debug, Default)]
pub struct Hooks {
    pub mutating: Vec<Hook>,
    pub validating: Vec<Hook>,
}

impl Hooks {
    /// The webhooks of the MutatingWebhookConfigurations and ValidatingWebhookConfigurations among `documents`,
    /// configurations in name order; a webhook that cannot be compiled is left out and its error returned.
    pub fn of(documents: &[Value]) -> (Hooks, Vec<String>) {
        let mut hooks = Hooks::default();
        let mut problems = Vec::new();
        for (kind, mutating) in [("MutatingWebhookConfiguration", true), ("ValidatingWebhookConfiguration", false)] {
            let mut configurations: Vec<(&str, &Value)> = documents
                .iter()
                .filter(|d| d["kind"] == kind)
                .map(|d| (d.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(), d))
                .collect();
            configurations.sort_by_key(|(name, _)| *name);
            for (configuration, document) in configurations {
                for entry in document["webhooks"].as_array().into_iter().flatten() {
                    match Hook::compile(configuration, entry, mutating) {
                        Ok(hook) if mutating => hooks.mutating.push(hook),
                        Ok(hook) => hooks.validating.push(hook),
                        Err(error) => problems.push(format!("{kind} {configuration:?}: {error}")),
                    }
                }
            }
        }
        (hooks, problems)
    }
}

/// An object as a JSON value, for matching a webhook against the object as earlier webhooks left it.
struct JsonObject<'a>(&'a Value);

impl Served for JsonObject<'_> {
    fn json(&self) -> Value {
        self.0.clone()
    }

    fn labels(&self) -> std::borrow::Cow<'_, BTreeMap<String, String>> {
        let labels = self.0.pointer("/metadata/labels").and_then(|l| serde_json::from_value(l.clone()).ok());
        std::borrow::Cow::Owned(labels.unwrap_or_default())
    }
}

/// What an answer says.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Allowed, with the patch to apply (mutating webhooks only; empty: nothing to change).
    Allowed(json_patch::Patch),
    Denied(AdmissionError),
}

/// Why a webhook's answer is of no use: the text after `failed calling webhook "N": `.
type Unusable = String;

/// The remote admission chain: the transport, the stored webhooks, and what a namespace selector reads.
pub struct Remote {
    transport: Box<dyn WebhookTransport>,
    pub hooks: Hooks,
    /// Namespace → its labels as served.
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Reviews sent so far: each review's uid is made from this count (deterministic, unique within the run).
    reviews_sent: u64,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("hooks", &self.hooks).field("reviews_sent", &self.reviews_sent).finish()
    }
}

impl Remote {
    /// Remote admission over `transport`, with no webhook registered yet (a fresh cluster's).
    pub fn new(transport: Box<dyn WebhookTransport>) -> Remote {
        Remote { transport, hooks: Hooks::default(), namespaces: BTreeMap::new(), reviews_sent: 0 }
    }

    /// The namespaces' labels, as a `namespaceSelector` reads them.
    pub fn set_namespaces(&mut self, namespaces: BTreeMap<String, BTreeMap<String, String>>) {
        self.namespaces = namespaces;
    }

    /// Whether some validating webhook's rules select `request` (no objects needed to tell).
    pub fn validating_rules_select(&self, request: &Request<'_>) -> bool {
        self.hooks.validating.iter().any(|hook| hook.matcher.rules_select(request))
    }

    /// The mutating webhooks on `request`, whose object is `object` (rendered): the object as they leave it when
    /// any of them changed it, `None` when none did.
    pub fn mutate(
        &mut self,
        request: &Request<'_>,
        object: Value,
        functions: &Context<'_>,
    ) -> Result<Option<Value>, AdmissionError> {
        let mut current = object.clone();
        // Indexes of the IfNeeded webhooks called so far, and of those to call again after the first round.
        let (mut invoked, mut again) = (Vec::new(), Vec::new());
        for index in 0..self.hooks.mutating.len() {
            let changed = self.mutate_once(index, request, &mut current, functions)?;
            let Some(changed) = changed else { continue };
            if changed {
                again.append(&mut invoked);
            }
            if self.hooks.mutating[index].reinvoke {
                invoked.push(index);
            }
        }
        again.sort_unstable();
        for index in again {
            self.mutate_once(index, request, &mut current, functions)?;
        }
        Ok((current != object).then_some(current))
    }

    /// Calls mutating webhook `index` on `current` if it selects the request: `None` when not called (or failed
    /// open), else whether its patch changed the object.
    fn mutate_once(
        &mut self,
        index: usize,
        request: &Request<'_>,
        current: &mut Value,
        functions: &Context<'_>,
    ) -> Result<Option<bool>, AdmissionError> {
        let shown = JsonObject(current);
        let now = Request { object: Some(&shown), ..*request };
        if !self.selects(&self.hooks.mutating[index], &now, functions)? {
            return Ok(None);
        }
        let uid = self.next_uid();
        let body = review(&uid, &now, Some(current), request.old_object.map(|o| o.json()).as_ref());
        let hook = &self.hooks.mutating[index];
        let Some(verdict) = call(self.transport.as_mut(), hook, true, body)? else { return Ok(None) };
        let patch = match verdict {
            Verdict::Allowed(patch) => patch,
            Verdict::Denied(denied) => return Err(denied),
        };
        if patch.0.is_empty() {
            return Ok(Some(false));
        }
        let mut patched = current.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| AdmissionError::Internal(e.to_string()))?;
        let changed = patched != *current;
        *current = patched;
        Ok(Some(changed))
    }

    /// The validating webhooks on `request` (with its objects).
    pub fn validate(&mut self, request: &Request<'_>, functions: &Context<'_>) -> Result<(), AdmissionError> {
        let (object, old) = (request.object.map(|o| o.json()), request.old_object.map(|o| o.json()));
        for index in 0..self.hooks.validating.len() {
            if !self.selects(&self.hooks.validating[index], request, functions)? {
                continue;
            }
            let uid = self.next_uid();
            let body = review(&uid, request, object.as_ref(), old.as_ref());
            let hook = &self.hooks.validating[index];
            if let Some(Verdict::Denied(denied)) = call(self.transport.as_mut(), hook, false, body)? {
                return Err(denied);
            }
        }
        Ok(())
    }

    fn next_uid(&mut self) -> String {
        self.reviews_sent += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.reviews_sent)
    }

    /// Whether `hook` is called for `request`: its namespace selector, then its rules, object selector and
    /// conditions (a condition that fails to evaluate refuses the request under `Fail`, skips the webhook under
    /// `Ignore`).
    fn selects(&self, hook: &Hook, request: &Request<'_>, functions: &Context<'_>) -> Result<bool, AdmissionError> {
        if !hook.matcher.rules_select(request) || !self.namespace_selects(hook, request) {
            return Ok(false);
        }
        match hook.matcher.calls(request, functions) {
            Ok(calls) => Ok(calls),
            Err(message) if hook.fail_closed => Err(AdmissionError::Condition { name: hook.name.clone(), message }),
            Err(_) => Ok(false),
        }
    }

    fn namespace_selects(&self, hook: &Hook, request: &Request<'_>) -> bool {
        let Some(selector) = &hook.namespace_selector else { return true };
        if request.namespace.is_empty() {
            if request.resource.resource != "namespaces" {
                return true;
            }
            let objects = [request.object, request.old_object];
            return objects.into_iter().flatten().any(|object| selector.matches(&object.labels()));
        }
        match self.namespaces.get(request.namespace) {
            Some(labels) => selector.matches(labels),
            None => {
                let name = super::super::objects::namespace::LABEL_NAME;
                selector.matches(&BTreeMap::from([(name.to_owned(), request.namespace.to_owned())]))
            }
        }
    }
}

/// Makes the call and reads the answer: `None` when the call failed and the webhook fails open.
fn call(
    transport: &mut dyn WebhookTransport,
    hook: &Hook,
    mutating: bool,
    body: Value,
) -> Result<Option<Verdict>, AdmissionError> {
    let uid = body.pointer("/request/uid").and_then(Value::as_str).unwrap_or_default().to_owned();
    let answer = match &hook.client {
        ClientConfig::Service(service) => {
            let call = WebhookCall {
                service: service.clone(),
                ca_bundle: hook.ca_bundle.clone(),
                timeout: hook.timeout,
                body,
            };
            transport.call(&call)
        }
        ClientConfig::Url(_) => {
            Err(CallFailure::new("the twin calls webhooks through a Service only: clientConfig.url is not served"))
        }
    };
    let read = match answer {
        Ok(answer) => read_answer(hook, &uid, mutating, &answer),
        Err(failure) => Err(format!("failed to call webhook: Post \"{}\": {}", hook.url(), failure.message)),
    };
    match read {
        Ok(verdict) => Ok(Some(verdict)),
        Err(reason) if hook.fail_closed => Err(AdmissionError::Failed { name: hook.name.clone(), reason }),
        Err(_) => Ok(None),
    }
}

/// The AdmissionReview the API server sends for `request`, `object` and `old` being the objects as they are now.
pub fn review(uid: &str, request: &Request<'_>, object: Option<&Value>, old: Option<&Value>) -> Value {
    let mut body = request.json();
    let fields = body.as_object_mut().expect("a request is an object");
    // Go's `omitempty`: no subresource, no namespace for a cluster-scoped object.
    for field in ["subResource", "requestSubResource", "namespace", "name"] {
        if fields.get(field).is_some_and(|v| v == "") {
            fields.remove(field);
        }
    }
    fields.insert("uid".into(), uid.into());
    fields.insert("object".into(), object.cloned().unwrap_or(Value::Null));
    fields.insert("oldObject".into(), old.cloned().unwrap_or(Value::Null));
    let options = match request.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    fields.insert("options".into(), json!({"apiVersion": "meta.k8s.io/v1", "kind": options}));
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body})
}

/// Reads an answer as the API server verifies it (`webhook/request.VerifyAdmissionResponse`), then its decision.
fn read_answer(hook: &Hook, uid: &str, mutating: bool, answer: &Value) -> Result<Verdict, Unusable> {
    let invalid = |reason: String| format!("received invalid webhook response: {reason}");
    let text = |field: &str| answer.get(field).and_then(Value::as_str).unwrap_or_default();
    let Some(response) = answer.get("response").filter(|r| !r.is_null()) else {
        return Err(invalid("webhook response was absent".to_owned()));
    };
    let answered_uid = response.get("uid").and_then(Value::as_str).unwrap_or_default();
    if answered_uid != uid {
        return Err(invalid(format!("expected response.uid={uid:?}, got {answered_uid:?}")));
    }
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if (api_version, kind) != ("admission.k8s.io/v1", "AdmissionReview") {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}"
        )));
    }
    let patch = response.get("patch").and_then(Value::as_str).unwrap_or_default();
    let patch_type = response.get("patchType").and_then(Value::as_str).unwrap_or_default();
    if !patch.is_empty() && patch_type.is_empty() {
        return Err(invalid("webhook returned response.patch but not response.patchType".to_owned()));
    }
    if !mutating && !patch.is_empty() {
        return Err(invalid("validating webhook may not return response.patch".to_owned()));
    }
    if !mutating && !patch_type.is_empty() {
        return Err(invalid("validating webhook may not return response.patchType".to_owned()));
    }
    if !patch_type.is_empty() && patch_type != "JSONPatch" {
        return Err(invalid(format!("invalid webhook response.patchType {patch_type:?}")));
    }
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Ok(Verdict::Denied(denial(hook, response)));
    }
    if patch.is_empty() {
        return Ok(Verdict::Allowed(json_patch::Patch(Vec::new())));
    }
    let undecodable = |reason: String| format!("received undecodable patch in webhook response: {reason}");
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).map_err(|e| undecodable(e.to_string()))?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| undecodable(e.to_string()))?;
    Ok(Verdict::Allowed(patch))
}

/// A refusal from its answer's status (`webhook/errors.ToStatusErr`: code 403 when unset; the message, else the
/// reason). The reason kept is the one the webhook's audit annotation `reason` gives when it gives one (the
/// engine's refusal word: `BudgetExceeded`), so a refusal counts under the same reason as in the in-process chain;
/// else the status's, else `Forbidden`.
fn denial(hook: &Hook, response: &Value) -> AdmissionError {
    let status = response.get("status").unwrap_or(&Value::Null);
    let text = |field: &str| status.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let code = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).filter(|c| *c != 0);
    let audited = response.pointer("/auditAnnotations/reason").and_then(Value::as_str).map(str::to_owned);
    let reason = audited.or_else(|| Some(text("reason")).filter(|r| !r.is_empty()));
    let message = match (text("message"), text("reason")) {
        (message, _) if !message.is_empty() => message,
        (_, reason) => reason,
    };
    AdmissionError::Denied {
        name: hook.name.clone(),
        reason: reason.unwrap_or_else(|| "Forbidden".to_owned()).into(),
        code: code.unwrap_or(403),
        message,
    }
}
