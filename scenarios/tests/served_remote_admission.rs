//! Remote admission in the served twin (issue 40): the webhook configurations clients store are the ones in force.
//! On a fresh cluster nothing is called; once a ValidatingWebhookConfiguration is applied, a client's write it
//! selects is sent to the transport and refused with the webhook's words; once it is deleted, nothing is called
//! again.

use std::path::Path;
use std::sync::{Arc, Mutex};

use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_sim::apiserver::admission::remote::{CallFailure, WebhookCall, WebhookTransport};
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::served::resources;
use gpuclaim_sim::served::writes::{Verb, WriteRequest};
use gpuclaim_sim::users;
use gpuclaim_sim::world::World;
use serde_json::{Value, json};

/// Refuses every review, keeping the paths it was called on.
struct Refusing(Arc<Mutex<Vec<String>>>);

impl WebhookTransport for Refusing {
    fn call(&mut self, call: &WebhookCall) -> Result<Value, CallFailure> {
        self.0.lock().unwrap().push(call.service.path.clone());
        let uid = &call.body["request"]["uid"];
        let status = json!({"code": 403, "reason": "Forbidden", "message": "no orders today"});
        let response = json!({"uid": uid, "allowed": false, "status": status});
        Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
    }
}

fn world() -> World {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("suite/02-start-backoff-avoidance.yaml");
    let scenario = parse_scenario(&std::fs::read_to_string(path).unwrap()).unwrap();
    scenario.build(1, EventLog::new(None)).unwrap()
}

fn write(
    world: &mut World,
    verb: Verb,
    plural: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let (group, version) = match plural {
        "gpuclaims" => ("gpu.cozystack.io", "v1alpha1"),
        "namespaces" => ("", "v1"),
        _ => ("admissionregistration.k8s.io", "v1"),
    };
    let request = WriteRequest {
        verb,
        resource: resources::find(group, version, plural).unwrap(),
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: None,
        content_type: match verb {
            Verb::Patch => "application/merge-patch+json".to_owned(),
            _ => "application/json".to_owned(),
        },
        body: serde_json::to_vec(&body).unwrap(),
        user: users::platform_admin(),
        dry_run: false,
        field_validation: None,
    };
    let answer = world.served_write(&request);
    (answer.code, (*answer.body).clone())
}

fn claim(world: &World, name: &str) -> (String, Value) {
    let namespace = world.api.store().claims().next().map(|c| c.namespace.to_string()).unwrap_or("tenant-a".into());
    let class = world.api.store().classes().next().unwrap().name.clone();
    let body = json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"className": class, "count": 1},
    });
    (namespace, body)
}

#[test]
fn the_stored_webhook_configuration_is_the_one_called() {
    let mut world = world();
    world.serve(1_000);
    let called = Arc::new(Mutex::new(Vec::new()));
    world.go_remote_admission(Box::new(Refusing(Arc::clone(&called))));

    let (namespace, body) = claim(&world, "first");
    let (code, answer) = write(&mut world, Verb::Create, "gpuclaims", Some(&namespace), None, body);
    assert_eq!(code, 201, "no configuration stored yet: {answer}");
    assert!(called.lock().unwrap().is_empty());

    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "orders"},
        "webhooks": [{
            "name": "orders.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "orders", "namespace": "default", "path": "/orders"}},
            "rules": [{"apiGroups": ["gpu.cozystack.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                       "resources": ["gpuclaims"]}],
        }],
    });
    let (code, answer) = write(&mut world, Verb::Create, "validatingwebhookconfigurations", None, None, configuration);
    assert_eq!(code, 201, "{answer}");
    assert_eq!(world.admission_problems(), &[] as &[String]);

    let (namespace, body) = claim(&world, "second");
    let (code, answer) = write(&mut world, Verb::Create, "gpuclaims", Some(&namespace), None, body);
    assert_eq!(code, 403, "{answer}");
    assert_eq!(answer["message"], "admission webhook \"orders.example.com\" denied the request: no orders today");
    assert_eq!(*called.lock().unwrap(), ["/orders"]);

    let (code, answer) =
        write(&mut world, Verb::Delete, "validatingwebhookconfigurations", None, Some("orders"), Value::Null);
    assert_eq!(code, 200, "{answer}");
    let (namespace, body) = claim(&world, "third");
    let (code, answer) = write(&mut world, Verb::Create, "gpuclaims", Some(&namespace), None, body);
    assert_eq!(code, 201, "the configuration is gone: {answer}");
    assert_eq!(called.lock().unwrap().len(), 1);
}

#[test]
fn a_configuration_that_cannot_apply_is_reported_and_left_out() {
    let mut world = world();
    world.serve(1_000);
    world.go_remote_admission(Box::new(Refusing(Arc::default())));
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "old"},
        "webhooks": [{
            "name": "old.example.com", "admissionReviewVersions": ["v1beta1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "old", "namespace": "default"}},
        }],
    });
    let (code, answer) = write(&mut world, Verb::Create, "mutatingwebhookconfigurations", None, None, configuration);
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        world.admission_problems(),
        ["MutatingWebhookConfiguration \"old\": webhook old.example.com: admissionReviewVersions [\"v1beta1\"] lists \
          no version the twin sends (v1)"]
    );
}

fn claim_in(namespace: &str, class: &str, name: &str) -> Value {
    json!({
        "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"className": class, "count": 1},
    })
}

#[test]
fn a_namespace_selector_reads_the_namespaces_labels_as_clients_wrote_them() {
    let mut world = world();
    world.serve(1_000);
    let called = Arc::new(Mutex::new(Vec::new()));
    world.go_remote_admission(Box::new(Refusing(Arc::clone(&called))));
    let class = world.api.store().classes().next().unwrap().name.clone();
    let labelled =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"team": "a"}}});
    assert_eq!(write(&mut world, Verb::Create, "namespaces", None, None, labelled).0, 201);
    let plain = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}});
    assert_eq!(write(&mut world, Verb::Create, "namespaces", None, None, plain).0, 201);
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "team-a-orders"},
        "webhooks": [{
            "name": "team-a.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "orders", "namespace": "default", "path": "/orders"}},
            "namespaceSelector": {"matchLabels": {"team": "a"}},
            "rules": [{"apiGroups": ["gpu.cozystack.io"], "apiVersions": ["*"], "operations": ["CREATE"],
                       "resources": ["gpuclaims"]}],
        }],
    });
    assert_eq!(write(&mut world, Verb::Create, "validatingwebhookconfigurations", None, None, configuration).0, 201);

    let (code, _) = write(&mut world, Verb::Create, "gpuclaims", Some("team-b"), None, claim_in("team-b", &class, "x"));
    assert_eq!(code, 201, "team-b is not selected");
    let (code, _) = write(&mut world, Verb::Create, "gpuclaims", Some("team-a"), None, claim_in("team-a", &class, "x"));
    assert_eq!(code, 403, "team-a is selected");
    assert_eq!(called.lock().unwrap().len(), 1);

    let unlabel = json!({"metadata": {"labels": {"team": null}}});
    assert_eq!(write(&mut world, Verb::Patch, "namespaces", None, Some("team-a"), unlabel).0, 200);
    let (code, _) = write(&mut world, Verb::Create, "gpuclaims", Some("team-a"), None, claim_in("team-a", &class, "y"));
    assert_eq!(code, 201, "the label is gone: team-a is no longer selected");
    assert_eq!(called.lock().unwrap().len(), 1);
}
