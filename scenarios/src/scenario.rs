//! Scenario files (YAML): the cluster (classes, node groups, tenants), the workloads (VM arrivals with lifetimes,
//! with claim templates or with held claims the tenant orders first), timed VMs, timed cluster events (nodes added,
//! cordoned; the webhook's replicas), the duration and the seed. Loading builds the world; bad input names the field
//! and the reason.
//!
//! ```yaml
//! name: small
//! duration: 6h
//! cluster:
//!   classes: [{name: h100, resourceName: nvidia.com/H100, mode: Passthrough, maxCount: 8}]
//!   nodes: [{prefix: gpu-, count: 4, cpu: "64", memory: 512Gi, devices: {nvidia.com/H100: 8}}]
//!   tenants: [{name: tenant-a, budgets: {h100: 16}}]
//! workloads:
//! - {tenant: tenant-a, prefix: train, arrivalsPerHour: 6, meanLifetime: 1h, cpu: "4", memory: 16Gi,
//!    gpus: [{claimTemplate: {class: h100, count: 2}}]}
//! ```

use std::collections::BTreeMap;

use gpuclaim_engine::keys::{self, kubevirt};
use gpuclaim_engine::message::readable;
use gpuclaim_engine::model::{Claim, Class, GpuMode, Node, Placement, Published, View};
use gpuclaim_engine::quantity;
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_engine::rules::{Refusal, RenderRefusal, read_values, render_vm};
use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::kubevirt::launcher::DEVICE_PLUGINS;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::world::{
    DeploymentSpec, Event, Faults, TenantWrite, Timing, VmSpec, Workload as WorldWorkload, World, WorldError,
};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use serde::Deserialize;

use crate::check::{Expectation, ExpectationSpec, REACTION_TIME_DEFAULT};

/// The most nodes (the cluster's and those events add), workloads and controller replicas a scenario may declare:
/// bounds, so a typo cannot ask for the impossible.
pub const NODES_MAX: u32 = 1_000_000;
pub const WORKLOADS_MAX: usize = 10_000;
pub const CONTROLLER_REPLICAS_MAX: u32 = 100;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Free lines about where the scenario came from (an imported JSON scenario's header; YAML has comments).
    #[serde(default)]
    pub notes: Vec<String>,
    /// The run's seed, unless the command line gives one.
    #[serde(default)]
    pub seed: Option<u64>,
    pub duration: Duration,
    pub cluster: Cluster,
    #[serde(default)]
    pub workloads: Vec<Workload>,
    #[serde(default)]
    pub vms: Vec<TimedVm>,
    /// Cluster events at given times.
    #[serde(default)]
    pub events: Vec<TimedEvent>,
    /// The GPU controller's Deployment (default: 2 replicas, 2 s cache sync, 10 s restart).
    #[serde(default)]
    pub controller: Option<ControllerSpec>,
    /// Faults by rate (all off by default).
    #[serde(default)]
    pub faults: Option<FaultsSpec>,
    /// The engine variants the scenario runs, by name (default: the shipped engine alone).
    #[serde(default)]
    pub variants: Vec<String>,
    /// What the runs must show (see `check::expect`).
    #[serde(default)]
    pub expect: Vec<ExpectationSpec>,
    /// How the invariant checks judge settling (default reaction time 60 s).
    #[serde(default)]
    pub invariants: Option<InvariantsSpec>,
    /// How the API server calls the webhooks.
    #[serde(default)]
    pub admission: Option<AdmissionSpec>,
}

/// The invariant checks' settings.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvariantsSpec {
    /// How long the controller may take to act on a change (usage records, liveness).
    #[serde(default)]
    pub reaction_time: Option<Duration>,
}

/// The admission chain's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionSpec {
    /// Another mutating webhook changes pods after ours, so the API server calls ours again
    /// (`reinvocationPolicy: IfNeeded`).
    #[serde(default)]
    pub reinvoke_pod_webhook: bool,
}

/// A duration written `90s`, `15m`, `6h`, `30d` or `1500ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duration(pub Millis);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text).map(Duration).map_err(serde::de::Error::custom)
    }
}

/// A duration as Go writes them: one or more `<integer><unit>` parts (`90s`, `6h10m`, `1500ms`).
pub(crate) fn parse_duration(text: &str) -> Result<Millis, String> {
    let mut rest = text;
    let mut total = 0u64;
    if rest.is_empty() {
        return Err(format!("{text:?} is not a duration like 90s, 15m, 6h10m or 30d"));
    }
    while !rest.is_empty() {
        let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(split);
        let value: u64 =
            digits.parse().map_err(|_| format!("{text:?} is not a duration like 90s, 15m, 6h10m or 30d"))?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("{text:?} has no unit (ms, s, m, h or d)")),
        };
        let part = value.checked_mul(scale).ok_or_else(|| format!("{text:?} is too long"))?;
        total = total.checked_add(part).ok_or_else(|| format!("{text:?} is too long"))?;
        rest = next;
    }
    Ok(Millis(total))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    pub classes: Vec<ClassSpec>,
    pub nodes: Vec<NodeGroup>,
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
    /// The platform switch (`_cluster.gpu-claims-enabled`); on unless said otherwise.
    #[serde(default = "yes")]
    pub claims_enabled: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClassSpec {
    pub name: String,
    pub resource_name: String,
    pub mode: GpuMode,
    pub max_count: u32,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub live_migratable: bool,
    /// The class's placement policy (`BestFit`, `Spread`, `FragmentationAware`; default `BestFit`).
    #[serde(default)]
    pub placement: Placement,
}

