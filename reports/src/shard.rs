//! A study on many machines (docs/whatif.md, "A study on many machines"): its runs split into shards, each shard a
//! process (an Indexed Job's pod), and a merge that writes the report a one-process run writes, byte for byte.
//!
//! What a shard writes, under the study's output directory `DIR`:
//! - `DIR/shards/<I>/run-<round>-<position>.json`: one run's result, with the study's fingerprint and the run's wall
//!   time. Written under a temporary name and renamed, so a file that exists is whole: a restarted shard skips the
//!   runs it already wrote and resumes with the next.
//! - `DIR/rounds/<R>.json` (written by the merge): the compaction probe round `R` runs.
//!
//! Which shard makes which run is fixed: a round's runs are numbered in the one-process run's order, and shard `I` of
//! `N` makes those whose position `p` has `p mod N = I − 1`. Round 0 is the variants × seeds and, when the study has a
//! compaction search, its first probe (the most nodes); each later round is one probe, which the merge of the rounds
//! before decides (a bisection decides its next probe from the last one's result).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::compaction::{Search, probe_runs};
use crate::run::{RunError, RunResult};
use crate::study::Study;
use crate::{PlannedRun, Progress, Report, ReportError, RunId, assemble, parallel, plan_variants, run_planned};

/// The most shards a study may be split into.
pub const SHARDS_MAX: u32 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("failed to read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("failed to write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error(
        "{path}: a run of another study (its fingerprint {found}, this study's {expected}): the study, its base scenario or the seeds changed since the shard ran"
    )]
    OtherStudy { path: PathBuf, found: String, expected: String },
    #[error("{id} (round {round}) was written twice: {first} and {second}")]
    Duplicate { id: RunId, round: u32, first: PathBuf, second: PathBuf },
    #[error("{id} (round {round}, position {position}) is missing: no shard directory given holds it")]
    Missing { id: RunId, round: u32, position: usize },
    #[error("{path}: {id} is not a run of round {round} at position {position} (that is {expected})")]
    Misplaced { path: PathBuf, id: RunId, round: u32, position: usize, expected: RunId },
    #[error("{path}: round {round}, position {position} is no run of this study's plan")]
    Unplanned { path: PathBuf, round: u32, position: usize },
    #[error("round {round}: the compaction search has not decided it yet (merge the rounds before it first)")]
    RoundUndecided { round: u32 },
    #[error("{id}: its figures do not survive JSON exactly, so a merge could not give the one-process report")]
    Inexact { id: RunId },
}

/// Shard `number` of `count`, both from 1 (`--shard 2/3`; an Indexed Job's pod is `JOB_COMPLETION_INDEX + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub number: u32,
    pub count: u32,
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let shape = || format!("{text:?}: a shard is I/N, with 1 ≤ I ≤ N ≤ {SHARDS_MAX} (e.g. 2/3)");
        let (number, count) = text.split_once('/').ok_or_else(shape)?;
        let (number, count) = (number.trim().parse::<u32>(), count.trim().parse::<u32>());
        match (number, count) {
            (Ok(number), Ok(count)) if 1 <= number && number <= count && count <= SHARDS_MAX => {
                Ok(Shard { number, count })
            }
            _ => Err(shape()),
        }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.number, self.count)
    }
}

impl Shard {
    /// Whether the run at `position` of a round is this shard's.
    pub fn takes(&self, position: usize) -> bool {
        position % self.count as usize == (self.number - 1) as usize
    }

    /// Where this shard writes under the study's output directory.
    pub fn dir(&self, out: &Path) -> PathBuf {
        out.join("shards").join(self.number.to_string())
    }
}

