//! The trial explorer's data: per cell of ours, its stored trials with the prompt the model
//! saw, the output it gave, what the test expected, the verdict and whether a pass is an
//! echo (SPEC §8, [`crate::probe::echo::is_echo`]). Plain structs for `report`; the texts
//! are untrusted and escaped by the renderers.
//!
//! Cells of the membership and classification tests have a hundred trials each: at most
//! `max_shown` per cell are kept ([`DEFAULT_TRIALS_SHOWN`] unless `report --explorer-trials`
//! says otherwise; the first by sample and trial), and the cell says how many it has, so
//! the single-file report stays reasonable for the paper grid (16 models × 9 datasets × 12
//! tests: 5.9 MB with 5, see `tests/report.rs::paper_grid_report_size`).

use std::collections::HashMap;

use serde::Serialize;

use super::view::{Analysis, ExplorerCell, ExplorerTrial, SeriesKey};
use super::{AnalyzeError, Result};
use crate::dataset::Serialization;
use crate::decide::{Alg1Profile, Cell, Dictionary, Word};
use crate::probe::echo::is_echo;
use crate::probe::{Expected, TestId};
use crate::store::{OWN_SOURCE, Store, TrialRow};

/// Trials shown per cell by default: every trial of tests 1–9 (at most five per sample),
/// the first five of the hundred of tests 10–12.
pub const DEFAULT_TRIALS_SHOWN: usize = 5;

/// A character diff is computed only when both texts are at most this long (the table is
/// quadratic; rows of the paper's datasets are a few hundred characters).
const MAX_DIFF_CHARS: usize = 1500;

/// What a trial expects, as texts to look for.
pub fn expected_terms(expected: &Expected) -> Vec<String> {
    let mut terms: Vec<String> = match expected {
        Expected::Words { words } => words
            .iter()
            .filter_map(|w| match w {
                Word::Text(text) => Some(text.clone()),
                Word::Bool(b) => Some(b.to_string()),
                Word::Missing => None,
            })
            .collect(),
        Expected::Names { names } => names.clone(),
        Expected::Row { fields, .. } => fields.iter().map(|(_, v)| cell_text(v)).collect(),
        Expected::Choice { choices, correct } => {
            choices.get(*correct).cloned().into_iter().collect()
        }
        Expected::Continuation { text, .. } => vec![text.clone()],
        Expected::ExactRow { row } => vec![row.clone()],
        Expected::ExactValue { value, .. } => vec![value.clone()],
        Expected::FirstToken { token, .. } => vec![token.clone()],
    };
    terms.retain(|t| !t.trim().is_empty());
    terms.sort();
    terms.dedup();
    terms
}

fn cell_text(value: &Cell) -> String {
    match value {
        Cell::Text(text) => text.clone(),
        Cell::Int(int) => int.to_string(),
        Cell::Float(float) => float.to_string(),
    }
}

/// The expected fields of a completion written as the cell's template writes a row (the
/// default template for an unknown or user template).
fn truth_row(fields: &[(String, Cell)], serialization: Option<&str>) -> String {
    let template = serialization
        .and_then(Serialization::builtin)
        .or_else(|| Serialization::builtin(super::DEFAULT_SERIALIZATION))
        .expect("the default template is built in");
    fields
        .iter()
        .map(|(name, value)| template.pair(name, &cell_text(value)))
        .collect::<Vec<_>>()
        .join(&template.feature_sep)
}

/// One piece of a character diff between the true row and the judged output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum DiffPiece {
    /// In both.
    Same(String),
    /// In the true row, not in the output.
    Missing(String),
    /// In the output, not in the true row.
    Extra(String),
}

