//! A report on disk: `report.html` (self-contained: inline SVG charts, the font, tables, the study and the command
//! that reproduces it), `report.md`, `charts/*.svg` and `*.png`, `summary.json` (figures across seeds, no times or
//! paths of this machine) and `runs.csv` (one row per run). Everything is ordered, so the same runs give the same
//! bytes.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;
use serde_json::json;

use crate::charts::{self, Chart};
use crate::stats::Spread;
use crate::study::MetricGroup;
use crate::{Report, ReportError};

/// A chart of the report: its file stem and what it shows.
pub struct NamedChart {
    pub name: String,
    pub caption: String,
    pub chart: Chart,
}

/// The charts the study's metrics ask for.
pub fn charts_of(report: &Report) -> Vec<NamedChart> {
    let study = &report.study;
    let mut out = Vec::new();
    let classes: Vec<String> = report
        .variants
        .first()
        .map(|v| v.series.keys().filter_map(|k| k.strip_prefix("utilisation:").map(str::to_owned)).collect())
        .unwrap_or_default();
    let lines = |key: &str| -> Vec<(String, crate::stats::SeriesSpread)> {
        report.variants.iter().filter_map(|v| v.series.get(key).map(|s| (v.name.clone(), s.clone()))).collect()
    };
    let wants = |group: MetricGroup| study.metrics.contains(&group);
    // A fill's curves against the demand arrived, one line per variant: the units allocated, the VMs waiting.
    let fill_lines = |curve: SpreadOf| -> Vec<(String, crate::stats::SeriesSpread)> {
        report.variants.iter().filter_map(|v| Some((v.name.clone(), curve(v.fill.as_ref()?)))).collect()
    };
    let fills = fill_lines(|fill| crate::stats::SeriesSpread {
        t_hours: fill.arrived_pct.clone(),
        p50: fill.allocated_p50.clone(),
        min: fill.allocated_min.clone(),
        max: fill.allocated_max.clone(),
    });
    let waiting = fill_lines(|fill| crate::stats::SeriesSpread {
        t_hours: fill.arrived_pct.clone(),
        p50: fill.waiting_p50.clone(),
        min: fill.waiting_min.clone(),
        max: fill.waiting_max.clone(),
    });
    if !fills.is_empty() {
        out.push(NamedChart {
            name: "fill-waiting".to_owned(),
            caption: "Fill: units arrived but not allocated (their VMs wait), in % of the cluster's units, against \
                      units arrived; seeds' median with min–max band: where a policy leaves the diagonal."
                .to_owned(),
            chart: Chart::Lines {
                title: "Units arrived and waiting as the cluster fills".to_owned(),
                y_label: "units waiting (% of the cluster's)".to_owned(),
                percent: false,
                x_label: charts::ARRIVED.to_owned(),
                lines: waiting.into_iter().map(|(name, s)| (name, scaled(s, 100.0))).collect(),
            },
        });
        out.push(NamedChart {
            name: "fill".to_owned(),
            caption: "Fill: units allocated against units arrived, both in % of the cluster's units; seeds' median \
                      with min–max band. The dashed line is the demand (allocation can follow it up to 100%)."
                .to_owned(),
            chart: Chart::Fill { title: "Units allocated as the cluster fills".to_owned(), lines: fills },
        });
    }
    if wants(MetricGroup::Utilisation) {
        for class in &classes {
            out.push(NamedChart {
                name: format!("utilisation-{class}"),
                caption: format!("Units of {class} held by running VMs, seeds' median with min–max band."),
                chart: Chart::Lines {
                    title: format!("GPU utilisation: {class}"),
                    y_label: "units in use (%)".to_owned(),
                    percent: true,
                    x_label: charts::TIME_HOURS.to_owned(),
                    lines: lines(&format!("utilisation:{class}")),
                },
            });
        }
    }
    if wants(MetricGroup::GateQueue) {
        out.push(NamedChart {
            name: "gate-queue".to_owned(),
            caption: "Pods waiting at the placement gate, seeds' median with min–max band.".to_owned(),
            chart: Chart::Lines {
                title: "VMs waiting at the gate".to_owned(),
                y_label: "pods at the gate".to_owned(),
                percent: false,
                x_label: charts::TIME_HOURS.to_owned(),
                lines: lines("gate_queue"),
            },
        });
    }
    let waits = |prefix: &str, kinds: &[(&str, &str)]| -> Vec<(String, Vec<(String, Spread)>)> {
        report
            .variants
            .iter()
            .map(|v| {
                let points = kinds
                    .iter()
                    .map(|(label, key)| {
                        (label.to_string(), v.metrics.get(&format!("{prefix}_{key}_s")).cloned().unwrap_or_default())
                    })
                    .collect();
                (v.name.clone(), points)
            })
            .collect()
    };
    if wants(MetricGroup::StartWait) {
        out.push(NamedChart {
            name: "start-wait".to_owned(),
            caption: "Start wait (asked to run → Running) per run: seeds' median, whiskers min–max.".to_owned(),
            chart: Chart::Waits {
                title: "Start wait".to_owned(),
                y_label: "seconds".to_owned(),
                variants: waits("start_wait", &[("p50", "p50"), ("p90", "p90"), ("p99", "p99")]),
            },
        });
    }
    if wants(MetricGroup::GateWait) {
        out.push(NamedChart {
            name: "gate-wait".to_owned(),
            caption: "Gate wait (launcher created → ungated) per run: seeds' median, whiskers min–max.".to_owned(),
            chart: Chart::Waits {
                title: "Gate wait".to_owned(),
                y_label: "seconds".to_owned(),
                variants: waits("gate_wait", &[("mean", "mean"), ("p90", "p90"), ("p99", "p99")]),
            },
        });
    }
    if wants(MetricGroup::Fragmentation) {
        for class in &classes {
            out.push(NamedChart {
                name: format!("fragmentation-{class}"),
                caption: format!(
                    "Free {class} units a typical claim cannot use (Σ over nodes of free mod claim size), seeds' \
                     median with min–max band."
                ),
                chart: Chart::Lines {
                    title: format!("Stranded free units: {class}"),
                    y_label: "units".to_owned(),
                    percent: false,
                    x_label: charts::TIME_HOURS.to_owned(),
                    lines: lines(&format!("stranded_units:{class}")),
                },
            });
        }
    }
    if wants(MetricGroup::CrashLoop) {
        out.push(NamedChart {
            name: "crash-loop".to_owned(),
            caption: "VMs in CrashLoopBackOff, seeds' median with min–max band.".to_owned(),
            chart: Chart::Lines {
                title: "VMs in CrashLoopBackOff".to_owned(),
                y_label: "VMs".to_owned(),
                percent: false,
                x_label: charts::TIME_HOURS.to_owned(),
                lines: lines("crash_loop"),
            },
        });
    }
    if let (Some(compaction), Some(slo)) = (&report.compaction, &study.slo) {
        out.push(NamedChart {
            name: "compaction".to_owned(),
            caption: format!(
                "{} per {} node count tried (variant {}), seeds' median with min–max; the SLO line.",
                slo.label(),
                compaction.target,
                compaction.variant
            ),
            chart: Chart::Compaction {
                title: format!("Compaction: {} nodes", compaction.target),
                x_label: format!("{} nodes", compaction.target),
                y_label: format!("{} (s)", slo.label()),
                slo_seconds: slo.max_seconds,
                probes: compaction.probes.iter().map(|p| (p.nodes, p.spread.clone())).collect(),
            },
        });
    }
    out
}

