//! `gpuclaim controller`: flags in controller-runtime's spirit, checked into the adapter's configuration; JSON logs;
//! runs until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::ArgAction;
use gpuclaim_adapter::leader::Timings;
use gpuclaim_adapter::run::{Config, LeaderElection, Listen};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where the webhooks' HTTPS server listens (`:9443` is every address, IPv6 and IPv4; `[::]:9443` too).
    #[arg(long, value_name = "ADDRESS", default_value = ":9443")]
    pub webhook_bind_address: String,
    /// Where the metrics' HTTPS server listens; `0` serves no metrics.
    #[arg(long, value_name = "ADDRESS", default_value = ":8443")]
    pub metrics_bind_address: String,
    /// Where the plain-HTTP probes (/healthz, /readyz) listen.
    #[arg(long, value_name = "ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Reconcile only while holding the Lease (needed with more than one replica).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = ArgAction::Set)]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "gpuclaim")]
    pub leader_election_id: String,
    /// The Lease's namespace (default: the controller's namespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// client-go's lease duration: how long others wait before taking over an unrenewed lease.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// client-go's renew deadline: how long the leader tries to renew before it stops leading.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// client-go's retry period: how often candidates try and the leader renews.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// How long a stop waits for the webhooks' and metrics' requests in flight before closing their connections.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_drain_timeout: Duration,
    /// Holds tls.crt and tls.key (the cert-manager secret), reloaded when they change.
    #[arg(long, value_name = "DIR", default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: PathBuf,
    /// The controller's namespace: the settings ConfigMap is read from there only.
    #[arg(long, value_name = "NAMESPACE", default_value = gpuclaim_engine::keys::DEFAULT_CONTROLLER_NAMESPACE)]
    pub controller_namespace: String,
    /// The log filter (`info`, `debug`, or tracing directives such as `gpuclaim_adapter=debug,info`).
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log_level: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = configure(&args, std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok()))?;
    init_logs(&args.log_level)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("failed to start tokio")?;
    runtime.block_on(async { gpuclaim_adapter::run::run(config, terminated()).await })?;
    Ok(())
}

/// Checks the flags into a configuration; `identity` is the replica's name (the pod's).
pub fn configure(args: &Args, identity: Option<String>) -> anyhow::Result<Config> {
    let identity = identity.filter(|name| !name.is_empty()).ok_or_else(|| {
        anyhow!("set POD_NAME (or HOSTNAME) to this replica's name: it is the lease holder's identity")
    })?;
    let leader_election = if args.leader_elect {
        let timings = Timings {
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        timings.validate().context("--leader-elect-* durations")?;
        Some(LeaderElection {
            lease_name: args.leader_election_id.clone(),
            lease_namespace: args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| args.controller_namespace.clone()),
            timings,
        })
    } else {
        None
    };
    Ok(Config {
        webhook_address: bind_address("--webhook-bind-address", &args.webhook_bind_address)?,
        metrics_address: match args.metrics_bind_address.as_str() {
            "0" => None,
            address => Some(bind_address("--metrics-bind-address", address)?),
        },
        health_address: bind_address("--health-probe-bind-address", &args.health_probe_bind_address)?,
        cert_dir: args.webhook_cert_dir.clone(),
        controller_namespace: args.controller_namespace.clone(),
        leader_election,
        identity,
        drain: args.shutdown_drain_timeout,
    })
}

/// `HOST:PORT` (`[::]:PORT` for IPv6), or Go's `:PORT` for every address, IPv6 and IPv4.
fn bind_address(flag: &str, value: &str) -> anyhow::Result<Listen> {
    let invalid = || format!("{flag} {value:?}: expected HOST:PORT or :PORT");
    match value.strip_prefix(':') {
        Some(port) => Ok(Listen::All { port: port.parse().with_context(invalid)? }),
        None => Ok(Listen::Address(value.parse().with_context(invalid)?)),
    }
}

/// Go's durations as client-go's flags take them: `500ms`, `15s`, `2m`, `1m30s` (humantime's grammar, which also
/// reads `1h` and spaced forms such as `1m 30s`).
fn parse_duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value).map_err(|error| format!("{value:?}: {error}; expected e.g. 500ms, 15s, 1m30s"))
}

fn init_logs(filter: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| anyhow!("--log-level {filter:?}: {e}"))?;
    tracing_subscriber::fmt().json().with_env_filter(filter).with_current_span(false).with_target(true).init();
    Ok(())
}

