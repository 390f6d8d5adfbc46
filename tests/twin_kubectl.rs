//! The real kubectl (1.37) against `gpuclaim twin serve` (issue 39): it lists, describes and watches a running
//! scenario, applies a claim the twin's controller binds, gets the API server's 409 for a stale replace, deletes the
//! claim (the controller releases its finalizer), and sees a watch from a revision the twin no longer keeps end
//! with the in-stream 410. Each test has its own twin on a free port and its own kubeconfig. Skips, saying so,
//! without kubectl.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "support/helm.rs"]
mod helm;

#[path = "support/kubectl.rs"]
mod kubectl;
use kubectl::kubectl;

/// Two nodes, a tenant `team` without a budget, and its VMs with template claims arriving every 30 s on average,
/// each living 5 minutes.
const CHURN: &str = "name: churn\nduration: 3h\ncluster:\n  classes: [{name: gpu, resourceName: example.com/gpu, mode: \
    Passthrough, maxCount: 2}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: \
    {example.com/gpu: 8}}]\n  tenants: [{name: team}]\nworkloads:\n- {tenant: team, prefix: vm, cpu: '1', \
    memory: 1Gi, arrivalsPerHour: 120, meanLifetime: 5m, gpus: [{claimTemplate: {class: gpu, count: 1}}]}\n";

