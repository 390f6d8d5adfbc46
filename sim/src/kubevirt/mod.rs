//! KubeVirt's timing, with its real constants (each cites the source it was read from).

pub mod migration;
pub mod start;
