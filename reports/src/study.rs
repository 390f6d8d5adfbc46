//! Study files: a base scenario (a file, or a trace imported in memory), variants as overrides of it, seeds, the
//! metrics to report, an optional SLO and an optional compaction search. Overrides are applied to the scenario's
//! YAML tree before it is parsed, so a field the scenario format gains later can be varied without a change here; a
//! variant's engine rules (DESIGN.md §4) are a run option, as `gpuclaim sim run --variant` takes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuclaim_engine::message::readable;
use gpuclaim_engine::model::Placement;
use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_engine::variant::Variant as EngineVariant;
use gpuclaim_scenarios::import::openb::{OpenbOptions, SharedGpus, import_openb};
use gpuclaim_scenarios::import::parse_seconds;
use gpuclaim_scenarios::scenario::{Duration, Scenario, scenario_from_tree};
use gpuclaim_sim::kernel::Millis;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The most variants, seeds and samples a study may ask for: bounds, so a typo cannot ask for the impossible.
pub const VARIANTS_MAX: usize = 256;
pub const SEEDS_MAX: usize = 10_000;
pub const SAMPLES_MAX: u32 = 10_000;
/// Time points sampled per run unless the study says otherwise.
pub const SAMPLES_DEFAULT: u32 = 48;

#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("failed to read {}: {source}", readable(&.path.display().to_string()))]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: field {}: {}", readable(&.path.display().to_string()), readable(.field), readable(.reason))]
    Invalid { path: PathBuf, field: String, reason: String },
}

/// The study file as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StudyFile {
    name: String,
    #[serde(default)]
    description: String,
    /// The base scenario's file, relative to the study file (or `import`).
    #[serde(default)]
    scenario: Option<PathBuf>,
    /// A trace imported in memory as the base (or `scenario`): traces and imported scenarios are never committed,
    /// so a study names the trace files instead.
    #[serde(default)]
    import: Option<ImportFile>,
    /// Overrides the scenario's duration.
    #[serde(default)]
    duration: Option<Duration>,
    /// Waits and counts are taken from this time on (the cluster starts empty).
    #[serde(default)]
    warmup: Option<Duration>,
    #[serde(default)]
    seeds: Option<Seeds>,
    #[serde(default)]
    samples: Option<u32>,
    #[serde(default)]
    metrics: Option<Vec<MetricGroup>>,
    #[serde(default)]
    slo: Option<SloFile>,
    variants: Vec<VariantFile>,
    #[serde(default)]
    compaction: Option<CompactionFile>,
    /// How the scenario's VMs arrive: as the scenario says (default), or the fill protocol.
    #[serde(default)]
    protocol: Option<ProtocolFile>,
}

/// `protocol: {fill: {resampleTo: 1.3}}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProtocolFile {
    fill: FillFile,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FillFile {
    /// Arrivals go on until the units they request reach this multiple of the cluster's units.
    resample_to: f64,
}

/// The most a fill may ask of the cluster, as a multiple of its units: past 4× the curve says nothing new, and the
/// bound keeps a typo from asking for millions of VMs.
pub const RESAMPLE_TO_MAX: f64 = 4.0;

/// `import: {openb: {...}}`: the importer and its options (docs/import.md).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImportFile {
    openb: OpenbFile,
}

/// `gpuclaim import openb`'s options, paths relative to the study file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OpenbFile {
    nodes: PathBuf,
    pods: PathBuf,
    #[serde(default)]
    time_scale: Option<f64>,
    /// `START..END` or `START..` in trace time (`86400`, `1d`, `36h`).
    #[serde(default)]
    window: Option<String>,
    #[serde(default)]
    sample: Option<u64>,
    #[serde(default)]
    sample_seed: Option<u64>,
    #[serde(default)]
    shared_as_whole: bool,
    #[serde(default)]
    ignore_deletion: bool,
}

/// `seeds: 8` (seeds 1 to 8) or `seeds: [3, 7, 11]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Seeds {
    Count(u64),
    List(Vec<u64>),
}

/// What a report shows; every run measures all of them.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MetricGroup {
    /// GPU units held by running VMs and by claims, per class, over time.
    Utilisation,
    /// Pods at the placement gate over time.
    GateQueue,
    /// A VM asked to run → Running.
    StartWait,
    /// A launcher created → ungated.
    GateWait,
    /// Tenants' orders refused, by reason.
    OrderRefusals,
    /// Orders refused and pods set waiting for a budget.
    BudgetHits,
    /// Free units no typical claim of the class can use.
    Fragmentation,
    FailedMigrations,
    /// Start failures (each puts a VM in CrashLoopBackOff) and VMs in it over time.
    CrashLoop,
}

