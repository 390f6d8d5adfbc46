//! `gpuclaim scenario shrink`: a failing run shrunk to the smallest scenario that still fails the same way, written
//! as a scenario file whose header says what it reproduces and where it came from.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::shrink::{self, Step};
use gpuclaim_scenarios::scenario::parse_scenario;

#[derive(clap::Args, Clone, Debug)]
pub struct Shrink {
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The seed of the failing run.
    #[arg(long)]
    pub seed: u64,
    /// The engine variant of the failing run (judged by its own expectations where the scenario lists it, else by
    /// the shipped engine's).
    #[arg(long, value_name = "NAME", default_value = "shipped")]
    pub variant: String,
    /// Where to write the shrunk scenario (default: FILE's directory, `<stem>-seed<N>-shrunk.yaml`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Take no step after this long (`10m`); the smallest scenario found by then is written.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10m")]
    pub budget: Duration,
}

pub fn shrink(args: Shrink) -> anyhow::Result<ExitCode> {
    let path = &args.file;
    let text = std::fs::read_to_string(path).with_context(|| format!("failed to read scenario {}", path.display()))?;
    let parsed = parse_scenario(&text).map_err(|e| anyhow!("scenario {}: {e}", path.display()))?;
    let value = gpuclaim_engine::yaml::from_str(&text)
        .map_err(|e| anyhow!("scenario {}: not valid YAML: {e}", path.display()))?;
    let variant = Variant::named(&args.variant).map_err(|e| anyhow!("--variant: {e}"))?;
    let listed = parsed.variants().map_err(|e| anyhow!("scenario {}: {e}", path.display()))?;
    let judge_as =
        if listed.iter().any(|(name, _)| *name == args.variant) { args.variant.clone() } else { "shipped".into() };
    let deadline = Instant::now() + args.budget;
    let mut progress = |step: &Step<'_>| {
        let verdict = if step.kept { "kept: still fails the same way" } else { "not kept" };
        eprintln!("shrink: run {}: {}: {verdict}", step.run, step.reduction);
    };
    let shrunk = shrink::shrink(&value, args.seed, variant, &judge_as, Some(deadline), &mut progress)
        .map_err(|e| anyhow!("scenario {}: {e}", path.display()))?;
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = path.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned());
        path.with_file_name(format!("{stem}-seed{}-shrunk.yaml", args.seed))
    });
    let header = format!(
        "# Shrunk by `gpuclaim scenario shrink {} --seed {} --variant {}`: still fails {}{} with seed {} under \
         variant {}.\n# {} runs, {} reductions kept. Replay: gpuclaim scenario run {} --seed {} --variant {}\n",
        path.display(),
        args.seed,
        args.variant,
        shrunk.failure,
        shrunk.at_ms.map_or_else(String::new, |at| format!(" (at {:.3} s)", at as f64 / 1000.0)),
        args.seed,
        args.variant,
        shrunk.runs,
        shrunk.kept,
        out.display(),
        args.seed,
        args.variant,
    );
    let body = gpuclaim_engine::yaml::to_string(&shrunk.scenario);
    std::fs::write(&out, format!("{header}{body}")).with_context(|| format!("failed to write {}", out.display()))?;
    println!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}
