//! The discrete-event twin of Kubernetes + KubeVirt (DESIGN.md §5): virtual time, one event queue, one seeded
//! random stream per actor, an event log whose hash a seed reproduces, and the API server's rules the engine's
//! decisions must pass.
//!
//! The parts: the kernel ([`kernel`]), per-actor random streams ([`rng`]), the event log ([`log`]), the API server
//! with its rules, admission chain and watch ([`apiserver`]), kube-scheduler (its filters, queue, state and
//! handlers: [`scheduler`]), KubeVirt's constants ([`kubevirt`]) and launcher ([`launcher`]), the GPU controller's
//! cache and work queue ([`gpu_controller`]), the [`world`] that runs every actor (KubeVirt's controllers,
//! migrations and drains, nodes, the controller's Deployment, faults) and run [`metrics`]. docs/twin.md says what
//! each models and why. Scenario files, checked runs and trace importers are the `gpuclaim-scenarios` crate's.
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
pub mod kernel;
pub mod kubevirt;
pub mod launcher;
pub mod log;
pub mod metrics;
pub mod rng;
pub mod scheduler;
pub mod users;
pub mod world;
