//! The discrete-event twin of Kubernetes + KubeVirt (DESIGN.md §5): virtual time, one event queue, one seeded
//! random stream per actor, an event log whose hash a seed reproduces, and the API server's rules the engine's
//! decisions must pass.
//!
//! So far: the kernel ([`kernel`]), the per-actor random streams ([`rng`]), the event log ([`log`]), the API
//! server's scheduling-gate rules ([`apiserver::gates`]), kube-scheduler's filters and choice ([`scheduler`]), and
//! KubeVirt's timing ([`kubevirt`]: start backoff, the create-retry rate limiter, migration target timeouts), the
//! launcher as KubeVirt renders it ([`launcher`]), and a first [`world`] that carries one VM's start through the
//! whole path (webhooks, gate, GPU controller, scheduler, kubelet, KubeVirt). The actors (API server, scheduler, kubelet, KubeVirt
//! controllers, the GPU controller) come with the rest of the twin.
//!
//! ```
//! use gpuclaim_sim::kernel::{Kernel, Millis};
//!
//! let mut kernel = Kernel::new();
//! kernel.schedule_after(Millis(5_000), "start VM").unwrap();
//! kernel.schedule_after(Millis(1_000), "add node").unwrap();
//! assert_eq!(kernel.take_next(), Some((Millis(1_000), "add node")));
//! assert_eq!(kernel.now(), Millis(1_000));
//! ```

pub mod apiserver;
pub mod gpu_controller;
pub mod import;
pub mod kernel;
pub mod kubevirt;
pub mod launcher;
pub mod log;
pub mod metrics;
pub mod rng;
pub mod scenario;
pub mod scheduler;
pub mod scheduling_queue;
pub mod world;
