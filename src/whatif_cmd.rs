//! `gpuclaim whatif STUDY --out DIR`: a capacity what-if study over the twin, every variant × seed in parallel with a
//! progress bar on standard error, written as a report (docs/whatif.md). With `--shard I/N` the process makes only
//! its share of the runs; `whatif merge` writes the report from the shards' runs, the same bytes as one process
//! would; `whatif status` says how far the shards are.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use gpuclaim_reports::Progress;
use gpuclaim_reports::render::write_report;
use gpuclaim_reports::shard::{self, Merged, Shard, ShardError};
use gpuclaim_reports::study::{SEEDS_MAX, Study, load_study};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The study (reports/examples/*.yaml).
    #[arg(value_name = "STUDY.yaml", required = true)]
    study: Option<PathBuf>,
    /// Where the report goes (report.html, report.md, charts/, summary.json, runs.csv); with --shard, where the
    /// shard's runs go (DIR/shards/I/).
    #[arg(long, value_name = "DIR", required = true)]
    out: Option<PathBuf>,
    #[command(flatten)]
    seeds: Seeds,
    /// Runs at once (default: the machine's cores). The output does not depend on it.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Make only shard I of N of the runs (runs whose position p has p mod N = I − 1), written to DIR/shards/I/;
    /// runs already written there are skipped, so a restarted shard resumes.
    #[arg(long, value_name = "I/N", conflicts_with = "completion_index")]
    shard: Option<Shard>,
    /// The same as --shard K+1/N, as an Indexed Job numbers its pods (`$(JOB_COMPLETION_INDEX)`, from 0), with
    /// --shards N.
    #[arg(long, value_name = "K", requires = "shards")]
    completion_index: Option<u32>,
    /// With --completion-index: how many shards.
    #[arg(long, value_name = "N", requires = "completion_index")]
    shards: Option<u32>,
    /// With --shard: the round to make (0: the variants × seeds; later rounds: the compaction probes the merge
    /// decided).
    #[arg(long, value_name = "R", default_value_t = 0)]
    round: u32,
}

#[derive(clap::Args)]
struct Seeds {
    /// Seeds 1 to N instead of the study's.
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Writes the report from the runs of shards (`whatif STUDY --shard I/N`), byte for byte the one a single
    /// process writes; or, while a compaction search goes on, decides its next round.
    Merge {
        #[arg(value_name = "STUDY.yaml")]
        study: PathBuf,
        /// The study's output directory: the report goes there, and the next round's plan (DIR/rounds/).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[command(flatten)]
        seeds: Seeds,
        /// The shards' directories: every run of the study must be in exactly one of them (default: every
        /// DIR/shards/*).
        #[arg(value_name = "SHARD_DIR")]
        shards: Vec<PathBuf>,
        /// While runs are missing (shards still running), look again every 10 s for this long before giving up
        /// (`30m`, `24h`); the merge Job of the chart starts with the shards.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        wait: Option<std::time::Duration>,
    },
    /// How far the shards of a study are: runs written per shard and round, and the estimated rest.
    Status {
        /// The study's output directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Some(Command::Merge { study, out, seeds, shards, wait }) => {
            merge(&study, &out, &seeds, &shards, wait.unwrap_or_default())
        }
        Some(Command::Status { dir }) => status(&dir),
        None => {
            let (study_path, out) = (args.study.expect("required"), args.out.expect("required"));
            let study = load(&study_path, &args.seeds)?;
            let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
            let shard = match (args.shard, args.completion_index, args.shards) {
                (Some(shard), _, _) => Some(shard),
                (None, Some(index), Some(count)) => Some(
                    format!("{}/{count}", index.saturating_add(1))
                        .parse()
                        .map_err(|e| anyhow!("--completion-index {index} --shards {count}: {e}"))?,
                ),
                _ => None,
            };
            match shard {
                Some(shard) => run_shard(&study, &out, args.round, shard, jobs),
                None if args.round > 0 => {
                    Err(anyhow!("--round {}: only a shard runs a round (--shard I/N)", args.round))
                }
                None => run_whole(&study, &study_path, &out, &args.seeds, jobs),
            }
        }
    }
}

/// The study, its seeds replaced by `--seeds N` when given.
fn load(path: &Path, seeds: &Seeds) -> anyhow::Result<Study> {
    let mut study = load_study(path)?;
    if let Some(seeds) = seeds.seeds {
        if seeds == 0 || seeds as usize > SEEDS_MAX {
            return Err(anyhow!("--seeds: between 1 and {SEEDS_MAX}"));
        }
        study.seeds = (1..=seeds).collect();
    }
    Ok(study)
}

/// The command that reproduces a report in one process: the study, the output, the seeds (--jobs changes nothing).
fn one_process_command(study: &Path, out: &Path, seeds: &Seeds) -> String {
    let seeds = seeds.seeds.map_or(String::new(), |n| format!(" --seeds {n}"));
    format!("gpuclaim whatif {} --out {}{seeds}", study.display(), out.display())
}

fn run_whole(study: &Study, path: &Path, out: &Path, seeds: &Seeds, jobs: usize) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let report = with_progress(|progress| gpuclaim_reports::run_study(study, jobs, progress))?;
    write_report(&report, out, &one_process_command(path, out, seeds))?;
    eprintln!(
        "{} runs in {:.1} s on {jobs} jobs; report in {}",
        report.runs.len(),
        started.elapsed().as_secs_f64(),
        out.join("report.html").display()
    );
    Ok(())
}

fn run_shard(study: &Study, out: &Path, round: u32, shard: Shard, jobs: usize) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let done = with_progress(|progress| shard::run_shard(study, out, round, shard, jobs, progress))?;
    eprintln!(
        "round {round}, shard {shard}: {} runs made in {:.1} s, {} already written; runs in {}",
        done.ran,
        started.elapsed().as_secs_f64(),
        done.skipped,
        shard.dir(out).display()
    );
    Ok(())
}

fn merge(path: &Path, out: &Path, seeds: &Seeds, shards: &[PathBuf], wait: Duration) -> anyhow::Result<()> {
    let study = load(path, seeds)?;
    let started = Instant::now();
    let merged = loop {
        // No shard directory yet (DIR/shards not made): no run is there yet.
        let dirs = if shards.is_empty() { shard::shard_dirs(out).unwrap_or_default() } else { shards.to_vec() };
        match shard::merge(&study, out, &dirs) {
            Err(missing @ ShardError::Missing { .. }) if started.elapsed() < wait => {
                eprintln!("waiting for the shards: {missing}");
                std::thread::sleep(MERGE_POLL.min(wait.saturating_sub(started.elapsed())));
            }
            merged => break merged?,
        }
    };
    match merged {
        Merged::Report(report) => {
            write_report(&report, out, &one_process_command(path, out, seeds))?;
            eprintln!("{} runs merged; report in {}", report.runs.len(), out.join("report.html").display());
        }
        Merged::NextRound { round, nodes, runs } => eprintln!(
            "the compaction search needs round {round} next: {nodes} nodes, {runs} runs (plan in {}); run the shards \
             with --round {round}, then merge again",
            out.join("rounds").join(format!("{round}.json")).display()
        ),
    }
    Ok(())
}

/// How often a waiting merge looks for the runs again.
const MERGE_POLL: Duration = Duration::from_secs(10);

fn status(dir: &Path) -> anyhow::Result<()> {
    let shards = shard::status(dir)?;
    println!("{:>6} {:>6} {:>8} {:>8} {:>12}", "shard", "round", "written", "of", "rest");
    for shard in &shards {
        let rest = shard.estimated_rest_seconds().map_or("?".to_owned(), |s| format!("{s:.0} s"));
        for (round, (done, share)) in &shard.rounds {
            println!("{:>6} {round:>6} {done:>8} {share:>8} {rest:>12}", shard.shard);
        }
    }
    let (done, left): (usize, usize) = shards.iter().fold((0, 0), |(d, l), s| (d + s.done(), l + s.left()));
    let slowest = shards.iter().filter_map(|s| s.estimated_rest_seconds()).fold(0.0, f64::max);
    println!(
        "{done} runs written, {left} to make in the rounds started; the slowest shard ends in about {slowest:.0} s"
    );
    Ok(())
}

/// Runs `work` with a progress bar on standard error.
fn with_progress<T>(work: impl FnOnce(&(dyn Fn(Progress) + Sync)) -> T) -> T {
    let bar: Mutex<Option<ProgressBar>> = Mutex::new(None);
    let style = ProgressStyle::with_template("{msg:32} [{bar:40}] {pos}/{len} runs, {elapsed}")
        .expect("a valid template")
        .progress_chars("=> ");
    let progress = |event: Progress| {
        let mut bar = bar.lock().expect("the progress callback does not panic");
        match event {
            Progress::Phase { name, runs } => {
                if let Some(done) = bar.take() {
                    done.finish();
                }
                let next = ProgressBar::with_draw_target(Some(runs), ProgressDrawTarget::stderr());
                next.set_style(style.clone());
                next.set_message(name);
                *bar = Some(next);
            }
            Progress::RunDone => {
                if let Some(bar) = bar.as_ref() {
                    bar.inc(1);
                }
            }
        }
    };
    let result = work(&progress);
    if let Some(done) = bar.lock().expect("no panic").take() {
        done.finish();
    }
    result
}
