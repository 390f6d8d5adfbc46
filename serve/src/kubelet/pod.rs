//! A Deployment's pod template as the kubelet stand-in runs it: which Deployments it runs, the pods' names, and the
//! container's command line, environment, ports, secret volumes and readiness probe read from the template. No
//! I/O: the caller reads the Deployment and runs what this says.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The first argument of the container that runs this binary's controller: the Deployments run are those.
pub const CONTROLLER_ARG: &str = "controller";

/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const GRACE_DEFAULT: Duration = Duration::from_secs(30);

/// The characters of generated name parts (k8s.io/apimachinery `rand.String`: no vowels, no confusable digits).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The pod a Deployment's template describes, as far as the stand-in runs it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodTemplate {
    /// The template's labels, and `pod-template-hash`.
    pub labels: BTreeMap<String, String>,
    /// The hash of the template (as `pod-template-hash`): the pods' names carry it, and a new one is a rollout.
    pub hash: String,
    pub service_account: String,
    pub grace: Duration,
    /// The first container's arguments.
    pub args: Vec<String>,
    /// The first container's environment: a value, or a field of the pod.
    pub env: Vec<(String, EnvValue)>,
    /// Container ports by name.
    pub ports: BTreeMap<String, u16>,
    /// Secret volumes mounted into the first container: (secret name, mount path).
    pub secret_mounts: Vec<SecretMount>,
    pub readiness: Option<Probe>,
}

/// An environment variable's value.
#[derive(Clone, Debug, PartialEq)]
pub enum EnvValue {
    Value(String),
    /// `valueFrom.fieldRef.fieldPath`: `metadata.name`, `metadata.namespace`, `spec.serviceAccountName`,
    /// `status.podIP`.
    Field(String),
}

/// A Secret mounted at a path of the container.
#[derive(Clone, Debug, PartialEq)]
pub struct SecretMount {
    pub volume: String,
    pub secret: String,
    pub mount_path: String,
    /// `optional: true`: the pod starts without it.
    pub optional: bool,
}

/// A readiness probe: where it asks, and how many answers flip it.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    pub action: ProbeAction,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ProbeAction {
    /// `httpGet` (HTTPS probes connect only: the stand-in carries no TLS client for them).
    Http {
        path: String,
        port: u16,
        https: bool,
    },
    TcpSocket {
        port: u16,
    },
    /// An `exec` or `grpc` probe: not run; the pod counts as ready once started.
    Unsupported(String),
}

/// A template the stand-in cannot run, with what is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("deployment {namespace}/{name}: {reason}")]
pub struct TemplateError {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// Whether `deployment` runs this binary's controller: its template's first container's first argument.
pub fn runs_controller(deployment: &Value) -> bool {
    deployment.pointer("/spec/template/spec/containers/0/args/0").and_then(Value::as_str) == Some(CONTROLLER_ARG)
}

/// `spec.replicas`, 1 when absent (the API server's default).
pub fn replicas(deployment: &Value) -> usize {
    deployment.pointer("/spec/replicas").and_then(Value::as_u64).map_or(1, |count| count as usize)
}

/// Reads the pod template of `deployment`.
pub fn template(deployment: &Value) -> Result<PodTemplate, TemplateError> {
    let text = |pointer: &str| deployment.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let fail =
        |reason: String| TemplateError { namespace: text("/metadata/namespace"), name: text("/metadata/name"), reason };
    let template = deployment.pointer("/spec/template").ok_or_else(|| fail("spec.template: Required value".into()))?;
    let hash = template_hash(template);
    let mut labels = string_map(template.pointer("/metadata/labels"));
    labels.insert("pod-template-hash".to_owned(), hash.clone());
    let spec = &template["spec"];
    let container =
        spec.pointer("/containers/0").ok_or_else(|| fail("spec.template.spec.containers: Required value".into()))?;
    let args = strings(container.get("args"));
    let ports = container_ports(container);
    let readiness = match container.get("readinessProbe") {
        Some(probe) => Some(read_probe(probe, &ports).map_err(|reason| fail(format!("readinessProbe: {reason}")))?),
        None => None,
    };
    Ok(PodTemplate {
        labels,
        hash,
        service_account: spec.get("serviceAccountName").and_then(Value::as_str).unwrap_or("default").to_owned(),
        grace: spec
            .get("terminationGracePeriodSeconds")
            .and_then(Value::as_u64)
            .map_or(GRACE_DEFAULT, Duration::from_secs),
        args,
        env: env(container.get("env")),
        ports,
        secret_mounts: secret_mounts(spec, container),
        readiness,
    })
}

fn strings(value: Option<&Value>) -> Vec<String> {
    let values = value.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    values.iter().filter_map(Value::as_str).map(str::to_owned).collect()
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    let Some(map) = value.and_then(Value::as_object) else { return BTreeMap::new() };
    map.iter().filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned()))).collect()
}

