//! `charts/gpuclaim-whatif` with the real helm: it lints, and renders a study as an Indexed Job of shards (one core
//! each, a failed shard retried alone) and a merge Job waiting for their runs, both on the results volume, run as
//! `gpuclaim whatif` would be by hand (docs/whatif.md, "A study on many machines"); a ConfigMap of the study's files
//! made with the real kubectl, as the docs say, serves as `study.existingConfigMap`. Skips, saying so, without helm
//! or kubectl.

use serde_json::{Value, json};

#[path = "support/helm.rs"]
mod helm;
use helm::{documents, helm, helm_output, helm_run_on, of_kind, repository, whatif_chart};

#[path = "support/kubectl.rs"]
mod kubectl;
use kubectl::{client_version, kubectl, kubectl_run, new_enough};

/// The chart rendered for the sample study with `sets`.
fn render(helm: &std::path::Path, sets: &[&str]) -> Vec<Value> {
    let study = repository().join("reports/examples/h100-headroom.yaml");
    let file = format!("study.files.study\\.yaml={}", study.display());
    let mut args = vec!["template", "study", "--namespace", "capacity", "--set-file", &file];
    for set in sets {
        args.extend(["--set", set]);
    }
    documents(&helm_run_on(helm, &whatif_chart(), &args))
}

fn job<'a>(documents: &'a [Value], component: &str) -> &'a Value {
    of_kind(documents, "Job")
        .into_iter()
        .find(|job| job["metadata"]["labels"]["app.kubernetes.io/component"] == component)
        .unwrap_or_else(|| panic!("no {component} Job in {documents:#?}"))
}

