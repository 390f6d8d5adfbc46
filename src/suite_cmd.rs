//! `gpuclaim scenario run` and `gpuclaim suite`: checked runs of scenario files, a table per scenario × variant ×
//! seed, the exact command that replays each failure, and a JUnit report for CI.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, anyhow};
use gpuclaim_scenarios::check::suite::{self, Loaded, Outcome, Plan};

/// What both commands take besides the files.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Seeds per scenario: its own seed (or 1) and the ones after it.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// One seed (a replay), instead of --seeds.
    #[arg(long, conflicts_with_all = ["seeds", "soak"])]
    pub seed: Option<u64>,
    /// A soak: this many seeds per scenario and variant, from --from, each run once (the plain run proves
    /// determinism); the failures summarised by what broke, one replay command each.
    #[arg(long, value_name = "SEEDS", conflicts_with = "seeds")]
    pub soak: Option<u64>,
    /// The soak's first seed.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "soak")]
    pub from: u64,
    /// Start no run after this long (a soak's time budget: `30m`, `1h30m`); what ran is reported.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, requires = "soak")]
    pub budget: Option<std::time::Duration>,
    /// Run this engine variant instead of the scenarios' lists (judged by the shipped engine's expectations where a
    /// scenario does not list it).
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    pub jobs: Option<usize>,
}

#[derive(clap::Args, Clone, Debug)]
pub struct ScenarioRun {
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(clap::Args, Clone, Debug)]
pub struct Suite {
    /// The directory of scenario files.
    #[arg(value_name = "DIR", default_value = "scenarios/suite")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
}

pub fn scenario_run(args: ScenarioRun) -> anyhow::Result<ExitCode> {
    run(&args.files, &args.run, "scenarios")
}

pub fn suite(args: Suite) -> anyhow::Result<ExitCode> {
    let files = suite::scenario_files(&args.dir).map_err(|e| anyhow!(e))?;
    run(&files, &args.run, &args.dir.display().to_string())
}

fn run(files: &[PathBuf], args: &RunArgs, name: &str) -> anyhow::Result<ExitCode> {
    let loaded: Vec<Loaded> = files.iter().map(|f| suite::load(f)).collect::<Result<_, _>>().map_err(|e| anyhow!(e))?;
    let plan = Plan {
        seeds: args.soak.unwrap_or(args.seeds),
        seed: args.seed,
        from: args.soak.map(|_| args.from),
        once: args.soak.is_some(),
        variant: args.variant.clone(),
    };
    let jobs = suite::plan(&loaded, &plan).map_err(|e| anyhow!(e))?;
    let threads = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let total = jobs.len();
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let started = Instant::now();
    let progress = |outcome: &Outcome| {
        let done = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let verdict = if outcome.passed() { "pass" } else { "FAIL" };
        eprintln!(
            "[{done}/{total}] {verdict} {} {} seed {}",
            stem(&loaded[outcome.job.scenario].path),
            outcome.job.variant_name,
            outcome.job.seed
        );
    };
    let deadline = args.budget.map(|budget| started + budget);
    let outcomes = if args.soak.is_some() {
        // A soak's progress is its failures: a line per run would be thousands.
        let failures = |outcome: &Outcome| {
            if !outcome.passed() {
                progress(outcome);
            } else {
                finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        suite::run_jobs(&loaded, jobs, threads, true, deadline, &failures)
    } else {
        suite::run_jobs(&loaded, jobs, threads, false, deadline, &progress)
    };
    let wall = started.elapsed().as_secs_f64();
    match args.soak {
        Some(_) => print_soak(&loaded, &outcomes, total, wall),
        None => print_table(&loaded, &outcomes, wall),
    }
    let rates = suite::rates(&outcomes);
    print_rates(&loaded, &rates);
    if let Some(path) = &args.junit {
        write_junit(path, name, &loaded, &outcomes, &rates)?;
    }
    let failed = outcomes.iter().any(|o| !o.passed()) || rates.iter().any(|r| !r.passed());
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// The command that replays one run exactly.
fn replay(loaded: &Loaded, outcome: &Outcome) -> String {
    format!(
        "gpuclaim scenario run {} --seed {} --variant {}",
        loaded.path.display(),
        outcome.job.seed,
        outcome.job.variant_name
    )
}

fn print_table(loaded: &[Loaded], outcomes: &[Outcome], wall: f64) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<36} {:<24} {:>6} {:<6} {:>8} {:>6} {:>9} {:>8} {:<16}",
        "scenario", "variant", "seed", "result", "events", "starts", "wait p90", "refused", "event log"
    );
    for outcome in outcomes {
        let scenario = stem(&loaded[outcome.job.scenario].path);
        let verdict = if outcome.passed() { "pass" } else { "FAIL" };
        let variant = if outcome.job.judge_as == outcome.job.variant_name {
            outcome.job.variant_name.clone()
        } else {
            format!("{} (as {})", outcome.job.variant_name, outcome.job.judge_as)
        };
        let (events, starts, p90, refused, hash) = match &outcome.result {
            Ok((run, _)) => (
                run.figures.events.to_string(),
                run.figures.vm_starts.to_string(),
                format!("{:.1}s", run.figures.start_wait.p90_ms as f64 / 1000.0),
                run.figures.refusals.to_string(),
                run.hash.chars().take(12).collect::<String>(),
            ),
            Err(_) => Default::default(),
        };
        let _ = writeln!(
            out,
            "{scenario:<36} {variant:<24} {:>6} {verdict:<6} {events:>8} {starts:>6} {p90:>9} {refused:>8} {hash:<16}",
            outcome.job.seed
        );
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.passed()).collect();
    for outcome in &failed {
        let loaded = &loaded[outcome.job.scenario];
        let _ = writeln!(
            out,
            "\nFAIL {} {} seed {}: {}\n  replay: {}",
            stem(&loaded.path),
            outcome.job.variant_name,
            outcome.job.seed,
            outcome.failure().unwrap_or_default(),
            replay(loaded, outcome)
        );
        if let Ok((run, _)) = &outcome.result {
            for judged in run.judged.iter().filter(|j| !j.passed) {
                let _ = writeln!(out, "  expectation {}: {}", judged.label, judged.detail);
            }
        }
    }
    let _ = writeln!(
        out,
        "\n{} runs (each twice, event-log hashes compared): {} passed, {} failed, {wall:.1} s",
        outcomes.len(),
        outcomes.len() - failed.len(),
        failed.len()
    );
}

