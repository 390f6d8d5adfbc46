//! The runner behind `gpuclaim scenario run` and `gpuclaim suite`: every scenario × variant × seed as one job, run
//! twice (hashes compared) on worker threads, results in the order the jobs were planned whatever the threads did.
//! A soak runs each job once (the plain run proves determinism; a soak looks for behaviour over many seeds) and may
//! stop taking jobs at a deadline.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::log::EventLog;

use super::run::{CheckedRun, run_checked, run_twice};
use crate::scenario::{Scenario, parse_scenario};

/// A scenario file read and parsed.
pub struct Loaded {
    pub path: PathBuf,
    pub scenario: Scenario,
}

/// Reads and parses a scenario file; the error names the file, the field and the reason.
pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("scenario {}: cannot read: {e}", path.display()))?;
    let scenario = parse_scenario(&text).map_err(|e| format!("scenario {}: {e}", path.display()))?;
    Ok(Loaded { path: path.to_owned(), scenario })
}

/// The scenario files of a directory (`*.yaml`, `*.yml`), in name order.
pub fn scenario_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: cannot list: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("{}: no scenario files (*.yaml)", dir.display()));
    }
    Ok(files)
}

/// Which runs to make of the loaded scenarios.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Seeds per scenario: the scenario's seed (or 1) and the ones after it.
    pub seeds: u64,
    /// One seed instead (a replay).
    pub seed: Option<u64>,
    /// The first seed, instead of the scenario's own (a soak's range `from .. from + seeds`).
    pub from: Option<u64>,
    /// Run each job once, not twice with the hashes compared (a soak).
    pub once: bool,
    /// Run this variant instead of the scenario's list. When the scenario does not list it, its engine is judged
    /// by the shipped engine's expectations (a changed rule must not break what ships).
    pub variant: Option<String>,
}

/// One run to make.
#[derive(Clone, Debug)]
pub struct Job {
    /// Index into the loaded scenarios.
    pub scenario: usize,
    pub variant_name: String,
    pub variant: Variant,
    /// The expectations it is judged by (a variant's name).
    pub judge_as: String,
    pub seed: u64,
}

/// A job's outcome.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub job: Job,
    pub wall_seconds: f64,
    pub result: Result<(CheckedRun, Option<String>), String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        matches!(&self.result, Ok((run, None)) if run.passed())
    }

    /// Why it failed, in a line.
    pub fn failure(&self) -> Option<String> {
        match &self.result {
            Err(error) => Some(error.clone()),
            Ok((_, Some(mismatch))) => Some(mismatch.clone()),
            Ok((run, None)) => run.failure(),
        }
    }
}

/// The jobs of `scenarios` under `plan`, in order: scenario, variant, seed.
pub fn plan(scenarios: &[Loaded], plan: &Plan) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for (index, loaded) in scenarios.iter().enumerate() {
        let listed = loaded.scenario.variants().map_err(|e| format!("scenario {}: {e}", loaded.path.display()))?;
        let variants: Vec<(String, Variant, String)> = match &plan.variant {
            None => listed.into_iter().map(|(name, v)| (name.clone(), v, name)).collect(),
            Some(name) => {
                let variant = Variant::named(name).map_err(|e| e.to_string())?;
                let judge_as =
                    if listed.iter().any(|(known, _)| known == name) { name.clone() } else { "shipped".into() };
                vec![(name.clone(), variant, judge_as)]
            }
        };
        let base = plan.from.unwrap_or_else(|| loaded.scenario.seed.unwrap_or(1));
        let seeds: Vec<u64> = match plan.seed {
            Some(seed) => vec![seed],
            None => (0..plan.seeds.max(1)).map(|i| base.wrapping_add(i)).collect(),
        };
        for (variant_name, variant, judge_as) in variants {
            for seed in &seeds {
                jobs.push(Job {
                    scenario: index,
                    variant_name: variant_name.clone(),
                    variant,
                    judge_as: judge_as.clone(),
                    seed: *seed,
                });
            }
        }
    }
    Ok(jobs)
}

