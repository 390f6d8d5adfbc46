//! `gpuclaim import`: glue over `gpuclaim_scenarios::import` (the mapping is there and in docs/import.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, anyhow};
use gpuclaim_scenarios::import::nodes::{NodesOptions, import_nodes};
use gpuclaim_scenarios::import::openb::{OpenbOptions, SharedGpus, import_openb, parse_window};
use gpuclaim_scenarios::import::{Imported, parse_seconds};

#[derive(clap::Args)]
pub struct Openb {
    #[arg(long, value_name = "NODES.csv")]
    pub nodes: PathBuf,
    #[arg(long, value_name = "PODS.csv")]
    pub pods: PathBuf,
    /// Where to write the scenario: YAML, or JSON when the name ends in `.json` (read about ten times faster).
    #[arg(long, value_name = "SCENARIO.yaml")]
    pub out: PathBuf,
    /// Virtual time per trace time (0.001: a trace day in 86.4 s).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub time_scale: f64,
    /// Trace time kept, START..END or START.. (86400, 1d, 36h).
    #[arg(long, value_name = "START..END")]
    pub window: Option<String>,
    /// Keep one task in K (every K-th row, or by name hash with --sample-seed).
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub sample: u64,
    #[arg(long, value_name = "SEED")]
    pub sample_seed: Option<u64>,
    /// Tasks sharing a GPU order one whole passthrough GPU instead of a vGPU.
    #[arg(long)]
    pub shared_as_whole: bool,
    /// Tasks never end: arrivals fill the cluster (how the FGD simulator reads the trace).
    #[arg(long)]
    pub ignore_deletion: bool,
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(clap::Args)]
pub struct Nodes {
    #[arg(long, value_name = "NODES.csv")]
    pub nodes: PathBuf,
    /// Where to write the scenario: YAML, or JSON when the name ends in `.json` (read about ten times faster).
    #[arg(long, value_name = "SCENARIO.yaml")]
    pub out: PathBuf,
    /// Memory per CPU where the list has none (spot-GPU).
    #[arg(long, value_name = "QUANTITY", default_value = "8Gi")]
    pub memory_per_cpu: String,
    #[arg(long, default_value = "1d")]
    pub duration: String,
    #[arg(long)]
    pub name: Option<String>,
}

pub fn openb(options: Openb) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut library = OpenbOptions::new(options.nodes, options.pods);
    library.time_scale = options.time_scale;
    if let Some(window) = &options.window {
        library.window = parse_window(window)?;
    }
    library.sample = options.sample;
    library.sample_seed = options.sample_seed;
    library.shared = if options.shared_as_whole { SharedGpus::Whole } else { SharedGpus::Vgpu };
    library.ignore_deletion = options.ignore_deletion;
    library.name = options.name;
    let imported = import_openb(&library)?;
    write(&imported, &options.out, started)
}

pub fn nodes(options: Nodes) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut library = NodesOptions::new(options.nodes);
    let bytes = gpuclaim_engine::quantity::bytes(&options.memory_per_cpu)
        .map_err(|e| anyhow!("--memory-per-cpu {:?}: {e}", options.memory_per_cpu))?;
    library.memory_per_cpu_mib = bytes / (1 << 20);
    library.duration_ms = parse_seconds(&options.duration).map_err(|e| anyhow!("--duration: {e}"))? * 1_000;
    library.name = options.name;
    let imported = import_nodes(&library)?;
    write(&imported, &options.out, started)
}

/// Writes the scenario and prints what the import counted, with its wall time, as one JSON object.
fn write(imported: &Imported, out: &Path, started: Instant) -> anyhow::Result<()> {
    let file = std::fs::File::create(out).with_context(|| format!("failed to create {}", out.display()))?;
    let mut writer = std::io::BufWriter::new(file);
    // `.json` asks for the JSON form (docs/import.md): the same scenario, read faster.
    let json = out.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let written = if json { imported.write_json(&mut writer) } else { imported.write_yaml(&mut writer) };
    written.and_then(|()| writer.flush()).with_context(|| format!("writing {}", out.display()))?;
    let mut summary = serde_json::json!(imported.summary);
    summary["scenario"] = serde_json::json!(out.display().to_string());
    summary["vms"] = serde_json::json!(imported.vms.len());
    summary["import_seconds"] = serde_json::json!(started.elapsed().as_secs_f64());
    println!("{summary}");
    Ok(())
}
