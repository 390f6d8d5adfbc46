//! The Kubernetes scheduler's node predicates (taints and tolerations, nodeSelector, required node affinity) as
//! kube-scheduler evaluates them, and the pin a gated pod is given, so the engine's placement and the twin's
//! scheduler decide alike.
//!
//! Guarantees: the predicates follow kube-scheduler's TaintToleration and NodeAffinity filters for every pod the API
//! server accepts; [`pin_terms`] returns terms the API server accepts on a gated pod (KEP-3838), which give the
//! pinned node the old terms' verdict and match no other node; [`is_pinned_to`] answering `Some(node)` means no other
//! node can match.
//!
//! Caveats: label keys and values are not validated (the API server already did); a requirement the scheduler could
//! not parse (`In` with no values, `Exists` with values, `Gt` with a non-integer) makes its term match nothing,
//! as kube-scheduler drops such a term.
//!
//! ```
//! use gpuclaim_engine::scheduling::{is_pinned_to, matches_required_terms, pin_terms};
//! use std::collections::BTreeMap;
//!
//! let pinned = pin_terms(None, "gpu-node-1");
//! assert!(matches_required_terms(&pinned, "gpu-node-1", &BTreeMap::new()));
//! assert!(!matches_required_terms(&pinned, "gpu-node-2", &BTreeMap::new()));
//! assert_eq!(is_pinned_to(&pinned), Some("gpu-node-1"));
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
const EFFECT_NO_EXECUTE: &str = "NoExecute";
const TOLERATION_EQUAL: &str = "Equal";
const TOLERATION_EXISTS: &str = "Exists";
const OP_IN: &str = "In";
const OP_NOT_IN: &str = "NotIn";
const OP_EXISTS: &str = "Exists";
const OP_DOES_NOT_EXIST: &str = "DoesNotExist";
const OP_GT: &str = "Gt";
const OP_LT: &str = "Lt";
/// The only field a node selector term may match on; the API server refuses any other key.
const FIELD_NODE_NAME: &str = "metadata.name";

/// Whether `toleration` tolerates `taint`, as Kubernetes' `Toleration.ToleratesTaint` decides.
///
/// An empty effect matches every effect and an empty key every key (the API server only admits an empty key with
/// `Exists`). `Exists` ignores the value; `Equal` (or no operator) needs equal values, absent meaning empty.
/// `tolerationSeconds` only bounds eviction after a NoExecute taint appears, so scheduling ignores it.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    let key = toleration.key.as_deref().unwrap_or_default();
    if (!effect.is_empty() && effect != taint.effect) || (!key.is_empty() && key != taint.key) {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | TOLERATION_EQUAL => {
            toleration.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
        }
        TOLERATION_EXISTS => true,
        _ => false,
    }
}

/// The first taint that keeps the pod off the node, as the TaintToleration filter reports it: effect NoSchedule or
/// NoExecute and no toleration tolerating it. PreferNoSchedule only lowers a node's score, so it never blocks.
pub fn untolerated_taint<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|taint| blocks_scheduling(taint))
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

fn blocks_scheduling(taint: &Taint) -> bool {
    taint.effect == EFFECT_NO_SCHEDULE || taint.effect == EFFECT_NO_EXECUTE
}

/// Whether a node with `labels` satisfies a pod's `spec.nodeSelector`: every pair present with an equal value (an
/// empty selector matches every node).
pub fn matches_node_selector(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(key, value)| labels.get(key) == Some(value))
}

/// Whether a node satisfies required node affinity with these `nodeSelectorTerms`, as the NodeAffinity filter does.
///
/// Terms are ORed; within a term every matchExpression (on labels) and matchField (on the node's name) must hold.
/// A term with neither, and an empty list, match nothing. Call this only when the pod has required node affinity:
/// a pod without it fits every node.
pub fn matches_required_terms(terms: &[NodeSelectorTerm], node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    terms.iter().any(|term| term_matches(term, node_name, labels))
}

fn term_matches(term: &NodeSelectorTerm, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    !(expressions.is_empty() && fields.is_empty())
        && expressions.iter().all(|requirement| expression_matches(requirement, labels))
        && fields.iter().all(|requirement| field_matches(requirement, node_name))
}

