//! tabcontam: detects, tracks and reports LLM contamination with tabular data.
//!
//! The method is Ronval, Dupont & Nijssen's: nine contamination tests, a membership test,
//! 0/1-shot classification, four serialization templates and two decision algorithms.
//! See `ARCHITECTURE.md` for the code map and the invariants each module keeps.

pub mod analyze;
pub mod cli;
pub mod commands;
pub mod dataset;
pub mod decide;
pub mod export;
pub mod exposure;
pub mod infer;
pub mod likelihood;
pub mod llm;
pub mod probe;
pub mod report;
pub mod request;
pub mod run;
pub mod significance;
pub mod store;
pub mod train;
