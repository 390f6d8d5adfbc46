//! Shrinking a failing run to the smallest scenario that still fails the same way.
//!
//! From a scenario (as its JSON value), a seed and a variant whose checked run fails, the shrinker tries, in a
//! fixed order, one reduction at a time: the duration cut to just past the failure, then each workload, timed VM,
//! timed event and expectation dropped, each fault switched off, node groups and arrival rates halved, tenants no
//! longer named dropped. A reduction is kept when the run still fails the same way (the same invariant, or the
//! same expectation, by what it says); rounds go on until none is kept. The seed stays; what the random streams
//! draw changes with what was dropped, so a reduction that needs the old draws is simply not kept.
//!
//! Deterministic: the same input gives the same shrunk scenario. Bounded: at most [`SHRINK_RUNS_MAX`] runs, and a
//! deadline the caller may give.

use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::log::EventLog;
use serde_json::Value;

use super::run::run_checked;
use crate::scenario::{ScenarioError, parse_scenario};

/// The most checked runs one shrink makes.
pub const SHRINK_RUNS_MAX: usize = 2_000;

/// How a run failed, as the shrinker keeps it: the invariant, or the expectation's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    Invariant(String),
    Expectation(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Invariant(name) => write!(f, "invariant {name}"),
            Failure::Expectation(says) => write!(f, "expectation {says:?}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("the scenario passes with seed {seed} under variant {variant}: there is no failure to shrink")]
    Passes { seed: u64, variant: String },
}

/// What a shrink found.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest scenario found, as a JSON value (what a scenario file holds).
    pub scenario: Value,
    pub failure: Failure,
    /// When it fails (virtual ms), for an invariant.
    pub at_ms: Option<u64>,
    /// Checked runs made, reductions kept.
    pub runs: usize,
    pub kept: usize,
}

/// One step's report, for progress lines.
#[derive(Clone, Debug)]
pub struct Step<'a> {
    pub run: usize,
    pub reduction: &'a str,
    pub kept: bool,
}

/// The expectation's label without its index (`expect[3] (says)` → `says`): dropping others renumbers it.
fn says(label: &str) -> String {
    match label.split_once(" (") {
        Some((_, rest)) => rest.trim_end_matches(')').to_owned(),
        None => label.to_owned(),
    }
}

/// Runs `scenario` and says how it failed (`None`: it passed, or does not read).
fn failure_of(scenario: &Value, seed: u64, variant: Variant, judge_as: &str) -> Option<(Failure, Option<u64>)> {
    let parsed = parse_scenario(&scenario.to_string()).ok()?;
    let run = run_checked(&parsed, variant, judge_as, seed, EventLog::new(None)).ok()?;
    if let Some(stop) = &run.stop {
        return Some((Failure::Invariant(stop.violation.invariant.to_string()), Some(stop.at.0)));
    }
    let judged = run.judged.iter().find(|j| !j.passed)?;
    Some((Failure::Expectation(says(&judged.label)), None))
}

/// One shrink in progress: the scenario as it stands and what it has cost.
struct Shrinking<'p> {
    current: Value,
    failure: Failure,
    at_ms: Option<u64>,
    seed: u64,
    variant: Variant,
    judge_as: String,
    runs: usize,
    kept: usize,
    deadline: Option<std::time::Instant>,
    progress: &'p mut dyn FnMut(&Step<'_>),
}

