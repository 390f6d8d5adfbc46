//! Scheduling gates and the scheduling directives of gated pods, as the API server validates them
//! (KEP-3521 scheduling gates and KEP-3838 mutable scheduling directives, both GA in Kubernetes 1.30): gates may
//! only be removed; while the old pod is gated, `nodeSelector` may only gain keys and each required node-affinity
//! term may only gain requirements (no term added or removed); tolerations may only be added (or change their
//! `tolerationSeconds`), gated or not; nothing else of the spec changes. Messages are the API server's.

use std::collections::{BTreeMap, BTreeSet};

use gpuclaim_engine::model::Pod;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PodAffinity, PodAntiAffinity, Toleration};

/// A refused create or update: the field path and the API server's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid { field: field.into(), message: message.into() }
}

const TERMS: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";

/// The API server's message for any other spec change of an existing pod.
pub const FORBIDDEN_UPDATE: &str = "pod updates may not change fields other than `spec.containers[*].image`,\
`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing \
tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Pod CREATE: gate names are qualified names without duplicates; a gated pod names no node.
pub fn validate_pod_create(pod: &Pod) -> Result<(), Invalid> {
    let mut seen = BTreeSet::new();
    for (index, gate) in pod.scheduling_gates.iter().enumerate() {
        if let Err(reason) = qualified_name(gate) {
            return Err(invalid(
                format!("spec.schedulingGates[{index}]"),
                format!("Invalid value: {gate:?}: {reason}"),
            ));
        }
        if !seen.insert(gate.as_str()) {
            return Err(invalid(format!("spec.schedulingGates[{index}]"), format!("Duplicate value: {gate:?}")));
        }
    }
    if !pod.scheduling_gates.is_empty() && pod.node_name.is_some() {
        return Err(invalid("spec.nodeName", "cannot be set until all schedulingGates have been cleared"));
    }
    Ok(())
}

/// Pod UPDATE (spec): what may change depends on whether the *old* pod is gated, so one update may remove the last
/// gate and pin the pod at once.
pub fn validate_pod_update(old: &Pod, new: &Pod) -> Result<(), Invalid> {
    only_removed_gates(old, new)?;
    only_added_tolerations(&old.tolerations, &new.tolerations)?;
    let gated = !old.scheduling_gates.is_empty();
    if gated {
        only_added_selector_keys(old, new)?;
        only_added_requirements(old.required_terms(), new.required_terms())?;
    } else if old.node_selector != new.node_selector || old.required_terms != new.required_terms {
        return Err(invalid("spec", FORBIDDEN_UPDATE));
    }
    if fixed_fields(old) != fixed_fields(new) {
        return Err(invalid("spec", FORBIDDEN_UPDATE));
    }
    Ok(())
}

/// The parts of a pod's spec no update changes (of those the compact pod holds).
#[allow(clippy::type_complexity)]
fn fixed_fields(pod: &Pod) -> (u64, u64, &BTreeMap<String, u64>, &Option<PodAffinity>, &Option<PodAntiAffinity>) {
    (pod.cpu_millis, pod.memory_bytes, &pod.devices, &pod.pod_affinity, &pod.pod_anti_affinity)
}

fn only_removed_gates(old: &Pod, new: &Pod) -> Result<(), Invalid> {
    for (index, gate) in new.scheduling_gates.iter().enumerate() {
        if !old.scheduling_gates.contains(gate) {
            return Err(invalid(
                format!("spec.schedulingGates[{index}].name"),
                format!("only deletion is allowed, but found new scheduling gate '{gate}'"),
            ));
        }
    }
    Ok(())
}

fn only_added_selector_keys(old: &Pod, new: &Pod) -> Result<(), Invalid> {
    if old.node_selector.iter().any(|(key, value)| new.node_selector.get(key) != Some(value)) {
        return Err(invalid(
            "spec.nodeSelector",
            "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
        ));
    }
    Ok(())
}

fn only_added_requirements(old: Option<&[NodeSelectorTerm]>, new: Option<&[NodeSelectorTerm]>) -> Result<(), Invalid> {
    // No required terms before: anything may be set.
    let Some(old) = old.filter(|terms| !terms.is_empty()) else { return Ok(()) };
    let new = new.unwrap_or_default();
    if new.len() != old.len() {
        return Err(invalid(TERMS, "no additions/deletions to non-empty NodeSelectorTerms list are allowed"));
    }
    for (index, (old, new)) in old.iter().zip(new).enumerate() {
        let old_expressions = old.match_expressions.as_deref().unwrap_or_default();
        let old_fields = old.match_fields.as_deref().unwrap_or_default();
        let new_expressions = new.match_expressions.as_deref().unwrap_or_default();
        let new_fields = new.match_fields.as_deref().unwrap_or_default();
        let empty_gains = old_expressions.is_empty()
            && old_fields.is_empty()
            && (!new_expressions.is_empty() || !new_fields.is_empty());
        if empty_gains || !new_expressions.starts_with(old_expressions) || !new_fields.starts_with(old_fields) {
            return Err(invalid(format!("{TERMS}[{index}]"), "only additions are allowed (no mutations or deletions)"));
        }
    }
    Ok(())
}

/// Every old toleration must still be there, changed at most in its `tolerationSeconds`.
fn only_added_tolerations(old: &[Toleration], new: &[Toleration]) -> Result<(), Invalid> {
    let same_but_seconds = |a: &Toleration, b: &Toleration| {
        a.key == b.key && a.operator == b.operator && a.value == b.value && a.effect == b.effect
    };
    if old.iter().any(|o| !new.iter().any(|n| same_but_seconds(o, n))) {
        return Err(invalid(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
    Ok(())
}

/// A Kubernetes qualified name: an optional DNS-subdomain prefix and `/`, then 1–63 characters of `[A-Za-z0-9_.-]`
/// starting and ending alphanumeric.
fn qualified_name(value: &str) -> Result<(), &'static str> {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    if let Some(prefix) = prefix {
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err("prefix part must be a lowercase RFC 1123 subdomain");
        }
    }
    let alphanumeric = |b: u8| b.is_ascii_alphanumeric();
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| alphanumeric(b) || matches!(b, b'-' | b'_' | b'.'))
        && name.bytes().next().is_some_and(alphanumeric)
        && name.bytes().last().is_some_and(alphanumeric);
    if !ok {
        return Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                    with an alphanumeric character");
    }
    Ok(())
}
