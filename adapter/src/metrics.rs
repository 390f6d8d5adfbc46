//! The metrics the adapter exports (Prometheus text format): admission decisions, reconcile latency and writes,
//! gated pods and their wait, published units per class, claims by phase, leadership.
//!
//! Gauges that describe the cluster are set from the view after each reconcile pass ([`Metrics::observe_view`]),
//! so they say what the controller decided on, and a class or phase that disappears loses its series.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use gpuclaim_engine::model::{ClaimPhase, Time, View};
use gpuclaim_engine::review::Outcome;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    admission: Family<Labels, Counter>,
    reconcile_seconds: Histogram,
    writes: Family<Labels, Counter>,
    pins_rechecked: Counter,
    gated_pods: Gauge,
    gated_pods_waiting: Family<Labels, Gauge>,
    gated_wait_seconds_max: Gauge<f64, AtomicU64>,
    allocatable_units: Family<Labels, Gauge>,
    free_units: Family<Labels, Gauge>,
    largest_free_on_node: Family<Labels, Gauge>,
    fragmented_units: Family<Labels, Gauge>,
    claims: Family<Labels, Gauge>,
    leader: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("gpuclaim");
        let admission = Family::<Labels, Counter>::default();
        registry.register(
            "admission_decisions",
            "Admission reviews answered, by webhook, decision (allowed, patched, denied) and refusal reason",
            admission.clone(),
        );
        // 1 ms to ~16 s: a pass over a small cluster takes milliseconds, one over thousands of claims seconds.
        let reconcile_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "reconcile_duration_seconds",
            "Time of one reconcile pass, its writes included",
            reconcile_seconds.clone(),
        );
        let writes = Family::<Labels, Counter>::default();
        registry.register("writes", "Writes to the API server, by action and result", writes.clone());
        let pins_rechecked = Counter::default();
        registry.register(
            "pins_rechecked",
            "Passes taken again because a live read of a pin's node found the watch behind",
            pins_rechecked.clone(),
        );
        let gated_pods = Gauge::default();
        registry.register("gated_pods", "Pods waiting at the placement gate", gated_pods.clone());
        let gated_pods_waiting = Family::<Labels, Gauge>::default();
        registry.register(
            "gated_pods_waiting",
            "Pods at the placement gate by the reason their Placement condition gives (NoCapacity, Fragmented, ...)",
            gated_pods_waiting.clone(),
        );
        let gated_wait_seconds_max = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "gated_pod_wait_seconds_max",
            "How long the longest-waiting gated pod has waited",
            gated_wait_seconds_max.clone(),
        );
        let allocatable_units = Family::<Labels, Gauge>::default();
        registry.register("class_allocatable_units", "Units on the nodes a class may use", allocatable_units.clone());
        let free_units = Family::<Labels, Gauge>::default();
        registry.register("class_free_units", "Units of a class not bound nor taken", free_units.clone());
        let largest_free_on_node = Family::<Labels, Gauge>::default();
        registry.register(
            "class_largest_free_on_node_units",
            "The most free units of a class on one node",
            largest_free_on_node.clone(),
        );
        let fragmented_units = Family::<Labels, Gauge>::default();
        registry.register(
            "class_fragmented_units",
            "Free units of a class on nodes that cannot take its most common claim size",
            fragmented_units.clone(),
        );
        let claims = Family::<Labels, Gauge>::default();
        registry.register("claims", "GPU claims by phase", claims.clone());
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the lease and reconciles", leader.clone());
        Metrics {
            registry,
            admission,
            reconcile_seconds,
            writes,
            pins_rechecked,
            gated_pods,
            gated_pods_waiting,
            gated_wait_seconds_max,
            allocatable_units,
            free_units,
            largest_free_on_node,
            fragmented_units,
            claims,
            leader,
        }
    }

    /// Counts one answered review.
    pub fn admission(&self, outcome: &Outcome) {
        let decision = match (outcome.refusal, outcome.patched) {
            (Some(_), _) => "denied",
            (None, true) => "patched",
            (None, false) => "allowed",
        };
        let labels = vec![
            ("webhook", outcome.webhook.name().to_owned()),
            ("decision", decision.to_owned()),
            ("reason", outcome.refusal.unwrap_or_default().to_owned()),
        ];
        self.admission.get_or_create(&labels).inc();
    }

    pub fn reconciled(&self, took: Duration) {
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    /// Counts one write: `action` names the engine's action, `result` is `ok`, `conflict` or `error`.
    pub fn write(&self, action: &'static str, result: &'static str) {
        self.writes.get_or_create(&vec![("action", action.to_owned()), ("result", result.to_owned())]).inc();
    }

    pub fn pins_rechecked(&self) {
        self.pins_rechecked.inc();
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the cluster gauges from the view, as of `now`.
    pub fn observe_view(&self, view: &View, now: Time) {
        let gated: Vec<Time> = view.gated_pods().map(|pod| pod.created).collect();
        self.gated_pods.set(i64::try_from(gated.len()).unwrap_or(i64::MAX));
        let oldest = gated.iter().min().map_or(0.0, |created| {
            now.duration_since(*created).as_secs_f64().max(0.0) // a pod from the future (clock skew) waited 0 s
        });
        self.gated_wait_seconds_max.set(oldest);
        // By reason; a pod no pass has judged yet has none.
        let mut by_reason: BTreeMap<&str, i64> = BTreeMap::new();
        for pod in view.gated_pods() {
            *by_reason.entry(pod.waiting.as_ref().map_or("", |w| w.reason.as_str())).or_insert(0) += 1;
        }
        self.gated_pods_waiting.clear();
        for (reason, pods) in by_reason.into_iter().filter(|(reason, _)| !reason.is_empty()) {
            self.gated_pods_waiting.get_or_create(&vec![("reason", reason.to_owned())]).set(pods);
        }

        self.allocatable_units.clear();
        self.free_units.clear();
        self.largest_free_on_node.clear();
        self.fragmented_units.clear();
        for class in view.classes() {
            let labels = vec![("class", class.name.clone())];
            let set = |family: &Family<Labels, Gauge>, units: u64| {
                family.get_or_create(&labels).set(i64::try_from(units).unwrap_or(i64::MAX));
            };
            set(&self.allocatable_units, class.published.allocatable_units);
            set(&self.free_units, class.published.free_units);
            set(&self.largest_free_on_node, class.published.largest_free_on_node);
            set(&self.fragmented_units, class.published.fragmented_units);
        }

        let mut phases = [(ClaimPhase::Pending, 0_i64), (ClaimPhase::Bound, 0), (ClaimPhase::Attached, 0)];
        for claim in view.claims() {
            if let Some((_, count)) = phases.iter_mut().find(|(phase, _)| *phase == claim.phase) {
                *count += 1;
            }
        }
        for (phase, count) in phases {
            self.claims.get_or_create(&vec![("phase", format!("{phase:?}"))]).set(count);
        }
    }

    /// The exposition, in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String never fails");
        text
    }
}

