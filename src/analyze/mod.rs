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
pub mod diff;
pub mod evidence;
pub mod explorer;
pub mod export;
pub mod paper;
pub mod stats;
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
    /// `paper` (default) or `strict` (echo passes and high-chance cells do not count).
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

    /// Loads models (labels, families, release dates and cut-offs).
    pub fn load_models(&mut self, models: &[ModelRow]) -> Result<()> {
        let mut appender = self.conn.appender("models").doing("loading models")?;
        for m in models {
            if let Some(step) = m.step {
                self.steps.insert(m.id.clone(), step);
            }
            appender
                .append_row(params![
                    m.id,
                    m.label,
                    m.family,
                    m.release_date,
                    m.training_cutoff
                ])
                .doing("loading models")?;
        }
        Ok(())
    }

    /// Replaces the dataset table: the built-in descriptors (in the paper's order, with
    /// their release dates), then datasets known only to the cache, by id.
    pub fn load_datasets(&mut self, from_cache: &[DatasetRow]) -> Result<()> {
        let mut infos: Vec<DatasetInfo> = builtin_descriptors()?
            .into_iter()
            .map(|d| DatasetInfo {
                id: d.id,
                name: d.name,
                released: d.released,
            })
            .collect();
        let mut extra: Vec<&DatasetRow> = from_cache
            .iter()
            .filter(|row| !infos.iter().any(|i| i.id == row.id))
            .collect();
        extra.sort_by(|a, b| a.id.cmp(&b.id));
        infos.extend(extra.into_iter().map(|row| DatasetInfo {
            id: row.id.clone(),
            name: row.name.clone(),
            released: None,
        }));
        self.conn
            .execute_batch("DELETE FROM datasets")
            .doing("loading datasets")?;
        self.append_datasets(&infos)?;
        self.datasets = infos;
        Ok(())
    }

    fn append_datasets(&self, infos: &[DatasetInfo]) -> Result<()> {
        let offset = self.datasets_count()?;
        let mut appender = self.conn.appender("datasets").doing("loading datasets")?;
        for (position, d) in infos.iter().enumerate() {
            appender
                .append_row(params![
                    d.id,
                    d.name,
                    d.released,
                    (offset + position) as i32
                ])
                .doing("loading datasets")?;
        }
        Ok(())
    }

    fn datasets_count(&self) -> Result<usize> {
        self.conn
            .query_row("SELECT count(*) FROM datasets", [], |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
            .doing("counting datasets")
    }

    /// Loads cell results, ours and imported.
    pub fn load_cells(&mut self, cells: &[CellRow]) -> Result<()> {
        let mut appender = self.conn.appender("cells").doing("loading cells")?;
        for c in cells {
            appender
                .append_row(params![
                    c.source,
                    c.model,
                    c.dataset,
                    c.test.id(),
                    c.serialization.as_deref().unwrap_or(NO_SERIALIZATION),
                    c.seed,
                    c.result.passed,
                    c.result.trials as i64,
                    c.result.passed_trials as i64,
                    c.result.invalid_trials as i64,
                    c.skipped,
                    c.samples.len().max(1) as i64,
                    if c.samples.is_empty() {
                        i64::from(c.result.passed)
                    } else {
                        c.samples.iter().filter(|s| s.passed).count() as i64
                    },
                ])
                .doing("loading cells")?;
        }
        drop(appender);
        // Datasets seen only in cells (e.g. imported under an unknown id) still get a row.
        let unknown: Vec<String> = {
            let mut stmt = self
                .conn
                .prepare("SELECT DISTINCT dataset FROM cells WHERE dataset NOT IN (SELECT id FROM datasets) ORDER BY dataset")
                .doing("loading cells")?;
            stmt.query_map([], |r| r.get(0))
                .doing("loading cells")?
                .collect::<duckdb::Result<_>>()
                .doing("loading cells")?
        };
        let infos: Vec<DatasetInfo> = unknown
            .into_iter()
            .map(|id| DatasetInfo {
                name: id.clone(),
                id,
                released: None,
            })
            .collect();
        self.append_datasets(&infos)?;
        self.datasets.extend(infos);
        Ok(())
    }

    /// Loads trial verdicts (ours). Takes an iterator so that millions of trials stream
    /// into DuckDB in columnar Arrow batches, without a second copy in memory; each
    /// trial's cell key is interned to an integer (see `tables.sql`).
    pub fn load_trials<'a>(
        &mut self,
        trials: impl IntoIterator<Item = TrialOutcome<'a>>,
    ) -> Result<()> {
        let mut appender = self.conn.appender("trials").doing("loading trials")?;
        let mut batch = TrialBatch::default();
        let mut new_cells: Vec<(u32, TrialOutcome<'a>)> = Vec::new();
        // Trials arrive grouped by cell (the store's key order): most share the previous
        // trial's cell, which skips the hash lookup.
        let mut last: Option<(TrialOutcome<'a>, u32)> = None;
        for t in trials {
            let same_cell = last.as_ref().is_some_and(|(p, _)| {
                p.model == t.model
                    && p.dataset == t.dataset
                    && p.test == t.test
                    && p.serialization == t.serialization
                    && p.seed == t.seed
            });
            let cell_id = match last {
                Some((_, id)) if same_cell => id,
                _ => {
                    let key: CellKey = (
                        t.model.to_string(),
                        t.dataset.to_string(),
                        t.test,
                        t.serialization.unwrap_or(NO_SERIALIZATION).to_string(),
                        t.seed,
                    );
                    let next = self.trial_cells.len() as u32;
                    let id = *self.trial_cells.entry(key).or_insert(next);
                    if id == next {
                        new_cells.push((id, t));
                    }
                    id
                }
            };
            last = Some((t, cell_id));
            batch.cell_id.append_value(cell_id);
            batch.trial.append_value(t.trial);
            batch.passed.append_value(t.passed);
            batch.invalid.append_value(t.invalid);
            batch.len += 1;
            if batch.len == TRIAL_BATCH_ROWS {
                appender
                    .append_record_batch(batch.finish())
                    .doing("loading trials")?;
            }
        }
        if batch.len > 0 {
            appender
                .append_record_batch(batch.finish())
                .doing("loading trials")?;
        }
        appender.flush().doing("loading trials")?;
        drop(appender);
        let mut cells = self.conn.appender("trial_cells").doing("loading trials")?;
        for (id, t) in new_cells {
            cells
                .append_row(params![
                    id,
                    t.model,
                    t.dataset,
                    t.test.id(),
                    t.serialization.unwrap_or(NO_SERIALIZATION),
                    t.seed
                ])
                .doing("loading trials")?;
        }
        Ok(())
    }

    /// Runs every report query.
    pub fn analyze(&self, options: &Options) -> Result<Analysis> {
        let mut timings = Timings::from_env();
        self.conn
            .execute_batch("DELETE FROM settings")
            .doing("setting the primary template")?;
        self.conn
            .execute(
                "INSERT INTO settings VALUES (?)",
                params![options.primary_serialization],
            )
            .doing("setting the primary template")?;
        self.conn
            .execute_batch(PREPARE_SQL.1)
            .in_file(PREPARE_SQL.0)?;
        timings.lap(PREPARE_SQL.0);

        let mut series = self.contamination()?;
        for s in &mut series {
            s.step = self.steps.get(&s.key.model).copied();
        }
        timings.lap(CONTAMINATION_SQL.0);
        let mut accuracy = self.accuracy()?;
        timings.lap(ACCURACY_SQL.0);
        Self::attach_accuracy_means(&mut series, &accuracy);
        rank(&mut series);
        let order: HashMap<SeriesKey, usize> = series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.key.clone(), i))
            .collect();
        accuracy.sort_by_cached_key(|c| order[&c.key]); // stable: keeps test and dataset order

        let mut grid = self.grid()?;
        grid.sort_by_cached_key(|c| order[&c.key]);
        timings.lap(GRID_SQL.0);
        attach_sample_rates(&mut series, &grid);
        let (test_pass_rates, dataset_pass_rates) = self.pass_rates()?;
        timings.lap(PASS_RATES_SQL.0);
        let used: std::collections::HashSet<String> = self.used_datasets()?;
        let serialization = self.serialization_study(&order)?;
        timings.lap("schema/duckdb/serialization_*.sql");
        let evolution = self.evolution(&series)?;
        timings.lap(EVOLUTION_SQL.0);
        let negative_controls = self.negative_controls(&order)?;
        timings.lap(NEGATIVE_CONTROLS_SQL.0);

        let templates = self.templates()?;
        Ok(Analysis {
            primary_serialization: options.primary_serialization.clone(),
            templates,
            tests: TestId::ALL.iter().map(|&t| test_info(t)).collect(),
            datasets: self
                .datasets
                .iter()
                .filter(|d| used.contains(&d.id))
                .cloned()
                .collect(),
            correlations: correlations(&series),
            serialization,
            evolution,
            negative_controls,
            series,
            grid,
            test_pass_rates,
            dataset_pass_rates,
            accuracy,
            examples: Vec::new(),
            significance: Vec::new(),
            scoring: options.scoring,
            scoring_rule: options.scoring.rule(),
            evidence: Vec::new(),
            calibration: None,
            explorer: Vec::new(),
            explorer_trials: options.explorer_trials,
            likelihood: Vec::new(),
        })
    }

    /// The templates with at least one cell, by id.
    fn templates(&self) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT serialization FROM cells WHERE serialization <> ? ORDER BY 1")
            .doing("listing templates")?;
        let rows = stmt
            .query_map([NO_SERIALIZATION], |r| r.get(0))
            .doing("listing templates")?;
        rows.collect::<duckdb::Result<_>>()
            .doing("listing templates")
    }

    fn used_datasets(&self) -> Result<std::collections::HashSet<String>> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT dataset FROM cells")
            .doing("listing datasets")?;
        let rows = stmt.query_map([], |r| r.get(0)).doing("listing datasets")?;
        rows.collect::<duckdb::Result<_>>()
            .doing("listing datasets")
    }

    fn contamination(&self) -> Result<Vec<SeriesScores>> {
        let (file, sql) = CONTAMINATION_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let datasets = r.get::<_, i64>("datasets")? as usize;
                let passed = r.get::<_, i64>("passed")? as usize;
                let knowledge = r.get::<_, i64>("knowledge_passed")? as usize;
                let memorization = r.get::<_, i64>("memorization_passed")? as usize;
                let cells = 9 * datasets;
                let ratio = |n: usize, d: usize| (d > 0).then(|| n as f64 / d as f64);
                Ok(SeriesScores {
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    rank: 0,
                    label: r.get("label")?,
                    family: r.get("family")?,
                    release_date: r.get("release_date")?,
                    training_cutoff: r.get("training_cutoff")?,
                    step: None,
                    serialization: r.get("serialization")?,
                    datasets,
                    passed,
                    cells,
                    contamination: ratio(passed, cells),
                    knowledge: ratio(knowledge, 3 * datasets),
                    memorization: ratio(memorization, 6 * datasets),
                    skipped: r.get::<_, i64>("skipped")? as usize,
                    samples: 1,
                    sample_contamination: None,
                    membership: None,
                    zero_shot: None,
                    one_shot: None,
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn accuracy(&self) -> Result<Vec<AccuracyCell>> {
        let (file, sql) = ACCURACY_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let test: String = r.get("test")?;
                let trials = r.get::<_, i64>("n")? as u64;
                let correct = r.get::<_, i64>("k")? as u64;
                let invalid = r.get::<_, i64>("invalid")? as u64;
                Ok(AccuracyCell {
                    samples: r.get::<_, i64>("samples")? as u64,
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    dataset: r.get("dataset")?,
                    p_value: (test == TestId::Membership.id())
                        .then(|| crate::significance::binomial_upper_tail(correct, trials, 0.5))
                        .flatten(),
                    test,
                    trials,
                    correct,
                    invalid,
                    accuracy: correct as f64 / trials as f64,
                    invalid_rate: invalid as f64 / trials as f64,
                    interval: stats::wilson(correct, trials),
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn attach_accuracy_means(series: &mut [SeriesScores], accuracy: &[AccuracyCell]) {
        let mut by_series: BTreeMap<(&SeriesKey, &str), Vec<&AccuracyCell>> = BTreeMap::new();
        for cell in accuracy {
            by_series
                .entry((&cell.key, cell.test.as_str()))
                .or_default()
                .push(cell);
        }
        for s in series.iter_mut() {
            let mean_of = |test: TestId| {
                by_series
                    .get(&(&s.key, test.id()))
                    .map(|c| mean_accuracy(c, test))
            };
            s.membership = mean_of(TestId::Membership);
            s.zero_shot = mean_of(TestId::Classify0Shot);
            s.one_shot = mean_of(TestId::Classify1Shot);
        }
    }

    fn grid(&self) -> Result<Vec<GridCell>> {
        let (file, sql) = GRID_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                // Columns by position: this query returns one row per cell (hundreds of
                // thousands on large caches).
                let number: i32 = r.get(4)?;
                let test = TestId::ALL[(number.clamp(1, 12) - 1) as usize];
                let serialization: String = r.get(6)?;
                Ok(GridCell {
                    key: SeriesKey {
                        source: r.get(0)?,
                        model: r.get(1)?,
                    },
                    dataset: r.get(2)?,
                    number: test.number(),
                    kind: test.kind(),
                    test: r.get(3)?,
                    serialization: (serialization != NO_SERIALIZATION).then_some(serialization),
                    seed: r.get(7)?,
                    passed: r.get(8)?,
                    skipped: r.get(9)?,
                    samples: r.get::<_, i64>(10)? as u64,
                    samples_passed: r.get::<_, i64>(11)? as u64,
                    detection_rate: 0.0,
                })
                .map(|mut cell: GridCell| {
                    cell.detection_rate = cell.samples_passed as f64 / cell.samples.max(1) as f64;
                    cell
                })
            })
            .in_file(file)?;
        rows.collect::<duckdb::Result<_>>().in_file(file)
    }

    fn pass_rates(&self) -> Result<(Vec<PassRate>, Vec<PassRate>)> {
        let (file, sql) = PASS_RATES_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                let passed = r.get::<_, i64>("passed")? as u64;
                let cells = r.get::<_, i64>("cells")? as u64;
                Ok((
                    r.get::<_, String>("scope")?,
                    PassRate {
                        key: r.get("key")?,
                        passed,
                        cells,
                        rate: (cells > 0).then(|| passed as f64 / cells as f64),
                    },
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let (mut tests, mut datasets) = (Vec::new(), Vec::new());
        for (scope, rate) in rows {
            if scope == "test" {
                tests.push(rate)
            } else {
                datasets.push(rate)
            }
        }
        tests.sort_by_key(|r| TestId::parse(&r.key).map(|t| t.number()));
        let position: HashMap<&str, usize> = self
            .datasets
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.as_str(), i))
            .collect();
        datasets.sort_by_key(|r| position.get(r.key.as_str()).copied().unwrap_or(usize::MAX));
        Ok((tests, datasets))
    }

    fn serialization_study(&self, order: &HashMap<SeriesKey, usize>) -> Result<SerializationStudy> {
        let (file, sql) = SERIALIZATION_SUMMARY_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let mut summaries = stmt
            .query_map([], |r| {
                Ok(SerializationSummary {
                    key: SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    seed: r.get("seed")?,
                    templates: r.get::<_, i64>("templates")? as u64,
                    compared: r.get::<_, i64>("compared")? as u64,
                    changed: r.get::<_, i64>("changed")? as u64,
                })
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        summaries.sort_by_key(|s| order.get(&s.key).copied());

        let (file, sql) = SERIALIZATION_CHANGES_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, u64>("seed")?,
                    r.get::<_, String>("dataset")?,
                    r.get::<_, String>("test")?,
                    r.get::<_, String>("serialization")?,
                    r.get::<_, bool>("passed")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let mut changes: Vec<SerializationChange> = Vec::new();
        for (key, seed, dataset, test, serialization, passed) in rows {
            let same = changes.last().is_some_and(|c| {
                c.key == key && c.seed == seed && c.dataset == dataset && c.test == test
            });
            if !same {
                changes.push(SerializationChange {
                    key,
                    seed,
                    dataset,
                    test,
                    passed_with: Vec::new(),
                    failed_with: Vec::new(),
                });
            }
            let change = changes.last_mut().expect("pushed above");
            if passed {
                change.passed_with.push(serialization)
            } else {
                change.failed_with.push(serialization)
            }
        }
        changes.sort_by_key(|c| order.get(&c.key).copied());
        Ok(SerializationStudy { summaries, changes })
    }

    fn evolution(&self, series: &[SeriesScores]) -> Result<Vec<EvolutionStep>> {
        let (file, sql) = EVOLUTION_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>("family")?,
                    SeriesKey {
                        source: r.get("prev_source")?,
                        model: r.get("prev_model")?,
                    },
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, String>("release_date")?,
                    r.get::<_, Option<String>>("dataset")?,
                    r.get::<_, Option<String>>("test")?,
                    r.get::<_, Option<bool>>("gained")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let score: HashMap<&SeriesKey, Option<f64>> =
            series.iter().map(|s| (&s.key, s.contamination)).collect();
        let mut steps: Vec<EvolutionStep> = Vec::new();
        for (family, from, to, to_release_date, dataset, test, gained) in rows {
            let same = steps
                .last()
                .is_some_and(|s| s.family == family && s.from == from && s.to == to);
            if !same {
                let delta = match (
                    score.get(&to).copied().flatten(),
                    score.get(&from).copied().flatten(),
                ) {
                    (Some(new), Some(old)) => Some(new - old),
                    _ => None,
                };
                steps.push(EvolutionStep {
                    family,
                    from,
                    to,
                    to_release_date,
                    gained: Vec::new(),
                    lost: Vec::new(),
                    delta,
                });
            }
            let step = steps.last_mut().expect("pushed above");
            if let (Some(dataset), Some(test), Some(gained)) = (dataset, test, gained) {
                let cell = CellRef { dataset, test };
                if gained {
                    step.gained.push(cell)
                } else {
                    step.lost.push(cell)
                }
            }
        }
        Ok(steps)
    }

    fn negative_controls(&self, order: &HashMap<SeriesKey, usize>) -> Result<NegativeControls> {
        let (file, sql) = NEGATIVE_CONTROLS_SQL;
        let mut stmt = self.conn.prepare(sql).in_file(file)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    SeriesKey {
                        source: r.get("source")?,
                        model: r.get("model")?,
                    },
                    r.get::<_, String>("training_cutoff")?,
                    r.get::<_, String>("dataset")?,
                    r.get::<_, String>("released")?,
                    r.get::<_, String>("test")?,
                    r.get::<_, bool>("passed")?,
                ))
            })
            .in_file(file)?
            .collect::<duckdb::Result<Vec<_>>>()
            .in_file(file)?;
        let mut controls = NegativeControls::default();
        for (key, training_cutoff, dataset, released, test, passed) in rows {
            let same = controls
                .eligible
                .last()
                .is_some_and(|p| p.key == key && p.dataset == dataset);
            if !same {
                controls.eligible.push(ControlPair {
                    key: key.clone(),
                    training_cutoff,
                    dataset: dataset.clone(),
                    released,
                    cells: 0,
                    passed: 0,
                });
            }
            let pair = controls.eligible.last_mut().expect("pushed above");
            pair.cells += 1;
            if passed {
                pair.passed += 1;
                controls
                    .suspected
                    .push(SuspectedCell { key, dataset, test });
            }
        }
        controls
            .eligible
            .sort_by_key(|p| order.get(&p.key).copied());
        controls
            .suspected
            .sort_by_key(|p| order.get(&p.key).copied());
        Ok(controls)
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

/// Rows per Arrow batch when loading trials.
const TRIAL_BATCH_ROWS: usize = 1 << 17;

/// Columns of the `trials` table being built (see `tables.sql`).
#[derive(Default)]
struct TrialBatch {
    cell_id: UInt32Builder,
    trial: UInt32Builder,
    passed: BooleanBuilder,
    invalid: BooleanBuilder,
    len: usize,
}

impl TrialBatch {
    /// The rows pushed so far as a record batch; the builders start over.
    fn finish(&mut self) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("cell_id", DataType::UInt32, false),
            Field::new("trial", DataType::UInt32, false),
            Field::new("passed", DataType::Boolean, false),
            Field::new("invalid", DataType::Boolean, false),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.cell_id.finish()),
            Arc::new(self.trial.finish()),
            Arc::new(self.passed.finish()),
            Arc::new(self.invalid.finish()),
        ];
        self.len = 0;
        RecordBatch::try_new(Arc::new(schema), columns).expect("columns match the schema")
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
    // The strict profile re-decides cells before anything is scored, so every view
    // (scores, heatmaps, calibration) follows it.
    let scored = match options.scoring {
        Scoring::Paper => cells.clone(),
        Scoring::Strict => evidence::strict_cells(&cells, &trials),
    };
    analytics.load_cells(&scored)?;
    analytics.load_trials(trials.iter().map(TrialOutcome::from))?;
    let mut analysis = analytics.analyze(options)?;
    analysis.examples = examples(store, &trials, &analysis)?;
    analysis.significance = significance(&cells);
    analysis.evidence = evidence::evidence(&cells, &trials);
    analysis.calibration =
        calibration::calibrate(&models, &scored, &trials, &options.primary_serialization);
    if options.explorer_trials > 0 {
        analysis.explorer =
            explorer::explorer_cells(store, &trials, &analysis, options.explorer_trials)?;
    }
    analysis.explorer_trials = options.explorer_trials;
    analysis.likelihood = store.likelihood_cells()?;
    Ok(analysis)
}

/// Our cells that have a chance level, with exact binomial p-values and Holm's adjustment
/// across each model's cells (plain Rust: a model has a few thousand cells at most).
pub fn significance(cells: &[CellRow]) -> Vec<SignificanceCell> {
    let mut rows: Vec<SignificanceCell> = cells
        .iter()
        .filter(|c| c.source == crate::store::OWN_SOURCE)
        .filter_map(|c| {
            let p_value = c.result.p_value()?;
            Some(SignificanceCell {
                model: c.model.clone(),
                dataset: c.dataset.clone(),
                test: c.test.id().to_string(),
                number: c.test.number(),
                family: c.test.family(),
                serialization: c.serialization.clone(),
                seed: c.seed,
                passed: c.result.passed,
                score: c.result.score,
                trials: c.result.trials as u64,
                passed_trials: c.result.passed_trials as u64,
                chance: c.result.trial_chance?,
                p_value,
                p_holm: p_value,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.model, &a.dataset, a.number, &a.serialization, a.seed).cmp(&(
            &b.model,
            &b.dataset,
            b.number,
            &b.serialization,
            b.seed,
        ))
    });
    let mut start = 0;
    while start < rows.len() {
        let end = start
            + rows[start..]
                .iter()
                .take_while(|r| r.model == rows[start].model)
                .count();
        let p: Vec<f64> = rows[start..end].iter().map(|r| r.p_value).collect();
        for (row, adjusted) in rows[start..end]
            .iter_mut()
            .zip(crate::significance::holm(&p))
        {
            row.p_holm = adjusted;
        }
        start = end;
    }
    rows
}

/// Per series of ours and test, one trial's output: the first passed trial (by dataset
/// order, primary template first, seed, trial), else the first trial.
fn examples(store: &Store, trials: &[TrialRow], analysis: &Analysis) -> Result<Vec<Example>> {
    let position: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let primary = analysis.primary_serialization.as_str();
    // Smaller is preferred: passed first, then dataset order, primary template, seed, trial.
    let preference = |t: &TrialRow| {
        let serialization = t.serialization.as_deref().unwrap_or("");
        (
            !t.verdict.passed,
            position
                .get(t.dataset.as_str())
                .copied()
                .unwrap_or(usize::MAX),
            t.dataset.clone(),
            !(t.serialization.is_none() || serialization == primary),
            serialization.to_string(),
            t.seed,
            t.trial,
        )
    };
    let mut chosen: HashMap<(&str, TestId), &TrialRow> = HashMap::new();
    for t in trials {
        chosen
            .entry((t.model.as_str(), t.test))
            .and_modify(|best| {
                if preference(t) < preference(best) {
                    *best = t;
                }
            })
            .or_insert(t);
    }
    let keys: Vec<_> = chosen.values().map(|t| t.request_key).collect();
    let outputs = store.responses(&keys)?;
    let series_order: HashMap<&str, usize> = analysis
        .series
        .iter()
        .filter(|s| s.key.source == OWN_SOURCE)
        .map(|s| (s.key.model.as_str(), s.rank))
        .collect();
    let mut examples: Vec<(usize, String, u8, Example)> = chosen
        .into_iter()
        .filter_map(|((model, test), t)| {
            let output = outputs.get(&t.request_key)?;
            let example = Example {
                key: SeriesKey {
                    source: OWN_SOURCE.to_string(),
                    model: model.to_string(),
                },
                test: test.id().to_string(),
                dataset: t.dataset.clone(),
                serialization: t.serialization.clone(),
                trial: t.trial,
                passed: t.verdict.passed,
                output: cut(&output.text, MAX_EXAMPLE_CHARS),
            };
            Some((
                series_order.get(model).copied().unwrap_or(usize::MAX),
                model.to_string(),
                test.number(),
                example,
            ))
        })
        .collect();
    examples.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    Ok(examples.into_iter().map(|(_, _, _, e)| e).collect())
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Table 2's order: contamination (descending; series without a score last), then the
/// earlier release (the paper lists Llama 3 before Llama 3.1 and Mistral before Gemma 2 at
/// equal scores), then label and source.
fn rank(series: &mut [SeriesScores]) {
    use std::cmp::Ordering;
    // Present values first; `None` last.
    fn present_first<T>(
        a: &Option<T>,
        b: &Option<T>,
        cmp: impl Fn(&T, &T) -> Ordering,
    ) -> Ordering {
        match (a, b) {
            (Some(x), Some(y)) => cmp(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
    }
    series.sort_by(|a, b| {
        // Fractions compared exactly (cross-multiplied), descending.
        let score = |s: &SeriesScores| s.contamination.map(|_| (s.passed as u128, s.cells as u128));
        present_first(&score(a), &score(b), |x, y| (y.0 * x.1).cmp(&(x.0 * y.1)))
            .then_with(|| present_first(&a.release_date, &b.release_date, |x, y| x.cmp(y)))
            .then_with(|| a.label.cmp(&b.label))
            .then_with(|| a.key.cmp(&b.key))
    });
    for (i, s) in series.iter_mut().enumerate() {
        s.rank = i + 1;
    }
}

/// Per series: the most samples of any scored cell of tests 1–9, and (with several
/// samples) the per-sample contamination: the mean over the 9 × datasets cells of the
/// fraction of samples that pass (missing and skipped cells count 0) — what one sample
/// alone would score. Summed in grid order, so the value is the same on every run.
fn attach_sample_rates(series: &mut [SeriesScores], grid: &[GridCell]) {
    let mut by_series: HashMap<&SeriesKey, (u64, f64)> = HashMap::new();
    for cell in grid {
        let entry = by_series.entry(&cell.key).or_insert((1, 0.0));
        entry.0 = entry.0.max(cell.samples);
        entry.1 += cell.samples_passed as f64 / cell.samples.max(1) as f64;
    }
    for s in series.iter_mut() {
        if let Some(&(samples, rate_sum)) = by_series.get(&s.key) {
            s.samples = samples;
            if samples > 1 && s.cells > 0 {
                s.sample_contamination = Some(rate_sum / s.cells as f64);
            }
        }
    }
}

fn mean_accuracy(cells: &[&AccuracyCell], test: TestId) -> MeanAccuracy {
    let datasets = cells.len();
    let mean = cells.iter().map(|c| c.accuracy).sum::<f64>() / datasets as f64;
    let trials: u64 = cells.iter().map(|c| c.trials).sum();
    let correct: u64 = cells.iter().map(|c| c.correct).sum();
    let invalid: u64 = cells.iter().map(|c| c.invalid).sum();
    MeanAccuracy {
        mean,
        datasets,
        pooled: if trials == 0 {
            0.0
        } else {
            correct as f64 / trials as f64
        },
        trials,
        correct,
        invalid,
        invalid_rate: if trials == 0 {
            0.0
        } else {
            invalid as f64 / trials as f64
        },
        interval: stats::wilson(correct, trials),
        p_value: if test == TestId::Membership {
            crate::significance::binomial_upper_tail(correct, trials, 0.5)
        } else {
            None
        },
    }
}

fn correlations(series: &[SeriesScores]) -> Vec<Correlation> {
    type Getter = fn(&SeriesScores) -> Option<&MeanAccuracy>;
    let against: [(&str, Getter); 3] = [
        ("zero_shot", |s| s.zero_shot.as_ref()),
        ("one_shot", |s| s.one_shot.as_ref()),
        ("membership", |s| s.membership.as_ref()),
    ];
    against
        .into_iter()
        .map(|(name, get)| {
            let pairs: Vec<(f64, f64)> = series
                .iter()
                .filter_map(|s| Some((s.contamination?, get(s)?.mean)))
                .collect();
            Correlation {
                against: name.to_string(),
                n: pairs.len(),
                pearson: stats::pearson(&pairs),
                spearman: stats::spearman(&pairs),
            }
        })
        .collect()
}

fn kind_id(kind: TestKind) -> &'static str {
    match kind {
        TestKind::Knowledge => "knowledge",
        TestKind::Memorization => "memorization",
        TestKind::Classification => "classification",
    }
}

fn test_info(test: TestId) -> TestInfo {
    let name = match test {
        TestId::FeatureListInformed => "Feature list (inf.)",
        TestId::FeatureListUninformed => "Feature list (uninf.)",
        TestId::RecognitionFeatures => "Recognition (feat.)",
        TestId::RecognitionExamples => "Recognition (ex.)",
        TestId::FeatureValuesInformed => "Feature values (inf.)",
        TestId::FeatureValuesUninformed => "Feature values (uninf.)",
        TestId::IncompleteCompletion => "Incomplete completion",
        TestId::FullCompletion => "Full completion",
        TestId::FeatureCompletion => "Feature completion",
        TestId::Membership => "Membership",
        TestId::Classify0Shot => "0-shot classification",
        TestId::Classify1Shot => "1-shot classification",
        TestId::Header => "Header (verbatim)",
        TestId::RowCompletion => "Row completion (verbatim)",
        TestId::FeatureCompletionVerbatim => "Feature completion (verbatim)",
        TestId::FirstToken => "First token (verbatim)",
    };
    TestInfo {
        id: test.id().to_string(),
        number: test.number(),
        kind: test.kind(),
        name: name.to_string(),
    }
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