pub const ALL_METRICS: [MetricGroup; 9] = [
    MetricGroup::Utilisation,
    MetricGroup::GateQueue,
    MetricGroup::StartWait,
    MetricGroup::GateWait,
    MetricGroup::OrderRefusals,
    MetricGroup::BudgetHits,
    MetricGroup::Fragmentation,
    MetricGroup::FailedMigrations,
    MetricGroup::CrashLoop,
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SloFile {
    metric: SloMetric,
    max: Duration,
    #[serde(default)]
    across_seeds: AcrossSeeds,
    /// Only the start waits of the timed VMs ordering one of these classes (default: every VM).
    #[serde(default)]
    classes: Vec<String>,
}

/// A wait an SLO bounds (per run), in the names summary.json uses.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SloMetric {
    StartWaitP50,
    StartWaitP90,
    StartWaitP99,
    GateWaitMean,
    GateWaitP90,
}

impl SloMetric {
    /// How a report names it.
    pub fn label(self) -> &'static str {
        match self {
            SloMetric::StartWaitP50 => "start wait p50",
            SloMetric::StartWaitP90 => "start wait p90",
            SloMetric::StartWaitP99 => "start wait p99",
            SloMetric::GateWaitMean => "gate wait mean",
            SloMetric::GateWaitP90 => "gate wait p90",
        }
    }

    /// The summary's scalar this SLO reads.
    pub fn scalar(self) -> &'static str {
        match self {
            SloMetric::StartWaitP50 => "start_wait_p50_s",
            SloMetric::StartWaitP90 => "start_wait_p90_s",
            SloMetric::StartWaitP99 => "start_wait_p99_s",
            SloMetric::GateWaitMean => "gate_wait_mean_s",
            SloMetric::GateWaitP90 => "gate_wait_p90_s",
        }
    }
}

/// Which of the per-seed values must be within the SLO.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AcrossSeeds {
    P50,
    /// Nine seeds in ten (nearest rank: with fewer than ten seeds, every seed).
    #[default]
    P90,
    Max,
}

/// An SLO: the per-run `metric` at most `max_seconds`, for the seeds `across_seeds` says.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Slo {
    pub metric: SloMetric,
    pub max_seconds: f64,
    pub across_seeds: AcrossSeeds,
    /// Start waits of the timed VMs ordering one of these classes only (empty: every VM's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
}

impl Slo {
    /// The run scalar it reads: the metric's, or its per-classes form (`start_wait_p90_s:gpu-g3`, see
    /// [`classes_key`]).
    pub fn scalar(&self) -> String {
        if self.classes.is_empty() {
            self.metric.scalar().to_owned()
        } else {
            format!("{}:{}", self.metric.scalar(), classes_key(&self.classes))
        }
    }

    /// How a report names it: `start wait p90`, or `start wait p90 of gpu-g3 VMs`.
    pub fn label(&self) -> String {
        if self.classes.is_empty() {
            self.metric.label().to_owned()
        } else {
            format!("{} of {} VMs", self.metric.label(), classes_key(&self.classes))
        }
    }
}

/// How the per-classes start-wait scalars name a set of classes: sorted, joined by `+`.
pub fn classes_key(classes: &[String]) -> String {
    let mut sorted = classes.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted.join("+")
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct VariantFile {
    name: String,
    #[serde(default)]
    description: String,
    /// class → node count of the one node group offering it, or label selector (`k=v,k2=v2`) → total node count of
    /// the groups carrying those labels: `8`, `"+4"`, `"-2"` or `"x0.5"`.
    #[serde(default)]
    nodes: BTreeMap<String, Value>,
    /// tenant → class → units: `48` or `"x2"`.
    #[serde(default)]
    budgets: BTreeMap<String, BTreeMap<String, Value>>,
    /// workload prefix → fields merged into it (`arrivalsPerHour`, `meanLifetime`, ...); `"x1.5"` scales a number or
    /// a duration.
    #[serde(default)]
    workloads: BTreeMap<String, Map<String, Value>>,
    /// The engine's rules (DESIGN.md §4): a variant's name (`gate-migration-targets`) or its options
    /// (`{gateMigrationTargets: true, twoUpdatePin: true}`); default the shipped engine. `placement: Spread` or
    /// `placement: {h100: Spread}` sets the classes' placement policy (`spec.placement`).
    #[serde(default)]
    engine: Option<EngineFile>,
    /// Anything else, deep-merged into the scenario's root.
    #[serde(default)]
    set: Option<Map<String, Value>>,
}

/// `engine: gate-migration-targets` or `engine: {gateMigrationTargets: true}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EngineFile {
    Named(String),
    /// Over the shipped engine's: a map names only what it changes.
    Options(Map<String, Value>),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CompactionFile {
    /// A class offered by one node group, or ...
    #[serde(default)]
    class: Option<String>,
    /// ... a label selector: the groups carrying those labels, their total split as `nodes:` splits it.
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    min: u32,
    max: u32,
}

/// A compaction search: the fewest nodes, between `min` and `max`, that meet the SLO in `variant`: nodes of the one
/// group offering a class, or in all the groups a label selector picks.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Compaction {
    /// The node-count key, as a variant's `nodes:` takes it: a class name, or a label selector (it has a `=`).
    pub target: String,
    pub variant: String,
    pub min: u32,
    pub max: u32,
}

