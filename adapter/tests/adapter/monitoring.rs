//! What the chart ships for monitoring, against what the controller exports: the PrometheusRule's alerts (checked and
//! unit-tested by promtool on the rule as the real helm renders it, `charts/gpuclaim/tests/alerts.yaml`) and the
//! Grafana dashboard (valid JSON; every query names a metric the controller exports). Both are off by default.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::metrics_auth::every_metric;
use crate::{helm, promtool};

/// The names of the samples the controller exports (counters with `_total`, histograms' `_bucket`, `_sum`,
/// `_count`), every metric having series.
fn exported() -> BTreeSet<String> {
    let exposition = every_metric().encode();
    let names: BTreeSet<String> = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| line.split(['{', ' ']).next().unwrap().to_owned())
        .collect();
    for family in
        ["gate_wait_seconds_bucket", "units_bound_seconds_total", "gated_pods", "admission_duration_seconds_bucket"]
    {
        assert!(names.contains(&format!("gpuclaim_{family}")), "gpuclaim_{family} not among {names:?}");
    }
    names
}

/// The metric names a PromQL expression reads (ours all start with `gpuclaim_`).
fn metrics_named(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|token| token.starts_with("gpuclaim_"))
        .map(str::to_owned)
        .collect()
}

/// Every `expr` and templating query in a dashboard, with the title of the panel it belongs to.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("every panel has a title").to_owned();
        let targets = panel["targets"].as_array().unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_else(|| panic!("{title}: a target without expr"));
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}: the dashboard's data source variable");
            queries.push((title.clone(), expr.to_owned()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating") {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push((format!("variable {}", variable["name"]), query.to_owned()));
        }
    }
    queries
}

fn dashboard_file() -> Value {
    let text = std::fs::read_to_string(helm::chart().join("dashboards/gpuclaim.json")).unwrap();
    serde_json::from_str(&text).expect("the dashboard is valid JSON")
}

#[test]
fn every_dashboard_query_names_a_metric_the_controller_exports() {
    let dashboard = dashboard_file();
    assert_eq!((dashboard["uid"].as_str(), dashboard["title"].as_str()), (Some("gpuclaim"), Some("GPU claims")));
    let exported = exported();
    let queries = queries(&dashboard);
    for (panel, expr) in &queries {
        let named = metrics_named(expr);
        assert!(!named.is_empty(), "{panel}: {expr} reads none of the controller's metrics");
        for name in named {
            assert!(exported.contains(&name), "{panel}: {expr} reads {name}, which the controller does not export");
        }
    }
    // What operators asked for: waiting by reason, gate wait p50/p90/p99, free vs allocatable, unit-hours per tenant.
    let panel = |title: &str| queries.iter().filter(|(p, _)| p == title).map(|(_, e)| e.as_str()).collect::<Vec<_>>();
    assert!(panel("Pods waiting at the gate, by reason")[0].starts_with("sum by (reason) ("));
    let quantiles = panel("Gate wait (placed pods) p50 / p90 / p99");
    for (expr, q) in quantiles.iter().zip(["0.5", "0.9", "0.99"]) {
        assert!(
            expr.starts_with(&format!("histogram_quantile({q}, sum by (le) (rate(gpuclaim_gate_wait_seconds_bucket"))
        );
    }
    let units = panel("Free vs allocatable units per class");
    assert!(units[0].contains("gpuclaim_class_free_units") && units[1].contains("gpuclaim_class_allocatable_units"));
    let billed = panel("Unit-hours per tenant (dashboard range)");
    assert_eq!(
        billed,
        [
            r#"sum by (namespace, class) (increase(gpuclaim_units_bound_seconds_total{class=~"$class"}[$__range])) / 3600"#
        ]
    );
}

