//! Capacity what-if studies over the twin: a study ([`study`]) names a base scenario and variants of it (node counts
//! per class, budgets, arrival rates, lifetimes, engine rules); every variant × seed runs in parallel
//! ([`run_study`]), each run sampled over time ([`run`]); figures are aggregated across seeds ([`stats`]); a
//! compaction search bisects a node count (a class's group, or the groups a label selector picks) against an SLO;
//! the report ([`render`], [`charts`]) is HTML with inline SVG charts, Markdown, SVG and PNG charts, summary.json
//! and runs.csv. Same study and seeds, same bytes.
//!
//! ```no_run
//! use std::path::Path;
//! use gpuclaim_reports::{run_study, study::load_study, render::write_report};
//!
//! let study = load_study(Path::new("reports/examples/h100-headroom.yaml")).unwrap();
//! let report = run_study(&study, 2, &|_| {}).unwrap();
//! write_report(&report, Path::new("out"), "gpuclaim whatif reports/examples/h100-headroom.yaml --out out").unwrap();
//! ```

pub mod charts;
pub mod compaction;
pub mod erlang;
pub mod fill;
pub mod render;
pub mod run;
pub mod shard;
pub mod stats;
pub mod study;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gpuclaim_engine::variant::Variant as EngineVariant;
use gpuclaim_scenarios::scenario::Scenario;
use serde::{Deserialize, Serialize};

use crate::compaction::{Search, probe_runs};
use crate::run::{RunError, RunResult, run_one};
use crate::stats::{SeriesSpread, SloVerdict, Spread, judge, series_spread, spreads};
use crate::study::Study;
use gpuclaim_scenarios::scenario::scenario_from_tree;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("variant {variant}: {reason}")]
    Scenario { variant: String, reason: String },
    #[error("failed to write {path}: {reason}")]
    Write { path: std::path::PathBuf, reason: String },
}

/// What the runner tells its caller as it goes (the CLI draws a progress bar from it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A batch of `runs` runs begins.
    Phase { name: String, runs: u64 },
    /// One run of the batch ended.
    RunDone,
}

/// One variant's figures across seeds.
#[derive(Clone, Debug, Serialize)]
pub struct VariantSummary {
    pub name: String,
    pub description: String,
    /// The engine's rules its runs used.
    pub engine: gpuclaim_engine::variant::Variant,
    pub runs: usize,
    /// Every run scalar (see [`run::RunResult::scalars`]) over seeds.
    pub metrics: BTreeMap<String, Spread>,
    /// Refusals by `<what>:<reason>` over seeds.
    pub refusals: BTreeMap<String, Spread>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloVerdict>,
    /// Series over seeds by name (`utilisation:<class>`, `gate_queue`, ...), for the charts.
    #[serde(skip)]
    pub series: BTreeMap<String, SeriesSpread>,
    /// A fill's curve over seeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<FillCurve>,
}

/// A fill's curve over seeds: per point (% of the cluster's units arrived), the share of them allocated, the
/// seeds' median and range.
#[derive(Clone, Debug, Serialize)]
pub struct FillCurve {
    pub arrived_pct: Vec<f64>,
    pub allocated_p50: Vec<f64>,
    pub allocated_min: Vec<f64>,
    pub allocated_max: Vec<f64>,
    /// The units arrived and not allocated, as a share of the cluster's.
    pub waiting_p50: Vec<f64>,
    pub waiting_min: Vec<f64>,
    pub waiting_max: Vec<f64>,
}

/// One node count a compaction search tried.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub nodes: u32,
    /// The SLO's metric over seeds, in seconds.
    pub spread: Spread,
    pub verdict: SloVerdict,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompactionResult {
    /// What was counted: a class, or a label selector (see [`study::Compaction`]).
    pub target: String,
    pub variant: String,
    pub min: u32,
    pub max: u32,
    /// The fewest nodes meeting the SLO (`None`: not even `max` meets it).
    pub nodes: Option<u32>,
    /// Node counts tried, ascending.
    pub probes: Vec<Probe>,
}