/// One variant: its name and the scenario tree with its overrides applied.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub description: String,
    pub scenario: Value,
    /// The engine's rules its runs use.
    pub engine: EngineVariant,
}

/// A study ready to run.
#[derive(Clone, Debug)]
pub struct Study {
    pub name: String,
    pub description: String,
    /// The study file's text, for the report.
    pub text: String,
    pub path: PathBuf,
    pub seeds: Vec<u64>,
    pub samples: u32,
    pub warmup: Millis,
    pub duration: Millis,
    pub metrics: Vec<MetricGroup>,
    pub slo: Option<Slo>,
    pub variants: Vec<Variant>,
    pub compaction: Option<Compaction>,
    /// The fill protocol's target (units requested ÷ the cluster's), when the study fills the cluster instead of
    /// running the scenario as timed (see [`crate::fill`]).
    pub fill: Option<f64>,
}

/// Reads a study and its base scenario, applies each variant's overrides and checks that every variant parses as a
/// scenario. Errors name the file, the field and the reason.
pub fn load_study(path: &Path) -> Result<Study, StudyError> {
    let text = std::fs::read_to_string(path).map_err(|source| StudyError::Read { path: path.to_owned(), source })?;
    parse_study(&text, path)
}

/// As [`load_study`], from the study's text; `path` names it in errors and anchors the scenario's relative path.
pub fn parse_study(text: &str, path: &Path) -> Result<Study, StudyError> {
    let invalid =
        |field: &str, reason: String| StudyError::Invalid { path: path.to_owned(), field: field.to_owned(), reason };
    let value: Value =
        gpuclaim_engine::yaml::from_str(text).map_err(|e| invalid("(study)", format!("not valid YAML: {e}")))?;
    let file: StudyFile = serde_path_to_error::deserialize(&value).map_err(|e| {
        let field = e.path().to_string();
        invalid(if field == "." { "(study)" } else { &field }, e.into_inner().to_string())
    })?;
    let study_dir = path.parent().unwrap_or(Path::new("."));
    // Where the base's own errors point: the scenario file, or the study's `import` field.
    let (base_path, base_field, mut base) = match (&file.scenario, &file.import) {
        (Some(_), Some(_)) => {
            return Err(invalid("import", "the base is a scenario or an import, not both: drop one".to_owned()));
        }
        (None, None) => {
            return Err(invalid(
                "scenario",
                "no base: name a scenario file (`scenario:`) or a trace (`import:`)".to_owned(),
            ));
        }
        (Some(scenario), None) => {
            let scenario_path = study_dir.join(scenario);
            let scenario_text = std::fs::read_to_string(&scenario_path)
                .map_err(|source| StudyError::Read { path: scenario_path.clone(), source })?;
            let base: Value = gpuclaim_engine::yaml::from_str(&scenario_text).map_err(|e| StudyError::Invalid {
                path: scenario_path.clone(),
                field: "(scenario)".to_owned(),
                reason: format!("not valid YAML: {e}"),
            })?;
            (scenario_path, "(scenario)", base)
        }
        (None, Some(import)) => (path.to_owned(), "import", import_base(import, study_dir, &invalid)?),
    };
    // A base that is not a map is refused by the parse below, naming the base; indexing it here would panic.
    if let (Some(duration), Some(base)) = (file.duration, base.as_object_mut()) {
        base.insert("duration".to_owned(), Value::String(format!("{}ms", duration.0.0)));
    }
    let parsed_base = scenario_from_tree(&base).map_err(|reason| StudyError::Invalid {
        path: base_path.clone(),
        field: base_field.to_owned(),
        reason,
    })?;
    if let Some(slo) = &file.slo
        && !slo.classes.is_empty()
    {
        let start_wait =
            matches!(slo.metric, SloMetric::StartWaitP50 | SloMetric::StartWaitP90 | SloMetric::StartWaitP99);
        if !start_wait {
            return Err(invalid(
                "slo.classes",
                "only start waits are measured per class (startWaitP50|P90|P99)".to_owned(),
            ));
        }
        slo_classes_fit(&slo.classes, &parsed_base).map_err(|reason| invalid("slo.classes", reason))?;
    }
    let duration = parsed_base.duration.0;
    let warmup = file.warmup.map_or(Millis(0), |w| w.0);
    if warmup >= duration {
        return Err(invalid("warmup", format!("{} ms is not shorter than the run ({} ms)", warmup.0, duration.0)));
    }
    let seeds = match file.seeds {
        None => (1..=4).collect(),
        Some(Seeds::Count(0)) => return Err(invalid("seeds", "at least one seed".to_owned())),
        Some(Seeds::Count(n)) if n as usize > SEEDS_MAX => {
            return Err(invalid("seeds", format!("at most {SEEDS_MAX}")));
        }
        Some(Seeds::Count(n)) => (1..=n).collect(),
        Some(Seeds::List(list)) if list.is_empty() || list.len() > SEEDS_MAX => {
            return Err(invalid("seeds", format!("between 1 and {SEEDS_MAX} seeds")));
        }
        Some(Seeds::List(list)) => list,
    };
    let samples = file.samples.unwrap_or(SAMPLES_DEFAULT);
    if samples == 0 || samples > SAMPLES_MAX {
        return Err(invalid("samples", format!("between 1 and {SAMPLES_MAX}")));
    }
    if file.variants.is_empty() || file.variants.len() > VARIANTS_MAX {
        return Err(invalid("variants", format!("between 1 and {VARIANTS_MAX} variants")));
    }
    let mut variants = Vec::with_capacity(file.variants.len());
    for (index, variant) in file.variants.iter().enumerate() {
        let field = format!("variants[{index}]");
        if variant.name.is_empty() || !variant.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(invalid(&format!("{field}.name"), "letters, digits, '-', '_' or '.' only".to_owned()));
        }
        if variants.iter().any(|v: &Variant| v.name == variant.name) {
            return Err(invalid(&format!("{field}.name"), format!("{:?} is used twice", variant.name)));
        }
        let scenario = apply(&base, variant).map_err(|(at, reason)| invalid(&format!("{field}.{at}"), reason))?;
        let parsed = scenario_from_tree(&scenario)
            .map_err(|reason| invalid(&field, format!("the scenario it gives: {reason}")))?;
        if let Some(slo) = &file.slo {
            slo_classes_fit(&slo.classes, &parsed)
                .map_err(|reason| invalid(&format!("{field} (slo.classes)"), reason))?;
        }
        let engine = match &variant.engine {
            None => EngineVariant::SHIPPED,
            Some(EngineFile::Options(options)) => {
                let mut options = options.clone();
                // The placement policy is a class's (`spec.placement`): the variant's classes carry it, as a
                // cluster under that rule would.
                options.remove("placement");
                let mut tree = serde_json::to_value(EngineVariant::SHIPPED).expect("plain booleans serialise");
                merge(&mut tree, &Value::Object(options));
                serde_json::from_value(tree).map_err(|e| invalid(&format!("{field}.engine"), e.to_string()))?
            }
            Some(EngineFile::Named(name)) => {
                EngineVariant::named(name).map_err(|e| invalid(&format!("{field}.engine"), e.to_string()))?
            }
        };
        variants.push(Variant {
            name: variant.name.clone(),
            description: variant.description.clone(),
            scenario,
            engine,
        });
    }
    let slo = file.slo.map(|slo| Slo {
        metric: slo.metric,
        max_seconds: slo.max.0.0 as f64 / 1_000.0,
        across_seeds: slo.across_seeds,
        classes: slo.classes,
    });
    let compaction = match file.compaction {
        None => None,
        Some(c) => {
            if slo.is_none() {
                return Err(invalid("compaction", "needs an slo to meet".to_owned()));
            }
            if c.min > c.max {
                return Err(invalid("compaction", format!("min {} is above max {}", c.min, c.max)));
            }
            let (key, key_field) = match (c.class, c.nodes) {
                (Some(class), None) if class.contains('=') => {
                    return Err(invalid(
                        "compaction.class",
                        format!("{class:?} is a label selector: write it as `nodes: {class:?}`"),
                    ));
                }
                (Some(class), None) => (class, "compaction.class"),
                (None, Some(selector)) if !selector.contains('=') => {
                    return Err(invalid(
                        "compaction.nodes",
                        format!("{selector:?} is not a label selector (k=v,...): a class goes in `class:`"),
                    ));
                }
                (None, Some(selector)) => (selector, "compaction.nodes"),
                (Some(_), Some(_)) => {
                    return Err(invalid("compaction", "`class` or `nodes`, not both".to_owned()));
                }
                (None, None) => {
                    return Err(invalid(
                        "compaction",
                        "what to count: `class: <class>` or `nodes: <label selector>`".to_owned(),
                    ));
                }
            };
            let variant = c.variant.unwrap_or_else(|| variants[0].name.clone());
            let Some(found) = variants.iter().find(|v| v.name == variant) else {
                return Err(invalid("compaction.variant", format!("no variant named {variant:?}")));
            };
            set_node_count(&mut found.scenario.clone(), &key, &Value::from(c.max))
                .map_err(|reason| invalid(key_field, reason))?;
            Some(Compaction { target: key, variant, min: c.min, max: c.max })
        }
    };
    let fill = match file.protocol {
        None => None,
        Some(ProtocolFile { fill: FillFile { resample_to } }) => {
            if !(resample_to.is_finite() && resample_to > 0.0 && resample_to <= RESAMPLE_TO_MAX) {
                return Err(invalid(
                    "protocol.fill.resampleTo",
                    format!("{resample_to} is not a share of the cluster's units in (0, {RESAMPLE_TO_MAX}]"),
                ));
            }
            if compaction.is_some() || slo.is_some() {
                return Err(invalid(
                    "protocol.fill",
                    "a fill has no start waits to bound: drop `slo` and `compaction`".to_owned(),
                ));
            }
            if warmup != Millis(0) {
                return Err(invalid("protocol.fill", "a fill starts from an empty cluster: drop `warmup`".to_owned()));
            }
            for (index, variant) in variants.iter().enumerate() {
                crate::fill::arrivals_of(&variant.scenario)
                    .map_err(|reason| invalid(&format!("variants[{index}] (protocol.fill)"), reason))?;
            }
            Some(resample_to)
        }
    };
    let mut metrics = file.metrics.unwrap_or_else(|| ALL_METRICS.to_vec());
    metrics.sort();
    metrics.dedup();
    Ok(Study {
        name: file.name,
        description: file.description,
        text: text.to_owned(),
        path: path.to_owned(),
        seeds,
        samples,
        warmup,
        duration,
        metrics,
        slo,
        variants,
        compaction,
        fill,
    })
}

