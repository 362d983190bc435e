//! Analytics: loads models, datasets, cells and trials into an in-memory DuckDB and runs
//! the report queries of `schema/duckdb/*.sql` (contamination scores, pass rates,
//! membership and classification accuracy, the serialization study, evolution within a
//! family, negative controls). Returns an [`Analysis`]: plain structs for `report`.
//!
//! Architecture Invariant: `analyze` is the only module that touches DuckDB, and it never
//! opens the SQLite cache itself: rows come through the [`Store`] API.
//!
//! Determinism: queries return integers in a fully specified order; every ratio, mean,
//! interval and correlation is computed here in Rust in that order, so the same cache gives
//! byte-identical numbers (DuckDB's parallel floating-point sums need not).

pub mod calibration;
pub mod card;
pub mod card_sections;
pub mod diff;
pub mod dose_response;
pub mod evidence;
pub mod explorer;
pub mod export;
mod load;
pub mod paper;
pub mod provenance;
mod queries;
pub mod stats;
mod summary;
mod view;

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use duckdb::arrow::array::{ArrayRef, BooleanBuilder, UInt32Builder};
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::{Config, Connection, params};

use crate::dataset::catalog::builtin_descriptors;
use crate::probe::{NO_SERIALIZATION, TestId, TestKind};
use crate::store::{CellRow, DatasetRow, ModelRow, OWN_SOURCE, Store, TrialRow};
pub use evidence::Scoring;
pub use stats::Interval;
pub use summary::significance;
use summary::*;
pub use view::*;

/// The SQL files, compiled in (named in errors by their path).
/// A query file of `schema/duckdb/`: (path for error messages, text compiled in).
macro_rules! duckdb_query {
    ($file:literal) => {
        (
            concat!("schema/duckdb/", $file),
            include_str!(concat!("../../schema/duckdb/", $file)),
        )
    };
}

const TABLES_SQL: (&str, &str) = duckdb_query!("tables.sql");
const PREPARE_SQL: (&str, &str) = duckdb_query!("prepare.sql");
const CONTAMINATION_SQL: (&str, &str) = duckdb_query!("contamination.sql");
const GRID_SQL: (&str, &str) = duckdb_query!("grid.sql");
const PASS_RATES_SQL: (&str, &str) = duckdb_query!("pass_rates.sql");
const ACCURACY_SQL: (&str, &str) = duckdb_query!("accuracy.sql");
const SERIALIZATION_SUMMARY_SQL: (&str, &str) = duckdb_query!("serialization_summary.sql");
const SERIALIZATION_CHANGES_SQL: (&str, &str) = duckdb_query!("serialization_changes.sql");
const EVOLUTION_SQL: (&str, &str) = duckdb_query!("evolution.sql");
const NEGATIVE_CONTROLS_SQL: (&str, &str) = duckdb_query!("negative_controls.sql");

/// The default template (SPEC §1), whose cells the scores use.
pub const DEFAULT_SERIALIZATION: &str = "the-is";

/// Model outputs longer than this are cut in the examples (reports stay readable).
const MAX_EXAMPLE_CHARS: usize = 400;

/// Errors of the analytics. DuckDB failures name the query file: the SQL is compiled in,
/// so such a failure is a bug (or DuckDB's library is not the version Cargo.toml expects).
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error(
        "DuckDB failed running {file}: {source} (is libduckdb the version scripts/ci-install-duckdb.sh installs?)"
    )]
    Query {
        file: &'static str,
        #[source]
        source: duckdb::Error,
    },
    #[error("DuckDB failed {doing}: {source}")]
    Duckdb {
        doing: &'static str,
        #[source]
        source: duckdb::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot build the trial explorer: {0}")]
    Explorer(String),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

pub type Result<T, E = AnalyzeError> = std::result::Result<T, E>;

trait Doing<T> {
    fn doing(self, doing: &'static str) -> Result<T>;
    fn in_file(self, file: &'static str) -> Result<T>;
}

impl<T> Doing<T> for duckdb::Result<T> {
    fn doing(self, doing: &'static str) -> Result<T> {
        self.map_err(|source| AnalyzeError::Duckdb { doing, source })
    }
    fn in_file(self, file: &'static str) -> Result<T> {
        self.map_err(|source| AnalyzeError::Query { file, source })
    }
}

/// Settings of one analysis.
#[derive(Debug, Clone)]
pub struct Options {
    /// The template whose cells the scores use (other templates feed the serialization study).
    pub primary_serialization: String,
    /// `paper` (default), `strict` (echo passes and high-chance cells do not count) or
    /// `fdr` (passes with a Benjamini–Hochberg q-value below 0.05 only).
    pub scoring: Scoring,
    /// Trials kept per cell for the report's trial explorer (0: no explorer).
    pub explorer_trials: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            primary_serialization: DEFAULT_SERIALIZATION.to_string(),
            scoring: Scoring::Paper,
            explorer_trials: explorer::DEFAULT_TRIALS_SHOWN,
        }
    }
}

/// One trial's verdict as the analytics need it (no prompt, no expectation, no key): what
/// a bulk load of millions of trials carries.
#[derive(Debug, Clone, Copy)]
pub struct TrialOutcome<'a> {
    pub model: &'a str,
    pub dataset: &'a str,
    pub test: TestId,
    pub serialization: Option<&'a str>,
    pub seed: u64,
    pub trial: u32,
    pub passed: bool,
    pub invalid: bool,
}

