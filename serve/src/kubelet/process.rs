//! One replica's process, as the kubelet keeps a container running: started in its own process group with its
//! output appended to its log, probed for readiness every [`PROBE_PERIOD`], restarted when it exits (after a
//! back-off) or when it is crashed on purpose (after the delay asked), and stopped with SIGTERM, the grace period,
//! then SIGKILL. A group is killed whatever ends its supervision (a stop, a drop of the task, a panic), so no
//! process outlives the served twin that started it.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedReceiver;

use super::pod::Probe;
use super::probe::{Readiness, probe};

/// How often readiness is probed (wall clock; the template's `periodSeconds` is not used).
pub const PROBE_PERIOD: Duration = Duration::from_millis(200);

/// The first back-off after a replica exited by itself; it doubles up to [`BACKOFF_MAX`] (the kubelet's 10 s and
/// 5 min, shortened: the twin's runs are minutes long).
pub const BACKOFF_START: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A replica that ran this long before it exited starts again after [`BACKOFF_START`].
pub const BACKOFF_RESET: Duration = Duration::from_secs(60);

/// The variables kept from the server's own environment (the rest is the template's, as in a container).
const INHERITED_ENV: &[&str] = &["PATH", "HOME"];

/// What a replica's supervisor is told.
#[derive(Debug)]
pub enum Control {
    /// SIGKILL now, start again after `restart_after`.
    Crash { restart_after: Duration },
    /// SIGTERM, the grace period, SIGKILL; not started again.
    Stop,
}

/// How to start a replica's process.
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub dir: PathBuf,
    /// Standard output and error are appended to it.
    pub log: PathBuf,
    pub grace: Duration,
    pub probe: Option<Probe>,
    pub address: IpAddr,
    /// Run before each start (the kubeconfig with a fresh token is written there).
    pub before_start: Box<dyn Fn() -> std::io::Result<()> + Send + Sync>,
}

/// A replica's state others read: ready or not, and how often it restarted.
#[derive(Clone, Debug, Default)]
pub struct Health {
    pub ready: Arc<AtomicBool>,
    pub restarts: Arc<AtomicU32>,
}

/// The process groups of the replicas running now: what a dropped kubelet kills.
#[derive(Clone, Debug, Default)]
pub struct Groups(Arc<Mutex<BTreeSet<i32>>>);

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<i32>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// SIGKILL to every group still running.
    pub fn kill_all(&self) {
        for group in std::mem::take(&mut *self.lock()) {
            signal(group, Signal::KILL);
        }
    }

    /// How many groups run now.
    pub fn count(&self) -> usize {
        self.lock().len()
    }
}

fn signal(group: i32, signal: Signal) {
    if let Some(pid) = Pid::from_raw(group) {
        // ESRCH: the group has ended already.
        let _ = kill_process_group(pid, signal);
    }
}

/// A running process group, killed (SIGKILL) when dropped.
struct Group {
    id: i32,
    groups: Groups,
}

impl Group {
    fn new(id: i32, groups: &Groups) -> Group {
        groups.lock().insert(id);
        Group { id, groups: groups.clone() }
    }

    fn signal(&self, signal: Signal) {
        self::signal(self.id, signal);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // What the leader left behind (a script's children) goes with it.
        self.signal(Signal::KILL);
        self.groups.lock().remove(&self.id);
    }
}

/// How one run of the process ended.
enum Ended {
    Exited(std::io::Result<ExitStatus>),
    Crashed { restart_after: Duration },
    Stopped,
}

/// Keeps the replica running until told to stop (or until `control` is dropped: then it is killed).
pub async fn supervise(launch: Launch, health: Health, groups: Groups, mut control: UnboundedReceiver<Control>) {
    let mut backoff = BACKOFF_START;
    loop {
        let started = Instant::now();
        let ended = match start(&launch, &groups) {
            Ok((mut child, group)) => {
                let ended = run(&launch, &health, &mut child, &group, &mut control).await;
                health.ready.store(false, Ordering::Relaxed);
                ended
            }
            Err(error) => {
                tracing::warn!(log = %launch.log.display(), %error, "cannot start a replica");
                Ended::Exited(Err(error))
            }
        };
        let delay = match ended {
            Ended::Stopped => return,
            Ended::Crashed { restart_after } => restart_after,
            Ended::Exited(status) => {
                tracing::info!(log = %launch.log.display(), status = ?status.ok(), "a replica exited");
                if started.elapsed() >= BACKOFF_RESET {
                    backoff = BACKOFF_START;
                }
                let delay = backoff;
                backoff = (backoff * 2).min(BACKOFF_MAX);
                delay
            }
        };
        health.restarts.fetch_add(1, Ordering::Relaxed);
        if stopped_while_waiting(delay, &mut control).await {
            return;
        }
    }
}

/// Starts the process in a group of its own.
fn start(launch: &Launch, groups: &Groups) -> std::io::Result<(Child, Group)> {
    (launch.before_start)()?;
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&launch.log)?;
    let mut command = tokio::process::Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .envs(INHERITED_ENV.iter().filter_map(|name| Some((*name, std::env::var_os(name)?))))
        .envs(launch.env.iter().map(|(name, value)| (name, value)))
        .current_dir(&launch.dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true);
    let child = command.spawn()?;
    let id = child.id().and_then(|id| i32::try_from(id).ok()).ok_or_else(|| std::io::Error::other("no process id"))?;
    Ok((child, Group::new(id, groups)))
}

