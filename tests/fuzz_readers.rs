//! The fuzz harness in the test suite: proptest draws byte tapes for each kind of input (AdmissionReviews through
//! the webhook's reading and `gpuclaim review`'s, `--objects` manifests, scenarios, studies) and shrinks a failing
//! one. A modest number of cases, to run in CI in debug; `examples/fuzz_readers.rs` runs millions from a seed.
//! Failures persist in `tests/fuzz_readers.proptest-regressions` and are replayed first on every run.

mod fuzz;

use fuzz::{Context, Input, Kind, TAPE_BYTES};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Fixed, so CI runs the same cases every time (the house rule: no unseeded randomness in tests); the long-run
/// driver is where new seeds explore.
const SEED: u64 = 0x6770_7563_6c61_696d;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, rng_seed: RngSeed::Fixed(SEED), ..ProptestConfig::default() }
}

fn passes(context: &Context, kind: Kind, tape: &[u8]) -> Result<(), TestCaseError> {
    let input = Input::generate(kind, tape);
    match fuzz::run(context, &input) {
        Ok(_) => Ok(()),
        Err(finding) => Err(TestCaseError::fail(finding.to_string())),
    }
}

fn tapes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..TAPE_BYTES)
}

thread_local! {
    static CONTEXT: Context = Context::new();
}

proptest! {
    #![proptest_config(config(600))]

    #[test]
    fn hostile_reviews_are_answered_or_refused_clearly(tape in tapes()) {
        CONTEXT.with(|context| passes(context, Kind::Reviews, &tape))?;
    }
}

proptest! {
    #![proptest_config(config(150))]

    #[test]
    fn hostile_objects_files_are_loaded_or_refused_clearly(tape in tapes()) {
        CONTEXT.with(|context| passes(context, Kind::Objects, &tape))?;
    }

    #[test]
    fn hostile_scenarios_are_built_or_refused_clearly(tape in tapes()) {
        CONTEXT.with(|context| passes(context, Kind::Scenarios, &tape))?;
    }

    #[test]
    fn hostile_studies_are_parsed_or_refused_clearly(tape in tapes()) {
        CONTEXT.with(|context| passes(context, Kind::Studies, &tape))?;
    }
}

/// The long-run driver's promise: a seed and a case index give the same input every time, and different cases
/// differ, so a failure it reports replays from those two numbers.
#[test]
fn a_seed_and_a_case_index_replay_the_same_input() {
    for kind in Kind::ALL {
        assert_eq!(Kind::named(kind.name()), Some(kind));
        let files = |index| Input::generate(kind, &fuzz::tape(7, kind, index)).files();
        assert_eq!(files(3), files(3), "{}", kind.name());
        let first = files(0);
        assert!((1..8).any(|index| files(index) != first), "{}", kind.name());
    }
}