/// Imports the study's trace in memory (no file written: imported scenarios are never kept, docs/import.md) and
/// returns its tree. Paths are relative to the study's directory; a missing file is named with its field.
fn import_base(
    import: &ImportFile,
    study_dir: &Path,
    invalid: &dyn Fn(&str, String) -> StudyError,
) -> Result<Value, StudyError> {
    let openb = &import.openb;
    let file = |field: &str, relative: &Path| {
        let full = study_dir.join(relative);
        if full.is_file() {
            Ok(full)
        } else {
            Err(invalid(field, format!("no file {} (relative to the study file)", full.display())))
        }
    };
    let mut options =
        OpenbOptions::new(file("import.openb.nodes", &openb.nodes)?, file("import.openb.pods", &openb.pods)?);
    if let Some(scale) = openb.time_scale {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(invalid("import.openb.timeScale", format!("{scale} is not a positive number")));
        }
        options.time_scale = scale;
    }
    if let Some(window) = &openb.window {
        options.window = parse_window(window).map_err(|reason| invalid("import.openb.window", reason))?;
    }
    if let Some(sample) = openb.sample {
        if sample == 0 {
            return Err(invalid("import.openb.sample", "keep one task in at least 1".to_owned()));
        }
        options.sample = sample;
    }
    options.sample_seed = openb.sample_seed;
    options.shared = if openb.shared_as_whole { SharedGpus::Whole } else { SharedGpus::Vgpu };
    options.ignore_deletion = openb.ignore_deletion;
    let imported = import_openb(&options).map_err(|e| invalid("import.openb", e.to_string()))?;
    gpuclaim_engine::yaml::from_str(&imported.to_yaml())
        .map_err(|e| invalid("import.openb", format!("the imported scenario is not valid YAML: {e}")))
}

