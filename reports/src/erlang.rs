//! The twin against queueing theory: in a one-class study where one-unit VMs arrive as a Poisson process and live an
//! exponential time, the share of held-claim orders refused should be Erlang B (lost calls) and the mean gate wait
//! of claim-template VMs Erlang C's mean wait (one first-come-first-served queue), each within the 95% confidence
//! interval of the seeds' mean. docs/whatif.md says what the twin adds to the textbook model and by how much.

use gpuclaim_engine::references::GpuEntry;
use serde::Serialize;

use crate::Report;
use crate::stats::{erlang_b, erlang_c_mean_wait};
use gpuclaim_scenarios::scenario::scenario_from_tree;

/// What the theory says, what the seeds measured, and whether it falls in their confidence interval.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub variant: String,
    /// `refused share` (Erlang B) or `mean gate wait (s)` (Erlang C).
    pub figure: String,
    pub servers: u32,
    pub load_erlangs: f64,
    pub theory: f64,
    pub seeds: usize,
    pub mean: f64,
    /// Half the width of the 95% confidence interval of the mean (Student's t over seeds).
    pub half_width: f64,
    pub within: bool,
}

/// Compares every variant of a one-class study whose workloads order one unit: held-claim workloads against
/// Erlang B, claim-template workloads against Erlang C. A variant of any other shape is an error.
pub fn compare(report: &Report) -> Result<Vec<Comparison>, String> {
    let mut out = Vec::new();
    for variant in &report.study.variants {
        let scenario = scenario_from_tree(&variant.scenario)?;
        let [class] = scenario.cluster.classes.as_slice() else {
            return Err(format!("variant {}: one class, not {}", variant.name, scenario.cluster.classes.len()));
        };
        let servers: u64 = scenario
            .cluster
            .nodes
            .iter()
            .map(|g| u64::from(g.count) * g.devices.get(&class.resource_name).copied().unwrap_or(0))
            .sum();
        let [workload] = scenario.workloads.as_slice() else {
            return Err(format!("variant {}: one workload, not {}", variant.name, scenario.workloads.len()));
        };
        let mean_service_s = workload.mean_lifetime.0.0 as f64 / 1_000.0;
        let load = workload.arrivals_per_hour / 3_600.0 * mean_service_s;
        let held = workload.held_claim.as_ref().is_some_and(|c| c.count == 1);
        let template = matches!(workload.gpus.as_slice(), [GpuEntry::ClaimTemplate(t)] if t.count == 1);
        let (figure, scalar, theory) = if held {
            ("refused share", "orders_refused_share", erlang_b(servers as u32, load))
        } else if template {
            ("mean gate wait (s)", "gate_wait_mean_s", erlang_c_mean_wait(servers as u32, load, mean_service_s))
        } else {
            return Err(format!(
                "variant {}: the workload orders one unit by a held claim or a template",
                variant.name
            ));
        };
        let values: Vec<f64> = report
            .runs
            .iter()
            .filter(|r| r.variant == variant.name)
            .map(|r| r.scalars.get(scalar).copied().unwrap_or(0.0))
            .collect();
        let (mean, half_width) = confidence_95(&values);
        out.push(Comparison {
            variant: variant.name.clone(),
            figure: figure.to_owned(),
            servers: servers as u32,
            load_erlangs: load,
            theory,
            seeds: values.len(),
            mean,
            half_width,
            within: (mean - theory).abs() <= half_width,
        });
    }
    Ok(out)
}

/// The mean of `values` and the half-width of its 95% confidence interval (Student's t, n − 1 degrees of freedom).
pub fn confidence_95(values: &[f64]) -> (f64, f64) {
    let n = values.len();
    if n < 2 {
        return (values.first().copied().unwrap_or(0.0), f64::INFINITY);
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t_975(n - 1) * (variance / n as f64).sqrt())
}

/// Student's t 0.975 quantile for `df` degrees of freedom (tabulated to 30, then the normal's 1.96 rounded up).
fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    TABLE.get(df.saturating_sub(1)).copied().unwrap_or(2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confidence_interval_is_students() {
        let (mean, half) = confidence_95(&[1.0, 2.0, 3.0, 4.0]);
        // sd = 1.291, n = 4, t(3) = 3.182.
        assert_eq!(mean, 2.5);
        assert!((half - 3.182 * 1.290_994 / 2.0).abs() < 1e-5);
    }
}
