//! `gpuclaim`: a thin command line over the crates: the engine, the twin, the scenarios crate (checked runs, the
//! suite, shrinking, importers), the what-if reports and the live adapter.
//!
//! Exit codes: 0 done, 1 a check or scenario failed, 2 usage, input or I/O error.

mod allocator;
mod controller_cmd;
mod import_cmd;
mod review_cmd;
mod shrink_cmd;
mod sim_cmd;
mod suite_cmd;
mod twin_cmd;
mod whatif_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

#[derive(Parser)]
#[command(name = "gpuclaim", version, about = "GPU claims for KubeVirt virtual machines")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answers an AdmissionReview offline, exactly as the live webhook would.
    Review {
        /// Kubernetes manifests (multi-document YAML) the webhooks' caches would hold.
        #[arg(long, value_name = "OBJECTS.yaml")]
        objects: PathBuf,
        /// An admission.k8s.io/v1 AdmissionReview (JSON or YAML); `-` or nothing reads standard input.
        #[arg(value_name = "REVIEW")]
        review: Option<PathBuf>,
        /// The controller's namespace: the settings ConfigMap is read from there only.
        #[arg(long, value_name = "NAMESPACE", default_value = gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE)]
        controller_namespace: String,
        /// Indent the response (the live webhook sends it compact).
        #[arg(long)]
        pretty: bool,
        /// Also print the decoded JSON patch, for people, on standard error.
        #[arg(long)]
        show_patch: bool,
    },
    /// Prints the CRDs generated from the Rust types.
    Crds,
    /// The live controller and webhook server (run in the cluster by the Helm chart).
    Controller(controller_cmd::Args),
    /// Imports public GPU-cluster traces as scenarios (docs/import.md).
    Import {
        #[command(subcommand)]
        command: ImportCommand,
    },
    /// Scenario files run in the twin, checked (invariants after every event, expectations), each run twice.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// Every scenario of a directory (default scenarios/suite), checked: the CI suite.
    Suite(suite_cmd::Suite),
    /// A capacity what-if study over the twin: variants × seeds, written as a report (docs/whatif.md).
    Whatif(whatif_cmd::Args),
    /// The discrete-event twin.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// The twin served as a Kubernetes API server (kubectl and kube-rs against a running scenario).
    Twin {
        #[command(subcommand)]
        command: TwinCommand,
    },
}

#[derive(Subcommand)]
enum TwinCommand {
    /// Serves a scenario's twin over HTTPS, paced to the wall clock; prints `serving https://ADDRESS` first.
    Serve(twin_cmd::Serve),
}

#[derive(Subcommand)]
enum SimCommand {
    /// One run of the twin on a scenario.
    Run {
        #[arg(value_name = "FILE")]
        scenario: PathBuf,
        /// The seed (else the scenario's, else one is drawn and printed first).
        #[arg(long)]
        seed: Option<u64>,
        /// Write the event log (JSON lines) here.
        #[arg(long, value_name = "FILE")]
        events_out: Option<PathBuf>,
        /// Print the run's figures as one JSON object.
        #[arg(long)]
        stats: bool,
        /// Write what a scrape of the controller would show at the run's end (Prometheus text format, the live
        /// controller's names and buckets) here.
        #[arg(long, value_name = "FILE")]
        metrics_out: Option<PathBuf>,
        /// The engine variant to run (default: the shipped engine).
        #[arg(long, value_name = "NAME", default_value = "shipped")]
        variant: String,
    },
}

#[derive(Subcommand)]
enum ScenarioCommand {
    /// Checked runs of scenario files: a table per scenario × variant × seed; exit code 1 on any failure.
    Run(suite_cmd::ScenarioRun),
    /// A failing run shrunk to the smallest scenario that still fails the same way (written as a scenario file).
    Shrink(shrink_cmd::Shrink),
}

#[derive(Subcommand)]
enum ImportCommand {
    /// The openb trace (cluster-trace-gpu-v2023): nodes and tasks as a scenario of timed VMs.
    Openb(import_cmd::Openb),
    /// A node list alone (openb's or the spot-GPU 2026 node_info_df.csv) as a cluster shape.
    Nodes(import_cmd::Nodes),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if matches!(cli.command, Command::Scenario { .. } | Command::Suite(_) | Command::Whatif(_) | Command::Sim { .. }) {
        allocator::keep_freed_memory();
    }
    match cli.command {
        Command::Review { objects, review, controller_namespace, pretty, show_patch } => {
            let options = review_cmd::Options { objects, review, controller_namespace, pretty, show_patch };
            review_cmd::run(&options)?;
        }
        Command::Crds => print!("{}", gpuclaim_engine::api::crds_yaml()),
        Command::Controller(args) => controller_cmd::run(args)?,
        Command::Import { command: ImportCommand::Openb(options) } => import_cmd::openb(options)?,
        Command::Import { command: ImportCommand::Nodes(options) } => import_cmd::nodes(options)?,
        Command::Scenario { command: ScenarioCommand::Run(args) } => return suite_cmd::scenario_run(args),
        Command::Scenario { command: ScenarioCommand::Shrink(args) } => return shrink_cmd::shrink(args),
        Command::Suite(args) => return suite_cmd::suite(args),
        Command::Whatif(args) => whatif_cmd::run(args)?,
        Command::Twin { command: TwinCommand::Serve(args) } => twin_cmd::serve(args)?,
        Command::Sim { command: SimCommand::Run { scenario, seed, events_out, stats, metrics_out, variant } } => {
            return sim_cmd::run(&sim_cmd::Options { scenario, seed, events_out, stats, metrics_out, variant });
        }
    }
    Ok(ExitCode::SUCCESS)
}
