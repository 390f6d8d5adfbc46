//! A Service's ready endpoints, as the endpoints controller and kube-proxy make them: the stored Service's
//! `spec.selector` matched against the replicas' pod labels ([`crate::kubelet::Pods`]), the Service port asked for
//! mapped to its `targetPort` (a number, or a container port's name looked up in each pod), and the addresses of
//! the ready pods. What the API server's webhook client dials (`ResolveEndpoint` in k8s.io/apiserver).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use gpuclaim_sim::served::resources;
use gpuclaim_sim::served::store::Snapshot;
use serde_json::Value;

use crate::kubelet::{PodInfo, Pods};

/// Where a Service's traffic goes: the ready endpoints behind `port` of Service `namespace/service`.
pub trait ResolveService: Send + Sync {
    fn endpoints(&self, namespace: &str, service: &str, port: i32) -> Result<Vec<std::net::SocketAddr>, String>;
}

/// The Services stored in the snapshot, resolved to the kubelet's replicas.
#[derive(Clone)]
pub struct ServiceEndpoints {
    snapshot: Arc<RwLock<Snapshot>>,
    pods: Pods,
}

impl ServiceEndpoints {
    /// The Services of the kubelet's snapshot resolved to its replicas: what the webhook client dials.
    pub fn of(kubelet: &crate::kubelet::Kubelet) -> ServiceEndpoints {
        ServiceEndpoints::new(kubelet.snapshot(), kubelet.pods())
    }

    pub fn new(snapshot: Arc<RwLock<Snapshot>>, pods: Pods) -> ServiceEndpoints {
        ServiceEndpoints { snapshot, pods }
    }
}

impl ResolveService for ServiceEndpoints {
    fn endpoints(&self, namespace: &str, service: &str, port: i32) -> Result<Vec<SocketAddr>, String> {
        let stored = {
            let snapshot = self.snapshot.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            let services = resources::find("", "v1", "services").expect("served").id();
            snapshot.get(services, namespace, service).map(|stored| Arc::clone(&stored.object))
        };
        let stored = stored.ok_or_else(|| format!("service {service:?} not found"))?;
        resolve(&stored, port, &self.pods.list())
    }
}

/// The ready endpoints of `service` (its stored object) for its port `port`, among `pods`. The API server's words
/// when there are none (`k8s.io/apiserver/pkg/util/proxy`): `no service port 8080 found for service "NAME"`,
/// `no endpoints available for service "NAME"`.
pub fn resolve(service: &Value, port: i32, pods: &[PodInfo]) -> Result<Vec<SocketAddr>, String> {
    let name = service.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let namespace = service.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let ports = service.pointer("/spec/ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let service_port = ports
        .iter()
        .find(|entry| entry.get("port").and_then(Value::as_i64) == Some(i64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let target = service_port.get("targetPort").cloned().unwrap_or(Value::from(port));
    // A Service without a selector has no endpoints the endpoints controller makes.
    let selector = service.pointer("/spec/selector").and_then(Value::as_object).filter(|selector| !selector.is_empty());
    let mut endpoints = Vec::new();
    if let Some(selector) = selector {
        let selected = |pod: &&PodInfo| {
            pod.namespace == namespace
                && selector.iter().all(|(key, value)| value.as_str() == pod.labels.get(key).map(String::as_str))
        };
        for pod in pods.iter().filter(selected).filter(|pod| pod.ready) {
            if let Some(port) = target_port(&target, pod) {
                endpoints.push(SocketAddr::new(pod.address.into(), port));
            }
        }
    }
    match endpoints.is_empty() {
        true => Err(format!("no endpoints available for service {name:?}")),
        false => Ok(endpoints),
    }
}

/// A `targetPort` in one pod: a number, or the name of one of its container ports (a pod without it is no
/// endpoint, as the endpoints controller skips it).
fn target_port(target: &Value, pod: &PodInfo) -> Option<u16> {
    match target {
        Value::Number(number) => number.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(name) => match name.parse() {
            Ok(number) => Some(number),
            Err(_) => pod.ports.get(name).copied(),
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    fn pod(index: u8, app: &str, ready: bool) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            deployment: "d".into(),
            index: usize::from(index),
            name: format!("d-{index}"),
            address: Ipv4Addr::new(127, 1, 2, index + 2),
            labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
            ports: BTreeMap::from([("webhook".to_owned(), 9443)]),
            ready,
            restarts: 0,
        }
    }

    fn service(target: Value) -> Value {
        json!({"metadata": {"name": "hooks", "namespace": "ns"},
            "spec": {"selector": {"app": "gpuclaim"}, "ports": [{"name": "https", "port": 443, "targetPort": target}]}})
    }

    #[test]
    fn a_named_target_port_resolves_to_the_ready_selected_pods() {
        let pods = [pod(0, "gpuclaim", true), pod(1, "gpuclaim", false), pod(2, "other", true)];
        let endpoints = resolve(&service(json!("webhook")), 443, &pods).unwrap();
        assert_eq!(endpoints, ["127.1.2.2:9443".parse().unwrap()]);
        let numbered = resolve(&service(json!(8443)), 443, &pods).unwrap();
        assert_eq!(numbered, ["127.1.2.2:8443".parse().unwrap()]);
    }

    #[test]
    fn without_a_ready_pod_or_the_port_the_api_servers_words_are_given() {
        let pods = [pod(0, "gpuclaim", false)];
        assert_eq!(
            resolve(&service(json!("webhook")), 443, &pods).unwrap_err(),
            "no endpoints available for service \"hooks\""
        );
        assert_eq!(
            resolve(&service(json!("webhook")), 80, &pods).unwrap_err(),
            "no service port 80 found for service \"hooks\""
        );
        let ready = [pod(0, "gpuclaim", true)];
        assert_eq!(
            resolve(&service(json!("metrics")), 443, &ready).unwrap_err(),
            "no endpoints available for service \"hooks\"",
            "a pod without the named port is no endpoint"
        );
    }

    #[test]
    fn a_service_that_is_not_stored_is_not_found() {
        let snapshot = Arc::new(RwLock::new(Snapshot::new(1, 10)));
        let endpoints = ServiceEndpoints::new(snapshot, Pods::default());
        assert_eq!(endpoints.endpoints("ns", "hooks", 443).unwrap_err(), "service \"hooks\" not found");
    }
}
