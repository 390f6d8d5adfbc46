//! One checked run: the world built from a scenario under a variant and seed, invariants after every event, the
//! expectations judged at their times, and the run's key figures.
//!
//! A run that breaks an invariant the scenario does not expect of its variant stops at that event: the run fails
//! and what it had not reached yet is reported as such. One the scenario expects (a counterfactual engine) is
//! recorded where it first broke and the run goes on, checking every other invariant, until every invariant it
//! expects has broken: then it stops there, the expected outcome, and the other expectations are judged on the state
//! it stopped in. A counterfactual may so show several things it breaks (each an expectation), while what follows
//! from its last break is not judged.

use std::collections::BTreeSet;

use gpuclaim_engine::variant::Variant;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::metrics::Percentiles;
use gpuclaim_sim::world::{World, WorldError};

use super::expect::{Expectation, Subject, When};
use super::invariants::{Invariant, Invariants, Violation};
use crate::scenario::{Scenario, ScenarioError};

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

/// The invariant checks of one world: its API server keeps the journal they read, and the placement index their
/// liveness sample runs the engine on.
pub fn watch_invariants(world: &mut World, variant: Variant, reaction: Millis) -> Invariants {
    world.api.watch().keep_journal();
    world.api.keep_placement_index();
    Invariants::new(world.store(), variant, reaction)
}

/// [`check_event`] for a run that expects `expected` to break: the first break of each goes into `broken` and the
/// run goes on until all of `awaited` (those promised for every run) have broken (then the last one is returned, its
/// invariant expected); any other invariant stops it.
pub fn check_event_expecting(
    invariants: &mut Invariants,
    world: &mut World,
    expected: &BTreeSet<Invariant>,
    awaited: &BTreeSet<Invariant>,
    broken: &mut Vec<Stop>,
) -> Result<(), Stop> {
    let touched = world.take_touched(invariants.spent_journal());
    let (now, time, leads) = (world.now(), world.engine_time(), world.controller_leads());
    for violation in invariants.check_all(world.store(), touched, now, time, leads) {
        let stop = Stop { violation, event: world.events(), at: now };
        if !expected.contains(&stop.violation.invariant) {
            return Err(stop);
        }
        if !broken.iter().any(|seen| seen.violation.invariant == stop.violation.invariant) {
            broken.push(stop.clone());
            let all = !awaited.is_empty() && awaited.iter().all(|a| broken.iter().any(|b| b.violation.invariant == *a));
            if all {
                return Err(stop);
            }
        }
    }
    Ok(())
}

/// Checks what the world's last event changed (an observer of [`World::run_observed`]).
pub fn check_event(invariants: &mut Invariants, world: &mut World) -> Result<(), Stop> {
    let touched = world.take_touched(invariants.spent_journal());
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
    /// The invariant the scenario does not expect that stopped the run, if one did.
    pub stop: Option<Stop>,
    /// The invariants the scenario expects of this variant that broke, each where it first did.
    pub broken: Vec<Stop>,
    /// The expectations with a rate (label, rate in thousandths) and whether this run broke their invariant:
    /// judged over runs.
    pub rates: Vec<(String, u32, bool)>,
    pub judged: Vec<Judged>,
    pub figures: RunFigures,
}

impl CheckedRun {
    pub fn passed(&self) -> bool {
        self.stop.is_none() && self.judged.iter().all(|j| j.passed)
    }

    /// The first thing that failed, in a line.
    pub fn failure(&self) -> Option<String> {
        if let Some(stop) = &self.stop {
            return Some(stop.to_string());
        }
        self.judged.iter().find(|j| !j.passed).map(|j| format!("{}: {}", j.label, j.detail))
    }
}

/// What one expectation has seen so far.
struct Tracking {
    expectation: Expectation,
    seen_pods: BTreeSet<String>,
    verdict: Option<Judged>,
}

impl Tracking {
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
    let mut world = scenario.build(seed, log)?;
    world.set_variant(variant);
    let mut checker = Checker::new(scenario, &mut world, variant, judge_as, seed)?;
    while let Some(cut) = checker.next_cut(world.now()) {
        let outcome = world.run_observed(cut, EVENTS_MAX, |world| checker.observe(world))?;
        if let Err(stopped) = outcome {
            checker.stopped(stopped);
            break;
        }
        checker.judge_cut(&world, cut);
    }
    let run = checker.finish(&mut world)?;
    Ok((run, world))
}

/// One checked run's judge, handed the world after every event by whoever drives it: [`run_checked_world`] in
/// virtual time, or the served twin paced to the wall clock. The driver runs to each [`Checker::next_cut`] (a time
/// an expectation is judged at, and the end), calls [`Checker::judge_cut`] there, and [`Checker::finish`] at the
/// end or once an observation stopped the run.
pub struct Checker {
    judge_as: String,
    seed: u64,
    invariants: Invariants,
    tracking: Vec<Tracking>,
    /// The times the run is cut at to judge, the end last.
    cuts: BTreeSet<Millis>,
    end: Millis,
    /// The invariants the scenario expects of this variant (their break is no failure).
    expected: BTreeSet<Invariant>,
    /// Those promised for every run: once all broke, the run ends there.
    awaited: BTreeSet<Invariant>,
    broken: Vec<Stop>,
    stop: Option<Stop>,
    /// The run stopped (an invariant, or all awaited ones broken): nothing is cut any more.
    over: bool,
}

