//! The long-run fuzz driver of the webhooks and the readers (docs/performance.md, "Fuzzing the webhooks and the
//! readers"): millions of cases, each a byte tape drawn from its own ChaCha stream of `--seed`, run with a panic
//! caught per case. It reports cases per second, the refusals and decisions seen, and each failure with the command
//! that replays it; a failing input is written under `--out`.
//!
//! ```text
//! cargo run --profile fuzz --example fuzz_readers -- --kind reviews --cases 10000000 --seed 1 --threads 2
//! cargo run --profile fuzz --example fuzz_readers -- --kind scenarios --seed 1 --replay 4711
//! ```

// The harness is shared with `tests/fuzz_readers.rs` (a module, not a crate: the example and the test are all that
// use it), and the process's allocator with the binary, whose every decision runs on it.
#[path = "../src/allocator.rs"]
mod allocator;
#[path = "../tests/fuzz/mod.rs"]
mod fuzz;

#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuzz::{Context, Input, Kind, Verdict};

/// The failures printed in full; past this they are counted.
const FAILURES_SHOWN_MAX: usize = 20;

struct Options {
    kinds: Vec<Kind>,
    cases: u64,
    seed: u64,
    threads: u64,
    out: PathBuf,
    replay: Option<u64>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        kinds: Kind::ALL.to_vec(),
        cases: 10_000,
        seed: 1,
        threads: 1,
        out: PathBuf::from("target/fuzz"),
        replay: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        let number = |text: String| text.replace('_', "").parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--kind" => {
                let text = value()?;
                options.kinds = text
                    .split(',')
                    .map(|name| {
                        Kind::named(name).ok_or(format!("no kind {name:?} (reviews, objects, scenarios, studies)"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--cases" => options.cases = number(value()?)?,
            "--seed" => options.seed = number(value()?)?,
            "--threads" => options.threads = number(value()?)?.max(1),
            "--out" => options.out = PathBuf::from(value()?),
            "--replay" => options.replay = Some(number(value()?)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// What one thread saw.
#[derive(Default)]
struct Tally {
    cases: u64,
    verdicts: BTreeMap<Verdict, u64>,
    failures: Vec<String>,
    slowest: Option<(Duration, u64)>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.cases += other.cases;
        for (verdict, count) in other.verdicts {
            *self.verdicts.entry(verdict).or_insert(0) += count;
        }
        self.failures.extend(other.failures);
        self.slowest = self.slowest.max(other.slowest);
    }
}

thread_local! {
    /// The last panic's message and place, left by the hook for the case that caught it.
    static PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("fuzz_readers: {error}");
            return ExitCode::from(2);
        }
    };
    // Panics are caught per case and reported with their replay command, not printed as they happen.
    std::panic::set_hook(Box::new(|info| {
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        PANIC.with_borrow_mut(|slot| *slot = Some(format!("{message}{place}")));
    }));
    allocator::keep_freed_memory();
    let mut failed = false;
    for &kind in &options.kinds {
        failed |= match options.replay {
            Some(index) => replay(&options, kind, index),
            None => campaign(&options, kind),
        };
    }
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// Runs case `index` alone, prints its input's files and its verdict.
fn replay(options: &Options, kind: Kind, index: u64) -> bool {
    let context = Context::new();
    let mut tally = Tally::default();
    run_case(options, &context, kind, index, &mut tally);
    let dir = write_input(
        &options.out,
        kind,
        options.seed,
        index,
        &Input::generate(kind, &fuzz::tape(options.seed, kind, index)),
    );
    println!("{} case {index} of seed {}: input in {}", kind.name(), options.seed, dir.display());
    for verdict in tally.verdicts.keys() {
        println!("  {verdict:?}");
    }
    for failure in &tally.failures {
        println!("  FAILED {failure}");
    }
    !tally.failures.is_empty()
}

fn campaign(options: &Options, kind: Kind) -> bool {
    let started = Instant::now();
    let total = Mutex::new(Tally::default());
    std::thread::scope(|scope| {
        for thread in 0..options.threads {
            let total = &total;
            scope.spawn(move || {
                let context = Context::new();
                let mut tally = Tally::default();
                // Thread t takes cases t, t + threads, …: the same cases whatever the thread count.
                let mut index = thread;
                while index < options.cases {
                    run_case(options, &context, kind, index, &mut tally);
                    index += options.threads;
                }
                total.lock().expect("never poisoned").merge(tally);
            });
        }
    });
    let tally = total.into_inner().expect("never poisoned");
    report(options, kind, &tally, started.elapsed());
    !tally.failures.is_empty()
}

fn run_case(options: &Options, context: &Context, kind: Kind, index: u64, tally: &mut Tally) {
    let tape = fuzz::tape(options.seed, kind, index);
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let input = Input::generate(kind, &tape);
        fuzz::run(context, &input)
    }));
    let took = started.elapsed();
    tally.cases += 1;
    tally.slowest = tally.slowest.max(Some((took, index)));
    let failure = match outcome {
        Ok(Ok(verdict)) => {
            *tally.verdicts.entry(verdict).or_insert(0) += 1;
            return;
        }
        Ok(Err(finding)) => finding.to_string(),
        Err(_) => format!("panic: {}", PANIC.with_borrow_mut(Option::take).unwrap_or_default()),
    };
    if tally.failures.len() < FAILURES_SHOWN_MAX {
        let input = catch_unwind(|| Input::generate(kind, &tape));
        let written =
            input.map(|input| write_input(&options.out, kind, options.seed, index, &input).display().to_string());
        tally.failures.push(format!(
            "case {index}: {failure}\n    input: {}\n    replay: cargo run --profile fuzz --example fuzz_readers -- --kind {} --seed {} --replay {index}",
            written.unwrap_or_else(|_| "(generating it panics)".to_owned()),
            kind.name(),
            options.seed,
        ));
    } else {
        tally.failures.push(format!("case {index}"));
    }
}

fn write_input(out: &Path, kind: Kind, seed: u64, index: u64, input: &Input) -> PathBuf {
    let dir = out.join(format!("{}-seed{seed}-case{index}", kind.name()));
    std::fs::create_dir_all(&dir).expect("the output directory can be made");
    for (name, bytes) in input.files() {
        std::fs::write(dir.join(name), bytes).expect("the input can be written");
    }
    dir
}

fn report(options: &Options, kind: Kind, tally: &Tally, elapsed: Duration) {
    let rate = tally.cases as f64 / elapsed.as_secs_f64();
    println!(
        "{}: {} cases, seed {}, {} threads, {:.1} s, {rate:.0} cases/s, {} failures",
        kind.name(),
        tally.cases,
        options.seed,
        options.threads,
        elapsed.as_secs_f64(),
        tally.failures.len()
    );
    if let Some((took, index)) = tally.slowest {
        println!("  slowest case: {index} ({:.1} ms)", took.as_secs_f64() * 1_000.0);
    }
    let mut verdicts: Vec<(&Verdict, &u64)> = tally.verdicts.iter().collect();
    verdicts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (verdict, count) in verdicts {
        let (how, what) = match verdict {
            Verdict::Answered(what) => ("answered", what),
            Verdict::Refused(what) => ("refused ", what),
        };
        println!("  {count:>10}  {how}  {what}");
    }
    for failure in tally.failures.iter().take(FAILURES_SHOWN_MAX) {
        println!("  FAILED {failure}");
    }
}
