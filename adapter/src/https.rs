//! Serving a router over HTTPS (HTTP/1.1 over rustls), with the connection-level bounds a server facing the API
//! server and scrapers needs: a handshake deadline, a header deadline and a cap on open connections, so a client
//! that stalls holds neither a task nor a file descriptor for long.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

/// Connection-level bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A TLS handshake must finish within this.
    pub handshake: Duration,
    /// A request's headers must arrive within this (hyper closes the connection otherwise).
    pub header_read: Duration,
    /// Connections served at once; further ones wait in the listen backlog.
    pub connections_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // The API server calls a webhook with a timeout of at most 30 s and keeps connections alive; a few hundred
        // connections cover both replicas' callers with room for scrapers.
        Limits { handshake: Duration::from_secs(10), header_read: Duration::from_secs(10), connections_max: 512 }
    }
}

/// How long to wait before accepting again after `accept` failed (out of file descriptors, say), so a persistent
/// failure does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes. Connections already open finish on their own.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(Semaphore::new(limits.connections_max));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => return,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "failed to accept a connection");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match tokio::time::timeout(limits.handshake, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
}