/// What identifies a study's runs: a SHA-256 over its file's text, each variant's resolved scenario and rules, the
/// seeds and the sampling. A shard's runs merge only into the study they were made for.
pub fn fingerprint(study: &Study) -> String {
    let variants: Vec<serde_json::Value> = study
        .variants
        .iter()
        .map(|v| serde_json::json!({"name": v.name, "scenario": v.scenario, "engine": v.engine}))
        .collect();
    let identity = serde_json::json!({
        "text": study.text,
        "seeds": study.seeds,
        "samples": study.samples,
        "warmup_ms": study.warmup.0,
        "variants": variants,
    });
    let digest = Sha256::digest(serde_json::to_vec(&identity).expect("plain values serialise"));
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One run as a shard writes it.
#[derive(Debug, Serialize, Deserialize)]
struct RunFile {
    study: String,
    round: u32,
    position: usize,
    /// How long the run took on the machine that made it (for `whatif status`; no report reads it).
    wall_seconds: f64,
    run: RunResult,
}

/// How many runs of a round a shard has to make, as `DIR/shards/<I>/share-<round>.json` holds it (for `whatif status`).
#[derive(Debug, Serialize, Deserialize)]
struct ShareFile {
    study: String,
    round: u32,
    shard: String,
    runs: usize,
}

/// A probe a merge decided, as `DIR/rounds/<R>.json` holds it.
#[derive(Debug, Serialize, Deserialize)]
struct RoundFile {
    study: String,
    round: u32,
    nodes: u32,
}

/// The runs of `round`, in the one-process run's order: round 0 the variants × seeds and the compaction's first
/// probe; a later round the probe the merge decided for it.
pub fn round_plan(study: &Study, out: &Path, round: u32) -> Result<Vec<PlannedRun>, ShardError> {
    let first_probe = || study.compaction.as_ref().map(|spec| Search::new(spec).next().expect("a search starts"));
    if round == 0 {
        let mut plan = plan_variants(study)?;
        if let Some(nodes) = first_probe() {
            plan.extend(probe_runs(study, nodes)?);
        }
        return Ok(plan);
    }
    let path = out.join("rounds").join(format!("{round}.json"));
    if !path.exists() {
        return Err(ShardError::RoundUndecided { round });
    }
    let decided: RoundFile = read_json(&path)?;
    let expected = fingerprint(study);
    if decided.study != expected {
        return Err(ShardError::OtherStudy { path, found: decided.study, expected });
    }
    Ok(probe_runs(study, decided.nodes)?)
}

/// What a shard did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardDone {
    /// Runs made now.
    pub ran: usize,
    /// Runs found already written (a restarted shard).
    pub skipped: usize,
}

