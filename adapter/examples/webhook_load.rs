//! Load on the HTTPS webhook server (https.rs and webhook.rs's router) on loopback, with the example VMI and
//! launcher-pod AdmissionReviews against the example objects, in three phases:
//!
//! 1. steady: `--rate` reviews a second for `--seconds`, open loop (each review is sent at its scheduled time,
//!    and its latency counts from then, so a stall is not hidden by the client waiting), over kept-alive
//!    connections as the API server sends them;
//! 2. burst: `--burst` connections opened at once, one review each;
//! 3. slow clients: `--slow` clients hold connections without a request (half never start their TLS handshake,
//!    half dribble a request header a byte every 500 ms, each reconnecting when closed) while reviews go at
//!    `--rate` over kept-alive connections, plus `--fresh-rate` a second each on a new connection.
//!
//! Client and server share the process and its cores, as they would not in a cluster: the figures include the
//! client's half of TLS. Run it built for release (docs/performance.md records the figures):
//!
//! ```sh
//! cargo run --release -p gpuclaim-adapter --example webhook_load -- --rate 1000 --seconds 60
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use gpuclaim_adapter::https::{self, Limits};
use gpuclaim_adapter::metrics::Metrics;
use gpuclaim_adapter::shared::SharedView;
use gpuclaim_adapter::tls::CertDir;
use gpuclaim_adapter::webhook;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// A review that has not been answered in this long counts as an error.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The chart's webhook timeout: the API server gives up on a review after it (µs).
const WEBHOOK_TIMEOUT_MICROS: u64 = 10_000_000;
/// How often a dribbling client sends the next byte of its header.
const DRIBBLE_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug)]
struct Options {
    rate: u64,
    seconds: u64,
    burst: usize,
    slow: usize,
    slow_seconds: u64,
    fresh_rate: u64,
    /// The server's `Limits::evict_after`, to compare with the default.
    evict_after: Duration,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        rate: 1000,
        seconds: 60,
        burst: 10_000,
        slow: 600,
        slow_seconds: 20,
        fresh_rate: 20,
        evict_after: Limits::default().evict_after,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |value: &str| value.parse::<u64>().map_err(|e| format!("{flag} {value:?}: {e}"));
        match flag.as_str() {
            "--rate" => options.rate = number(&value)?.max(1),
            "--seconds" => options.seconds = number(&value)?,
            "--burst" => options.burst = usize::try_from(number(&value)?).map_err(|e| e.to_string())?,
            "--slow" => options.slow = usize::try_from(number(&value)?).map_err(|e| e.to_string())?,
            "--slow-seconds" => options.slow_seconds = number(&value)?,
            "--fresh-rate" => options.fresh_rate = number(&value)?.max(1),
            "--evict-after-ms" => options.evict_after = Duration::from_millis(number(&value)?),
            _ => {
                return Err(format!(
                    "unknown flag {flag}; expected --rate, --seconds, --burst, --slow, --slow-seconds, --fresh-rate, --evict-after-ms"
                ));
            }
        }
    }
    Ok(options)
}

/// One review to send: where and what.
#[derive(Clone)]
struct Review {
    path: &'static str,
    body: Bytes,
}

/// The server under load and what a client needs to reach it.
struct Target {
    address: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    reviews: Vec<Review>,
}

/// Latencies (µs) and errors of one phase.
struct Tally {
    latencies: std::sync::Mutex<Histogram<u64>>,
    errors: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Tally {
    fn new() -> Arc<Tally> {
        let histogram = Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid bounds");
        Arc::new(Tally {
            latencies: std::sync::Mutex::new(histogram),
            errors: AtomicU64::new(0),
            first_error: std::sync::Mutex::new(None),
        })
    }

    fn record(&self, since: Instant, answer: Result<(), String>) {
        match answer {
            Ok(()) => {
                let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
                self.latencies.lock().unwrap().saturating_record(micros);
            }
            Err(error) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.first_error.lock().unwrap().get_or_insert(error);
            }
        }
    }

    fn report(&self, phase: &str, took: Duration) {
        let latencies = self.latencies.lock().unwrap();
        let ms = |micros: u64| micros as f64 / 1000.0;
        println!(
            "{phase}: {} answered in {:.1} s, {} errors; latency p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, max {:.3} ms",
            latencies.len(),
            took.as_secs_f64(),
            self.errors.load(Ordering::Relaxed),
            ms(latencies.value_at_quantile(0.5)),
            ms(latencies.value_at_quantile(0.99)),
            ms(latencies.value_at_quantile(0.999)),
            ms(latencies.max()),
        );
        let late = latencies.count_between(WEBHOOK_TIMEOUT_MICROS + 1, u64::MAX);
        if late > 0 {
            println!("  answered after the API server's 10 s webhook timeout (a failure for it): {late}");
        }
        if let Some(error) = self.first_error.lock().unwrap().as_ref() {
            println!("  first error: {error}");
        }
    }
}