fn container_ports(container: &Value) -> BTreeMap<String, u16> {
    let ports = container.get("ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let named = |port: &Value| {
        let name = port.get("name")?.as_str()?.to_owned();
        let number = u16::try_from(port.get("containerPort")?.as_u64()?).ok()?;
        Some((name, number))
    };
    ports.iter().filter_map(named).collect()
}

fn env(value: Option<&Value>) -> Vec<(String, EnvValue)> {
    let entries = value.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let entry = |entry: &Value| {
        let name = entry.get("name")?.as_str()?.to_owned();
        if let Some(field) = entry.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
            return Some((name, EnvValue::Field(field.to_owned())));
        }
        let value = entry.get("value").and_then(Value::as_str).unwrap_or_default();
        Some((name, EnvValue::Value(value.to_owned())))
    };
    entries.iter().filter_map(entry).collect()
}

/// The first container's mounts of `secret` volumes.
fn secret_mounts(spec: &Value, container: &Value) -> Vec<SecretMount> {
    let volumes = spec.get("volumes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mounts = container.get("volumeMounts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let mount = |mount: &Value| {
        let volume_name = mount.get("name")?.as_str()?;
        let volume = volumes.iter().find(|volume| volume.get("name").and_then(Value::as_str) == Some(volume_name))?;
        let secret = volume.get("secret")?;
        Some(SecretMount {
            volume: volume_name.to_owned(),
            secret: secret.get("secretName")?.as_str()?.to_owned(),
            mount_path: mount.get("mountPath")?.as_str()?.trim_end_matches('/').to_owned(),
            optional: secret.get("optional").and_then(Value::as_bool).unwrap_or(false),
        })
    };
    mounts.iter().filter_map(mount).collect()
}

/// A probe's port: a number, or the name of a container port.
fn probe_port(port: Option<&Value>, ports: &BTreeMap<String, u16>) -> Result<u16, String> {
    match port {
        Some(Value::Number(number)) => {
            number.as_u64().and_then(|n| u16::try_from(n).ok()).ok_or_else(|| format!("port {number} out of range"))
        }
        Some(Value::String(name)) => match name.parse::<u16>() {
            Ok(number) => Ok(number),
            Err(_) => ports.get(name).copied().ok_or_else(|| format!("no container port named {name:?}")),
        },
        _ => Err("port: Required value".to_owned()),
    }
}

fn read_probe(probe: &Value, ports: &BTreeMap<String, u16>) -> Result<Probe, String> {
    let action = if let Some(http) = probe.get("httpGet") {
        ProbeAction::Http {
            path: http.get("path").and_then(Value::as_str).unwrap_or("/").to_owned(),
            port: probe_port(http.get("port"), ports)?,
            https: http.get("scheme").and_then(Value::as_str) == Some("HTTPS"),
        }
    } else if let Some(tcp) = probe.get("tcpSocket") {
        ProbeAction::TcpSocket { port: probe_port(tcp.get("port"), ports)? }
    } else {
        let kind = probe.as_object().and_then(|map| map.keys().find(|key| ["exec", "grpc"].contains(&key.as_str())));
        ProbeAction::Unsupported(kind.cloned().unwrap_or_else(|| "none".to_owned()))
    };
    let number = |field: &str, default: u64| probe.get(field).and_then(Value::as_u64).unwrap_or(default).max(1);
    Ok(Probe {
        action,
        timeout: Duration::from_secs(number("timeoutSeconds", 1)),
        success_threshold: number("successThreshold", 1) as u32,
        failure_threshold: number("failureThreshold", 3) as u32,
    })
}

/// The template's hash as `pod-template-hash` is written: 10 characters of the alphabet of generated names.
fn template_hash(template: &Value) -> String {
    encode(&digest(template.to_string().as_bytes()), 10)
}

/// A replica's pod name: `DEPLOYMENT-HASH-SUFFIX`, the suffix stable for a replica index (so a restarted replica
/// keeps its name and its Lease identity).
pub fn pod_name(deployment: &str, hash: &str, index: usize) -> String {
    let suffix = encode(&digest(format!("{deployment}/{hash}/{index}").as_bytes()), 5);
    format!("{deployment}-{hash}-{suffix}")
}

fn digest(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().to_vec()
}

fn encode(bytes: &[u8], length: usize) -> String {
    bytes.iter().take(length).map(|byte| NAME_ALPHABET[usize::from(*byte) % NAME_ALPHABET.len()] as char).collect()
}

/// One replica of a template: what its environment's fields are read from.
pub struct Pod<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub address: Ipv4Addr,
}

