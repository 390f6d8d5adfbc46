//! Scenarios for gpuclaim's twin: the scenario format and the world it builds ([`scenario`]), checked runs and the
//! CI suite runner ([`check`]: invariants after every event, the scenario's expectations, engine variants, soaks
//! and shrinking; docs/scenarios.md), and importers that turn public GPU-cluster traces into scenarios
//! ([`import`]; docs/import.md). The twin itself (the world and its actors) is `gpuclaim-sim`'s; this crate only
//! builds worlds, drives them and judges what they did. The scenario files live beside it: `suite/` the CI suite,
//! `examples/`, `perf/`.
//!
//! ```
//! use gpuclaim_engine::variant::Variant;
//! use gpuclaim_scenarios::check::run_checked;
//! use gpuclaim_scenarios::scenario::parse_scenario;
//! use gpuclaim_sim::log::EventLog;
//!
//! let scenario = parse_scenario(
//!     "name: one\nduration: 10m\ncluster:\n  \
//!      classes: [{name: h100, resourceName: nvidia.com/H100, mode: Passthrough, maxCount: 8}]\n  \
//!      nodes: [{prefix: gpu-, count: 1, cpu: '64', memory: 256Gi, devices: {nvidia.com/H100: 8}}]\n\
//!      vms:\n- {at: 1s, tenant: t, name: vm, gpus: [{claimTemplate: {class: h100, count: 2}}], cpu: '4', memory: 8Gi}\n\
//!      expect:\n- {says: the VM runs, by: 5m, vm: t/vm, phase: Running}\n",
//! )
//! .unwrap();
//! let run = run_checked(&scenario, Variant::SHIPPED, "shipped", 1, EventLog::new(None)).unwrap();
//! assert!(run.passed(), "{:?}", run.failure());
//! ```

pub mod check;
pub mod import;
pub mod scenario;