/// `count` identical nodes named `<prefix><index>` (four digits).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeGroup {
    pub prefix: String,
    pub count: u32,
    pub cpu: String,
    pub memory: String,
    #[serde(default)]
    pub devices: BTreeMap<String, u64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantSpec {
    pub name: String,
    #[serde(default)]
    pub vgpu_entitled: bool,
    /// class → units (a ResourceQuota's `requests.gpu.cozystack.io/<class>`).
    #[serde(default)]
    pub budgets: BTreeMap<String, u64>,
    /// Held claims the tenant ordered before the run (Pending: the controller binds them).
    #[serde(default)]
    pub claims: Vec<HeldClaimSpec>,
}

/// A held claim a tenant holds when the run starts.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeldClaimSpec {
    pub name: String,
    pub class: String,
    pub count: u32,
}

/// VMs arriving as a Poisson process, each running for an exponentially distributed time once Running.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    pub tenant: String,
    pub prefix: String,
    pub arrivals_per_hour: f64,
    pub mean_lifetime: Duration,
    /// Arrivals begin at this time (the first is drawn from it; default: the run's start).
    #[serde(default)]
    pub from: Option<Duration>,
    /// No arrival after this time (default: arrivals go on to the run's end). With `from`, a surge: a rate for a
    /// window of the run.
    #[serde(default)]
    pub until: Option<Duration>,
    /// The VMs' `gpus` (raw names or references); empty when the workload orders held claims.
    #[serde(default)]
    pub gpus: Vec<GpuEntry>,
    /// Each VM's tenant orders a held claim like this first (through the order webhook) and the VM uses it; the
    /// claim is deleted when the VM is gone. A refused order creates no VM.
    #[serde(default)]
    pub held_claim: Option<ClaimTemplate>,
    /// The VMs' disks are DataVolumes on local storage with `volumeBindingMode: WaitForFirstConsumer`.
    #[serde(default)]
    pub wffc_volume: bool,
    pub cpu: String,
    pub memory: String,
}

/// Something that happens to the cluster at a given time: exactly one of the optional fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimedEvent {
    pub at: Duration,
    /// Nodes join (named `<prefix><nnnn>`, numbered on from 0 like the cluster's groups: use a new prefix).
    #[serde(default)]
    pub add_nodes: Option<NodeGroup>,
    #[serde(default)]
    pub cordon: Option<String>,
    #[serde(default)]
    pub uncordon: Option<String>,
    /// The webhook Service's ready replicas (0: an outage; creates the webhooks select are refused).
    #[serde(default)]
    pub webhook_replicas: Option<u32>,
    /// `<namespace>/<vm>`: something deletes the VM's launcher pod.
    #[serde(default)]
    pub delete_launcher: Option<String>,
    /// A node's kubelet goes silent (NotReady after the grace period, its pods evicted 300 s later).
    #[serde(default)]
    pub node_lost: Option<String>,
    /// A silent node's kubelet posts status again.
    #[serde(default)]
    pub node_recovered: Option<String>,
    /// `<namespace>/<vm>`: a user live-migrates the VM's VMI.
    #[serde(default)]
    pub migrate: Option<String>,
    /// `kubectl drain <node>`: cordon, evacuate the VMIs by live migration, evict the controller's replicas within
    /// their PodDisruptionBudget.
    #[serde(default)]
    pub drain: Option<String>,
    /// The GPU controller replica of this index crashes (its kubelet restarts it).
    #[serde(default)]
    pub controller_crash: Option<usize>,
    /// The device plugin reports units of a resource on a node unhealthy.
    #[serde(default)]
    pub device_failure: Option<DeviceFailureSpec>,
    /// A tenant tries a write (an order, a deletion, or one the chart's admission configuration refuses).
    #[serde(default)]
    pub tenant_write: Option<TenantWriteSpec>,
}

/// A tenant's write as a scenario gives it: `write` names it (`RaiseClaimCount`, ...; see
/// [`gpuclaim_sim::world::TenantWrite`]), and the fields it needs among `claim`, `class`, `count` and `vm`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantWriteSpec {
    pub tenant: String,
    pub write: String,
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub class: Option<String>,
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub vm: Option<String>,
}

