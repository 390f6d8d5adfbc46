//! Expectations a scenario states about its run: a condition on one subject (a VM, one of its pods, its migration,
//! a claim, a figure of the run) and when it must hold — `at` a time (or the `end`), `by` a deadline, or `never`.
//! A scenario may also expect the run to stop on an invariant (a counterfactual engine that breaks one).
//!
//! ```yaml
//! expect:
//! - {by: 2m, vm: tenant-a/train, phase: Running}
//! - {never: true, vm: tenant-a/train, status: CrashLoopBackOff}
//! - {at: 10m, pod: {vm: tenant-a/train, role: launcher}, state: Gated, waiting: NoCapacity}
//! - {at: end, figure: "refusals/FailedCreate:NoCapacity", atLeast: 3, variants: [refuse-at-admission]}
//! - {invariant: UngatedWithoutPin, variants: [two-update-pin]}
//! ```

use std::collections::BTreeSet;

use gpuclaim_engine::keys;
use gpuclaim_engine::model::{Pod, VmiPhase};
use gpuclaim_engine::model::{PodRole, pod_role};
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::world::{MigrationPhase, World};
use serde::Deserialize;

use super::invariants::Invariant;
use crate::scenario::Duration;

/// An expectation as a scenario file writes it (one subject and its conditions, and when).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpectationSpec {
    /// What it means, in words (shown in reports).
    #[serde(default)]
    pub says: Option<String>,
    /// The engine variants it applies to (default: every variant the scenario runs).
    #[serde(default)]
    pub variants: Option<Vec<String>>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub by: Option<Duration>,
    #[serde(default)]
    pub never: Option<bool>,
    /// With `never`: from this time on (default: the whole run).
    #[serde(default)]
    pub from: Option<Duration>,
    // Subjects: exactly one.
    #[serde(default)]
    pub vm: Option<String>,
    #[serde(default)]
    pub pod: Option<PodSubject>,
    #[serde(default)]
    pub migration: Option<String>,
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub figure: Option<String>,
    #[serde(default)]
    pub start_wait: Option<String>,
    #[serde(default)]
    pub invariant: Option<String>,
    // Conditions.
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub waiting: Option<String>,
    #[serde(default)]
    pub pending: Option<String>,
    #[serde(default)]
    pub gates: Option<usize>,
    #[serde(default)]
    pub tolerations: Option<usize>,
    #[serde(default)]
    pub at_least: Option<u64>,
    #[serde(default)]
    pub at_most: Option<u64>,
    #[serde(default)]
    pub equals: Option<u64>,
    /// For `startWait`: the longest wait allowed.
    #[serde(default)]
    pub within: Option<Duration>,
    /// For `invariant`: a rate, not a promise for every run: the runs of the scenario and variant together break it
    /// in at least this share of them (`0.95`); a run that does not is no failure by itself.
    #[serde(default)]
    pub rate: Option<f64>,
}

/// One of a VM's pods, by its role.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSubject {
    pub vm: String,
    pub role: String,
}

/// When an expectation is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// On the state at this time (the state after every event up to it).
    At(Millis),
    /// On the state at the end of the run.
    End,
    /// At some moment up to this deadline.
    By(Millis),
    /// At no moment from this time on.
    Never { from: Millis },
    /// The run stops on this invariant.
    Stops,
}

/// What an expectation looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    Vm { namespace: String, name: String },
    Pod { namespace: String, vm: String, role: PodRole },
    Migration { namespace: String, vmi: String },
    Claim { namespace: String, name: String },
    Figure(Figure),
    StartWait { namespace: String, vm: String },
    Invariant(Invariant),
}

