//! The served twin's stand-ins for cert-manager and the kubelet (issue 40): the chart's Issuers, Certificates and
//! webhook configurations (rendered by the real helm) applied through kube-rs get their Secrets, a CA chain that
//! verifies for the webhook Service's name, and the CA injected; a Deployment of "the controller" (a small Python
//! server standing in for it) runs as processes with their own addresses, their Secret volume, readiness that
//! follows the Secret, a crash and a restart, and no process left once the server stops. Skips, saying so, without
//! helm or python3.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_serve::endpoints::{ResolveService, ServiceEndpoints};
use gpuclaim_serve::kubelet::{Credentials, KubeletError, PodInfo};
use gpuclaim_serve::pacer::Speed;
use gpuclaim_serve::{Config, Ready};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::{Value, json};

#[path = "../../tests/support/helm.rs"]
mod helm;

/// Two nodes and a tenant, no workload: only what a test writes happens.
const QUIET: &str = "name: quiet\nduration: 3h\ncluster:\n  classes: [{name: gpu, resourceName: example.com/gpu, mode: \
    Passthrough, maxCount: 2}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 256Gi, devices: \
    {example.com/gpu: 8}}]\n  tenants: [{name: team}]\n";

const NAMESPACE: &str = "cozy-gpuclaim";

fn temp_dir() -> PathBuf {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stand-ins-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A served twin of [`QUIET`]; stops when told.
struct Twin {
    ready: Ready,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), gpuclaim_serve::ServeError>>,
}

impl Twin {
    async fn start(configure: impl FnOnce(&mut Config)) -> Twin {
        let dir = temp_dir();
        let scenario = parse_scenario(QUIET).unwrap();
        let mut config =
            Config::new(scenario, "127.0.0.1:0".parse().unwrap(), dir.join("kubeconfig"), Speed::Times(1.0));
        configure(&mut config);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(gpuclaim_serve::run(
            config,
            move |ready| {
                let _ = ready_tx.send(ready.clone());
            },
            async move {
                let _ = stopped.await;
            },
        ));
        let ready = tokio::time::timeout(Duration::from_secs(30), ready_rx).await.unwrap().unwrap();
        Twin { ready, stop: Some(stop), task }
    }

    async fn client(&self) -> kube::Client {
        let kubeconfig = Kubeconfig::read_from(&self.ready.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(60), &mut self.task).await.unwrap().unwrap().unwrap();
    }
}

/// Polls `check` every 100 ms until it gives a value (at most `limit`).
async fn until<T>(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < limit, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a rendered document through kube-rs, as `kubectl create` would.
async fn create(client: &kube::Client, document: &Value) {
    let (group, version) = match document["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", document["apiVersion"].as_str().unwrap()),
    };
    let kind = document["kind"].as_str().unwrap();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let object: DynamicObject = serde_json::from_value(document.clone()).unwrap();
    let api: Api<DynamicObject> = match document.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object).await.unwrap_or_else(|error| panic!("create {kind}: {error}"));
}

fn pem_certificates(pem: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem).map(Result::unwrap).collect()
}

/// Whether `leaf_pem` verifies as a server certificate for `name` under the root `ca_pem`.
fn verifies(ca_pem: &[u8], leaf_pem: &[u8], name: &str) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in pem_certificates(ca_pem) {
        roots.add(certificate).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
    let chain = pem_certificates(leaf_pem);
    let name = ServerName::try_from(name.to_owned()).unwrap();
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &name, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|error| error.to_string())
}