/// Completes on SIGTERM (the kubelet stopping the pod) or Ctrl-C.
pub(crate) async fn terminated() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "cannot watch SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn args(flags: &[&str]) -> Args {
        Cli::try_parse_from(std::iter::once("controller").chain(flags.iter().copied())).unwrap().args
    }

    #[test]
    fn the_defaults_are_controller_runtimes() {
        let config = configure(&args(&[]), Some("gpuclaim-0".to_owned())).unwrap();
        assert_eq!(config.webhook_address, Listen::All { port: 9443 });
        assert_eq!(config.metrics_address, Some(Listen::All { port: 8443 }));
        assert_eq!(config.health_address, Listen::All { port: 8081 });
        assert_eq!(config.drain, Duration::from_secs(10));
        assert_eq!(config.cert_dir, PathBuf::from("/tmp/k8s-webhook-server/serving-certs"));
        assert_eq!(config.controller_namespace, "cozy-gpuclaim");
        assert!(config.leader_election.is_none());
    }

    #[test]
    fn leader_election_takes_client_gos_timings_and_the_controller_namespace() {
        let config = configure(&args(&["--leader-elect", "--controller-namespace", "gpu"]), Some("a".into())).unwrap();
        let election = config.leader_election.unwrap();
        assert_eq!(election.timings, Timings::default());
        assert_eq!((election.lease_name.as_str(), election.lease_namespace.as_str()), ("gpuclaim", "gpu"));
        let chart = args(&["--leader-elect=true", "--metrics-bind-address=0", "--leader-elect-retry-period=500ms"]);
        let config = configure(&chart, Some("a".into())).unwrap();
        assert_eq!(config.leader_election.unwrap().timings.retry_period, Duration::from_millis(500));
        assert_eq!(config.metrics_address, None);
        assert!(configure(&args(&["--leader-elect=false"]), Some("a".into())).unwrap().leader_election.is_none());
    }

    #[test]
    fn bad_flags_are_errors_naming_the_flag() {
        let error = configure(&args(&["--webhook-bind-address", "9443"]), Some("a".into())).unwrap_err();
        assert_eq!(error.to_string(), "--webhook-bind-address \"9443\": expected HOST:PORT or :PORT");
        let error = configure(&args(&["--leader-elect", "--leader-elect-renew-deadline=20s"]), Some("a".into()));
        assert_eq!(
            format!("{:#}", error.unwrap_err()),
            "--leader-elect-* durations: the lease duration (15s) must be longer than the renew deadline (20s)"
        );
        let error = configure(&args(&[]), None).unwrap_err();
        assert!(error.to_string().starts_with("set POD_NAME"), "{error}");
        let parsed = Cli::try_parse_from(["controller", "--leader-elect-lease-duration", "15x"]);
        let error = parsed.err().unwrap().to_string();
        assert!(error.contains("\"15x\": unknown time unit \"x\""), "{error}");
        assert!(error.contains("expected e.g. 500ms, 15s, 1m30s"), "{error}");
        let error = configure(&args(&["--health-probe-bind-address", ":http"]), Some("a".into())).unwrap_err();
        assert_eq!(format!("{error}"), "--health-probe-bind-address \":http\": expected HOST:PORT or :PORT");
    }

    #[test]
    fn durations_take_gos_compound_form() {
        let flags = ["--leader-elect", "--leader-elect-lease-duration=1m30s", "--leader-elect-renew-deadline=1m"];
        let timings = configure(&args(&flags), Some("a".into())).unwrap().leader_election.unwrap().timings;
        assert_eq!(
            (timings.lease_duration, timings.renew_deadline),
            (Duration::from_secs(90), Duration::from_secs(60))
        );
        let config = configure(&args(&["--shutdown-drain-timeout=2500ms"]), Some("a".into())).unwrap();
        assert_eq!(config.drain, Duration::from_millis(2500));
    }

    #[test]
    fn addresses_take_every_address_ipv6_or_one() {
        let flags = ["--webhook-bind-address=[::]:9443", "--metrics-bind-address=127.0.0.1:8443"];
        let config = configure(&args(&flags), Some("a".into())).unwrap();
        assert_eq!(config.webhook_address, Listen::Address("[::]:9443".parse().unwrap()));
        assert_eq!(config.metrics_address, Some(Listen::Address("127.0.0.1:8443".parse().unwrap())));
        assert_eq!(config.webhook_address.to_string(), "[::]:9443");
        assert_eq!(Listen::All { port: 8081 }.to_string(), ":8081");
    }
}