/// One label requirement, as `labels.Requirement.Matches` after `labels.NewRequirement` accepted it: `In`/`NotIn`
/// need values, `Exists`/`DoesNotExist` none, `Gt`/`Lt` exactly one integer; anything else matches nothing.
fn expression_matches(requirement: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = requirement.values.as_deref().unwrap_or_default();
    let label = labels.get(requirement.key.as_str()).map(String::as_str);
    match requirement.operator.as_str() {
        OP_IN => !values.is_empty() && label.is_some_and(|label| values.iter().any(|v| v == label)),
        OP_NOT_IN => !values.is_empty() && label.is_none_or(|label| !values.iter().any(|v| v == label)),
        OP_EXISTS => values.is_empty() && label.is_some(),
        OP_DOES_NOT_EXIST => values.is_empty() && label.is_none(),
        OP_GT => integers(label, values).is_some_and(|(label, value)| label > value),
        OP_LT => integers(label, values).is_some_and(|(label, value)| label < value),
        _ => false,
    }
}

/// The label and the single requirement value as base-10 `i64`s (Go's `strconv.ParseInt(s, 10, 64)`), if both parse.
fn integers(label: Option<&str>, values: &[String]) -> Option<(i64, i64)> {
    let [value] = values else { return None };
    Some((label?.parse().ok()?, value.parse().ok()?))
}

/// One field requirement: only `metadata.name` with `In`/`NotIn` and exactly one value, as kube-scheduler parses
/// field requirements; the API server refuses every other form, so they match nothing here.
fn field_matches(requirement: &NodeSelectorRequirement, node_name: &str) -> bool {
    let Some([value]) = requirement.values.as_deref() else { return false };
    match requirement.operator.as_str() {
        _ if requirement.key != FIELD_NODE_NAME => false,
        OP_IN => value == node_name,
        OP_NOT_IN => value != node_name,
        _ => false,
    }
}

/// The required node-affinity terms after pinning a gated pod to `node_name`, in the only form the API server takes
/// while the pod is gated (KEP-3838: no term added or removed, a term's old requirements an unchanged prefix).
///
/// `metadata.name In [node_name]` is appended to the matchFields of every term, so each term keeps its meaning on
/// that node and matches no other. Adding a second term instead is refused ("no additions/deletions to non-empty
/// NodeSelectorTerms list are allowed"). Two exceptions, both meaning-preserving: an empty term stays empty (it
/// matches nothing, and the API server refuses to let it gain requirements), and a term already carrying the pin is
/// left as is, so pinning twice changes nothing. Without terms (`None` or empty), the result is one term holding
/// just the pin. If every term is empty the pod can never schedule and the result carries no pin:
/// [`is_pinned_to`] then says `None`.
pub fn pin_terms(terms: Option<&[NodeSelectorTerm]>, node_name: &str) -> Vec<NodeSelectorTerm> {
    match terms {
        Some(terms) if !terms.is_empty() => terms.iter().map(|term| pin_term(term, node_name)).collect(),
        _ => vec![NodeSelectorTerm { match_expressions: None, match_fields: Some(vec![node_name_in(node_name)]) }],
    }
}

fn pin_term(term: &NodeSelectorTerm, node_name: &str) -> NodeSelectorTerm {
    let mut pinned = term.clone();
    if !is_empty_term(term) && !pins_of(term).any(|pin| pin == node_name) {
        pinned.match_fields.get_or_insert_with(Vec::new).push(node_name_in(node_name));
    }
    pinned
}

/// The node every term is pinned to: each non-empty term carries `metadata.name In [one value]` and all those values
/// agree. Empty terms match nothing, so they are skipped; with no pinned term at all the answer is `None`.
pub fn is_pinned_to(terms: &[NodeSelectorTerm]) -> Option<&str> {
    let mut node_name = None;
    for term in terms.iter().filter(|term| !is_empty_term(term)) {
        let mut pins = pins_of(term).peekable();
        pins.peek()?;
        for pin in pins {
            if *node_name.get_or_insert(pin) != pin {
                return None;
            }
        }
    }
    node_name
}

fn is_empty_term(term: &NodeSelectorTerm) -> bool {
    term.match_expressions.as_deref().unwrap_or_default().is_empty()
        && term.match_fields.as_deref().unwrap_or_default().is_empty()
}

