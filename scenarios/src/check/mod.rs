//! Checked runs: a scenario run under one engine variant and seed, with the invariants checked after every event
//! and the scenario's expectations judged, twice, with the two event-log hashes compared.

pub mod expect;
pub mod invariants;
mod run;
pub mod shrink;
pub mod suite;

pub use expect::{Expectation, ExpectationSpec, Figure, Subject, When};
pub use invariants::{Invariant, Invariants, REACTION_TIME_DEFAULT, Violation};
pub use run::{
    CheckedRun, Checker, Judged, RunFigures, Stop, check_event, run_checked, run_checked_world, run_twice,
    watch_invariants,
};
