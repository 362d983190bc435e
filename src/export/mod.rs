//! Exports of a cache's results to the tools researchers already use: [`mlflow::export`]
//! sends the report to an MLflow tracking server (one run per model, with params, metrics,
//! dataset inputs and the report files as artifacts). (`cache export --format parquet`, a
//! dump of the cache's tables rather than of the analysis, lives in `analyze::export`.)

pub mod mlflow;
pub mod mlflow_rest;
pub mod mlflow_run;
