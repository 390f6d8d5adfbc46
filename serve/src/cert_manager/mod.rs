//! A stand-in for cert-manager, run as a task of the served twin (issue 40): it answers the Issuers and Certificates
//! applied to the twin as cert-manager answers the chart's chain (`charts/gpuclaim/templates/certificates.yaml`),
//! and injects CAs into webhook configurations as its cainjector does.
//!
//! - A Certificate whose Issuer is `selfSigned` is signed by its own new key; one whose Issuer is `ca` by the key
//!   pair in that Issuer's `spec.ca.secretName` Secret ([`issue`]). Its Secret (`spec.secretName`, type
//!   `kubernetes.io/tls`, `tls.crt`, `tls.key`, `ca.crt`) is written, then its status (Ready, validity). A
//!   Certificate is issued again only when its spec changes or its Secret is gone; it is never renewed (a run is
//!   shorter than a certificate's life).
//! - An Issuer's status says whether it can sign (a `ca` Issuer once its Secret holds a key pair).
//! - A Mutating- or ValidatingWebhookConfiguration annotated `cert-manager.io/inject-ca-from: NS/NAME` gets that
//!   Certificate's Secret's `ca.crt` as every webhook's `caBundle` ([`inject`]).
//!
//! Its writes go through the world as any client's, as user `system:serviceaccount:cert-manager:cert-manager` in
//! group `system:masters` (cert-manager's own RBAC is not applied to the twin). Not served: ClusterIssuers, issuers
//! other than `selfSigned` and `ca`, RSA keys, CertificateRequests, renewal, `inject-ca-from-secret`, CRD
//! conversion webhooks.

pub mod inject;
pub mod issue;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gpuclaim_sim::apiserver::admission::request::User;
use gpuclaim_sim::served::resources::{self, Resource};
use gpuclaim_sim::served::writes::{Verb, WriteRequest};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::shared::Shared;
use issue::{IssueError, Signer};

/// How often the snapshot is looked at for new or changed objects.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The user cert-manager's writes are made as.
pub fn user() -> User {
    User {
        username: "system:serviceaccount:cert-manager:cert-manager".to_owned(),
        groups: vec!["system:masters".to_owned(), "system:authenticated".to_owned()],
    }
}

/// A served resource of version `v1` (every one cert-manager reads or writes is).
fn resource(group: &str, plural: &str) -> &'static Resource {
    resources::find(group, "v1", plural).expect("a served resource")
}

/// The Ready condition as last written, so the same one is not written again.
type Condition = (bool, String, String);
type Key = (String, String);

/// Runs cert-manager until the server stops.
pub async fn run(shared: Arc<Shared>) {
    let mut stopping = shared.stopping.clone();
    let mut manager = CertManager::default();
    loop {
        manager.sync(&shared).await;
        tokio::select! {
            () = tokio::time::sleep(POLL_INTERVAL) => {}
            _ = stopping.wait_for(|stop| *stop) => return,
        }
    }
}

/// What cert-manager remembers between two looks.
#[derive(Default)]
struct CertManager {
    /// Certificate → the spec (JSON text) its Secret was issued for, or failed for, and the status fields of the
    /// issue (none for a failure), written again until the status write succeeds.
    issued: BTreeMap<Key, (String, Option<Value>)>,
    /// Certificate or Issuer → its Ready condition as written, and the generation it was written for.
    conditions: BTreeMap<(&'static str, Key), (Condition, i64)>,
    /// The head revision last looked at: nothing to do while it stays.
    seen: Option<u64>,
    /// Whether the last look left work to retry (a write refused, a Secret not there yet).
    pending: bool,
}

/// A Certificate that cannot be issued yet (its Issuer or the Issuer's Secret is missing): the message says why.
struct Waiting(String);

impl CertManager {
    async fn sync(&mut self, shared: &Shared) {
        let head = *shared.head.borrow();
        if self.seen == Some(head) && !self.pending {
            return;
        }
        self.seen = Some(head);
        self.pending = false;
        for issuer in objects(shared, resource("cert-manager.io", "issuers")) {
            self.issuer(shared, &issuer).await;
        }
        for certificate in objects(shared, resource("cert-manager.io", "certificates")) {
            self.certificate(shared, &certificate).await;
        }
        for plural in ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"] {
            let configurations = resource("admissionregistration.k8s.io", plural);
            for configuration in objects(shared, configurations) {
                self.inject(shared, configurations, &configuration).await;
            }
        }
    }