impl Shrinking<'_> {
    /// Out of runs or time: no more steps.
    fn spent(&self) -> bool {
        self.runs >= SHRINK_RUNS_MAX || self.deadline.is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// Tries `edit` on the scenario as it stands; keeps it when the run still fails the same way.
    fn try_step(&mut self, reduction: &str, edit: impl FnOnce(&mut Value)) -> bool {
        if self.spent() {
            return false;
        }
        let mut candidate = self.current.clone();
        edit(&mut candidate);
        self.runs += 1;
        let same = failure_of(&candidate, self.seed, self.variant, &self.judge_as).filter(|(f, _)| *f == self.failure);
        (self.progress)(&Step { run: self.runs, reduction, kept: same.is_some() });
        let Some((_, at)) = same else { return false };
        self.current = candidate;
        self.at_ms = at.or(self.at_ms);
        self.kept += 1;
        true
    }

    /// One round over every reduction, each on the scenario as the ones before left it; whether any was kept.
    fn round(&mut self) -> bool {
        let kept_before = self.kept;
        if let Some(at) = self.at_ms {
            // Just past the failure: the checks' reaction time is at most minutes, a minute past it keeps what settles.
            let cut = at + 60_000;
            let longer = self.current["duration"]
                .as_str()
                .and_then(|d| crate::scenario::parse_duration(d).ok())
                .is_some_and(|d| d.0 > cut);
            if longer {
                let text = go_duration(cut);
                self.try_step(&format!("duration cut to {text}"), |s| s["duration"] = Value::from(text.clone()));
            }
        }
        for list in ["workloads", "vms", "events", "expect"] {
            // From the end, so the entries not tried yet keep their places.
            for index in (0..self.current[list].as_array().map_or(0, Vec::len)).rev() {
                self.try_step(&format!("{list}[{index}] dropped"), |s| {
                    s[list].as_array_mut().expect("an array").remove(index);
                });
            }
        }
        let faults: Vec<String> =
            self.current["faults"].as_object().map(|f| f.keys().cloned().collect()).unwrap_or_default();
        for name in faults {
            self.try_step(&format!("faults.{name} off"), |s| {
                s["faults"].as_object_mut().expect("a map").remove(&name);
            });
        }
        for index in (0..self.current["cluster"]["nodes"].as_array().map_or(0, Vec::len)).rev() {
            let groups = self.current["cluster"]["nodes"].as_array().map_or(0, Vec::len);
            if groups > 1
                && self.try_step(&format!("cluster.nodes[{index}] dropped"), |s| {
                    s["cluster"]["nodes"].as_array_mut().expect("an array").remove(index);
                })
            {
                continue;
            }
            let count = self.current["cluster"]["nodes"][index]["count"].as_u64().unwrap_or(0);
            if count > 1 {
                self.try_step(&format!("cluster.nodes[{index}].count halved to {}", count / 2), |s| {
                    s["cluster"]["nodes"][index]["count"] = Value::from(count / 2);
                });
            }
        }
        for index in 0..self.current["workloads"].as_array().map_or(0, Vec::len) {
            if let Some(rate) = self.current["workloads"][index]["arrivalsPerHour"].as_f64().filter(|r| *r > 1.0) {
                self.try_step(&format!("workloads[{index}].arrivalsPerHour halved to {}", rate / 2.0), |s| {
                    s["workloads"][index]["arrivalsPerHour"] = Value::from(rate / 2.0);
                });
            }
        }
        for index in (0..self.current["cluster"]["tenants"].as_array().map_or(0, Vec::len)).rev() {
            let name = self.current["cluster"]["tenants"][index]["name"].as_str().unwrap_or_default().to_owned();
            // A tenant nothing else names any more (its name appears only in its own entry).
            if self.current.to_string().matches(&format!("\"{name}")).count() <= 1 {
                self.try_step(&format!("cluster.tenants[{index}] ({name}) dropped"), |s| {
                    s["cluster"]["tenants"].as_array_mut().expect("an array").remove(index);
                });
            }
        }
        self.kept > kept_before
    }
}

/// Shrinks `scenario` (its JSON value) failing with `seed` under `variant` (named `judge_as`), reporting each step
/// to `progress`; stops taking steps at `deadline`.
pub fn shrink(
    scenario: &Value,
    seed: u64,
    variant: Variant,
    judge_as: &str,
    deadline: Option<std::time::Instant>,
    progress: &mut dyn FnMut(&Step<'_>),
) -> Result<Shrunk, ShrinkError> {
    // A scenario that does not read is the caller's error, named as the reader names it.
    parse_scenario(&scenario.to_string())?;
    let Some((failure, at_ms)) = failure_of(scenario, seed, variant, judge_as) else {
        return Err(ShrinkError::Passes { seed, variant: judge_as.to_owned() });
    };
    let mut shrinking = Shrinking {
        current: scenario.clone(),
        failure,
        at_ms,
        seed,
        variant,
        judge_as: judge_as.to_owned(),
        runs: 1,
        kept: 0,
        deadline,
        progress,
    };
    while shrinking.round() && !shrinking.spent() {}
    let Shrinking { mut current, failure, at_ms, runs, kept, .. } = shrinking;
    // What was emptied says nothing: left out.
    if let Some(fields) = current.as_object_mut() {
        fields.retain(|_, value| match value {
            Value::Array(items) => !items.is_empty(),
            Value::Object(entries) => !entries.is_empty(),
            _ => true,
        });
    }
    Ok(Shrunk { scenario: current, failure, at_ms, runs, kept })
}

/// A duration as scenarios write them (`1h1m0s100ms` → `1h1m100ms`).
fn go_duration(ms: u64) -> String {
    let parts = [(3_600_000, "h"), (60_000, "m"), (1_000, "s"), (1, "ms")];
    let mut rest = ms;
    let mut text = String::new();
    for (unit, suffix) in parts {
        if rest >= unit {
            text.push_str(&format!("{}{suffix}", rest / unit));
            rest %= unit;
        }
    }
    if text.is_empty() { "0s".to_owned() } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_scenarios_read_them() {
        assert_eq!(go_duration(3_660_100), "1h1m100ms");
        assert_eq!(go_duration(90_000), "1m30s");
        assert_eq!(crate::scenario::parse_duration(&go_duration(3_660_100)).unwrap().0, 3_660_100);
    }

    #[test]
    fn an_expectations_index_is_not_part_of_what_it_says() {
        assert_eq!(says("expect[3] (the VM runs)"), "the VM runs");
    }
}
