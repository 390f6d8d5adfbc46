//! The adapter's tests over real sockets on loopback: HTTPS with a test CA, and fake API servers where a
//! kube-apiserver would be (none can be installed here).

#[path = "../../../tests/support/helm.rs"]
mod helm;
#[path = "../../../tests/support/promtool.rs"]
mod promtool;

mod chart;
mod controller;
mod fake_store;
mod faults;
mod leader;
mod metrics_auth;
mod monitoring;
mod one_loop;
mod read_through;
mod support;
mod webhook_https;