/// The replica's environment: `POD_NAME` and `HOSTNAME` (the pod's name), `KUBECONFIG`, then the template's
/// variables, which win (a field the stand-in does not know is empty).
pub fn environment(template: &PodTemplate, pod: &Pod<'_>, kubeconfig: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        ("POD_NAME".to_owned(), pod.name.to_owned()),
        ("HOSTNAME".to_owned(), pod.name.to_owned()),
        ("KUBECONFIG".to_owned(), kubeconfig.display().to_string()),
    ];
    for (variable, value) in &template.env {
        let value = match value {
            EnvValue::Value(value) => value.clone(),
            EnvValue::Field(field) => match field.as_str() {
                "metadata.name" => pod.name.to_owned(),
                "metadata.namespace" => pod.namespace.to_owned(),
                "spec.serviceAccountName" => template.service_account.clone(),
                "status.podIP" => pod.address.to_string(),
                _ => String::new(),
            },
        };
        env.retain(|(existing, _)| existing != variable);
        env.push((variable.clone(), value));
    }
    env
}

/// The container's arguments as the replica runs them: every `--…-bind-address=` of every address (`:PORT`,
/// `0.0.0.0:PORT`, `[::]:PORT`) bound to the replica's own `address`, every secret volume's mount path (as a
/// flag's value or an argument of its own) replaced by the replica's copy of the volume, and `extra` appended.
pub fn rewrite_args(args: &[String], address: Ipv4Addr, mounts: &[(String, PathBuf)], extra: &[String]) -> Vec<String> {
    let rewritten = args.iter().map(|arg| {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (Some(flag), value),
            _ => (None, arg.as_str()),
        };
        let value = match flag {
            Some(flag) if flag.ends_with("-bind-address") => bind_address(value, address),
            _ => mounted(value, mounts),
        };
        match flag {
            Some(flag) => format!("{flag}={value}"),
            None => value,
        }
    });
    rewritten.chain(extra.iter().cloned()).collect()
}

/// `:PORT` and every-address hosts bound to `address`; anything else (`0`: off) as written.
fn bind_address(value: &str, address: Ipv4Addr) -> String {
    let port = ["", "0.0.0.0", "[::]", "::"].iter().find_map(|host| value.strip_prefix(host)?.strip_prefix(':'));
    match port {
        Some(port) if !port.is_empty() => format!("{address}:{port}"),
        _ => value.to_owned(),
    }
}

