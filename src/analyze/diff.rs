//! `diff`: what changed between two models (or two runs, [`diff_runs`]) of one cache: cells of tests 1–9 gained and lost,
//! and accuracy changes of tests 10–12 with Wilson intervals. Pure Rust over the cell rows
//! the [`crate::store::Store`] returns (a few thousand rows at most; no DuckDB needed).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::stats::{Interval, wilson};
use crate::probe::{TestId, TestKind};
use crate::store::CellRow;

/// A model id that the cache does not hold.
#[derive(Debug, thiserror::Error)]
#[error("no model `{model}` in the cache: known models are {}", known_list(.known))]
pub struct UnknownModel {
    pub model: String,
    pub known: Vec<String>,
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "none (run an experiment first: `tabcontam run SPEC`)".to_string()
    } else {
        known.join(", ")
    }
}

/// One cell of a model: (dataset, test, serialization, seed); in a diff of two runs that
/// share models, the model too.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct DiffCell {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub dataset: String,
    pub number: u8,
    pub test: String,
    pub serialization: Option<String>,
    pub seed: u64,
}

/// One side's accuracy on one answer-test cell.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracySide {
    pub trials: u64,
    pub correct: u64,
    pub invalid: u64,
    pub accuracy: f64,
    pub interval: Option<Interval>,
}

/// Accuracy of a membership or classification cell in A and in B.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyChange {
    #[serde(flatten)]
    pub cell: DiffCell,
    pub a: AccuracySide,
    pub b: AccuracySide,
    /// B's accuracy minus A's.
    pub delta: f64,
    /// The two 95 % Wilson intervals do not overlap (a conservative sign of a real change).
    pub separated: bool,
}

/// Everything `tabcontam diff A B` shows.
#[derive(Debug, Clone, Serialize)]
pub struct ModelDiff {
    pub a: String,
    pub b: String,
    /// Cells of tests 1–9 that both models have.
    pub compared: usize,
    /// Of those, passed by A and by B (a skipped cell counts as not passed).
    pub passed_a: usize,
    pub passed_b: usize,
    /// Passed in B but not in A, and the reverse; by dataset, test, serialization, seed.
    pub gained: Vec<DiffCell>,
    pub lost: Vec<DiffCell>,
    /// Cells (any test) that only one model has: not compared.
    pub only_in_a: Vec<DiffCell>,
    pub only_in_b: Vec<DiffCell>,
    /// Tests 10–12 cells that both models have, by dataset, test, serialization, seed.
    pub accuracy: Vec<AccuracyChange>,
}

impl AccuracyChange {
    /// Whether the share of correct answers differs between A and B (compared exactly, as
    /// fractions).
    pub fn changed(&self) -> bool {
        self.a.correct * self.b.trials != self.b.correct * self.a.trials
    }
}

impl ModelDiff {
    /// The diff with only the cells whose verdict or accuracy changed: accuracy cells whose
    /// share of correct answers is the same in A and B are dropped (`diff --only-changed`).
    /// Gained and lost cells are changes; cells only one side has are kept (not compared).
    pub fn only_changed(mut self) -> ModelDiff {
        self.accuracy.retain(AccuracyChange::changed);
        self
    }
}

fn is_answer_test(test: TestId) -> bool {
    test == TestId::Membership || test.kind() == TestKind::Classification
}

fn cells_of<'a>(cells: &'a [CellRow], model: &str) -> BTreeMap<DiffCell, &'a CellRow> {
    keyed(cells.iter().filter(|c| c.model == model), false)
}

/// Cells by their diff key, with or without the model.
fn keyed<'a>(
    cells: impl Iterator<Item = &'a CellRow>,
    with_model: bool,
) -> BTreeMap<DiffCell, &'a CellRow> {
    cells
        .map(|c| {
            let key = DiffCell {
                model: with_model.then(|| c.model.clone()),
                dataset: c.dataset.clone(),
                number: c.test.number(),
                test: c.test.id().to_string(),
                serialization: c.serialization.clone(),
                seed: c.seed,
            };
            (key, c)
        })
        .collect()
}

fn accuracy_side(cell: &CellRow) -> AccuracySide {
    let trials = cell.result.trials as u64;
    let correct = cell.result.passed_trials as u64;
    AccuracySide {
        trials,
        correct,
        invalid: cell.result.invalid_trials as u64,
        accuracy: if trials == 0 {
            0.0
        } else {
            correct as f64 / trials as f64
        },
        interval: wilson(correct, trials),
    }
}

/// Compares the cells of models `a` and `b` (spec model ids) among `cells`.
pub fn diff_models(cells: &[CellRow], a: &str, b: &str) -> Result<ModelDiff, UnknownModel> {
    let known: BTreeSet<&str> = cells.iter().map(|c| c.model.as_str()).collect();
    for model in [a, b] {
        if !known.contains(model) {
            return Err(UnknownModel {
                model: model.to_string(),
                known: known.iter().map(|m| m.to_string()).collect(),
            });
        }
    }
    Ok(compare(&cells_of(cells, a), &cells_of(cells, b), a, b))
}