/// A soak's report: per scenario and variant the runs, failures and wall time, then the failures grouped by what
/// broke (the invariant or the expectation), with the first seeds and one replay command each.
fn print_soak(loaded: &[Loaded], outcomes: &[Outcome], planned: usize, wall: f64) {
    use std::collections::BTreeMap;
    let mut out = std::io::stdout().lock();
    let mut rows: BTreeMap<(String, String), (u64, u64, f64)> = BTreeMap::new();
    let mut broke: BTreeMap<(String, String, String), Vec<&Outcome>> = BTreeMap::new();
    for outcome in outcomes {
        let key = (stem(&loaded[outcome.job.scenario].path), outcome.job.variant_name.clone());
        let row = rows.entry(key.clone()).or_default();
        row.0 += 1;
        row.2 += outcome.wall_seconds;
        if let Some(what) = outcome.broke() {
            row.1 += 1;
            broke.entry((key.0, key.1, what)).or_default().push(outcome);
        }
    }
    let _ = writeln!(out, "{:<36} {:<24} {:>8} {:>8} {:>10}", "scenario", "variant", "runs", "failed", "run s");
    for ((scenario, variant), (runs, failed, seconds)) in &rows {
        let _ = writeln!(out, "{scenario:<36} {variant:<24} {runs:>8} {failed:>8} {seconds:>10.1}");
    }
    for ((scenario, variant, what), failures) in &broke {
        let seeds: Vec<String> = failures.iter().take(8).map(|o| o.job.seed.to_string()).collect();
        let more = if failures.len() > 8 { format!(" and {} more", failures.len() - 8) } else { String::new() };
        let first = failures[0];
        let _ = writeln!(
            out,
            "
FAIL {scenario} {variant}: {what}: {} runs (seeds {}{more})
  first: {}
  replay: {}",
            failures.len(),
            seeds.join(", "),
            first.failure().unwrap_or_default(),
            replay(&loaded[first.job.scenario], first)
        );
    }
    let failed: usize = broke.values().map(Vec::len).sum();
    let skipped = planned - outcomes.len();
    let budget = if skipped > 0 { format!(", {skipped} not started (time budget)") } else { String::new() };
    let _ = writeln!(
        out,
        "
{} runs (soak: each once): {} passed, {failed} failed{budget}, {wall:.1} s",
        outcomes.len(),
        outcomes.len() - failed
    );
}

/// The rate expectations, each over its runs: a line each, `FAIL` where too few runs broke it.
fn print_rates(loaded: &[Loaded], rates: &[suite::RateVerdict]) {
    let mut out = std::io::stdout().lock();
    for rate in rates {
        let verdict = if rate.passed() { "rate" } else { "FAIL rate" };
        let _ = writeln!(out, "{verdict} {} {}: {rate}", stem(&loaded[rate.scenario].path), rate.variant);
    }
}

fn write_junit(
    path: &Path,
    name: &str,
    loaded: &[Loaded],
    outcomes: &[Outcome],
    rates: &[suite::RateVerdict],
) -> anyhow::Result<()> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut report = Report::new("gpuclaim");
    let mut suites: Vec<TestSuite> = Vec::new();
    for (index, scenario) in loaded.iter().enumerate() {
        let mut test_suite = TestSuite::new(format!("{name}/{}", stem(&scenario.path)));
        for outcome in outcomes.iter().filter(|o| o.job.scenario == index) {
            let status = if outcome.passed() {
                TestCaseStatus::success()
            } else {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(outcome.failure().unwrap_or_default());
                status.set_description(format!("replay: {}", replay(scenario, outcome)));
                status
            };
            let mut case = TestCase::new(format!("{} seed {}", outcome.job.variant_name, outcome.job.seed), status);
            case.set_classname(stem(&scenario.path));
            case.set_time(std::time::Duration::from_secs_f64(outcome.wall_seconds));
            test_suite.add_test_case(case);
        }
        for rate in rates.iter().filter(|r| r.scenario == index) {
            let status = if rate.passed() {
                TestCaseStatus::success()
            } else {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status.set_message(rate.to_string());
                status
            };
            let mut case = TestCase::new(format!("{} rate {}", rate.variant, rate.label), status);
            case.set_classname(stem(&scenario.path));
            test_suite.add_test_case(case);
        }
        suites.push(test_suite);
    }
    report.add_test_suites(suites);
    let file = std::fs::File::create(path).with_context(|| format!("failed to create {}", path.display()))?;
    report.serialize(std::io::BufWriter::new(file)).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(())
}