    /// An Issuer's Ready condition: `selfSigned` always, `ca` once its Secret holds a key pair.
    async fn issuer(&mut self, shared: &Shared, issuer: &Value) {
        let key = key_of(issuer);
        let spec = &issuer["spec"];
        let condition = if spec.get("selfSigned").is_some() {
            (true, "IsReady".to_owned(), String::new())
        } else if let Some(secret) = spec.pointer("/ca/secretName").and_then(Value::as_str) {
            match key_pair(shared, &key.0, secret) {
                Ok(_) => (true, "KeyPairVerified".to_owned(), "Signing CA verified".to_owned()),
                Err(Waiting(message)) => {
                    self.pending = true;
                    (false, "ErrGetKeyPair".to_owned(), format!("Error getting keypair for CA issuer: {message}"))
                }
            }
        } else {
            (false, "NotServed".to_owned(), "the twin's cert-manager serves selfSigned and ca issuers only".to_owned())
        };
        self.condition(shared, resource("cert-manager.io", "issuers"), issuer, condition, json!({})).await;
    }

    async fn certificate(&mut self, shared: &Shared, certificate: &Value) {
        let key = key_of(certificate);
        let spec = &certificate["spec"];
        let fingerprint = spec.to_string();
        let certificates = resource("cert-manager.io", "certificates");
        let Some(secret_name) = spec.get("secretName").and_then(Value::as_str) else {
            let message = IssueError::SecretNameMissing.to_string();
            self.condition(shared, certificates, certificate, (false, "Failed".into(), message), json!({})).await;
            return;
        };
        let secret_there = get(shared, resource("", "secrets"), &key.0, secret_name).is_some();
        let ready = (true, "Ready".to_owned(), "Certificate is up to date and has not expired".to_owned());
        match self.issued.get(&key) {
            // Failed for this spec: it fails again until the spec changes.
            Some((failed_for, None)) if *failed_for == fingerprint => return,
            Some((issued_for, status)) if *issued_for == fingerprint && secret_there => {
                if let Some(status) = status.clone() {
                    self.condition(shared, certificates, certificate, ready, status).await;
                }
                return;
            }
            _ => {}
        }
        let ca = match signer_secret(shared, &key.0, spec) {
            Ok(ca) => ca,
            Err(Waiting(message)) => {
                self.pending = true;
                self.condition(shared, certificates, certificate, (false, "Pending".into(), message), json!({})).await;
                return;
            }
        };
        let signer = match &ca {
            Some((cert_pem, key_pem)) => Signer::Ca { cert_pem, key_pem },
            None => Signer::SelfSigned,
        };
        let issued = match issue::issue(spec, &signer, SystemTime::now()) {
            Ok(issued) => issued,
            Err(error) => {
                self.issued.insert(key.clone(), (fingerprint, None));
                self.condition(
                    shared,
                    certificates,
                    certificate,
                    (false, "Failed".into(), error.to_string()),
                    json!({}),
                )
                .await;
                return;
            }
        };
        let body = secret(certificate, secret_name, &issued);
        let written = match secret_there {
            true => write(shared, Verb::Patch, resource("", "secrets"), &key.0, Some(secret_name), None, &body).await,
            false => write(shared, Verb::Create, resource("", "secrets"), &key.0, None, None, &body).await,
        };
        if let Err(message) = written {
            tracing::warn!(certificate = %format!("{}/{}", key.0, key.1), %message, "cannot write the Secret");
            self.pending = true;
            return;
        }
        let renewal = renewal_time(spec, &issued);
        let extra = json!({
            "notBefore": rfc3339(issued.not_before),
            "notAfter": rfc3339(issued.not_after),
            "renewalTime": rfc3339(renewal),
            "revision": certificate.pointer("/status/revision").and_then(Value::as_i64).unwrap_or(0) + 1,
        });
        self.issued.insert(key.clone(), (fingerprint, Some(extra.clone())));
        // Always written: the validity changed even if the condition did not.
        self.conditions.remove(&("certificates", key.clone()));
        self.condition(shared, certificates, certificate, ready, extra).await;
    }