/// A study's runs and what they add up to.
#[derive(Clone, Debug)]
pub struct Report {
    pub study: Study,
    /// Variant by variant in the study's order, seeds in its order.
    pub runs: Vec<RunResult>,
    pub variants: Vec<VariantSummary>,
    pub compaction: Option<CompactionResult>,
}

/// One run a study makes: a variant (or a compaction probe, named `<variant>@[<target>]=<nodes>`) on a seed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RunId {
    pub variant: String,
    pub seed: u64,
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "variant {}, seed {}", self.variant, self.seed)
    }
}

/// A run ready to make: its scenario is shared by the seeds of its variant.
#[derive(Clone, Debug)]
pub struct PlannedRun {
    pub id: RunId,
    pub scenario: Arc<Scenario>,
    pub engine: EngineVariant,
}

/// The study's variants × seeds, variant by variant in the study's order, seeds in its order: the runs a report's
/// tables and charts are made of.
pub fn plan_variants(study: &Study) -> Result<Vec<PlannedRun>, ReportError> {
    let mut plan = Vec::with_capacity(study.variants.len() * study.seeds.len());
    for variant in &study.variants {
        let scenario = scenario_from_tree(&variant.scenario)
            .map_err(|reason| ReportError::Scenario { variant: variant.name.clone(), reason })?;
        let scenario = Arc::new(scenario);
        for &seed in &study.seeds {
            let id = RunId { variant: variant.name.clone(), seed };
            plan.push(PlannedRun { id, scenario: scenario.clone(), engine: variant.engine });
        }
    }
    Ok(plan)
}

/// Makes one planned run of `study`.
pub fn run_planned(study: &Study, planned: &PlannedRun) -> Result<RunResult, RunError> {
    let classes = study.slo.as_ref().map_or(&[][..], |slo| &slo.classes[..]);
    let PlannedRun { id, scenario, engine } = planned;
    let (samples, warmup) = (study.samples, study.warmup);
    let Some(resample_to) = study.fill else {
        return run_one(&id.variant, scenario, *engine, id.seed, samples, warmup, classes, None);
    };
    // A fill's scenario is drawn per seed from its variant's (a compaction refuses a fill, so every run of a fill is
    // a variant's).
    let fail = |reason: String| RunError { variant: id.variant.clone(), seed: id.seed, reason };
    let variant = study.variants.iter().find(|v| v.name == id.variant);
    let variant = variant.ok_or_else(|| fail("no variant of this name in the study".to_owned()))?;
    let (tree, fill) = fill::fill_scenario(&variant.scenario, id.seed, resample_to).map_err(fail)?;
    let scenario = scenario_from_tree(&tree).map_err(fail)?;
    run_one(&id.variant, &scenario, *engine, id.seed, samples, warmup, classes, Some(&fill))
}

/// What a study's runs add up to: `runs` are the variants × seeds in [`plan_variants`]' order.
pub fn assemble(study: &Study, runs: Vec<RunResult>, compaction: Option<CompactionResult>) -> Report {
    let variants = study
        .variants
        .iter()
        .map(|variant| {
            let mine: Vec<&RunResult> = runs.iter().filter(|r| r.variant == variant.name).collect();
            summarise(study, variant, &mine)
        })
        .collect();
    Report { study: study.clone(), runs, variants, compaction }
}

/// Runs every variant × seed on `jobs` threads, then the compaction search if the study asks for one.
pub fn run_study(study: &Study, jobs: usize, progress: &(dyn Fn(Progress) + Sync)) -> Result<Report, ReportError> {
    let plan = plan_variants(study)?;
    progress(Progress::Phase { name: "variants × seeds".to_owned(), runs: plan.len() as u64 });
    let runs = parallel(&plan, jobs, progress, |planned| run_planned(study, planned))?;
    let compaction = match &study.compaction {
        Some(spec) => Some(compact(study, Search::new(spec), jobs, progress)?),
        None => None,
    };
    Ok(assemble(study, runs, compaction))
}