/// `START..END` or `START..` in trace seconds (`86400`, `1d`, `36h`), as `gpuclaim import openb --window` takes it.
fn parse_window(text: &str) -> Result<(u64, Option<u64>), String> {
    let (start, end) = text.split_once("..").ok_or_else(|| format!("{text:?}: write START..END or START.."))?;
    let start = if start.trim().is_empty() { 0 } else { parse_seconds(start)? };
    let end = if end.trim().is_empty() { None } else { Some(parse_seconds(end)?) };
    if end.is_some_and(|end| end <= start) {
        return Err(format!("{text:?}: the end must come after the start"));
    }
    Ok((start, end))
}

/// An SLO over classes reads the start waits of the timed VMs (`vms:`) ordering them: each has a name and a
/// creation time, so one that never starts counts with its wait so far. Workload arrivals have neither in the
/// scenario, so a class that workloads order is refused rather than measured on part of its VMs.
fn slo_classes_fit(classes: &[String], scenario: &Scenario) -> Result<(), String> {
    for class in classes {
        if !scenario.cluster.classes.iter().any(|c| &c.name == class) {
            return Err(format!("the scenario has no class {class:?}"));
        }
        let ordered_by = |gpus: &[GpuEntry], held: Option<&ClaimTemplate>| {
            gpus.iter().any(|g| matches!(g, GpuEntry::ClaimTemplate(t) if &t.class == class))
                || held.is_some_and(|t| &t.class == class)
        };
        if let Some(workload) = scenario.workloads.iter().find(|w| ordered_by(&w.gpus, w.held_claim.as_ref())) {
            return Err(format!(
                "workload {:?} orders class {class:?}: per-class start waits count timed VMs (`vms:`) only",
                workload.prefix
            ));
        }
    }
    Ok(())
}