fn args(job: &Value) -> Vec<String> {
    let args = job["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
    args.iter().map(|a| a.as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_chart_lints_and_renders_an_indexed_job_of_shards_and_a_merge_job() {
    let Some(helm) = helm() else { return };
    let study = repository().join("reports/examples/h100-headroom.yaml");
    let file = format!("study.files.study\\.yaml={}", study.display());
    helm_run_on(&helm, &whatif_chart(), &["lint", "--set-file", &file]);

    let documents = render(&helm, &["shards=6", "parallelism=3", "study.seeds=4"]);
    let shards = job(&documents, "shard");
    let spec = &shards["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!((spec["completions"].as_u64(), spec["parallelism"].as_u64()), (Some(6), Some(3)));
    assert_eq!(spec["backoffLimitPerIndex"], 3, "a failed shard retries alone");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["automountServiceAccountToken"], false, "a shard needs no API access");
    let container = &pod["containers"][0];
    assert_eq!(container["resources"]["requests"]["cpu"], "1", "one core a shard");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        args(shards),
        [
            "whatif",
            "/study/study.yaml",
            "--out",
            "/results",
            "--seeds",
            "4",
            "--completion-index",
            "$(JOB_COMPLETION_INDEX)",
            "--shards",
            "6",
            "--round",
            "0",
            "--jobs",
            "1"
        ]
    );
    let mounts = &container["volumeMounts"];
    assert_eq!(mounts[0], json!({"name": "study", "mountPath": "/study", "readOnly": true}));
    assert_eq!(mounts[1], json!({"name": "results", "mountPath": "/results"}));
    let claim = pod["volumes"][1]["persistentVolumeClaim"]["claimName"].as_str().unwrap();
    let pvc = of_kind(&documents, "PersistentVolumeClaim");
    assert_eq!(pvc.len(), 1);
    assert_eq!(pvc[0]["metadata"]["name"], claim);
    assert_eq!(pvc[0]["spec"]["accessModes"], json!(["ReadWriteMany"]), "every shard's pod mounts it");
    let config = of_kind(&documents, "ConfigMap");
    assert!(config[0]["data"]["study.yaml"].as_str().unwrap().contains("name: h100-headroom"), "the study's text");

    let merge = job(&documents, "merge");
    assert_eq!(
        args(merge),
        ["whatif", "merge", "/study/study.yaml", "--out", "/results", "--seeds", "4", "--wait", "24h"],
        "the merge starts with the shards and waits for their runs"
    );
    assert_eq!(merge["spec"]["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"], claim);
}

#[test]
fn a_later_round_and_an_existing_claim_render_as_asked_and_a_study_without_its_file_is_refused() {
    let Some(helm) = helm() else { return };
    let documents = render(&helm, &["round=2", "results.existingClaim=shared-results", "merge.enabled=false"]);
    assert!(of_kind(&documents, "PersistentVolumeClaim").is_empty(), "the existing claim is used");
    let shards = job(&documents, "shard");
    assert_eq!(shards["metadata"]["name"], "study-whatif-round-2-shards", "a Job per round");
    assert!(args(shards).windows(2).any(|pair| pair == ["--round", "2"]));
    assert_eq!(
        shards["spec"]["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"],
        "shared-results"
    );
    assert_eq!(of_kind(&documents, "Job").len(), 1, "no merge Job");

    let output = helm_output(&helm, &whatif_chart(), &["template", "study", "--set", "study.file=missing.yaml"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(r#"study.files holds no "missing.yaml" (study.file)"#), "{stderr}");
}

/// docs/whatif.md: the study's files in a ConfigMap of one's own (`kubectl create configmap --from-file`, then
/// `study.existingConfigMap`) hold what the chart's own ConfigMap holds for the same files, and the Jobs mount it.
#[test]
fn a_configmap_made_with_kubectl_holds_what_the_charts_own_holds_and_the_jobs_mount_it() {
    let Some(helm) = helm() else { return };
    let Some(kubectl) = kubectl() else { return };
    let root = repository();
    let files =
        [("study.yaml", "reports/examples/h100-headroom.yaml"), ("small.yaml", "scenarios/examples/small.yaml")];

    let mut args = vec!["template", "study", "--namespace", "capacity"];
    let sets: Vec<String> = files
        .iter()
        .map(|(key, path)| format!("study.files.{}={}", key.replace('.', "\\."), root.join(path).display()))
        .collect();
    for set in &sets {
        args.extend(["--set-file", set]);
    }
    let charts = documents(&helm_run_on(&helm, &whatif_chart(), &args));
    let charts_own = of_kind(&charts, "ConfigMap");
    assert_eq!(charts_own.len(), 1, "{charts:#?}");

    let mut args = vec!["create", "configmap", "my-study", "--namespace", "capacity"];
    let from_files: Vec<String> = files.iter().map(|(key, path)| format!("--from-file={key}={path}")).collect();
    args.extend(from_files.iter().map(String::as_str));
    args.extend(["--dry-run=client", "-o", "json"]);
    let own: Value = serde_json::from_str(&kubectl_run(&kubectl, &root, &args)).unwrap();
    assert_eq!(own["kind"], "ConfigMap");
    assert_eq!(own["data"], charts_own[0]["data"], "the same keys and texts, byte for byte");

    let documents = render(&helm, &["study.existingConfigMap=my-study"]);
    assert!(of_kind(&documents, "ConfigMap").is_empty(), "the existing ConfigMap is used");
    for component in ["shard", "merge"] {
        let pod = &job(&documents, component)["spec"]["template"]["spec"];
        assert_eq!(pod["volumes"][0], json!({"name": "study", "configMap": {"name": "my-study"}}));
    }
    let study = args_of_shards(&documents);
    let key = study.strip_prefix("/study/").expect("the study is read from the mounted ConfigMap");
    assert!(own["data"].get(key).is_some(), "{key} is in {:?}", own["data"]);
}

/// The study file the shards are given (their first argument after `whatif`).
fn args_of_shards(documents: &[Value]) -> String {
    args(job(documents, "shard"))[1].clone()
}

/// The finder's version check: `kubectl version --client -o json` as kubectl v1.37.1 prints it is taken; gcloud's
/// 1.32 dispatcher (minor `32+`) and anything unreadable are refused, saying why.
#[test]
fn the_kubectl_finder_takes_1_37_or_newer_only() {
    let printed =
        |major: &str, minor: &str| format!(r#"{{"clientVersion": {{"major": "{major}", "minor": "{minor}"}}}}"#);
    assert_eq!(client_version(&printed("1", "37")), Ok((1, 37)));
    assert_eq!(new_enough((1, 37)), Ok(()));
    assert_eq!(new_enough(client_version(&printed("1", "40")).unwrap()), Ok(()));
    assert_eq!(new_enough(client_version(&printed("2", "0")).unwrap()), Ok(()));
    assert_eq!(client_version(&printed("1", "32+")), Ok((1, 32)));
    assert_eq!(new_enough((1, 32)), Err("its client is 1.32, older than 1.37".to_owned()));
    assert_eq!(new_enough((0, 99)), Err("its client is 0.99, older than 1.37".to_owned()));
    assert_eq!(
        client_version("Client Version: v1.37.1"),
        Err("its version is not JSON (expected value at line 1 column 1)".to_owned())
    );
    assert_eq!(client_version("{}"), Err("its version has no clientVersion.major".to_owned()));
    assert_eq!(client_version(&printed("1", "x")), Err(r#"its clientVersion.minor "x" is not a number"#.to_owned()));
}
