//! kube-scheduler's filters and choice, for the twin: gates, nodeSelector, required node affinity, taints,
//! cordons, and resources (CPU, memory, extended resources counted from the pods bound to each node, never
//! overcommitted). A pod that fits nowhere gets `PodScheduled=False` with reason `Unschedulable` and the
//! scheduler's message (`0/3 nodes are available: 1 Insufficient nvidia.com/GH100, 2 node(s) had untolerated
//! taint {...}.`); a gated pod gets `SchedulingGated`.
//!
//! The scheduler counts pods, not claims: it is Kubernetes', not ours.

use std::collections::BTreeMap;
use std::fmt;

use gpuclaim_engine::model::{Node, Pod};
use gpuclaim_engine::scheduling::{matches_node_selector, matches_required_terms, untolerated_taint};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// `PodScheduled=False` reasons (k8s.io/api/core/v1).
pub const REASON_SCHEDULING_GATED: &str = "SchedulingGated";
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
/// The API server's message while a pod is gated.
pub const MESSAGE_SCHEDULING_GATED: &str = "Scheduling is blocked due to non-empty scheduling gates";

/// What the pods bound to a node request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requested {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub devices: BTreeMap<String, u64>,
}

impl Requested {
    pub fn add(&mut self, pod: &Pod) {
        self.cpu_millis += pod.cpu_millis;
        self.memory_bytes += pod.memory_bytes;
        for (resource, units) in &pod.devices {
            *self.devices.entry(resource.clone()).or_insert(0) += units;
        }
    }

    pub fn remove(&mut self, pod: &Pod) {
        self.cpu_millis = self.cpu_millis.checked_sub(pod.cpu_millis).expect("a pod is uncounted once");
        self.memory_bytes = self.memory_bytes.checked_sub(pod.memory_bytes).expect("a pod is uncounted once");
        for (resource, units) in &pod.devices {
            let total = self.devices.get_mut(resource).expect("a pod is uncounted once");
            *total = total.checked_sub(*units).expect("a pod is uncounted once");
            if *total == 0 {
                self.devices.remove(resource);
            }
        }
    }
}

/// Why one node does not take a pod, as the scheduler's filter plugins word it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Misfit {
    /// NodeUnschedulable.
    Cordoned,
    /// The node is not Ready (its `not-ready` taint, which pods do not tolerate for scheduling).
    NotReady,
    /// NodeAffinity (nodeSelector or required terms).
    Selector,
    /// TaintToleration.
    Taint { key: String, value: Option<String>, effect: String },
    /// NodeResourcesFit.
    Insufficient { resource: String },
    /// InterPodAffinity: a pod the anti-affinity terms select runs there.
    AntiAffinity,
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Cordoned => write!(f, "node(s) were unschedulable"),
            Misfit::NotReady => write!(f, "node(s) had untolerated taint {{node.kubernetes.io/not-ready: }}"),
            Misfit::Selector => write!(f, "node(s) didn't match Pod's node affinity/selector"),
            Misfit::Taint { key, value, .. } => {
                write!(f, "node(s) had untolerated taint {{{key}: {}}}", value.as_deref().unwrap_or_default())
            }
            Misfit::Insufficient { resource } => write!(f, "Insufficient {resource}"),
            Misfit::AntiAffinity => write!(f, "node(s) didn't match pod anti-affinity rules"),
        }
    }
}

/// Runs the filters in kube-scheduler's order; the first that fails names the misfit. `avoided` says whether a
/// pod the pod's required anti-affinity selects runs on the node (InterPodAffinity, the last filter).
pub fn filter(pod: &Pod, node: &Node, requested: &Requested, avoided: bool) -> Result<(), Misfit> {
    if node.unschedulable {
        return Err(Misfit::Cordoned);
    }
    if !matches_node_selector(&pod.node_selector, &node.labels)
        || pod.required_terms.as_ref().is_some_and(|terms| !matches_required_terms(terms, &node.name, &node.labels))
    {
        return Err(Misfit::Selector);
    }
    if !node.ready {
        return Err(Misfit::NotReady);
    }
    if let Some(taint) = untolerated_taint(&pod.tolerations, &node.taints) {
        return Err(Misfit::Taint { key: taint.key.clone(), value: taint.value.clone(), effect: taint.effect.clone() });
    }
    if requested.cpu_millis + pod.cpu_millis > node.cpu_millis {
        return Err(Misfit::Insufficient { resource: "cpu".to_owned() });
    }
    if requested.memory_bytes + pod.memory_bytes > node.memory_bytes {
        return Err(Misfit::Insufficient { resource: "memory".to_owned() });
    }
    for (resource, units) in &pod.devices {
        let used = requested.devices.get(resource).copied().unwrap_or(0);
        if used + units > node.devices.get(resource).copied().unwrap_or(0) {
            return Err(Misfit::Insufficient { resource: resource.clone() });
        }
    }
    if avoided {
        return Err(Misfit::AntiAffinity);
    }
    Ok(())
}

