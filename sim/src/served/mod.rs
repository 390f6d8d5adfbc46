//! The Kubernetes API as the twin serves it, without I/O: what a request to the served twin means and what it
//! answers, decided from the world's state (issue 39; more parts land here). The HTTPS server that carries it is
//! another crate's.
//!
//! The parts: label and field selectors as the API server parses and matches them ([`select`]); the registry of
//! served resources, one row each ([`resources`]); the discovery and OpenAPI documents generated from it
//! ([`discovery`]); the API server's Status bodies for refused requests ([`status`]).

pub mod discovery;
pub mod resources;
pub mod select;
pub mod status;