fn secret_data(secret: &Secret, key: &str) -> Vec<u8> {
    secret.data.as_ref().and_then(|data| data.get(key)).unwrap_or_else(|| panic!("no {key}")).0.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_certificates_are_issued_and_their_ca_injected_into_the_webhooks() {
    let Some(helm) = helm::helm() else { return };
    let documents = helm::render(&helm, &[], &["gpu.enabled=true"]);
    let twin = Twin::start(|config| config.run_cert_manager = true).await;
    let client = twin.client().await;
    let wanted = ["Issuer", "Certificate", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];
    let applied: Vec<&Value> = documents.iter().filter(|d| wanted.contains(&d["kind"].as_str().unwrap())).collect();
    assert_eq!(applied.iter().filter(|d| d["kind"] == "Certificate").count(), 2, "the CA and the serving certificate");
    for document in &applied {
        create(&client, document).await;
    }
    let serving = applied.iter().find(|d| d["kind"] == "Certificate" && d["spec"]["isCA"] != true).unwrap();
    let ca = applied.iter().find(|d| d["kind"] == "Certificate" && d["spec"]["isCA"] == true).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let serving_name = serving["spec"]["secretName"].as_str().unwrap().to_owned();
    let ca_name = ca["spec"]["secretName"].as_str().unwrap().to_owned();
    let serving_secret =
        until("the serving Secret", Duration::from_secs(30), async || secrets.get_opt(&serving_name).await.unwrap())
            .await;
    let ca_secret = secrets.get(&ca_name).await.unwrap();
    assert_eq!(serving_secret.type_.as_deref(), Some("kubernetes.io/tls"));
    // The chain: the CA Secret's certificate is its own CA, and the serving Secret's ca.crt is it.
    assert_eq!(secret_data(&ca_secret, "ca.crt"), secret_data(&ca_secret, "tls.crt"));
    assert_eq!(secret_data(&serving_secret, "ca.crt"), secret_data(&ca_secret, "tls.crt"));
    let root = secret_data(&serving_secret, "ca.crt");
    let leaf = secret_data(&serving_secret, "tls.crt");
    let webhook = applied.iter().find(|d| d["kind"] == "MutatingWebhookConfiguration").unwrap();
    let service = &webhook["webhooks"][0]["clientConfig"]["service"];
    let host = format!("{}.{}.svc", service["name"].as_str().unwrap(), service["namespace"].as_str().unwrap());
    assert_eq!(host, "gpuclaim-webhook.cozy-gpuclaim.svc");
    assert_eq!(verifies(&root, &leaf, &host), Ok(()));
    assert!(verifies(&root, &leaf, "elsewhere.cozy-gpuclaim.svc").is_err(), "only the names asked for");
    assert!(verifies(&secret_data(&ca_secret, "tls.crt"), &leaf, "elsewhere.svc").is_err());
    let key = String::from_utf8(secret_data(&serving_secret, "tls.key")).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    // The Certificates are Ready.
    let certificates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate")),
    );
    let serving_certificate = serving["metadata"]["name"].as_str().unwrap();
    let status = until("the serving Certificate Ready", Duration::from_secs(30), async || {
        let object = certificates.get(serving_certificate).await.unwrap();
        let status = object.data.get("status").cloned()?;
        (status["conditions"][0]["status"] == "True").then_some(status)
    })
    .await;
    assert_eq!(status["conditions"][0]["reason"], "Ready");
    assert_eq!(status["conditions"][0]["message"], "Certificate is up to date and has not expired");
    assert!(status["notAfter"].as_str().is_some_and(|at| at.ends_with('Z')), "{status}");
    // The cainjector: every webhook of every annotated configuration gets the serving Secret's ca.crt.
    let bundle = STANDARD.encode(&root);
    for document in applied.iter().filter(|d| d["kind"].as_str().unwrap().ends_with("WebhookConfiguration")) {
        let kind = document["kind"].as_str().unwrap();
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = document["metadata"]["name"].as_str().unwrap();
        until(&format!("{kind} {name} injected"), Duration::from_secs(30), async || {
            let object = api.get(name).await.unwrap();
            let webhooks = object.data["webhooks"].as_array().cloned().unwrap_or_default();
            let injected = !webhooks.is_empty()
                && webhooks.iter().all(|webhook| webhook["clientConfig"]["caBundle"].as_str() == Some(&bundle));
            injected.then_some(())
        })
        .await;
    }
    // A second look changes nothing: the Secret is not issued again while the spec stays.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = secrets.get(&serving_name).await.unwrap();
    assert_eq!(again.metadata.resource_version, serving_secret.metadata.resource_version);
    // A spec change issues it again, for the names asked now, from the same CA.
    let mut names = serving["spec"]["dnsNames"].as_array().unwrap().clone();
    names.push("extra.cozy-gpuclaim.svc".into());
    let patch = json!({"spec": {"dnsNames": names}});
    certificates.patch(serving_certificate, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let reissued = until("the serving Secret issued again", Duration::from_secs(30), async || {
        let secret = secrets.get(&serving_name).await.unwrap();
        (secret.metadata.resource_version != serving_secret.metadata.resource_version).then_some(secret)
    })
    .await;
    let leaf = secret_data(&reissued, "tls.crt");
    assert_eq!(verifies(&root, &leaf, "extra.cozy-gpuclaim.svc"), Ok(()));
    assert_eq!(verifies(&root, &leaf, &host), Ok(()));
    // The Issuers are Ready.
    let issuers: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("cert-manager.io", "v1", "Issuer")),
    );
    for issuer in applied.iter().filter(|d| d["kind"] == "Issuer") {
        let name = issuer["metadata"]["name"].as_str().unwrap();
        let condition = issuers.get(name).await.unwrap().data["status"]["conditions"][0].clone();
        assert_eq!(condition["status"], "True", "{name}: {condition}");
    }
    twin.stop().await;
}