/// A figure of the run, as `figure:` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Figure {
    VmStarts,
    ControllerPasses,
    /// Passes taken again because confirming their pins found the controller's cache behind on a pin's node.
    PinsRechecked,
    /// `refusals/<what>:<reason>` (the run's refusal counts, e.g. `FailedCreate:NoCapacity`).
    Refusals(String),
    /// `tenantWrites/<write>`: a tenant's writes of that kind that landed.
    TenantWrites(String),
    /// `waitingAtGate` (all pods at the gate) or `waitingAtGate/<reason>`.
    WaitingAtGate(Option<String>),
    MigrationsSucceeded,
    MigrationsFailed,
    /// Usage records in the store, open or closed.
    UsagesOpen,
    UsagesClosed,
    Claims,
}

/// A condition on the subject: every field given must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Condition {
    pub phase: Option<String>,
    pub status: Option<String>,
    pub state: Option<String>,
    pub node: Option<String>,
    pub waiting: Option<String>,
    pub pending: Option<String>,
    pub gates: Option<usize>,
    pub tolerations: Option<usize>,
    pub at_least: Option<u64>,
    pub at_most: Option<u64>,
    pub equals: Option<u64>,
    pub within: Option<Millis>,
}

/// A parsed expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    /// How reports name it: its index in the file and what it says.
    pub label: String,
    pub variants: Option<Vec<String>>,
    pub when: When,
    pub subject: Subject,
    pub condition: Condition,
    /// An invariant expectation's rate over runs, in thousandths (see [`ExpectationSpec::rate`]).
    pub rate_per_mille: Option<u32>,
}