/// The scheduler's verdict for a pod that fits nowhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub message: String,
}

/// Picks a node for `pod`: every node is filtered; among those that fit, the least requested (CPU and memory
/// shares averaged, as NodeResourcesFit's LeastAllocated scores) wins, ties broken at random from the scheduler's
/// stream, as kube-scheduler samples among equal scores. A gated pod is not scheduled. `avoid` names the nodes
/// where a pod the pod's required anti-affinity selects runs.
pub fn schedule<'n>(
    pod: &Pod,
    nodes: impl Iterator<Item = (&'n Node, &'n Requested)>,
    avoid: impl Fn(&str) -> bool,
    rng: &mut ChaCha8Rng,
) -> Result<&'n str, Unschedulable> {
    if !pod.scheduling_gates.is_empty() {
        return Err(Unschedulable { message: MESSAGE_SCHEDULING_GATED.to_owned() });
    }
    let mut total = 0;
    let mut misfits: BTreeMap<Misfit, u32> = BTreeMap::new();
    let mut best: Option<(u64, &str)> = None;
    let mut ties = 0u32;
    for (node, requested) in nodes {
        total += 1;
        match filter(pod, node, requested, avoid(&node.name)) {
            Err(misfit) => *misfits.entry(misfit).or_insert(0) += 1,
            Ok(()) => {
                let score = free_share(pod, node, requested);
                match best {
                    Some((top, _)) if score < top => {}
                    Some((top, _)) if score == top => {
                        ties += 1;
                        if rng.random_range(0..=ties) == 0 {
                            best = Some((score, node.name.as_str()));
                        }
                    }
                    _ => {
                        best = Some((score, node.name.as_str()));
                        ties = 0;
                    }
                }
            }
        }
    }
    match best {
        Some((_, node)) => Ok(node),
        None => Err(Unschedulable { message: unschedulable_message(total, &misfits) }),
    }
}

/// [`schedule`] for a pod pinned to one node by `metadata.name` (what the GPU controller does): every other node
/// fails node affinity, so only the pinned one is filtered, and the message counts the rest as kube-scheduler
/// would. `total` is the number of nodes in the cluster.
pub fn schedule_pinned<'n>(
    pod: &Pod,
    pinned: Option<(&'n Node, &'n Requested)>,
    total: u32,
) -> Result<&'n str, Unschedulable> {
    if !pod.scheduling_gates.is_empty() {
        return Err(Unschedulable { message: MESSAGE_SCHEDULING_GATED.to_owned() });
    }
    let mut misfits: BTreeMap<Misfit, u32> = BTreeMap::new();
    let others = total - u32::from(pinned.is_some());
    if others > 0 {
        misfits.insert(Misfit::Selector, others);
    }
    if let Some((node, requested)) = pinned {
        match filter(pod, node, requested, false) {
            Ok(()) => return Ok(node.name.as_str()),
            Err(misfit) => *misfits.entry(misfit).or_insert(0) += 1,
        }
    }
    Err(Unschedulable { message: unschedulable_message(total, &misfits) })
}

/// LeastAllocated: the mean share of CPU and memory left once the pod is placed, in millionths.
fn free_share(pod: &Pod, node: &Node, requested: &Requested) -> u64 {
    let share =
        |used: u64, capacity: u64| (capacity.saturating_sub(used) * 1_000_000).checked_div(capacity).unwrap_or(0);
    let cpu = share(requested.cpu_millis + pod.cpu_millis, node.cpu_millis);
    let memory = share(requested.memory_bytes + pod.memory_bytes, node.memory_bytes);
    (cpu + memory) / 2
}

/// `0/N nodes are available: <count> <reason>, ...`, the "count reason" strings sorted as text, as kube-scheduler's
/// FitError sorts them.
fn unschedulable_message(total: u32, misfits: &BTreeMap<Misfit, u32>) -> String {
    let mut by_text: BTreeMap<String, u32> = BTreeMap::new();
    for (misfit, count) in misfits {
        *by_text.entry(misfit.to_string()).or_insert(0) += count;
    }
    let mut reasons: Vec<String> = by_text.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
    reasons.sort();
    if reasons.is_empty() {
        return format!("0/{total} nodes are available.");
    }
    format!("0/{total} nodes are available: {}.", reasons.join(", "))
}

#[cfg(test)]
mod tests {
    use gpuclaim_engine::fixtures::{gated_launcher, gpu_node};
    use gpuclaim_engine::model::Time;

