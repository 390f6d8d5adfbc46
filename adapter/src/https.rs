//! Serving a router over HTTPS (HTTP/1.1 over rustls), with the connection-level bounds a server facing the API
//! server and scrapers needs, and a graceful stop.
//!
//! Bounds: a handshake deadline, a header deadline (hyper's, which also closes a keep-alive connection that sends
//! no next request), and a cap on open connections. The cap alone would let a client that is slow on purpose (a
//! TLS handshake or a request header sent a byte at a time, the "slowloris" pattern) hold every slot for up to the
//! handshake and header deadlines, again and again, while the API server's reviews wait in the listen backlog. So a
//! slot is not held on trust: when every slot is taken and a connection waits to be served, the connection that has
//! waited longest for a request of its own (in its handshake, its headers, its body, or idle between requests) is
//! closed to make room, once it has waited [`Limits::evict_after`]. A connection answering a request is never
//! closed this way. A client that completes its handshake and request promptly, as the API server does in
//! milliseconds, is never the one chosen; one that dribbles loses its slot as soon as someone needs it.
//!
//! Stopping: when `shutdown` completes the listener is closed (new connections are refused), each connection
//! finishes the request it is in and closes (hyper-util's graceful shutdown), and after [`Limits::drain`] whatever
//! is still open is closed.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// Connection-level bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A TLS handshake must finish within this.
    pub handshake: Duration,
    /// A request's headers must arrive within this, and so must the next request's on a kept-alive connection
    /// (hyper closes the connection otherwise).
    pub header_read: Duration,
    /// Connections served at once; further ones wait in the listen backlog, or take the slot of one that has
    /// waited at least `evict_after` for a request.
    pub connections_max: usize,
    /// How long a connection may wait for a request of its own before its slot may be given to another that needs
    /// one. Long enough that a burst of honest connections, whose handshakes queue for the CPU, does not close its
    /// own members; short against the handshake and header deadlines, which are what a slow client holds a slot for
    /// otherwise.
    pub evict_after: Duration,
    /// How long a stop waits for open connections to finish the requests they are in.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        // The API server calls a webhook with a timeout of at most 30 s (the chart sets 10) and keeps connections
        // alive; a few hundred connections cover both replicas' callers with room for scrapers. A review is answered
        // in well under a millisecond, so a drain of the request timeout (10 s) lets any review in flight finish.
        Limits {
            handshake: Duration::from_secs(10),
            header_read: Duration::from_secs(10),
            connections_max: 512,
            evict_after: Duration::from_secs(1),
            drain: Duration::from_secs(10),
        }
    }
}

/// How long to wait before accepting again after `accept` failed (out of file descriptors, say), so a persistent
/// failure does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Pending connections the kernel may queue for `accept` (it caps this at `net.core.somaxconn`, 4096 on current
/// kernels): enough for a burst of thousands of connections to wait instead of being dropped.
pub const LISTEN_BACKLOG: i32 = 4096;

/// Listens on `address`. An IPv6 wildcard (`[::]`) also accepts IPv4 (as IPv4-mapped addresses), whatever the
/// host's `net.ipv6.bindv6only` says, so one listener serves dual-stack, IPv4-only and IPv6-only clusters.
pub fn listen(address: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, Some(Protocol::TCP))?;
    if address.is_ipv6() && address.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    // A restarted replica must not wait for its predecessor's connections in TIME_WAIT to bind again.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// Serves `router` on `listener` until `shutdown` completes, then drains (see the module's doc) and returns.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Slots::new(limits);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "failed to accept a connection");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let slot = tokio::select! {
            slot = slots.take() => slot,
            () = &mut shutdown => break,
        };
        let connection = Connection { acceptor: acceptor.clone(), router: router.clone(), limits, peer, slot };
        tokio::spawn(connection.serve(tcp, graceful.watcher()));
    }
    drop(listener);
    let open = graceful.count();
    if tokio::time::timeout(limits.drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(open, drain = ?limits.drain, "connections still open after the drain time are closed");
        slots.close_all();
    }
}

/// One accepted connection and what serving it needs.
struct Connection {
    acceptor: TlsAcceptor,
    router: Router,
    limits: Limits,
    peer: SocketAddr,
    slot: Arc<Slot>,
}