/// The base scenario with a variant's overrides: node counts, budgets, workloads, engine options, then `set`.
fn apply(base: &Value, variant: &VariantFile) -> Result<Value, (String, String)> {
    let mut scenario = base.clone();
    for (class, count) in &variant.nodes {
        set_node_count(&mut scenario, class, count).map_err(|reason| (format!("nodes.{class}"), reason))?;
    }
    for (tenant, budgets) in &variant.budgets {
        for (class, units) in budgets {
            set_budget(&mut scenario, tenant, class, units)
                .map_err(|reason| (format!("budgets.{tenant}.{class}"), reason))?;
        }
    }
    for (prefix, fields) in &variant.workloads {
        let workloads = scenario.get_mut("workloads").and_then(Value::as_array_mut);
        let Some(workload) = workloads.into_iter().flatten().find(|w| w["prefix"] == prefix.as_str()) else {
            return Err((format!("workloads.{prefix}"), "the scenario has no workload with this prefix".to_owned()));
        };
        for (key, value) in fields {
            let target = &mut workload[key];
            *target = adjusted(target, value).map_err(|reason| (format!("workloads.{prefix}.{key}"), reason))?;
        }
    }
    if let Some(EngineFile::Options(options)) = &variant.engine
        && let Some(placement) = options.get("placement")
    {
        set_placement(&mut scenario, placement).map_err(|(at, reason)| (format!("engine.placement{at}"), reason))?;
    }
    if let Some(set) = &variant.set {
        merge(&mut scenario, &Value::Object(set.clone()));
    }
    Ok(scenario)
}

/// `placement: Spread` (every class) or `placement: {h100: Spread}`: the classes' placement policy.
fn set_placement(scenario: &mut Value, placement: &Value) -> Result<(), (String, String)> {
    let policy = |at: String, value: &Value| -> Result<Value, (String, String)> {
        serde_json::from_value::<Placement>(value.clone())
            .map(|_| value.clone())
            .map_err(|_| (at, format!("{value} is not a placement policy (BestFit, Spread, FragmentationAware)")))
    };
    let classes = scenario["cluster"]["classes"].as_array_mut();
    let Some(classes) = classes else { return Err((String::new(), "the scenario has no classes".to_owned())) };
    match placement {
        Value::Object(by_class) => {
            for (name, value) in by_class {
                let value = policy(format!(".{name}"), value)?;
                let Some(class) = classes.iter_mut().find(|c| c["name"] == name.as_str()) else {
                    return Err((format!(".{name}"), "the scenario has no class of this name".to_owned()));
                };
                class["placement"] = value;
            }
        }
        every => {
            let value = policy(String::new(), every)?;
            for class in classes {
                class["placement"] = value.clone();
            }
        }
    }
    Ok(())
}

/// Sets a node count: `key` is a class (the one node group offering it) or a label selector (`k=v[,k=v…]`: the
/// total over the groups carrying all those labels); `count` is absolute, `"+n"`, `"-n"` or `"x<factor>"`.
pub fn set_node_count(scenario: &mut Value, key: &str, count: &Value) -> Result<(), String> {
    if key.contains('=') {
        return set_selected_count(scenario, key, count);
    }
    let class = key;
    let resource = scenario["cluster"]["classes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == class)
        .and_then(|c| c["resourceName"].as_str())
        .ok_or_else(|| format!("the scenario has no class {class:?}"))?
        .to_owned();
    let groups = scenario["cluster"]["nodes"].as_array_mut().ok_or("the scenario has no node groups")?;
    let offering: Vec<usize> = (0..groups.len())
        .filter(|&i| groups[i]["devices"][resource.as_str()].as_u64().is_some_and(|units| units > 0))
        .collect();
    let index = match offering.as_slice() {
        [one] => *one,
        [] => return Err(format!("no node group has {resource}")),
        many => {
            let prefixes: Vec<&str> = many.iter().filter_map(|&i| groups[i]["prefix"].as_str()).collect();
            return Err(format!(
                "{} node groups have {resource} ({}): select them by label (`\"<label>=<value>\": n`) or set their \
                 counts with `set`",
                many.len(),
                prefixes.join(", ")
            ));
        }
    };
    let now = groups[index]["count"].as_u64().unwrap_or(0);
    groups[index]["count"] = Value::from(new_count(now, count)?);
    Ok(())
}

/// `now` nodes changed by `count`: a whole number, `"+n"`, `"-n"` or `"x<factor>"` (rounded to the nearest node).
fn new_count(now: u64, count: &Value) -> Result<u64, String> {
    let new = match count {
        Value::Number(n) => n.as_i64().ok_or("a whole number of nodes")?,
        Value::String(s) if s.starts_with('+') || s.starts_with('-') => {
            let delta: i64 = s.parse().map_err(|_| format!("{s:?} is not +n or -n"))?;
            // A node count is a u32, so `now` fits; the sum of a huge delta may not.
            (now as i64).checked_add(delta).ok_or_else(|| format!("{now} nodes {s} is past any node count"))?
        }
        Value::String(s) if s.starts_with('x') => {
            let factor: f64 = s[1..].parse().map_err(|_| format!("{s:?} is not x<factor>"))?;
            if !(factor.is_finite() && factor >= 0.0) {
                return Err(format!("{s:?}: the factor must be a finite number ≥ 0"));
            }
            (now as f64 * factor).round() as i64
        }
        other => return Err(format!("{other} is not a node count, \"+n\", \"-n\" or \"x<factor>\"")),
    };
    u64::try_from(new).map_err(|_| format!("{now} nodes {count} is below zero"))
}

/// A label selector, `k=v[,k=v…]`: every pair must match (as a class's `nodeSelector`).
pub fn parse_selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for part in text.split(',').map(str::trim) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(format!("{text:?} is not a label selector: {part:?} is not <label>=<value>"));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            return Err(format!("{text:?} is not a label selector: {part:?} has no label name"));
        }
        if labels.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("{text:?} is not a label selector: label {key:?} is named twice"));
        }
    }
    Ok(labels)
}