/// A series with its values times `factor`.
fn scaled(mut spread: crate::stats::SeriesSpread, factor: f64) -> crate::stats::SeriesSpread {
    for values in [&mut spread.p50, &mut spread.min, &mut spread.max] {
        values.iter_mut().for_each(|v| *v *= factor);
    }
    spread
}

/// summary.json: the study's parameters and every variant's figures across seeds.
pub fn summary_json(report: &Report) -> String {
    let study = &report.study;
    let value = json!({
        "study": study.name,
        "description": study.description,
        "seeds": study.seeds,
        "duration_hours": study.duration.0 as f64 / 3_600_000.0,
        "warmup_hours": study.warmup.0 as f64 / 3_600_000.0,
        "samples": study.samples,
        "slo": study.slo,
        "variants": report.variants,
        "compaction": report.compaction,
    });
    let mut text = serde_json::to_string_pretty(&value).expect("plain values serialise");
    text.push('\n');
    text
}

/// runs.csv: one row per run; a column per scalar and per refusal seen in any run.
pub fn runs_csv(report: &Report) -> String {
    let scalars: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.scalars.keys()).collect();
    let refusals: BTreeSet<&String> = report.runs.iter().flat_map(|r| r.refusals.keys()).collect();
    let mut out = String::from("variant,seed,events");
    for name in &scalars {
        write!(out, ",{}", csv_field(name)).expect("writing to a String");
    }
    for name in &refusals {
        write!(out, ",{}", csv_field(&format!("refused:{name}"))).expect("writing to a String");
    }
    out.push('\n');
    for run in &report.runs {
        write!(out, "{},{},{}", csv_field(&run.variant), run.seed, run.events).expect("writing to a String");
        for name in &scalars {
            write!(out, ",{}", run.scalars.get(*name).copied().unwrap_or(0.0)).expect("writing to a String");
        }
        for name in &refusals {
            write!(out, ",{}", run.refusals.get(*name).copied().unwrap_or(0)).expect("writing to a String");
        }
        out.push('\n');
    }
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_owned() }
}

