//! The fuzz harness of the webhooks and the readers (docs/performance.md, "Fuzzing the webhooks and the readers").
//!
//! A case is a byte tape: every choice a generator makes (which fixture, which field, which hostile value) is read
//! from it, so one tape is one input, whoever drives it. `tests/fuzz_readers.rs` lets proptest draw and shrink tapes
//! (its failures persist in `tests/fuzz_readers.proptest-regressions`); `examples/fuzz_readers.rs` draws them from a
//! seeded ChaCha stream per case, for millions of cases in release, so a seed and a case index replay a failure.
//!
//! A case passes when nothing panics, every refusal is one line that names its field and reason, and every answer
//! holds up (see [`reviews`]). Anything else is a [`Finding`].

pub mod hostile;
pub mod readers;
pub mod reviews;

use std::fmt;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use hostile::Tape;

/// What is fuzzed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// AdmissionReviews through the HTTPS server's reading and `gpuclaim review`'s.
    Reviews,
    /// `--objects` manifests.
    Objects,
    /// Scenario files, parsed and built.
    Scenarios,
    /// What-if study files and their base scenarios.
    Studies,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Reviews, Kind::Objects, Kind::Scenarios, Kind::Studies];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Reviews => "reviews",
            Kind::Objects => "objects",
            Kind::Scenarios => "scenarios",
            Kind::Studies => "studies",
        }
    }

    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// How many bytes of choices a case gets: far more than any case reads (a case reads a few hundred at most).
pub const TAPE_BYTES: usize = 1024;

/// The tape of case `index` of `kind` under `seed`: its own ChaCha stream, so any case replays without the ones
/// before it.
pub fn tape(seed: u64, kind: Kind, index: u64) -> Vec<u8> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = kind as u8;
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(index);
    let mut tape = vec![0u8; TAPE_BYTES];
    rng.fill_bytes(&mut tape);
    tape
}

/// How a case ended when it passed: the decision or the refusal, generalised for a tally.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Answered(String),
    Refused(String),
}

/// A case that did not pass (other than by panicking): what broke, and the detail.
#[derive(Debug)]
pub struct Finding {
    pub what: &'static str,
    pub detail: String,
}

impl Finding {
    pub fn new(what: &'static str, detail: impl fmt::Debug) -> Self {
        let mut detail = format!("{detail:?}");
        detail.truncate(char_boundary_at_most(&detail, 2_000));
        Finding { what, detail }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

/// The longest refusal message that is still read: past this, the message quotes more input than a person reads.
pub const MESSAGE_BYTES_MAX: usize = 1_024;

/// A refusal must be one non-empty line of readable length.
pub fn one_line(what: &'static str, message: &str) -> Result<(), Finding> {
    if message.trim().is_empty() || message.contains('\n') || message.len() > MESSAGE_BYTES_MAX {
        return Err(Finding::new(what, message));
    }
    Ok(())
}

/// A field path without its indices and with long or odd keys cut, so refusals of one kind tally together.
pub fn generalise(field: &str) -> String {
    let mut out = String::new();
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[i]");
            }
            ']' => in_index = false,
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    if out.len() > 80 {
        out.truncate(char_boundary_at_most(&out, 80));
        out.push('…');
    }
    out
}

/// The largest character boundary of `text` at most `at` bytes in (`str::floor_char_boundary` is newer than the
/// workspace's Rust).
fn char_boundary_at_most(text: &str, at: usize) -> usize {
    (0..=at.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0)
}

/// One input, generated from a tape.
pub enum Input {
    Review(reviews::Request),
    Objects(String),
    Scenario(String),
    Study(readers::StudyCase),
}

impl Input {
    pub fn generate(kind: Kind, tape: &[u8]) -> Input {
        let tape = &mut Tape::new(tape);
        match kind {
            Kind::Reviews => Input::Review(reviews::generate(tape)),
            Kind::Objects => Input::Objects(readers::objects_text(tape)),
            Kind::Scenarios => Input::Scenario(readers::scenario_text(tape)),
            Kind::Studies => Input::Study(readers::study_case(tape)),
        }
    }

    /// The input as files, for a person to read or to feed to the command it came through.
    pub fn files(&self) -> Vec<(&'static str, Vec<u8>)> {
        match self {
            Input::Review(request) => {
                let mut files = vec![("review.json", request.body.clone())];
                let content_type = request.content_type.clone().unwrap_or_else(|| b"(none)".to_vec());
                files.push(("content-type", content_type));
                files.push(("webhook", request.webhook.path().as_bytes().to_vec()));
                if let Some(objects) = &request.objects {
                    files.push(("objects.yaml", objects.clone().into_bytes()));
                }
                files
            }
            Input::Objects(text) => vec![("objects.yaml", text.clone().into_bytes())],
            Input::Scenario(text) => vec![("scenario.yaml", text.clone().into_bytes())],
            Input::Study(case) => {
                vec![("study.yaml", case.study.clone().into_bytes()), ("base.yaml", case.base.clone().into_bytes())]
            }
        }
    }
}

/// What a case needs that is made once: the views reviews are answered on, a runtime to read bodies as the server
/// does, a directory for studies' base scenarios.
pub struct Context {
    pub views: reviews::Views,
    pub runtime: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
}

impl Context {
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime starts");
        let dir = tempfile::tempdir().expect("a temporary directory");
        Context { views: reviews::Views::new(), runtime, dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Runs one input.
pub fn run(context: &Context, input: &Input) -> Result<Verdict, Finding> {
    match input {
        Input::Review(request) => reviews::run(&context.views, request, &context.runtime),
        Input::Objects(text) => readers::run_objects(text),
        Input::Scenario(text) => readers::run_scenario(text),
        Input::Study(case) => readers::run_study(case, context.dir()),
    }
}