impl<'a> From<&'a TrialRow> for TrialOutcome<'a> {
    fn from(t: &'a TrialRow) -> Self {
        TrialOutcome {
            model: &t.model,
            dataset: &t.dataset,
            test: t.test,
            serialization: t.serialization.as_deref(),
            seed: t.seed,
            trial: t.trial,
            passed: t.verdict.passed,
            invalid: t.verdict.invalid,
        }
    }
}

/// An in-memory DuckDB database holding one cache's results.
pub struct Analytics {
    conn: Connection,
    datasets: Vec<DatasetInfo>,
    /// Cell keys of the trials loaded so far, with their ids.
    trial_cells: HashMap<CellKey, u32>,
    /// Training steps of checkpoint models, by model id (for the timeline).
    steps: HashMap<String, u64>,
}

impl std::fmt::Debug for Analytics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analytics").finish_non_exhaustive()
    }
}

impl Analytics {
    /// An empty database with the tables of `tables.sql` and the twelve tests.
    pub fn new() -> Result<Analytics> {
        // Offline, DuckDB's extension autoloading waits seconds on the network before
        // failing; the queries need no extension. External access is off too: the
        // analytics read nothing but what is appended here.
        let config = Config::default()
            .with("autoinstall_known_extensions", "false")
            .and_then(|c| c.with("autoload_known_extensions", "false"))
            .and_then(|c| c.enable_external_access(false))
            .doing("configuring the in-memory database")?;
        let conn =
            Connection::open_in_memory_with_flags(config).doing("opening an in-memory database")?;
        conn.execute_batch(TABLES_SQL.1).in_file(TABLES_SQL.0)?;
        {
            let mut tests = conn.appender("tests").doing("loading tests")?;
            for test in TestId::ALL {
                tests
                    .append_row(params![
                        test.id(),
                        i32::from(test.number()),
                        kind_id(test.kind())
                    ])
                    .doing("loading tests")?;
            }
        }
        let mut analytics = Analytics {
            conn,
            datasets: Vec::new(),
            trial_cells: HashMap::new(),
            steps: HashMap::new(),
        };
        analytics.load_datasets(&[])?;
        Ok(analytics)
    }
}

/// Per-query wall times on stderr when `TABCONTAM_ANALYZE_TIMINGS=1` (benchmarks, tuning).
struct Timings {
    last: Option<std::time::Instant>,
}

impl Timings {
    fn from_env() -> Timings {
        let on = std::env::var("TABCONTAM_ANALYZE_TIMINGS").is_ok_and(|v| v == "1");
        Timings {
            last: on.then(std::time::Instant::now),
        }
    }

    fn lap(&mut self, what: &str) {
        if let Some(last) = self.last {
            eprintln!("  {:>8.1} ms  {what}", last.elapsed().as_secs_f64() * 1e3);
            self.last = Some(std::time::Instant::now());
        }
    }
}

/// A trial's cell: (model, dataset, test, serialization, seed).
type CellKey = (String, String, TestId, String, u64);

