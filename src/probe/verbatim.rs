//! Verbatim tests 13–16 on the raw CSV text of a dataset (SPEC §8, after Bordt et al.,
//! "Elephants never forget", 2024; the prompts and rules here are our own).
//!
//! The "file text" is the table written back as comma-separated values with the header
//! line: every cell keeps the file's exact spelling, fields holding `,` `"` or a line break
//! are quoted RFC 4180 style, lines end with `\n`. For a comma CSV with a header and no
//! dropped column this is the file byte for byte (checked on the shipped files by
//! `tests/verbatim.rs`); other files (e.g. `adult.data`, `, `-separated and headerless) are
//! shown in this canonical spelling.
//!
//! Base models (raw completion) get the text itself; chat models get
//! [`Prompt::chat_text`]: an instruction with two worked examples cut from *other* shipped
//! datasets, then the same text.

use super::{Expected, Probe, ProbeContext, ProbeError, Prompt, TestId};
use crate::dataset::Table;

/// Rows shown before the one the model must write (Bordt et al.'s default).
pub const PREFIX_ROWS: usize = 10;
/// Trials of row completion, feature completion and first token (Bordt et al.'s default).
pub const TRIALS: u32 = 25;
/// Cut positions of the header test.
pub const HEADER_TRIALS: u32 = 5;
/// The header test cuts inside file lines 2–8 (1 = the header line).
const HEADER_CUT_LINES: std::ops::RangeInclusive<usize> = 2..=8;
/// Longest continuation the header test compares against (characters).
const HEADER_CONTINUATION_CHARS: usize = 800;
/// First-token test: the token is the first field of the row, cut to this many characters
/// (its "first digits" for a number).
const FIRST_TOKEN_CHARS: usize = 4;
/// A rule that predicts at least this share of the file's first tokens from the previous
/// rows makes the first-token test uninformative (row ids, sorted columns).
const PREDICTABLE_SHARE: f64 = 0.5;

/// One field as it appears in a comma CSV.
pub fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// One line of the file text: the row's fields in `order`.
fn csv_line(fields: &[String], order: &[usize]) -> String {
    order
        .iter()
        .map(|&c| csv_field(&fields[c]))
        .collect::<Vec<_>>()
        .join(",")
}

/// The header line in `order`.
fn header_line(table: &Table, order: &[usize]) -> String {
    order
        .iter()
        .map(|&c| csv_field(&table.columns[c].name))
        .collect::<Vec<_>>()
        .join(",")
}

/// Data row `row` as a line of the file text, columns in file order.
pub fn row_line(table: &Table, row: usize) -> String {
    let order: Vec<usize> = (0..table.n_cols()).collect();
    csv_line(&table.rows[row], &order)
}

/// The first `rows` data rows of the file text, header line included, each line ending
/// with `\n`.
pub fn file_text(table: &Table, rows: usize) -> String {
    let order: Vec<usize> = (0..table.n_cols()).collect();
    let mut text = header_line(table, &order);
    text.push('\n');
    for fields in table.rows.iter().take(rows) {
        text.push_str(&csv_line(fields, &order));
        text.push('\n');
    }
    text
}

/// The first token of a row for test 16: its first field, at most [`FIRST_TOKEN_CHARS`]
/// characters.
pub fn first_token(table: &Table, row: usize) -> String {
    let field = csv_field(&table.rows[row][0]);
    field.chars().take(FIRST_TOKEN_CHARS).collect()
}