/// The first-short figure of a fill run whose allocation never fell below its demand: one past its last point.
fn fill_never(report: &Report) -> String {
    let points = report.variants.iter().filter_map(|v| v.fill.as_ref()).map(|f| f.arrived_pct.len()).min();
    number(points.unwrap_or(0) as f64 + 1.0)
}

/// The rows of the figures table: (label, scalar, unit scale, unit).
fn figure_rows(report: &Report) -> Vec<(String, String)> {
    let study = &report.study;
    let wants = |group: MetricGroup| study.metrics.contains(&group);
    let mut names: BTreeSet<String> = BTreeSet::new();
    for v in &report.variants {
        names.extend(v.metrics.keys().cloned());
    }
    let mut rows = Vec::new();
    let mut add = |label: String, key: String| {
        if names.contains(&key) {
            rows.push((label, key));
        }
    };
    if let Some(resample_to) = study.fill {
        let end = number(resample_to * 100.0);
        add(
            "fill: units allocated at 100% arrived (% of the cluster's)".to_owned(),
            "fill_allocated_pct_at_100".into(),
        );
        add("fill: arrived units waiting at 100% arrived".to_owned(), "fill_units_waiting_at_100".to_owned());
        add(
            format!("fill: first point allocation falls below demand (% arrived; {} = never)", fill_never(report)),
            "fill_first_short_pct".to_owned(),
        );
        add(format!("fill: units allocated at {end}% arrived (%)"), "fill_allocated_pct_at_end".to_owned());
        add("fill: VMs arrived".to_owned(), "fill_arrivals".to_owned());
        for key in names.iter().filter(|k| k.starts_with("fill_waiting_at_end:")) {
            add(format!("fill: VMs waiting at the end, {}", &key["fill_waiting_at_end:".len()..]), key.clone());
        }
    }
    add("VM starts".to_owned(), "vm_starts".to_owned());
    if wants(MetricGroup::Utilisation) {
        for key in names.iter().filter(|k| k.starts_with("utilisation:") || k.starts_with("allocated:")) {
            let (what, class) = key.split_once(':').expect("filtered on the colon");
            let label = if what == "utilisation" { "in use by running VMs" } else { "held by claims" };
            add(format!("{class}: share of units {label}"), key.clone());
        }
    }
    if wants(MetricGroup::GateQueue) {
        add("pods at the gate, mean".to_owned(), "gate_queue_mean".to_owned());
        add("pods at the gate, peak".to_owned(), "gate_queue_peak".to_owned());
    }
    if wants(MetricGroup::StartWait) {
        for p in ["p50", "p90", "p99", "max"] {
            add(format!("start wait {p} (s)"), format!("start_wait_{p}_s"));
        }
        add("VMs still waiting to start at the end".to_owned(), "vms_waiting_at_end".to_owned());
        // Per classes, when the SLO reads the waits of the VMs ordering some classes only.
        let keyed: Vec<String> =
            names.iter().filter_map(|k| k.strip_prefix("vms_not_started:")).map(str::to_owned).collect();
        for key in keyed {
            for p in ["p50", "p90", "p99", "max"] {
                add(format!("start wait {p}, VMs of {key} (s)"), format!("start_wait_{p}_s:{key}"));
            }
            add(format!("VMs of {key} counted (started or not)"), format!("start_wait_count:{key}"));
            add(format!("VMs of {key} never started (deleted or still waiting)"), format!("vms_not_started:{key}"));
        }
    }
    if wants(MetricGroup::GateWait) {
        for p in ["mean", "p50", "p90", "p99"] {
            add(format!("gate wait {p} (s)"), format!("gate_wait_{p}_s"));
        }
    }
    if wants(MetricGroup::OrderRefusals) {
        add("orders placed".to_owned(), "orders".to_owned());
        add("orders refused".to_owned(), "orders_refused".to_owned());
        add("share of orders refused".to_owned(), "orders_refused_share".to_owned());
        for key in names.iter().filter(|k| k.starts_with("orders_refused:")) {
            add(format!("orders refused: {}", &key["orders_refused:".len()..]), key.clone());
        }
    }
    if wants(MetricGroup::BudgetHits) {
        add("budget hits (orders refused + pods set waiting)".to_owned(), "budget_hits".to_owned());
    }
    if wants(MetricGroup::Fragmentation) {
        for key in names.iter().filter(|k| k.starts_with("stranded_units:")) {
            add(format!("{}: stranded free units, mean", &key["stranded_units:".len()..]), key.clone());
        }
    }
    if wants(MetricGroup::FailedMigrations) {
        add("failed migrations".to_owned(), "failed_migrations".to_owned());
    }
    if wants(MetricGroup::CrashLoop) {
        add("start failures (into CrashLoopBackOff)".to_owned(), "start_failures".to_owned());
        add("VMs in CrashLoopBackOff, peak".to_owned(), "crash_loop_peak".to_owned());
    }
    rows
}

