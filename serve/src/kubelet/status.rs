//! The status of a Deployment the kubelet stand-in runs, as the Deployment controller writes it: the replicas
//! running, ready and available, the generation observed, and the `Available` and `Progressing` conditions, so
//! `kubectl rollout status` and `kubectl wait --for=condition=Available` work. No I/O: the caller writes it.

use serde_json::{Value, json};

use super::PodInfo;

/// The user the status is written as: the Deployment controller, in group `system:masters` (its bootstrap role is
/// not served).
pub fn user() -> gpuclaim_sim::apiserver::admission::request::User {
    gpuclaim_sim::apiserver::admission::request::User {
        username: "system:serviceaccount:kube-system:deployment-controller".to_owned(),
        groups: vec!["system:masters".to_owned(), "system:authenticated".to_owned()],
    }
}

/// The counts and conditions of `deployment` given its running `pods` (all of its current template: the stand-in
/// runs no other). `minReadySeconds` is not waited for: a ready replica is available.
pub fn status(deployment: &Value, pods: &[PodInfo]) -> Value {
    let wanted = super::pod::replicas(deployment);
    let running = pods.len();
    let ready = pods.iter().filter(|pod| pod.ready).count();
    let unavailable_max = max_unavailable(deployment, wanted);
    let available = ready + unavailable_max >= wanted;
    let complete = running == wanted && ready == wanted;
    let (available_reason, available_message) = match available {
        true => ("MinimumReplicasAvailable", "Deployment has minimum availability."),
        false => ("MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
    };
    let name = deployment.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let progressing_message = match complete {
        true => format!("ReplicaSet \"{name}\" has successfully progressed."),
        false => format!("ReplicaSet \"{name}\" is progressing."),
    };
    json!({
        "observedGeneration": deployment.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1),
        "replicas": running,
        "updatedReplicas": running,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": wanted.saturating_sub(ready),
        "conditions": [
            {"type": "Available", "status": if available { "True" } else { "False" },
             "reason": available_reason, "message": available_message},
            {"type": "Progressing", "status": "True",
             "reason": if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
             "message": progressing_message},
        ],
    })
}

/// `strategy.rollingUpdate.maxUnavailable` as a count of `replicas`: a number, or a percentage rounded down
/// (Kubernetes' default 25%).
fn max_unavailable(deployment: &Value, replicas: usize) -> usize {
    let value = deployment.pointer("/spec/strategy/rollingUpdate/maxUnavailable");
    match value {
        Some(Value::Number(number)) => number.as_u64().map_or(0, |n| n as usize),
        Some(Value::String(text)) => match text.strip_suffix('%').and_then(|percent| percent.parse::<usize>().ok()) {
            Some(percent) => replicas * percent / 100,
            None => 0,
        },
        _ => replicas * 25 / 100,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    fn pod(ready: bool) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            deployment: "gpuclaim".into(),
            index: 0,
            name: "gpuclaim-a-b".into(),
            address: Ipv4Addr::LOCALHOST,
            labels: BTreeMap::new(),
            ports: BTreeMap::new(),
            ready,
            restarts: 0,
        }
    }

    fn deployment() -> Value {
        json!({"metadata": {"name": "gpuclaim", "generation": 3}, "spec": {"replicas": 2,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}})
    }

    #[test]
    fn the_chart_s_deployment_is_available_only_with_every_replica_ready() {
        let half = status(&deployment(), &[pod(true), pod(false)]);
        assert_eq!(half["readyReplicas"], 1);
        assert_eq!(half["unavailableReplicas"], 1);
        assert_eq!(half["conditions"][0]["status"], "False");
        assert_eq!(half["conditions"][1]["reason"], "ReplicaSetUpdated");
        let all = status(&deployment(), &[pod(true), pod(true)]);
        assert_eq!(all["observedGeneration"], 3);
        assert_eq!(all["availableReplicas"], 2);
        assert_eq!(all["conditions"][0]["reason"], "MinimumReplicasAvailable");
        assert_eq!(all["conditions"][1]["message"], "ReplicaSet \"gpuclaim\" has successfully progressed.");
    }

    #[test]
    fn max_unavailable_is_a_count_or_a_percentage_rounded_down() {
        let with = |value: Value| json!({"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": value}}}});
        assert_eq!(max_unavailable(&with(json!(1)), 4), 1);
        assert_eq!(max_unavailable(&with(json!("50%")), 3), 1);
        assert_eq!(max_unavailable(&json!({}), 4), 1, "25% by default");
    }
}