/// Makes `shard`'s share of `round` on `jobs` threads, each run written to `DIR/shards/<I>/` as it ends; runs
/// already written whole are skipped.
pub fn run_shard(
    study: &Study,
    out: &Path,
    round: u32,
    shard: Shard,
    jobs: usize,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<ShardDone, ShardError> {
    let plan = round_plan(study, out, round)?;
    let dir = shard.dir(out);
    std::fs::create_dir_all(&dir).map_err(|e| ShardError::Write { path: dir.clone(), reason: e.to_string() })?;
    let expected = fingerprint(study);
    let mine: Vec<(usize, &PlannedRun)> = plan.iter().enumerate().filter(|(p, _)| shard.takes(*p)).collect();
    let mut todo = Vec::new();
    for (position, planned) in mine.iter().copied() {
        let path = run_path(&dir, round, position);
        // A file there is whole (written under another name, then renamed); one of another study is not skipped.
        match read_json::<RunFile>(&path) {
            Ok(file) if file.study == expected && file.run.variant == planned.id.variant => continue,
            _ => todo.push((position, planned)),
        }
    }
    let skipped = mine.len() - todo.len();
    let share = ShareFile { study: expected.clone(), round, shard: shard.to_string(), runs: mine.len() };
    write_json(&dir, &format!("share-{round}.json"), &share)?;
    progress(Progress::Phase { name: format!("round {round}, shard {shard}"), runs: todo.len() as u64 });
    let written = parallel(&todo, jobs, progress, |&(position, planned)| {
        let started = Instant::now();
        let run = run_planned(study, planned)?;
        let file =
            RunFile { study: expected.clone(), round, position, wall_seconds: started.elapsed().as_secs_f64(), run };
        write_run(&dir, &file).map_err(|reason| RunError {
            variant: planned.id.variant.clone(),
            seed: planned.id.seed,
            reason,
        })
    })?;
    Ok(ShardDone { ran: written.len(), skipped })
}

/// What a merge found: the report, or the round the compaction search needs next.
#[derive(Debug)]
pub enum Merged {
    Report(Box<Report>),
    /// Round `round` must run (its probe: `nodes` nodes, `runs` runs) before the report can be written; its plan is
    /// in `DIR/rounds/<round>.json`.
    NextRound {
        round: u32,
        nodes: u32,
        runs: usize,
    },
}

/// Reads every run the shard directories hold, checks that each planned run is there exactly once, and assembles the
/// report a one-process run gives; or, while a compaction search goes on, decides its next round.
pub fn merge(study: &Study, out: &Path, shard_dirs: &[PathBuf]) -> Result<Merged, ShardError> {
    let expected = fingerprint(study);
    let mut found: BTreeMap<(u32, usize), (PathBuf, RunFile)> = BTreeMap::new();
    for dir in shard_dirs {
        for path in run_files(dir)? {
            let file: RunFile = read_json(&path)?;
            if file.study != expected {
                return Err(ShardError::OtherStudy { path, found: file.study, expected });
            }
            let at = (file.round, file.position);
            if let Some((first, earlier)) = found.get(&at) {
                let id = RunId { variant: earlier.run.variant.clone(), seed: earlier.run.seed };
                return Err(ShardError::Duplicate { id, round: at.0, first: first.clone(), second: path });
            }
            found.insert(at, (path, file));
        }
    }
    let plan = round_plan(study, out, 0)?;
    let mut runs = take(&mut found, 0, &plan)?;
    // Round 0 is the variants × seeds, then the first probe's runs.
    let first_probe = runs.split_off(study.variants.len() * study.seeds.len());
    let compaction = match &study.compaction {
        None => None,
        Some(spec) => {
            let mut search = Search::new(spec);
            search.learn(study, &first_probe);
            let mut round = 1;
            while let Some(nodes) = search.next() {
                let plan = probe_runs(study, nodes)?;
                if !found.keys().any(|(r, _)| *r == round) {
                    write_round(out, &RoundFile { study: expected.clone(), round, nodes })?;
                    return Ok(Merged::NextRound { round, nodes, runs: plan.len() });
                }
                search.learn(study, &take(&mut found, round, &plan)?);
                round += 1;
            }
            Some(search.result())
        }
    };
    if let Some(((round, position), (path, _))) = found.into_iter().next() {
        return Err(ShardError::Unplanned { path, round, position });
    }
    Ok(Merged::Report(Box::new(assemble(study, runs, compaction))))
}

/// The runs of `round` in `plan`'s order, taken out of what the shards wrote; each must be there, at its position.
fn take(
    found: &mut BTreeMap<(u32, usize), (PathBuf, RunFile)>,
    round: u32,
    plan: &[PlannedRun],
) -> Result<Vec<RunResult>, ShardError> {
    let mut runs = Vec::with_capacity(plan.len());
    for (position, planned) in plan.iter().enumerate() {
        let Some((path, file)) = found.remove(&(round, position)) else {
            return Err(ShardError::Missing { id: planned.id.clone(), round, position });
        };
        let id = RunId { variant: file.run.variant.clone(), seed: file.run.seed };
        if id != planned.id {
            return Err(ShardError::Misplaced { path, id, round, position, expected: planned.id.clone() });
        }
        runs.push(file.run);
    }
    Ok(runs)
}

/// Every shard's directory under the study's output directory (`DIR/shards/*`), in number order.
pub fn shard_dirs(out: &Path) -> Result<Vec<PathBuf>, ShardError> {
    let shards = out.join("shards");
    let entries =
        std::fs::read_dir(&shards).map_err(|e| ShardError::Read { path: shards.clone(), reason: e.to_string() })?;
    let mut dirs: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse::<u64>().ok()?, entry.path())))
        .collect();
    dirs.sort();
    Ok(dirs.into_iter().map(|(_, dir)| dir).collect())
}

/// Runs done so far by one shard, and what they took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShardStatus {
    /// Its number.
    pub shard: String,
    /// Per round it started: (runs written, runs it has to make).
    pub rounds: BTreeMap<u32, (usize, usize)>,
    /// The wall time of the runs written, summed.
    pub wall_seconds: f64,
}

impl ShardStatus {
    /// Runs written, in every round.
    pub fn done(&self) -> usize {
        self.rounds.values().map(|(done, _)| done).sum()
    }

    /// Runs still to make in the rounds it started.
    pub fn left(&self) -> usize {
        self.rounds.values().map(|(done, share)| share.saturating_sub(*done)).sum()
    }

    /// The rest at the pace of the runs written so far (`None` before the first).
    pub fn estimated_rest_seconds(&self) -> Option<f64> {
        let done = self.done();
        (done > 0).then(|| self.left() as f64 * self.wall_seconds / done as f64)
    }
}

