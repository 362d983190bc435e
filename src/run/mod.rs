//! Running experiments: specs, the planner (spec → requests, diffed against the cache)
//! and the executor (tokio; limits, retries, progress, Ctrl-C).

pub mod decide;
pub mod execute;
pub mod local_exec;
pub mod plan;
pub mod session;
pub mod spec;
