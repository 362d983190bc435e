//! Trial verdicts and cell results: the current outcome of every (model, dataset, test,
//! serialization, seed) cell, each tagged with the run that decided it.
//!
//! A cell's stored trials and samples are exactly those of its latest decision: writing a
//! cell replaces all of its earlier rows, so a cell decided again with fewer trials (fewer
//! samples, a changed data file or prompt pack) leaves no stale trial behind to be counted
//! in accuracies, intervals or exports.

use std::collections::{HashMap, HashSet};

use rusqlite::Row;
use serde::Serialize;

use super::error::{AtPath, Result};
use super::runs::{RunId, serialize_key};
use super::{Store, enum_column, json_column};
use crate::probe::chance::Chance;
use crate::probe::{CellResult, Expected, NO_SERIALIZATION, TestId, TrialVerdict};
use crate::request::RequestKey;

/// The `source` of cells decided by tabcontam itself (imported results name their own).
pub const OWN_SOURCE: &str = "tabcontam";

/// One trial's current verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialRow {
    /// The spec's model id.
    pub model: String,
    pub dataset: String,
    pub test: TestId,
    /// Template id; `None` for tests whose prompts contain no serialized rows.
    pub serialization: Option<String>,
    pub seed: u64,
    /// Sample index (0 without repeated sampling).
    pub sample: u32,
    /// The prompt's trial index within the cell (the same for every sample).
    pub trial: u32,
    #[serde(serialize_with = "serialize_key")]
    pub request_key: RequestKey,
    /// What the trial probes, e.g. the feature of tests 5–6.
    pub note: Option<String>,
    pub expected: Expected,
    #[serde(flatten)]
    pub verdict: TrialVerdict,
    /// A pass whose evidence was already printed in its own prompt (SPEC §8 echo guard).
    pub echo: bool,
    /// The run that decided it; set by the store, ignored by [`Store::put_trials`].
    pub run_id: Option<RunId>,
}

impl TrialRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<TrialRow> {
        Ok(TrialRow {
            model: row.get("model")?,
            dataset: row.get("dataset")?,
            test: enum_column(row, "test")?,
            serialization: serialization_from_sql(row.get("serialization")?),
            seed: row.get::<_, i64>("seed")? as u64,
            sample: row.get("sample")?,
            trial: row.get("trial")?,
            request_key: RequestKey(row.get("request_key")?),
            note: row.get("note")?,
            expected: json_column(row, "expected")?,
            verdict: TrialVerdict {
                passed: row.get("passed")?,
                invalid: row.get("invalid")?,
            },
            echo: row.get("echo")?,
            run_id: Some(RunId(row.get("run_id")?)),
        })
    }
}

/// One cell's result: ours (`source` = [`OWN_SOURCE`]) or imported (e.g. the paper's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellRow {
    pub source: String,
    /// The spec's model id.
    pub model: String,
    pub dataset: String,
    pub test: TestId,
    /// Template id; `None` for tests whose prompts contain no serialized rows.
    pub serialization: Option<String>,
    pub seed: u64,
    /// The cell's result over all samples: passed when any sample passes (tests 1–9), the
    /// mean accuracy over samples (tests 10–12), trial counts summed over samples.
    #[serde(flatten)]
    pub result: CellResult,
    /// Each sample's own result (index = sample), the test's rule applied to that sample's
    /// trials; empty for imported cells.
    pub samples: Vec<CellResult>,
    /// Why the cell has no trials (e.g. wine has no categorical feature for tests 5–6).
    pub skipped: Option<String>,
    /// How many passing trials are echoes (SPEC §8); `None` for imported cells and cells
    /// decided before the echo guard existed.
    pub echo_trials: Option<usize>,
    /// Probability of passing without knowledge of the data (SPEC §8); `None` for imported
    /// cells and cells decided before it existed.
    pub chance: Option<Chance>,
    /// The run that decided it (`None` for imported cells); set by the store.
    pub run_id: Option<RunId>,
}

impl CellRow {
    fn from_row(row: &Row<'_>) -> rusqlite::Result<CellRow> {
        Ok(CellRow {
            source: row.get("source")?,
            model: row.get("model")?,
            dataset: row.get("dataset")?,
            test: enum_column(row, "test")?,
            serialization: serialization_from_sql(row.get("serialization")?),
            seed: row.get::<_, i64>("seed")? as u64,
            result: result_from_row(row)?,
            samples: Vec::new(),
            skipped: row.get("skipped")?,
            echo_trials: row
                .get::<_, Option<i64>>("echo_trials")?
                .map(|n| n as usize),
            chance: row
                .get::<_, Option<String>>("chance_basis")?
                .map(|basis| -> rusqlite::Result<Chance> {
                    Ok(Chance {
                        level: row.get("chance")?,
                        basis,
                    })
                })
                .transpose()?,
            run_id: row.get::<_, Option<i64>>("run_id")?.map(RunId),
        })
    }
}

