//! `charts/gpuclaim-whatif` with the real helm: it lints, and renders a study as an Indexed Job of shards (one core
//! each, a failed shard retried alone) and a merge Job waiting for their runs, both on the results volume, run as
//! `gpuclaim whatif` would be by hand (docs/whatif.md, "A study on many machines"). Skips, saying so, without helm.

use serde_json::{Value, json};

#[path = "support/helm.rs"]
mod helm;
use helm::{documents, helm, helm_output, helm_run_on, of_kind, repository, whatif_chart};

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
