//! A replica's readiness probe, as the kubelet runs it: an HTTP GET whose status 200–399 is a success (or a TCP
//! connection), at most the probe's timeout; and the thresholds that turn answers into ready or not.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::pod::{Probe, ProbeAction};

/// The most of an answer read: its status line is all the probe looks at.
const ANSWER_BYTES_MAX: usize = 1024;

/// Runs one probe against the replica at `address`: whether it succeeded.
pub async fn probe(probe: &Probe, address: IpAddr) -> bool {
    let run = async {
        match &probe.action {
            ProbeAction::Http { path, port, https: false } => http_get(SocketAddr::new(address, *port), path).await,
            ProbeAction::Http { port, https: true, .. } | ProbeAction::TcpSocket { port } => {
                TcpStream::connect(SocketAddr::new(address, *port)).await.is_ok()
            }
            ProbeAction::Unsupported(_) => true,
        }
    };
    tokio::time::timeout(probe.timeout.min(TIMEOUT_MAX), run).await.unwrap_or(false)
}

/// `GET path` over HTTP/1.1 as the kubelet sends it; a status of 200 to 399 is a success.
async fn http_get(address: SocketAddr, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(address).await else { return false };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 256];
    while answer.len() < ANSWER_BYTES_MAX && !answer.contains(&b'\n') {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
        }
    }
    status_code(&answer).is_some_and(|code| (200..400).contains(&code))
}

/// The status code of an HTTP/1.x status line.
fn status_code(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|byte| *byte == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|version| version.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

/// Readiness from the probes' answers: ready after `success_threshold` successes in a row, not ready after
/// `failure_threshold` failures in a row (kubelet's `results` semantics); not ready at the start.
#[derive(Debug)]
pub struct Readiness {
    ready: bool,
    successes: u32,
    failures: u32,
}

impl Readiness {
    pub fn new() -> Readiness {
        Readiness { ready: false, successes: 0, failures: 0 }
    }

    /// Counts one answer; whether the replica is ready now.
    pub fn observe(&mut self, probe: &Probe, succeeded: bool) -> bool {
        if succeeded {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if self.successes >= probe.success_threshold {
                self.ready = true;
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= probe.failure_threshold {
                self.ready = false;
            }
        }
        self.ready
    }
}

impl Default for Readiness {
    fn default() -> Readiness {
        Readiness::new()
    }
}

/// How long an answer may take at most, whatever the probe's timeout: the probe runs every 200 ms.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(success_threshold: u32, failure_threshold: u32) -> Probe {
        let action = ProbeAction::TcpSocket { port: 1 };
        Probe { action, timeout: Duration::from_secs(1), success_threshold, failure_threshold }
    }

    #[test]
    fn readiness_flips_after_the_thresholds_in_a_row() {
        let probe = probe(1, 3);
        let mut readiness = Readiness::new();
        assert!(!readiness.observe(&probe, false));
        assert!(readiness.observe(&probe, true));
        assert!(readiness.observe(&probe, false), "one failure keeps it ready");
        assert!(readiness.observe(&probe, false));
        assert!(!readiness.observe(&probe, false), "the third failure in a row");
        assert!(readiness.observe(&probe, true));
    }

    #[test]
    fn the_status_line_gives_the_code() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"), Some(200));
        assert_eq!(status_code(b"HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(status_code(b"SSH-2.0-OpenSSH\r\n"), None);
    }

    #[tokio::test]
    async fn an_http_probe_reads_the_answer_of_a_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for answer in ["HTTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 500 Internal Server Error\r\n\r\n"] {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 512];
                let read = stream.read(&mut request).await.unwrap();
                assert!(request[..read].starts_with(b"GET /readyz HTTP/1.1\r\n"));
                stream.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        let probe = Probe {
            action: ProbeAction::Http { path: "/readyz".into(), port, https: false },
            timeout: Duration::from_secs(1),
            success_threshold: 1,
            failure_threshold: 1,
        };
        let loopback = IpAddr::from([127, 0, 0, 1]);
        assert!(super::probe(&probe, loopback).await);
        assert!(!super::probe(&probe, loopback).await);
        server.await.unwrap();
    }
}
