//! The metrics the adapter exports (Prometheus text format): admission decisions and their handling time,
//! reconcile latency and writes, leadership; and what an operator's dashboard reads of the controller, which the
//! engine computes once for the twin and the live controller (`engine::controller::metrics`): gate waits, the
//! unit-seconds claims hold per tenant and class, pods at the gate by class and reason, claims by class and phase,
//! and each class's published units. docs/adapter.md lists every metric.
//!
//! The dashboard's figures are the reconciler's loop's, handed over after each turn ([`Metrics::observe_loop`]);
//! the gauges are read from the view after each pass, and only while this replica leads, so the replicas' series
//! never count the cluster twice. A class, tenant or reason that is gone loses its series.

use std::time::Duration;

use gpuclaim_engine::controller::metrics::{Figures, Gauges, Readings};
use gpuclaim_engine::model::{Time, View};
use gpuclaim_engine::review::{Outcome, Webhook};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The buckets of a review's handling time, in seconds: 100 µs (a review answered from the view) to 10 s (the
/// webhooks' timeout, past which the API server has given up).
pub const ADMISSION_DURATION_BUCKETS_SECONDS: [f64; 16] =
    [0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The prefix of every metric's name.
pub const PREFIX: &str = "gpuclaim";

pub struct Metrics {
    registry: Registry,
    admission: Family<Labels, Counter>,
    admission_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    reconcile_seconds: Histogram,
    writes: Family<Labels, Counter>,
    pins_rechecked: Counter,
    leader: Gauge,
    dashboard: std::sync::Arc<Dashboard>,
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

fn admission_histogram() -> Histogram {
    Histogram::new(ADMISSION_DURATION_BUCKETS_SECONDS)
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let admission = Family::<Labels, Counter>::default();
        registry.register(
            "admission_decisions",
            "Admission requests by webhook and decision (allowed, patched, denied with the refusal's reason; error: \
             no review could be answered, the HTTP status's reason: the API server then fails the call)",
            admission.clone(),
        );
        let admission_seconds = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            admission_histogram as fn() -> Histogram,
        );
        registry.register(
            "admission_duration_seconds",
            "Time from a request's arrival at a webhook to its answer, answered or refused",
            admission_seconds.clone(),
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
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the lease and reconciles", leader.clone());
        let dashboard = std::sync::Arc::new(Dashboard::default());
        registry.register_collector(Box::new(dashboard.clone()));
        Metrics { registry, admission, admission_seconds, reconcile_seconds, writes, pins_rechecked, leader, dashboard }
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

    /// Counts one request `webhook` could not answer with a review (`reason`: the HTTP status's, as Kubernetes
    /// words it: `BadRequest`, `Timeout`, `ServiceUnavailable`...).
    pub fn admission_error(&self, webhook: Webhook, reason: &'static str) {
        let labels = vec![
            ("webhook", webhook.name().to_owned()),
            ("decision", "error".to_owned()),
            ("reason", reason.to_owned()),
        ];
        self.admission.get_or_create(&labels).inc();
    }

    /// One request to `webhook` handled in `took`, answered or refused.
    pub fn admission_handled(&self, webhook: Webhook, took: Duration) {
        self.admission_seconds.get_or_create(&vec![("webhook", webhook.name().to_owned())]).observe(took.as_secs_f64());
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

    /// What the controller's loop measured so far, and — `view` given, while this replica leads — the cluster's
    /// gauges as the view has them; without a view the gauges' series go (a standby exports none).
    pub fn observe_loop(&self, figures: &Figures, view: Option<&View>) {
        let gauges = view.map(Gauges::of);
        let mut state = self.dashboard.state.lock();
        state.figures.clone_from(figures);
        state.gauges = gauges;
    }

    /// The exposition in the OpenMetrics text format (what Prometheus asks for).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String never fails");
        text
    }

    /// The exposition in Prometheus's classic text format (0.0.4): what a scrape that does not ask for OpenMetrics
    /// gets (curl, `promtool check metrics`), as client_golang answers.
    pub fn encode_classic(&self) -> String {
        classic(&self.encode())
    }
}

/// An OpenMetrics exposition as Prometheus's classic text format: a counter's HELP and TYPE name its `_total`
/// samples, and there is no `# EOF`. (prometheus-client writes OpenMetrics only; the rest of what it writes here —
/// gauges, histograms, no units, no `_created` — reads the same in both.)
pub fn classic(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> =
        openmetrics.lines().filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter")).collect();
    let mut text = String::with_capacity(openmetrics.len() + 8 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let described = ["# HELP ", "# TYPE "].into_iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        text.push_str(described.as_deref().unwrap_or(line));
        text.push('\n');
    }
    text
}

/// The dashboard's figures as of the last turn of the loop, rendered at the time of each scrape.
#[derive(Debug, Default)]
struct Dashboard {
    state: parking_lot::Mutex<DashboardState>,
}

#[derive(Debug, Default)]
struct DashboardState {
    figures: Figures,
    gauges: Option<Gauges>,
}

impl Collector for Dashboard {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Time::now();
        let readings = {
            let state = self.state.lock();
            let mut readings = state.figures.readings(now);
            readings.gauges.clone_from(&state.gauges);
            readings
        };
        encode_readings(&readings, now, encoder)
    }
}

/// Readings fixed at one time: what the twin renders of a run.
#[derive(Debug)]
struct Recorded {
    readings: Readings,
    at: Time,
}

impl Collector for Recorded {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_readings(&self.readings, self.at, encoder)
    }
}