/// The path of a Python 3 interpreter, or `None` (said) when there is none.
fn python() -> Option<PathBuf> {
    let output = std::process::Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
    match output {
        Ok(output) if output.status.success() => Some(PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())),
        _ => {
            eprintln!("skipped: no python3 to stand in for the controller");
            None
        }
    }
}

/// "The controller": says its arguments, pod name, kubeconfig and process id on standard output, and answers
/// `/readyz` on `--health-probe-bind-address` with 200 while its cert dir's `ready` file says `yes`.
const FAKE_CONTROLLER: &str = r#"
import http.server, json, os, sys
args = sys.argv[1:]
flag = lambda name: next(a.split("=", 1)[1] for a in args if a.startswith(name + "="))
host, port = flag("--health-probe-bind-address").rsplit(":", 1)
cert_dir = flag("--webhook-cert-dir")
print(json.dumps({"args": args, "pod": os.environ.get("POD_NAME"), "kubeconfig": os.environ.get("KUBECONFIG"),
                  "pid": os.getpid()}), flush=True)
class Probe(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            ready = open(os.path.join(cert_dir, "ready")).read() == "yes"
        except OSError:
            ready = False
        self.send_response(200 if self.path == "/readyz" and ready else 503)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer((host, int(port)), Probe).serve_forever()
"#;

/// Tokens by service account, recording who asked.
#[derive(Default)]
struct FakeCredentials(Mutex<Vec<(String, String)>>);

impl Credentials for FakeCredentials {
    fn token_for(&self, namespace: &str, service_account: &str) -> Result<String, String> {
        self.0.lock().unwrap().push((namespace.to_owned(), service_account.to_owned()));
        Ok(format!("token-of-{namespace}-{service_account}"))
    }
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gpuclaim", "namespace": NAMESPACE},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gpuclaim"}}, "template": {
            "metadata": {"labels": {"app": "gpuclaim"}},
            "spec": {"serviceAccountName": "gpuclaim", "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "controller", "image": "gpuclaim",
                    "args": ["controller", "--health-probe-bind-address=:8081", "--webhook-cert-dir=/certs"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"name": "health", "containerPort": 8081}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}},
                    "volumeMounts": [{"name": "certs", "mountPath": "/certs", "readOnly": true}]}],
                "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}]}}}})
}

