//! `gpuclaim whatif STUDY --out DIR`: a capacity what-if study over the twin, every variant × seed in parallel with a
//! progress bar on standard error, written as a report (docs/whatif.md).

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::anyhow;
use gpuclaim_reports::Progress;
use gpuclaim_reports::render::write_report;
use gpuclaim_reports::study::{SEEDS_MAX, load_study};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(clap::Args)]
pub struct Args {
    /// The study (reports/examples/*.yaml).
    #[arg(value_name = "STUDY.yaml")]
    study: PathBuf,
    /// Where the report goes (report.html, report.md, charts/, summary.json, runs.csv).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Seeds 1 to N instead of the study's.
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// Runs at once (default: the machine's cores). The output does not depend on it.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut study = load_study(&args.study)?;
    if let Some(seeds) = args.seeds {
        if seeds == 0 || seeds as usize > SEEDS_MAX {
            return Err(anyhow!("--seeds: between 1 and {SEEDS_MAX}"));
        }
        study.seeds = (1..=seeds).collect();
    }
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
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
    let started = std::time::Instant::now();
    let report = gpuclaim_reports::run_study(&study, jobs, &progress)?;
    if let Some(done) = bar.lock().expect("no panic").take() {
        done.finish();
    }
    // The command that reproduces the report: the study, the seeds, the output (--jobs changes nothing).
    let seeds = args.seeds.map_or(String::new(), |n| format!(" --seeds {n}"));
    let command = format!("gpuclaim whatif {} --out {}{seeds}", args.study.display(), args.out.display());
    write_report(&report, &args.out, &command)?;
    eprintln!(
        "{} runs in {:.1} s on {jobs} jobs; report in {}",
        report.runs.len(),
        started.elapsed().as_secs_f64(),
        args.out.join("report.html").display()
    );
    Ok(())
}