impl TenantWriteSpec {
    /// The write, with the fields it needs (`field` is its path in the file, for errors).
    fn parse(&self, field: &str) -> Result<TenantWrite, ScenarioError> {
        let needed = |name: &str, value: &Option<String>| {
            value.clone().ok_or_else(|| invalid(format!("{field}.{name}"), format!("required by write {}", self.write)))
        };
        let count = || {
            self.count.filter(|count| *count > 0).ok_or_else(|| {
                invalid(format!("{field}.count"), format!("a positive count is required by write {}", self.write))
            })
        };
        Ok(match self.write.as_str() {
            "OrderClaim" => TenantWrite::OrderClaim {
                claim: needed("claim", &self.claim)?,
                class: needed("class", &self.class)?,
                count: count()?,
            },
            "OrderMarkedClaim" => TenantWrite::OrderMarkedClaim {
                claim: needed("claim", &self.claim)?,
                class: needed("class", &self.class)?,
                count: count()?,
            },
            "DeleteClaim" => TenantWrite::DeleteClaim { claim: needed("claim", &self.claim)? },
            "RaiseClaimCount" => TenantWrite::RaiseClaimCount { claim: needed("claim", &self.claim)?, count: count()? },
            "SwitchClaimClass" => TenantWrite::SwitchClaimClass {
                claim: needed("claim", &self.claim)?,
                class: needed("class", &self.class)?,
            },
            "DropTemplateMark" => TenantWrite::DropTemplateMark { claim: needed("claim", &self.claim)? },
            "DetachClaim" => TenantWrite::DetachClaim { claim: needed("claim", &self.claim)? },
            "ReleaseFinalizer" => TenantWrite::ReleaseFinalizer { claim: needed("claim", &self.claim)? },
            "CloseUsage" => TenantWrite::CloseUsage { claim: needed("claim", &self.claim)? },
            "DeleteUsage" => TenantWrite::DeleteUsage { claim: needed("claim", &self.claim)? },
            "RemoveGate" => TenantWrite::RemoveGate { vm: needed("vm", &self.vm)? },
            "ForgeAttachments" => TenantWrite::ForgeAttachments { vm: needed("vm", &self.vm)?, count: count()? },
            "EntitleNamespace" => TenantWrite::EntitleNamespace,
            other => {
                return Err(invalid(
                    format!("{field}.write"),
                    format!("{other:?} is not a tenant write; known: {}", TenantWrite::NAMES.join(", ")),
                ));
            }
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceFailureSpec {
    pub node: String,
    pub resource: String,
    #[serde(default = "one")]
    pub units: u64,
}

fn one() -> u64 {
    1
}

/// Faults by rate, switched on for the whole run.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultsSpec {
    /// Probability that a GPU controller write meets a conflict.
    #[serde(default)]
    pub conflict_rate: f64,
    /// Watch changes arrive after a lag uniform in [100 ms, this].
    #[serde(default)]
    pub watch_lag_max: Option<Duration>,
    #[serde(default)]
    pub controller_crash_every: Option<Duration>,
    #[serde(default)]
    pub node_loss_every: Option<Duration>,
    #[serde(default)]
    pub node_loss_duration: Option<Duration>,
    #[serde(default)]
    pub device_failure_every: Option<Duration>,
}

/// The GPU controller's Deployment in a scenario.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControllerSpec {
    #[serde(default = "two")]
    pub replicas: u32,
    #[serde(default)]
    pub cache_sync: Option<Duration>,
    #[serde(default)]
    pub restart_after: Option<Duration>,
}

fn two() -> u32 {
    2
}

/// One VM created at a given time: either `gpus`, `cpu` and `memory`, or `chart`, the VM chart's values as the
/// tenant writes them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimedVm {
    pub at: Duration,
    pub tenant: String,
    /// The VM's name (with `chart`, the release's: the chart names the VM after it).
    pub name: String,
    #[serde(default)]
    pub gpus: Option<Vec<GpuEntry>>,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    /// The VM as `charts/virtual-machine` renders it from these values.
    #[serde(default)]
    pub chart: Option<ChartValues>,
    /// How long it runs once Running.
    #[serde(default)]
    pub lifetime: Option<Duration>,
    /// When the tenant stops and deletes it (absolute), whether it ever ran or not: a trace's deletion time.
    #[serde(default)]
    pub stop_at: Option<Duration>,
    /// Its disk is a DataVolume on local storage with `volumeBindingMode: WaitForFirstConsumer`.
    #[serde(default)]
    pub wffc_volume: bool,
}

impl TimedVm {
    /// Its `gpus` entries, given plainly or in its chart values (none where those do not read: such a scenario does
    /// not build).
    pub fn gpu_entries(&self) -> Vec<GpuEntry> {
        match (&self.gpus, &self.chart) {
            (Some(gpus), _) => gpus.clone(),
            (None, Some(chart)) => {
                let values = serde_json::json!({ "gpus": chart.gpus });
                read_values(&values).map(|read| read.gpus).unwrap_or_default()
            }
            (None, None) => Vec::new(),
        }
    }
}

/// A tenant's values for the VM chart (`charts/virtual-machine`, its `values.yaml` says what each does). The twin
/// renders them with the engine's VM render, never with helm (the shared table of render cases holds the two to the
/// same answers), so a refusal is the chart's, word for word, and a refused render builds no scenario, as `helm
/// template` installs nothing. The VM is sized by `resources` (the twin does not model instance types); disks are
/// not modelled (`wffcVolume` on the VM says how its disk binds); `_cluster` is the platform's, taken from
/// `cluster.claimsEnabled`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartValues {
    #[serde(default)]
    pub instance_type: Option<String>,
    #[serde(default)]
    pub instance_preference: Option<String>,
    #[serde(default)]
    pub resources: Option<ChartResources>,
    #[serde(default)]
    pub run_strategy: Option<String>,
    #[serde(default)]
    pub container_disk: Option<serde_json::Value>,
    #[serde(default)]
    pub disks: Option<serde_json::Value>,
    /// As the chart takes it (read by `gpuclaim_engine::rules::read_values`, shapes and rules alike).
    #[serde(default)]
    pub gpus: serde_json::Value,
    #[serde(default, rename = "_cluster")]
    pub cluster: Option<serde_json::Value>,
    #[serde(default, rename = "_namespace")]
    pub namespace: Option<serde_json::Value>,
}

/// The chart's `resources`: whole cores and a memory quantity.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartResources {
    #[serde(default)]
    pub cpu: Option<serde_json::Value>,
    #[serde(default)]
    pub memory: Option<String>,
}