/// Gained and lost cells and accuracy changes from the cells of A to those of B.
fn compare(
    of_a: &BTreeMap<DiffCell, &CellRow>,
    of_b: &BTreeMap<DiffCell, &CellRow>,
    a: &str,
    b: &str,
) -> ModelDiff {
    let mut diff = ModelDiff {
        a: a.to_string(),
        b: b.to_string(),
        compared: 0,
        passed_a: 0,
        passed_b: 0,
        gained: Vec::new(),
        lost: Vec::new(),
        only_in_a: of_a
            .keys()
            .filter(|k| !of_b.contains_key(*k))
            .cloned()
            .collect(),
        only_in_b: of_b
            .keys()
            .filter(|k| !of_a.contains_key(*k))
            .cloned()
            .collect(),
        accuracy: Vec::new(),
    };
    for (key, cell_a) in of_a {
        let Some(cell_b) = of_b.get(key) else {
            continue;
        };
        if is_answer_test(cell_a.test) {
            let (side_a, side_b) = (accuracy_side(cell_a), accuracy_side(cell_b));
            let separated = match (side_a.interval, side_b.interval) {
                (Some(x), Some(y)) => x.high < y.low || y.high < x.low,
                _ => false,
            };
            diff.accuracy.push(AccuracyChange {
                cell: key.clone(),
                delta: side_b.accuracy - side_a.accuracy,
                a: side_a,
                b: side_b,
                separated,
            });
            continue;
        }
        // A skipped cell has no trials and counts as not passed (as in the scores).
        let passed_a = cell_a.result.passed && cell_a.skipped.is_none();
        let passed_b = cell_b.result.passed && cell_b.skipped.is_none();
        diff.compared += 1;
        diff.passed_a += usize::from(passed_a);
        diff.passed_b += usize::from(passed_b);
        match (passed_a, passed_b) {
            (false, true) => diff.gained.push(key.clone()),
            (true, false) => diff.lost.push(key.clone()),
            _ => {}
        }
    }
    diff
}

/// A run id that the cache does not hold.
#[derive(Debug, thiserror::Error)]
#[error("no run {run} in the cache: known runs are {} (see `tabcontam status`)", known_runs(.known))]
pub struct UnknownRun {
    pub run: i64,
    pub known: Vec<i64>,
}

fn known_runs(known: &[i64]) -> String {
    if known.is_empty() {
        "none (run an experiment first: `tabcontam run SPEC`)".to_string()
    } else {
        known
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What one run still holds.
#[derive(Debug, Clone, Serialize)]
pub struct RunSide {
    pub run: i64,
    pub spec_name: String,
    pub started_at: String,
    /// Models of the cells it holds, by id.
    pub models: Vec<String>,
    /// Cells whose current decision is this run's.
    pub cells: usize,
}

/// What changed between two runs (see [`diff_runs`]).
#[derive(Debug, Clone, Serialize)]
pub struct RunDiff {
    pub run_a: RunSide,
    pub run_b: RunSide,
    /// `cell`: cells matched by (model, dataset, test, serialization, seed); `cell-across-models`:
    /// each run holds one model and they differ, so cells are matched without the model.
    pub matched_by: &'static str,
    /// What a run diff can and cannot see.
    pub limitation: &'static str,
    #[serde(flatten)]
    pub diff: ModelDiff,
}

/// Why a run diff compares what it compares.
pub const RUN_DIFF_LIMITATION: &str = "the cache keeps only each cell's latest decision (trials and cells are replaced when a later run decides the cell again), so a run is represented by the cells it still holds; cells a later run decided again count for that later run, and an old run's earlier verdicts cannot be rebuilt from the cache";

/// Compares the cells whose current decision is run `a`'s with those of run `b`. When each
/// run holds one model and the models differ (e.g. two checkpoints under their own ids),
/// cells are matched without the model; otherwise by the full cell key.
pub fn diff_runs(
    cells: &[CellRow],
    runs: &[crate::store::RunRow],
    a: i64,
    b: i64,
) -> Result<RunDiff, UnknownRun> {
    let find = |run: i64| {
        runs.iter()
            .find(|r| r.id.0 == run)
            .ok_or_else(|| UnknownRun {
                run,
                known: runs.iter().map(|r| r.id.0).collect(),
            })
    };
    let (row_a, row_b) = (find(a)?, find(b)?);
    let held = |run: i64| -> Vec<&CellRow> {
        cells
            .iter()
            .filter(|c| c.run_id.is_some_and(|r| r.0 == run))
            .collect()
    };
    let (held_a, held_b) = (held(a), held(b));
    let models = |held: &[&CellRow]| -> Vec<String> {
        let set: BTreeSet<&str> = held.iter().map(|c| c.model.as_str()).collect();
        set.into_iter().map(str::to_string).collect()
    };
    let (models_a, models_b) = (models(&held_a), models(&held_b));
    let across = models_a.len() == 1 && models_b.len() == 1 && models_a != models_b;
    let of_a = keyed(held_a.iter().copied(), !across);
    let of_b = keyed(held_b.iter().copied(), !across);
    let side = |row: &crate::store::RunRow, models: Vec<String>, cells: usize| RunSide {
        run: row.id.0,
        spec_name: row.spec_name.clone(),
        started_at: row.started_at.clone(),
        models,
        cells,
    };
    Ok(RunDiff {
        diff: compare(&of_a, &of_b, &format!("run {a}"), &format!("run {b}")),
        run_a: side(row_a, models_a, held_a.len()),
        run_b: side(row_b, models_b, held_b.len()),
        matched_by: if across { "cell-across-models" } else { "cell" },
        limitation: RUN_DIFF_LIMITATION,
    })
}