/// `readings` as of `at` in the Prometheus text format, with the names, labels and buckets the live controller
/// exports: what the twin's run would have shown on a scrape (`gpuclaim sim run --metrics-out`).
pub fn exposition(readings: &Readings, at: Time) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Recorded { readings: readings.clone(), at }));
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String never fails");
    text
}

/// The dashboard's metrics (names without the prefix), each with its help and type.
fn encode_readings(readings: &Readings, now: Time, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(
        "gate_wait_seconds",
        "Time pods waited at the placement gate, from the gate's addition (the pod's creation) to the ungate or the \
         pod's deletion (outcome), by class of the pod's set",
        None,
        MetricType::Histogram,
    )?;
    for ((class, outcome), histogram) in &readings.gate_waits {
        let labels = [("class", class.as_str()), ("outcome", outcome.name())];
        // prometheus-client adds the buckets up itself, and writes `+Inf` for f64::MAX.
        let buckets: Vec<(f64, u64)> = histogram
            .per_bucket()
            .map(|(bound, count)| (if bound.is_finite() { bound } else { f64::MAX }, count))
            .collect();
        metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            histogram.sum_seconds(),
            histogram.count(),
            &buckets,
            None,
        )?;
    }
    let mut metric = encoder.encode_descriptor(
        "units_bound_seconds",
        "Unit-seconds held by claims bound to a node (Bound or Attached), by namespace and class: GPU-hours are \
         this over 3600",
        None,
        MetricType::Counter,
    )?;
    for ((namespace, class), seconds) in &readings.units_bound_seconds {
        let labels = [("namespace", namespace.as_str()), ("class", class.as_str())];
        metric.encode_family(&labels)?.encode_counter::<NoLabelSet, _, f64>(seconds, None)?;
    }
    let Some(gauges) = &readings.gauges else { return Ok(()) };
    let mut metric = encoder.encode_descriptor(
        "gated_pods",
        "Pods waiting at the placement gate, by class of the pod's set and the controller's reason",
        None,
        MetricType::Gauge,
    )?;
    for ((class, reason), pods) in &gauges.gated_pods {
        metric.encode_family(&[("class", class.as_str()), ("reason", reason.as_str())])?.encode_gauge(pods)?;
    }
    let mut metric = encoder.encode_descriptor(
        "gated_pod_wait_seconds_max",
        "How long the longest-waiting pod at the placement gate has waited, by class",
        None,
        MetricType::Gauge,
    )?;
    for (class, seconds) in gauges.gated_wait_seconds_max(now) {
        metric.encode_family(&[("class", class)])?.encode_gauge(&seconds)?;
    }
    let mut metric = encoder.encode_descriptor("claims", "GPU claims by class and phase", None, MetricType::Gauge)?;
    for ((class, phase), claims) in &gauges.claims {
        metric.encode_family(&[("class", class.as_str()), ("phase", phase_name(*phase))])?.encode_gauge(claims)?;
    }
    let published: [(&str, &str, UnitsOf); 4] = [
        ("class_allocatable_units", "Units on the nodes a class may use", |p| p.allocatable_units),
        ("class_free_units", "Units of a class not bound nor taken", |p| p.free_units),
        ("class_largest_free_on_node_units", "The most free units of a class on one node", |p| p.largest_free_on_node),
        ("class_fragmented_units", "Free units of a class on nodes that cannot take its most common claim size", |p| {
            p.fragmented_units
        }),
    ];
    for (name, help, units) in published {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (class, status) in &gauges.classes {
            metric.encode_family(&[("class", class.as_str())])?.encode_gauge(&units(status))?;
        }
    }
    Ok(())
}

/// Which of a class's published figures a gauge shows.
type UnitsOf = fn(&gpuclaim_engine::model::Published) -> u64;

fn phase_name(phase: gpuclaim_engine::model::ClaimPhase) -> &'static str {
    use gpuclaim_engine::model::ClaimPhase;
    match phase {
        ClaimPhase::Pending => "Pending",
        ClaimPhase::Bound => "Bound",
        ClaimPhase::Attached => "Attached",
    }
}
