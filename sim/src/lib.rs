//! The discrete-event twin of Kubernetes + KubeVirt (DESIGN.md §5): virtual time, one event queue, one seeded
//! random stream per actor, an event log whose hash a seed reproduces, and the API server's rules the engine's
//! decisions must pass.
//!
//! The [`world`] owns the loop and runs every actor; each actor lives in one place. The parts: the kernel
//! ([`kernel`]), per-actor random streams ([`rng`]), the event log ([`log`]), who each actor acts as ([`users`]),
//! the API server with its rules, admission chain and watch ([`apiserver`]), kube-scheduler (its filters, queue,
//! state and handlers: [`scheduler`]), KubeVirt (its VM, VMI and migration controllers, virt-handler, launcher,
//! start backoff, evacuation and their state: [`kubevirt`]), the GPU controller's cache and work queue
//! ([`gpu_controller`]), the Kubernetes API as the twin serves it ([`served`]), the world's own actors (kubelets,
//! nodes, the controller's Deployment, tenants, workloads, faults: in [`world`]) and run [`metrics`]. docs/twin.md says
//! what each models and why. Scenario files, checked runs and trace importers are the `gpuclaim-scenarios` crate's.
//!
//! ```
//! use gpuclaim_engine::fixtures;
//! use gpuclaim_sim::kernel::Millis;
//! use gpuclaim_sim::log::EventLog;
//! use gpuclaim_sim::world::{Event, Timing, World, template_vm};
//!
//! let mut world = World::new(1, fixtures::two_node_cluster(), Timing::default(), EventLog::new(None));
//! let vm = template_vm("tenant-a", "train", "h100", 2);
//! world.schedule_at(Millis::seconds(1), Event::CreateVm(vm.into())).unwrap();
//! world.run(Millis::seconds(120), 10_000).unwrap();
//! assert_eq!(world.vm_status("tenant-a", "train"), Some("Running"));
//! assert_eq!(world.vm_starts(), 1);
//! ```

pub mod apiserver;
pub mod gpu_controller;
pub mod kernel;
pub mod kubevirt;
pub mod log;
pub mod metrics;
pub mod rng;
pub mod scheduler;
pub mod served;
pub mod users;
pub mod world;
