//! Tests 11–12: 0-shot and 1-shot classification of held-out rows.

use super::{Expected, Probe, ProbeContext, ProbeError, TestId};

/// Rows classified per cell (SPEC §2).
pub const CLASSIFY_TRIALS: usize = 100;

/// The class question, its answers and each row's correct answer.
struct Task {
    features: Vec<usize>,
    answers: Vec<String>,
    /// The rows with a label and their label, in file order.
    labelled: Vec<(usize, usize)>,
    hint: String,
}

fn task(ctx: &ProbeContext<'_>) -> Result<Task, ProbeError> {
    let table = ctx.table();
    let spec = &ctx.dataset.classification;
    let target = ctx.column(&ctx.dataset.target)?;
    let answers: Vec<String> = spec.answers.iter().map(|a| a.answer.clone()).collect();
    if answers.len() < 2 {
        return Err(ctx.error("the classification needs at least two answers".into()));
    }
    let mut labelled = Vec::with_capacity(table.n_rows());
    for (r, row) in table.rows.iter().enumerate() {
        let raw = row[target].as_str();
        if table.is_missing(raw) {
            // No label, no expected answer: the row is never drawn.
            continue;
        }
        let label = match spec.threshold {
            Some(threshold) => {
                let value: f64 = raw.parse().map_err(|_| {
                    ctx.error(format!("row {}: target `{raw}` is not a number but the question uses a threshold", r + 1))
                })?;
                if value > threshold { 0 } else { 1 }
            }
            None => spec.answers.iter().position(|a| a.values.iter().any(|v| v == raw)).ok_or_else(|| {
                ctx.error(format!(
                    "row {}: target value `{raw}` maps to no answer; add it to a `values` list of [classification]",
                    r + 1
                ))
            })?,
        };
        labelled.push((r, label));
    }
    let features = (0..table.n_cols()).filter(|&c| c != target).collect();
    let hint = match answers.as_slice() {
        [a, b] => format!("{a} or {b}"),
        many => {
            let (last, rest) = many.split_last().expect("at least two answers");
            format!("one of {} or {last}", rest.join(", "))
        }
    };
    Ok(Task {
        features,
        answers,
        labelled,
        hint,
    })
}

/// Why a classification cell has no trials: no row has a target value.
fn no_labels(task: &Task) -> Option<String> {
    task.labelled
        .is_empty()
        .then(|| "no row has a target value to classify".to_string())
}

fn row_text(ctx: &ProbeContext<'_>, task: &Task, row: usize) -> String {
    ctx.serialization
        .row_columns(ctx.table(), row, &task.features)
}

/// The rows to classify with their labels: a seeded sample without replacement among the
/// labelled rows (all rows when no target is missing, so the draw is the paper's).
fn query_rows(ctx: &ProbeContext<'_>, task: &Task, test: TestId) -> Vec<(usize, usize)> {
    let n = task.labelled.len();
    ctx.rng(test, u32::MAX)
        .sample(n, CLASSIFY_TRIALS.min(n))
        .into_iter()
        .map(|i| task.labelled[i])
        .collect()
}

pub(super) fn zero_shot(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::Classify0Shot;
    let task = task(ctx)?;
    let question = &ctx.dataset.classification.question;
    let prompts = query_rows(ctx, &task, test)
        .into_iter()
        .enumerate()
        .map(|(trial, (row, label))| {
            let text = ctx.render(
                test,
                &[
                    ("row", &row_text(ctx, &task, row)),
                    ("question", question),
                    ("answer_hint", &task.hint),
                ],
            );
            let expected = Expected::Choice {
                choices: task.answers.clone(),
                correct: label,
            };
            ctx.prompt(test, trial as u32, text, expected)
        })
        .collect();
    Ok(Probe {
        skipped: no_labels(&task),
        prompts,
    })
}

pub(super) fn one_shot(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let test = TestId::Classify1Shot;
    let task = task(ctx)?;
    let question = &ctx.dataset.classification.question;
    let example_template = ctx
        .pack
        .templates(test)
        .example
        .as_deref()
        .unwrap_or("{row}\nAnswer: {answer}\n");
    let mut rows_of_class: Vec<Vec<usize>> = vec![Vec::new(); task.answers.len()];
    for &(r, label) in &task.labelled {
        rows_of_class[label].push(r);
    }
    let mut prompts = Vec::new();
    for (trial, (row, label)) in query_rows(ctx, &task, test).into_iter().enumerate() {
        let mut rng = ctx.rng(test, trial as u32);
        // One example per class, never the row being asked about, in a random order.
        let mut classes: Vec<usize> = (0..task.answers.len()).collect();
        rng.shuffle(&mut classes);
        let mut examples = String::new();
        for class in classes {
            let candidates = &rows_of_class[class];
            // The query row is skipped by drawing among the others.
            let others = candidates.len() - usize::from(label == class);
            if others == 0 {
                continue;
            }
            let mut pick = rng.below(others);
            if label == class && pick >= candidates.partition_point(|&r| r < row) {
                pick += 1;
            }
            let example = candidates[pick];
            if !examples.is_empty() {
                // A blank line between examples keeps them apart for the model.
                examples.push('\n');
            }
            examples.push_str(&super::pack::render(
                example_template,
                &[
                    ("row", &row_text(ctx, &task, example)),
                    ("question", question),
                    ("answer_hint", &task.hint),
                    ("answer", &task.answers[class]),
                ],
            ));
        }
        let text = ctx.render(
            test,
            &[
                ("examples", examples.trim_end()),
                ("row", &row_text(ctx, &task, row)),
                ("question", question),
                ("answer_hint", &task.hint),
            ],
        );
        let expected = Expected::Choice {
            choices: task.answers.clone(),
            correct: label,
        };
        prompts.push(ctx.prompt(test, trial as u32, text, expected));
    }
    Ok(Probe {
        skipped: no_labels(&task),
        prompts,
    })
}
