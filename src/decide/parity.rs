//! Parity with the authors' logged verdicts: every record of `algorithm1.jsonl` and
//! `algorithm2.jsonl` (one judged LLM output per line: `model`, `test`, `dataset`, `output`,
//! `expected`, `verdict`, `reference_replay`) judged again with our decision code, exactly as
//! our tests apply it; `verdict` and `reference_replay` are only compared with afterwards,
//! never consulted to decide.

use std::path::{Path, PathBuf};

use anyhow::Context;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::{Alg1Profile, Alg2Scope, Cell, Dictionary, Word, alg1, alg1_any_name, alg2};

const ALGORITHM1_FILE: &str = "algorithm1.jsonl";
const ALGORITHM2_FILE: &str = "algorithm2.jsonl";

/// One conformance record; `E` is the shape of `expected`.
#[derive(Debug, Deserialize)]
struct Record<E> {
    model: String,
    test: String,
    dataset: String,
    output: String,
    expected: E,
    verdict: bool,
    reference_replay: bool,
}

/// How one of our tests applies Alg1 to its expected words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WordDecision {
    /// Feature lists and feature values (tests 1, 2, 5, 6): Alg1 on the whole list.
    AllWords,
    /// Dataset recognition (tests 3, 4): Alg1 on the long name, then on each alias.
    AnyName,
}

/// Maps the test names of the authors' logs to how our tests decide.
fn word_decision(test: &str) -> Option<WordDecision> {
    match test {
        "FEATURES UNINFORMED TEST"
        | "FEATURES INFORMED TEST"
        | "VALUES UNINFORMED TEST"
        | "VALUES INFORMED TEST"
        | "VALUES INFORMED EXAMPLES TEST" => Some(WordDecision::AllWords),
        "RECOGNITION DATASET TEST" | "FEATURES REVERSE TEST" => Some(WordDecision::AnyName),
        _ => None,
    }
}

/// Maps the completion test names of the authors' logs to the part of the output judged.
fn row_scope(test: &str) -> Option<Alg2Scope> {
    match test {
        // Tests 7 (and its older non-random variant) and 9.
        "COMPLETION INCOMPLETE TEST"
        | "COMPLETION INCOMPLETE TEST (random)"
        | "COMPLETION FEATURE TEST" => Some(Alg2Scope::FirstLine),
        // Test 8.
        "COMPLETION FULL TEST" => Some(Alg2Scope::FirstRowLike),
        _ => None,
    }
}

/// Agreement counts of one algorithm, as printed by `--json`.
#[derive(Debug, Default, Serialize)]
pub struct Agreement {
    pub agree: usize,
    pub total: usize,
    /// How often our verdict equals the authors' code replayed with the Debian dictionary.
    pub reference_replay_agree: usize,
}

impl Agreement {
    pub fn percent(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            100.0 * self.agree as f64 / self.total as f64
        }
    }
}

/// A record on which our verdict differs from the logged one.
#[derive(Debug)]
pub struct Disagreement {
    pub file: &'static str,
    pub line: usize,
    pub model: String,
    pub test: String,
    pub dataset: String,
    pub expected: String,
    pub output: String,
    pub logged: bool,
    pub ours: bool,
    pub reference_replay: bool,
}

#[derive(Debug, Serialize)]
pub struct ParityReport {
    pub algorithm1: Agreement,
    pub algorithm2: Agreement,
    #[serde(skip)]
    pub disagreements: Vec<Disagreement>,
}

/// Judges both files of `dir` with our decision code.
pub fn judge_dir(dir: &Path, profile: Alg1Profile) -> anyhow::Result<ParityReport> {
    let words_path = dir.join(ALGORITHM1_FILE);
    let rows_path = dir.join(ALGORITHM2_FILE);
    let words_text = read_records_file(&words_path)?;
    let rows_text = read_records_file(&rows_path)?;
    let dictionary = Dictionary::shipped()?;

    let mut report = ParityReport {
        algorithm1: Agreement::default(),
        algorithm2: Agreement::default(),
        disagreements: Vec::new(),
    };

    for (line, record) in parse_lines::<Vec<Word>>(&words_path, &words_text) {
        let record = record?;
        let decision = word_decision(&record.test)
            .with_context(|| unknown_test_message(&words_path, line, &record.test, "word test"))?;
        let ours = match decision {
            WordDecision::AllWords => alg1(&record.output, &record.expected, &dictionary, profile),
            WordDecision::AnyName => {
                let names = names_of(&record.expected);
                alg1_any_name(&record.output, &names, &dictionary, profile)
            }
        };
        tally(
            &mut report.algorithm1,
            &mut report.disagreements,
            ALGORITHM1_FILE,
            line,
            record,
            ours,
        );
    }

    for (line, record) in parse_lines::<IndexMap<String, Cell>>(&rows_path, &rows_text) {
        let record = record?;
        let scope = row_scope(&record.test).with_context(|| {
            unknown_test_message(&rows_path, line, &record.test, "completion test")
        })?;
        let expected: Vec<(String, Cell)> = record
            .expected
            .iter()
            .map(|(feature, value)| (feature.clone(), value.clone()))
            .collect();
        let ours = alg2(&record.output, &expected, scope);
        tally(
            &mut report.algorithm2,
            &mut report.disagreements,
            ALGORITHM2_FILE,
            line,
            record,
            ours,
        );
    }
    Ok(report)
}

/// Counts one judged record and keeps it when it disagrees with the logged verdict.
fn tally<E: Serialize>(
    agreement: &mut Agreement,
    disagreements: &mut Vec<Disagreement>,
    file: &'static str,
    line: usize,
    record: Record<E>,
    ours: bool,
) {
    agreement.total += 1;
    if ours == record.reference_replay {
        agreement.reference_replay_agree += 1;
    }
    if ours == record.verdict {
        agreement.agree += 1;
        return;
    }
    // Serializing a value that was just deserialized cannot fail; an empty string would only
    // blank the listing, never change a count.
    let expected = serde_json::to_string(&record.expected).unwrap_or_default();
    disagreements.push(Disagreement {
        file,
        line,
        model: record.model,
        test: record.test,
        dataset: record.dataset,
        expected,
        output: record.output,
        logged: record.verdict,
        ours,
        reference_replay: record.reference_replay,
    });
}

/// The dataset names of a recognition record: long name first, then the aliases.
fn names_of(expected: &[Word]) -> Vec<String> {
    expected
        .iter()
        .filter_map(|word| match word {
            Word::Text(name) => Some(name.clone()),
            _ => None,
        })
        .collect()
}

fn unknown_test_message(path: &Path, line: usize, test: &str, kind: &str) -> String {
    format!(
        "{}:{line}: unknown {kind} {test:?} (this command knows the test names of the authors' logs)",
        path.display()
    )
}

fn read_records_file(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read {} (the parity directory must hold {ALGORITHM1_FILE} and {ALGORITHM2_FILE})",
            path.display()
        )
    })
}

/// Parses each non-blank line of a JSONL file; errors name the file and the 1-based line.
fn parse_lines<'a, E: serde::de::DeserializeOwned>(
    path: &'a Path,
    text: &'a str,
) -> impl Iterator<Item = (usize, anyhow::Result<Record<E>>)> + 'a {
    let path: PathBuf = path.to_path_buf();
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(move |(index, line)| {
            let number = index + 1;
            let record = serde_json::from_str::<Record<E>>(line).map_err(|error| {
                anyhow::anyhow!(
                    "{}:{number}: malformed record: {error} (each line must be one JSON object with model, test, dataset, output, expected, verdict, reference_replay)",
                    path.display()
                )
            });
            (number, record)
        })
}