const VM_PHASES: [&str; 7] = ["Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "Absent"];
const VM_STATUSES: [&str; 4] = ["Stopped", "Starting", "Running", "CrashLoopBackOff"];
const POD_STATES: [&str; 6] = ["Gated", "Ungated", "Bound", "Running", "Deleted", "Absent"];
const MIGRATION_PHASES: [&str; 6] = ["Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed"];
const CLAIM_PHASES: [&str; 3] = ["Pending", "Bound", "Absent"];

impl ExpectationSpec {
    /// Checks the spec and builds the expectation; `field` is its path in the file (`expect[3]`), for errors.
    pub fn parse(&self, field: &str) -> Result<Expectation, (String, String)> {
        let err = |sub: &str, reason: String| (format!("{field}.{sub}"), reason);
        let subjects = [
            self.vm.is_some(),
            self.pod.is_some(),
            self.migration.is_some(),
            self.claim.is_some(),
            self.figure.is_some(),
            self.start_wait.is_some(),
            self.invariant.is_some(),
        ];
        if subjects.iter().filter(|s| **s).count() != 1 {
            return Err((
                field.to_owned(),
                "name exactly one subject: vm, pod, migration, claim, figure, startWait or invariant".to_owned(),
            ));
        }
        let subject = if let Some(vm) = &self.vm {
            let (namespace, name) = split(vm).ok_or_else(|| err("vm", format!("{vm:?} is not <namespace>/<name>")))?;
            Subject::Vm { namespace, name }
        } else if let Some(pod) = &self.pod {
            let (namespace, vm) =
                split(&pod.vm).ok_or_else(|| err("pod.vm", format!("{:?} is not <namespace>/<name>", pod.vm)))?;
            let role = match pod.role.as_str() {
                "launcher" => PodRole::Launcher,
                "migrationTarget" => PodRole::MigrationTarget,
                "volumeBinder" => PodRole::VolumeBinder,
                other => {
                    return Err(err(
                        "pod.role",
                        format!("{other:?} is not one of launcher, migrationTarget, volumeBinder"),
                    ));
                }
            };
            Subject::Pod { namespace, vm, role }
        } else if let Some(vmi) = &self.migration {
            let (namespace, vmi) =
                split(vmi).ok_or_else(|| err("migration", format!("{vmi:?} is not <namespace>/<vmi>")))?;
            Subject::Migration { namespace, vmi }
        } else if let Some(claim) = &self.claim {
            let (namespace, name) =
                split(claim).ok_or_else(|| err("claim", format!("{claim:?} is not <namespace>/<name>")))?;
            Subject::Claim { namespace, name }
        } else if let Some(figure) = &self.figure {
            Subject::Figure(parse_figure(figure).ok_or_else(|| {
                err(
                    "figure",
                    format!(
                        "{figure:?} is not a figure: vmStarts, controllerPasses, pinsRechecked, \
                         refusals/<what>:<reason>, tenantWrites/<write>, waitingAtGate[/<reason>], \
                         migrationsSucceeded, migrationsFailed, \
                         usagesOpen, usagesClosed, claims"
                    ),
                )
            })?)
        } else if let Some(vm) = &self.start_wait {
            let (namespace, vm) =
                split(vm).ok_or_else(|| err("startWait", format!("{vm:?} is not <namespace>/<name>")))?;
            Subject::StartWait { namespace, vm }
        } else {
            let name = self.invariant.as_deref().expect("one subject");
            let names: Vec<&str> = Invariant::ALL.iter().map(|i| i.name()).collect();
            Subject::Invariant(
                Invariant::named(name)
                    .ok_or_else(|| err("invariant", format!("{name:?} is not an invariant: {}", names.join(", "))))?,
            )
        };
        let timings = [self.at.is_some(), self.by.is_some(), self.never == Some(true)];
        let when = match (&subject, timings.iter().filter(|t| **t).count()) {
            (Subject::Invariant(_), 0) => When::Stops,
            (Subject::Invariant(_), _) => {
                return Err(err("invariant", "an invariant expectation takes no time".to_owned()));
            }
            (_, 1) => {
                if let Some(at) = &self.at {
                    match at.as_str() {
                        "end" => When::End,
                        text => When::At(crate::scenario::parse_duration(text).map_err(|reason| err("at", reason))?),
                    }
                } else if let Some(by) = self.by {
                    When::By(by.0)
                } else {
                    When::Never { from: self.from.map_or(Millis::ZERO, |from| from.0) }
                }
            }
            _ => return Err((field.to_owned(), "say when: exactly one of at, by or never: true".to_owned())),
        };
        if self.from.is_some() && !matches!(when, When::Never { .. }) {
            return Err(err("from", "only a `never` expectation takes a start time".to_owned()));
        }
        let condition = Condition {
            phase: self.phase.clone(),
            status: self.status.clone(),
            state: self.state.clone(),
            node: self.node.clone(),
            waiting: self.waiting.clone(),
            pending: self.pending.clone(),
            gates: self.gates,
            tolerations: self.tolerations,
            at_least: self.at_least,
            at_most: self.at_most,
            equals: self.equals,
            within: self.within.map(|w| w.0),
        };
        check_condition(&subject, &condition).map_err(|(sub, reason)| (format!("{field}.{sub}"), reason))?;
        let label = match &self.says {
            Some(says) => format!("{field} ({says})"),
            None => field.to_owned(),
        };
        match (self.rate, &subject) {
            (Some(rate), Subject::Invariant(_)) if !(rate > 0.0 && rate <= 1.0) => {
                return Err(err("rate", format!("{rate} is not a share of runs in (0, 1]")));
            }
            (Some(_), Subject::Invariant(_)) | (None, _) => {}
            (Some(_), _) => return Err(err("rate", "only an invariant expectation takes a rate".to_owned())),
        }
        let rate_per_mille = self.rate.map(|rate| (rate * 1000.0).round() as u32);
        Ok(Expectation { label, variants: self.variants.clone(), when, subject, condition, rate_per_mille })
    }
}

/// Which conditions a subject takes, with their allowed values.
fn check_condition(subject: &Subject, c: &Condition) -> Result<(), (String, String)> {
    let one_of = |field: &str, value: &Option<String>, allowed: &[&str]| match value {
        Some(v) if !allowed.contains(&v.as_str()) => {
            Err((field.to_owned(), format!("{v:?} is not one of {}", allowed.join(", "))))
        }
        _ => Ok(()),
    };
    let only = |allowed: &[&str]| {
        let given = [
            ("phase", c.phase.is_some()),
            ("status", c.status.is_some()),
            ("state", c.state.is_some()),
            ("node", c.node.is_some()),
            ("waiting", c.waiting.is_some()),
            ("pending", c.pending.is_some()),
            ("gates", c.gates.is_some()),
            ("tolerations", c.tolerations.is_some()),
            ("atLeast", c.at_least.is_some()),
            ("atMost", c.at_most.is_some()),
            ("equals", c.equals.is_some()),
            ("within", c.within.is_some()),
        ];
        for (name, is_given) in given {
            if is_given && !allowed.contains(&name) {
                return Err((
                    name.to_owned(),
                    format!("does not apply to this subject (it takes {})", allowed.join(", ")),
                ));
            }
        }
        if !given.iter().any(|(_, g)| *g) && !allowed.is_empty() {
            return Err(("(condition)".to_owned(), format!("give at least one of {}", allowed.join(", "))));
        }
        Ok(())
    };
    match subject {
        Subject::Vm { .. } => {
            only(&["phase", "status", "node"])?;
            one_of("phase", &c.phase, &VM_PHASES)?;
            one_of("status", &c.status, &VM_STATUSES)
        }
        Subject::Pod { .. } => {
            only(&["state", "node", "waiting", "gates", "tolerations"])?;
            one_of("state", &c.state, &POD_STATES)
        }
        Subject::Migration { .. } => {
            only(&["phase"])?;
            one_of("phase", &c.phase, &MIGRATION_PHASES)
        }
        Subject::Claim { .. } => {
            only(&["phase", "node", "pending"])?;
            one_of("phase", &c.phase, &CLAIM_PHASES)
        }
        Subject::Figure(_) => only(&["atLeast", "atMost", "equals"]),
        Subject::StartWait { .. } => only(&["within"]),
        Subject::Invariant(_) => only(&[]),
    }
}

fn split(text: &str) -> Option<(String, String)> {
    let (namespace, name) = text.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then(|| (namespace.to_owned(), name.to_owned()))
}

fn parse_figure(text: &str) -> Option<Figure> {
    Some(match text.split_once('/') {
        None => match text {
            "vmStarts" => Figure::VmStarts,
            "controllerPasses" => Figure::ControllerPasses,
            "pinsRechecked" => Figure::PinsRechecked,
            "waitingAtGate" => Figure::WaitingAtGate(None),
            "migrationsSucceeded" => Figure::MigrationsSucceeded,
            "migrationsFailed" => Figure::MigrationsFailed,
            "usagesOpen" => Figure::UsagesOpen,
            "usagesClosed" => Figure::UsagesClosed,
            "claims" => Figure::Claims,
            _ => return None,
        },
        Some(("refusals", key)) if key.contains(':') => Figure::Refusals(key.to_owned()),
        Some(("tenantWrites", write)) if !write.is_empty() => Figure::TenantWrites(write.to_owned()),
        Some(("waitingAtGate", reason)) if !reason.is_empty() => Figure::WaitingAtGate(Some(reason.to_owned())),
        Some(_) => return None,
    })
}

impl Expectation {
    /// Whether it applies to a run of `variant`.
    pub fn applies_to(&self, variant: &str) -> bool {
        self.variants.as_ref().is_none_or(|names| names.iter().any(|name| name == variant))
    }

    /// Whether the condition holds on the world now; `seen_pods` remembers the pods the subject had (for `Deleted`).
    pub fn holds(&self, world: &World, seen_pods: &mut BTreeSet<String>) -> bool {
        let c = &self.condition;
        let store = world.store();
        match &self.subject {
            Subject::Vm { namespace, name } => {
                let vmi = store.vmi(namespace, name);
                let phase = vmi.map_or("Absent", |vmi| vmi_phase(vmi.phase));
                matches(&c.phase, phase)
                    && c.status.as_deref().is_none_or(|s| world.vm_status(namespace, name) == Some(s))
                    && c.node.as_deref().is_none_or(|n| vmi.and_then(|v| v.node_name.as_deref()) == Some(n))
            }
            Subject::Pod { namespace, vm, role } => {
                let pod: Option<&Pod> = store
                    .vmi_pods(namespace, vm)
                    .filter(|pod| pod_role(pod) == *role && !pod.phase.is_terminal())
                    .max_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
                if let Some(pod) = pod {
                    seen_pods.insert(pod.name.to_string());
                }
                let state = match pod {
                    None if seen_pods.is_empty() => "Absent",
                    None => "Deleted",
                    Some(pod) if pod.scheduling_gates.iter().any(|g| g == keys::GATE_PLACEMENT) => "Gated",
                    Some(pod) if pod.phase == gpuclaim_engine::model::PodPhase::Running => "Running",
                    Some(pod) if pod.node_name.is_some() => "Bound",
                    Some(_) => "Ungated",
                };
                let state_ok = match c.state.as_deref() {
                    None => pod.is_some(),
                    // A pod that runs is bound, and a bound one is ungated.
                    Some("Ungated") => matches!(state, "Ungated" | "Bound" | "Running"),
                    Some("Bound") => matches!(state, "Bound" | "Running"),
                    Some("Absent") => pod.is_none(),
                    Some(wanted) => state == wanted,
                };
                state_ok
                    && c.node.as_deref().is_none_or(|n| pod.and_then(|p| p.node_name.as_deref()) == Some(n))
                    && c.waiting
                        .as_deref()
                        .is_none_or(|w| pod.and_then(|p| p.waiting.as_ref()).is_some_and(|waiting| waiting.reason == w))
                    && c.gates.is_none_or(|n| pod.is_some_and(|p| p.scheduling_gates.len() == n))
                    && c.tolerations.is_none_or(|n| pod.is_some_and(|p| p.tolerations.len() == n))
            }
            Subject::Migration { namespace, vmi } => world
                .migrations()
                .values()
                .any(|m| &m.namespace == namespace && &m.vmi == vmi && matches(&c.phase, migration_phase(m.phase))),
            Subject::Claim { namespace, name } => {
                let claim = store.claim(namespace, name);
                let phase = match claim {
                    None => "Absent",
                    Some(claim) if claim.node.is_some() => "Bound",
                    Some(_) => "Pending",
                };
                matches(&c.phase, phase)
                    && c.node.as_deref().is_none_or(|n| claim.and_then(|c| c.node.as_deref()) == Some(n))
                    && c.pending.as_deref().is_none_or(|p| {
                        claim.and_then(|c| c.pending.as_ref()).is_some_and(|pending| pending.reason == p)
                    })
            }
            Subject::Figure(figure) => {
                let value = figure_value(world, figure);
                c.at_least.is_none_or(|n| value >= n)
                    && c.at_most.is_none_or(|n| value <= n)
                    && c.equals.is_none_or(|n| value == n)
            }
            Subject::StartWait { namespace, vm } => world
                .last_start_wait(namespace, vm)
                .is_some_and(|waited| c.within.is_none_or(|within| waited <= within)),
            Subject::Invariant(_) => false,
        }
    }

    /// What the subject looks like now, for a failure's message.
    pub fn observed(&self, world: &World) -> String {
        let store = world.store();
        match &self.subject {
            Subject::Vm { namespace, name } => {
                let vmi = store.vmi(namespace, name);
                format!(
                    "VMI phase {}, VM status {}, node {}",
                    vmi.map_or("Absent", |v| vmi_phase(v.phase)),
                    world.vm_status(namespace, name).unwrap_or("(no VM)"),
                    vmi.and_then(|v| v.node_name.as_deref()).unwrap_or("none")
                )
            }
            Subject::Pod { namespace, vm, role } => {
                match store.vmi_pods(namespace, vm).filter(|p| pod_role(p) == *role).last() {
                    None => "no such pod".to_owned(),
                    Some(pod) => format!(
                        "pod {} phase {:?}, gates {:?}, node {}, waiting {}, {} tolerations",
                        pod.name,
                        pod.phase,
                        pod.scheduling_gates,
                        pod.node_name.as_deref().unwrap_or("none"),
                        pod.waiting.as_ref().map_or("-", |w| w.reason.as_str()),
                        pod.tolerations.len()
                    ),
                }
            }
            Subject::Migration { namespace, vmi } => {
                let phases: Vec<&str> = world
                    .migrations()
                    .values()
                    .filter(|m| &m.namespace == namespace && &m.vmi == vmi)
                    .map(|m| migration_phase(m.phase))
                    .collect();
                if phases.is_empty() { "no migration".to_owned() } else { format!("migrations {phases:?}") }
            }
            Subject::Claim { namespace, name } => match store.claim(namespace, name) {
                None => "no such claim".to_owned(),
                Some(claim) => format!(
                    "node {}, attached to {}, pending {}",
                    claim.node.as_deref().unwrap_or("none"),
                    claim.attached_to.as_ref().map_or("nothing", |v| v.name.as_str()),
                    claim.pending.as_ref().map_or("-", |p| p.reason.as_str())
                ),
            },
            Subject::Figure(figure) => format!("{}", figure_value(world, figure)),
            Subject::StartWait { namespace, vm } => match world.last_start_wait(namespace, vm) {
                Some(waited) => format!("waited {waited}"),
                None => "never started".to_owned(),
            },
            Subject::Invariant(_) => String::new(),
        }
    }
}

fn matches(wanted: &Option<String>, actual: &str) -> bool {
    wanted.as_deref().is_none_or(|w| w == actual)
}

fn vmi_phase(phase: VmiPhase) -> &'static str {
    match phase {
        VmiPhase::Pending => "Pending",
        VmiPhase::Scheduling => "Scheduling",
        VmiPhase::Scheduled => "Scheduled",
        VmiPhase::Running => "Running",
        VmiPhase::Succeeded => "Succeeded",
        VmiPhase::Failed => "Failed",
        VmiPhase::Unknown => "Unknown",
    }
}

