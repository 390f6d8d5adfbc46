//! The twin served as a Kubernetes API server over HTTPS (issue 39): `gpuclaim twin serve`.
//!
//! The world of a scenario runs on its own thread, paced to the wall clock ([`pacer`], [`world_thread`]). Every
//! change is rendered into the snapshot `gpuclaim_sim::served` keeps, and this crate serves that snapshot: discovery,
//! OpenAPI, GET, LIST and WATCH ([`http`], [`watch_stream`]), over HTTPS with a certificate made for the run and a
//! kubeconfig that trusts it ([`certs`]), to the holders of the tokens it issued ([`auth`]) as RBAC allows them
//! (`gpuclaim_sim::served::rbac`); reviews and TokenRequests are answered here ([`reviews`]). What a request means and what
//! it answers is `gpuclaim_sim::served`'s (no I/O there); this crate only carries it.
//!
//! ```no_run
//! # async fn example(scenario: gpuclaim_scenarios::scenario::Scenario) -> Result<(), gpuclaim_serve::ServeError> {
//! use gpuclaim_serve::{Config, pacer::Speed};
//!
//! let config = Config::new(scenario, "127.0.0.1:0".parse().unwrap(), "kubeconfig".into(), Speed::Times(60.0));
//! gpuclaim_serve::run(config, |ready| println!("serving https://{}", ready.address), std::future::pending()).await
//! # }
//! ```

pub mod auth;
pub mod cert_manager;
pub mod certs;
pub mod endpoints;
pub mod http;
pub mod kubelet;
pub mod outside;
pub mod pacer;
pub mod report;
pub mod respond;
pub mod reviews;
pub mod route;
pub mod shared;
pub mod watch_stream;
pub mod webhook_client;
pub mod world_thread;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpuclaim_scenarios::scenario::Scenario;
use gpuclaim_sim::kernel::Millis;
use gpuclaim_sim::served::store::HISTORY_PER_RESOURCE_MAX;

use gpuclaim_sim::world::DeploymentSpec;
use pacer::Speed;
pub use world_thread::{Judging, RunReport};
use world_thread::{WorldConfig, WorldFailure};

/// What to serve, where.
#[derive(Debug)]
pub struct Config {
    pub scenario: Scenario,
    pub seed: u64,
    pub speed: Speed,
    /// Virtual time to stop running events at; the server goes on serving the state reached.
    pub until: Option<Millis>,
    pub listen: SocketAddr,
    /// Where the kubeconfig for this run is written (atomically, once the port is bound).
    pub kubeconfig_out: PathBuf,
    /// Changes kept per resource for watches to resume from.
    pub history_max: usize,
    /// The GPU controller runs outside the world: its processes, run from the applied Deployment.
    pub outside_controller: bool,
    /// Judge the run by the scenario's expectations; the server stops once the run ends, its report in `report`.
    pub judging: Option<Judging>,
    /// Where a judged run's report is left.
    pub report: Arc<std::sync::Mutex<Option<RunReport>>>,
    /// Answer cert-manager's Issuers and Certificates and inject CAs into webhook configurations
    /// ([`cert_manager`]).
    pub run_cert_manager: bool,
    /// Run the stored Deployments of this binary's controller as processes ([`kubelet`]).
    pub run_controllers: bool,
    /// The binary the replicas run; `None`: this process's own executable.
    pub controller_binary: Option<PathBuf>,
    /// Appended to every replica's arguments (e.g. leader-election timings scaled to the twin's speed).
    pub controller_extra_args: Vec<String>,
    /// Where the replicas' logs (`POD.log`) and files go; `None`: a new temporary directory, said on standard error.
    pub replica_logs: Option<PathBuf>,
    /// The replicas' service-account tokens; `None`: the twin mints one for each pod's service account.
    pub credentials: Option<Arc<dyn kubelet::Credentials>>,
}

impl Config {
    pub fn new(scenario: Scenario, listen: SocketAddr, kubeconfig_out: PathBuf, speed: Speed) -> Config {
        Config {
            scenario,
            seed: 1,
            speed,
            until: None,
            listen,
            kubeconfig_out,
            history_max: HISTORY_PER_RESOURCE_MAX,
            outside_controller: false,
            judging: None,
            report: Arc::default(),
            run_cert_manager: false,
            run_controllers: false,
            controller_binary: None,
            controller_extra_args: Vec::new(),
            replica_logs: None,
            credentials: None,
        }
    }
}

