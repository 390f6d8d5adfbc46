//! The Helm chart against the engine: its CRDs are the generated ones, every key it writes is the engine's, and
//! (with helm at hand) the rendered manifests say what DESIGN.md §3 asks of the deployment.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpuclaim_engine::api::{GPUClaim, GPUClass, GPUUsage};
use gpuclaim_engine::keys;
use gpuclaim_engine::review::Webhook;
use kube::Resource;
use serde_json::Value;

use crate::helm::{self, helm, helm_run, of_kind};

const WEBHOOKS: [Webhook; 3] = [Webhook::Vmi, Webhook::Pod, Webhook::Order];

fn chart() -> PathBuf {
    helm::chart()
}

/// The chart's own files: templates, values and the admission configuration (the CRDs are checked on their own).
fn chart_texts() -> Vec<(PathBuf, String)> {
    chart_files(&chart(), &["values.yaml"], &["templates", "admission/webhooks", "admission/policies"])
}

/// The tenant's VM chart's files: values, schema, templates and the shared table of render cases.
fn vm_chart_texts() -> Vec<(PathBuf, String)> {
    chart_files(&helm::vm_chart(), &["values.yaml", "values.schema.json", "tests/cases.yaml"], &["templates"])
}

fn chart_files(chart: &Path, files: &[&str], dirs: &[&str]) -> Vec<(PathBuf, String)> {
    let mut paths: Vec<PathBuf> = files.iter().map(|file| chart.join(file)).collect();
    for dir in dirs {
        let mut listed: Vec<PathBuf> = std::fs::read_dir(chart.join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
        listed.sort();
        paths.extend(listed);
    }
    paths.into_iter().map(|path| (path.clone(), std::fs::read_to_string(&path).unwrap())).collect()
}

fn plurals() -> [String; 3] {
    [GPUClass::plural(&()).into_owned(), GPUClaim::plural(&()).into_owned(), GPUUsage::plural(&()).into_owned()]
}

/// Every name of ours the chart may write: the engine's keys and what is built from them.
fn our_names() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = [
        keys::GROUP,
        keys::API_VERSION,
        keys::LABEL_TEMPLATE_CLAIM,
        keys::LABEL_CLAIMS,
        keys::ANNOTATION_CLAIMS,
        keys::ANNOTATION_ATTACHMENTS,
        keys::FINALIZER_RELEASE,
        keys::GATE_PLACEMENT,
        keys::LABEL_VGPU_ENTITLED,
        keys::SETTINGS_CONFIGMAP,
        keys::SETTINGS_CONTROLLER_USER,
        keys::SETTINGS_KUBEVIRT_USERS,
        keys::SETTINGS_PLATFORM_ADMIN_GROUPS,
        keys::DEFAULT_CONTROLLER_NAMESPACE,
        keys::CLUSTER_SWITCH,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    names.extend(WEBHOOKS.iter().flat_map(|w| w.registrations()).map(|name| format!("{name}.{}", keys::GROUP)));
    names.extend(plurals().map(|p| format!("{p}.{}", keys::GROUP)));
    names
}

/// Words of a text that look like one of our names: they carry our group or our settings' prefix.
fn our_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "./_-".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| {
            w.contains(keys::GROUP)
                || w.starts_with("gpu-claims")
                || ["controllerUser", "kubevirtUsers", "platformAdminGroups"].iter().any(|key| w.starts_with(key))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_stored_crds_are_the_ones_generated_from_the_types() {
    let path = chart().join("crds/gpuclaim.yaml");
    let stored = std::fs::read_to_string(&path).unwrap();
    assert!(
        stored == gpuclaim_engine::api::crds_yaml(),
        "{} drifted from the Rust types; regenerate it with `gpuclaim crds > charts/gpuclaim/crds/gpuclaim.yaml`",
        path.display()
    );
}

#[test]
fn every_key_the_chart_writes_is_the_engines() {
    let ours = our_names();
    let mut used = BTreeSet::new();
    for (path, text) in chart_texts() {
        for word in our_words(&text) {
            assert!(ours.contains(&word), "{}: {word:?} is not a key of gpuclaim_engine::keys", path.display());
            used.insert(word);
        }
    }
    // The ones the chart must write for the webhooks and the tamper policy to work.
    for needed in [keys::GROUP, keys::LABEL_CLAIMS, keys::LABEL_TEMPLATE_CLAIM, keys::SETTINGS_CONFIGMAP] {
        assert!(used.contains(needed), "the chart never writes {needed:?}");
    }
    for needed in [keys::SETTINGS_CONTROLLER_USER, keys::SETTINGS_KUBEVIRT_USERS, keys::SETTINGS_PLATFORM_ADMIN_GROUPS]
    {
        assert!(used.contains(needed), "the chart never writes {needed:?}");
    }
    let all: String = chart_texts().into_iter().map(|(_, text)| text).collect();
    for webhook in WEBHOOKS {
        assert!(all.contains(&format!("path: {}\n", webhook.path())), "no webhook points at {}", webhook.path());
        for stem in webhook.registrations() {
            let registration = format!("admission/webhooks/{stem}.yaml");
            assert!(all.contains(&registration), "templates/webhooks.yaml never includes {registration}");
        }
    }
    for plural in plurals() {
        assert!(all.contains(&format!("\"{plural}\"")), "the chart never names the resource {plural}");
    }
    assert!(all.contains(&format!("apiVersions: [\"{}\"]", keys::VERSION)));
}

#[test]
fn every_key_the_vm_chart_writes_is_the_engines() {
    let ours = our_names();
    let mut used = BTreeSet::new();
    for (path, text) in vm_chart_texts() {
        for word in our_words(&text) {
            assert!(ours.contains(&word), "{}: {word:?} is not a key of gpuclaim_engine::keys", path.display());
            used.insert(word);
        }
    }
    for needed in [keys::LABEL_CLAIMS, keys::ANNOTATION_CLAIMS, keys::CLUSTER_SWITCH] {
        assert!(used.contains(needed), "the VM chart never writes {needed:?}");
    }
    let all: String = vm_chart_texts().into_iter().map(|(_, text)| text).collect();
    let switch = format!("(index $cluster \"{}\"", keys::CLUSTER_SWITCH);
    assert!(all.contains(&switch), "the VM chart reads the switch other than as {switch:?}");
    assert!(all.contains(&format!("index .Values \"{}\"", keys::CLUSTER_VALUES)));
    assert!(all.contains(&format!("apiVersion: {}\n", keys::kubevirt::API_VERSION)));
}

#[test]
fn the_key_scan_catches_a_key_the_engine_does_not_have() {
    let words = our_words("objectSelector: {matchLabels: {gpu.cozystack.io/claim: \"true\"}} # gpu-claims-setting.");
    let strays: Vec<&String> = words.iter().filter(|w| !our_names().contains(*w)).collect();
    assert_eq!(strays, ["gpu-claims-setting", "gpu.cozystack.io/claim"]);
}

/// The rendered documents, as JSON values.
fn render(helm: &Path, sets: &[&str]) -> Vec<Value> {
    helm::render(helm, &[], sets)
}

#[test]
fn helm_lint_passes_and_the_switch_off_renders_nothing() {
    let Some(helm) = helm() else { return };
    helm_run(&helm, &["lint", "--strict", "--set", "gpu.enabled=true"]);
    helm_run(&helm, &["lint", "--strict"]);
    assert!(render(&helm, &[]).is_empty(), "gpu.enabled=false renders no template");
}

#[test]
fn the_rendered_deployment_runs_two_spread_replicas_behind_a_pdb() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["gpu.enabled=true"]);
    let deployment = of_kind(&documents, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let spread = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!((&spread["nodeAffinityPolicy"], &spread["nodeTaintsPolicy"]), (&"Honor".into(), &"Honor".into()));
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    let namespace_arg = format!("--controller-namespace={}", keys::DEFAULT_CONTROLLER_NAMESPACE);
    assert!(args.iter().any(|a| a == &Value::from(namespace_arg.as_str())), "{args:?}");
    assert!(args.iter().any(|a| a == "--leader-elect=true"), "{args:?}");
    let pdb = of_kind(&documents, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"], deployment["spec"]["selector"]);
}

#[test]
fn the_rendered_webhooks_fail_closed_at_the_engines_paths_for_the_operations_they_decide() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["gpu.enabled=true"]);
    let configurations: Vec<&Value> = of_kind(&documents, "MutatingWebhookConfiguration")
        .into_iter()
        .chain(of_kind(&documents, "ValidatingWebhookConfiguration"))
        .collect();
    assert_eq!(configurations.len(), 3);
    let registrations =
        [("vmi", Webhook::Vmi), ("pod", Webhook::Pod), ("order", Webhook::Order), ("order-update", Webhook::Order)];
    for (stem, webhook) in registrations {
        let name = format!("{stem}.{}", keys::GROUP);
        let entry = configurations
            .iter()
            .flat_map(|c| c["webhooks"].as_array().unwrap())
            .find(|w| w["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no webhook {name}"));
        // Updates are a second line behind the CRD's rule: they fail open, so the controller never waits on them.
        assert_eq!(entry["failurePolicy"], if stem == "order-update" { "Ignore" } else { "Fail" }, "{name}");
        assert_eq!(entry["clientConfig"]["service"]["path"], webhook.path(), "{name}");
        let operations = match stem {
            "order-update" => serde_json::json!(["UPDATE"]),
            _ => serde_json::json!(["CREATE"]),
        };
        assert_eq!(entry["rules"][0]["operations"], operations, "{name}");
        assert_eq!(entry["timeoutSeconds"], 10, "{name}");
        let excluded = &entry["namespaceSelector"]["matchExpressions"][0]["values"];
        for namespace in ["kube-system", keys::DEFAULT_CONTROLLER_NAMESPACE] {
            assert!(excluded.as_array().unwrap().contains(&Value::from(namespace)), "{name}: {excluded}");
        }
        if webhook == Webhook::Pod {
            assert_eq!(entry["objectSelector"]["matchLabels"], serde_json::json!({ keys::LABEL_CLAIMS: keys::TRUE }));
            // A webhook outage must never block a migration: KubeVirt's targets are not sent to it.
            let expressions = serde_json::json!([
                {"key": keys::kubevirt::LABEL_MIGRATION_JOB_UID, "operator": "DoesNotExist"}
            ]);
            assert_eq!(entry["objectSelector"]["matchExpressions"], expressions);
        }
    }
    for configuration in configurations {
        let injected = &configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"];
        let expected = format!("{}/gpuclaim-serving", keys::DEFAULT_CONTROLLER_NAMESPACE);
        assert_eq!(injected.as_str(), Some(expected.as_str()));
    }
    let certificate =
        of_kind(&documents, "Certificate").into_iter().find(|c| c["metadata"]["name"] == "gpuclaim-serving");
    assert!(certificate.is_some(), "the serving Certificate the webhooks' CA is injected from exists");
}