impl ChartValues {
    /// The VM these values render (`field`: where they are in the file, for errors).
    fn vm_spec(&self, tenant: &str, name: &str, claims_enabled: bool, field: &str) -> Result<VmSpec, ScenarioError> {
        if self.cluster.is_some() || self.namespace.is_some() {
            let key = if self.cluster.is_some() { keys::CLUSTER_VALUES } else { "_namespace" };
            let reason = "is the platform's, not the tenant's; the twin takes it from cluster.claimsEnabled";
            return Err(invalid(format!("{field}.{key}"), reason));
        }
        if let Some(strategy) = self.run_strategy.as_deref().filter(|s| *s != "Always") {
            return Err(invalid(
                format!("{field}.runStrategy"),
                format!("the twin runs VMs Always; {strategy:?} is not modelled"),
            ));
        }
        let resources = self.resources.as_ref();
        let (Some(cpu), Some(memory)) =
            (resources.and_then(|r| r.cpu.as_ref()), resources.and_then(|r| r.memory.as_ref()))
        else {
            return Err(invalid(
                format!("{field}.resources"),
                "give cpu and memory: the twin sizes a chart VM by them (it does not model instance types)",
            ));
        };
        let cores = match cpu {
            serde_json::Value::Number(n) if n.as_u64().is_some_and(|n| n > 0) => n.to_string(),
            serde_json::Value::String(s) if !s.starts_with('0') && s.parse::<u64>().is_ok() => s.clone(),
            _ => {
                return Err(invalid(format!("{field}.resources.cpu"), format!("{cpu} is not a whole number of cores")));
            }
        };
        let mut values = serde_json::Map::new();
        values.insert("gpus".to_owned(), self.gpus.clone());
        let switch = if claims_enabled { keys::TRUE } else { "false" };
        values.insert(keys::CLUSTER_VALUES.to_owned(), serde_json::json!({ keys::CLUSTER_SWITCH: switch }));
        let refused = |refusal: RenderRefusal| {
            let reason = format!("the VM chart refuses it ({}): {refusal}", Refusal::reason(&refusal));
            invalid(field, reason)
        };
        let read = read_values(&serde_json::Value::Object(values)).map_err(refused)?;
        render_vm(&read.gpus, read.claims_enabled).map_err(refused)?;
        vm_spec(tenant, name, &read.gpus, &cores, memory, &format!("{field}.resources"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("field {}: {}", readable(.field), readable(.reason))]
    Invalid { field: String, reason: String },
    #[error(transparent)]
    World(#[from] WorldError),
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid { field: field.into(), reason: reason.into() }
}

/// Parses a scenario tree (a study's base with a variant's overrides): JSON is YAML, so the scenario parser reads it as
/// it is written, with the same checks and messages as a file.
pub fn scenario_from_tree(tree: &serde_json::Value) -> Result<Scenario, String> {
    parse_scenario(&tree.to_string()).map_err(|e| e.to_string())
}

/// Parses a scenario, naming the field that does not fit.
pub fn parse_scenario(text: &str) -> Result<Scenario, ScenarioError> {
    // A JSON document is read straight from the text first: an imported trace's scenario is megabytes, and going
    // through values doubled its parse. Any error takes the path through values, whose messages name the field.
    let direct = if opens_as_json(text) { serde_json::from_str::<Scenario>(text).ok() } else { None };
    let scenario = match direct {
        Some(scenario) => scenario,
        None => parse_value(text)?,
    };
    scenario.variants()?;
    scenario.expectations()?;
    Ok(scenario)
}

/// Whether a document opens as a JSON object (and may be JSON rather than YAML).
fn opens_as_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// A scenario through JSON values (see [`parse_scenario`]).
fn parse_value(text: &str) -> Result<Scenario, ScenarioError> {
    // Through JSON values: a VM's `gpus` entries are maps (`{claimTemplate: ...}`), which YAML's enum mapping would
    // want as tags.
    // JSON is YAML, and serde_json reads it about ten times faster than the YAML parser (an imported trace is
    // megabytes): a document that opens as a JSON object is tried as JSON first, and YAML still reads it if not.
    let json = opens_as_json(text).then(|| serde_json::from_str(text).ok()).flatten();
    let value: serde_json::Value = match json {
        Some(value) => value,
        None => {
            gpuclaim_engine::yaml::from_str(text).map_err(|e| invalid("(scenario)", format!("not valid YAML: {e}")))?
        }
    };
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let field = e.path().to_string();
        invalid(if field == "." { "(scenario)".to_owned() } else { field }, e.into_inner().to_string())
    })
}

impl Scenario {
    /// The engine variants it runs, named: the shipped engine unless it lists others.
    pub fn variants(&self) -> Result<Vec<(String, Variant)>, ScenarioError> {
        if self.variants.is_empty() {
            return Ok(vec![("shipped".to_owned(), Variant::SHIPPED)]);
        }
        let mut named = Vec::new();
        for (index, name) in self.variants.iter().enumerate() {
            let variant = Variant::named(name).map_err(|e| invalid(format!("variants[{index}]"), e.to_string()))?;
            if named.iter().any(|(seen, _)| seen == name) {
                return Err(invalid(format!("variants[{index}]"), format!("{name:?} is listed twice")));
            }
            named.push((name.clone(), variant));
        }
        Ok(named)
    }

    /// Its expectations, checked: each names one subject and when, and only variants the scenario runs.
    pub fn expectations(&self) -> Result<Vec<Expectation>, ScenarioError> {
        let variants = self.variants()?;
        let mut parsed = Vec::with_capacity(self.expect.len());
        for (index, spec) in self.expect.iter().enumerate() {
            let field = format!("expect[{index}]");
            let expectation = spec.parse(&field).map_err(|(field, reason)| invalid(field, reason))?;
            for name in expectation.variants.iter().flatten() {
                if !variants.iter().any(|(known, _)| known == name) {
                    return Err(invalid(
                        format!("{field}.variants"),
                        format!("{name:?} is not among the scenario's variants"),
                    ));
                }
            }
            parsed.push(expectation);
        }
        Ok(parsed)
    }

    /// The reaction time the invariant checks allow the controller.
    pub fn reaction_time(&self) -> Millis {
        self.invariants.as_ref().and_then(|i| i.reaction_time).map_or(REACTION_TIME_DEFAULT, |d| d.0)
    }