/// Sets the total node count of the groups the selector picks, split in proportion to their counts now.
fn set_selected_count(scenario: &mut Value, selector: &str, count: &Value) -> Result<(), String> {
    let labels = parse_selector(selector)?;
    let groups = scenario["cluster"]["nodes"].as_array_mut().ok_or("the scenario has no node groups")?;
    let matching: Vec<usize> = (0..groups.len())
        .filter(|&i| labels.iter().all(|(k, v)| groups[i]["labels"][k.as_str()].as_str() == Some(v.as_str())))
        .collect();
    if matching.is_empty() {
        return Err(format!("no node group has the labels {selector:?}"));
    }
    let counts: Vec<u64> = matching.iter().map(|&i| groups[i]["count"].as_u64().unwrap_or(0)).collect();
    let total = new_count(counts.iter().sum(), count)?;
    for (&i, n) in matching.iter().zip(split_proportionally(total, &counts)) {
        groups[i]["count"] = Value::from(n);
    }
    Ok(())
}

/// Splits `total` over parts in proportion to `weights` (all equal when they are all 0) by largest remainder: each
/// part gets the floor of its share, then the parts with the largest remainders get one more, ties to the earlier
/// part. Deterministic, and the parts add up to `total`; a part may get 0.
pub fn split_proportionally(total: u64, weights: &[u64]) -> Vec<u64> {
    let even = vec![1; weights.len()];
    let weights = if weights.iter().all(|w| *w == 0) { &even[..] } else { weights };
    let sum: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if sum == 0 {
        return Vec::new();
    }
    let shares: Vec<(u64, u128)> = weights
        .iter()
        .map(|w| {
            let exact = u128::from(total) * u128::from(*w);
            ((exact / sum) as u64, exact % sum)
        })
        .collect();
    let mut parts: Vec<u64> = shares.iter().map(|(floor, _)| *floor).collect();
    let left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| shares[*b].1.cmp(&shares[*a].1).then(a.cmp(b)));
    for &i in order.iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}

fn set_budget(scenario: &mut Value, tenant: &str, class: &str, units: &Value) -> Result<(), String> {
    let tenants = scenario["cluster"]["tenants"].as_array_mut().ok_or("the scenario has no tenants")?;
    let entry = tenants
        .iter_mut()
        .find(|t| t["name"] == tenant)
        .ok_or_else(|| format!("the scenario has no tenant {tenant:?}"))?;
    let budget = &mut entry["budgets"][class];
    let new = adjusted(budget, units)?;
    let whole = new.as_f64().map(|v| v.round()).filter(|v| *v >= 0.0).ok_or("a budget is a number of units")?;
    *budget = Value::from(whole as u64);
    Ok(())
}

/// `value` replaces `current`, except `"x<factor>"`, which scales a number or a duration.
fn adjusted(current: &Value, value: &Value) -> Result<Value, String> {
    let Some(factor) = value.as_str().and_then(|s| s.strip_prefix('x')) else { return Ok(value.clone()) };
    let factor: f64 = factor.parse().map_err(|_| format!("{value} is not x<factor>"))?;
    if !(factor.is_finite() && factor >= 0.0) {
        return Err(format!("{value}: the factor must be a finite number ≥ 0"));
    }
    match current {
        Value::Number(n) => Ok(Value::from(n.as_f64().unwrap_or(0.0) * factor)),
        Value::String(_) => {
            let duration: Duration = serde_json::from_value(current.clone()).map_err(|e| e.to_string())?;
            Ok(Value::String(format!("{}ms", (duration.0.0 as f64 * factor).round() as u64)))
        }
        Value::Null => Err("nothing to scale: the scenario does not set it".to_owned()),
        other => Err(format!("cannot scale {other}")),
    }
}

