//! `gpuclaim controller`: the caches, the three servers (webhooks, metrics, probes), leader election and the
//! reconciler, started together and stopped together. Every replica serves the webhooks; only the leader reconciles.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use gpuclaim_engine::model::View;
use kube::runtime::events::{Recorder, Reporter};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::access::{Access, VERDICT_TTL};
use crate::cache::Caches;
use crate::leader::{Elector, Timings};
use crate::metrics::Metrics;
use crate::reconciler::Reconciler;
use crate::tls::{CertDir, RELOAD_INTERVAL, TlsError};
use crate::writer::{FIELD_MANAGER, Writer};
use crate::{health, https, scrape, webhook};

/// A validated configuration (the command line's flags, checked).
#[derive(Clone, Debug)]
pub struct Config {
    pub webhook_address: SocketAddr,
    /// `None` serves no metrics.
    pub metrics_address: Option<SocketAddr>,
    pub health_address: SocketAddr,
    /// Holds `tls.crt` and `tls.key` (the webhooks' and the metrics' certificate).
    pub cert_dir: PathBuf,
    pub controller_namespace: String,
    /// `None` reconciles without a lease (a single replica, or a test).
    pub leader_election: Option<LeaderElection>,
    /// This replica's name: the lease holder identity and the events' reporting instance.
    pub identity: String,
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
    Bind { what: &'static str, address: SocketAddr, source: std::io::Error },
}

/// Runs until `shutdown` completes; then stops reconciling, releases the lease and returns.
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

    let view = Arc::new(RwLock::new(View::default()));
    let metrics = Arc::new(Metrics::new());
    let caches = Caches::new(view.clone());
    let mut tasks = caches.start(&client, &config.controller_namespace);
    tasks.push(tokio::spawn(certificate.clone().watch(RELOAD_INTERVAL)));

    let listener = bind("webhooks", config.webhook_address).await?;
    let router = webhook::router(view.clone(), metrics.clone(), webhook::REQUEST_TIMEOUT);
    tasks.push(tokio::spawn(https::serve(listener, tls.clone(), router, https::Limits::default(), stopping())));
    if let Some(address) = config.metrics_address {
        let listener = bind("metrics", address).await?;
        let router = scrape::router(Arc::new(Access::new(client.clone(), VERDICT_TTL)), metrics.clone());
        tasks.push(tokio::spawn(https::serve(listener, tls.clone(), router, https::Limits::default(), stopping())));
    }
    let listener = bind("health probes", config.health_address).await?;
    let probes = health::router(caches.clone());
    let probes_stop = stopping();
    tasks.push(tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, probes).with_graceful_shutdown(probes_stop).await {
            tracing::error!(%error, "the health probe server stopped");
        }
    }));

    let (leading, election) = match &config.leader_election {
        Some(election) => {
            let elector = Elector::new(
                client.clone(),
                &election.lease_namespace,
                &election.lease_name,
                &config.identity,
                election.timings,
            );
            let leading = elector.leading();
            (leading, Some(tokio::spawn(elector.run(stopping()))))
        }
        None => (watch::channel(true).1, None),
    };
    tasks.push(tokio::spawn(follow_leadership(leading.clone(), metrics.clone())));

    let reporter = Reporter { controller: FIELD_MANAGER.to_owned(), instance: Some(config.identity.clone()) };
    let writer = Writer::new(client.clone(), view, Recorder::new(client, reporter), metrics.clone());
    let reconciler = tokio::spawn(Reconciler::new(caches, writer, metrics, leading).run(stopping()));
    tracing::info!(
        webhooks = %config.webhook_address,
        health = %config.health_address,
        leader_election = config.leader_election.is_some(),
        "started"
    );

    shutdown.await;
    tracing::info!("stopping");
    let _ = stop.send(true);
    let _ = reconciler.await;
    if let Some(election) = election {
        let _ = election.await; // releases the lease, so the other replica takes over at once
    }
    for task in tasks {
        task.abort();
    }
    Ok(())
}

async fn bind(what: &'static str, address: SocketAddr) -> Result<TcpListener, RunError> {
    TcpListener::bind(address).await.map_err(|source| RunError::Bind { what, address, source })
}

async fn follow_leadership(mut leading: watch::Receiver<bool>, metrics: Arc<Metrics>) {
    loop {
        metrics.set_leader(*leading.borrow_and_update());
        if leading.changed().await.is_err() {
            return;
        }
    }
}
