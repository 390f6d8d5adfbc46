//! `gpuclaim controller`: the caches, the three servers (webhooks, metrics, probes), leader election and the
//! reconciler, started together and stopped together. Every replica serves the webhooks; only the leader reconciles.
//!
//! Each part runs as an essential task (health.rs): one that ends or panics before shutdown makes `/healthz` fail,
//! so the kubelet restarts the replica. Shutdown, in order: the webhook and metrics servers stop accepting and
//! answer the requests in flight (bounded by [`https::Limits::drain`]) while the reconciler finishes its current
//! write; then the Lease is released, so the other replica leads at once; then the rest stops.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuclaim_engine::model::View;
use kube::runtime::events::{Recorder, Reporter};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::access::{Access, VERDICT_TTL};
use crate::cache::Caches;
use crate::health::Tasks;
use crate::leader::{Elector, Leadership, Timings};
use crate::metrics::Metrics;
use crate::reconciler::Reconciler;
use crate::shared::SharedView;
use crate::tls::{CertDir, RELOAD_INTERVAL, TlsError};
use crate::writer::{FIELD_MANAGER, Writer};
use crate::{health, https, scrape, webhook};

/// Where a server listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    /// Every address, IPv6 and IPv4, as Go reads `:PORT`: `[::]` accepting both, or `0.0.0.0` where the kernel has
    /// no IPv6 (booted with `ipv6.disable=1`).
    All { port: u16 },
    /// One address; `[::]:PORT` accepts IPv4 too.
    Address(SocketAddr),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::All { port } => write!(f, ":{port}"),
            Listen::Address(address) => write!(f, "{address}"),
        }
    }
}

/// A validated configuration (the command line's flags, checked).
#[derive(Clone, Debug)]
pub struct Config {
    pub webhook_address: Listen,
    /// `None` serves no metrics.
    pub metrics_address: Option<Listen>,
    pub health_address: Listen,
    /// Holds `tls.crt` and `tls.key` (the webhooks' and the metrics' certificate).
    pub cert_dir: PathBuf,
    pub controller_namespace: String,
    /// `None` reconciles without a lease (a single replica, or a test).
    pub leader_election: Option<LeaderElection>,
    /// This replica's name: the lease holder identity and the events' reporting instance.
    pub identity: String,
    /// How long a stop waits for the servers' requests in flight.
    pub drain: Duration,
}

#[derive(Clone, Debug)]
pub struct LeaderElection {
    pub lease_name: String,
    pub lease_namespace: String,
    pub timings: Timings,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("failed to configure the Kubernetes client (in-cluster or KUBECONFIG): {0}")]
    Client(kube::Error),
    #[error("failed to load the serving certificate: {0}")]
    Certificate(TlsError),
    #[error("failed to listen on {address} ({what}): {source}")]
    Bind { what: &'static str, address: Listen, source: std::io::Error },
}

/// Runs until `shutdown` completes; then drains the servers, stops reconciling, releases the lease and returns.
pub async fn run(config: Config, shutdown: impl std::future::Future<Output = ()>) -> Result<(), RunError> {
    // Only ring is compiled in; naming it keeps TLS from guessing should another provider ever be linked.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default().await.map_err(RunError::Client)?;
    let certificate = CertDir::open(&config.cert_dir).map_err(RunError::Certificate)?;
    let tls = certificate.server_config();
    let (stop, stopped) = watch::channel(false);
    let stopping = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let limits = https::Limits { drain: config.drain, ..https::Limits::default() };

    let tasks = Tasks::new();
    let view = SharedView::new(View::default());
    let metrics = Arc::new(Metrics::new());
    let caches = Caches::new(view.clone());
    let mut background: Vec<_> = caches
        .watches(&client, &config.controller_namespace)
        .into_iter()
        .map(|(name, watch)| tasks.spawn(name, watch))
        .collect();
    background.push(tasks.spawn("the certificate reload", certificate.clone().watch(RELOAD_INTERVAL)));

    let listener = bind("webhooks", config.webhook_address)?;
    let router = webhook::router(view.clone(), metrics.clone(), webhook::REQUEST_TIMEOUT, Some(client.clone()));
    let mut servers =
        vec![tasks.spawn("the webhook server", https::serve(listener, tls.clone(), router, limits, stopping()))];
    if let Some(address) = config.metrics_address {
        let listener = bind("metrics", address)?;
        let router = scrape::router(Arc::new(Access::new(client.clone(), VERDICT_TTL)), metrics.clone());
        servers
            .push(tasks.spawn("the metrics server", https::serve(listener, tls.clone(), router, limits, stopping())));
    }
    let listener = bind("health probes", config.health_address)?;
    let probes = health::router(caches.clone(), tasks.clone());
    background.push(tasks.spawn("the health probe server", async move {
        if let Err(error) = axum::serve(listener, probes).await {
            tracing::error!(%error, "the health probe server stopped");
        }
    }));

    // Without election this replica always leads: the sender is kept until the end, so the reconciler's wait for a
    // change of leadership waits instead of returning at once.
    let (always_leading, unelected) = watch::channel(true);
    let (leading, leadership, election) = match &config.leader_election {
        Some(election) => {
            let elector = Elector::new(
                client.clone(),
                &election.lease_namespace,
                &election.lease_name,
                &config.identity,
                election.timings,
            );
            let (leading, leadership) = (elector.leading(), elector.leadership());
            (leading, leadership, Some(tasks.spawn("the leader election", elector.run(stopping()))))
        }
        None => (unelected, Leadership::unelected(), None),
    };
    background.push(tasks.spawn("the leadership gauge", follow_leadership(leading.clone(), metrics.clone())));

    let reporter = Reporter { controller: FIELD_MANAGER.to_owned(), instance: Some(config.identity.clone()) };
    let writer = Writer::new(client.clone(), view, Recorder::new(client, reporter), metrics.clone(), leadership);
    let reconciler = Reconciler::new(caches, writer, metrics, leading);
    let reconciler = tasks.spawn("the reconciler", reconciler.run(stopping()));
    tracing::info!(
        webhooks = %config.webhook_address,
        health = %config.health_address,
        leader_election = config.leader_election.is_some(),
        "started"
    );

    shutdown.await;
    tracing::info!("stopping: draining the servers");
    tasks.stop();
    let _ = stop.send(true);
    futures::future::join_all(servers.into_iter().chain([reconciler])).await;
    if let Some(election) = election {
        let _ = election.await; // releases the lease, so the other replica takes over at once
    }
    for task in background {
        task.abort();
    }
    drop(always_leading);
    tracing::info!("stopped");
    Ok(())
}

fn bind(what: &'static str, address: Listen) -> Result<TcpListener, RunError> {
    let error = |source| RunError::Bind { what, address, source };
    match address {
        Listen::Address(address) => https::listen(address).map_err(error),
        // A kernel without IPv6 refuses the socket or the address (EAFNOSUPPORT, EADDRNOTAVAIL); a port in use or
        // not allowed would be refused on IPv4 too, and is reported as it is.
        Listen::All { port } => match https::listen(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))) {
            Err(refused) if !matches!(refused.kind(), ErrorKind::AddrInUse | ErrorKind::PermissionDenied) => {
                https::listen(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).map_err(error)
            }
            listened => listened.map_err(error),
        },
    }
}

async fn follow_leadership(mut leading: watch::Receiver<bool>, metrics: Arc<Metrics>) {
    loop {
        metrics.set_leader(*leading.borrow_and_update());
        if leading.changed().await.is_err() {
            return;
        }
    }
}
