//! Memorization tests 4–9: recognition from rows, feature values and completions.

use super::knowledge::name_alternatives;
use super::{Expected, Probe, ProbeContext, ProbeError, TestId, Variant, cell, word};
use crate::decide::{Alg2Scope, Word};

/// Rows shown as examples in tests 4, 5, 7 and 9.
const EXAMPLE_ROWS: usize = 4;
/// Rows shown by test 4 in the authors' code (`paper-code` variant): the first five.
const PAPER_CODE_RECOGNITION_ROWS: usize = 5;
/// What stands in place of the value test 9 asks for. The row keeps every column in the
/// file's order; only this value is hidden. Not `?` or `NA`: files use those for missing
/// values (UCI adult writes `?`).
pub const HIDDEN_VALUE: &str = "___";
/// Trials of tests 7 and 9.
const COMPLETION_TRIALS: u32 = 5;
/// Features removed from the last row of test 7.
const REMOVED_FEATURES: usize = 3;
/// Redraws before a constrained draw gives up (a dataset where no draw can satisfy the
/// constraint, e.g. a feature with one value, is reported instead of looping).
const MAX_REDRAWS: usize = 1000;

fn skipped(reason: String) -> Result<Probe, ProbeError> {
    Ok(Probe {
        prompts: vec![],
        skipped: Some(reason),
    })
}

fn need_rows(ctx: &ProbeContext<'_>, rows: usize) -> Option<String> {
    let n = ctx.table().n_rows();
    (n < rows).then(|| format!("needs at least {rows} rows, the table has {n}"))
}

/// Test 4: four random rows (`paper-code`: the first five, in file order); the dataset's
/// name expected.
pub(super) fn recognition_examples(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::RecognitionExamples;
    let shown = match ctx.variant {
        Variant::Paper => EXAMPLE_ROWS,
        Variant::PaperCode => PAPER_CODE_RECOGNITION_ROWS,
    };
    if let Some(reason) = need_rows(ctx, shown) {
        return skipped(reason);
    }
    let rows = match ctx.variant {
        Variant::Paper => ctx.rng(test, 0).sample(ctx.table().n_rows(), shown),
        Variant::PaperCode => (0..shown).collect(),
    };
    let text = ctx.render(test, &[("rows", &ctx.rows_text(&rows))]);
    Ok(Probe {
        prompts: vec![ctx.prompt(test, 0, text, name_alternatives(ctx))],
        skipped: None,
    })
}

/// The categorical features of tests 5–6, as column indices.
fn categorical_columns<'a>(ctx: &'a ProbeContext<'_>) -> Result<Vec<(usize, &'a str)>, ProbeError> {
    ctx.dataset
        .categorical
        .iter()
        .map(|name| ctx.column(name).map(|c| (c, name.as_str())))
        .collect()
}

/// The values of a column in order of first appearance, as (raw text, Alg1 word); a
/// missing value appears once, as `Word::Missing` (as the paper's code did).
fn column_values<'a>(ctx: &'a ProbeContext<'_>, col: usize) -> Vec<(Option<&'a str>, Word)> {
    let table = ctx.table();
    let mut values = Vec::new();
    let mut missing_added = false;
    let mut seen = std::collections::HashSet::new();
    for row in 0..table.n_rows() {
        let raw = table.rows[row][col].as_str();
        if table.is_missing(raw) {
            if !missing_added {
                values.push((None, Word::Missing));
                missing_added = true;
            }
        } else if seen.insert(raw) {
            values.push((Some(raw), word(table, row, col)));
        }
    }
    values
}

/// The values of `all` not shown in `shown` rows (missing counts as shown when a shown
/// row misses the value).
fn unseen_values(
    ctx: &ProbeContext<'_>,
    col: usize,
    all: &[(Option<&str>, Word)],
    shown: &[usize],
) -> Vec<Word> {
    let table = ctx.table();
    let shown_values: Vec<Option<&str>> = shown
        .iter()
        .map(|&r| {
            let raw = table.rows[r][col].as_str();
            (!table.is_missing(raw)).then_some(raw)
        })
        .collect();
    all.iter()
        .filter(|(raw, _)| !shown_values.contains(raw))
        .map(|(_, w)| w.clone())
        .collect()
}