/// A path under a mount path, moved to the replica's copy of the volume.
fn mounted(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount_path, local) in mounts {
        if value == mount_path {
            return local.display().to_string();
        }
        if let Some(rest) = value.strip_prefix(mount_path.as_str()).and_then(|rest| rest.strip_prefix('/')) {
            return Path::new(local).join(rest).display().to_string();
        }
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chart_like() -> Value {
        json!({"metadata": {"name": "gpuclaim", "namespace": "cozy-gpuclaim"}, "spec": {"replicas": 2, "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "gpuclaim"}},
            "spec": {"serviceAccountName": "gpuclaim", "terminationGracePeriodSeconds": 30,
                "containers": [{"name": "controller", "args": ["controller", "--webhook-bind-address=:9443",
                    "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs", "--metrics-bind-address=:8443",
                    "--health-probe-bind-address=:8081", "--leader-elect=true"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "LEVEL", "value": "info"}],
                    "ports": [{"name": "webhook", "containerPort": 9443}, {"name": "health", "containerPort": 8081}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "serving-cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs"}]}],
                "volumes": [{"name": "serving-cert", "secret": {"secretName": "gpuclaim-serving-cert"}}]}}}})
    }

    #[test]
    fn the_charts_template_is_read_with_its_named_probe_port_and_secret_volume() {
        let deployment = chart_like();
        assert!(runs_controller(&deployment));
        assert_eq!(replicas(&deployment), 2);
        let pod = template(&deployment).unwrap();
        assert_eq!(pod.service_account, "gpuclaim");
        assert_eq!(pod.grace, Duration::from_secs(30));
        assert_eq!(pod.labels["app.kubernetes.io/name"], "gpuclaim");
        assert_eq!(pod.labels["pod-template-hash"], pod.hash);
        assert_eq!(pod.ports["webhook"], 9443);
        assert_eq!(
            pod.readiness.unwrap().action,
            ProbeAction::Http { path: "/readyz".into(), port: 8081, https: false }
        );
        assert_eq!(pod.env[0], ("POD_NAME".to_owned(), EnvValue::Field("metadata.name".into())));
        assert_eq!(pod.env[1], ("LEVEL".to_owned(), EnvValue::Value("info".into())));
        let mount = &pod.secret_mounts[0];
        assert_eq!(
            (mount.secret.as_str(), mount.mount_path.as_str()),
            ("gpuclaim-serving-cert", "/tmp/k8s-webhook-server/serving-certs")
        );
    }

    #[test]
    fn a_probe_naming_no_container_port_is_refused() {
        let mut deployment = chart_like();
        deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = "nope".into();
        assert_eq!(
            template(&deployment).unwrap_err().to_string(),
            "deployment cozy-gpuclaim/gpuclaim: readinessProbe: no container port named \"nope\""
        );
    }

    #[test]
    fn bind_addresses_and_the_cert_dir_are_the_replicas() {
        let deployment = chart_like();
        let pod = template(&deployment).unwrap();
        let mounts = vec![("/tmp/k8s-webhook-server/serving-certs".to_owned(), PathBuf::from("/run/r0/serving-cert"))];
        let args = rewrite_args(&pod.args, Ipv4Addr::new(127, 9, 8, 2), &mounts, &["--extra=1".to_owned()]);
        assert_eq!(
            args,
            [
                "controller",
                "--webhook-bind-address=127.9.8.2:9443",
                "--webhook-cert-dir=/run/r0/serving-cert",
                "--metrics-bind-address=127.9.8.2:8443",
                "--health-probe-bind-address=127.9.8.2:8081",
                "--leader-elect=true",
                "--extra=1",
            ]
        );
        let kept = rewrite_args(&["--metrics-bind-address=0".to_owned()], Ipv4Addr::LOCALHOST, &[], &[]);
        assert_eq!(kept, ["--metrics-bind-address=0"]);
    }

    #[test]
    fn the_environment_is_the_templates_with_the_pods_fields() {
        let mut template = template(&chart_like()).unwrap();
        template.env.push(("IP".to_owned(), EnvValue::Field("status.podIP".into())));
        template.env.push(("HOSTNAME".to_owned(), EnvValue::Value("mine".into())));
        let pod = Pod { name: "gpuclaim-x-y", namespace: "ns", address: Ipv4Addr::new(127, 3, 4, 2) };
        let env: BTreeMap<String, String> = environment(&template, &pod, Path::new("/k")).into_iter().collect();
        let expected = [
            ("HOSTNAME", "mine"),
            ("IP", "127.3.4.2"),
            ("KUBECONFIG", "/k"),
            ("LEVEL", "info"),
            ("POD_NAME", "gpuclaim-x-y"),
        ];
        let expected: BTreeMap<String, String> =
            expected.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        assert_eq!(env, expected);
    }

    #[test]
    fn pod_names_are_stable_per_index_and_differ_between_indices() {
        let first = pod_name("gpuclaim", "abcde12345", 0);
        assert_eq!(first, pod_name("gpuclaim", "abcde12345", 0));
        assert_ne!(first, pod_name("gpuclaim", "abcde12345", 1));
        assert!(first.starts_with("gpuclaim-abcde12345-") && first.len() == "gpuclaim-abcde12345-".len() + 5);
    }
}
