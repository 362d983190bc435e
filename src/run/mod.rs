//! Running experiments: specs, the planner (spec → requests, diffed against the cache),
//! the executor (tokio and local inference side by side; limits, retries, progress,
//! Ctrl-C) and the workflow that ties them together ([`workflow::run_experiment`]).

pub mod blind;
pub mod calibration_study;
pub mod decide;
pub mod execute;
mod lane_walk;
pub mod likelihood;
pub mod local_exec;
pub mod model_spec;
mod outcome;
pub mod plan;
pub mod seen_rows;
pub mod served;
pub mod session;
pub mod shard;
pub mod spec;
pub mod study;
pub mod workflow;
