//! Label selectors as pod anti-affinity terms carry them (`matchLabels` and `matchExpressions`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match `selector` (every matchLabels pair and every expression; an empty selector matches all).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    let expressions = selector.match_expressions.iter().flatten().all(|expression| {
        let value = labels.get(&expression.key);
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    pairs && expressions
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn expressions_and_pairs_all_hold() {
        let labels = BTreeMap::from([("kubevirt.io/created-by".to_owned(), "uid-1".to_owned())]);
        let term = |operator: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubevirt.io/created-by".into(),
                operator: operator.into(),
                values,
            }]),
            match_labels: None,
        };
        assert!(matches(&term("In", Some(vec!["uid-1".into()])), &labels));
        assert!(!matches(&term("In", Some(vec!["uid-2".into()])), &labels));
        assert!(matches(&term("NotIn", Some(vec!["uid-2".into()])), &labels));
        assert!(matches(&term("Exists", None), &labels));
        assert!(!matches(&term("DoesNotExist", None), &labels));
        assert!(matches(&LabelSelector::default(), &labels));
    }
}