    /// The world this scenario starts from, with its workloads' first arrivals and its timed VMs scheduled.
    pub fn build(&self, seed: u64, log: EventLog) -> Result<World, ScenarioError> {
        let mut world = World::new(seed, self.store()?, Timing::default(), log);
        world.claims_enabled = self.cluster.claims_enabled;
        world.api.admission.reinvoke_pod_webhook = self.admission.as_ref().is_some_and(|a| a.reinvoke_pod_webhook);
        if let Some(controller) = &self.controller {
            if controller.replicas > CONTROLLER_REPLICAS_MAX {
                return Err(invalid("controller.replicas", format!("more than {CONTROLLER_REPLICAS_MAX}")));
            }
            let mut spec = DeploymentSpec { replicas: controller.replicas, ..DeploymentSpec::default() };
            if let Some(sync) = &controller.cache_sync {
                spec.cache_sync = sync.0;
            }
            if let Some(restart) = &controller.restart_after {
                spec.restart_after = restart.0;
            }
            world.deploy_controller(spec);
        }
        if self.workloads.len() > WORKLOADS_MAX {
            return Err(invalid("workloads", format!("more than {WORKLOADS_MAX}")));
        }
        for (index, workload) in self.workloads.iter().enumerate() {
            let field = format!("workloads[{index}]");
            if !(workload.arrivals_per_hour > 0.0 && workload.arrivals_per_hour.is_finite()) {
                return Err(invalid(format!("{field}.arrivalsPerHour"), "must be a positive number"));
            }
            if workload.gpus.is_empty() == workload.held_claim.is_none() {
                return Err(invalid(field, "give exactly one of gpus and heldClaim"));
            }
            let mut template =
                vm_spec(&workload.tenant, &workload.prefix, &workload.gpus, &workload.cpu, &workload.memory, &field)?;
            template.wffc_volume = workload.wffc_volume;
            let mut generator = WorldWorkload::new(template, workload.arrivals_per_hour, workload.mean_lifetime.0);
            let from = workload.from.as_ref().map_or(Millis(0), |d| d.0);
            let until = workload.until.as_ref().map(|d| d.0);
            if until.is_some_and(|until| until <= from) {
                return Err(invalid(format!("{field}.until"), "is not after `from` (or the run's start)"));
            }
            generator = generator.within(from, until);
            if let Some(order) = &workload.held_claim {
                generator = generator.ordering(order.clone());
            }
            world.add_workload(generator)?;
        }
        for (index, vm) in self.vms.iter().enumerate() {
            let mut spec = self.timed_vm_spec(vm, &format!("vms[{index}]"))?;
            spec.lifetime = vm.lifetime.map(|d| d.0);
            spec.wffc_volume = vm.wffc_volume;
            if let Some(stop_at) = &vm.stop_at {
                if stop_at.0 < vm.at.0 {
                    return Err(invalid(format!("vms[{index}].stopAt"), "is before `at`"));
                }
                let stop = Event::StopVm { namespace: vm.tenant.as_str().into(), vm: vm.name.as_str().into() };
                world.schedule_at(stop_at.0, stop)?;
            }
            world.schedule_at(vm.at.0, Event::CreateVm(Box::new(spec)))?;
        }
        if let Some(spec) = &self.faults {
            if !(0.0..=1.0).contains(&spec.conflict_rate) {
                return Err(invalid("faults.conflictRate", "must be a probability in [0, 1]"));
            }
            for (field, every) in [
                ("controllerCrashEvery", &spec.controller_crash_every),
                ("nodeLossEvery", &spec.node_loss_every),
                ("deviceFailureEvery", &spec.device_failure_every),
            ] {
                if every.as_ref().is_some_and(|d| d.0 < Millis::seconds(1)) {
                    return Err(invalid(format!("faults.{field}"), "must be at least 1s"));
                }
            }
            world.set_faults(Faults {
                conflict_rate: spec.conflict_rate,
                watch_lag_max: spec.watch_lag_max.as_ref().map(|d| d.0),
                controller_crash_every: spec.controller_crash_every.as_ref().map(|d| d.0),
                node_loss_every: spec.node_loss_every.as_ref().map(|d| d.0),
                node_loss_duration: spec.node_loss_duration.as_ref().map(|d| d.0),
                device_failure_every: spec.device_failure_every.as_ref().map(|d| d.0),
            })?;
        }
        let mut nodes_declared: u64 = self.cluster.nodes.iter().map(|g| u64::from(g.count)).sum();
        for (index, timed) in self.events.iter().enumerate() {
            let field = format!("events[{index}]");
            let given = [
                timed.add_nodes.is_some(),
                timed.cordon.is_some(),
                timed.uncordon.is_some(),
                timed.webhook_replicas.is_some(),
                timed.delete_launcher.is_some(),
                timed.node_lost.is_some(),
                timed.node_recovered.is_some(),
                timed.migrate.is_some(),
                timed.drain.is_some(),
                timed.controller_crash.is_some(),
                timed.device_failure.is_some(),
                timed.tenant_write.is_some(),
            ];
            if given.iter().filter(|given| **given).count() != 1 {
                return Err(invalid(
                    field,
                    "give exactly one of addNodes, cordon, uncordon, webhookReplicas, deleteLauncher, nodeLost, \
                     nodeRecovered, migrate, drain, controllerCrash, deviceFailure and tenantWrite",
                ));
            }
            let event = if let Some(group) = &timed.add_nodes {
                nodes_declared += u64::from(group.count);
                if nodes_declared > u64::from(NODES_MAX) {
                    return Err(invalid(format!("{field}.addNodes"), format!("more than {NODES_MAX} nodes in all")));
                }
                Event::AddNodes(nodes_of(group, &format!("{field}.addNodes"))?)
            } else if let Some(node) = &timed.cordon {
                Event::Cordon { node: node.clone(), cordoned: true }
            } else if let Some(node) = &timed.uncordon {
                Event::Cordon { node: node.clone(), cordoned: false }
            } else if let Some(vm) = &timed.delete_launcher {
                let (namespace, vm) = namespaced(vm, &format!("{field}.deleteLauncher"))?;
                Event::DeleteLauncher { namespace, vm }
            } else if let Some(vm) = &timed.migrate {
                let (namespace, vmi) = namespaced(vm, &format!("{field}.migrate"))?;
                Event::Migrate { namespace, vmi }
            } else if let Some(node) = &timed.drain {
                Event::Drain { node: node.clone() }
            } else if let Some(index) = timed.controller_crash {
                Event::ControllerCrash { index }
            } else if let Some(failure) = &timed.device_failure {
                Event::DeviceFailure {
                    node: failure.node.clone(),
                    resource: failure.resource.clone(),
                    units: failure.units,
                }
            } else if let Some(node) = &timed.node_lost {
                Event::NodeLost { node: node.clone() }
            } else if let Some(node) = &timed.node_recovered {
                Event::NodeRecovered { node: node.clone() }
            } else if let Some(spec) = &timed.tenant_write {
                let write = spec.parse(&format!("{field}.tenantWrite"))?;
                Event::TenantWrite { namespace: spec.tenant.as_str().into(), write: Box::new(write) }
            } else {
                Event::SetWebhookReplicas(timed.webhook_replicas.expect("one is given"))
            };
            world.schedule_at(timed.at.0, event)?;
        }
        Ok(world)
    }

