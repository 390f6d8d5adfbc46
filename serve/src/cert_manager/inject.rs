//! cert-manager's cainjector, for webhook configurations: one annotated `cert-manager.io/inject-ca-from: NS/NAME`
//! gets the `ca.crt` of that Certificate's Secret as every webhook's `clientConfig.caBundle`. No I/O: the caller
//! reads the objects and sends the patch.

use serde_json::{Value, json};

/// The annotation naming the Certificate whose CA is injected.
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// The Certificate (namespace, name) a configuration asks the CA of, if it is annotated; a value that is not
/// `NAMESPACE/NAME` is an error naming it (cainjector logs it and injects nothing).
pub fn source(configuration: &Value) -> Option<Result<(String, String), String>> {
    let value = configuration.pointer("/metadata/annotations")?.get(INJECT_CA_FROM)?.as_str()?;
    Some(match value.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{INJECT_CA_FROM}: invalid value {value:?}: expected NAMESPACE/NAME")),
    })
}

/// The JSON patch that sets `ca_bundle` (base64 of the CA's PEM, as a Secret's data holds it) as every webhook's
/// `clientConfig.caBundle`, or `None` when every one has it already. The patch first tests the resourceVersion it
/// was made from, so webhooks added or removed meanwhile fail it (409) rather than get the wrong index patched.
pub fn patch(configuration: &Value, ca_bundle: &str) -> Option<Value> {
    let webhooks = configuration.get("webhooks").and_then(Value::as_array)?;
    let mut operations = Vec::new();
    for (index, webhook) in webhooks.iter().enumerate() {
        if webhook.pointer("/clientConfig/caBundle").and_then(Value::as_str) == Some(ca_bundle) {
            continue;
        }
        if webhook.get("clientConfig").is_none() {
            operations.push(json!({"op": "add", "path": format!("/webhooks/{index}/clientConfig"), "value": {}}));
        }
        let path = format!("/webhooks/{index}/clientConfig/caBundle");
        operations.push(json!({"op": "add", "path": path, "value": ca_bundle}));
    }
    if operations.is_empty() {
        return None;
    }
    let revision = configuration.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
    operations.insert(0, json!({"op": "test", "path": "/metadata/resourceVersion", "value": revision}));
    Some(Value::Array(operations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_names_a_certificate_by_namespace_and_name() {
        let annotated = |value: &str| json!({"metadata": {"annotations": {INJECT_CA_FROM: value}}});
        assert_eq!(source(&annotated("ns/cert")), Some(Ok(("ns".to_owned(), "cert".to_owned()))));
        assert_eq!(
            source(&annotated("cert")),
            Some(Err("cert-manager.io/inject-ca-from: invalid value \"cert\": expected NAMESPACE/NAME".to_owned()))
        );
        assert_eq!(source(&json!({"metadata": {}})), None);
    }

    #[test]
    fn every_webhook_without_the_bundle_gets_it_once() {
        let configuration = json!({"metadata": {"resourceVersion": "7"}, "webhooks": [
            {"name": "a", "clientConfig": {"service": {"name": "s"}}},
            {"name": "b", "clientConfig": {"caBundle": "Q0E="}},
            {"name": "c"},
        ]});
        let patch = patch(&configuration, "Q0E=").unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="},
                {"op": "add", "path": "/webhooks/2/clientConfig", "value": {}},
                {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "Q0E="},
            ])
        );
        let mut patched = configuration.clone();
        for (index, bundle) in [(0, "Q0E="), (2, "Q0E=")] {
            patched["webhooks"][index]["clientConfig"]["caBundle"] = bundle.into();
        }
        assert_eq!(super::patch(&patched, "Q0E="), None, "nothing left to inject");
    }
}