    use super::*;
    use crate::rng::actor_stream;

    const H100: &str = "nvidia.com/GH100_H100_SXM5_80GB";

    fn launcher(units: u64) -> Pod {
        let attachments = r#"[{"template":0,"class":"h100","count":1}]"#;
        let mut pod = gated_launcher("tenant-a", "vm-1", attachments, H100, units, Time::UNIX_EPOCH);
        pod.scheduling_gates.clear();
        pod
    }

    #[test]
    fn filters_name_the_first_misfit() {
        let pod = launcher(2);
        let node = gpu_node("gpu-1", H100, 2);
        let idle = Requested::default();
        assert_eq!(filter(&pod, &node, &idle, false), Ok(()));
        let mut busy = Requested::default();
        busy.devices.insert(H100.to_owned(), 1);
        assert_eq!(filter(&pod, &node, &busy, false), Err(Misfit::Insufficient { resource: H100.to_owned() }));
        let mut untolerated = pod.clone();
        untolerated.tolerations.clear();
        assert_eq!(
            filter(&untolerated, &node, &idle, false).unwrap_err().to_string(),
            format!("node(s) had untolerated taint {{{H100}: }}")
        );
        let mut elsewhere = pod.clone();
        elsewhere.node_selector.insert("zone".into(), "b".into());
        assert_eq!(filter(&elsewhere, &node, &idle, false), Err(Misfit::Selector));
        let mut cordoned = node.clone();
        cordoned.unschedulable = true;
        assert_eq!(filter(&pod, &cordoned, &idle, false), Err(Misfit::Cordoned));
        let cpu = Requested { cpu_millis: node.cpu_millis, ..Requested::default() };
        assert_eq!(filter(&pod, &node, &cpu, false), Err(Misfit::Insufficient { resource: "cpu".into() }));
        let avoided = filter(&pod, &node, &idle, true).unwrap_err();
        assert_eq!(
            (avoided.clone(), avoided.to_string()),
            (Misfit::AntiAffinity, "node(s) didn't match pod anti-affinity rules".into())
        );
    }

    #[test]
    fn a_pod_that_fits_nowhere_gets_the_schedulers_message() {
        let pod = launcher(4);
        let nodes = [gpu_node("gpu-1", H100, 2), gpu_node("gpu-2", H100, 2), gpu_node("cpu-1", "none", 0)];
        let requested = Requested::default();
        let mut rng = actor_stream(1, "scheduler");
        let verdict = schedule(&pod, nodes.iter().map(|n| (n, &requested)), |_| false, &mut rng).unwrap_err();
        assert_eq!(
            verdict.message,
            format!("0/3 nodes are available: 1 node(s) had untolerated taint {{none: }}, 2 Insufficient {H100}.")
        );
    }

    #[test]
    fn the_least_requested_node_wins_and_ties_are_drawn_from_the_stream() {
        let pod = launcher(1);
        let nodes = [gpu_node("gpu-1", H100, 8), gpu_node("gpu-2", H100, 8), gpu_node("gpu-3", H100, 8)];
        let loaded = Requested { cpu_millis: 32_000, ..Requested::default() };
        let idle = Requested::default();
        let loads = [&loaded, &idle, &idle];
        let mut picks = BTreeMap::new();
        let mut rng = actor_stream(3, "scheduler");
        for _ in 0..200 {
            let node = schedule(&pod, nodes.iter().zip(loads), |_| false, &mut rng).unwrap();
            *picks.entry(node).or_insert(0) += 1;
        }
        assert!(!picks.contains_key("gpu-1"), "the loaded node loses");
        assert!(picks["gpu-2"] > 60 && picks["gpu-3"] > 60, "ties split: {picks:?}");
        let mut again = actor_stream(3, "scheduler");
        let first = schedule(&pod, nodes.iter().zip(loads), |_| false, &mut again).unwrap();
        let mut replay = actor_stream(3, "scheduler");
        assert_eq!(
            schedule(&pod, nodes.iter().zip(loads), |_| false, &mut replay).unwrap(),
            first,
            "same stream, same pick"
        );
    }

    #[test]
    fn a_gated_pod_is_not_scheduled() {
        let mut pod = launcher(1);
        pod.scheduling_gates.push("gpu.cozystack.io/placement".into());
        let node = gpu_node("gpu-1", H100, 8);
        let idle = Requested::default();
        let verdict =
            schedule(&pod, std::iter::once((&node, &idle)), |_| false, &mut actor_stream(1, "scheduler")).unwrap_err();
        assert_eq!(verdict.message, MESSAGE_SCHEDULING_GATED);
    }
}