#[test]
fn the_rendered_rbac_grants_the_reviews_and_the_writes_and_nothing_wider() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["gpu.enabled=true"]);
    let role = of_kind(&documents, "ClusterRole").into_iter().find(|r| r["metadata"]["name"] == "gpuclaim").unwrap();
    let rules = role["rules"].as_array().unwrap();
    let grants = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["apiGroups"].as_array().unwrap().contains(&Value::from(group))
                && r["resources"].as_array().unwrap().contains(&Value::from(resource))
                && r["verbs"].as_array().unwrap().contains(&Value::from(verb))
        })
    };
    assert!(grants("authentication.k8s.io", "tokenreviews", "create"));
    assert!(grants("authorization.k8s.io", "subjectaccessreviews", "create"));
    assert!(grants(keys::GROUP, "gpuclaims/status", "patch"));
    assert!(grants("", "pods", "patch"));
    assert!(!grants("", "pods", "delete") && !grants("", "pods", "update"));
    assert!(!grants("", "secrets", "get"), "the controller reads its certificate from a volume, not the API");
    for rule in rules {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(!rule[field].as_array().unwrap().contains(&Value::from("*")), "wildcard in {rule}");
        }
    }
}

#[test]
fn the_rendered_policies_are_the_admission_files_each_bound_to_the_settings() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["gpu.enabled=true"]);
    let policies = of_kind(&documents, "ValidatingAdmissionPolicy");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(chart().join("admission/policies")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(policies.len(), files.len(), "one policy per file of admission/policies");
    for (policy, file) in policies.iter().zip(&files) {
        let stem = file.file_stem().unwrap().to_string_lossy();
        assert_eq!(policy["metadata"]["name"], format!("gpuclaim-{stem}").as_str());
        let spec = gpuclaim_engine::yaml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        assert_eq!(policy["spec"], spec, "{}: rendered as written", file.display());
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        let binding = of_kind(&documents, "ValidatingAdmissionPolicyBinding")
            .into_iter()
            .find(|b| b["spec"]["policyName"] == policy["metadata"]["name"])
            .unwrap_or_else(|| panic!("no binding for {}", policy["metadata"]["name"]));
        assert_eq!(binding["spec"]["validationActions"], serde_json::json!(["Deny"]));
        assert_eq!(binding["spec"]["paramRef"]["name"], keys::SETTINGS_CONFIGMAP);
        assert_eq!(binding["spec"]["paramRef"]["namespace"], keys::DEFAULT_CONTROLLER_NAMESPACE);
        // Looked up before matchConditions: Deny would refuse every matched write while the settings are missing.
        assert_eq!(binding["spec"]["paramRef"]["parameterNotFoundAction"], "Allow");
    }
    let settings = of_kind(&documents, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == keys::SETTINGS_CONFIGMAP)
        .unwrap();
    let creator = format!("system:serviceaccount:{}:gpuclaim", keys::DEFAULT_CONTROLLER_NAMESPACE);
    assert_eq!(settings["data"][keys::SETTINGS_CONTROLLER_USER], creator.as_str());
    assert_eq!(
        settings["data"][keys::SETTINGS_KUBEVIRT_USERS],
        "system:serviceaccount:kubevirt:kubevirt-controller,system:serviceaccount:kubevirt:kubevirt-handler"
    );
    assert_eq!(settings["data"][keys::SETTINGS_PLATFORM_ADMIN_GROUPS], "system:masters");
    let deployment = of_kind(&documents, "Deployment")[0];
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], "gpuclaim");
    assert!(of_kind(&documents, "ServiceMonitor").is_empty(), "the ServiceMonitor is optional, off by default");
    assert_eq!(
        of_kind(&render(&helm, &["gpu.enabled=true", "metrics.serviceMonitor.enabled=true"]), "ServiceMonitor").len(),
        1
    );
}