    /// Writes `condition` as the object's Ready condition (with `extra` status fields) unless it is the one last
    /// written.
    async fn condition(
        &mut self,
        shared: &Shared,
        resource: &'static Resource,
        object: &Value,
        condition: Condition,
        extra: Value,
    ) {
        let remembered = (resource.plural, key_of(object));
        let generation = object.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
        let condition = (condition, generation);
        if self.conditions.get(&remembered) == Some(&condition) {
            return;
        }
        let ((ready, reason, message), _) = &condition;
        let mut status = json!({"conditions": [{
            "type": "Ready",
            "status": if *ready { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": gpuclaim_sim::apiserver::objects::timestamp(shared.virtual_now()),
            "observedGeneration": generation,
        }]});
        if let (Some(status), Value::Object(extra)) = (status.as_object_mut(), extra) {
            status.extend(extra);
        }
        let (namespace, name) = &remembered.1;
        let body = json!({"status": status});
        match write(shared, Verb::Patch, resource, namespace, Some(name), Some("status"), &body).await {
            Ok(()) => {
                self.conditions.insert(remembered, condition);
            }
            Err(message) => {
                tracing::warn!(object = %format!("{namespace}/{name}"), %message, "cannot write the status");
                self.pending = true;
            }
        }
    }

    /// The cainjector: the annotated configuration's webhooks get the Certificate's CA.
    async fn inject(&mut self, shared: &Shared, configurations: &'static Resource, configuration: &Value) {
        let name = configuration.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let (namespace, certificate) = match inject::source(configuration) {
            None => return,
            Some(Ok(source)) => source,
            Some(Err(message)) => {
                tracing::warn!(configuration = name, %message, "cannot inject a CA");
                return;
            }
        };
        let Some(bundle) = ca_bundle(shared, &namespace, &certificate) else {
            self.pending = true;
            return;
        };
        let Some(patch) = inject::patch(configuration, &bundle) else { return };
        let sent = Sent { content_type: "application/json-patch+json", body: &patch };
        if let Err(message) = send(shared, Verb::Patch, configurations, "", Some(name), None, sent).await {
            tracing::warn!(configuration = name, %message, "cannot inject a CA");
            self.pending = true;
        }
    }
}

/// The `ca.crt` (base64, as stored) of the Secret the Certificate `namespace/name` names, once it is there.
fn ca_bundle(shared: &Shared, namespace: &str, certificate: &str) -> Option<String> {
    let certificate = get(shared, resource("cert-manager.io", "certificates"), namespace, certificate)?;
    let secret_name = certificate.pointer("/spec/secretName").and_then(Value::as_str)?;
    let secret = get(shared, resource("", "secrets"), namespace, secret_name)?;
    secret.pointer("/data/ca.crt").and_then(Value::as_str).map(str::to_owned)
}

/// The CA key pair (certificate and key, PEM) a Certificate is signed with: `None` for a `selfSigned` Issuer.
fn signer_secret(shared: &Shared, namespace: &str, spec: &Value) -> Result<Option<(String, String)>, Waiting> {
    let reference = &spec["issuerRef"];
    let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("Issuer");
    let group = reference.get("group").and_then(Value::as_str).unwrap_or("cert-manager.io");
    let name = reference.get("name").and_then(Value::as_str).unwrap_or_default();
    if kind != "Issuer" || group != "cert-manager.io" {
        return Err(Waiting(format!(
            "issuerRef: {kind}.{group} is not served by the twin's cert-manager: Issuer only"
        )));
    }
    let issuers = resource("cert-manager.io", "issuers");
    let Some(issuer) = get(shared, issuers, namespace, name) else {
        return Err(Waiting(format!("Referenced \"Issuer\" not found: issuers.cert-manager.io \"{name}\" not found")));
    };
    if issuer.pointer("/spec/selfSigned").is_some() {
        return Ok(None);
    }
    match issuer.pointer("/spec/ca/secretName").and_then(Value::as_str) {
        Some(secret) => key_pair(shared, namespace, secret).map(Some),
        None => Err(Waiting(format!("issuer {name:?}: the twin's cert-manager serves selfSigned and ca issuers only"))),
    }
}

/// A CA Secret's `tls.crt` and `tls.key` (PEM), or why it cannot be read.
fn key_pair(shared: &Shared, namespace: &str, secret: &str) -> Result<(String, String), Waiting> {
    let Some(stored) = get(shared, resource("", "secrets"), namespace, secret) else {
        return Err(Waiting(format!("secrets \"{secret}\" not found")));
    };
    let field = |name: &str| -> Result<String, Waiting> {
        let encoded = stored.pointer(&format!("/data/{}", name.replace('/', "~1"))).and_then(Value::as_str);
        let decoded =
            encoded.and_then(|text| STANDARD.decode(text).ok()).and_then(|bytes| String::from_utf8(bytes).ok());
        decoded.ok_or_else(|| Waiting(format!("secret \"{secret}\" holds no PEM {name}")))
    };
    Ok((field("tls.crt")?, field("tls.key")?))
}

/// The Secret of an issued Certificate, as cert-manager writes it (its annotations name the Certificate and Issuer).
fn secret(certificate: &Value, name: &str, issued: &issue::Issued) -> Value {
    let spec = &certificate["spec"];
    let joined = |field: &str| -> String {
        let values = spec.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        values.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
    };
    let text = |pointer: &str, default: &str| -> String {
        spec.pointer(pointer).and_then(Value::as_str).unwrap_or(default).to_owned()
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": certificate.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            "labels": {"controller.cert-manager.io/fao": "true"},
            "annotations": {
                "cert-manager.io/alt-names": joined("dnsNames"),
                "cert-manager.io/certificate-name": certificate.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
                "cert-manager.io/common-name": text("/commonName", ""),
                "cert-manager.io/ip-sans": joined("ipAddresses"),
                "cert-manager.io/issuer-group": text("/issuerRef/group", "cert-manager.io"),
                "cert-manager.io/issuer-kind": text("/issuerRef/kind", "Issuer"),
                "cert-manager.io/issuer-name": text("/issuerRef/name", ""),
                "cert-manager.io/uri-sans": joined("uris"),
            },
        },
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": STANDARD.encode(&issued.cert_pem),
            "tls.key": STANDARD.encode(&issued.key_pem),
            "ca.crt": STANDARD.encode(&issued.ca_pem),
        },
    })
}