    /// A timed VM's spec: from its chart values, or from `gpus`, `cpu` and `memory`.
    fn timed_vm_spec(&self, vm: &TimedVm, field: &str) -> Result<VmSpec, ScenarioError> {
        if let Some(chart) = &vm.chart {
            let plain = [("gpus", vm.gpus.is_some()), ("cpu", vm.cpu.is_some()), ("memory", vm.memory.is_some())];
            if let Some((key, _)) = plain.iter().find(|(_, given)| *given) {
                return Err(invalid(format!("{field}.{key}"), "give it in chart (the chart's values) or drop chart"));
            }
            return chart.vm_spec(&vm.tenant, &vm.name, self.cluster.claims_enabled, &format!("{field}.chart"));
        }
        let required = |key: &str, value: &Option<String>| {
            value.clone().ok_or_else(|| invalid(format!("{field}.{key}"), "required (or give chart)"))
        };
        let (cpu, memory) = (required("cpu", &vm.cpu)?, required("memory", &vm.memory)?);
        let gpus = vm.gpus.as_ref().ok_or_else(|| invalid(format!("{field}.gpus"), "required (or give chart)"))?;
        vm_spec(&vm.tenant, &vm.name, gpus, &cpu, &memory, field)
    }

    fn store(&self) -> Result<View, ScenarioError> {
        let mut store = View::default();
        for class in &self.cluster.classes {
            store.upsert_class(Class {
                name: class.name.clone(),
                resource_name: class.resource_name.clone(),
                mode: class.mode,
                max_count: class.max_count,
                node_selector: class.node_selector.clone().into(),
                tolerations: class.tolerations.clone().into(),
                live_migratable: class.live_migratable,
                placement: class.placement,
                published: Published::default(),
                resource_version: "1".to_owned(),
            });
        }
        let total: u64 = self.cluster.nodes.iter().map(|g| u64::from(g.count)).sum();
        if total > u64::from(NODES_MAX) {
            return Err(invalid("cluster.nodes", format!("more than {NODES_MAX} nodes in all")));
        }
        for (index, group) in self.cluster.nodes.iter().enumerate() {
            for node in nodes_of(group, &format!("cluster.nodes[{index}]"))? {
                store.upsert_node(node);
            }
        }
        for tenant in &self.cluster.tenants {
            store.set_vgpu_entitled(&tenant.name, tenant.vgpu_entitled);
            if !tenant.budgets.is_empty() {
                store.upsert_quota(&tenant.name, "gpu-budget", tenant.budgets.clone());
            }
        }
        for (index, tenant) in self.cluster.tenants.iter().enumerate() {
            for (claim_index, held) in tenant.claims.iter().enumerate() {
                let field = format!("cluster.tenants[{index}].claims[{claim_index}]");
                if store.class(&held.class).is_none() {
                    return Err(invalid(
                        format!("{field}.class"),
                        format!("no class {:?} in cluster.classes", held.class),
                    ));
                }
                if held.count == 0 {
                    return Err(invalid(format!("{field}.count"), "must be at least 1"));
                }
                if store.claim(&tenant.name, &held.name).is_some() {
                    return Err(invalid(format!("{field}.name"), format!("{:?} is listed twice", held.name)));
                }
                store.upsert_claim(Claim {
                    namespace: tenant.name.clone().into(),
                    name: held.name.clone().into(),
                    uid: format!("uid-claim-{}-{}", tenant.name, held.name).into(),
                    resource_version: "1".into(),
                    class: held.class.as_str().into(),
                    count: held.count,
                    ..Claim::default()
                });
            }
        }
        Ok(store)
    }
}

/// `<namespace>/<name>`, split.
fn namespaced(text: &str, field: &str) -> Result<(String, String), ScenarioError> {
    match text.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => Err(invalid(field, format!("{text:?} is not <namespace>/<name>"))),
    }
}

/// The nodes of a group: `<prefix><nnnn>`, schedulable for KubeVirt, with the device plugins KubeVirt's own
/// resources come from.
fn nodes_of(group: &NodeGroup, field: &str) -> Result<Vec<Node>, ScenarioError> {
    let cpu_millis = quantity::cpu_millis(&group.cpu).map_err(|e| invalid(format!("{field}.cpu"), e.to_string()))?;
    let memory_bytes = quantity::bytes(&group.memory).map_err(|e| invalid(format!("{field}.memory"), e.to_string()))?;
    if let Some((resource, units)) = group.devices.iter().find(|(_, units)| **units > Node::DEVICE_UNITS_MAX) {
        let reason = format!("{units} units is more than the {} one node may offer", Node::DEVICE_UNITS_MAX);
        return Err(invalid(format!("{field}.devices[{resource}]"), reason));
    }
    let mut devices = group.devices.clone();
    for plugin in DEVICE_PLUGINS {
        devices.entry(plugin.to_owned()).or_insert(1_000);
    }
    Ok((0..group.count)
        .map(|n| {
            let name = format!("{}{n:04}", group.prefix);
            let mut labels = group.labels.clone();
            labels.insert("kubernetes.io/hostname".to_owned(), name.clone());
            labels.insert(kubevirt::LABEL_SCHEDULABLE.to_owned(), keys::TRUE.to_owned());
            Node {
                name,
                resource_version: "1".to_owned(),
                labels,
                taints: group.taints.clone(),
                unschedulable: false,
                ready: true,
                cpu_millis,
                memory_bytes,
                devices: devices.clone(),
            }
        })
        .collect())
}