/// The rendered Deployment's container.
fn controller_container(documents: &[Value]) -> &Value {
    &of_kind(documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
}

#[test]
fn the_rendered_deployment_drains_before_it_stops_and_restarts_a_broken_replica() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["gpu.enabled=true"]);
    let pod = &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"];
    let container = controller_container(&documents);
    // Kubernetes' own sleep action: the distroless image has no shell or sleep binary.
    assert_eq!(container["lifecycle"]["preStop"], serde_json::json!({"sleep": {"seconds": 5}}));
    assert!(container["args"].as_array().unwrap().contains(&Value::from("--shutdown-drain-timeout=10s")));
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > 5 + 10 + 10, "the grace period ({grace} s) covers the delay, the drain and the Lease's release");
    assert_eq!(container["livenessProbe"]["httpGet"], serde_json::json!({"path": "/healthz", "port": "health"}));
    assert_eq!(container["livenessProbe"]["failureThreshold"], 3);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    for flag in ["--webhook-bind-address=:9443", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081"] {
        assert!(container["args"].as_array().unwrap().contains(&Value::from(flag)), "{flag}: every address");
    }

    let none = render(&helm, &["gpu.enabled=true", "shutdown.preStopDelaySeconds=0"]);
    assert!(controller_container(&none)["lifecycle"].is_null(), "no zero-second sleep (it needs Kubernetes 1.33)");
    let output = std::process::Command::new(&helm)
        .args([
            "template",
            "gpuclaim",
            "--set",
            "gpu.enabled=true",
            "--set",
            "shutdown.terminationGracePeriodSeconds=20",
        ])
        .arg(chart())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("shutdown.terminationGracePeriodSeconds (20) must exceed"), "{stderr}");
}
