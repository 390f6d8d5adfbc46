//! The world's own thread: it owns the twin's [`World`], runs it paced to the wall clock, renders every change into
//! the snapshot readers share, and tells waiting watches that the head moved.
//!
//! The world lives on one OS thread because its order is the order of everything: one owner runs its events and
//! (later) applies clients' writes between them, so no request ever sees half an event. Readers never wait for the
//! world: they read the snapshot, which the world updates after each event under a write lock held only for that
//! update.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpuclaim_engine::variant::Variant;
use gpuclaim_scenarios::check::{CheckedRun, Checker};
use gpuclaim_scenarios::scenario::Scenario;
use gpuclaim_sim::apiserver::admission::remote::WebhookTransport;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::served::store::Snapshot;
use gpuclaim_sim::served::writes::{Answer, WriteRequest};
use gpuclaim_sim::world::{HostAction, Stats, World};

use crate::pacer::{Pacer, Speed};

/// The most events one slice runs before the world looks at its commands again: at `max` speed a scenario can
/// queue millions of events, and a stop must not wait for all of them.
pub const EVENTS_PER_SLICE_MAX: u64 = 10_000;

/// The longest the world sleeps before it looks at the clock and its commands again.
pub const SLEEP_MAX: Duration = Duration::from_millis(50);

/// How the world is run.
#[derive(Debug)]
pub struct WorldConfig {
    pub scenario: Scenario,
    pub seed: u64,
    pub speed: Speed,
    /// Virtual time to stop running events at (the server goes on serving the state reached).
    pub until: Option<Millis>,
    /// Changes kept per resource for watches to resume from.
    pub history_max: usize,
    /// The GPU controller runs outside the world (its processes, started by the [`Host`] attached later): the
    /// world's own deploys no replica, and the clock holds at zero until the host says the product is ready.
    pub outside_controller: bool,
    /// Judge the run by the scenario's expectations and invariants, as `sim run` does; the report is sent once
    /// the run ends ([`WorldHandle::take_report`]).
    pub judging: Option<Judging>,
}

/// How a served run is judged: the engine's variant the twin's actors run, and whose expectations apply.
#[derive(Clone, Debug)]
pub struct Judging {
    pub variant: Variant,
    pub judge_as: String,
}

/// What a judged run reports at its end.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub run: CheckedRun,
    pub stats: Stats,
    /// The virtual time the run ended at.
    pub ended_at: Millis,
}

/// The host of an outside controller: it runs the controller's processes and answers for them.
pub trait Host: Send {
    /// Whether the product is installed and ready (the story's clock starts the first time it is).
    fn ready(&mut self) -> bool;
    /// Whether a replica leads now (the Lease names a live replica).
    fn leads(&mut self) -> bool;
    /// Does what the world asks (a replica's crash, an outage).
    fn act(&mut self, action: HostAction);
}

/// What the world's thread is told.
pub enum Command {
    Stop,
    /// A client's write, answered on the channel once applied and rendered.
    Write(Box<WriteRequest>, tokio::sync::oneshot::Sender<Answer>),
    /// The host of the outside controller and the webhooks' transport, attached once they can run (after the
    /// server listens): from then on the API server calls the stored webhook configurations.
    Attach(Box<dyn Host>, Box<dyn WebhookTransport>),
}

/// Writes waiting for the world at most; a write beyond is answered 429 (the API server's max-in-flight limit).
pub const WRITES_QUEUED_MAX: usize = 1024;

/// Why the world stopped running.
#[derive(Debug, thiserror::Error)]
pub enum WorldFailure {
    #[error("the scenario cannot be built: {0}")]
    Build(String),
    #[error("the world stopped at {at:?}: {reason}")]
    Run { at: Millis, reason: String },
}

/// The world's thread, seen from outside: the snapshot to read, the head to wait on, the virtual clock.
pub struct WorldHandle {
    pub snapshot: Arc<RwLock<Snapshot>>,
    /// The snapshot's head revision, sent each time it moves: what a watch waits on.
    pub head: tokio::sync::watch::Receiver<u64>,
    /// The world's virtual time (ms since its zero), for ages.
    pub now: Arc<AtomicU64>,
    /// The Unix time (ms) virtual zero stands for.
    pub epoch_ms: i64,
    commands: SyncSender<Command>,
    thread: Option<JoinHandle<Result<(), WorldFailure>>>,
    report: Option<tokio::sync::oneshot::Receiver<RunReport>>,
}

/// Where writes are sent to the world: clonable, for the HTTP tasks.
#[derive(Clone)]
pub struct Writes(SyncSender<Command>);

impl Writes {
    /// Queues `request`; `None` when the queue is full or the world has stopped.
    pub fn send(&self, request: WriteRequest) -> Option<tokio::sync::oneshot::Receiver<Answer>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.0.try_send(Command::Write(Box::new(request), reply)).ok()?;
        Some(answer)
    }
}

