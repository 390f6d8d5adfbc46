//! A judged served run's report (`twin serve --report-out`): the scenario's expectations as judged, the invariant
//! that stopped the run if one did, and the figures a story is compared by (VM starts, refusals by reason, tenant
//! writes that landed). [`outcome`] is the part two runs of one story must agree on, whoever drives them (the
//! served twin with the controller outside, or `sim run` in virtual time).

use gpuclaim_scenarios::check::CheckedRun;
use gpuclaim_sim::world::Stats;
use serde_json::{Value, json};

use crate::world_thread::RunReport;

/// The report as JSON.
pub fn to_json(scenario: &str, report: &RunReport) -> Value {
    let RunReport { run, stats, ended_at } = report;
    let mut value = outcome(run, stats);
    value["scenario"] = json!(scenario);
    value["seed"] = json!(run.seed);
    value["endedAtMs"] = json!(ended_at.0);
    value["passed"] = json!(run.passed());
    value["failure"] = json!(run.failure());
    value["details"] = details(run);
    value
}

/// What a story's outcome is: each expectation's verdict, the invariant that stopped it, the VMs started, the
/// refusals by `<what>:<reason>` and the tenant writes that landed. Timings are left out (the HTTP path adds lag);
/// so are the controller's own refused writes that only say it lost a race (`WriteRefused:Conflict`), which the live
/// controller meets and retries by design.
pub fn outcome(run: &CheckedRun, stats: &Stats) -> Value {
    let expectations: Vec<Value> =
        run.judged.iter().map(|judged| json!({"says": judged.label, "passed": judged.passed})).collect();
    let refusals: serde_json::Map<String, Value> = stats
        .refusals
        .iter()
        .filter(|(key, _)| key.as_str() != "WriteRefused:Conflict")
        .map(|(key, count)| (key.clone(), json!(count)))
        .collect();
    json!({
        "variant": run.variant,
        "stop": run.stop.as_ref().map(|stop| stop.violation.invariant.to_string()),
        "broken": run.broken.iter().map(|stop| stop.violation.invariant.to_string()).collect::<Vec<_>>(),
        "expectations": expectations,
        "vmStarts": stats.vm_starts,
        "refusals": refusals,
        "tenantWrites": stats.tenant_writes,
    })
}

/// The expectations' details (when each was met, or what was seen instead), for a person reading why.
pub fn details(run: &CheckedRun) -> Value {
    run.judged.iter().map(|judged| json!({"says": judged.label, "detail": judged.detail})).collect()
}