fn main() {
    let options = match options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("webhook_load: {message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(options));
}

async fn run(options: Options) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let limits = Limits { evict_after: options.evict_after, ..Limits::default() };
    let target = Arc::new(start_server(limits).await);
    println!("server on {} with {limits:?}", target.address);

    if options.seconds > 0 {
        let pool = Pool::new(target.clone());
        let (tally, scheduled) = (Tally::new(), Tally::new());
        let took = steady(&pool, options.rate, Duration::from_secs(options.seconds), &tally, &scheduled).await;
        let label = format!("steady {} reviews/s for {} s, kept-alive connections", options.rate, options.seconds);
        tally.report(&format!("{label}, from sending"), took);
        scheduled.report(&format!("{label}, from the schedule"), took);
        pool.report();
    }
    if options.burst > 0 {
        let tally = Tally::new();
        let took = burst(&target, options.burst, &tally).await;
        tally.report(&format!("burst of {} connections opened at once, one review each", options.burst), took);
    }
    if options.slow > 0 {
        slow_clients(&target, options).await;
    }
}

/// The server as `gpuclaim controller` runs it: default limits, a certificate from a CA made here, the example
/// objects as the view.
async fn start_server(limits: Limits) -> Target {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let dir = std::env::temp_dir().join(format!("gpuclaim-webhook-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    let certificate = CertDir::open(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned();
    let text = std::fs::read_to_string(root.join("examples/objects.yaml")).unwrap();
    let objects =
        gpuclaim_engine::objects::load_objects(&text, gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE).unwrap();
    let router =
        webhook::router(SharedView::new(objects.view), Arc::new(Metrics::new()), webhook::REQUEST_TIMEOUT, None);
    let listener = https::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(https::serve(listener, certificate.server_config(), router, limits, std::future::pending()));

    let review = |file: &str, path: &'static str| Review {
        path,
        body: Bytes::from(std::fs::read(root.join("examples/reviews").join(file)).unwrap()),
    };
    let reviews = vec![review("vmi-trainer.json", "/mutate-vmi"), review("pod-launcher-trainer.json", "/mutate-pod")];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(issuer.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Target { address, tls: tokio_rustls::TlsConnector::from(Arc::new(config)), reviews }
}

impl Target {
    /// A new HTTPS connection, ready for requests.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = TcpStream::connect(self.address).await.map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from("localhost").unwrap();
        let tls = self.tls.connect(name, tcp).await.map_err(|e| format!("TLS handshake: {e}"))?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| format!("HTTP: {e}"))?;
        tokio::spawn(connection);
        Ok(sender)
    }
}