/// What `DIR/shards/*` holds, shard by shard (in number order), read from the run files alone.
pub fn status(out: &Path) -> Result<Vec<ShardStatus>, ShardError> {
    let dirs = shard_dirs(out)?;
    let mut statuses = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let number = dir.file_name().and_then(|name| name.to_str()).unwrap_or_default().to_owned();
        let mut status = ShardStatus { shard: number, ..ShardStatus::default() };
        for path in files_of(&dir, "share-")? {
            let share: ShareFile = read_json(&path)?;
            status.rounds.entry(share.round).or_default().1 = share.runs;
        }
        for path in run_files(&dir)? {
            let file: RunFile = read_json(&path)?;
            status.rounds.entry(file.round).or_default().0 += 1;
            status.wall_seconds += file.wall_seconds;
        }
        statuses.push(status);
    }
    Ok(statuses)
}

fn run_path(dir: &Path, round: u32, position: usize) -> PathBuf {
    dir.join(format!("run-{round}-{position}.json"))
}

/// The run files under `dir` (`run-<round>-<position>.json`), in name order; temporary files are not among them.
fn run_files(dir: &Path) -> Result<Vec<PathBuf>, ShardError> {
    files_of(dir, "run-")
}

/// The `<prefix>*.json` files under `dir`, in name order (temporary files start with a dot).
fn files_of(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, ShardError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| ShardError::Read { path: dir.to_owned(), reason: e.to_string() })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(prefix) && name.ends_with(".json"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Writes a run under a temporary name, then renames it: a file that exists under its name is whole.
fn write_run(dir: &Path, file: &RunFile) -> Result<(), String> {
    let text = serde_json::to_string(file).map_err(|e| e.to_string())?;
    let back: RunFile = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if back.run != file.run {
        let id = RunId { variant: file.run.variant.clone(), seed: file.run.seed };
        return Err(ShardError::Inexact { id }.to_string());
    }
    let path = run_path(dir, file.round, file.position);
    let partial = dir.join(format!(".run-{}-{}.json.partial", file.round, file.position));
    std::fs::write(&partial, text).map_err(|e| format!("failed to write {}: {e}", partial.display()))?;
    std::fs::rename(&partial, &path)
        .map_err(|e| format!("failed to rename {} to {}: {e}", partial.display(), path.display()))
}

fn write_round(out: &Path, round: &RoundFile) -> Result<(), ShardError> {
    let dir = out.join("rounds");
    std::fs::create_dir_all(&dir).map_err(|e| ShardError::Write { path: dir.clone(), reason: e.to_string() })?;
    write_json(&dir, &format!("{}.json", round.round), round)
}

/// Writes `value` as `dir/name` under a temporary name first, then renames it.
fn write_json(dir: &Path, name: &str, value: &impl Serialize) -> Result<(), ShardError> {
    let (path, partial) = (dir.join(name), dir.join(format!(".{name}.partial")));
    let fail = |path: &Path, e: std::io::Error| ShardError::Write { path: path.to_owned(), reason: e.to_string() };
    let text = serde_json::to_string_pretty(value).expect("plain values serialise");
    std::fs::write(&partial, text).map_err(|e| fail(&partial, e))?;
    std::fs::rename(&partial, &path).map_err(|e| fail(&path, e))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ShardError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ShardError::Read { path: path.to_owned(), reason: e.to_string() })?;
    serde_json::from_str(&text).map_err(|e| ShardError::Read { path: path.to_owned(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn a_shard_is_i_of_n_from_one_and_takes_every_nth_run() {
        assert_eq!("2/3".parse::<Shard>(), Ok(Shard { number: 2, count: 3 }));
        for bad in ["0/3", "4/3", "3", "a/b", "1/0", "1/10001"] {
            let error = bad.parse::<Shard>().unwrap_err();
            assert!(error.contains("a shard is I/N, with 1 ≤ I ≤ N"), "{bad}: {error}");
        }
        let shard: Shard = "2/3".parse().unwrap();
        assert_eq!((0..9).filter(|p| shard.takes(*p)).collect::<Vec<_>>(), [1, 4, 7]);
        let all: Vec<usize> = (0..10).filter(|p| (1..=3).any(|i| Shard { number: i, count: 3 }.takes(*p))).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>(), "every run is some shard's, once");
    }
}
