//! Test 10, membership: is a row original or a perturbed copy?

use std::collections::HashSet;

use super::{Expected, Probe, ProbeContext, ProbeError, TestId};
use crate::dataset::Table;

/// Trials per cell: half original, half modified (SPEC §2).
pub const MEMBERSHIP_TRIALS: u32 = 100;
const YES: &str = "Yes";
const NO: &str = "No";
const MAX_REDRAWS: usize = 1000;

/// Columns eligible for perturbation: those with more than one distinct value.
fn varying_columns(table: &Table) -> Vec<usize> {
    (0..table.n_cols())
        .filter(|&c| {
            let first = table.rows.first().map(|r| r[c].as_str());
            table.rows.iter().any(|r| Some(r[c].as_str()) != first)
        })
        .collect()
}

/// A copy of `row` with `ncols − 3` varying columns replaced by a different value drawn
/// from the same column, redrawn until it equals no row of the dataset.
fn perturb(
    ctx: &ProbeContext<'_>,
    rng: &mut super::rng::TrialRng,
    row: usize,
    varying: &[usize],
    originals: &HashSet<&[String]>,
) -> Result<Vec<String>, ProbeError> {
    let table = ctx.table();
    let changes = table.n_cols().saturating_sub(3).clamp(1, varying.len());
    for _ in 0..MAX_REDRAWS {
        let mut copy = table.rows[row].clone();
        for pick in rng.sample(varying.len(), changes) {
            let col = varying[pick];
            // Every varying column has another value, so this terminates quickly.
            loop {
                let donor = &table.rows[rng.below(table.n_rows())][col];
                if *donor != copy[col] {
                    copy[col] = donor.clone();
                    break;
                }
            }
        }
        if !originals.contains(copy.as_slice()) {
            return Ok(copy);
        }
    }
    Err(ctx.error("every perturbed copy equals some row of the dataset".into()))
}

fn serialize_cells(ctx: &ProbeContext<'_>, cells: &[String]) -> String {
    let s = ctx.serialization;
    ctx.table()
        .columns
        .iter()
        .zip(cells)
        .map(|(column, value)| s.pair(&column.name, value))
        .collect::<Vec<_>>()
        .join(&s.feature_sep)
}

/// Every row of the dataset as the likelihood tests score it (one serialized row), in file
/// order: the texts of the ground-truth comparison (rows trained on vs held-out rows).
pub fn row_texts(ctx: &ProbeContext<'_>) -> Vec<String> {
    ctx.table()
        .rows
        .iter()
        .map(|row| serialize_cells(ctx, row))
        .collect()
}

/// Prefix of a membership trial's note, followed by the queried row's index in the file.
pub const MEMBERSHIP_ROW_NOTE: &str = "row ";

/// One trial's draws: an example row, its perturbed copy, the query row and the order.
struct Draw {
    example: usize,
    example_copy: Vec<String>,
    /// The queried row's index (original, or the row its perturbed copy was made from).
    query: usize,
    query_cells: Vec<String>,
    query_is_original: bool,
    original_first: bool,
}

/// The rows every trial of test 10 uses (the same draws for the membership prompts and
/// the likelihood detectors), or why the test does not apply.
fn draws(ctx: &ProbeContext<'_>) -> Result<Result<Vec<Draw>, String>, ProbeError> {
    let test = TestId::Membership;
    let table = ctx.table();
    if table.n_rows() < 2 {
        return Ok(Err("needs at least 2 rows".into()));
    }
    let varying = varying_columns(table);
    if varying.is_empty() {
        return Ok(Err("no column has more than one value".into()));
    }
    let originals: HashSet<&[String]> = table.rows.iter().map(Vec::as_slice).collect();
    let mut draws = Vec::with_capacity(MEMBERSHIP_TRIALS as usize);
    for trial in 0..MEMBERSHIP_TRIALS {
        let mut rng = ctx.rng(test, trial);
        // Exactly half the trials ask about an original row.
        let query_is_original = trial < MEMBERSHIP_TRIALS / 2;
        let example = rng.below(table.n_rows());
        let example_copy = perturb(ctx, &mut rng, example, &varying, &originals)?;
        let mut query = rng.below(table.n_rows() - 1);
        if query >= example {
            query += 1;
        }
        let query_cells = if query_is_original {
            table.rows[query].clone()
        } else {
            perturb(ctx, &mut rng, query, &varying, &originals)?
        };
        let original_first = rng.below(2) == 0;
        draws.push(Draw {
            example,
            example_copy,
            query,
            query_cells,
            query_is_original,
            original_first,
        });
    }
    Ok(Ok(draws))
}

/// A serialized row for the likelihood detectors and whether it is an original row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabeledRow {
    pub text: String,
    pub original: bool,
    /// The file row it is, or its perturbed copy was made from (a row and its copies are
    /// kept together when a classifier is cross-validated on them).
    pub row: usize,
}

/// The likelihood detectors' data (SPEC §8): each membership trial's example row and its
/// perturbed copy, serialized as in the prompts (100 originals, 100 perturbed), or why
/// the test does not apply.
pub fn likelihood_rows(
    ctx: &ProbeContext<'_>,
) -> Result<Result<Vec<LabeledRow>, String>, ProbeError> {
    Ok(draws(ctx)?.map(|draws| {
        draws
            .iter()
            .flat_map(|d| {
                [
                    LabeledRow {
                        text: serialize_cells(ctx, &ctx.table().rows[d.example]),
                        original: true,
                        row: d.example,
                    },
                    LabeledRow {
                        text: serialize_cells(ctx, &d.example_copy),
                        original: false,
                        row: d.example,
                    },
                ]
            })
            .collect()
    }))
}

