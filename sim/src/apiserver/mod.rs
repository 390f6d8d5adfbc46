//! The API server's rules the twin enforces on the engine's writes (DESIGN.md §5, API server).

pub mod gates;