/// Test 5: rows chosen so that some value of the feature is not among them; those values expected.
pub(super) fn feature_values_informed(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FeatureValuesInformed;
    let features = categorical_columns(ctx)?;
    if features.is_empty() {
        return skipped("the descriptor lists no categorical feature".into());
    }
    if let Some(reason) = need_rows(ctx, EXAMPLE_ROWS) {
        return skipped(reason);
    }
    let table = ctx.table();
    let mut prompts = Vec::new();
    for (trial, (col, name)) in features.into_iter().enumerate() {
        let trial = trial as u32;
        if !table.has_distinct(col, 2) {
            continue;
        }
        let all_values = column_values(ctx, col);
        let mut rng = ctx.rng(test, trial);
        let mut chosen = None;
        for _ in 0..MAX_REDRAWS {
            let rows = rng.sample(table.n_rows(), EXAMPLE_ROWS);
            let expected = unseen_values(ctx, col, &all_values, &rows);
            if expected.iter().any(|w| !matches!(w, Word::Missing)) {
                chosen = Some((rows, expected));
                break;
            }
        }
        let Some((rows, expected)) = chosen else {
            return Err(ctx.error(format!(
                "no draw of {EXAMPLE_ROWS} rows leaves a value of `{name}` unseen"
            )));
        };
        let text = ctx.render(
            test,
            &[
                ("name", &ctx.dataset.name),
                ("feature", name),
                ("rows", &ctx.rows_text(&rows)),
            ],
        );
        let mut prompt = ctx.prompt(test, trial, text, Expected::Words { words: expected });
        prompt.note = Some(format!("feature: {name}"));
        prompts.push(prompt);
    }
    if prompts.is_empty() {
        return skipped("every categorical feature has a single value".into());
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Test 6: the dataset name and a feature; all its values expected.
pub(super) fn feature_values_uninformed(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FeatureValuesUninformed;
    let features = categorical_columns(ctx)?;
    if features.is_empty() {
        return skipped("the descriptor lists no categorical feature".into());
    }
    let mut prompts = Vec::new();
    for (trial, (col, name)) in features.into_iter().enumerate() {
        let expected = column_values(ctx, col)
            .into_iter()
            .map(|(_, w)| w)
            .collect();
        let text = ctx.render(test, &[("name", &ctx.dataset.name), ("feature", name)]);
        let mut prompt = ctx.prompt(
            test,
            trial as u32,
            text,
            Expected::Words { words: expected },
        );
        prompt.note = Some(format!("feature: {name}"));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Whether every listed cell of a row holds a value (a missing value cannot be asked for).
fn complete(ctx: &ProbeContext<'_>, row: usize, cols: &[usize]) -> bool {
    cols.iter()
        .all(|&c| !ctx.table().is_missing(&ctx.table().rows[row][c]))
}

/// The first columns of a row (in the file's order), ending on the feature separator the
/// model continues from (test 7).
fn partial_row(ctx: &ProbeContext<'_>, row: usize, shown: &[usize]) -> String {
    let s = ctx.serialization;
    let mut text = s.row_columns(ctx.table(), row, shown);
    text.push_str(&s.feature_sep);
    // A trailing space would be its own token for most tokenizers and push the model
    // off its usual spelling; the model writes the space itself.
    text.truncate(text.trim_end().len());
    text
}

/// Test 7: four random full rows, then a random row without its last three features.
pub(super) fn incomplete_completion(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::IncompleteCompletion;
    let table = ctx.table();
    let n_cols = table.n_cols();
    if n_cols <= REMOVED_FEATURES {
        return skipped(format!(
            "needs more than {REMOVED_FEATURES} columns, the table has {n_cols}"
        ));
    }
    if let Some(reason) = need_rows(ctx, EXAMPLE_ROWS + 1) {
        return skipped(reason);
    }
    let shown: Vec<usize> = (0..n_cols - REMOVED_FEATURES).collect();
    let removed: Vec<usize> = (n_cols - REMOVED_FEATURES..n_cols).collect();
    let mut prompts = Vec::new();
    for trial in 0..COMPLETION_TRIALS {
        let mut rng = ctx.rng(test, trial);
        let rows = rng.sample(table.n_rows(), EXAMPLE_ROWS);
        let target = draw_row(ctx, &mut rng, &rows, |r| complete(ctx, r, &removed))?;
        let fields = removed
            .iter()
            .map(|&c| (table.columns[c].name.clone(), cell(table, target, c)))
            .collect();
        let text = ctx.render(
            test,
            &[
                ("name", &ctx.dataset.name),
                ("features", &ctx.feature_list()),
                ("rows", &ctx.rows_text(&rows)),
                ("partial_row", &partial_row(ctx, target, &shown)),
            ],
        );
        prompts.push(ctx.prompt(
            test,
            trial,
            text,
            Expected::Row {
                fields,
                scope: Alg2Scope::FirstLine,
            },
        ));
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// A random row not in `exclude` that satisfies `accept`.
fn draw_row(
    ctx: &ProbeContext<'_>,
    rng: &mut super::rng::TrialRng,
    exclude: &[usize],
    accept: impl Fn(usize) -> bool,
) -> Result<usize, ProbeError> {
    for _ in 0..MAX_REDRAWS {
        let row = rng.below(ctx.table().n_rows());
        if !exclude.contains(&row) && accept(row) {
            return Ok(row);
        }
    }
    Err(ctx.error("no row with every asked value present was found".into()))
}

/// Test 8: the first four rows in file order; the fifth expected in full.
pub(super) fn full_completion(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FullCompletion;
    if let Some(reason) = need_rows(ctx, EXAMPLE_ROWS + 1) {
        return skipped(reason);
    }
    let table = ctx.table();
    let rows: Vec<usize> = (0..EXAMPLE_ROWS).collect();
    let target = EXAMPLE_ROWS;
    // A missing value cannot be written back, so it is not asked for.
    let fields = (0..table.n_cols())
        .filter(|&c| !table.is_missing(&table.rows[target][c]))
        .map(|c| (table.columns[c].name.clone(), cell(table, target, c)))
        .collect();
    let text = ctx.render(
        test,
        &[
            ("name", &ctx.dataset.name),
            ("features", &ctx.feature_list()),
            ("rows", &ctx.rows_text(&rows)),
        ],
    );
    Ok(Probe {
        prompts: vec![ctx.prompt(
            test,
            0,
            text,
            Expected::Row {
                fields,
                scope: Alg2Scope::FirstRowLike,
            },
        )],
        skipped: None,
    })
}

/// Test 9: the feature list, example rows, then one row with the completion feature's
/// value hidden in place (the row keeps the file's column order: serialized rows must read
/// like the file), and a cue for that value on the last line.
///
/// `paper` (SPEC §2): 5 trials, each with 4 random example rows and a random target row;
/// the five rows' values of the feature are pairwise distinct as far as the column allows
/// (the paper: "each example should have a different value for this feature"; a value
/// repeats only once every value of the column has appeared, so wine's 3-class target
/// works). `paper-code`: no example rows; the targets are rows 0–4 in turn.
pub(super) fn feature_completion(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::FeatureCompletion;
    let Some(feature) = ctx.dataset.completion_feature.as_deref() else {
        return skipped("the descriptor names no completion feature".into());
    };
    let col = ctx.column(feature)?;
    let table = ctx.table();
    if !table.has_distinct(col, 2) {
        return skipped(format!(
            "`{feature}` has a single value: nothing to complete"
        ));
    }
    let trials: Vec<(Vec<usize>, usize)> = match ctx.variant {
        Variant::Paper => {
            if let Some(reason) = need_rows(ctx, EXAMPLE_ROWS + 1) {
                return skipped(reason);
            }
            let distinct = table.distinct_count(col);
            (0..COMPLETION_TRIALS)
                .map(|trial| {
                    let mut picked = spread_rows(ctx, trial, col, distinct, feature)?;
                    let target = picked.pop().expect("five rows were drawn");
                    Ok((picked, target))
                })
                .collect::<Result<_, ProbeError>>()?
        }
        // A target whose value is missing cannot be asked for; the authors' code had no
        // such row among the first five of its files.
        Variant::PaperCode => (0..(COMPLETION_TRIALS as usize).min(table.n_rows()))
            .filter(|&row| !table.is_missing(&table.rows[row][col]))
            .map(|row| (Vec::new(), row))
            .collect(),
    };
    if trials.is_empty() {
        return skipped(format!("rows 0–4 miss every value of `{feature}`"));
    }
    let s = ctx.serialization;
    let answer_prefix = s.pair(feature, "").trim_end().to_string();
    let mut prompts = Vec::new();
    for (trial, (examples, target)) in trials.into_iter().enumerate() {
        let hidden_row = (0..table.n_cols())
            .map(|c| {
                let value = if c == col {
                    HIDDEN_VALUE
                } else {
                    table.rows[target][c].as_str()
                };
                s.pair(&table.columns[c].name, value)
            })
            .collect::<Vec<_>>()
            .join(&s.feature_sep);
        let values = [
            ("name", ctx.dataset.name.as_str()),
            ("features", &ctx.feature_list()),
            ("rows", &ctx.rows_text(&examples)),
            ("hidden_row", &hidden_row),
            ("hidden", HIDDEN_VALUE),
            ("feature", feature),
            ("answer_prefix", &answer_prefix),
        ];
        let templates = ctx.pack.templates(test);
        let template = match (&templates.without_rows, examples.is_empty()) {
            (Some(without_rows), true) => without_rows,
            _ => &templates.template,
        };
        let text = super::pack::render(template, &values);
        let fields = vec![(feature.to_string(), cell(table, target, col))];
        let mut prompt = ctx.prompt(
            test,
            trial as u32,
            text,
            Expected::Row {
                fields,
                scope: Alg2Scope::FirstLine,
            },
        );
        prompt.note = Some(format!("feature: {feature}, row {target} (from 0)"));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Five distinct rows for one trial of test 9, with the feature present and its values
/// spread: a value is taken again only once every value of the column has appeared as
/// often (pairwise distinct when the column has at least five values).
fn spread_rows(
    ctx: &ProbeContext<'_>,
    trial: u32,
    col: usize,
    distinct: usize,
    feature: &str,
) -> Result<Vec<usize>, ProbeError> {
    let table = ctx.table();
    let mut rng = ctx.rng(TestId::FeatureCompletion, trial);
    let mut picked: Vec<usize> = Vec::with_capacity(EXAMPLE_ROWS + 1);
    let mut uses: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for _ in 0..MAX_REDRAWS * (EXAMPLE_ROWS + 1) {
        if picked.len() == EXAMPLE_ROWS + 1 {
            return Ok(picked);
        }
        let row = rng.below(table.n_rows());
        let value = table.rows[row][col].as_str();
        let round = picked.len() / distinct;
        let used = uses.get(value).copied().unwrap_or(0);
        if !table.is_missing(value) && used <= round && !picked.contains(&row) {
            picked.push(row);
            *uses.entry(value).or_default() += 1;
        }
    }
    if picked.len() == EXAMPLE_ROWS + 1 {
        return Ok(picked);
    }
    Err(ctx.error(format!(
        "could not draw {} rows with spread values of `{feature}`",
        EXAMPLE_ROWS + 1
    )))
}
