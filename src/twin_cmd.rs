//! `gpuclaim twin serve`: a scenario's twin served as a Kubernetes API server over HTTPS, for kubectl and kube-rs
//! clients (docs/twin.md, "The served API"). Prints `serving https://ADDRESS` once the kubeconfig is written, then
//! serves until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use gpuclaim_scenarios::scenario::parse_scenario;
use gpuclaim_serve::pacer::Speed;
use gpuclaim_sim::kernel::Millis;

#[derive(clap::Args, Debug)]
pub struct Serve {
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Where to listen; port 0 picks a free one (printed first). Loopback unless --allow-remote.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Where to write the kubeconfig of this run (its CA and token are made for the run).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: PathBuf,
    /// Virtual seconds per wall second, or `max` (as fast as the events go).
    #[arg(long, value_name = "SPEED", default_value = "1")]
    pub speed: Speed,
    /// The seed (else the scenario's, else 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop running events at this virtual time (`2h`); the server goes on serving the state reached.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub until: Option<std::time::Duration>,
    /// Changes kept per resource for watches to resume from (older resume points get 410 Gone).
    #[arg(long, value_name = "N", default_value_t = gpuclaim_sim::served::store::HISTORY_PER_RESOURCE_MAX)]
    pub watch_history: usize,
    /// Listen on an address other than loopback (anyone who can reach it and holds the token controls the twin).
    #[arg(long)]
    pub allow_remote: bool,
    /// The GPU controller is not the twin's: the chart's Deployment, once applied, runs as `gpuclaim controller`
    /// processes, and the story's clock starts once they are ready (docs/adapter.md, "End to end on the twin").
    #[arg(long)]
    pub external_controller: bool,
    /// Judge the run by the scenario's expectations and invariants; at its end write this JSON report and exit
    /// (status 1 when an expectation failed or an invariant broke).
    #[arg(long, value_name = "FILE")]
    pub report_out: Option<PathBuf>,
    /// Where the controller's replicas' logs go (`POD.log`), with --external-controller (default: a new
    /// temporary directory, said on standard error).
    #[arg(long, value_name = "DIR")]
    pub replica_logs: Option<PathBuf>,
    /// The variant whose rules the twin's own actors run and whose expectations judge the run.
    #[arg(long, value_name = "NAME", default_value = "shipped")]
    pub variant: String,
}

pub fn serve(args: Serve) -> anyhow::Result<()> {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        bail!("--listen {}: not a loopback address; add --allow-remote to serve other machines", args.listen);
    }
    let path = args.scenario.display();
    let text = std::fs::read_to_string(&args.scenario).with_context(|| format!("failed to read scenario {path}"))?;
    let scenario = parse_scenario(&text).map_err(|e| anyhow!("scenario {path}: {e}"))?;
    let mut config = gpuclaim_serve::Config::new(scenario, args.listen, args.kubeconfig_out, args.speed);
    config.seed = args.seed.or(config.scenario.seed).unwrap_or(1);
    config.until = args.until.map(|until| Millis(until.as_millis().min(u128::from(u64::MAX)) as u64));
    config.history_max = args.watch_history;
    config.outside_controller = args.external_controller;
    config.replica_logs = args.replica_logs.clone();
    if args.replica_logs.is_some() && !args.external_controller {
        bail!("--replica-logs: the replicas run with --external-controller only");
    }
    if args.report_out.is_some() {
        let variant = gpuclaim_engine::variant::Variant::named(&args.variant).map_err(|e| anyhow!("--variant: {e}"))?;
        config.judging = Some(gpuclaim_serve::Judging { variant, judge_as: args.variant.clone() });
    } else if args.variant != "shipped" {
        bail!("--variant judges a run: give --report-out too");
    }
    let (name, report) = (config.scenario.name.clone(), std::sync::Arc::clone(&config.report));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("failed to start tokio")?;
    runtime.block_on(gpuclaim_serve::run(
        config,
        |ready| println!("serving https://{} (kubeconfig {})", ready.address, ready.kubeconfig.display()),
        crate::controller_cmd::terminated(),
    ))?;
    let Some(path) = &args.report_out else { return Ok(()) };
    let report = report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    let Some(report) = report else { bail!("stopped before the run ended: no report written to {}", path.display()) };
    let json = gpuclaim_serve::report::to_json(&name, &report);
    let text = serde_json::to_string_pretty(&json).context("failed to encode the report")?;
    std::fs::write(path, text + "\n").with_context(|| format!("failed to write the report {}", path.display()))?;
    match report.run.failure() {
        None => Ok(()),
        Some(failure) => {
            eprintln!("the run failed: {failure}");
            std::process::exit(1)
        }
    }
}