/// Sends `review` and checks that a review came back.
async fn send(sender: &mut SendRequest<Full<Bytes>>, review: &Review) -> Result<(), String> {
    sender.ready().await.map_err(|e| format!("connection: {e}"))?;
    let request = hyper::Request::post(review.path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(review.body.clone()))
        .unwrap();
    let response = sender.send_request(request).await.map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| format!("response body: {e}"))?.to_bytes();
    if status != 200 || !body.starts_with(b"{\"apiVersion\":\"admission.k8s.io/v1\"") {
        return Err(format!("status {status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}

/// Kept-alive connections, reused as the API server's client reuses them; a new one is opened when all are busy.
struct Pool {
    target: Arc<Target>,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    opened: AtomicU64,
    /// Idle connections found closed by the server, and dropped unused.
    closed_idle: AtomicU64,
}

impl Pool {
    fn report(&self) {
        let (opened, closed) = (self.opened.load(Ordering::Relaxed), self.closed_idle.load(Ordering::Relaxed));
        println!("  connections opened: {opened}; idle ones found closed by the server and not used: {closed}");
    }

    fn new(target: Arc<Target>) -> Arc<Pool> {
        Arc::new(Pool {
            target,
            idle: Mutex::new(Vec::new()),
            opened: AtomicU64::new(0),
            closed_idle: AtomicU64::new(0),
        })
    }

    /// Sends on an idle connection, or a new one. A kept-alive connection the server closed while it was idle
    /// (after the header deadline without a request, or to give its slot away) is dropped before anything is sent
    /// on it, as the API server's HTTP client does; only a request that was sent and not answered is an error.
    async fn send(&self, review: &Review) -> Result<(), String> {
        let mut sender = loop {
            let idle = self.idle.lock().await.pop();
            match idle {
                Some(mut sender) => {
                    if sender.ready().await.is_ok() {
                        break sender;
                    }
                    self.closed_idle.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    self.opened.fetch_add(1, Ordering::Relaxed);
                    break self.target.connect().await?;
                }
            }
        };
        send(&mut sender, review).await?;
        self.idle.lock().await.push(sender);
        Ok(())
    }
}

/// `rate` reviews a second for `length`, each on its schedule; returns how long until the last was answered.
/// `tally` counts from when a review was sent, `scheduled` from when it was due: the difference is the client's
/// own lag (tokio's timer has a 1 ms grain, and client and server share the cores).
async fn steady(pool: &Arc<Pool>, rate: u64, length: Duration, tally: &Arc<Tally>, scheduled: &Arc<Tally>) -> Duration {
    let count = rate.saturating_mul(length.as_secs());
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let start = Instant::now();
    let mut sent = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for index in 0..count {
        let at = start + interval * u32::try_from(index).unwrap_or(u32::MAX);
        tokio::time::sleep_until(at).await;
        let review = pool.target.reviews[usize::try_from(index).unwrap_or(0) % pool.target.reviews.len()].clone();
        let (pool, tally, scheduled) = (pool.clone(), tally.clone(), scheduled.clone());
        sent.push(tokio::spawn(async move {
            let sending = Instant::now();
            let answer = tokio::time::timeout(ANSWER_TIMEOUT, pool.send(&review)).await;
            let answer = answer.unwrap_or_else(|_| Err("no answer within 30 s".to_owned()));
            scheduled.record(at, answer.clone());
            tally.record(sending, answer);
        }));
    }
    for task in sent {
        let _ = task.await;
    }
    start.elapsed()
}

/// `count` connections opened at once, each sending one review.
async fn burst(target: &Arc<Target>, count: usize, tally: &Arc<Tally>) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..count)
        .map(|index| {
            let (target, tally) = (target.clone(), tally.clone());
            tokio::spawn(async move {
                let review = &target.reviews[index % target.reviews.len()];
                let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
                    let mut sender = target.connect().await?;
                    send(&mut sender, review).await
                })
                .await;
                tally.record(start, answer.unwrap_or_else(|_| Err("no answer within 30 s".to_owned())));
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    start.elapsed()
}

/// Slow clients hold connections while reviews go over kept-alive connections and over new ones.
async fn slow_clients(target: &Arc<Target>, options: Options) {
    // The kept-alive connections are there before the slow clients come, as the API server's are.
    let pool = Pool::new(target.clone());
    let warm = Tally::new();
    steady(&pool, options.rate, Duration::from_secs(1), &warm, &Tally::new()).await;

    let closed = Arc::new(AtomicU64::new(0));
    let slow: Vec<_> = (0..options.slow)
        .map(|index| tokio::spawn(slow_client(target.clone(), index % 2 == 0, closed.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let length = Duration::from_secs(options.slow_seconds);
    let (kept, kept_scheduled, fresh) = (Tally::new(), Tally::new(), Tally::new());
    let (kept_run, fresh_run) = tokio::join!(
        steady(&pool, options.rate, length, &kept, &kept_scheduled),
        fresh_connections(target, options.fresh_rate, length, &fresh)
    );
    let label = format!("with {} slow clients", options.slow);
    kept.report(&format!("{label}: {} reviews/s on kept-alive connections, from sending", options.rate), kept_run);
    kept_scheduled.report(&format!("{label}: the same, from the schedule"), kept_run);
    fresh.report(&format!("{label}: {} reviews/s each on a new connection", options.fresh_rate), fresh_run);
    println!(
        "  slow clients' connections closed by the server meanwhile (each reconnected): {}",
        closed.load(Ordering::Relaxed)
    );
    pool.report();
    for task in &slow {
        task.abort();
    }
}

/// `rate` reviews a second for `length`, each on a connection of its own.
async fn fresh_connections(target: &Arc<Target>, rate: u64, length: Duration, tally: &Arc<Tally>) -> Duration {
    let count = rate.saturating_mul(length.as_secs());
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let start = Instant::now();
    let mut sent = Vec::new();
    for index in 0..count {
        let at = start + interval * u32::try_from(index).unwrap_or(u32::MAX);
        tokio::time::sleep_until(at).await;
        let (target, tally) = (target.clone(), tally.clone());
        sent.push(tokio::spawn(async move {
            let review = target.reviews[usize::try_from(index).unwrap_or(0) % target.reviews.len()].clone();
            let answer = tokio::time::timeout(ANSWER_TIMEOUT, async {
                let mut sender = target.connect().await?;
                send(&mut sender, &review).await
            })
            .await;
            tally.record(at, answer.unwrap_or_else(|_| Err("no answer within 30 s".to_owned())));
        }));
    }
    for task in sent {
        let _ = task.await;
    }
    start.elapsed()
}

/// One slow client, reconnecting whenever the server closes it: either it never starts its TLS handshake, or it
/// completes it and dribbles a request header a byte every [`DRIBBLE_INTERVAL`].
async fn slow_client(target: Arc<Target>, before_handshake: bool, closed: Arc<AtomicU64>) {
    let header = b"POST /mutate-pod HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\nx-padding: ";
    loop {
        let Ok(mut tcp) = TcpStream::connect(target.address).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if before_handshake {
            // Waits for the server to close it (a read of 0 bytes or an error).
            let mut byte = [0_u8; 1];
            let _ = tokio::io::AsyncReadExt::read(&mut tcp, &mut byte).await;
        } else {
            let name = ServerName::try_from("localhost").unwrap();
            if let Ok(mut tls) = target.tls.connect(name, tcp).await {
                for byte in header.iter().cycle() {
                    if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
                        break;
                    }
                    tokio::time::sleep(DRIBBLE_INTERVAL).await;
                }
            }
        }
        closed.fetch_add(1, Ordering::Relaxed);
    }
}