fn result_from_row(row: &Row<'_>) -> rusqlite::Result<CellResult> {
    Ok(CellResult {
        passed: row.get("passed")?,
        score: row.get("score")?,
        trials: row.get::<_, i64>("trials")? as usize,
        passed_trials: row.get::<_, i64>("passed_trials")? as usize,
        invalid_trials: row.get::<_, i64>("invalid_trials")? as usize,
        trial_chance: row.get("trial_chance")?,
    })
}

/// (model, dataset, test, serialization, seed): what identifies one of our cells.
type CellKey = (String, String, String, String, i64);

fn serialization_to_sql(serialization: &Option<String>) -> &str {
    serialization.as_deref().unwrap_or(NO_SERIALIZATION)
}

fn serialization_from_sql(text: String) -> Option<String> {
    (text != NO_SERIALIZATION).then_some(text)
}

const TRIAL_COLUMNS: &str = "model, dataset, test, serialization, seed, sample, trial, run_id, request_key, note, expected, passed, invalid, echo";
const SAMPLE_COLUMNS: &str = "model, dataset, test, serialization, seed, sample, run_id, passed, score, trials, \
     passed_trials, invalid_trials, trial_chance";
/// Matches one cell's rows in `trials` and `cell_samples`.
const CELL_MATCH: &str =
    "model = ?1 AND dataset = ?2 AND test = ?3 AND serialization = ?4 AND seed = ?5";
const CELL_COLUMNS: &str = "source, model, dataset, test, serialization, seed, run_id, passed, score, trials, \
     passed_trials, invalid_trials, skipped, echo_trials, chance, chance_basis, trial_chance";

impl Store {
    /// Stores trial verdicts decided by `run` in one transaction. The trials given for a
    /// cell are all of its trials: every earlier trial row of each cell named here is
    /// removed first (a cell decided again with fewer trials keeps no stale rows).
    pub fn put_trials(&mut self, run: RunId, trials: &[TrialRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        write_trials(&tx, &path, run, trials)?;
        tx.commit().at(&path)
    }

    /// Stores one decision of a run — its trials, then its cells — in ONE transaction, so a
    /// crash in between never leaves new trials beside an old cell row.
    pub fn put_decisions(
        &mut self,
        run: RunId,
        trials: &[TrialRow],
        cells: &[CellRow],
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        write_trials(&tx, &path, run, trials)?;
        write_cells(&tx, &path, Some(run), cells)?;
        tx.commit().at(&path)
    }

    /// Stores cell results decided by `run` in one transaction, replacing earlier results
    /// of the same cells with their per-sample results. Call it after [`Store::put_trials`]
    /// of the same run: trial rows of these cells that another run wrote are removed (so a
    /// cell that now has no trials, e.g. newly skipped, keeps none).
    pub fn put_cells(&mut self, run: RunId, cells: &[CellRow]) -> Result<()> {
        self.write_cells(Some(run), cells)
    }

    /// Stores published results (e.g. the paper's per-cell CSVs) beside our own; each row's
    /// `source` names where it comes from.
    pub fn import_cells(&mut self, cells: &[CellRow]) -> Result<()> {
        self.write_cells(None, cells)
    }

    fn write_cells(&mut self, run: Option<RunId>, cells: &[CellRow]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.write()?;
        write_cells(&tx, &path, run, cells)?;
        tx.commit().at(&path)
    }

    /// Every trial verdict, in primary-key order.
    pub fn trials(&self) -> Result<Vec<TrialRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {TRIAL_COLUMNS} FROM trials"))
            .at(&self.path)?;
        let rows = stmt.query_map([], TrialRow::from_row).at(&self.path)?;
        rows.collect::<rusqlite::Result<_>>().at(&self.path)
    }

    /// Every cell result, ours and imported, in primary-key order; ours with their
    /// per-sample results.
    pub fn cells(&self) -> Result<Vec<CellRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {CELL_COLUMNS} FROM cells"))
            .at(&self.path)?;
        let rows = stmt.query_map([], CellRow::from_row).at(&self.path)?;
        let mut cells: Vec<CellRow> = rows.collect::<rusqlite::Result<_>>().at(&self.path)?;
        let mut samples: HashMap<CellKey, Vec<CellResult>> = HashMap::new();
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT {SAMPLE_COLUMNS} FROM cell_samples ORDER BY model, dataset, test, serialization, seed, sample"
            ))
            .at(&self.path)?;
        let rows = stmt
            .query_map([], |row| {
                Ok((
                    (
                        row.get("model")?,
                        row.get("dataset")?,
                        row.get("test")?,
                        row.get("serialization")?,
                        row.get("seed")?,
                    ),
                    result_from_row(row)?,
                ))
            })
            .at(&self.path)?;
        for row in rows {
            let (key, result) = row.at(&self.path)?;
            samples.entry(key).or_default().push(result);
        }
        for cell in cells.iter_mut().filter(|c| c.source == OWN_SOURCE) {
            let key = (
                cell.model.clone(),
                cell.dataset.clone(),
                cell.test.id().to_string(),
                serialization_to_sql(&cell.serialization).to_string(),
                cell.seed as i64,
            );
            if let Some(results) = samples.remove(&key) {
                cell.samples = results;
            }
        }
        Ok(cells)
    }
}

