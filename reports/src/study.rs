//! Study files: a base scenario, variants as overrides of it, seeds, the metrics to report, an optional SLO and an
//! optional compaction search. Overrides are applied to the scenario's YAML tree before it is parsed, so a field
//! the scenario format gains later can be varied without a change here; a variant's engine rules (DESIGN.md §4)
//! are a run option, as `gpuclaim sim run --variant` takes them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpuclaim_engine::references::{ClaimTemplate, GpuEntry};
use gpuclaim_engine::variant::Variant as EngineVariant;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::scenario::{Duration, Scenario, parse_scenario};
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
    #[error("failed to read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: field {field}: {reason}")]
    Invalid { path: PathBuf, field: String, reason: String },
}

/// The study file as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StudyFile {
    name: String,
    #[serde(default)]
    description: String,
    /// The base scenario's file, relative to the study file.
    scenario: PathBuf,
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
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct VariantFile {
    name: String,
    #[serde(default)]
    description: String,
    /// class → node count of the one node group offering it: `8` or `"+4"` / `"-2"`.
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
    /// (`{gateMigrationTargets: true, twoUpdatePin: true}`); default the shipped engine.
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
    class: String,
    #[serde(default)]
    variant: Option<String>,
    min: u32,
    max: u32,
}

/// A compaction search: the fewest nodes of `class`'s group, between `min` and `max`, that meet the SLO in
/// `variant`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Compaction {
    pub class: String,
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
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| invalid("(study)", format!("not valid YAML: {e}")))?;
    let file: StudyFile = serde_path_to_error::deserialize(&value).map_err(|e| {
        let field = e.path().to_string();
        invalid(if field == "." { "(study)" } else { &field }, e.into_inner().to_string())
    })?;
    let scenario_path = path.parent().unwrap_or(Path::new(".")).join(&file.scenario);
    let scenario_text = std::fs::read_to_string(&scenario_path)
        .map_err(|source| StudyError::Read { path: scenario_path.clone(), source })?;
    let mut base: Value = serde_yaml_ng::from_str(&scenario_text).map_err(|e| StudyError::Invalid {
        path: scenario_path.clone(),
        field: "(scenario)".to_owned(),
        reason: format!("not valid YAML: {e}"),
    })?;
    if let Some(duration) = file.duration {
        base["duration"] = Value::String(format!("{}ms", duration.0.0));
    }
    let parsed_base = to_scenario(&base).map_err(|reason| StudyError::Invalid {
        path: scenario_path.clone(),
        field: "(scenario)".to_owned(),
        reason,
    })?;
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
        to_scenario(&scenario).map_err(|reason| invalid(&field, format!("the scenario it gives: {reason}")))?;
        let engine = match &variant.engine {
            None => EngineVariant::SHIPPED,
            Some(EngineFile::Options(options)) => {
                let mut tree = serde_json::to_value(EngineVariant::SHIPPED).expect("plain booleans serialise");
                merge(&mut tree, &Value::Object(options.clone()));
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
            let variant = c.variant.unwrap_or_else(|| variants[0].name.clone());
            let Some(found) = variants.iter().find(|v| v.name == variant) else {
                return Err(invalid("compaction.variant", format!("no variant named {variant:?}")));
            };
            set_node_count(&mut found.scenario.clone(), &c.class, &Value::from(c.max))
                .map_err(|reason| invalid("compaction.class", reason))?;
            Some(Compaction { class: c.class, variant, min: c.min, max: c.max })
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
    })
}

/// Parses a scenario tree (JSON is YAML, so the scenario parser reads it as it is written).
pub fn to_scenario(value: &Value) -> Result<Scenario, String> {
    parse_scenario(&value.to_string()).map_err(|e| e.to_string())
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
    if let Some(set) = &variant.set {
        merge(&mut scenario, &Value::Object(set.clone()));
    }
    Ok(scenario)
}

/// Sets the node count of the one node group offering `class` (absolute, or `"+n"` / `"-n"`).
pub fn set_node_count(scenario: &mut Value, class: &str, count: &Value) -> Result<(), String> {
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
                "{} node groups have {resource} ({}): set their counts with `set`",
                many.len(),
                prefixes.join(", ")
            ));
        }
    };
    let now = groups[index]["count"].as_i64().unwrap_or(0);
    let new = match count {
        Value::Number(n) => n.as_i64().ok_or("a whole number of nodes")?,
        Value::String(s) if s.starts_with('+') || s.starts_with('-') => {
            let delta: i64 = s.parse().map_err(|_| format!("{s:?} is not +n or -n"))?;
            now + delta
        }
        other => return Err(format!("{other} is not a node count, \"+n\" or \"-n\"")),
    };
    if new < 0 {
        return Err(format!("{now} nodes {count} is below zero"));
    }
    groups[index]["count"] = Value::from(new);
    Ok(())
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
    fn scaling_needs_a_value_to_scale() {
        assert_eq!(adjusted(&Value::from(4), &Value::from("x2.5")).unwrap(), Value::from(10.0));
        assert_eq!(adjusted(&Value::from("90s"), &Value::from("x2")).unwrap(), Value::from("180000ms"));
        assert!(adjusted(&Value::Null, &Value::from("x2")).unwrap_err().contains("nothing to scale"));
        assert!(adjusted(&Value::from(4), &Value::from("x-1")).unwrap_err().contains("finite number ≥ 0"));
    }
}