/// Character diff (longest common subsequence) of `truth` against `output`; `None` when
/// either is longer than [`MAX_DIFF_CHARS`].
pub fn char_diff(truth: &str, output: &str) -> Option<Vec<DiffPiece>> {
    let a: Vec<char> = truth.chars().collect();
    let b: Vec<char> = output.chars().collect();
    if a.len() > MAX_DIFF_CHARS || b.len() > MAX_DIFF_CHARS {
        return None;
    }
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: LCS length of a[i..] and b[j..], one flat row-major table.
    let mut lcs = vec![0u16; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let mut pieces: Vec<DiffPiece> = Vec::new();
    let mut push = |piece: DiffPiece| {
        match (pieces.last_mut(), &piece) {
            (Some(DiffPiece::Same(s)), DiffPiece::Same(t))
            | (Some(DiffPiece::Missing(s)), DiffPiece::Missing(t))
            | (Some(DiffPiece::Extra(s)), DiffPiece::Extra(t)) => s.push_str(t),
            _ => pieces.push(piece),
        };
    };
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            push(DiffPiece::Same(a[i].to_string()));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            // What the truth had first, then what the output wrote instead.
            push(DiffPiece::Missing(a[i].to_string()));
            i += 1;
        } else {
            push(DiffPiece::Extra(b[j].to_string()));
            j += 1;
        }
    }
    Some(pieces)
}