fn number(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e15 {
        format!("{value:.0}")
    } else if value.abs() >= 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// `p50 · p90 (min–max)`, as the tables show a figure over seeds.
fn cell(spread: Option<&Spread>) -> String {
    match spread {
        Some(s) => format!("{} · {} ({}–{})", number(s.p50), number(s.p90), number(s.min), number(s.max)),
        None => "–".to_owned(),
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn md_escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// report.md.
pub fn markdown(report: &Report, command: &str, charts: &[NamedChart]) -> String {
    let study = &report.study;
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "# What-if: {}\n", study.name).expect("writing to a String");
    if !study.description.is_empty() {
        writeln!(w, "{}\n", study.description.trim()).expect("writing to a String");
    }
    writeln!(w, "{} Reproduce with:\n\n```sh\n{command}\n```\n", runs_sentence(report)).expect("writing to a String");
    writeln!(w, "Each cell: the seeds' median · 90th percentile (min–max).\n").expect("writing to a String");
    write!(w, "| figure |").expect("writing to a String");
    for v in &report.variants {
        write!(w, " {} |", md_escape(&v.name)).expect("writing to a String");
    }
    write!(w, "\n|---|").expect("writing to a String");
    for _ in &report.variants {
        write!(w, "---|").expect("writing to a String");
    }
    writeln!(w).expect("writing to a String");
    for (label, key) in figure_rows(report) {
        write!(w, "| {} |", md_escape(&label)).expect("writing to a String");
        for v in &report.variants {
            write!(w, " {} |", cell(v.metrics.get(&key))).expect("writing to a String");
        }
        writeln!(w).expect("writing to a String");
    }
    if let Some(slo) = &study.slo {
        write!(w, "| SLO {} ≤ {} s ({:?} of seeds) |", slo.label(), number(slo.max_seconds), slo.across_seeds)
            .expect("writing to a String");
        for v in &report.variants {
            let verdict = v.slo.as_ref().map_or("–".to_owned(), |s| {
                format!("{} ({} s)", if s.met { "met" } else { "missed" }, number(s.value_seconds))
            });
            write!(w, " {verdict} |").expect("writing to a String");
        }
        writeln!(w).expect("writing to a String");
    }
    writeln!(w).expect("writing to a String");
    refusals_md(report, w);
    if let Some(c) = &report.compaction {
        writeln!(w, "## Compaction\n\n{}\n", compaction_sentence(report, c)).expect("writing to a String");
        writeln!(w, "| {} nodes | median | p90 | min–max | SLO |\n|---|---|---|---|---|", c.target)
            .expect("writing to a String");
        for p in &c.probes {
            writeln!(
                w,
                "| {} | {} | {} | {}–{} | {} |",
                p.nodes,
                number(p.spread.p50),
                number(p.spread.p90),
                number(p.spread.min),
                number(p.spread.max),
                if p.verdict.met { "met" } else { "missed" }
            )
            .expect("writing to a String");
        }
        writeln!(w).expect("writing to a String");
    }
    writeln!(w, "## Charts\n").expect("writing to a String");
    for chart in charts {
        writeln!(w, "![{}](charts/{}.svg)\n\n{}\n", chart.name, chart.name, chart.caption)
            .expect("writing to a String");
    }
    writeln!(w, "## Study\n\n```yaml\n{}\n```", study.text.trim_end()).expect("writing to a String");
    out
}

fn refusals_md(report: &Report, w: &mut String) {
    let keys: BTreeSet<&String> = report.variants.iter().flat_map(|v| v.refusals.keys()).collect();
    if keys.is_empty() {
        return;
    }
    writeln!(w, "## Refusals by reason\n").expect("writing to a String");
    write!(w, "| refusal |").expect("writing to a String");
    for v in &report.variants {
        write!(w, " {} |", md_escape(&v.name)).expect("writing to a String");
    }
    write!(w, "\n|---|").expect("writing to a String");
    for _ in &report.variants {
        write!(w, "---|").expect("writing to a String");
    }
    writeln!(w).expect("writing to a String");
    for key in keys {
        write!(w, "| {} |", md_escape(key)).expect("writing to a String");
        for v in &report.variants {
            write!(w, " {} |", cell(v.refusals.get(key))).expect("writing to a String");
        }
        writeln!(w).expect("writing to a String");
    }
    writeln!(w).expect("writing to a String");
}

/// What the runs were: variants × seeds, and how long or how full.
fn runs_sentence(report: &Report) -> String {
    let study = &report.study;
    let runs =
        format!("{} variants × {} seeds ({})", report.variants.len(), study.seeds.len(), seeds_text(&study.seeds));
    match study.fill {
        Some(resample_to) => format!(
            "{runs}, each a fill: the scenario's VMs arrive in a seeded shuffled order, {} s apart, and never leave, \
             until they ask {}% of the cluster's units.",
            number(crate::fill::FILL_SPACING.0 as f64 / 1_000.0),
            number(resample_to * 100.0)
        ),
        None => format!(
            "{runs}, {} simulated hours each, figures after a {} h warm-up.",
            number(study.duration.0 as f64 / 3_600_000.0),
            number(study.warmup.0 as f64 / 3_600_000.0)
        ),
    }
}

fn seeds_text(seeds: &[u64]) -> String {
    let consecutive = seeds.windows(2).all(|p| p[1] == p[0] + 1);
    match (seeds.first(), seeds.last()) {
        (Some(first), Some(last)) if consecutive && seeds.len() > 2 => format!("seeds {first}–{last}"),
        _ => format!("seeds {}", seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

fn compaction_sentence(report: &Report, c: &crate::CompactionResult) -> String {
    let slo = report.study.slo.as_ref().expect("a compaction has an SLO");
    match c.nodes.and_then(|n| c.probes.iter().find(|p| p.nodes == n)) {
        Some(p) => format!(
            "The fewest {} nodes meeting {} ≤ {} s in variant {}: **{}** (seeds: median {} s, p90 {} s, {}–{} s).",
            c.target,
            slo.label(),
            number(slo.max_seconds),
            c.variant,
            p.nodes,
            number(p.spread.p50),
            number(p.spread.p90),
            number(p.spread.min),
            number(p.spread.max)
        ),
        None => format!(
            "Not even {} {} nodes meet {} ≤ {} s in variant {}.",
            c.max,
            c.target,
            slo.label(),
            number(slo.max_seconds),
            c.variant
        ),
    }
}

/// report.html: self-contained (the charts inline, the font embedded once).
pub fn html(report: &Report, command: &str, charts: &[(NamedChart, String)]) -> String {
    let study = &report.study;
    let mut out = String::new();
    let w = &mut out;
    let font = base64::engine::general_purpose::STANDARD.encode(charts::FONT_TTF);
    write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>What-if: {title}</title>\n<style>\n\
         @font-face {{ font-family: \"{font_name}\"; src: url(data:font/ttf;base64,{font}) format(\"truetype\"); }}\n\
         body {{ font-family: \"{font_name}\", sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; font-size: 14px; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}\n\
         th:first-child, td:first-child {{ text-align: left; }}\n\
         .met {{ color: #007a4d; }} .missed {{ color: #b00020; }}\n\
         figure {{ margin: 1.5em 0; }} figcaption {{ font-size: 14px; color: #555; }}\n\
         pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}\n\
         </style></head><body>\n",
        title = html_escape(&study.name),
        font_name = charts::FONT,
    )
    .expect("writing to a String");
    writeln!(w, "<h1>What-if: {}</h1>", html_escape(&study.name)).expect("writing to a String");
    if !study.description.is_empty() {
        writeln!(w, "<p>{}</p>", html_escape(study.description.trim())).expect("writing to a String");
    }
    writeln!(
        w,
        "<p>{} Each cell: the seeds' median · 90th percentile (min–max).</p>",
        html_escape(&runs_sentence(report))
    )
    .expect("writing to a String");
    writeln!(w, "<p>Reproduce with:</p><pre>{}</pre>", html_escape(command)).expect("writing to a String");
    write!(w, "<table><tr><th>figure</th>").expect("writing to a String");
    for v in &report.variants {
        write!(w, "<th title=\"{}\">{}</th>", html_escape(&v.description), html_escape(&v.name))
            .expect("writing to a String");
    }
    writeln!(w, "</tr>").expect("writing to a String");
    for (label, key) in figure_rows(report) {
        write!(w, "<tr><td>{}</td>", html_escape(&label)).expect("writing to a String");
        for v in &report.variants {
            write!(w, "<td>{}</td>", html_escape(&cell(v.metrics.get(&key)))).expect("writing to a String");
        }
        writeln!(w, "</tr>").expect("writing to a String");
    }
    if let Some(slo) = &study.slo {
        write!(w, "<tr><td>SLO {} ≤ {} s ({:?} of seeds)</td>", slo.label(), number(slo.max_seconds), slo.across_seeds)
            .expect("writing to a String");
        for v in &report.variants {
            match &v.slo {
                Some(s) => {
                    let class = if s.met { "met" } else { "missed" };
                    write!(w, "<td class=\"{class}\">{class} ({} s)</td>", number(s.value_seconds))
                }
                None => write!(w, "<td>–</td>"),
            }
            .expect("writing to a String");
        }
        writeln!(w, "</tr>").expect("writing to a String");
    }
    writeln!(w, "</table>").expect("writing to a String");
    let mut refusals = String::new();
    refusals_md(report, &mut refusals);
    if !refusals.is_empty() {
        let keys: BTreeSet<&String> = report.variants.iter().flat_map(|v| v.refusals.keys()).collect();
        writeln!(w, "<h2>Refusals by reason</h2><table><tr><th>refusal</th>").expect("writing to a String");
        for v in &report.variants {
            write!(w, "<th>{}</th>", html_escape(&v.name)).expect("writing to a String");
        }
        writeln!(w, "</tr>").expect("writing to a String");
        for key in keys {
            write!(w, "<tr><td>{}</td>", html_escape(key)).expect("writing to a String");
            for v in &report.variants {
                write!(w, "<td>{}</td>", html_escape(&cell(v.refusals.get(key)))).expect("writing to a String");
            }
            writeln!(w, "</tr>").expect("writing to a String");
        }
        writeln!(w, "</table>").expect("writing to a String");
    }
    if let Some(c) = &report.compaction {
        let sentence = compaction_sentence(report, c).replace("**", "");
        writeln!(w, "<h2>Compaction</h2><p>{}</p>", html_escape(&sentence)).expect("writing to a String");
        writeln!(
            w,
            "<table><tr><th>{} nodes</th><th>median</th><th>p90</th><th>min–max</th><th>SLO</th></tr>",
            html_escape(&c.target)
        )
        .expect("writing to a String");
        for p in &c.probes {
            let class = if p.verdict.met { "met" } else { "missed" };
            writeln!(
                w,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}–{}</td><td class=\"{class}\">{class}</td></tr>",
                p.nodes,
                number(p.spread.p50),
                number(p.spread.p90),
                number(p.spread.min),
                number(p.spread.max)
            )
            .expect("writing to a String");
        }
        writeln!(w, "</table>").expect("writing to a String");
    }
    writeln!(w, "<h2>Charts</h2>").expect("writing to a String");
    for (chart, svg) in charts {
        // The SVG's XML declaration is not allowed inside HTML.
        let body = svg.find("<svg").map_or(svg.as_str(), |at| &svg[at..]);
        writeln!(
            w,
            "<figure id=\"{}\">{body}<figcaption>{}</figcaption></figure>",
            chart.name,
            html_escape(&chart.caption)
        )
        .expect("writing to a String");
    }
    writeln!(w, "<h2>Study</h2><pre>{}</pre>\n</body></html>", html_escape(study.text.trim_end()))
        .expect("writing to a String");
    out
}

/// Writes the whole report into `dir` (created if missing).
pub fn write_report(report: &Report, dir: &Path, command: &str) -> Result<(), ReportError> {
    let write = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).map_err(|e| ReportError::Write { path: path.to_owned(), reason: e.to_string() })
    };
    let charts_dir = dir.join("charts");
    std::fs::create_dir_all(&charts_dir)
        .map_err(|e| ReportError::Write { path: charts_dir.clone(), reason: e.to_string() })?;
    let charts = charts_of(report);
    let mut drawn = Vec::with_capacity(charts.len());
    for chart in charts {
        let out = charts::draw(&chart.chart)
            .map_err(|reason| ReportError::Write { path: charts_dir.join(format!("{}.svg", chart.name)), reason })?;
        write(&charts_dir.join(format!("{}.svg", chart.name)), out.svg.as_bytes())?;
        write(&charts_dir.join(format!("{}.png", chart.name)), &out.png)?;
        drawn.push((chart, out.svg));
    }
    write(&dir.join("summary.json"), summary_json(report).as_bytes())?;
    write(&dir.join("runs.csv"), runs_csv(report).as_bytes())?;
    let named: Vec<NamedChart> = drawn
        .iter()
        .map(|(c, _)| NamedChart { name: c.name.clone(), caption: c.caption.clone(), chart: c.chart.clone() })
        .collect();
    write(&dir.join("report.md"), markdown(report, command, &named).as_bytes())?;
    write(&dir.join("report.html"), html(report, command, &drawn).as_bytes())?;
    Ok(())
}

/// Which of a fill's curves a chart draws.
type SpreadOf = fn(&crate::FillCurve) -> crate::stats::SeriesSpread;