fn secret(ready: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "certs", "namespace": NAMESPACE},
        "data": {"ready": STANDARD.encode(ready), "tls.crt": STANDARD.encode("a certificate")}})
}

/// The JSON lines the fake controller printed in `log`.
fn starts(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

fn alive(pid: u64) -> bool {
    // A zombie is gone as far as a test can tell: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// [`FAKE_CONTROLLER`] as an executable in `dir` (`None`, said, without python3).
fn fake_controller(dir: &std::path::Path) -> Option<PathBuf> {
    let python = python()?;
    let script = dir.join("fake-controller");
    std::fs::write(&script, format!("#!{}\n{FAKE_CONTROLLER}", python.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Some(script)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_deployment_runs_as_processes_that_crash_restart_and_stop() {
    let dir = temp_dir();
    let Some(script) = fake_controller(&dir) else { return };
    let logs = dir.join("logs");
    let credentials = Arc::new(FakeCredentials::default());
    let twin = Twin::start(|config| {
        config.run_controllers = true;
        config.controller_binary = Some(script.clone());
        config.controller_extra_args = vec!["--leader-elect-lease-duration=1s".to_owned()];
        config.replica_logs = Some(logs.clone());
        config.credentials = Some(credentials.clone());
    })
    .await;
    let kubelet = twin.ready.kubelet.clone().unwrap();
    let client = twin.client().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    secrets.create(&PostParams::default(), &serde_json::from_value(secret("no")).unwrap()).await.unwrap();
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probes", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "gpuclaim"}, "ports": [{"port": 80, "targetPort": "health"}]}});
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    services.create(&PostParams::default(), &serde_json::from_value(service).unwrap()).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    deployments.create(&PostParams::default(), &serde_json::from_value(deployment()).unwrap()).await.unwrap();

    // Two replicas, each on its own address, started with the Secret volume and rewritten arguments.
    let pods: Vec<PodInfo> = until("two replicas", Duration::from_secs(30), async || {
        let pods = kubelet.pods().list();
        let started = pods.iter().all(|pod| !starts(&logs.join(format!("{}.log", pod.name))).is_empty());
        (pods.len() == 2 && started).then_some(pods)
    })
    .await;
    let [first, second] = [&pods[0], &pods[1]].map(|pod| pod.clone());
    let (first, second) = if first.index == 0 { (first, second) } else { (second, first) };
    assert_eq!(first.address.octets()[3], 2);
    assert_eq!(second.address.octets()[3], 3);
    assert_eq!(first.address.octets()[..3], second.address.octets()[..3]);
    assert!(first.name.starts_with("gpuclaim-") && first.name != second.name, "{first:?} {second:?}");
    assert_eq!(first.labels["app"], "gpuclaim");
    assert_eq!(first.ports["health"], 8081);
    let started = &starts(&logs.join(format!("{}.log", first.name)))[0];
    let cert_dir = logs.join(&first.name).join("volumes/certs");
    assert_eq!(
        started["args"],
        json!([
            "controller",
            format!("--health-probe-bind-address={}:8081", first.address),
            format!("--webhook-cert-dir={}", cert_dir.display()),
            "--leader-elect-lease-duration=1s",
        ])
    );
    assert_eq!(started["pod"], first.name.as_str());
    assert_eq!(std::fs::read_to_string(cert_dir.join("tls.crt")).unwrap(), "a certificate");
    let kubeconfig = std::fs::read_to_string(started["kubeconfig"].as_str().unwrap()).unwrap();
    assert!(kubeconfig.contains("token: token-of-cozy-gpuclaim-gpuclaim"), "{kubeconfig}");
    assert!(kubeconfig.contains(&format!("server: https://{}", twin.ready.address)), "{kubeconfig}");
    assert!(credentials.0.lock().unwrap().contains(&(NAMESPACE.to_owned(), "gpuclaim".to_owned())));

    // Not ready while the Secret says no: the Service has no endpoint.
    let snapshot_endpoints = endpoints(&twin);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(kubelet.pods().list().iter().all(|pod| !pod.ready));
    assert_eq!(
        snapshot_endpoints.endpoints(NAMESPACE, "probes", 80).unwrap_err(),
        "no endpoints available for service \"probes\""
    );
    // The Secret changes: the volume is rewritten, and readiness follows.
    let patch = json!({"data": {"ready": STANDARD.encode("yes")}});
    secrets.patch("certs", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    until("both ready", Duration::from_secs(30), async || kubelet.pods().list().iter().all(|p| p.ready).then_some(()))
        .await;
    let mut resolved = snapshot_endpoints.endpoints(NAMESPACE, "probes", 80).unwrap();
    resolved.sort();
    assert_eq!(resolved, [(first.address, 8081).into(), (second.address, 8081).into()]);
    // The Deployment's status says so, as the Deployment controller writes it.
    let status = until("the Deployment available", Duration::from_secs(10), async || {
        let status = deployments.get("gpuclaim").await.unwrap().status?;
        (status.ready_replicas == Some(2)).then_some(status)
    })
    .await;
    assert_eq!((status.replicas, status.available_replicas, status.observed_generation), (Some(2), Some(2), Some(1)));
    let available = &status.conditions.unwrap()[0];
    assert_eq!((available.type_.as_str(), available.status.as_str()), ("Available", "True"));

    // A crash: killed, not ready, started again (same name and address) after the delay.
    let first_log = logs.join(format!("{}.log", first.name));
    let old_pid = starts(&first_log)[0]["pid"].as_u64().unwrap();
    kubelet.crash(0, Duration::from_millis(500)).unwrap();
    assert_eq!(kubelet.crash(7, Duration::ZERO), Err(KubeletError::NoReplica(7)));
    until("the crashed replica gone", Duration::from_secs(10), async || (!alive(old_pid)).then_some(())).await;
    let restarted = until("the crashed replica back", Duration::from_secs(30), async || {
        let pod = kubelet.pods().list().into_iter().find(|pod| pod.index == 0)?;
        (pod.ready && pod.restarts == 1 && starts(&first_log).len() == 2).then_some(pod)
    })
    .await;
    assert_eq!((restarted.name.as_str(), restarted.address), (first.name.as_str(), first.address));
    let new_pid = starts(&first_log)[1]["pid"].as_u64().unwrap();
    assert_ne!(new_pid, old_pid);
    let second_pid = starts(&logs.join(format!("{}.log", second.name)))[0]["pid"].as_u64().unwrap();

    // Scaled to one: the replica of index 1 stops and leaves the Service.
    let patch = json!({"spec": {"replicas": 1}});
    deployments.patch("gpuclaim", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    until("scaled to one", Duration::from_secs(10), async || (kubelet.pods().list().len() == 1).then_some(())).await;
    until("the second replica stopped", Duration::from_secs(10), async || (!alive(second_pid)).then_some(())).await;
    assert_eq!(snapshot_endpoints.endpoints(NAMESPACE, "probes", 80).unwrap(), [(first.address, 8081).into()]);

    // The server stops: every replica is stopped, none is left.
    twin.stop().await;
    assert_eq!(kubelet.processes(), 0);
    assert!(!alive(new_pid), "no replica outlives the server");
}

fn endpoints(twin: &Twin) -> ServiceEndpoints {
    ServiceEndpoints::of(twin.ready.kubelet.as_ref().unwrap())
}

/// Creates a rendered document, or merges it into the stored one of its name (as `kubectl apply` would).
async fn apply(client: &kube::Client, document: &Value) {
    let (group, version) = match document["apiVersion"].as_str().unwrap().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", document["apiVersion"].as_str().unwrap()),
    };
    let kind = document["kind"].as_str().unwrap();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = match document.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(document.clone()).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let name = document["metadata"]["name"].as_str().unwrap();
            api.patch(name, &PatchParams::default(), &Patch::Merge(document)).await.unwrap();
        }
        Err(error) => panic!("apply {kind}: {error}"),
    }
}

/// The whole chart, applied unchanged, with the real `gpuclaim controller` (`GPUCLAIM_BINARY`): both replicas get
/// their serving certificate and become ready, and the webhook Service resolves to them. Skips, saying so, without
/// helm or `GPUCLAIM_BINARY` (the root crate's end-to-end tests run it with the binary built).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_deployment_runs_the_real_controller_until_its_replicas_are_ready() {
    let Some(binary) = std::env::var_os("GPUCLAIM_BINARY").map(PathBuf::from) else {
        eprintln!("skipped: set GPUCLAIM_BINARY to a built gpuclaim binary to run the chart's controller");
        return;
    };
    let Some(helm) = helm::helm() else { return };
    let documents = helm::render(&helm, &[], &["gpu.enabled=true"]);
    let logs = temp_dir().join("logs");
    let twin = Twin::start(|config| {
        config.run_cert_manager = true;
        config.run_controllers = true;
        config.controller_binary = Some(binary);
        config.replica_logs = Some(logs.clone());
    })
    .await;
    let kubelet = twin.ready.kubelet.clone().unwrap();
    let client = twin.client().await;
    for document in &documents {
        apply(&client, document).await;
    }
    let ready = until("both replicas ready", Duration::from_secs(120), async || {
        let pods = kubelet.pods().list();
        (pods.len() == 2 && pods.iter().all(|pod| pod.ready)).then_some(pods)
    })
    .await;
    let mut resolved = ServiceEndpoints::of(&kubelet).endpoints(NAMESPACE, "gpuclaim-webhook", 443).unwrap();
    resolved.sort();
    let mut expected: Vec<std::net::SocketAddr> = ready.iter().map(|pod| (pod.address, 9443).into()).collect();
    expected.sort();
    assert_eq!(resolved, expected);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = until("a Lease holder", Duration::from_secs(60), async || {
        let lease = leases.get_opt("gpuclaim").await.unwrap()?;
        lease.spec?.holder_identity
    })
    .await;
    assert!(ready.iter().any(|pod| pod.name == holder), "{holder} is a replica");
    twin.stop().await;
    assert_eq!(kubelet.processes(), 0);
}

/// A server whose future is dropped (a panic in it, a caller giving up) kills its replicas at once: they are not
/// started again, whoever still holds the kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_ended_without_a_stop_leaves_no_replica_behind() {
    let dir = temp_dir();
    let Some(script) = fake_controller(&dir) else { return };
    let logs = dir.join("logs");
    let twin = Twin::start(|config| {
        config.run_controllers = true;
        config.controller_binary = Some(script.clone());
        config.replica_logs = Some(logs.clone());
    })
    .await;
    let kubelet = twin.ready.kubelet.clone().unwrap();
    let client = twin.client().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    secrets.create(&PostParams::default(), &serde_json::from_value(secret("yes")).unwrap()).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    deployments.create(&PostParams::default(), &serde_json::from_value(deployment()).unwrap()).await.unwrap();
    let pids: Vec<u64> = until("two replicas started", Duration::from_secs(30), async || {
        let pods = kubelet.pods().list();
        let pids: Vec<u64> = pods
            .iter()
            .filter_map(|pod| starts(&logs.join(format!("{}.log", pod.name))).first()?["pid"].as_u64())
            .collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;
    twin.task.abort();
    let _ = twin.task.await;
    until("the replicas killed", Duration::from_secs(10), async || pids.iter().all(|pid| !alive(*pid)).then_some(()))
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(kubelet.processes(), 0, "none started again after the back-off");
    for pod in kubelet.pods().list() {
        assert_eq!(starts(&logs.join(format!("{}.log", pod.name))).len(), 1, "{} started once", pod.name);
    }
}
