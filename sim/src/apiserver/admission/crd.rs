//! The CRDs' validation rules (`x-kubernetes-validations`, generated from the engine's API types) as the API server
//! applies them to a write of a custom resource, before any validating admission.
//!
//! The twin judges a rule only where the write changes the value it sits on: Kubernetes' validation ratcheting
//! (GA in 1.33) lets an unchanged value keep passing rules that do not read `oldSelf`, and the one rule with
//! `oldSelf` we ship (`self == oldSelf` on a claim's spec) holds on any unchanged value; a test keeps every shipped
//! rule so. Creates are judged only for resources with a rule that does not read `oldSelf` (a transition rule
//! judges updates alone), so the controller's template claims cost no CEL.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_cel::{CompiledSchema, Validator, compile_schema};
use kube_core::CustomResourceExt;

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};

/// A rule a write broke, as the API server reports it (`spec: Forbidden: spec is immutable ...`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}: {message}")]
pub struct RuleBroken {
    pub field: String,
    /// The cause's wording (`Forbidden`, `Invalid value`, `Required value`, `Duplicate value`).
    pub reason: &'static str,
    pub message: String,
}

/// The compiled rules of our CRDs, by resource (plural).
pub struct CrdRules {
    /// Resource → its schema, and whether any of its rules judges a create (reads no `oldSelf`).
    schemas: BTreeMap<String, (CompiledSchema, bool)>,
    validator: Validator,
}

/// Whether a schema holds a rule that does not read `oldSelf`.
fn judges_creates(schema: &serde_json::Value) -> bool {
    match schema {
        serde_json::Value::Object(fields) => {
            let rules = fields.get("x-kubernetes-validations").and_then(|v| v.as_array());
            let own = rules
                .into_iter()
                .flatten()
                .any(|rule| rule.get("rule").and_then(|r| r.as_str()).is_some_and(|rule| !rule.contains("oldSelf")));
            own || fields.values().any(judges_creates)
        }
        serde_json::Value::Array(items) => items.iter().any(judges_creates),
        _ => false,
    }
}

impl std::fmt::Debug for CrdRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdRules").field("resources", &self.schemas.keys().collect::<Vec<_>>()).finish()
    }
}

impl CrdRules {
    /// The rules of the CRDs generated from the engine's types (what `gpuclaim crds` prints and the chart stores).
    pub fn generated() -> CrdRules {
        CrdRules::of(&[GPUClass::crd(), GPUClaim::crd(), GPUUsage::crd()])
    }

    /// The rules of `crds` (their served versions' schemas).
    pub fn of(crds: &[CustomResourceDefinition]) -> CrdRules {
        let schemas = crds
            .iter()
            .filter_map(|crd| {
                let version = crd.spec.versions.iter().find(|v| v.storage)?;
                let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                let json = serde_json::to_value(schema).expect("a schema always serializes");
                Some((crd.spec.names.plural.clone(), (compile_schema(&json), judges_creates(&json))))
            })
            .collect();
        CrdRules { schemas, validator: Validator::new() }
    }

    /// Whether a create of `resource` is judged at all (see the module's doc).
    pub fn judges_creates(&self, resource: &str) -> bool {
        self.schemas.get(resource).is_some_and(|(_, creates)| *creates)
    }

    /// Judges a write of `resource` (`object` as written, `old` as stored on UPDATE).
    pub fn validate(
        &self,
        resource: &str,
        object: &serde_json::Value,
        old: Option<&serde_json::Value>,
    ) -> Result<(), RuleBroken> {
        let Some((schema, creates)) = self.schemas.get(resource) else { return Ok(()) };
        if old.is_none() && !creates {
            return Ok(());
        }
        let Err(errors) = self.validator.validate_compiled(schema, object, old) else { return Ok(()) };
        let first = errors.into_vec().into_iter().next().expect("an error result holds an error");
        let reason = match first.reason.as_deref() {
            Some("FieldValueForbidden") => "Forbidden",
            Some("FieldValueRequired") => "Required value",
            Some("FieldValueDuplicate") => "Duplicate value",
            _ => "Invalid value",
        };
        let field = if first.field_path.is_empty() { "<root>".to_owned() } else { first.field_path };
        Err(RuleBroken { field, reason, message: first.message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(count: u32, class: &str) -> serde_json::Value {
        json!({
            "apiVersion": "gpu.cozystack.io/v1alpha1", "kind": "GPUClaim",
            "metadata": {"name": "train-a", "namespace": "tenant-a"},
            "spec": {"className": class, "count": count},
        })
    }

    #[test]
    fn the_generated_claim_rule_refuses_a_spec_change_with_the_types_message() {
        let rules = CrdRules::generated();
        assert_eq!(rules.validate("gpuclaims", &claim(1, "h100"), Some(&claim(1, "h100"))), Ok(()));
        assert_eq!(rules.validate("gpuclaims", &claim(1, "h100"), None), Ok(()), "no oldSelf on create");
        assert!(!rules.judges_creates("gpuclaims"), "its one rule is a transition rule");
        let broken = rules.validate("gpuclaims", &claim(8, "h100"), Some(&claim(1, "h100"))).unwrap_err();
        assert_eq!(broken.to_string(), format!("spec: Forbidden: {}", gpuclaim_engine::api::SPEC_IMMUTABLE_MESSAGE));
        assert!(rules.validate("gpuclaims", &claim(1, "a100"), Some(&claim(1, "h100"))).is_err());
    }

    #[test]
    fn every_shipped_rule_holds_on_an_unchanged_value() {
        // What lets the twin judge only the values a write changes (the module's doc).
        let rules = CrdRules::generated();
        for (count, class) in [(1, "h100"), (8, "a100-40c"), (64, "l40s")] {
            let object = claim(count, class);
            assert_eq!(rules.validate("gpuclaims", &object, Some(&object)), Ok(()));
        }
    }
}