/// A served twin that is up: where it listens, and its kubeconfig.
#[derive(Clone, Debug)]
pub struct Ready {
    pub address: SocketAddr,
    pub kubeconfig: PathBuf,
    /// The replicas' kubelet, when controllers run: their table, [`kubelet::Kubelet::crash`], their logs.
    pub kubelet: Option<kubelet::Kubelet>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    World(#[from] WorldFailure),
    #[error(transparent)]
    Certificates(#[from] certs::CertError),
    #[error("cannot listen on {address}: {source}")]
    Listen { address: SocketAddr, source: std::io::Error },
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig { path: PathBuf, source: std::io::Error },
    #[error("cannot run the controller's replicas: {0}")]
    Replicas(String),
}

/// The address clients are told to use: the bound one, with a wildcard host read as loopback.
fn client_address(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        ip if ip.is_unspecified() => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), bound.port()),
        _ => bound,
    }
}

/// Writes `text` to `path` through a temporary file and a rename, so a reader never sees half of it.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// Kills the replicas when dropped (nothing is left to kill after a clean stop).
struct AbortOnDrop(kubelet::Kubelet);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The configuration's options for the controller's replicas (borrowed: the scenario has moved to the world).
struct ReplicaOptions<'a> {
    binary: Option<&'a PathBuf>,
    extra_args: &'a [String],
    logs: Option<&'a PathBuf>,
    credentials: Option<&'a Arc<dyn kubelet::Credentials>>,
}

/// Starts the kubelet of the controller's replicas: the configured binary (this one by default), logs where asked
/// (a new temporary directory, said once, by default), kubeconfigs trusting the run's CA.
fn start_kubelet(
    config: &ReplicaOptions<'_>,
    shared: &Arc<shared::Shared>,
    ca_pem: &str,
) -> Result<kubelet::Kubelet, ServeError> {
    let binary = match config.binary {
        Some(binary) => binary.clone(),
        None => std::env::current_exe().map_err(|error| ServeError::Replicas(format!("no executable: {error}")))?,
    };
    let logs = match config.logs {
        Some(logs) => logs.clone(),
        None => {
            static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let logs = std::env::temp_dir().join(format!("gpuclaim-replicas-{}-{run}", std::process::id()));
            // Said once, for the person who will want to read them (as `reached --until` is).
            eprintln!("replica logs in {}", logs.display());
            logs
        }
    };
    // The replicas run elsewhere than here: their paths (kubeconfig, certificates) must not be relative.
    let logs =
        std::path::absolute(&logs).map_err(|error| ServeError::Replicas(format!("{}: {error}", logs.display())))?;
    let credentials: Arc<dyn kubelet::Credentials> = match config.credentials {
        Some(credentials) => Arc::clone(credentials),
        None => Arc::clone(&shared.tokens) as Arc<dyn kubelet::Credentials>,
    };
    let kubelet_config = kubelet::KubeletConfig {
        binary,
        extra_args: config.extra_args.to_vec(),
        logs: logs.clone(),
        credentials,
        server: format!("https://{}", shared.address),
        ca_pem: ca_pem.to_owned(),
    };
    kubelet::Kubelet::start(kubelet_config, Arc::clone(shared))
        .map_err(|error| ServeError::Replicas(format!("{}: {error}", logs.display())))
}

/// `duration` of virtual time as wall time at `speed` (at `max`, a hundredth).
fn scaled(duration: Duration, speed: Speed) -> Duration {
    match speed {
        Speed::Times(times) => duration.div_f64(times),
        Speed::Max => duration / 100,
    }
}

/// The chart's leader-election timings (client-go's: lease 15 s, renew deadline 10 s, retry 2 s) scaled to the
/// twin's speed, so a failover takes the virtual time it takes on a cluster while the replicas keep the wall clock.
pub fn leader_election_args(speed: Speed) -> Vec<String> {
    let timings = gpuclaim_adapter::leader::Timings::default();
    [
        ("--leader-elect-lease-duration", timings.lease_duration),
        ("--leader-elect-renew-deadline", timings.renew_deadline),
        ("--leader-elect-retry-period", timings.retry_period),
    ]
    .into_iter()
    .map(|(flag, duration)| format!("{flag}={}ms", scaled(duration, speed).as_millis().max(1)))
    .collect()
}