fn temp_dir() -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("twin-kubectl-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The cluster of [`CHURN`] with no workload: only what a test writes runs.
const QUIET: &str = "name: quiet\nduration: 3h\ncluster:\n  classes: [{name: gpu, resourceName: example.com/gpu, mode: \
    Passthrough, maxCount: 2}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: \
    {example.com/gpu: 8}}]\n  tenants: [{name: team}]\n";

/// A served twin of a scenario, killed when dropped.
struct Twin {
    child: Child,
    dir: PathBuf,
    kubectl: PathBuf,
}

impl Twin {
    fn start(kubectl: PathBuf, scenario: &str, extra: &[&str]) -> Twin {
        let dir = temp_dir();
        let text = scenario;
        let scenario = dir.join("scenario.yaml");
        std::fs::write(&scenario, text).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuclaim"))
            .args(["twin", "serve", scenario.to_str().unwrap(), "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(first.starts_with("serving https://127.0.0.1:"), "the server says where first: {first:?}");
        Twin { child, dir, kubectl }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.args(args).env("KUBECONFIG", self.dir.join("kubeconfig")).env("HOME", &self.dir).current_dir(&self.dir);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs kubectl, which must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Polls `kubectl args` until its output satisfies `done` (at most `limit`).
    fn until(&self, args: &[&str], limit: Duration, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let output = self.run(args);
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            if output.status.success() && done(&text) {
                return text;
            }
            assert!(
                start.elapsed() < limit,
                "kubectl {args:?} never got there: {text} {}",
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Twin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn kubectl_gets_describes_and_watches_a_running_twin() {
    let Some(kubectl) = kubectl() else { return };
    let twin = Twin::start(kubectl, CHURN, &["--speed", "60"]);
    let nodes = twin.ok(&["get", "nodes"]);
    assert!(nodes.contains("gpu-0000") && nodes.contains("gpu-0001"), "{nodes}");
    let claims =
        twin.until(&["get", "gpuclaims", "-A", "-o", "name"], Duration::from_secs(30), |text| text.contains("vm-"));
    let claim = claims.lines().next().unwrap().trim_start_matches("gpuclaim.gpu.cozystack.io/").to_owned();
    let described = twin.ok(&["describe", "gpuclaim", "-n", "team", &claim]);
    for expected in ["Name:         ".to_owned() + &claim, "Class Name:  gpu".to_owned(), "Phase:".to_owned()] {
        assert!(described.contains(&expected), "describe shows {expected:?}: {described}");
    }
    // A watch sees launchers come and change.
    let mut watch =
        twin.command(&["get", "pods", "-n", "team", "-w", "-o", "name"]).stdout(Stdio::piped()).spawn().unwrap();
    let lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let start = Instant::now();
    for line in lines {
        seen.push(line.unwrap());
        if seen.len() >= 8 || start.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(seen.len() >= 8, "the watch streamed changes: {seen:?}");
    assert!(seen.iter().all(|line| line.starts_with("pod/virt-launcher-vm-")), "{seen:?}");
    let repeated = seen.iter().any(|line| seen.iter().filter(|other| *other == line).count() > 1);
    assert!(repeated, "a launcher's changes came as modifications: {seen:?}");
    // kubectl wait starts with the initial events and their bookmark, and completes.
    twin.ok(&["wait", "--for=jsonpath={.status.phase}=Running", "pod", "--all", "-n", "team", "--timeout=60s"]);
}

#[test]
fn kubectl_applies_and_deletes_a_claim_and_a_stale_replace_gets_409() {
    let Some(kubectl) = kubectl() else { return };
    let twin = Twin::start(kubectl, CHURN, &["--speed", "20"]);
    let claim = "apiVersion: gpu.cozystack.io/v1alpha1\nkind: GPUClaim\nmetadata:\n  name: mine\n  namespace: team\n  \
                 labels: {team: vision}\nspec:\n  className: gpu\n  count: 2\n";
    std::fs::write(twin.dir.join("claim.yaml"), claim).unwrap();
    let applied = twin.ok(&["apply", "-f", "claim.yaml"]);
    assert_eq!(applied.trim(), "gpuclaim.gpu.cozystack.io/mine created");
    // The twin's GPU controller binds it, as any tenant's claim.
    let phase = ["get", "gpuclaim", "mine", "-n", "team", "-o", "jsonpath={.status.phase}/{.metadata.labels.team}"];
    twin.until(&phase, Duration::from_secs(30), |text| text == "Bound/vision");
    // The controller's event about it is served, and describe lists it under the claim.
    let described = twin.until(&["describe", "gpuclaim", "mine", "-n", "team"], Duration::from_secs(30), |text| {
        text.contains("Normal  Bound")
    });
    assert!(described.contains("gpuclaim  bound to node \"gpu-000"), "{described}");
    // A replace from a stale copy is refused with the API server's words.
    let copy = twin.ok(&["get", "gpuclaim", "mine", "-n", "team", "-o", "json"]);
    std::fs::write(twin.dir.join("copy.json"), copy.replace("\"vision\"", "\"audio\"")).unwrap();
    twin.ok(&["replace", "-f", "copy.json"]);
    let stale = twin.run(&["replace", "-f", "copy.json"]);
    assert!(!stale.status.success());
    let stderr = String::from_utf8_lossy(&stale.stderr);
    let expected = "Error from server (Conflict): error when replacing \"copy.json\": Operation cannot be fulfilled on \
                    gpuclaims.gpu.cozystack.io \"mine\": the object has been modified; please apply your changes to \
                    the latest version and try again";
    assert_eq!(stderr.trim(), expected);
    // A spec change is refused by the CRD's rule.
    let changed =
        twin.ok(&["get", "gpuclaim", "mine", "-n", "team", "-o", "json"]).replace("\"count\": 2", "\"count\": 1");
    std::fs::write(twin.dir.join("changed.json"), changed).unwrap();
    let refused = twin.run(&["replace", "-f", "changed.json"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("spec is immutable"), "{stderr}");
    // The CRD's structural schema: a count below its minimum is invalid, an undeclared field refused under kubectl's
    // strict field validation and pruned without it.
    let zero = claim.replace("name: mine", "name: zero").replace("count: 2", "count: 0");
    std::fs::write(twin.dir.join("zero.yaml"), zero).unwrap();
    let invalid = twin.run(&["apply", "-f", "zero.yaml"]);
    assert_eq!(
        String::from_utf8_lossy(&invalid.stderr).trim(),
        "The GPUClaim \"zero\" is invalid: spec.count: Invalid value: 0: spec.count in body should be greater than or \
         equal to 1"
    );
    let colour = claim.replace("name: mine", "name: odd").replace("count: 2", "count: 1\n  colour: red");
    std::fs::write(twin.dir.join("odd.yaml"), colour).unwrap();
    let strict = twin.run(&["apply", "-f", "odd.yaml"]);
    assert_eq!(
        String::from_utf8_lossy(&strict.stderr).trim(),
        "Error from server (BadRequest): error when creating \"odd.yaml\": GPUClaim in version \"v1alpha1\" cannot be \
         handled as a GPUClaim: strict decoding error: unknown field \"spec.colour\""
    );
    twin.ok(&["apply", "-f", "odd.yaml", "--validate=false"]);
    let pruned = twin.ok(&["get", "gpuclaim", "odd", "-n", "team", "-o", "jsonpath={.spec}"]);
    assert_eq!(pruned, r#"{"className":"gpu","count":1}"#);
    twin.ok(&["delete", "gpuclaim", "odd", "-n", "team", "--timeout=60s"]);
    // Deleted: the controller releases its finalizer, and kubectl's wait for the deletion ends.
    let deleted = twin.ok(&["delete", "gpuclaim", "mine", "-n", "team", "--timeout=60s"]);
    assert!(deleted.contains("\"mine\" deleted"), "{deleted}");
    let gone = twin.run(&["get", "gpuclaim", "mine", "-n", "team"]);
    assert_eq!(
        String::from_utf8_lossy(&gone.stderr).trim(),
        "Error from server (NotFound): gpuclaims.gpu.cozystack.io \"mine\" not found"
    );
}

#[test]
fn a_watch_from_a_revision_the_twin_no_longer_keeps_ends_with_410() {
    let Some(kubectl) = kubectl() else { return };
    let twin = Twin::start(kubectl, CHURN, &["--speed", "600", "--watch-history", "3"]);
    let list = twin.ok(&["get", "--raw", "/api/v1/namespaces/team/pods"]);
    let listed: serde_json::Value = serde_json::from_str(&list).unwrap();
    let old = listed["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    // More than three pod changes later, that revision is gone.
    twin.until(&["get", "pods", "-n", "team", "-o", "name"], Duration::from_secs(30), |text| text.lines().count() >= 4);
    let raw = format!("/api/v1/namespaces/team/pods?watch=1&resourceVersion={old}");
    let streamed = twin.ok(&["get", "--raw", &raw]);
    let event: serde_json::Value = serde_json::from_str(streamed.lines().next().unwrap()).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!((event["object"]["code"].as_u64(), event["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    assert!(event["object"]["message"].as_str().unwrap().starts_with(&format!("too old resource version: {old} (")));
    // kubectl wait (a watch with initial events and their bookmark) still completes: the current state is never
    // too old.
    let waited = twin.ok(&["wait", "--for=jsonpath={.status.phase}=Active", "namespace/team", "--timeout=60s"]);
    assert_eq!(waited.trim(), "namespace/team condition met");
    // A wait for a pod's deletion while pods change faster than three changes are kept: its watch is told `too old
    // resource version` on the way (client-go logs "Watch closed ... too old resource version" at -v=6), relists
    // from its revision with initial events, and still sees the deletion.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: mine, namespace: team}\nspec:\n  containers:\n  - name: \
               main\n    image: example.com/app:1\n    resources: {requests: {cpu: 100m, memory: 64Mi}}\n";
    std::fs::write(twin.dir.join("pod.yaml"), pod).unwrap();
    assert_eq!(twin.ok(&["apply", "-f", "pod.yaml"]).trim(), "pod/mine created");
    let wait = twin.command(&["wait", "--for=delete", "pod/mine", "-n", "team", "--timeout=60s", "-v=6"]);
    let waiting = {
        let mut wait = wait;
        wait.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
    };
    std::thread::sleep(Duration::from_secs(3));
    twin.ok(&["delete", "pod", "mine", "-n", "team", "--wait=false"]);
    let output = waiting.wait_with_output().unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "pod/mine condition met");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("too old resource version"), "the wait's watch expired and relisted on the way: {log}");
}

#[test]
fn a_vm_from_the_vm_chart_applied_with_kubectl_runs_and_its_delete_releases_its_claims() {
    let Some(kubectl) = kubectl() else { return };
    let Some(helm) = helm::helm() else { return };
    let twin = Twin::start(kubectl, QUIET, &["--speed", "60"]);
    let rendered = helm::helm_run_on(
        &helm,
        &helm::repository().join("charts/virtual-machine"),
        &[
            "template",
            "trainer",
            "--namespace",
            "team",
            "--set",
            "resources.cpu=2",
            "--set",
            "resources.memory=4Gi",
            "--set-json",
            r#"gpus=[{"claimTemplate":{"class":"gpu","count":2}}]"#,
            "--set-json",
            r#"_cluster={"gpu-claims-enabled":"true"}"#,
        ],
    );
    std::fs::write(twin.dir.join("vm.yaml"), rendered).unwrap();
    let applied = twin.ok(&["apply", "-f", "vm.yaml"]);
    assert_eq!(applied.trim(), "virtualmachine.kubevirt.io/trainer created");
    let waited = twin.ok(&[
        "wait",
        "--for=jsonpath={.status.printableStatus}=Running",
        "vm/trainer",
        "-n",
        "team",
        "--timeout=60s",
    ]);
    assert_eq!(waited.trim(), "virtualmachine.kubevirt.io/trainer condition met");
    // It runs as any scenario's VM: a VMI on a node, its launcher, a template claim of two units bound there.
    let vmi = twin.ok(&["get", "vmi", "trainer", "-n", "team", "-o", "jsonpath={.status.phase} {.status.nodeName}"]);
    assert!(vmi.starts_with("Running gpu-"), "{vmi}");
    let claim =
        twin.ok(&["get", "gpuclaim", "trainer-gpu-0", "-n", "team", "-o", "jsonpath={.spec.count} {.status.phase}"]);
    assert_eq!(claim, "2 Attached");
    let deleted = twin.ok(&["delete", "vm", "trainer", "-n", "team", "--timeout=60s"]);
    assert!(deleted.contains("\"trainer\" deleted"), "{deleted}");
    twin.until(&["get", "vm,vmi,pods,gpuclaims", "-n", "team", "-o", "name"], Duration::from_secs(30), str::is_empty);
}

#[test]
fn the_chart_applies_with_helm_and_kubectl_and_a_second_apply_changes_nothing() {
    let Some(kubectl) = kubectl() else { return };
    let Some(helm) = helm::helm() else { return };
    let twin = Twin::start(kubectl, QUIET, &["--speed", "60"]);
    let rendered = helm::helm_run_on(
        &helm,
        &helm::chart(),
        &["template", "gpuclaim", "--namespace", "cozy-gpuclaim", "--set", "gpu.enabled=true", "--include-crds"],
    );
    let objects = rendered.lines().filter(|line| line.starts_with("kind: ")).count();
    let apply = |twin: &Twin| -> Vec<String> {
        let mut child =
            twin.command(&["apply", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), rendered.as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "apply: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap().lines().map(str::to_owned).collect()
    };
    let first = apply(&twin);
    assert_eq!(first.len(), objects, "{first:#?}");
    // The twin serves our CRDs (and KubeVirt's and cert-manager's) from the start: applying ours configures them.
    for line in &first {
        let crd = line.starts_with("customresourcedefinition.") || line == "configmap/gpu-claims-settings configured";
        assert!(line.ends_with(" created") || (crd && line.ends_with(" configured")), "{line}");
    }
    // Again: nothing changes. The PodDisruptionBudget reads `configured` against any API server: its selector's
    // patch strategy is `replace`, so kubectl's patch is never empty (Azure/eno#246).
    for line in apply(&twin) {
        let pdb = line == "poddisruptionbudget.policy/gpuclaim configured";
        assert!(line.ends_with(" unchanged") || pdb, "{line}");
    }
    let policies = twin.ok(&["get", "validatingadmissionpolicies", "-o", "name"]);
    assert_eq!(policies.lines().count(), 3, "{policies}");
    let version = twin.ok(&["get", "crd", "gpuclaims.gpu.cozystack.io", "-o", "jsonpath={.spec.versions[0].name}"]);
    assert_eq!(version, "v1alpha1");
}

#[test]
fn kubectl_cordons_and_uncordons_a_node() {
    let Some(kubectl) = kubectl() else { return };
    let twin = Twin::start(kubectl, QUIET, &["--speed", "60"]);
    assert_eq!(twin.ok(&["cordon", "gpu-0000"]).trim(), "node/gpu-0000 cordoned");
    let nodes = twin.ok(&["get", "nodes", "--no-headers"]);
    let cordoned = nodes.lines().find(|line| line.starts_with("gpu-0000")).unwrap();
    assert!(cordoned.contains("Ready,SchedulingDisabled"), "{nodes}");
    assert_eq!(twin.ok(&["uncordon", "gpu-0000"]).trim(), "node/gpu-0000 uncordoned");
    let unschedulable = twin.ok(&["get", "node", "gpu-0000", "-o", "jsonpath={.spec.unschedulable}"]);
    assert_eq!(unschedulable, "");
    // The twin's kubelet owns a node's status.
    let refused = twin.run(&[
        "patch",
        "node",
        "gpu-0000",
        "--subresource=status",
        "-p",
        r#"{"status":{"allocatable":{"example.com/gpu":"80"}}}"#,
    ]);
    assert!(!refused.status.success());
}

/// A ServiceAccount `team/reader`, a Role letting it get and list ConfigMaps, and a ConfigMap `c`.
const READER: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: reader, namespace: team}\n---\n\
    apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: read-configmaps, namespace: team}\n\
    rules: [{apiGroups: [''], resources: [configmaps], verbs: [get, list]}]\n---\n\
    apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reader, namespace: team}\n\
    roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-configmaps}\n\
    subjects: [{kind: ServiceAccount, name: reader}]\n---\n\
    apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team}\n";

#[test]
fn kubectl_creates_a_token_for_a_service_account_held_to_its_role() {
    let Some(kubectl) = kubectl() else { return };
    let twin = Twin::start(kubectl, QUIET, &["--speed", "60"]);
    // kubectl's imperative `create serviceaccount|role|rolebinding|configmap` send protobuf: applied as YAML.
    std::fs::write(twin.dir.join("reader.yaml"), READER).unwrap();
    twin.ok(&["apply", "-f", "reader.yaml"]);
    let token = twin.ok(&["create", "token", "reader", "-n", "team"]).trim().to_owned();
    assert!(!token.is_empty());
    let as_reader = |args: &[&'static str]| -> Vec<String> {
        ["--token", token.as_str()].iter().chain(args).map(|arg| (*arg).to_owned()).collect()
    };
    let reader = |args: &[&'static str]| twin.command(&[]).args(as_reader(args)).output().unwrap();
    let read = reader(&["get", "configmap", "c", "-n", "team", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&read.stdout).trim(),
        "configmap/c",
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&reader(&["auth", "can-i", "list", "configmaps", "-n", "team"]).stdout).trim(),
        "yes"
    );
    let whoami = reader(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
    assert_eq!(String::from_utf8_lossy(&whoami.stdout), "system:serviceaccount:team:reader");
    let listed = String::from_utf8_lossy(&reader(&["auth", "can-i", "--list", "-n", "team"]).stdout).into_owned();
    assert!(
        listed.lines().any(|line| line.split_whitespace().eq(["configmaps", "[]", "[]", "[get", "list]"])),
        "{listed}"
    );
    let denied = reader(&["auth", "can-i", "create", "configmaps", "-n", "team"]);
    assert!(!denied.status.success());
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");
    let refused = reader(&["delete", "configmap", "c", "-n", "team"]);
    assert!(!refused.status.success());
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim(),
        "Error from server (Forbidden): configmaps \"c\" is forbidden: User \"system:serviceaccount:team:reader\" \
         cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    let missing = twin.run(&["create", "token", "ghost", "-n", "team"]);
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim(),
        "error: failed to create token: serviceaccounts \"ghost\" not found"
    );
    let impersonating = twin.run(&["--as", "system:serviceaccount:team:reader", "get", "configmaps", "-n", "team"]);
    assert_eq!(
        String::from_utf8_lossy(&impersonating.stderr).trim(),
        "Error from server (BadRequest): Unable to list \"/v1, Resource=configmaps\": impersonation (Impersonate-User, Impersonate-Group, kubectl --as) is not \
         served by the twin: use a token of the user (kubectl create token, then kubectl --token)"
    );
    let stranger = twin.run(&["--token", "not-a-token", "get", "configmaps", "-n", "team"]);
    assert_eq!(
        String::from_utf8_lossy(&stranger.stderr).trim(),
        "error: You must be logged in to the server (Unauthorized)"
    );
}