/// Probes the running process until it exits or is told otherwise.
async fn run(
    launch: &Launch,
    health: &Health,
    child: &mut Child,
    group: &Group,
    control: &mut UnboundedReceiver<Control>,
) -> Ended {
    let mut ticks = tokio::time::interval(PROBE_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut readiness = Readiness::new();
    loop {
        tokio::select! {
            status = child.wait() => return Ended::Exited(status),
            _ = ticks.tick() => {
                let ready = match &launch.probe {
                    Some(spec) => {
                        let succeeded = probe(spec, launch.address).await;
                        readiness.observe(spec, succeeded)
                    }
                    None => true,
                };
                health.ready.store(ready, Ordering::Relaxed);
            }
            command = control.recv() => {
                health.ready.store(false, Ordering::Relaxed);
                return match command {
                    Some(Control::Crash { restart_after }) => {
                        group.signal(Signal::KILL);
                        let _ = child.wait().await;
                        Ended::Crashed { restart_after }
                    }
                    Some(Control::Stop) => {
                        group.signal(Signal::TERM);
                        if tokio::time::timeout(launch.grace, child.wait()).await.is_err() {
                            group.signal(Signal::KILL);
                            let _ = child.wait().await;
                        }
                        Ended::Stopped
                    }
                    None => {
                        group.signal(Signal::KILL);
                        let _ = child.wait().await;
                        Ended::Stopped
                    }
                };
            }
        }
    }
}

/// Waits `delay`; whether a stop came meanwhile (a crash of a replica that is down changes nothing).
async fn stopped_while_waiting(delay: Duration, control: &mut UnboundedReceiver<Control>) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return false,
            command = control.recv() => match command {
                Some(Control::Crash { .. }) => {}
                Some(Control::Stop) | None => return true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(script: &str, grace: Duration) -> Launch {
        let dir = std::env::temp_dir();
        Launch {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".to_owned(), script.to_owned()],
            env: Vec::new(),
            log: dir.join(format!("gpuclaim-process-test-{}.log", std::process::id())),
            dir,
            grace,
            probe: None,
            address: IpAddr::from([127, 0, 0, 1]),
            before_start: Box::new(|| Ok(())),
        }
    }

    async fn until_running(groups: &Groups, count: usize) {
        for _ in 0..100 {
            if groups.count() == count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{} groups run, not {count}", groups.count());
    }

    /// Whether a process of `group` still runs (a zombie runs nothing: whoever adopted it reaps it when it can).
    fn group_alive(group: i32) -> bool {
        let Ok(entries) = std::fs::read_dir("/proc") else { return false };
        entries.filter_map(Result::ok).any(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> =
                stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string()
        })
    }

    async fn until_gone(group: i32) {
        for _ in 0..100 {
            if !group_alive(group) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("group {group} outlived its supervisor");
    }

    #[tokio::test]
    async fn a_stop_waits_the_grace_period_for_a_process_ignoring_sigterm_then_kills_its_group() {
        let groups = Groups::default();
        let health = Health::default();
        let (control, commands) = tokio::sync::mpsc::unbounded_channel();
        let script = "trap '' TERM; sleep 30 & wait";
        let task = tokio::spawn(supervise(
            launch(script, Duration::from_millis(700)),
            health.clone(),
            groups.clone(),
            commands,
        ));
        until_running(&groups, 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(health.ready.load(Ordering::Relaxed), "no probe: ready once running");
        let group = *groups.lock().iter().next().unwrap();
        assert!(group_alive(group));
        let asked = Instant::now();
        control.send(Control::Stop).unwrap();
        task.await.unwrap();
        assert!(asked.elapsed() >= Duration::from_millis(700), "waited {:?}", asked.elapsed());
        assert_eq!(groups.count(), 0);
        until_gone(group).await;
    }

    #[tokio::test]
    async fn a_supervisor_dropped_kills_its_process_group() {
        let groups = Groups::default();
        let (_control, commands) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(supervise(
            launch("sleep 30", Duration::from_secs(30)),
            Health::default(),
            groups.clone(),
            commands,
        ));
        until_running(&groups, 1).await;
        let group = *groups.lock().iter().next().unwrap();
        assert!(group_alive(group));
        task.abort();
        let _ = task.await;
        assert_eq!(groups.count(), 0);
        until_gone(group).await;
    }

    #[tokio::test]
    async fn a_process_that_exits_is_started_again_after_the_back_off() {
        let groups = Groups::default();
        let health = Health::default();
        let (control, commands) = tokio::sync::mpsc::unbounded_channel();
        let task =
            tokio::spawn(supervise(launch("exit 3", Duration::from_secs(1)), health.clone(), groups.clone(), commands));
        tokio::time::sleep(BACKOFF_START + Duration::from_millis(500)).await;
        assert_eq!(health.restarts.load(Ordering::Relaxed), 2, "exited, started after 1 s, exited again");
        control.send(Control::Stop).unwrap();
        task.await.unwrap();
    }
}