impl WorldHandle {
    /// Stops the world and waits for its thread; the first failure it met, if any.
    pub fn stop(mut self) -> Result<(), WorldFailure> {
        let _ = self.commands.send(Command::Stop);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(WorldFailure::Run { at: Millis::ZERO, reason: "the world's thread panicked".into() }),
            None => Ok(()),
        }
    }

    /// Where to send clients' writes.
    pub fn writes(&self) -> Writes {
        Writes(self.commands.clone())
    }

    /// Attaches the outside controller's host, and the transport the API server calls the webhooks through.
    pub fn attach(&self, host: Box<dyn Host>, webhooks: Box<dyn WebhookTransport>) {
        let _ = self.commands.send(Command::Attach(host, webhooks));
    }

    /// The judged run's report, once (it arrives when the run ends).
    pub fn take_report(&mut self) -> Option<tokio::sync::oneshot::Receiver<RunReport>> {
        self.report.take()
    }

    /// Whether the world's thread has ended (a failure: it runs until told to stop).
    pub fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for WorldHandle {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
    }
}

/// Builds the world on its own thread and starts running it. Returns once the first snapshot is there.
pub fn start(config: WorldConfig) -> Result<WorldHandle, WorldFailure> {
    let (commands, received) = std::sync::mpsc::sync_channel(WRITES_QUEUED_MAX);
    let (ready, started) = std::sync::mpsc::sync_channel(1);
    let (reported, report) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("gpuclaim-twin-world".into())
        .spawn(move || run(config, received, ready, reported))
        .map_err(|error| WorldFailure::Build(format!("cannot start the world's thread: {error}")))?;
    match started.recv() {
        Ok(Ok((snapshot, head, now, epoch_ms))) => {
            Ok(WorldHandle { snapshot, head, now, epoch_ms, commands, thread: Some(thread), report: Some(report) })
        }
        Ok(Err(failure)) => Err(failure),
        Err(_) => Err(match thread.join() {
            Ok(Err(failure)) => failure,
            _ => WorldFailure::Build("the world's thread ended before it started".into()),
        }),
    }
}

type Started = (Arc<RwLock<Snapshot>>, tokio::sync::watch::Receiver<u64>, Arc<AtomicU64>, i64);