impl Connection {
    /// Serves until the client closes, a deadline passes, its slot is given away, or a stop drains it. `watcher`
    /// is held from the start, so a stop also waits for a connection still in its handshake.
    async fn serve(self, tcp: TcpStream, watcher: Watcher) {
        let Connection { acceptor, router, limits, peer, slot } = self;
        let closed = slot.closed.clone();
        let served = async {
            let stream = match tokio::time::timeout(limits.handshake, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return tracing::debug!(%peer, %error, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = Tracked { router: TowerToHyperService::new(router), slot };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        };
        tokio::select! {
            () = served => {}
            () = closed.notified() => tracing::debug!(%peer, "closed: its slot went to a connection that needed one"),
        }
    }
}

/// The router, telling the connection's slot when a request is being answered (from its body's end to the
/// response) and when the connection waits for its next request.
#[derive(Clone)]
struct Tracked {
    router: TowerToHyperService<Router>,
    slot: Arc<Slot>,
}

impl Service<hyper::Request<Incoming>> for Tracked {
    type Response = <TowerToHyperService<Router> as Service<hyper::Request<axum::body::Body>>>::Response;
    type Error = <TowerToHyperService<Router> as Service<hyper::Request<axum::body::Body>>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let slot = self.slot.clone();
        let request = request.map(|body| axum::body::Body::new(BodyRead { body, slot: Some(slot.clone()) }));
        let answer = self.router.call(request);
        Box::pin(async move {
            let response = answer.await;
            slot.set_waiting(true);
            response
        })
    }
}

/// A request body that marks its connection as answering once the body has been read to its end: until then the
/// client may be the one that is slow.
struct BodyRead {
    body: Incoming,
    /// Taken when the end is reached.
    slot: Option<Arc<Slot>>,
}

impl Body for BodyRead {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        if (frame.is_none() || self.body.is_end_stream())
            && let Some(slot) = self.slot.take()
        {
            slot.set_waiting(false);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection slots, and which connection gives its slot up when all are taken.
struct Slots {
    limits: Limits,
    open: parking_lot::Mutex<Open>,
    /// A slot was given back.
    freed: Notify,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// Connection id → since when it has waited for a request of its own (`None` while it answers one), and the
    /// signal that closes it.
    connections: BTreeMap<u64, (Option<Instant>, Arc<Notify>)>,
}

/// One connection's slot: given back when dropped (the connection's task and its service both hold it).
struct Slot {
    slots: Arc<Slots>,
    id: u64,
    closed: Arc<Notify>,
}

impl Slots {
    fn new(limits: Limits) -> Arc<Slots> {
        Arc::new(Slots { limits, open: parking_lot::Mutex::new(Open::default()), freed: Notify::new() })
    }

    /// A slot for a new connection: a free one, else the slot of the connection that has waited longest for a
    /// request of its own once it has waited `evict_after`, else the first one given back.
    async fn take(self: &Arc<Self>) -> Arc<Slot> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let wait = {
                let mut open = self.open.lock();
                if open.connections.len() < self.limits.connections_max {
                    return self.give(&mut open);
                }
                self.close_longest_waiting(&mut open)
            };
            match wait {
                Some(until) => {
                    tokio::select! {
                        () = &mut freed => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => freed.await,
            }
        }
    }

    fn give(self: &Arc<Self>, open: &mut Open) -> Arc<Slot> {
        let id = open.next_id;
        open.next_id += 1;
        let closed = Arc::new(Notify::new());
        open.connections.insert(id, (Some(Instant::now()), closed.clone()));
        Arc::new(Slot { slots: self.clone(), id, closed })
    }

    /// Closes the connection that has waited longest if it has waited `evict_after` (the slot comes back when its
    /// task ends), or says when it will have: `None` when every connection is answering a request.
    fn close_longest_waiting(&self, open: &mut Open) -> Option<Instant> {
        let (id, since) = open
            .connections
            .iter()
            .filter_map(|(id, (since, _))| since.map(|since| (*id, since)))
            .min_by_key(|(_, since)| *since)?;
        let eligible = since + self.limits.evict_after;
        if Instant::now() < eligible {
            return Some(eligible);
        }
        // Taken out of the running: it is closing, and a second newcomer must not choose it again.
        let (since, closed) = open.connections.get_mut(&id).expect("the id was just found");
        *since = None;
        closed.notify_one();
        Some(Instant::now() + self.limits.evict_after)
    }

    fn close_all(&self) {
        for (_, closed) in self.open.lock().connections.values() {
            closed.notify_one();
        }
    }
}

impl Slot {
    /// Whether the connection now waits for a request of its own (`true`) or answers one (`false`).
    fn set_waiting(&self, waiting: bool) {
        if let Some((since, _)) = self.slots.open.lock().connections.get_mut(&self.id) {
            *since = waiting.then(Instant::now);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.open.lock().connections.remove(&self.id);
        self.slots.freed.notify_one();
    }
}