/// How often the server looks whether the world's thread failed.
const WORLD_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// Serves `config`'s twin until `shutdown` completes (or the world fails); `ready` is called once the port is bound
/// and the kubeconfig written.
pub async fn run(
    config: Config,
    ready: impl FnOnce(&Ready),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let mut world = world_thread::start(WorldConfig {
        scenario: config.scenario,
        seed: config.seed,
        speed: config.speed,
        until: config.until,
        history_max: config.history_max,
        outside_controller: config.outside_controller,
        judging: config.judging.clone(),
    })?;
    let report = world.take_report();
    let listener = gpuclaim_adapter::https::listen(config.listen)
        .map_err(|source| ServeError::Listen { address: config.listen, source })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Listen { address: config.listen, source })?;
    let address = client_address(bound);
    let certificates = certs::issue(&certs::subject_names(bound))?;
    let token = certs::token()?;
    let kubeconfig = certs::kubeconfig(&format!("https://{address}"), &certificates.ca_pem, &token);
    write_atomically(&config.kubeconfig_out, &kubeconfig)
        .map_err(|source| ServeError::Kubeconfig { path: config.kubeconfig_out.clone(), source })?;
    let (stop_watches, stopping) = tokio::sync::watch::channel(false);
    let shared = Arc::new(shared::Shared {
        snapshot: Arc::clone(&world.snapshot),
        head: world.head.clone(),
        now: Arc::clone(&world.now),
        epoch_ms: world.epoch_ms,
        tokens: Arc::new(auth::Tokens::new(&token)),
        authorizer: gpuclaim_sim::served::rbac::Authorizer::new(),
        address: address.to_string(),
        stopping,
        writes: world.writes(),
    });
    let outside = config.outside_controller;
    let cert_manager =
        (config.run_cert_manager || outside).then(|| tokio::spawn(cert_manager::run(Arc::clone(&shared))));
    let mut extra_args = config.controller_extra_args.clone();
    if outside {
        extra_args.extend(leader_election_args(config.speed));
    }
    let kubelet = match config.run_controllers || outside {
        true => {
            let options = ReplicaOptions {
                binary: config.controller_binary.as_ref(),
                extra_args: &extra_args,
                logs: config.replica_logs.as_ref(),
                credentials: config.credentials.as_ref(),
            };
            Some(start_kubelet(&options, &shared, &certificates.ca_pem)?)
        }
        false => None,
    };
    // Whatever ends this function (a panic, its future dropped), no replica outlives it.
    let _replicas = kubelet.clone().map(AbortOnDrop);
    if let (true, Some(kubelet)) = (config.outside_controller, &kubelet) {
        let restart = scaled(Duration::from_millis(DeploymentSpec::default().restart_after.0), config.speed);
        let outage = outside::Outage::default();
        let endpoints = outage.limiting(endpoints::ServiceEndpoints::of(kubelet));
        let host = outside::OutsideHost::new(kubelet.clone(), Arc::clone(&world.snapshot), restart, outage);
        let webhooks = webhook_client::HttpsWebhooks::new(Arc::new(endpoints))
            .map_err(|error| ServeError::Replicas(format!("cannot call the webhooks: {error}")))?;
        world.attach(Box::new(host), Box::new(webhooks));
    }
    ready(&Ready { address, kubeconfig: config.kubeconfig_out.clone(), kubelet: kubelet.clone() });
    let world_failed = async {
        while !world.ended() {
            tokio::time::sleep(WORLD_CHECK_INTERVAL).await;
        }
    };
    let judged = async {
        match report {
            Some(report) if config.judging.is_some() => match report.await {
                Ok(report) => *config.report.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(report),
                Err(_) => std::future::pending().await,
            },
            _ => std::future::pending().await,
        }
    };
    let stop = async {
        tokio::select! {
            () = shutdown => {}
            () = world_failed => {}
            () = judged => {}
        }
        // The replicas stop first, while the server still answers them (a leader releases its Lease).
        if let Some(kubelet) = &kubelet {
            kubelet.stop().await;
        }
        let _ = stop_watches.send(true);
    };
    let limits = gpuclaim_adapter::https::Limits::default();
    gpuclaim_adapter::https::serve(listener, certificates.server, http::router(shared), limits, stop).await;
    if let Some(task) = cert_manager {
        let _ = task.await;
    }
    world.stop()?;
    Ok(())
}