/// When cert-manager would renew: `renewBefore` before expiry, else at two thirds of the validity.
fn renewal_time(spec: &Value, issued: &issue::Issued) -> OffsetDateTime {
    let validity = issued.not_after - issued.not_before;
    let before = spec
        .get("renewBefore")
        .and_then(Value::as_str)
        .and_then(|text| humantime::parse_duration(text).ok())
        .map(|before| time::Duration::seconds(before.as_secs() as i64))
        .filter(|before| *before < validity)
        .unwrap_or(validity / 3);
    issued.not_after - before
}

/// A time as the API server writes `metav1.Time`.
fn rfc3339(at: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

fn key_of(object: &Value) -> Key {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    (text("/metadata/namespace"), text("/metadata/name"))
}

/// Every stored object of `resource`, read under the snapshot's lock and released.
fn objects(shared: &Shared, resource: &'static Resource) -> Vec<Arc<Value>> {
    let snapshot = shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    snapshot.objects(resource.id(), None, None).map(|(_, stored)| Arc::clone(&stored.object)).collect()
}

/// One stored object.
fn get(shared: &Shared, resource: &'static Resource, namespace: &str, name: &str) -> Option<Arc<Value>> {
    let snapshot = shared.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    snapshot.get(resource.id(), namespace, name).map(|stored| Arc::clone(&stored.object))
}

/// A request body and its media type.
struct Sent<'a> {
    content_type: &'a str,
    body: &'a Value,
}

/// A create (JSON) or a merge patch, as cert-manager.
async fn write(
    shared: &Shared,
    verb: Verb,
    resource: &'static Resource,
    namespace: &str,
    name: Option<&str>,
    subresource: Option<&str>,
    body: &Value,
) -> Result<(), String> {
    let content_type = if verb == Verb::Patch { "application/merge-patch+json" } else { "application/json" };
    send(shared, verb, resource, namespace, name, subresource, Sent { content_type, body }).await
}

/// Sends one write to the world as cert-manager; the refusal's message when it is refused.
async fn send(
    shared: &Shared,
    verb: Verb,
    resource: &'static Resource,
    namespace: &str,
    name: Option<&str>,
    subresource: Option<&str>,
    sent: Sent<'_>,
) -> Result<(), String> {
    let request = WriteRequest {
        verb,
        resource,
        namespace: resource.namespaced.then(|| namespace.to_owned()),
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        content_type: sent.content_type.to_owned(),
        body: sent.body.to_string().into_bytes(),
        user: user(),
        dry_run: false,
        field_validation: None,
    };
    let answer = shared.writes.send(request).ok_or("the world's write queue is full or stopped")?;
    let answer = answer.await.map_err(|_| "the world stopped".to_owned())?;
    if answer.code < 300 {
        return Ok(());
    }
    let message = answer.body.get("message").and_then(Value::as_str).unwrap_or("refused");
    Err(format!("{}: {message}", answer.code))
}