/// The node names a term's matchFields pin it to (`metadata.name In [one value]`).
fn pins_of(term: &NodeSelectorTerm) -> impl Iterator<Item = &str> {
    term.match_fields.iter().flatten().filter_map(|requirement| match requirement.values.as_deref() {
        Some([value]) if requirement.key == FIELD_NODE_NAME && requirement.operator == OP_IN => Some(value.as_str()),
        _ => None,
    })
}

fn node_name_in(node_name: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: FIELD_NODE_NAME.to_owned(),
        operator: OP_IN.to_owned(),
        values: Some(vec![node_name.to_owned()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn toleration(value: serde_json::Value) -> Toleration {
        serde_json::from_value(value).unwrap()
    }

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.map(Into::into), effect: effect.into(), time_added: None }
    }

    fn terms(value: serde_json::Value) -> Vec<NodeSelectorTerm> {
        serde_json::from_value(value).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// One label requirement alone in a term, evaluated against `node_labels`.
    fn expression(key: &str, operator: &str, values: &[&str], node_labels: &[(&str, &str)]) -> bool {
        let term = terms(json!([{"matchExpressions": [{"key": key, "operator": operator, "values": values}]}]));
        matches_required_terms(&term, "n1", &labels(node_labels))
    }

    /// The API server's check on a gated pod's required terms (validateNodeAffinityMutation and
    /// validateNodeSelectorTermHasOnlyAdditions, kubernetes pkg/apis/core/validation), from `old` to `new`.
    fn api_server_accepts(old: &[NodeSelectorTerm], new: &[NodeSelectorTerm]) -> bool {
        (old.is_empty() || old.len() == new.len()) && old.iter().zip(new).all(|(old, new)| only_additions(old, new))
    }

    fn only_additions(old: &NodeSelectorTerm, new: &NodeSelectorTerm) -> bool {
        let prefix = |old: &Option<Vec<NodeSelectorRequirement>>, new: &Option<Vec<NodeSelectorRequirement>>| {
            let (old, new) = (old.as_deref().unwrap_or_default(), new.as_deref().unwrap_or_default());
            new.starts_with(old)
        };
        (!is_empty_term(old) || is_empty_term(new))
            && prefix(&old.match_expressions, &new.match_expressions)
            && prefix(&old.match_fields, &new.match_fields)
    }

    fn launcher_terms() -> Vec<NodeSelectorTerm> {
        terms(json!([{"matchExpressions": [
            {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}
        ]}]))
    }

    #[test]
    fn toleration_without_effect_matches_every_effect() {
        let t = toleration(json!({"key": "gpu", "operator": "Exists"}));
        for effect in ["NoSchedule", "PreferNoSchedule", "NoExecute"] {
            assert!(tolerates(&t, &taint("gpu", None, effect)), "{effect}");
        }
    }

    #[test]
    fn toleration_with_effect_matches_only_that_effect() {
        let t = toleration(json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}));
        assert!(tolerates(&t, &taint("gpu", None, "NoSchedule")));
        assert!(!tolerates(&t, &taint("gpu", None, "NoExecute")));
        assert!(!tolerates(&t, &taint("gpu", None, "PreferNoSchedule")));
    }

    #[test]
    fn empty_key_with_exists_tolerates_every_taint() {
        let t = toleration(json!({"operator": "Exists"}));
        assert!(tolerates(&t, &taint("node.kubernetes.io/unreachable", None, "NoExecute")));
        assert!(tolerates(&t, &taint("nvidia.com/gpu", Some("present"), "NoSchedule")));
    }

    #[test]
    fn toleration_for_another_key_does_not_tolerate() {
        let t = toleration(json!({"key": "a", "operator": "Exists"}));
        assert!(!tolerates(&t, &taint("b", None, "NoSchedule")));
    }

    #[test]
    fn exists_ignores_the_value() {
        let t = toleration(json!({"key": "gpu", "operator": "Exists", "value": "ignored"}));
        assert!(tolerates(&t, &taint("gpu", Some("anything"), "NoSchedule")));
        assert!(tolerates(&t, &taint("gpu", None, "NoSchedule")));
    }

    #[test]
    fn equal_and_missing_operator_need_equal_values() {
        for operator in [json!("Equal"), serde_json::Value::Null] {
            let t = toleration(json!({"key": "gpu", "operator": operator, "value": "h100"}));
            assert!(tolerates(&t, &taint("gpu", Some("h100"), "NoSchedule")));
            assert!(!tolerates(&t, &taint("gpu", Some("a100"), "NoSchedule")));
            assert!(!tolerates(&t, &taint("gpu", None, "NoSchedule")));
        }
    }

    #[test]
    fn equal_with_empty_value_matches_an_empty_or_absent_value() {
        let t = toleration(json!({"key": "gpu", "operator": "Equal"}));
        assert!(tolerates(&t, &taint("gpu", None, "NoSchedule")));
        assert!(tolerates(&t, &taint("gpu", Some(""), "NoSchedule")));
        assert!(!tolerates(&t, &taint("gpu", Some("x"), "NoSchedule")));
    }

    #[test]
    fn toleration_seconds_do_not_matter_for_scheduling() {
        let t = toleration(json!({"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}));
        assert!(tolerates(&t, &taint("k", None, "NoExecute")));
    }

    #[test]
    fn unknown_toleration_operator_tolerates_nothing() {
        let t = toleration(json!({"key": "k", "operator": "Gt", "value": "1"}));
        assert!(!tolerates(&t, &taint("k", Some("1"), "NoSchedule")));
    }

    #[test]
    fn prefer_no_schedule_never_blocks() {
        let taints = [taint("soft", None, "PreferNoSchedule")];
        assert_eq!(untolerated_taint(&[], &taints), None);
    }

    #[test]
    fn no_schedule_and_no_execute_block_until_tolerated() {
        for effect in ["NoSchedule", "NoExecute"] {
            let taints = [taint("gpu", Some("h100"), effect)];
            assert_eq!(untolerated_taint(&[], &taints), Some(&taints[0]));
            let tolerations = [toleration(json!({"key": "gpu", "operator": "Exists", "effect": effect}))];
            assert_eq!(untolerated_taint(&tolerations, &taints), None);
        }
    }

    #[test]
    fn untolerated_taint_is_the_first_blocking_one_not_tolerated() {
        let taints = [
            taint("soft", None, "PreferNoSchedule"),
            taint("tolerated", None, "NoSchedule"),
            taint("first", None, "NoExecute"),
            taint("second", None, "NoSchedule"),
        ];
        let tolerations = [toleration(json!({"key": "tolerated", "operator": "Exists"}))];
        assert_eq!(untolerated_taint(&tolerations, &taints).map(|t| t.key.as_str()), Some("first"));
    }

    #[test]
    fn node_selector_needs_every_pair_with_an_equal_value() {
        let node = labels(&[("kubevirt.io/schedulable", "true"), ("zone", "a")]);
        assert!(matches_node_selector(&BTreeMap::new(), &node));
        assert!(matches_node_selector(&labels(&[("kubevirt.io/schedulable", "true")]), &node));
        assert!(matches_node_selector(&labels(&[("kubevirt.io/schedulable", "true"), ("zone", "a")]), &node));
        assert!(!matches_node_selector(&labels(&[("kubevirt.io/schedulable", "false")]), &node));
        assert!(!matches_node_selector(&labels(&[("gpu", "h100")]), &node));
    }

    #[test]
    fn in_matches_a_listed_value_only() {
        assert!(expression("zone", "In", &["a", "b"], &[("zone", "b")]));
        assert!(!expression("zone", "In", &["a", "b"], &[("zone", "c")]));
        assert!(!expression("zone", "In", &["a"], &[]));
        assert!(!expression("zone", "In", &[], &[("zone", "a")]));
    }

    #[test]
    fn not_in_matches_an_unlisted_or_absent_label() {
        assert!(expression("zone", "NotIn", &["a"], &[("zone", "b")]));
        assert!(expression("zone", "NotIn", &["a"], &[]));
        assert!(!expression("zone", "NotIn", &["a", "b"], &[("zone", "a")]));
        assert!(!expression("zone", "NotIn", &[], &[]), "NotIn without values is refused by the scheduler's parser");
    }

    #[test]
    fn exists_matches_a_present_label_whatever_its_value() {
        assert!(expression("gpu", "Exists", &[], &[("gpu", "")]));
        assert!(!expression("gpu", "Exists", &[], &[("other", "x")]));
        assert!(!expression("gpu", "Exists", &["x"], &[("gpu", "x")]), "Exists with values is unparsable");
    }

    #[test]
    fn does_not_exist_matches_an_absent_label_only() {
        assert!(expression("gpu", "DoesNotExist", &[], &[("other", "x")]));
        assert!(!expression("gpu", "DoesNotExist", &[], &[("gpu", "")]));
        assert!(!expression("gpu", "DoesNotExist", &["x"], &[]), "DoesNotExist with values is unparsable");
    }

    #[test]
    fn gt_and_lt_compare_as_integers() {
        assert!(expression("cores", "Gt", &["8"], &[("cores", "16")]));
        assert!(!expression("cores", "Gt", &["16"], &[("cores", "16")]));
        assert!(expression("cores", "Gt", &["-5"], &[("cores", "-4")]));
        assert!(expression("cores", "Lt", &["16"], &[("cores", "8")]));
        assert!(!expression("cores", "Lt", &["8"], &[("cores", "8")]));
        assert!(expression("cores", "Lt", &["9"], &[("cores", "+08")]), "Go's ParseInt accepts a sign and zeros");
    }

    #[test]
    fn gt_and_lt_never_match_absent_or_non_integer_values() {
        for operator in ["Gt", "Lt"] {
            assert!(!expression("cores", operator, &["8"], &[]));
            assert!(!expression("cores", operator, &["8"], &[("cores", "eight")]));
            assert!(!expression("cores", operator, &["8"], &[("cores", "8.5")]));
            assert!(!expression("cores", operator, &["x"], &[("cores", "8")]));
            assert!(!expression("cores", operator, &["1", "100"], &[("cores", "8")]));
            assert!(!expression("cores", operator, &[], &[("cores", "8")]));
            assert!(!expression("cores", operator, &["8"], &[("cores", "99999999999999999999")]));
        }
    }

    #[test]
    fn unknown_operator_matches_nothing() {
        assert!(!expression("zone", "Equals", &["a"], &[("zone", "a")]));
    }

    #[test]
    fn expressions_and_fields_in_a_term_are_anded() {
        let t = terms(json!([{
            "matchExpressions": [
                {"key": "gpu", "operator": "Exists"},
                {"key": "zone", "operator": "In", "values": ["a"]}
            ],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        }]));
        assert!(matches_required_terms(&t, "n1", &labels(&[("gpu", "x"), ("zone", "a")])));
        assert!(!matches_required_terms(&t, "n1", &labels(&[("gpu", "x"), ("zone", "b")])));
        assert!(!matches_required_terms(&t, "n1", &labels(&[("zone", "a")])));
        assert!(!matches_required_terms(&t, "n2", &labels(&[("gpu", "x"), ("zone", "a")])));
    }

    #[test]
    fn terms_are_ored() {
        let t = terms(json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]}
        ]));
        assert!(matches_required_terms(&t, "n1", &labels(&[("zone", "a")])));
        assert!(matches_required_terms(&t, "n9", &labels(&[])));
        assert!(!matches_required_terms(&t, "n1", &labels(&[("zone", "b")])));
    }

    #[test]
    fn an_empty_term_and_an_empty_list_match_nothing() {
        let node = labels(&[("zone", "a")]);
        assert!(!matches_required_terms(&[], "n1", &node));
        assert!(!matches_required_terms(&terms(json!([{}])), "n1", &node));
        assert!(!matches_required_terms(&terms(json!([{"matchExpressions": [], "matchFields": []}])), "n1", &node));
        let with_empty = terms(json!([{}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]));
        assert!(matches_required_terms(&with_empty, "n1", &node));
    }

    #[test]
    fn match_fields_compare_the_node_name_with_in_and_not_in() {
        let field = |operator: &str, values: &[&str]| {
            terms(json!([{"matchFields": [{"key": "metadata.name", "operator": operator, "values": values}]}]))
        };
        assert!(matches_required_terms(&field("In", &["n1"]), "n1", &BTreeMap::new()));
        assert!(!matches_required_terms(&field("In", &["n1"]), "n2", &BTreeMap::new()));
        assert!(matches_required_terms(&field("NotIn", &["n1"]), "n2", &BTreeMap::new()));
        assert!(!matches_required_terms(&field("NotIn", &["n1"]), "n1", &BTreeMap::new()));
        assert!(!matches_required_terms(&field("In", &["n1", "n2"]), "n1", &BTreeMap::new()), "one value only");
        assert!(!matches_required_terms(&field("Exists", &[]), "n1", &BTreeMap::new()));
    }

    #[test]
    fn match_fields_on_another_field_match_nothing() {
        for operator in ["In", "NotIn"] {
            let t = terms(json!([{"matchFields": [{"key": "metadata.uid", "operator": operator, "values": ["x"]}]}]));
            assert!(!matches_required_terms(&t, "n1", &BTreeMap::new()), "{operator}");
        }
    }

    #[test]
    fn kubevirt_launcher_term_is_kept_as_a_prefix_when_pinned() {
        let old = launcher_terms();
        let pinned = pin_terms(Some(&old), "gpu-node-1");
        let expected = terms(json!([{
            "matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]
        }]));
        assert_eq!(pinned, expected);
        assert!(api_server_accepts(&old, &pinned));
        assert!(matches_required_terms(&pinned, "gpu-node-1", &BTreeMap::new()));
        let obsolete = labels(&[("node-labeller.kubevirt.io/obsolete-host-model", "true")]);
        assert!(!matches_required_terms(&pinned, "gpu-node-1", &obsolete));
        assert_eq!(is_pinned_to(&pinned), Some("gpu-node-1"));
    }

    #[test]
    fn pin_is_appended_after_existing_match_fields_of_every_term() {
        let old = terms(json!([
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        ]));
        let pinned = pin_terms(Some(&old), "n1");
        assert_eq!(pinned.len(), 2, "a gated pod's non-empty term list cannot grow");
        assert!(api_server_accepts(&old, &pinned));
        for term in &pinned {
            assert_eq!(term.match_fields.as_ref().unwrap().last(), Some(&node_name_in("n1")));
        }
        assert_eq!(pinned[0].match_fields.as_ref().unwrap()[0], old[0].match_fields.as_ref().unwrap()[0]);
    }

    #[test]
    fn pinning_without_terms_makes_one_term_with_just_the_pin() {
        let expected = terms(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]));
        assert_eq!(pin_terms(None, "n1"), expected);
        assert_eq!(pin_terms(Some(&[]), "n1"), expected);
        assert!(api_server_accepts(&[], &expected));
    }

    #[test]
    fn pinned_pod_matches_only_its_node() {
        let pinned = pin_terms(Some(&launcher_terms()), "n1");
        assert!(matches_required_terms(&pinned, "n1", &BTreeMap::new()));
        assert!(!matches_required_terms(&pinned, "n2", &BTreeMap::new()));
        assert!(!matches_required_terms(&pin_terms(None, "n1"), "n2", &BTreeMap::new()));
    }

    #[test]
    fn pinning_leaves_an_empty_term_empty_because_the_api_server_refuses_it_requirements() {
        let old = terms(json!([{}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]));
        let pinned = pin_terms(Some(&old), "n1");
        assert_eq!(pinned[0], old[0]);
        assert!(api_server_accepts(&old, &pinned));
        assert_eq!(is_pinned_to(&pinned), Some("n1"));
        let only_empty = terms(json!([{}]));
        assert_eq!(pin_terms(Some(&only_empty), "n1"), only_empty, "no accepted pin exists; the pod never fits");
        assert_eq!(is_pinned_to(&only_empty), None);
    }

    #[test]
    fn pinning_twice_to_the_same_node_changes_nothing() {
        let once = pin_terms(Some(&launcher_terms()), "n1");
        assert_eq!(pin_terms(Some(&once), "n1"), once);
    }

    #[test]
    fn is_pinned_to_needs_every_non_empty_term_pinned_to_one_agreeing_node() {
        let pin = |node: &str| json!({"key": "metadata.name", "operator": "In", "values": [node]});
        let zone = json!({"key": "zone", "operator": "Exists"});
        assert_eq!(is_pinned_to(&[]), None);
        assert_eq!(is_pinned_to(&launcher_terms()), None);
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [pin("a")]}, {"matchFields": [pin("a")]}]))), Some("a"));
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [pin("a")]}, {"matchFields": [pin("b")]}]))), None);
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [pin("a")]}, {"matchExpressions": [zone]}]))), None);
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [pin("a"), pin("b")]}]))), None);
        let two_values = json!({"key": "metadata.name", "operator": "In", "values": ["a", "b"]});
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [two_values]}]))), None);
        let not_in = json!({"key": "metadata.name", "operator": "NotIn", "values": ["a"]});
        assert_eq!(is_pinned_to(&terms(json!([{"matchFields": [not_in]}]))), None);
    }

    #[test]
    fn api_server_model_agrees_with_the_derived_validation_cases() {
        // 12-derived-k8s-gated-pod-update-validation-cases.yaml, gated_kubevirt base pod.
        let old = launcher_terms();
        let obsolete = json!({"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"});
        let hostname = json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-1"]});
        let appended = terms(json!([{"matchExpressions": [obsolete, hostname]}]));
        let second_term = terms(json!([{"matchExpressions": [obsolete]}, {"matchExpressions": [hostname]}]));
        let replaced = terms(json!([{"matchExpressions": [hostname]}]));
        let prepended = terms(json!([{"matchExpressions": [hostname, obsolete]}]));
        assert!(api_server_accepts(&old, &appended));
        assert!(!api_server_accepts(&old, &second_term));
        assert!(!api_server_accepts(&old, &replaced));
        assert!(!api_server_accepts(&old, &prepended));
        assert!(!api_server_accepts(
            &terms(json!([{}])),
            &terms(json!([{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]))
        ));
        assert!(api_server_accepts(&[], &second_term));
    }

    const NODES: [&str; 3] = ["n0", "n1", "n2"];

    fn requirement(
        keys: &'static [&'static str],
        operators: &'static [&'static str],
    ) -> BoxedStrategy<NodeSelectorRequirement> {
        let values =
            prop::collection::vec(prop::sample::select(&["a", "b", "n0", "n1", "n2", "3", "-7", "+12"][..]), 0..3);
        (prop::sample::select(keys), prop::sample::select(operators), prop::option::of(values))
            .prop_map(|(key, operator, values)| NodeSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: values.map(|v| v.into_iter().map(String::from).collect()),
            })
            .boxed()
    }

    fn term() -> impl Strategy<Value = NodeSelectorTerm> {
        let operators = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"];
        let expressions = requirement(&["k0", "k1", "k2"], operators);
        let fields = requirement(&["metadata.name", "metadata.name", "metadata.uid"], &["In", "NotIn", "Exists"]);
        (
            prop::option::of(prop::collection::vec(expressions, 0..3)),
            prop::option::of(prop::collection::vec(fields, 0..3)),
        )
            .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm { match_expressions, match_fields })
    }

    fn node_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
        let key = prop::sample::select(&["k0", "k1", "k2"][..]).prop_map(String::from);
        let value = prop::sample::select(&["a", "b", "3", "-7", "+12", "x1"][..]).prop_map(String::from);
        prop::collection::btree_map(key, value, 0..4)
    }

    proptest! {
        #[test]
        fn pinning_keeps_the_verdict_on_its_node_and_matches_no_other(
            terms in prop::collection::vec(term(), 1..4),
            labels in node_labels(),
            node in prop::sample::select(&NODES[..]),
        ) {
            let pinned = pin_terms(Some(&terms), node);
            prop_assert!(api_server_accepts(&terms, &pinned));
            let before = matches_required_terms(&terms, node, &labels);
            prop_assert_eq!(matches_required_terms(&pinned, node, &labels), before);
            for other in NODES.iter().filter(|other| **other != node) {
                prop_assert!(!matches_required_terms(&pinned, other, &labels));
            }
            prop_assert_eq!(&pin_terms(Some(&pinned), node), &pinned);
        }

        #[test]
        fn a_pinned_answer_means_no_other_node_matches(
            terms in prop::collection::vec(term(), 0..4),
            labels in node_labels(),
        ) {
            if let Some(node) = is_pinned_to(&terms) {
                for other in NODES.iter().filter(|other| **other != node) {
                    prop_assert!(!matches_required_terms(&terms, other, &labels));
                }
            }
        }

        #[test]
        fn pinned_terms_name_their_node_unless_already_pinned_elsewhere_or_all_empty(
            terms in prop::collection::vec(term(), 0..4),
            node in prop::sample::select(&NODES[..]),
        ) {
            let pinned = pin_terms(Some(&terms), node);
            let foreign_pin = terms.iter().any(|term| pins_of(term).any(|pin| pin != node));
            let all_empty = !terms.is_empty() && terms.iter().all(is_empty_term);
            prop_assert_eq!(is_pinned_to(&pinned), (!foreign_pin && !all_empty).then_some(node));
        }
    }
}
