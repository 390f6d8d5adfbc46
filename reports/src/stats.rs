//! Figures across seeds, as Borg's evaluations report them: the median and the 90th percentile of the per-seed
//! values (nearest rank), with their minimum, maximum and mean; the same per time point for series.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::study::{AcrossSeeds, Slo};

/// One figure over seeds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// Nearest-rank percentile `p` (0–100) of sorted `values`.
pub fn nearest_rank(sorted: &[f64], p: u64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as u64).div_ceil(100) as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The spread of `values` (one per seed), rounded to 6 decimals so summary.json stays readable and stable.
pub fn spread(values: &[f64]) -> Spread {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = if sorted.is_empty() { 0.0 } else { sorted.iter().sum::<f64>() / sorted.len() as f64 };
    Spread {
        p50: round6(nearest_rank(&sorted, 50)),
        p90: round6(nearest_rank(&sorted, 90)),
        min: round6(sorted.first().copied().unwrap_or(0.0)),
        max: round6(sorted.last().copied().unwrap_or(0.0)),
        mean: round6(mean),
    }
}

pub fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

/// Per scalar name, the spread over runs; a scalar a run lacks counts as 0 there (a refusal reason it never met).
pub fn spreads<'a>(runs: impl Iterator<Item = &'a BTreeMap<String, f64>> + Clone) -> BTreeMap<String, Spread> {
    let names: std::collections::BTreeSet<&String> = runs.clone().flat_map(|scalars| scalars.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let values: Vec<f64> = runs.clone().map(|scalars| scalars.get(name).copied().unwrap_or(0.0)).collect();
            (name.clone(), spread(&values))
        })
        .collect()
}

/// A series over seeds: per time point, the spread of the seeds' values.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SeriesSpread {
    pub t_hours: Vec<f64>,
    pub p50: Vec<f64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
}

pub fn series_spread(t_hours: &[f64], runs: &[&[f64]]) -> SeriesSpread {
    let mut out = SeriesSpread { t_hours: t_hours.to_vec(), ..SeriesSpread::default() };
    for i in 0..t_hours.len() {
        let at: Vec<f64> = runs.iter().filter_map(|values| values.get(i).copied()).collect();
        let s = spread(&at);
        out.p50.push(s.p50);
        out.min.push(s.min);
        out.max.push(s.max);
    }
    out
}

/// Whether the SLO holds over these per-seed values, and the value it was judged on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloVerdict {
    pub met: bool,
    pub value_seconds: f64,
}

pub fn judge(slo: &Slo, spread: &Spread) -> SloVerdict {
    let value = match slo.across_seeds {
        AcrossSeeds::P50 => spread.p50,
        AcrossSeeds::P90 => spread.p90,
        AcrossSeeds::Max => spread.max,
    };
    SloVerdict { met: value <= slo.max_seconds, value_seconds: value }
}

/// Erlang B: the share of offers refused when `servers` units serve `load` erlangs and refused offers are lost.
pub fn erlang_b(servers: u32, load: f64) -> f64 {
    // The recurrence B(k) = a·B(k−1) / (k + a·B(k−1)) is stable where the closed form overflows.
    let mut b = 1.0;
    for k in 1..=servers {
        b = load * b / (f64::from(k) + load * b);
    }
    b
}

/// Erlang C: the probability that an arrival waits when `servers` units serve `load` erlangs from one FIFO queue
/// (`load < servers`).
pub fn erlang_c(servers: u32, load: f64) -> f64 {
    let b = erlang_b(servers, load);
    let c = f64::from(servers);
    c * b / (c - load * (1.0 - b))
}

/// The mean wait in queue (M/M/c): C(c, a) / (c·μ − λ), in the unit of `mean_service`.
pub fn erlang_c_mean_wait(servers: u32, load: f64, mean_service: f64) -> f64 {
    let arrival_rate = load / mean_service;
    erlang_c(servers, load) / (f64::from(servers) / mean_service - arrival_rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_are_nearest_rank_over_seeds() {
        let s = spread(&[5.0, 1.0, 4.0, 2.0, 3.0]);
        assert_eq!((s.p50, s.p90, s.min, s.max, s.mean), (3.0, 5.0, 1.0, 5.0, 3.0));
        assert_eq!(spread(&[]), Spread::default());
    }

    #[test]
    fn erlang_formulas_match_published_tables() {
        // Textbook values: B(10, 5) = 0.01838; C(10, 5) = 0.03610; one server, a = 0.5: C = 0.5, W = 1 · service.
        assert!((erlang_b(10, 5.0) - 0.018_38).abs() < 1e-5);
        assert!((erlang_c(10, 5.0) - 0.036_10).abs() < 1e-5);
        assert!((erlang_c_mean_wait(1, 0.5, 2.0) - 2.0).abs() < 1e-12);
    }
}