#[test]
fn a_query_naming_a_metric_nobody_exports_is_caught() {
    let exported = exported();
    let named = metrics_named("sum by (reason) (gpuclaim_gated_pods_by_reason) + gpuclaim_gated_pods");
    let missing: Vec<&String> = named.iter().filter(|name| !exported.contains(*name)).collect();
    assert_eq!(missing, ["gpuclaim_gated_pods_by_reason"]);
}

#[test]
fn the_chart_renders_the_rule_and_the_dashboard_only_when_asked() {
    let Some(helm) = helm::helm() else { return };
    let none = helm::render(&helm, &[], &["gpu.enabled=true"]);
    assert!(helm::of_kind(&none, "PrometheusRule").is_empty(), "off by default");
    assert!(none.iter().all(|d| d["metadata"]["labels"]["grafana_dashboard"].is_null()), "off by default");
    let sets = ["gpu.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"];
    helm::helm_run(&helm, &["lint", "--strict", "--set", &sets.join(",")]);
    let both = helm::render(&helm, &[], &sets);
    let dashboards: Vec<&Value> = both.iter().filter(|d| d["metadata"]["labels"]["grafana_dashboard"] == "1").collect();
    assert_eq!(dashboards.len(), 1);
    assert_eq!(
        (dashboards[0]["kind"].as_str(), dashboards[0]["metadata"]["namespace"].as_str()),
        (Some("ConfigMap"), Some("cozy-gpuclaim"))
    );
    let rendered: Value = serde_json::from_str(dashboards[0]["data"]["gpuclaim.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, dashboard_file(), "the ConfigMap carries the dashboard as it is");
    let elsewhere = helm::render(&helm, &[], &[&sets.join(","), "metrics.grafanaDashboard.namespace=monitoring"]);
    let moved = elsewhere.iter().find(|d| d["metadata"]["labels"]["grafana_dashboard"] == "1").unwrap();
    assert_eq!(moved["metadata"]["namespace"], "monitoring", "where a sidecar watching one namespace finds it");
}

/// The PrometheusRule as the real helm renders it, at the chart's defaults.
fn rendered_rule(helm: &Path) -> Value {
    let documents = helm::render(helm, &[], &["gpu.enabled=true", "metrics.prometheusRule.enabled=true"]);
    let rules = helm::of_kind(&documents, "PrometheusRule");
    assert_eq!(rules.len(), 1);
    rules[0].clone()
}

#[test]
fn every_alert_reads_metrics_the_controller_exports() {
    let Some(helm) = helm::helm() else { return };
    let rule = rendered_rule(&helm);
    let exported = exported();
    let alerts = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let names: Vec<&str> = alerts.iter().map(|a| a["alert"].as_str().unwrap()).collect();
    assert_eq!(names, ["GPUClaimPodGatedTooLong", "GPUClaimAdmissionErrors", "GPUClaimNoLeader", "GPUClaimClassFull"]);
    for alert in alerts {
        let expr = alert["expr"].as_str().unwrap();
        for name in metrics_named(expr) {
            assert!(
                exported.contains(&name),
                "{}: {expr} reads {name}, which the controller does not export",
                alert["alert"]
            );
        }
    }
}

#[test]
fn the_rendered_alerts_pass_promtool_check_rules_and_their_unit_tests() {
    let Some(helm) = helm::helm() else { return };
    let Some(promtool) = promtool::promtool() else { return };
    let rule = rendered_rule(&helm);
    let dir = crate::support::temp_dir("alerts");
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        serde_json::to_string_pretty(&serde_json::json!({"groups": rule["spec"]["groups"]})).unwrap(),
    )
    .unwrap();
    std::fs::copy(helm::chart().join("tests/alerts.yaml"), dir.join("alerts.yaml")).unwrap();
    let checked = promtool::check(&promtool, &["check", "rules", rules.to_str().unwrap()], "");
    assert!(checked.contains("SUCCESS: 4 rules found"), "{checked}");
    let tested = promtool::check(&promtool, &["test", "rules", dir.join("alerts.yaml").to_str().unwrap()], "");
    assert!(tested.contains("SUCCESS"), "{tested}");
}