/// One variant's runs over seeds.
fn summarise(study: &Study, variant: &study::Variant, runs: &[&RunResult]) -> VariantSummary {
    let metrics = spreads(runs.iter().map(|r| &r.scalars));
    let refusals: Vec<BTreeMap<String, f64>> =
        runs.iter().map(|r| r.refusals.iter().map(|(k, n)| (k.clone(), *n as f64)).collect()).collect();
    let slo = study.slo.as_ref().map(|slo| judge(slo, &metrics.get(&slo.scalar()).cloned().unwrap_or_default()));
    let mut series = BTreeMap::new();
    if let Some(first) = runs.first() {
        let t = &first.series.t_hours;
        let mut add = |key: String, pick: &dyn Fn(&RunResult) -> Option<&[f64]>| {
            let values: Vec<&[f64]> = runs.iter().filter_map(|r| pick(r)).collect();
            series.insert(key, series_spread(t, &values));
        };
        for class in first.series.utilisation.keys() {
            add(format!("utilisation:{class}"), &|r| r.series.utilisation.get(class).map(Vec::as_slice));
            add(format!("allocated:{class}"), &|r| r.series.allocated.get(class).map(Vec::as_slice));
            add(format!("stranded_units:{class}"), &|r| r.series.stranded.get(class).map(Vec::as_slice));
        }
        add("gate_queue".to_owned(), &|r| Some(&r.series.gate_queue));
        add("crash_loop".to_owned(), &|r| Some(&r.series.crash_loop));
    }
    let fill = runs.iter().any(|r| !r.fill.is_empty()).then(|| {
        let points = runs.iter().map(|r| r.fill.len()).min().unwrap_or(0);
        let arrived: Vec<f64> = (1..=points).map(|x| x as f64).collect();
        let curves: Vec<&[f64]> = runs.iter().map(|r| &r.fill[..points]).collect();
        let spread = series_spread(&arrived, &curves);
        let waiting: Vec<&[f64]> = runs.iter().map(|r| &r.fill_waiting[..points]).collect();
        let waiting = series_spread(&arrived, &waiting);
        FillCurve {
            arrived_pct: spread.t_hours,
            allocated_p50: spread.p50,
            allocated_min: spread.min,
            allocated_max: spread.max,
            waiting_p50: waiting.p50,
            waiting_min: waiting.min,
            waiting_max: waiting.max,
        }
    });
    VariantSummary {
        fill,
        name: variant.name.clone(),
        description: variant.description.clone(),
        engine: variant.engine,
        runs: runs.len(),
        metrics,
        refusals: spreads(refusals.iter()),
        slo,
        series,
    }
}

/// The compaction search run to its end here, one probe (every seed) after another.
fn compact(
    study: &Study,
    mut search: Search,
    jobs: usize,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<CompactionResult, ReportError> {
    let target = &study.compaction.as_ref().expect("called with a compaction").target;
    while let Some(nodes) = search.next() {
        let plan = probe_runs(study, nodes)?;
        progress(Progress::Phase { name: format!("compaction: {nodes} × {target}"), runs: plan.len() as u64 });
        let runs = parallel(&plan, jobs, progress, |planned| run_planned(study, planned))?;
        search.learn(study, &runs);
    }
    Ok(search.result())
}

/// Runs `work` over `items` on `jobs` threads; results come back in the items' order whatever finishes first.
pub(crate) fn parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    progress: &(dyn Fn(Progress) + Sync),
    work: impl Fn(&T) -> Result<R, RunError> + Sync,
) -> Result<Vec<R>, RunError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<R, RunError>>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(index) else { break };
                    let result = work(item);
                    let failed = result.is_err();
                    results.lock().expect("no worker panics holding it")[index] = Some(result);
                    progress(Progress::RunDone);
                    if failed {
                        // Stop handing out work: the first error is reported.
                        next.store(items.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let results = results.into_inner().expect("no worker panicked");
    let mut out = Vec::with_capacity(items.len());
    for result in results {
        match result {
            Some(result) => out.push(result?),
            None => continue,
        }
    }
    Ok(out)
}