pub(super) fn membership(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::Membership;
    let table = ctx.table();
    let draws = match draws(ctx)? {
        Ok(draws) => draws,
        Err(reason) => {
            return Ok(Probe {
                prompts: vec![],
                skipped: Some(reason),
            });
        }
    };
    let choices = vec![YES.to_string(), NO.to_string()];
    let mut prompts = Vec::with_capacity(MEMBERSHIP_TRIALS as usize);
    for (trial, draw) in (0..MEMBERSHIP_TRIALS).zip(draws) {
        let original_text = serialize_cells(ctx, &table.rows[draw.example]);
        let modified_text = serialize_cells(ctx, &draw.example_copy);
        let (example_1, label_1, example_2, label_2) = if draw.original_first {
            (&original_text, YES, &modified_text, NO)
        } else {
            (&modified_text, NO, &original_text, YES)
        };
        let text = ctx.render(
            test,
            &[
                ("name", &ctx.dataset.name),
                ("example_1", example_1),
                ("label_1", label_1),
                ("example_2", example_2),
                ("label_2", label_2),
                ("query", &serialize_cells(ctx, &draw.query_cells)),
            ],
        );
        let correct = if draw.query_is_original { 0 } else { 1 };
        let mut prompt = ctx.prompt(
            test,
            trial,
            text,
            Expected::Choice {
                choices: choices.clone(),
                correct,
            },
        );
        // The queried row (original or the row its copy was made from), so a calibration
        // study can split the accuracy into rows trained on and held-out rows.
        prompt.note = Some(format!("{MEMBERSHIP_ROW_NOTE}{}", draw.query));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Where the draws of the column-matched rows start among the membership test's trial
/// numbers (far past its 100 trials, so no row shares a draw with a prompt).
const MATCHED_TRIALS_FROM: u32 = 1_000_000;

/// `count` column-matched synthetic rows (issue 26 item 4), serialized as the likelihood
/// detectors score rows: each value drawn, seeded and independently, from its own column
/// of the file, redrawn until the row equals no row of the file. They share the dataset's
/// columns, value vocabulary and marginal distributions but no corpus holds them, so they
/// are the unseen reference for a model that has no held-out rows of the dataset; whether
/// the match is fair (text alone cannot tell them from the rows) is the blind baseline's
/// to say. Or why the dataset has none (fewer than 2 rows, or every combination of its
/// columns' values is a row of the file).
pub fn matched_rows(
    ctx: &ProbeContext<'_>,
    count: usize,
) -> Result<Result<Vec<String>, String>, ProbeError> {
    let table = ctx.table();
    if table.n_rows() < 2 || varying_columns(table).is_empty() {
        return Ok(Err(
            "needs at least 2 rows and a column with two values".into()
        ));
    }
    let originals: HashSet<&[String]> = table.rows.iter().map(Vec::as_slice).collect();
    let mut rows = Vec::with_capacity(count);
    for i in 0..count {
        let mut rng = ctx.rng(TestId::Membership, MATCHED_TRIALS_FROM + i as u32);
        let drawn = (0..MAX_REDRAWS).find_map(|_| {
            let row: Vec<String> = (0..table.n_cols())
                .map(|col| table.rows[rng.below(table.n_rows())][col].clone())
                .collect();
            (!originals.contains(row.as_slice())).then_some(row)
        });
        match drawn {
            Some(row) => rows.push(serialize_cells(ctx, &row)),
            None => {
                return Ok(Err(
                    "every row drawn from the columns' values is a row of the file".into(),
                ));
            }
        }
    }
    Ok(Ok(rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::catalog::Catalog;
    use crate::probe::PromptPack;

    /// On iris: as many rows as asked, seeded, none a row of the file, every value taken
    /// from its own column, and the rows not all alike.
    #[test]
    fn matched_rows_are_new_rows_of_the_files_own_values() {
        let dataset = Catalog::open(None).unwrap().load("iris").unwrap();
        let pack = PromptPack::builtin();
        let serialization = crate::dataset::Serialization::builtin("colon").unwrap();
        let ctx = ProbeContext {
            dataset: &dataset,
            serialization: &serialization,
            seed: 0,
            pack: &pack,
            variant: crate::probe::Variant::Paper,
        };
        let rows = matched_rows(&ctx, 40).unwrap().unwrap();
        assert_eq!(rows, matched_rows(&ctx, 40).unwrap().unwrap());
        assert_eq!(rows.len(), 40);
        let file: HashSet<String> = row_texts(&ctx).into_iter().collect();
        assert!(rows.iter().all(|r| !file.contains(r)));
        let distinct: HashSet<&String> = rows.iter().collect();
        assert!(distinct.len() > 30, "{} distinct of 40", distinct.len());
        let table = ctx.table();
        let column_values: Vec<HashSet<&str>> = (0..table.n_cols())
            .map(|c| table.rows.iter().map(|r| r[c].as_str()).collect())
            .collect();
        for row in &rows {
            let values: Vec<&str> = row
                .split(&serialization.feature_sep)
                .map(|pair| {
                    pair.rsplit(serialization.value_sep.as_str())
                        .next()
                        .unwrap()
                })
                .collect();
            assert_eq!(values.len(), table.n_cols(), "{row}");
            for (c, value) in values.iter().enumerate() {
                assert!(
                    column_values[c].contains(value),
                    "{value} not in column {c}"
                );
            }
        }
        let other = ProbeContext { seed: 1, ..ctx };
        assert_ne!(rows, matched_rows(&other, 40).unwrap().unwrap());
    }
}