/// Loads everything the cache holds and analyzes it, with example outputs of our trials.
pub fn analyze_store(store: &Store, options: &Options) -> Result<Analysis> {
    let mut analytics = Analytics::new()?;
    let models = store.models()?;
    analytics.load_models(&models)?;
    analytics.load_datasets(&store.datasets()?)?;
    let cells = store.cells()?;
    let trials = store.trials()?;
    // Significance (p, Holm, BH q) is computed on the paper's verdicts; the strict and fdr
    // profiles re-decide cells before anything is scored, so every view (scores, heatmaps,
    // calibration) follows them.
    let likelihood = store.likelihood_cells()?;
    let row_order = store.row_order_cells()?;
    let significance = significance(&cells, &likelihood, &row_order);
    let scored = match options.scoring {
        Scoring::Paper => cells.clone(),
        Scoring::Strict => evidence::strict_cells(&cells, &trials),
        Scoring::Fdr => evidence::fdr_cells(&cells, &significance),
    };
    analytics.load_cells(&scored)?;
    analytics.load_trials(trials.iter().map(TrialOutcome::from))?;
    let mut analysis = analytics.analyze(options)?;
    analysis.examples = examples(store, &trials, &analysis)?;
    analysis.significance = significance;
    analysis.evidence = evidence::evidence(&cells, &trials, &store.blind_baselines()?);
    analysis.calibration =
        calibration::calibrate(&models, &scored, &trials, &options.primary_serialization);
    if options.explorer_trials > 0 {
        analysis.explorer =
            explorer::explorer_cells(store, &trials, &analysis, options.explorer_trials)?;
    }
    analysis.explorer_trials = options.explorer_trials;
    analysis.likelihood = likelihood;
    analysis.row_order = row_order;
    analysis.provenance = provenance::provenance(store)?;
    // Only answers that carry a reported version count: a cache of local models or of
    // servers that never say keeps its reports as they were.
    let served = store.served_versions_by_model()?;
    for series in analysis.series.iter_mut() {
        if series.key.source != OWN_SOURCE {
            continue;
        }
        if let Some(versions) = served.get(&series.key.model)
            && versions
                .iter()
                .any(|v| v.model.is_some() || v.fingerprint.is_some())
        {
            series.served = versions.clone();
        }
    }
    Ok(analysis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accuracy_cell(dataset: &str, correct: u64, trials: u64) -> AccuracyCell {
        AccuracyCell {
            key: SeriesKey {
                source: OWN_SOURCE.into(),
                model: "m".into(),
            },
            dataset: dataset.into(),
            test: TestId::Membership.id().into(),
            samples: 1,
            trials,
            correct,
            invalid: 0,
            accuracy: correct as f64 / trials as f64,
            invalid_rate: 0.0,
            interval: stats::wilson(correct, trials),
            p_value: crate::significance::binomial_upper_tail(correct, trials, 0.5),
        }
    }

    /// Issue 21: "is membership accuracy above chance" is one-sided in every table. 30/100
    /// is below chance: scipy.stats.binomtest(30, 100, 0.5, alternative='greater').pvalue =
    /// 0.9999839199923521 (the old two-sided test gave 7.85e-05, "highly significant").
    /// The mean over datasets sits beside a pooled interval, so the pooled share is shown
    /// too: 10/10 and 50/100 have mean 0.75 but pooled 60/110 = 0.5454..., inside its
    /// Wilson interval (0.45244..., 0.63540...) (scripts/reference_stats.py).
    #[test]
    fn membership_p_is_one_sided_and_the_pooled_share_matches_its_interval() {
        let below = accuracy_cell("a", 30, 100);
        let mean = mean_accuracy(&[&below], TestId::Membership);
        let p = mean.p_value.unwrap();
        assert!((p - 0.999_983_919_992_352_1).abs() < 1e-12, "{p}");
        assert!((below.p_value.unwrap() - p).abs() < 1e-15);

        let (small, large) = (accuracy_cell("a", 10, 10), accuracy_cell("b", 50, 100));
        let mean = mean_accuracy(&[&small, &large], TestId::Membership);
        assert_eq!(mean.mean, 0.75);
        assert!((mean.pooled - 60.0 / 110.0).abs() < 1e-15);
        let interval = mean.interval.unwrap();
        assert!(
            (interval.low - 0.452_440_581_880_045_5).abs() < 1e-9,
            "{interval:?}"
        );
        assert!(
            (interval.high - 0.635_400_878_547_394_1).abs() < 1e-9,
            "{interval:?}"
        );
        assert!(interval.low <= mean.pooled && mean.pooled <= interval.high);
    }
}