#[cfg(test)]
mod tests {
    use gpuclaim_engine::fixtures::{self, gated_launcher};
    use gpuclaim_engine::model::{GpuMode, Reason};

    use super::*;

    #[test]
    fn the_class_figures_and_the_gated_pods_by_reason_are_exported() {
        let resource = "nvidia.com/GH100_H100_SXM5_80GB";
        let now = Time::from_second(1_800_000_000).unwrap();
        let mut view = View::default();
        let mut h100 = fixtures::class("h100", resource, GpuMode::Passthrough, 8, 2);
        h100.published.fragmented_units = 4;
        view.upsert_class(h100);
        for (vm, reason) in [("four", Some("Fragmented")), ("five", Some("NoCapacity")), ("new", None)] {
            let mut pod = gated_launcher("tenant-a", vm, "[]", resource, 4, now);
            pod.waiting = reason.map(|reason| Reason { reason: reason.to_owned(), message: String::new() });
            view.upsert_pod(pod);
        }
        let metrics = Metrics::new();
        metrics.observe_view(&view, now);
        let text = metrics.encode();
        for line in [
            r#"gpuclaim_class_fragmented_units{class="h100"} 4"#,
            r#"gpuclaim_class_largest_free_on_node_units{class="h100"} 2"#,
            "gpuclaim_gated_pods 3",
            r#"gpuclaim_gated_pods_waiting{reason="Fragmented"} 1"#,
            r#"gpuclaim_gated_pods_waiting{reason="NoCapacity"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        // A pod no pass has judged yet is counted at the gate, under no reason.
        assert_eq!(text.lines().filter(|l| l.starts_with("gpuclaim_gated_pods_waiting{")).count(), 2);
    }
}