/// Length in characters of the longest common prefix.
fn common_prefix_chars(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// What the file's structure predicts for the header test: the longest prefix of the
/// continuation that could be copied from somewhere in the prompt (repeated values,
/// delimiters, a repeated row start). A model that only copies never exceeds it.
pub fn copy_baseline(prompt: &str, continuation: &str) -> usize {
    prompt
        .char_indices()
        .map(|(i, _)| common_prefix_chars(&prompt[i..], continuation))
        .max()
        .unwrap_or(0)
}

/// A chat model's answer often opens a code block; the text inside is what it wrote.
pub fn strip_code_fence(output: &str) -> &str {
    let trimmed = output.trim_start_matches([' ', '\t']);
    if let Some(rest) = trimmed.strip_prefix("```") {
        match rest.find('\n') {
            Some(end) => &rest[end + 1..],
            None => "",
        }
    } else {
        output
    }
}

/// The first line of an answer that holds anything, without its line end.
pub fn first_nonempty_line(output: &str) -> &str {
    strip_code_fence(output)
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// Header test decision: how many characters of `continuation` the output reproduces
/// exactly, and whether that is more than copying explains: the reproduced text beyond
/// `copy_baseline` must hold at least two field boundaries (`,` or a line end), i.e. one
/// whole field that nothing in the prompt predicts.
pub fn header_verdict(output: &str, continuation: &str, copy_baseline: usize) -> (usize, bool) {
    let reproduced = common_prefix_chars(strip_code_fence(output), continuation);
    let novel: String = continuation
        .chars()
        .skip(copy_baseline)
        .take(reproduced.saturating_sub(copy_baseline))
        .collect();
    let boundaries = novel.chars().filter(|&c| c == ',' || c == '\n').count();
    (reproduced, reproduced > copy_baseline && boundaries >= 2)
}

/// Whether a row-completion output is the expected row, exactly.
pub fn row_matches(output: &str, row: &str) -> bool {
    first_nonempty_line(output).trim_end() == row
}

/// Whether a feature-completion output is the expected value (as written in the file,
/// or unquoted).
pub fn value_matches(output: &str, value: &str) -> bool {
    let line = first_nonempty_line(output).trim();
    line == csv_field(value) || line == value
}

/// Whether a first-token output starts with the expected token.
pub fn first_token_matches(output: &str, token: &str) -> bool {
    strip_code_fence(output)
        .trim_start_matches(['\n', '\r'])
        .starts_with(token)
}

/// Columns whose values are the row number plus a constant (row ids): predictable, so
/// never the near-unique feature of test 15.
fn is_row_number(table: &Table, col: usize) -> bool {
    if table.n_rows() == 0 {
        return false;
    }
    let parse = |r: usize| table.rows[r][col].trim().parse::<i64>().ok();
    let Some(first) = parse(0) else {
        return false;
    };
    (0..table.n_rows()).all(|r| parse(r) == Some(first + r as i64))
}

/// The near-unique feature of test 15: the column with the most distinct values, row-id
/// columns excluded; the first such column on ties.
pub fn unique_feature(table: &Table) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for col in 0..table.n_cols() {
        if is_row_number(table, col) {
            continue;
        }
        let distinct = table.distinct_count(col);
        if best.is_none_or(|(_, d)| distinct > d) {
            best = Some((col, distinct));
        }
    }
    best.filter(|&(_, d)| d > 1).map(|(c, _)| c)
}

/// The first-token baseline: the share of the file's rows whose first token is the most
/// common one, and that token.
pub fn first_token_baseline(table: &Table) -> (String, f64) {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for r in 0..table.n_rows() {
        *counts.entry(first_token(table, r)).or_default() += 1;
    }
    let (token, count) = counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .unwrap_or_default();
    (token, count as f64 / table.n_rows().max(1) as f64)
}

/// The simple classifier of test 16: predicts each row's first token from the two rows
/// before it with two rules — repeat the previous token (sorted or grouped columns), and
/// continue the arithmetic step (row ids, counters) — and gives the best rule's name and
/// its share of rows predicted right.
pub fn first_token_predictability(table: &Table) -> (&'static str, f64) {
    let n = table.n_rows();
    if n < 3 {
        return ("none", 0.0);
    }
    let (mut repeat, mut step) = (0usize, 0usize);
    let number = |r: usize| table.rows[r][0].trim().parse::<f64>().ok();
    for r in 2..n {
        let token = first_token(table, r);
        if first_token(table, r - 1) == token {
            repeat += 1;
        }
        if let (Some(a), Some(b), Some(c)) = (number(r - 2), number(r - 1), number(r))
            && ((2.0 * b - a) - c).abs() < 1e-9
        {
            step += 1;
        }
    }
    let total = (n - 2) as f64;
    let (repeat, step) = (repeat as f64 / total, step as f64 / total);
    if step >= repeat {
        ("continue the step between the two previous rows", step)
    } else {
        ("repeat the previous row's token", repeat)
    }
}

/// The chat wrapper: an instruction, two examples from other shipped datasets, the text.
fn chat_wrap(instruction: &str, text: &str, examples: &[(String, String)]) -> String {
    let mut out = format!("{instruction}\n\n");
    for (i, (given, answer)) in examples.iter().enumerate() {
        out.push_str(&format!(
            "Example {n}, another file:\nTEXT:\n{given}\nCONTINUATION:\n{answer}\n\n",
            n = i + 1
        ));
    }
    out.push_str(&format!("Now this file:\nTEXT:\n{text}\nCONTINUATION:\n"));
    out
}

/// Two worked examples for the chat wrapper, cut from shipped files of *other* datasets:
/// the first 4 lines as given text, the 5th line as the answer.
fn other_examples(dataset: &str) -> Vec<(String, String)> {
    const SOURCES: [(&str, &str); 3] = [
        ("iris", "iris.csv"),
        ("wine", "wine.csv"),
        ("titanic", "titanic.csv"),
    ];
    SOURCES
        .iter()
        .filter(|(id, _)| *id != dataset)
        .take(2)
        .filter_map(|(_, file)| {
            let bytes = crate::dataset::catalog::builtin_file(file)?;
            let text = std::str::from_utf8(bytes).ok()?;
            let lines: Vec<&str> = text.lines().take(5).collect();
            (lines.len() == 5).then(|| (lines[..4].join("\n") + "\n", lines[4].to_string()))
        })
        .collect()
}

const CHAT_CONTINUE: &str = "You will see the beginning of a CSV file, cut at some point. Continue the file exactly where the text stops, character for character, as it appears in the original file. Write only the continuation: no explanation, no code block.";
const CHAT_NEXT_ROW: &str = "You will see consecutive rows of a CSV file. Write the row that comes next in the original file, exactly as it appears there. Write only that row.";
const CHAT_VALUE: &str = "You will see rows of a CSV file; the last row stops before its last value. Write that value exactly as it appears in the original file. Write only the value.";
const CHAT_FIRST: &str = "You will see consecutive rows of a CSV file. Write the row that comes next in the original file, exactly as it appears there. Write only that row.";

fn verbatim_prompt(
    ctx: &ProbeContext<'_>,
    test: TestId,
    trial: u32,
    text: String,
    instruction: &str,
    expected: Expected,
) -> Prompt {
    let examples = other_examples(&ctx.dataset.id);
    let chat = chat_wrap(instruction, &text, &examples);
    let mut prompt = ctx.prompt(test, trial, text, expected);
    prompt.chat_text = Some(chat);
    prompt
}

fn skipped(reason: String) -> Probe {
    Probe {
        prompts: Vec::new(),
        skipped: Some(reason),
    }
}

/// Test 13: the file's beginning cut at a seeded character inside lines 2–8.
pub fn header(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let table = ctx.table();
    let rows = *HEADER_CUT_LINES.end() + 40;
    let text = file_text(table, rows);
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    // Lines 2..=8 exist only as far as the table has rows.
    let last_line = (*HEADER_CUT_LINES.end()).min(table.n_rows() + 1);
    if last_line < *HEADER_CUT_LINES.start() {
        return Ok(skipped("the file has no data row to cut".into()));
    }
    let mut prompts = Vec::new();
    for trial in 0..HEADER_TRIALS {
        let mut rng = ctx.rng(TestId::Header, trial);
        let line = HEADER_CUT_LINES.start() + rng.below(last_line - HEADER_CUT_LINES.start() + 1);
        let (start, end) = (line_starts[line - 1], line_starts[line] - 1);
        let chars: Vec<usize> = text[start..end]
            .char_indices()
            .map(|(i, _)| start + i)
            .collect();
        // Cut after at least one character of the line, so the prompt never ends on a
        // line break (where the next row's whole first field would be asked).
        let cut = if chars.len() > 1 {
            chars[1 + rng.below(chars.len() - 1)]
        } else {
            end
        };
        let prompt_text = text[..cut].to_string();
        let continuation: String = text[cut..]
            .chars()
            .take(HEADER_CONTINUATION_CHARS)
            .collect();
        let baseline = copy_baseline(&prompt_text, &continuation);
        let mut prompt = verbatim_prompt(
            ctx,
            TestId::Header,
            trial,
            prompt_text,
            CHAT_CONTINUE,
            Expected::Continuation {
                text: continuation,
                copy_baseline: baseline,
            },
        );
        prompt.note = Some(format!("cut in line {line}"));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// A seeded offset whose next row does not occur among the shown rows (an exact copy of a
/// shown row would be an echo, not recall). `None` when the table is too short.
fn offset_without_echo(ctx: &ProbeContext<'_>, test: TestId, trial: u32) -> Option<usize> {
    let table = ctx.table();
    let n = table.n_rows();
    if n <= PREFIX_ROWS {
        return None;
    }
    let mut rng = ctx.rng(test, trial);
    let mut offset = rng.below(n - PREFIX_ROWS);
    for _ in 0..50 {
        let next = &table.rows[offset + PREFIX_ROWS];
        if !table.rows[offset..offset + PREFIX_ROWS].contains(next) {
            return Some(offset);
        }
        offset = rng.below(n - PREFIX_ROWS);
    }
    Some(offset)
}

fn consecutive_rows(table: &Table, offset: usize) -> String {
    (offset..offset + PREFIX_ROWS)
        .map(|r| row_line(table, r) + "\n")
        .collect()
}

/// Test 14: [`PREFIX_ROWS`] consecutive rows from a seeded offset; the next row exactly.
pub fn row_completion(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let table = ctx.table();
    let mut prompts = Vec::new();
    for trial in 0..TRIALS {
        let Some(offset) = offset_without_echo(ctx, TestId::RowCompletion, trial) else {
            return Ok(skipped(format!(
                "the table has {} rows; row completion needs more than {PREFIX_ROWS}",
                table.n_rows()
            )));
        };
        let mut prompt = verbatim_prompt(
            ctx,
            TestId::RowCompletion,
            trial,
            consecutive_rows(table, offset),
            CHAT_NEXT_ROW,
            Expected::ExactRow {
                row: row_line(table, offset + PREFIX_ROWS),
            },
        );
        prompt.note = Some(format!("row {}", offset + PREFIX_ROWS + 1));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Test 15: the header and [`PREFIX_ROWS`] random rows with the near-unique feature moved
/// to the end of every line (so it can be asked last), then a random row cut before it.
pub fn feature_completion_verbatim(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let table = ctx.table();
    let Some(feature) = unique_feature(table) else {
        return Ok(skipped("no column has more than one value".into()));
    };
    if table.n_rows() <= PREFIX_ROWS {
        return Ok(skipped(format!(
            "the table has {} rows; feature completion needs more than {PREFIX_ROWS}",
            table.n_rows()
        )));
    }
    let order: Vec<usize> = (0..table.n_cols())
        .filter(|&c| c != feature)
        .chain(std::iter::once(feature))
        .collect();
    let mut prompts = Vec::new();
    for trial in 0..TRIALS {
        let mut rng = ctx.rng(TestId::FeatureCompletionVerbatim, trial);
        let rows = rng.sample(table.n_rows(), PREFIX_ROWS + 1);
        let (target, examples) = rows.split_last().expect("PREFIX_ROWS + 1 rows");
        let mut text = header_line(table, &order) + "\n";
        for &r in examples {
            text.push_str(&csv_line(&table.rows[r], &order));
            text.push('\n');
        }
        let mut cut = csv_line(&table.rows[*target], &order[..order.len() - 1]);
        cut.push(',');
        text.push_str(&cut);
        let mut prompt = verbatim_prompt(
            ctx,
            TestId::FeatureCompletionVerbatim,
            trial,
            text,
            CHAT_VALUE,
            Expected::ExactValue {
                feature: table.columns[feature].name.clone(),
                value: table.rows[*target][feature].clone(),
            },
        );
        prompt.note = Some(table.columns[feature].name.clone());
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}

/// Test 16: [`PREFIX_ROWS`] consecutive rows; the first token of the next row, against
/// the most-common-first-token baseline. Skipped when a simple rule predicts the token
/// from the previous rows.
pub fn first_token_test(ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    let table = ctx.table();
    let (rule, share) = first_token_predictability(table);
    if share >= PREDICTABLE_SHARE {
        return Ok(skipped(format!(
            "first token predictable from the previous rows: the rule \"{rule}\" predicts {:.0} % of the rows of column `{}` (row ids or a sorted column)",
            share * 100.0,
            table.columns[0].name
        )));
    }
    let (_, baseline) = first_token_baseline(table);
    let mut prompts = Vec::new();
    for trial in 0..TRIALS {
        let Some(offset) = offset_without_echo(ctx, TestId::FirstToken, trial) else {
            return Ok(skipped(format!(
                "the table has {} rows; the first-token test needs more than {PREFIX_ROWS}",
                table.n_rows()
            )));
        };
        let mut prompt = verbatim_prompt(
            ctx,
            TestId::FirstToken,
            trial,
            consecutive_rows(table, offset),
            CHAT_FIRST,
            Expected::FirstToken {
                token: first_token(table, offset + PREFIX_ROWS),
                baseline,
            },
        );
        prompt.note = Some(format!("row {}", offset + PREFIX_ROWS + 1));
        prompts.push(prompt);
    }
    Ok(Probe {
        prompts,
        skipped: None,
    })
}
