//! One checked run: the world built from a scenario under a variant and seed, invariants after every event, the
//! expectations judged at their times, and the run's key figures.
//!
//! A run that breaks an invariant stops at that event. When the scenario expects that invariant (a counterfactual
//! engine), the stop is the expected outcome and the other expectations are judged on the state the run stopped
//! in; otherwise the run fails and what it had not reached yet is reported as such.

use std::collections::BTreeSet;

use gpuclaim_engine::variant::Variant;

use super::expect::{Expectation, Subject, When};
use super::invariants::{Invariants, Violation};
use crate::kernel::Millis;
use crate::log::EventLog;
use crate::metrics::Percentiles;
use crate::scenario::{Scenario, ScenarioError};
use crate::world::{World, WorldError};

/// The most events one checked run may handle: a run that needs more is runaway, not busy.
pub const EVENTS_MAX: u64 = 1_000_000_000;

/// Where a run stopped on a broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub violation: Violation,
    /// The index of the event after which it broke (1-based: the count of events handled).
    pub event: u64,
    pub at: Millis,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invariant {} broken after event {} at {}: {}",
            self.violation.invariant, self.event, self.at, self.violation.detail
        )
    }
}

/// The invariant checks of one world: its API server keeps the journal they read.
pub fn watch_invariants(world: &mut World, variant: Variant, reaction: Millis) -> Invariants {
    world.api.watch().keep_journal();
    Invariants::new(world.store(), variant, reaction)
}

/// Checks what the world's last event changed (an observer of [`World::run_observed`]).
pub fn check_event(invariants: &mut Invariants, world: &mut World) -> Result<(), Stop> {
    let touched = world.api.watch().take_journal(invariants.spent_journal());
    let (now, time, leads) = (world.now(), world.engine_time(), world.controller_leads());
    invariants.check(world.store(), touched, now, time, leads).map_err(|violation| Stop {
        violation,
        event: world.events(),
        at: now,
    })
}

/// An expectation's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub label: String,
    pub passed: bool,
    /// Why it failed (what was seen), or when it was met.
    pub detail: String,
}

/// Key figures of a run, for the runner's table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFigures {
    pub events: u64,
    pub vm_starts: u64,
    pub start_wait: Percentiles,
    pub refusals: u64,
    pub waiting_at_gate: u64,
}

/// A checked run's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedRun {
    pub variant: String,
    pub seed: u64,
    pub hash: String,
    /// The invariant that stopped the run, if one did.
    pub stop: Option<Stop>,
    /// Whether that stop was what the scenario expects of this variant.
    pub stop_expected: bool,
    pub judged: Vec<Judged>,
    pub figures: RunFigures,
}

impl CheckedRun {
    pub fn passed(&self) -> bool {
        (self.stop.is_none() || self.stop_expected) && self.judged.iter().all(|j| j.passed)
    }

    /// The first thing that failed, in a line.
    pub fn failure(&self) -> Option<String> {
        if let Some(stop) = self.stop.as_ref().filter(|_| !self.stop_expected) {
            return Some(stop.to_string());
        }
        self.judged.iter().find(|j| !j.passed).map(|j| format!("{}: {}", j.label, j.detail))
    }
}

/// What one expectation has seen so far.
struct Tracking<'e> {
    expectation: &'e Expectation,
    seen_pods: BTreeSet<String>,
    verdict: Option<Judged>,
}

impl Tracking<'_> {
    fn judge(&mut self, passed: bool, detail: String) {
        if self.verdict.is_none() {
            self.verdict = Some(Judged { label: self.expectation.label.clone(), passed, detail });
        }
    }
}

/// Runs `scenario` with the engine of `variant` and `seed`, judging it by the expectations of `judge_as` (the
/// variant's own name; a different name judges a changed engine by another variant's expectations, e.g. a rule
/// flipped in the engine against what the shipped engine must show).
pub fn run_checked(
    scenario: &Scenario,
    variant: Variant,
    judge_as: &str,
    seed: u64,
    log: EventLog,
) -> Result<CheckedRun, ScenarioError> {
    run_checked_world(scenario, variant, judge_as, seed, log).map(|(run, _)| run)
}

