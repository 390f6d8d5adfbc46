//! The live-cluster side of gpuclaim: it runs the engine's decisions against a real cluster and owns no decision
//! itself (DESIGN.md §1, STYLE.md "adapter: thin").
//!
//! It owns the I/O the engine must not do: the HTTPS server for the three admission webhooks (each answering with
//! [`gpuclaim_engine::review::answer_review`], the path `gpuclaim review` takes), the serving certificate and its
//! rotation, the metrics with their access checks (TokenReview, SubjectAccessReview), the caches that fill the
//! engine's view, leader election, and the reconciler that writes the engine's actions. [`run::run`] starts them
//! all; docs/adapter.md says what each does and why.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use gpuclaim_adapter::{https, metrics::Metrics, shared::SharedView, tls::CertDir, webhook};
//!
//! let certificate = CertDir::open(std::path::Path::new("/tmp/k8s-webhook-server/serving-certs"))?;
//! let view = SharedView::new(gpuclaim_engine::model::View::default());
//! let router = webhook::router(view, Arc::new(Metrics::new()), webhook::REQUEST_TIMEOUT, None);
//! let listener = https::listen("[::]:9443".parse()?)?;
//! https::serve(listener, certificate.server_config(), router, https::Limits::default(), std::future::pending()).await;
//! # Ok(())
//! # }
//! ```

pub mod access;
pub mod cache;
pub mod health;
pub mod https;
pub mod leader;
pub mod metrics;
pub mod read_through;
pub mod reconciler;
pub mod run;
pub mod scrape;
pub mod shared;
pub mod tls;
pub mod webhook;
pub mod writer;