/// Deep merge: maps merge key by key, anything else replaces. Recursive, bounded by the depth of the study's own
/// YAML (the patch), which the YAML parser already bounds.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

/// The claim size most arrivals of `class` order (ties: the larger); 1 when no workload orders the class.
/// Fragmentation is measured against it.
pub fn typical_claim(scenario: &Scenario, class: &str) -> u64 {
    let mut rate_by_count: BTreeMap<u64, f64> = BTreeMap::new();
    for workload in &scenario.workloads {
        let templates = workload.gpus.iter().filter_map(|entry| match entry {
            GpuEntry::ClaimTemplate(template) => Some(template),
            _ => None,
        });
        for ClaimTemplate { class: c, count } in templates.chain(workload.held_claim.iter()) {
            if c == class {
                *rate_by_count.entry(u64::from(*count)).or_default() += workload.arrivals_per_hour;
            }
        }
    }
    rate_by_count.iter().max_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0))).map_or(1, |(count, _)| (*count).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_rules_are_named_or_given_as_options() {
        let named: VariantFile =
            serde_json::from_value(serde_json::json!({"name": "v", "engine": "two-update-pin"})).unwrap();
        assert!(matches!(named.engine, Some(EngineFile::Named(ref n)) if n == "two-update-pin"));
        let options: VariantFile = serde_json::from_value(serde_json::json!({
            "name": "v",
            "engine": {"gateMigrationTargets": true, "noClassTolerations": true}
        }))
        .unwrap();
        let Some(EngineFile::Options(map)) = options.engine else { panic!("options") };
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn totals_split_by_largest_remainder_ties_to_the_earlier_part() {
        assert_eq!(split_proportionally(5, &[6, 3, 1]), [3, 2, 0]);
        assert_eq!(split_proportionally(2, &[6, 3, 1]), [1, 1, 0]);
        assert_eq!(split_proportionally(39, &[32, 5, 2]), [32, 5, 2]);
        assert_eq!(split_proportionally(3, &[32, 5, 2]), [3, 0, 0]);
        assert_eq!(split_proportionally(0, &[32, 5, 2]), [0, 0, 0]);
        // From nothing, evenly.
        assert_eq!(split_proportionally(5, &[0, 0, 0]), [2, 2, 1]);
        assert_eq!(split_proportionally(u64::MAX, &[u64::MAX, 1]).iter().sum::<u64>(), u64::MAX);
    }

    #[test]
    fn selectors_are_label_equalities() {
        let labels = parse_selector("nvidia.com/gpu.product=G3, mode=pt").unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(labels["nvidia.com/gpu.product"], "G3");
        assert!(parse_selector("a=1,,b=2").unwrap_err().contains("\"\" is not <label>=<value>"));
        assert_eq!(new_count(10, &Value::from("x0.25")).unwrap(), 3);
        assert_eq!(new_count(10, &Value::from("+2")).unwrap(), 12);
        assert!(new_count(1, &Value::from("-2")).unwrap_err().contains("below zero"));
    }

    #[test]
    fn a_node_count_change_past_any_integer_is_refused() {
        // `now + delta` overflowed (found by the fuzz harness).
        let error = new_count(4, &Value::from("+9223372036854775807")).unwrap_err();
        assert_eq!(error, "4 nodes +9223372036854775807 is past any node count");
    }

    #[test]
    fn a_base_scenario_that_is_not_a_map_is_refused_when_the_study_sets_the_duration() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.yaml"), "[1, 2]\n").unwrap();
        let study = "name: s\nscenario: base.yaml\nduration: 1h\nvariants: [{name: a}]\n";
        let error = parse_study(study, &dir.path().join("study.yaml")).unwrap_err().to_string();
        // A sequence reads as a struct by position: its first item is not a name.
        assert!(error.contains("base.yaml: field (scenario): field [0]: invalid type: integer"), "{error}");
    }

    #[test]
    fn scaling_needs_a_value_to_scale() {
        assert_eq!(adjusted(&Value::from(4), &Value::from("x2.5")).unwrap(), Value::from(10.0));
        assert_eq!(adjusted(&Value::from("90s"), &Value::from("x2")).unwrap(), Value::from("180000ms"));
        assert!(adjusted(&Value::Null, &Value::from("x2")).unwrap_err().contains("nothing to scale"));
        assert!(adjusted(&Value::from(4), &Value::from("x-1")).unwrap_err().contains("finite number ≥ 0"));
    }
}