fn migration_phase(phase: MigrationPhase) -> &'static str {
    match phase {
        MigrationPhase::Pending => "Pending",
        MigrationPhase::Scheduling => "Scheduling",
        MigrationPhase::Scheduled => "Scheduled",
        MigrationPhase::Running => "Running",
        MigrationPhase::Succeeded => "Succeeded",
        MigrationPhase::Failed => "Failed",
    }
}

/// A figure's value now.
pub fn figure_value(world: &World, figure: &Figure) -> u64 {
    let stats = world.stats();
    let migrations = |phase: MigrationPhase| world.migrations().values().filter(|m| m.phase == phase).count() as u64;
    match figure {
        Figure::VmStarts => stats.vm_starts,
        Figure::ControllerPasses => stats.controller_passes,
        Figure::PinsRechecked => stats.pins_rechecked,
        Figure::Refusals(key) => stats.refusals.get(key).copied().unwrap_or(0),
        Figure::TenantWrites(write) => stats.tenant_writes.get(write).copied().unwrap_or(0),
        Figure::WaitingAtGate(None) => world.waiting_at_gate().values().sum(),
        Figure::WaitingAtGate(Some(reason)) => world.waiting_at_gate().get(reason).copied().unwrap_or(0),
        Figure::MigrationsSucceeded => migrations(MigrationPhase::Succeeded),
        Figure::MigrationsFailed => migrations(MigrationPhase::Failed),
        Figure::UsagesOpen => world.store().usages().filter(|u| u.end.is_none()).count() as u64,
        Figure::UsagesClosed => world.store().usages().filter(|u| u.end.is_some()).count() as u64,
        Figure::Claims => world.store().claims().count() as u64,
    }
}