fn run(
    config: WorldConfig,
    commands: Receiver<Command>,
    ready: SyncSender<Result<Started, WorldFailure>>,
    reported: tokio::sync::oneshot::Sender<RunReport>,
) -> Result<(), WorldFailure> {
    let mut world = match config.scenario.build(config.seed, EventLog::new(None)) {
        Ok(world) => world,
        Err(error) => {
            let _ = ready.send(Err(WorldFailure::Build(error.to_string())));
            return Ok(());
        }
    };
    if config.outside_controller {
        world.hand_over_controller();
    }
    let mut judge = match &config.judging {
        Some(judging) => {
            world.set_variant(judging.variant);
            let checker = Checker::new(&config.scenario, &mut world, judging.variant, &judging.judge_as, config.seed);
            match checker {
                Ok(checker) => Some(Judge { checker: Some(checker), reported: Some(reported) }),
                Err(error) => {
                    let _ = ready.send(Err(WorldFailure::Build(error.to_string())));
                    return Ok(());
                }
            }
        }
        None => None,
    };
    let snapshot = world.serve(config.history_max);
    let head = snapshot.read().map(|s| s.head()).unwrap_or_default();
    let (moved, head) = tokio::sync::watch::channel(head);
    let now = Arc::new(AtomicU64::new(world.now().0));
    let epoch_ms = world.epoch_ms();
    if ready.send(Ok((snapshot, head, Arc::clone(&now), epoch_ms))).is_err() {
        return Ok(());
    }
    let mut host: Option<Box<dyn Host>> = None;
    // The clock starts at once, unless the controller is outside: then once its host says the product is ready.
    let mut pacer = (!config.outside_controller).then(|| Pacer::new(Instant::now(), world.now(), config.speed));
    let started = Instant::now();
    let mut until_reported = false;
    let mut context = Context { world: &mut world, judge: &mut judge, moved: &moved };
    loop {
        loop {
            match commands.try_recv() {
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return Ok(()),
                Ok(Command::Write(request, reply)) => context.write(&request, reply)?,
                Ok(Command::Attach(attached, webhooks)) => {
                    context.world.go_remote_admission(webhooks);
                    host = Some(attached);
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        if let Some(host) = &mut host {
            context.world.set_outside_leader(host.leads());
            if pacer.is_none() && host.ready() {
                eprintln!("the product is ready: the story starts");
                pacer = Some(Pacer::new(Instant::now(), context.world.now(), config.speed));
            }
        }
        let world_over = context.judge.as_ref().is_some_and(|judge| judge.over());
        if let Some(pacer) = pacer.as_ref().filter(|_| !world_over) {
            context.run_slice(pacer, config.until)?;
            if let Some(host) = &mut host {
                for action in context.world.take_host_actions() {
                    host.act(action);
                }
            }
            now.store(context.world.now().0, Ordering::Relaxed);
        }
        if let Some(until) = config.until
            && !until_reported
            && context.world.now() >= until
        {
            // Said once on standard error, for the person (or the benchmark) waiting for it.
            let seconds = started.elapsed().as_secs_f64();
            eprintln!("reached --until at {} ms virtual after {seconds:.2} s wall", until.0);
            until_reported = true;
        }
        let due = context.world.next_event_at().filter(|at| config.until.is_none_or(|until| *at <= until));
        let wait = match (&pacer, due) {
            (Some(pacer), Some(at)) if !world_over => pacer.until(Instant::now(), at).min(SLEEP_MAX),
            _ => SLEEP_MAX,
        };
        match commands.recv_timeout(wait) {
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Ok(Command::Write(request, reply)) => context.write(&request, reply)?,
            Ok(Command::Attach(attached, webhooks)) => {
                context.world.go_remote_admission(webhooks);
                host = Some(attached);
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// A judged run's state on the world's thread.
struct Judge {
    /// The run's checker, until the run ends (its end reached, or an invariant stopped it).
    checker: Option<Checker>,
    /// Where the report goes, until it is sent.
    reported: Option<tokio::sync::oneshot::Sender<RunReport>>,
}

impl Judge {
    /// The run ended: its report is sent.
    fn over(&self) -> bool {
        self.checker.is_none()
    }
}

/// What the world's thread works on.
struct Context<'a> {
    world: &'a mut World,
    judge: &'a mut Option<Judge>,
    moved: &'a tokio::sync::watch::Sender<u64>,
}

impl Context<'_> {
    /// Runs the world to where the pacer says it should be (a judged run stops at each time it judges at).
    fn run_slice(&mut self, pacer: &Pacer, until: Option<Millis>) -> Result<(), WorldFailure> {
        let world = &mut *self.world;
        let next = world.next_event_at();
        // At `max` speed: to the next event, or to `--until` once none is left before it.
        let target = pacer.target(Instant::now()).or(next).unwrap_or(until.unwrap_or(world.now()).max(world.now()));
        let mut target = until.map_or(target, |until| target.min(until));
        let checker = self.judge.as_ref().and_then(|judge| judge.checker.as_ref());
        let cut = checker.and_then(|checker| checker.next_cut(world.now()));
        if let Some(cut) = cut {
            target = target.min(cut);
        }
        if !(target > world.now() || next.is_some_and(|next| next <= target)) {
            return Ok(());
        }
        let judge = &mut *self.judge;
        let ran = world.run_observed(target, EVENTS_PER_SLICE_MAX, |world| {
            match judge.as_mut().and_then(|judge| judge.checker.as_mut()) {
                // The checks take what changed through the served sync (`World::take_touched`).
                Some(checker) => checker.observe(world),
                None => {
                    world.served_sync();
                    Ok(())
                }
            }
        });
        let stopped = match ran {
            Err(error) => return Err(WorldFailure::Run { at: world.now(), reason: error.to_string() }),
            Ok(Err(stop)) => Some(stop),
            Ok(Ok(_)) => None,
        };
        world.served_sync();
        self.moved.send_replace(world.api.revision());
        if let Some(checker) = self.judge.as_mut().and_then(|judge| judge.checker.as_mut()) {
            match stopped {
                Some(stop) => checker.stopped(stop),
                // Judged at a cut once every event due by it ran.
                None if cut == Some(world.now()) && world.next_event_at().is_none_or(|at| at > world.now()) => {
                    checker.judge_cut(world, world.now());
                }
                None => {}
            }
            if checker.next_cut(world.now()).is_none() {
                self.finish()?;
            }
        }
        Ok(())
    }

    /// Sends the judged run's report; the world runs no more events (it goes on serving what it reached).
    fn finish(&mut self) -> Result<(), WorldFailure> {
        let Some(judge) = self.judge.as_mut() else { return Ok(()) };
        let (Some(checker), Some(reported)) = (judge.checker.take(), judge.reported.take()) else { return Ok(()) };
        let ended_at = self.world.now();
        let run = checker
            .finish(self.world)
            .map_err(|error| WorldFailure::Run { at: ended_at, reason: error.to_string() })?;
        let _ = reported.send(RunReport { run, stats: self.world.stats().clone(), ended_at });
        Ok(())
    }

    /// Applies one client's write now, answers it, and tells the watches (and the judge: a write may break an
    /// invariant too).
    fn write(
        &mut self,
        request: &WriteRequest,
        reply: tokio::sync::oneshot::Sender<Answer>,
    ) -> Result<(), WorldFailure> {
        let answer = self.world.served_write(request);
        self.moved.send_replace(self.world.api.revision());
        // A client that went away meanwhile needs no answer.
        let _ = reply.send(answer);
        if let Some(checker) = self.judge.as_mut().and_then(|judge| judge.checker.as_mut())
            && let Err(stop) = checker.observe(self.world)
        {
            checker.stopped(stop);
            self.finish()?;
        }
        Ok(())
    }
}