/// Writes `trials` inside `tx`: every earlier trial row of each cell named is removed first.
fn write_trials(
    tx: &rusqlite::Transaction<'_>,
    path: &std::path::Path,
    run: RunId,
    trials: &[TrialRow],
) -> Result<()> {
    {
        let mut clear = tx
            .prepare_cached(&format!("DELETE FROM trials WHERE {CELL_MATCH}"))
            .at(path)?;
        let mut cleared: HashSet<(&str, &str, TestId, &str, u64)> = HashSet::new();
        for t in trials {
            let serialization = serialization_to_sql(&t.serialization);
            if cleared.insert((
                t.model.as_str(),
                t.dataset.as_str(),
                t.test,
                serialization,
                t.seed,
            )) {
                clear
                    .execute(rusqlite::params![
                        t.model,
                        t.dataset,
                        t.test.id(),
                        serialization,
                        t.seed as i64
                    ])
                    .at(path)?;
            }
        }
        let mut stmt = tx
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO trials ({TRIAL_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
            ))
            .at(path)?;
        for t in trials {
            let expected = serde_json::to_string(&t.expected).expect("Expected serializes to JSON");
            stmt.execute(rusqlite::params![
                t.model,
                t.dataset,
                t.test.id(),
                serialization_to_sql(&t.serialization),
                t.seed as i64,
                t.sample,
                t.trial,
                run.0,
                t.request_key.0,
                t.note,
                expected,
                t.verdict.passed,
                t.verdict.invalid,
                t.echo,
            ])
            .at(path)?;
        }
    }
    Ok(())
}

/// Writes `cells` inside `tx` (with their per-sample results when `run` decided them).
fn write_cells(
    tx: &rusqlite::Transaction<'_>,
    path: &std::path::Path,
    run: Option<RunId>,
    cells: &[CellRow],
) -> Result<()> {
    {
        let mut stmt = tx
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO cells ({CELL_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
            ))
            .at(path)?;
        let mut clear_trials = tx
            .prepare_cached(&format!(
                "DELETE FROM trials WHERE {CELL_MATCH} AND run_id IS NOT ?6"
            ))
            .at(path)?;
        let mut clear_samples = tx
            .prepare_cached(&format!("DELETE FROM cell_samples WHERE {CELL_MATCH}"))
            .at(path)?;
        let mut put_sample = tx
            .prepare_cached(&format!(
                "INSERT INTO cell_samples ({SAMPLE_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
            ))
            .at(path)?;
        for c in cells {
            let serialization = serialization_to_sql(&c.serialization);
            if let (Some(run), true) = (run, c.source == OWN_SOURCE) {
                let cell = rusqlite::params![
                    c.model,
                    c.dataset,
                    c.test.id(),
                    serialization,
                    c.seed as i64
                ];
                clear_samples.execute(cell).at(path)?;
                clear_trials
                    .execute(rusqlite::params![
                        c.model,
                        c.dataset,
                        c.test.id(),
                        serialization,
                        c.seed as i64,
                        run.0
                    ])
                    .at(path)?;
                for (sample, result) in c.samples.iter().enumerate() {
                    put_sample
                        .execute(rusqlite::params![
                            c.model,
                            c.dataset,
                            c.test.id(),
                            serialization,
                            c.seed as i64,
                            sample as i64,
                            run.0,
                            result.passed,
                            result.score,
                            result.trials as i64,
                            result.passed_trials as i64,
                            result.invalid_trials as i64,
                            result.trial_chance,
                        ])
                        .at(path)?;
                }
            }
            stmt.execute(rusqlite::params![
                c.source,
                c.model,
                c.dataset,
                c.test.id(),
                serialization,
                c.seed as i64,
                run.map(|r| r.0),
                c.result.passed,
                c.result.score,
                c.result.trials as i64,
                c.result.passed_trials as i64,
                c.result.invalid_trials as i64,
                c.skipped,
                c.echo_trials.map(|n| n as i64),
                c.chance.as_ref().and_then(|ch| ch.level),
                c.chance.as_ref().map(|ch| ch.basis.as_str()),
                c.result.trial_chance,
            ])
            .at(path)?;
        }
    }
    Ok(())
}
