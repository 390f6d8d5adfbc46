//! The twin served as a Kubernetes API server over HTTPS (issue 39): `gpuclaim twin serve`.
//!
//! The world of a scenario runs on its own thread, paced to the wall clock ([`pacer`], [`world_thread`]). Every
//! change is rendered into the snapshot `gpuclaim_sim::served` keeps, and this crate serves that snapshot: discovery,
//! OpenAPI, GET, LIST and WATCH ([`http`], [`watch_stream`]), over HTTPS with a certificate made for the run and a
//! kubeconfig that trusts it ([`certs`]), to the holder of the run's token ([`auth`]). What a request means and what
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
pub mod certs;
pub mod http;
pub mod pacer;
pub mod respond;
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

use pacer::Speed;
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
}

impl Config {
    pub fn new(scenario: Scenario, listen: SocketAddr, kubeconfig_out: PathBuf, speed: Speed) -> Config {
        Config { scenario, seed: 1, speed, until: None, listen, kubeconfig_out, history_max: HISTORY_PER_RESOURCE_MAX }
    }
}

/// A served twin that is up: where it listens, and its kubeconfig.
#[derive(Clone, Debug)]
pub struct Ready {
    pub address: SocketAddr,
    pub kubeconfig: PathBuf,
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

/// How often the server looks whether the world's thread failed.
const WORLD_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// Serves `config`'s twin until `shutdown` completes (or the world fails); `ready` is called once the port is bound
/// and the kubeconfig written.
pub async fn run(
    config: Config,
    ready: impl FnOnce(&Ready),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let world = world_thread::start(WorldConfig {
        scenario: config.scenario,
        seed: config.seed,
        speed: config.speed,
        until: config.until,
        history_max: config.history_max,
    })?;
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
        token,
        address: address.to_string(),
        stopping,
        writes: world.writes(),
    });
    ready(&Ready { address, kubeconfig: config.kubeconfig_out.clone() });
    let world_failed = async {
        while !world.ended() {
            tokio::time::sleep(WORLD_CHECK_INTERVAL).await;
        }
    };
    let stop = async {
        tokio::select! {
            () = shutdown => {}
            () = world_failed => {}
        }
        let _ = stop_watches.send(true);
    };
    let limits = gpuclaim_adapter::https::Limits::default();
    gpuclaim_adapter::https::serve(listener, certificates.server, http::router(shared), limits, stop).await;
    world.stop()?;
    Ok(())
}
