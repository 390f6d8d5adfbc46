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

use gpuclaim_scenarios::scenario::Scenario;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::log::EventLog;
use gpuclaim_sim::served::store::Snapshot;
use gpuclaim_sim::served::writes::{Answer, WriteRequest};
use gpuclaim_sim::world::World;

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
}

/// What the world's thread is told.
pub enum Command {
    Stop,
    /// A client's write, answered on the channel once applied and rendered.
    Write(Box<WriteRequest>, tokio::sync::oneshot::Sender<Answer>),
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
    let thread = std::thread::Builder::new()
        .name("gpuclaim-twin-world".into())
        .spawn(move || run(config, received, ready))
        .map_err(|error| WorldFailure::Build(format!("cannot start the world's thread: {error}")))?;
    match started.recv() {
        Ok(Ok((snapshot, head, now, epoch_ms))) => {
            Ok(WorldHandle { snapshot, head, now, epoch_ms, commands, thread: Some(thread) })
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
) -> Result<(), WorldFailure> {
    let mut world = match config.scenario.build(config.seed, EventLog::new(None)) {
        Ok(world) => world,
        Err(error) => {
            let _ = ready.send(Err(WorldFailure::Build(error.to_string())));
            return Ok(());
        }
    };
    let snapshot = world.serve(config.history_max);
    let head = snapshot.read().map(|s| s.head()).unwrap_or_default();
    let (moved, head) = tokio::sync::watch::channel(head);
    let now = Arc::new(AtomicU64::new(world.now().0));
    let epoch_ms = world.epoch_ms();
    if ready.send(Ok((snapshot, head, Arc::clone(&now), epoch_ms))).is_err() {
        return Ok(());
    }
    let pacer = Pacer::new(Instant::now(), world.now(), config.speed);
    let started = Instant::now();
    let mut until_reported = false;
    loop {
        loop {
            match commands.try_recv() {
                Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return Ok(()),
                Ok(Command::Write(request, reply)) => write(&mut world, &request, reply, &moved),
                Err(TryRecvError::Empty) => break,
            }
        }
        let next = world.next_event_at();
        // At `max` speed: to the next event, or to `--until` once none is left before it.
        let target =
            pacer.target(Instant::now()).or(next).unwrap_or(config.until.unwrap_or(world.now()).max(world.now()));
        let target = config.until.map_or(target, |until| target.min(until));
        if target > world.now() || next.is_some_and(|next| next <= target) {
            let sync = |world: &mut World| {
                world.served_sync();
                Ok::<(), std::convert::Infallible>(())
            };
            let ran = world.run_observed(target, EVENTS_PER_SLICE_MAX, sync);
            if let Err(error) = ran {
                return Err(WorldFailure::Run { at: world.now(), reason: error.to_string() });
            }
            world.served_sync();
            now.store(world.now().0, Ordering::Relaxed);
            moved.send_replace(world.api.revision());
        }
        if let Some(until) = config.until
            && !until_reported
            && world.now() >= until
        {
            // Said once on standard error, for the person (or the benchmark) waiting for it.
            let seconds = started.elapsed().as_secs_f64();
            eprintln!("reached --until at {} ms virtual after {seconds:.2} s wall", until.0);
            until_reported = true;
        }
        let due = world.next_event_at().filter(|at| config.until.is_none_or(|until| *at <= until));
        let wait = due.map_or(SLEEP_MAX, |at| pacer.until(Instant::now(), at).min(SLEEP_MAX));
        match commands.recv_timeout(wait) {
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Ok(Command::Write(request, reply)) => write(&mut world, &request, reply, &moved),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Applies one client's write now, answers it, and tells the watches.
fn write(
    world: &mut World,
    request: &WriteRequest,
    reply: tokio::sync::oneshot::Sender<Answer>,
    moved: &tokio::sync::watch::Sender<u64>,
) {
    let answer = world.served_write(request);
    moved.send_replace(world.api.revision());
    // A client that went away meanwhile needs no answer.
    let _ = reply.send(answer);
}