/// Builds the explorer's cells from our stored trials, in the report's order: series
/// (Table 2), dataset, test, the series' scored template first, seed.
pub fn explorer_cells(
    store: &Store,
    trials: &[TrialRow],
    analysis: &Analysis,
    max_shown: usize,
) -> Result<Vec<ExplorerCell>> {
    type Key<'a> = (&'a str, &'a str, TestId, Option<&'a str>, u64);
    let mut by_cell: HashMap<Key<'_>, Vec<&TrialRow>> = HashMap::new();
    for t in trials {
        by_cell
            .entry((
                t.model.as_str(),
                t.dataset.as_str(),
                t.test,
                t.serialization.as_deref(),
                t.seed,
            ))
            .or_default()
            .push(t);
    }
    let series_rank: HashMap<&str, (usize, Option<&str>)> = analysis
        .series
        .iter()
        .filter(|s| s.key.source == OWN_SOURCE)
        .map(|s| (s.key.model.as_str(), (s.rank, s.serialization.as_deref())))
        .collect();
    let dataset_position: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let mut keys: Vec<Key<'_>> = by_cell.keys().copied().collect();
    keys.sort_by_key(|&(model, dataset, test, serialization, seed)| {
        let (rank, scored) = series_rank
            .get(model)
            .copied()
            .unwrap_or((usize::MAX, None));
        (
            rank,
            model,
            dataset_position.get(dataset).copied().unwrap_or(usize::MAX),
            dataset,
            test.number(),
            serialization.is_some() && serialization != scored,
            serialization,
            seed,
        )
    });

    let mut shown: Vec<(Key<'_>, Vec<&TrialRow>, usize)> = Vec::with_capacity(keys.len());
    for key in keys {
        let mut cell_trials = by_cell.remove(&key).unwrap_or_default();
        cell_trials.sort_by_key(|t| (t.sample, t.trial));
        let total = cell_trials.len();
        shown.push((key, cell_trials, total));
    }
    // The shown trials, and every passed one that could be an echo (answers to choices
    // never are), so that a cell's echo count covers all its trials.
    let wanted: Vec<_> = shown
        .iter()
        .flat_map(|(_, t, _)| {
            t.iter()
                .enumerate()
                .filter(|(i, t)| {
                    *i < max_shown
                        || (t.verdict.passed && !matches!(t.expected, Expected::Choice { .. }))
                })
                .map(|(_, t)| t.request_key)
        })
        .collect();
    let outputs = store.responses(&wanted)?;
    let prompts = store.prompts_of(&wanted)?;
    let dictionary = Dictionary::shipped().map_err(|e| AnalyzeError::Explorer(e.to_string()))?;
    let grid_passed: HashMap<(&str, &str, &str, Option<&str>, u64), bool> = analysis
        .grid
        .iter()
        .filter(|g| g.key.source == OWN_SOURCE)
        .map(|g| {
            (
                (
                    g.key.model.as_str(),
                    g.dataset.as_str(),
                    g.test.as_str(),
                    g.serialization.as_deref(),
                    g.seed,
                ),
                g.passed,
            )
        })
        .collect();

    let mut cells = Vec::with_capacity(shown.len());
    for ((model, dataset, test, serialization, seed), cell_trials, total) in shown {
        let mut echo_trials = 0;
        let mut passed_trials = 0;
        let mut views = Vec::new();
        for (index, t) in cell_trials.iter().enumerate() {
            passed_trials += usize::from(t.verdict.passed);
            let prompt = prompts.get(&t.request_key);
            let output = outputs.get(&t.request_key).map(|r| r.text.as_str());
            let echo = match (prompt, output) {
                (Some(prompt), Some(output)) => is_echo(
                    prompt,
                    output,
                    &t.expected,
                    t.verdict,
                    &dictionary,
                    Alg1Profile::Hunspell,
                ),
                _ => false,
            };
            echo_trials += usize::from(echo);
            if index >= max_shown {
                continue;
            }
            let output = output.unwrap_or_default().to_string();
            let (truth, judged) = match (&t.expected, test.number()) {
                (Expected::Row { fields, scope }, 7..=9) => (
                    Some(truth_row(fields, serialization)),
                    Some(scope.select(&output).to_string()),
                ),
                // Verbatim tests: the true continuation or row against the output's
                // first line (the header test judges the whole output).
                (Expected::Continuation { text, .. }, _) => {
                    (Some(text.clone()), Some(output.clone()))
                }
                (Expected::ExactRow { row }, _) => (
                    Some(row.clone()),
                    Some(output.trim_start().lines().next().unwrap_or("").to_string()),
                ),
                _ => (None, None),
            };
            views.push(ExplorerTrial {
                sample: t.sample,
                trial: t.trial,
                request_key: t.request_key.to_hex(),
                note: t.note.clone(),
                prompt: prompt.cloned().unwrap_or_default(),
                expected: expected_terms(&t.expected),
                truth,
                judged,
                output,
                passed: t.verdict.passed,
                invalid: t.verdict.invalid,
                echo,
            });
        }
        let passed = grid_passed
            .get(&(model, dataset, test.id(), serialization, seed))
            .copied()
            .unwrap_or(passed_trials > 0);
        cells.push(ExplorerCell {
            key: SeriesKey {
                source: OWN_SOURCE.to_string(),
                model: model.to_string(),
            },
            dataset: dataset.to_string(),
            test,
            serialization: serialization.map(str::to_string),
            seed,
            passed,
            total_trials: total,
            passed_trials,
            echo_trials,
            run_id: cell_trials.iter().find_map(|t| t.run_id.map(|r| r.0)),
            trials: views,
        });
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(pieces: &[DiffPiece]) -> String {
        pieces
            .iter()
            .map(|p| match p {
                DiffPiece::Same(s) => s.clone(),
                DiffPiece::Missing(s) => format!("[-{s}]"),
                DiffPiece::Extra(s) => format!("[+{s}]"),
            })
            .collect()
    }

    #[test]
    fn char_diff_marks_missing_and_extra_characters() {
        let pieces = char_diff("The age is 39", "The age is 38").unwrap();
        assert_eq!(render(&pieces), "The age is 3[-9][+8]");
        let same = char_diff("abc", "abc").unwrap();
        assert_eq!(same, vec![DiffPiece::Same("abc".into())]);
        assert_eq!(render(&char_diff("", "xy").unwrap()), "[+xy]");
        assert!(char_diff(&"a".repeat(MAX_DIFF_CHARS + 1), "a").is_none());
    }

    #[test]
    fn truth_rows_use_the_cells_template() {
        let fields = vec![
            ("age".to_string(), Cell::Int(39)),
            ("class".to_string(), Cell::Text("Iris-setosa".into())),
        ];
        assert_eq!(
            truth_row(&fields, Some("equals")),
            "age = 39, class = Iris-setosa"
        );
        assert_eq!(
            truth_row(&fields, Some("my-own")),
            "The age is 39, The class is Iris-setosa"
        );
    }
}