/// Runs the jobs on `threads` workers, each twice (or once when `once`); `done` is told of each outcome as it
/// finishes (progress). No job starts after `deadline`: those are left out. Outcomes come back in job order.
pub fn run_jobs(
    scenarios: &[Loaded],
    jobs: Vec<Job>,
    threads: usize,
    once: bool,
    deadline: Option<std::time::Instant>,
    done: &(dyn Fn(&Outcome) + Sync),
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(index) else { break };
                    let started = std::time::Instant::now();
                    if deadline.is_some_and(|deadline| started >= deadline) {
                        break;
                    }
                    let loaded = &scenarios[job.scenario];
                    let result = match once {
                        true => {
                            run_checked(&loaded.scenario, job.variant, &job.judge_as, job.seed, EventLog::new(None))
                                .map(|run| (run, None))
                        }
                        false => run_twice(&loaded.scenario, job.variant, &job.judge_as, job.seed),
                    }
                    .map_err(|e| format!("scenario {}: {e}", loaded.path.display()));
                    let outcome = Outcome { job: job.clone(), wall_seconds: started.elapsed().as_secs_f64(), result };
                    done(&outcome);
                    results.lock().expect("no worker panics holding it")[index] = Some(outcome);
                }
            });
        }
    });
    results.into_inner().expect("workers done").into_iter().flatten().collect()
}

impl Outcome {
    /// What broke, as a soak groups failures: the invariant, the first failed expectation, or the error.
    pub fn broke(&self) -> Option<String> {
        match &self.result {
            _ if self.passed() => None,
            Err(_) => Some("error".to_owned()),
            Ok((_, Some(_))) => Some("not deterministic".to_owned()),
            Ok((run, None)) => Some(match (&run.stop, run.judged.iter().find(|j| !j.passed)) {
                (Some(stop), _) => format!("invariant {}", stop.violation.invariant),
                (None, Some(judged)) => format!("expectation {}", judged.label),
                (None, None) => "unknown".to_owned(),
            }),
        }
    }
}

/// An expectation with a rate, judged over the runs of one scenario and variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateVerdict {
    /// Index into the loaded scenarios.
    pub scenario: usize,
    pub variant: String,
    pub label: String,
    /// The share of runs that must break it, in thousandths.
    pub per_mille: u32,
    pub broken: u64,
    pub runs: u64,
}

impl RateVerdict {
    pub fn passed(&self) -> bool {
        self.broken * 1000 >= u64::from(self.per_mille) * self.runs
    }
}

impl std::fmt::Display for RateVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let share = if self.runs == 0 { 0.0 } else { self.broken as f64 * 100.0 / self.runs as f64 };
        write!(
            f,
            "{}: broke in {} of {} runs ({share:.1}%), at least {:.1}% expected",
            self.label,
            self.broken,
            self.runs,
            f64::from(self.per_mille) / 10.0
        )
    }
}

/// The rate expectations of `outcomes`, each over the runs of its scenario and variant (in label order).
pub fn rates(outcomes: &[Outcome]) -> Vec<RateVerdict> {
    let mut verdicts: std::collections::BTreeMap<(usize, String, String), RateVerdict> = Default::default();
    for outcome in outcomes {
        let Ok((run, _)) = &outcome.result else { continue };
        for (label, per_mille, broken) in &run.rates {
            let key = (outcome.job.scenario, outcome.job.variant_name.clone(), label.clone());
            let verdict = verdicts.entry(key).or_insert_with(|| RateVerdict {
                scenario: outcome.job.scenario,
                variant: outcome.job.variant_name.clone(),
                label: label.clone(),
                per_mille: *per_mille,
                broken: 0,
                runs: 0,
            });
            verdict.runs += 1;
            verdict.broken += u64::from(*broken);
        }
    }
    verdicts.into_values().collect()
}