/// [`run_checked`], also returning the world as the run left it (its log taken), for its statistics.
pub fn run_checked_world(
    scenario: &Scenario,
    variant: Variant,
    judge_as: &str,
    seed: u64,
    log: EventLog,
) -> Result<(CheckedRun, World), ScenarioError> {
    let expectations = scenario.expectations()?;
    let mut world = scenario.build(seed, log)?;
    world.set_variant(variant);
    let mut invariants = watch_invariants(&mut world, variant, scenario.reaction_time());
    let mut tracking: Vec<Tracking<'_>> = expectations
        .iter()
        .filter(|e| e.applies_to(judge_as))
        .map(|expectation| Tracking { expectation, seen_pods: BTreeSet::new(), verdict: None })
        .collect();
    let end = scenario.duration.0;
    // The run goes in segments ending at every time an expectation is judged at.
    let mut cuts: BTreeSet<Millis> = tracking
        .iter()
        .filter_map(|t| match t.expectation.when {
            When::At(at) | When::By(at) => Some(at.min(end)),
            _ => None,
        })
        .collect();
    cuts.insert(end);
    let mut stop = None;
    for cut in cuts {
        let outcome = world.run_observed(cut, EVENTS_MAX, |world| {
            check_event(&mut invariants, world)?;
            let now = world.now();
            for t in tracking.iter_mut().filter(|t| t.verdict.is_none()) {
                match t.expectation.when {
                    When::By(deadline) if now <= deadline && t.expectation.holds(world, &mut t.seen_pods) => {
                        t.judge(true, format!("met at {now}"));
                    }
                    When::Never { from } if now >= from && t.expectation.holds(world, &mut t.seen_pods) => {
                        let seen = t.expectation.observed(world);
                        t.judge(false, format!("happened at {now} ({seen})"));
                    }
                    // Pods seen before an `at` is judged count for `Deleted`.
                    When::At(_) | When::End if matches!(t.expectation.subject, Subject::Pod { .. }) => {
                        t.expectation.holds(world, &mut t.seen_pods);
                    }
                    _ => {}
                }
            }
            Ok::<(), Stop>(())
        })?;
        if let Err(stopped) = outcome {
            stop = Some(stopped);
            break;
        }
        judge_at(&world, &mut tracking, cut, cut == end);
    }
    let stop_expected = stop.as_ref().is_some_and(|stop| {
        tracking.iter().any(|t| t.expectation.subject == Subject::Invariant(stop.violation.invariant))
    });
    let now = world.now();
    for t in &mut tracking {
        match (&t.expectation.subject, &stop) {
            (Subject::Invariant(invariant), Some(stop)) if *invariant == stop.violation.invariant => {
                t.judge(true, format!("broken after event {} at {}: {}", stop.event, stop.at, stop.violation.detail));
            }
            (Subject::Invariant(invariant), _) => {
                t.judge(false, format!("the run did not break invariant {invariant}"));
            }
            _ if stop.is_some() && !stop_expected => t.judge(false, format!("not reached: the run stopped at {now}")),
            _ => {}
        }
    }
    // What is left is judged on the state the run ended or stopped in.
    let final_cut = now;
    judge_at(&world, &mut tracking, final_cut, true);
    let judged = tracking.into_iter().map(|t| t.verdict.expect("every expectation judged")).collect();
    // Closing the log flushes its sink: a write error there is the run's error.
    world.take_log().finish().map_err(WorldError::from)?;
    let figures = RunFigures {
        events: world.events(),
        vm_starts: world.vm_starts(),
        start_wait: world.start_waits(),
        refusals: world.stats().refusals.values().sum(),
        waiting_at_gate: world.waiting_at_gate().values().sum(),
    };
    let run =
        CheckedRun { variant: judge_as.to_owned(), seed, hash: world.log_hash(), stop, stop_expected, judged, figures };
    Ok((run, world))
}

/// Judges the expectations due at `cut` (and, at the `end`, every one not judged yet).
fn judge_at(world: &World, tracking: &mut [Tracking<'_>], cut: Millis, end: bool) {
    for t in tracking.iter_mut().filter(|t| t.verdict.is_none()) {
        let due = match t.expectation.when {
            When::At(at) => at <= cut || end,
            When::By(deadline) => deadline <= cut || end,
            When::End | When::Never { .. } | When::Stops => end,
        };
        if !due {
            continue;
        }
        let holds = t.expectation.holds(world, &mut t.seen_pods);
        match t.expectation.when {
            When::At(_) | When::End => {
                let seen = t.expectation.observed(world);
                t.judge(holds, if holds { format!("held ({seen})") } else { format!("saw {seen}") });
            }
            When::By(deadline) => {
                let seen = t.expectation.observed(world);
                if holds {
                    t.judge(true, format!("met by {deadline} ({seen})"));
                } else {
                    t.judge(false, format!("not met by {deadline}: saw {seen}"));
                }
            }
            When::Never { .. } => t.judge(true, "never happened".to_owned()),
            When::Stops => {}
        }
    }
}

/// Runs twice and compares the event-log hashes: a run that does not repeat itself is reported as such.
pub fn run_twice(
    scenario: &Scenario,
    variant: Variant,
    judge_as: &str,
    seed: u64,
) -> Result<(CheckedRun, Option<String>), ScenarioError> {
    let first = run_checked(scenario, variant, judge_as, seed, EventLog::new(None))?;
    let second = run_checked(scenario, variant, judge_as, seed, EventLog::new(None))?;
    let mismatch = (first.hash != second.hash)
        .then(|| format!("not deterministic: event-log hashes {} and {} differ", first.hash, second.hash));
    Ok((first, mismatch))
}
