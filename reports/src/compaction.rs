//! The compaction search: the fewest nodes of a class's group (or of the groups a label selector picks), between a
//! study's `min` and `max`, whose runs meet the SLO — a bisection, assuming more nodes never make the metric worse.
//!
//! The search is a state machine that names the next node count to probe and learns each probe's runs, so the same
//! search runs in one process (every probe at once, [`crate::run_study`]) and across machines in rounds, one probe a
//! round, the merge deciding the next ([`crate::shard`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::run::RunResult;
use crate::stats::{self, judge};
use crate::study::{Compaction, Study, set_node_count};
use crate::{CompactionResult, PlannedRun, Probe, ReportError, RunId};
use gpuclaim_scenarios::scenario::scenario_from_tree;

/// Where a search stands.
#[derive(Clone, Debug)]
pub struct Search {
    spec: Compaction,
    /// Every count below `low` was seen to miss the SLO.
    low: u32,
    /// `high` meets the SLO once `max` was seen to.
    high: u32,
    next: Option<u32>,
    /// The node count found; `None` while searching or when not even `max` meets the SLO.
    found: Option<u32>,
    probes: BTreeMap<u32, Probe>,
}

impl Search {
    /// A search from the study's compaction: the first probe is its maximum.
    pub fn new(spec: &Compaction) -> Search {
        Search {
            spec: spec.clone(),
            low: spec.min,
            high: spec.max,
            next: Some(spec.max),
            found: None,
            probes: BTreeMap::new(),
        }
    }

    /// The node count to probe next; `None` once the search is over.
    pub fn next(&self) -> Option<u32> {
        self.next
    }

    /// The probe of [`Search::next`] ran: its runs (every seed) move the search on.
    pub fn learn(&mut self, study: &Study, runs: &[RunResult]) {
        let Some(nodes) = self.next else { return };
        let slo = study.slo.as_ref().expect("a compaction needs an SLO (checked on load)");
        let values: Vec<f64> = runs.iter().map(|r| r.scalars.get(&slo.scalar()).copied().unwrap_or(0.0)).collect();
        let spread = stats::spread(&values);
        let verdict = judge(slo, &spread);
        let met = verdict.met;
        let first = self.probes.is_empty();
        self.probes.insert(nodes, Probe { nodes, spread, verdict });
        if first {
            // Not even the most nodes meet it: nothing to bisect.
            if !met {
                self.next = None;
                return;
            }
        } else if met {
            self.high = nodes;
        } else {
            self.low = nodes + 1;
        }
        self.next = (self.low < self.high).then(|| self.low + (self.high - self.low) / 2);
        if self.next.is_none() {
            self.found = Some(self.high);
        }
    }

    /// What the finished search found.
    pub fn result(self) -> CompactionResult {
        debug_assert!(self.next.is_none(), "the search is over");
        CompactionResult {
            target: self.spec.target,
            variant: self.spec.variant,
            min: self.spec.min,
            max: self.spec.max,
            nodes: self.found,
            probes: self.probes.into_values().collect(),
        }
    }
}

/// The runs of one probe: the search's variant with `nodes` nodes, on every seed of the study.
pub fn probe_runs(study: &Study, nodes: u32) -> Result<Vec<PlannedRun>, ReportError> {
    let spec = study.compaction.as_ref().expect("called with a compaction");
    let base = study.variants.iter().find(|v| v.name == spec.variant).expect("checked on load");
    let name = format!("{}@[{}]={nodes}", spec.variant, spec.target);
    let mut tree = base.scenario.clone();
    let scenario = set_node_count(&mut tree, &spec.target, &nodes.into())
        .and_then(|()| scenario_from_tree(&tree))
        .map_err(|reason| ReportError::Scenario { variant: name.clone(), reason })?;
    let scenario = Arc::new(scenario);
    Ok(study
        .seeds
        .iter()
        .map(|&seed| PlannedRun {
            id: RunId { variant: name.clone(), seed },
            scenario: scenario.clone(),
            engine: base.engine,
        })
        .collect())
}