impl Checker {
    /// The judge of `world` (built from `scenario`, not run yet) under `variant`, by `judge_as`'s expectations.
    pub fn new(
        scenario: &Scenario,
        world: &mut World,
        variant: Variant,
        judge_as: &str,
        seed: u64,
    ) -> Result<Checker, ScenarioError> {
        let expectations = scenario.expectations()?;
        let invariants = watch_invariants(world, variant, scenario.reaction_time());
        let tracking: Vec<Tracking> = expectations
            .into_iter()
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
        // A rate expectation's invariant is expected too (its break is no failure) but not awaited: the run goes on
        // to its end unless every promised invariant broke.
        let expected: BTreeSet<Invariant> = tracking
            .iter()
            .filter_map(|t| match t.expectation.subject {
                Subject::Invariant(invariant) => Some(invariant),
                _ => None,
            })
            .collect();
        let awaited: BTreeSet<Invariant> = tracking
            .iter()
            .filter_map(|t| match t.expectation.subject {
                Subject::Invariant(invariant) if t.expectation.rate_per_mille.is_none() => Some(invariant),
                _ => None,
            })
            .collect();
        Ok(Checker {
            judge_as: judge_as.to_owned(),
            seed,
            invariants,
            tracking,
            cuts,
            end,
            expected,
            awaited,
            broken: Vec::new(),
            stop: None,
            over: false,
        })
    }

    /// The next time to run to and judge at (the end last), or `None` once the run is over.
    pub fn next_cut(&self, now: Millis) -> Option<Millis> {
        if self.over {
            return None;
        }
        self.cuts.range(now..).next().copied()
    }

    /// Checks what the world's last event (or write) changed and what the expectations watching all along see.
    pub fn observe(&mut self, world: &mut World) -> Result<(), Stop> {
        check_event_expecting(&mut self.invariants, world, &self.expected, &self.awaited, &mut self.broken)?;
        let now = world.now();
        for t in self.tracking.iter_mut().filter(|t| t.verdict.is_none()) {
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
        Ok(())
    }

    /// An observation stopped the run: every expected invariant broken is the counterfactual's end; anything else
    /// is the run failing there.
    pub fn stopped(&mut self, stopped: Stop) {
        if !self.expected.contains(&stopped.violation.invariant) {
            self.stop = Some(stopped);
        }
        self.over = true;
    }

    /// Judges the expectations due at `cut` (the world has run to it); the end's cut judges every one left.
    pub fn judge_cut(&mut self, world: &World, cut: Millis) {
        judge_at(world, &mut self.tracking, cut, cut == self.end);
        self.cuts.retain(|at| *at > cut);
        if cut >= self.end {
            self.over = true;
        }
    }

    /// The run's outcome: what is left judged on the state the run ended or stopped in, the log closed.
    pub fn finish(mut self, world: &mut World) -> Result<CheckedRun, ScenarioError> {
        let now = world.now();
        let (broken, stop) = (&self.broken, &self.stop);
        for t in &mut self.tracking {
            let seen = |invariant: &Invariant| broken.iter().find(|b| b.violation.invariant == *invariant);
            match (&t.expectation.subject, stop) {
                (Subject::Invariant(invariant), _) if seen(invariant).is_some() => {
                    let first = seen(invariant).expect("found");
                    t.judge(
                        true,
                        format!("broken after event {} at {}: {}", first.event, first.at, first.violation.detail),
                    );
                }
                (Subject::Invariant(invariant), _) => match t.expectation.rate_per_mille {
                    Some(rate) => t.judge(
                        true,
                        format!(
                            "not broken in this run; {invariant} is expected in {:.1}% of runs",
                            f64::from(rate) / 10.0
                        ),
                    ),
                    None => t.judge(false, format!("the run did not break invariant {invariant}")),
                },
                _ if stop.is_some() => t.judge(false, format!("not reached: the run stopped at {now}")),
                _ => {}
            }
        }
        // What is left is judged on the state the run ended or stopped in.
        judge_at(world, &mut self.tracking, now, true);
        let rates = self
            .tracking
            .iter()
            .filter_map(|t| match (t.expectation.rate_per_mille, &t.expectation.subject) {
                (Some(rate), Subject::Invariant(invariant)) => {
                    let seen = self.broken.iter().any(|b| b.violation.invariant == *invariant);
                    Some((t.expectation.label.clone(), rate, seen))
                }
                _ => None,
            })
            .collect();
        let judged = self.tracking.into_iter().map(|t| t.verdict.expect("every expectation judged")).collect();
        // Closing the log flushes its sink: a write error there is the run's error.
        world.take_log().finish().map_err(WorldError::from)?;
        let figures = RunFigures {
            events: world.events(),
            vm_starts: world.vm_starts(),
            start_wait: world.start_waits(),
            refusals: world.stats().refusals.values().sum(),
            waiting_at_gate: world.waiting_at_gate().values().sum(),
        };
        Ok(CheckedRun {
            variant: self.judge_as,
            seed: self.seed,
            hash: world.log_hash(),
            stop: self.stop,
            broken: self.broken,
            rates,
            judged,
            figures,
        })
    }
}

/// Judges the expectations due at `cut` (and, at the `end`, every one not judged yet).
fn judge_at(world: &World, tracking: &mut [Tracking], cut: Millis, end: bool) {
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