fn vm_spec(
    tenant: &str,
    name: &str,
    gpus: &[GpuEntry],
    cpu: &str,
    memory: &str,
    field: &str,
) -> Result<VmSpec, ScenarioError> {
    Ok(VmSpec {
        namespace: tenant.to_owned(),
        name: name.to_owned(),
        gpus: gpus.to_vec(),
        cpu_millis: quantity::cpu_millis(cpu).map_err(|e| invalid(format!("{field}.cpu"), e.to_string()))?,
        memory_bytes: quantity::bytes(memory).map_err(|e| invalid(format!("{field}.memory"), e.to_string()))?,
        lifetime: None,
        wffc_volume: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_document_is_read_as_json_and_a_yaml_flow_mapping_still_as_yaml() {
        let json =
            r#"{"name": "j", "duration": "1h", "cluster": {"classes": [], "nodes": []}, "notes": ["from a trace"]}"#;
        let scenario = parse_scenario(json).unwrap();
        assert_eq!((scenario.name.as_str(), scenario.notes.as_slice()), ("j", &["from a trace".to_owned()][..]));
        let flow = "{name: y, duration: 1h, cluster: {classes: [], nodes: []}}";
        assert_eq!(parse_scenario(flow).unwrap().name, "y");
        let err = parse_scenario("{name: y, duration: 1h, cluster: [}").unwrap_err().to_string();
        assert!(err.contains("not valid YAML"), "{err}");
        // A JSON document with a bad field is refused naming the field, as YAML is (not by line and column).
        let bad = r#"{"name": "j", "duration": "soon", "cluster": {"classes": [], "nodes": []}}"#;
        let err = parse_scenario(bad).unwrap_err().to_string();
        assert!(err.starts_with("field duration: \"soon\""), "{err}");
        let err = parse_scenario(r#"{"name": "j", "duraton": "1h"}"#).unwrap_err().to_string();
        assert!(err.contains("unknown field `duraton`") && !err.contains("line 1"), "{err}");
    }

    const SMALL: &str = "name: s\nduration: 1h\ncluster:\n  classes: [{name: h100, resourceName: nvidia.com/H100, \
                         mode: Passthrough, maxCount: 8}]\n  nodes: [{prefix: gpu-, count: 2, cpu: '64', memory: 512Gi, \
                         devices: {nvidia.com/H100: 8}}]\n";

    /// Why the scenario does not build (`None` when it does).
    fn refusal(text: &str) -> Option<String> {
        parse_scenario(text).and_then(|s| s.build(1, EventLog::unhashed())).err().map(|e| e.to_string())
    }

    #[test]
    fn a_node_group_offering_more_device_units_than_any_machine_is_refused() {
        // Two such nodes overflowed the class's totals of free and allocatable units (found by the fuzz harness).
        assert_eq!(refusal(SMALL), None);
        let error = refusal(&SMALL.replace("nvidia.com/H100: 8", "nvidia.com/H100: 18446744073709551615"));
        assert_eq!(
            error.as_deref(),
            Some(
                "field cluster.nodes[0].devices[nvidia.com/H100]: 18446744073709551615 units is more than the 4294967296 \
             one node may offer"
            )
        );
    }

    #[test]
    fn nodes_added_by_events_count_against_the_nodes_a_scenario_may_declare() {
        // Four billion nodes were built (a 618 GB allocation that aborts) before the bound covered events.
        let event = "events: [{at: 1m, addNodes: {prefix: x-, count: 4294967295, cpu: '1', memory: 1Gi}}]";
        let error = refusal(&format!("{SMALL}{event}\n"));
        assert_eq!(error.as_deref(), Some("field events[0].addNodes: more than 1000000 nodes in all"));
        let event = "events: [{at: 1m, addNodes: {prefix: x-, count: 999998, cpu: '1', memory: 1Gi}}]";
        let error = refusal(&format!("{SMALL}{event}\n"));
        assert_eq!(error, None);
    }

    #[test]
    fn a_controller_of_more_replicas_than_a_deployment_runs_is_refused() {
        // Four billion replicas were made (a 275 GB allocation that aborts).
        let error = refusal(&format!("{SMALL}controller: {{replicas: 4294967295}}\n"));
        assert_eq!(error.as_deref(), Some("field controller.replicas: more than 100"));
        assert_eq!(refusal(&format!("{SMALL}controller: {{replicas: 100}}\n")), None);
    }

    /// SMALL with one VM `{at: 0s, tenant: t, name: vm, <vm>}` and `extra` lines of the cluster.
    fn with_vm(vm: &str, extra: &str) -> Option<String> {
        refusal(&format!("{SMALL}{extra}vms:\n- {{at: 0s, tenant: t, name: vm, {vm}}}\n"))
    }

    #[test]
    fn a_vm_from_chart_values_builds_as_the_same_vm_written_plainly() {
        let chart = "chart: {resources: {cpu: 4, memory: 16Gi}, gpus: [{claimTemplate: {class: h100, count: 2}}]}";
        let plain = "cpu: '4', memory: 16Gi, gpus: [{claimTemplate: {class: h100, count: 2}}]";
        let spec = |vm: &str| {
            let scenario = parse_scenario(&format!("{SMALL}vms:\n- {{at: 0s, tenant: t, name: vm, {vm}}}\n")).unwrap();
            let spec = scenario.timed_vm_spec(&scenario.vms[0], "vms[0]").unwrap();
            (spec.gpus, spec.cpu_millis, spec.memory_bytes, scenario.vms[0].gpu_entries())
        };
        assert_eq!(spec(chart), spec(plain));
        assert_eq!(spec(chart).1, 4_000);
    }

    #[test]
    fn a_chart_vm_the_chart_refuses_builds_no_scenario_and_says_why_as_the_chart_does() {
        let mixed = "chart: {resources: {cpu: 1, memory: 1Gi}, gpus: [{name: nvidia.com/H100}, {claim: a}]}";
        assert_eq!(
            with_vm(mixed, "").as_deref(),
            Some(
                "field vms[0].chart: the VM chart refuses it (MixedList): gpus[0] is a raw device name and gpus[1] a \
                 claim reference; list raw names or references, not both"
            )
        );
        let held = "chart: {resources: {cpu: 1, memory: 1Gi}, gpus: [{claim: a}]}";
        assert_eq!(with_vm(held, ""), None);
        let off = with_vm(held, "  claimsEnabled: false\n").unwrap();
        assert!(
            off.starts_with("field vms[0].chart: the VM chart refuses it (ClaimsDisabled): gpus[0] is a claim"),
            "{off}"
        );
        let two = "chart: {resources: {cpu: 1, memory: 1Gi}, gpus: [{claim: a, name: nvidia.com/H100}]}";
        assert_eq!(
            with_vm(two, "").as_deref(),
            Some(
                "field vms[0].chart: the VM chart refuses it (NotOneKind): gpus[0] gives name and claim; give exactly \
                 one of name, claim and claimTemplate"
            )
        );
        let shape = "chart: {resources: {cpu: 1, memory: 1Gi}, gpus: [{claim: 7}]}";
        let error = with_vm(shape, "").unwrap();
        assert_eq!(error, "field vms[0].chart: the VM chart refuses it (Malformed): gpus[0].claim must be a string");
    }

    #[test]
    fn chart_values_the_twin_does_not_model_or_that_are_the_platforms_are_refused_by_field() {
        let sized = "resources: {cpu: 1, memory: 1Gi}";
        let cases = [
            (
                "chart: {gpus: []}".to_owned(),
                "field vms[0].chart.resources: give cpu and memory: the twin sizes a chart VM by them (it does not \
                 model instance types)",
            ),
            (
                format!("chart: {{{sized}, _cluster: {{gpu-claims-enabled: 'true'}}}}"),
                "field vms[0].chart._cluster: is the platform's, not the tenant's; the twin takes it from \
                 cluster.claimsEnabled",
            ),
            (
                format!("chart: {{{sized}, runStrategy: Halted}}"),
                "field vms[0].chart.runStrategy: the twin runs VMs Always; \"Halted\" is not modelled",
            ),
            (
                "chart: {resources: {cpu: 0, memory: 1Gi}}".to_owned(),
                "field vms[0].chart.resources.cpu: 0 is not a whole number of cores",
            ),
            (
                format!("chart: {{{sized}}}, cpu: '1'"),
                "field vms[0].cpu: give it in chart (the chart's values) or drop chart",
            ),
            ("gpus: []".to_owned(), "field vms[0].cpu: required (or give chart)"),
        ];
        for (vm, want) in cases {
            assert_eq!(with_vm(&vm, "").as_deref(), Some(want), "{vm}");
        }
        let error = parse_scenario(&format!("{SMALL}vms: [{{at: 0s, tenant: t, name: vm, chart: {{gpu: []}}}}]\n"));
        let error = error.unwrap_err().to_string();
        assert!(error.starts_with("field vms[0].chart.gpu: unknown field `gpu`, expected one of"), "{error}");
    }

    #[test]
    fn a_workload_window_that_ends_before_it_begins_is_refused() {
        let workload = |window: &str| {
            format!(
                "{SMALL}  tenants: [{{name: t}}]\nworkloads:\n- {{tenant: t, prefix: w, arrivalsPerHour: 1, \
                 meanLifetime: 1h, cpu: '1', memory: 1Gi, \
                 gpus: [{{claimTemplate: {{class: h100, count: 1}}}}], {window}}}\n"
            )
        };
        let error = refusal(&workload("from: 2h, until: 1h"));
        assert_eq!(error.as_deref(), Some("field workloads[0].until: is not after `from` (or the run's start)"));
        let error = refusal(&workload("until: 0s"));
        assert_eq!(error.as_deref(), Some("field workloads[0].until: is not after `from` (or the run's start)"));
        assert_eq!(refusal(&workload("from: 1h, until: 2h")), None);
    }

    #[test]
    fn durations_read_their_unit() {
        assert_eq!(parse_duration("90s"), Ok(Millis(90_000)));
        assert_eq!(parse_duration("30d"), Ok(Millis(2_592_000_000)));
        assert_eq!(parse_duration("1500ms"), Ok(Millis(1_500)));
        assert_eq!(parse_duration("6h10m"), Ok(Millis(22_200_000)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("6h10").unwrap_err().contains("no unit"));
        assert!(parse_duration("6").unwrap_err().contains("no unit"));
        assert!(parse_duration("h").is_err());
    }

    #[test]
    fn a_bad_field_is_named() {
        let text =
            "name: x\nduration: 1h\ncluster: {classes: [], nodes: [{prefix: n, count: 1, cpu: lots, memory: 1Gi}]}\n";
        let scenario = parse_scenario(text).unwrap();
        let error = scenario.build(1, EventLog::new(None)).err().unwrap();
        assert_eq!(error.to_string(), "field cluster.nodes[0].cpu: \"lots\" is not a Kubernetes quantity: bad digits");
        let error = parse_scenario("name: x\nduration: soon\ncluster: {classes: [], nodes: []}\n").unwrap_err();
        assert!(error.to_string().starts_with("field duration: \"soon\""), "{error}");
        let error = parse_scenario("name: x\nduraton: 1h\n").unwrap_err();
        assert!(error.to_string().contains("unknown field `duraton`"), "{error}");
    }
}
