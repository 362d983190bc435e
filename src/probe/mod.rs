//! The twelve tests of SPEC §2 as probes: prompts from (dataset, serialization, seed),
//! verdicts from outputs, cell results from verdicts.
//!
//! Architecture Invariant: pure. No IO, no clock, no global RNG: every draw comes from
//! [`rng::TrialRng`] keyed by (seed, dataset, test, trial, serialization).

pub mod chance;
pub mod chance_cells;
mod classify;
pub mod echo;
mod knowledge;
mod membership;
mod memorization;
pub mod pack;
pub mod rng;
mod test_id;
pub mod verbatim;

pub use test_id::{TestId, TestKind};

use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, Serialization, Table, Value};
use crate::decide::{self, Alg1Profile, Alg2Scope, Answer, Cell, Dictionary, Word};
pub use membership::MEMBERSHIP_ROW_NOTE;
pub use membership::{LabeledRow, likelihood_rows, matched_rows, row_texts};
pub use pack::PromptPack;

/// How the serialization of a test without rows (1, 2, 3, 6) is spelled in the cache,
/// the plan and the analytics: one cell shared by every template.
pub const NO_SERIALIZATION: &str = "-";

/// Errors building prompts.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "unknown test `{0}`; known tests: feature-list-informed, feature-list-uninformed, recognition-features, recognition-examples, feature-values-informed, feature-values-uninformed, incomplete-completion, full-completion, feature-completion, membership, classify-0shot, classify-1shot, header, row-completion, feature-completion-verbatim, first-token (or their numbers 1–16; families: all = 1–12, contamination = 1–9, verbatim = 13–16)"
    )]
    UnknownTest(String),
    #[error("dataset `{dataset}`: {message}")]
    Data { dataset: String, message: String },
}

/// How a trial's output is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum Expected {
    /// Alg1 on the expected words.
    Words { words: Vec<Word> },
    /// Alg1 on the dataset's long name, then on each alias (recognition tests 3–4).
    Names { names: Vec<String> },
    /// Alg2 on (feature, value) pairs within the scoped output.
    Row {
        fields: Vec<(String, Cell)>,
        scope: Alg2Scope,
    },
    /// The answer parser; `correct` indexes `choices`.
    Choice {
        choices: Vec<String>,
        correct: usize,
    },
    /// Test 13: the exact continuation of the raw file; passed when the output reproduces
    /// more than `copy_baseline` characters (what copying from the prompt explains) by at
    /// least one whole field ([`verbatim::header_verdict`]).
    Continuation { text: String, copy_baseline: usize },
    /// Test 14: the next raw row, exactly (first non-empty output line).
    ExactRow { row: String },
    /// Test 15: the value of `feature`, exactly.
    ExactValue { feature: String, value: String },
    /// Test 16: the next row's first token; `baseline` is the share of the file's rows
    /// that start with its most common first token.
    FirstToken { token: String, baseline: f64 },
}

impl Expected {
    /// When an answer to this trial may stop being generated: once its test's rule has
    /// read everything it will judge ([`decide::StopRule`], tests 7–9). `None` where the
    /// rule reads the whole answer: Alg1's words may come on any line, and the answer
    /// parser of tests 10–12 invalidates an answer that names a second choice anywhere in
    /// its four tokens (`Yes or no`), so no earlier stop keeps their verdicts.
    pub fn stop_rule(&self) -> Option<decide::StopRule> {
        match self {
            Expected::Row { scope, .. } => scope.stop_rule(),
            _ => None,
        }
    }
}

/// One prompt a run sends, with what it expects back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    pub test: TestId,
    pub dataset: String,
    /// `None` for tests whose prompt has no serialized rows.
    pub serialization: Option<String>,
    pub trial: u32,
    /// What this trial probes, e.g. the feature of tests 5–6.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub note: Option<String>,
    pub text: String,
    /// What chat models are sent instead of `text` (verbatim tests: an instruction with
    /// examples from other datasets around the raw text); `None`: `text` for every model.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chat_text: Option<String>,
    pub max_tokens: u32,
    pub expected: Expected,
}

impl Prompt {
    /// The text sent to a model: [`Prompt::chat_text`] for chat models where there is one.
    pub fn text_for(&self, chat: bool) -> &str {
        match (&self.chat_text, chat) {
            (Some(wrapped), true) => wrapped,
            _ => &self.text,
        }
    }
}

/// The prompts of one (dataset, test, serialization) cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub prompts: Vec<Prompt>,
    /// Why the cell has no prompts (e.g. wine has no categorical feature for tests 5–6).
    pub skipped: Option<String>,
}

/// Which description of the method the prompts follow. Where the paper and the authors'
/// published code differ (SPEC, preamble), the paper is the default and the code is a named
/// variant, so that users can replicate either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The paper's text: test 4 shows 4 random rows; test 9 shows 4 random example rows and
    /// asks about a random row.
    #[default]
    Paper,
    /// The authors' code: test 4 shows the first 5 rows; test 9 shows no example rows and
    /// asks about rows 0–4 in turn.
    PaperCode,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::Paper, Variant::PaperCode];

    pub fn id(self) -> &'static str {
        match self {
            Variant::Paper => "paper",
            Variant::PaperCode => "paper-code",
        }
    }

    /// Parses `paper` or `paper-code`.
    pub fn parse(text: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.id() == text.trim())
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Inputs shared by every test builder.
pub struct ProbeContext<'a> {
    pub dataset: &'a Dataset,
    pub serialization: &'a Serialization,
    pub seed: u64,
    pub pack: &'a PromptPack,
    /// Paper (default) or the authors' code; changes the rows of tests 4 and 9 only.
    pub variant: Variant,
}

impl ProbeContext<'_> {
    fn rng(&self, test: TestId, trial: u32) -> rng::TrialRng {
        rng::TrialRng::new(rng::DrawKey {
            seed: self.seed,
            dataset: &self.dataset.id,
            test: test.id(),
            trial,
            serialization: test
                .serializes_rows()
                .then_some(self.serialization.id.as_str()),
        })
    }

    fn table(&self) -> &Table {
        &self.dataset.table
    }

    fn column(&self, name: &str) -> Result<usize, ProbeError> {
        self.table().column_index(name).ok_or_else(|| {
            self.error(format!(
                "column `{name}` named in the descriptor is not in {}",
                self.table().source.display()
            ))
        })
    }

    fn error(&self, message: String) -> ProbeError {
        ProbeError::Data {
            dataset: self.dataset.id.clone(),
            message,
        }
    }

    fn prompt(&self, test: TestId, trial: u32, text: String, expected: Expected) -> Prompt {
        Prompt {
            test,
            dataset: self.dataset.id.clone(),
            serialization: test
                .serializes_rows()
                .then(|| self.serialization.id.clone()),
            trial,
            note: None,
            text,
            chat_text: None,
            max_tokens: test.max_tokens(),
            expected,
        }
    }

    fn render(&self, test: TestId, values: &[(&str, &str)]) -> String {
        pack::render(&self.pack.templates(test).template, values)
    }

    /// Rows serialized one per line.
    fn rows_text(&self, rows: &[usize]) -> String {
        rows.iter()
            .map(|&r| self.serialization.row(self.table(), r))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn feature_list(&self) -> String {
        self.table().column_names().collect::<Vec<_>>().join(", ")
    }
}

/// Builds the prompts of one test.
pub fn build(test: TestId, ctx: &ProbeContext<'_>) -> Result<Probe, ProbeError> {
    match test {
        TestId::FeatureListInformed => knowledge::feature_list_informed(ctx),
        TestId::FeatureListUninformed => knowledge::feature_list_uninformed(ctx),
        TestId::RecognitionFeatures => knowledge::recognition_features(ctx),
        TestId::RecognitionExamples => memorization::recognition_examples(ctx),
        TestId::FeatureValuesInformed => memorization::feature_values_informed(ctx),
        TestId::FeatureValuesUninformed => memorization::feature_values_uninformed(ctx),
        TestId::IncompleteCompletion => memorization::incomplete_completion(ctx),
        TestId::FullCompletion => memorization::full_completion(ctx),
        TestId::FeatureCompletion => memorization::feature_completion(ctx),
        TestId::Membership => membership::membership(ctx),
        TestId::Classify0Shot => classify::zero_shot(ctx),
        TestId::Classify1Shot => classify::one_shot(ctx),
        TestId::Header => verbatim::header(ctx),
        TestId::RowCompletion => verbatim::row_completion(ctx),
        TestId::FeatureCompletionVerbatim => verbatim::feature_completion_verbatim(ctx),
        TestId::FirstToken => verbatim::first_token_test(ctx),
    }
}

/// The verdict of one trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialVerdict {
    /// Contamination detected (tests 1–9) or correct answer (tests 10–12).
    pub passed: bool,
    /// For answer tests: no admissible answer was found.
    pub invalid: bool,
}

/// Decides one trial from the model's output.
pub fn judge(
    expected: &Expected,
    output: &str,
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> TrialVerdict {
    match expected {
        Expected::Words { words } => TrialVerdict {
            passed: decide::alg1(output, words, dictionary, profile),
            invalid: false,
        },
        Expected::Names { names } => TrialVerdict {
            passed: decide::alg1_any_name(output, names, dictionary, profile),
            invalid: false,
        },
        Expected::Row { fields, scope } => TrialVerdict {
            passed: decide::alg2(output, fields, *scope),
            invalid: false,
        },
        Expected::Choice { choices, correct } => match decide::parse_answer(output, choices) {
            Answer::Valid(index) => TrialVerdict {
                passed: index == *correct,
                invalid: false,
            },
            Answer::Invalid => TrialVerdict {
                passed: false,
                invalid: true,
            },
        },
        Expected::Continuation {
            text,
            copy_baseline,
        } => TrialVerdict {
            passed: verbatim::header_verdict(output, text, *copy_baseline).1,
            invalid: false,
        },
        Expected::ExactRow { row } => TrialVerdict {
            passed: verbatim::row_matches(output, row),
            invalid: false,
        },
        Expected::ExactValue { value, .. } => TrialVerdict {
            passed: verbatim::value_matches(output, value),
            invalid: false,
        },
        Expected::FirstToken { token, .. } => TrialVerdict {
            passed: verbatim::first_token_matches(output, token),
            invalid: false,
        },
    }
}

/// The result of one (model, dataset, test, serialization) cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// Contamination detected (tests 1–9); for tests 10–12, accuracy ≥ 0.5 is *not* implied:
    /// use `score`.
    pub passed: bool,
    /// 1/0 for tests 1–9, accuracy for tests 10–12.
    pub score: f64,
    pub trials: usize,
    pub passed_trials: usize,
    pub invalid_trials: usize,
    /// The probability that one trial passes by chance (see [`trial_chance`]); `None`
    /// where none is defined (tests 1–9).
    #[serde(default)]
    pub trial_chance: Option<f64>,
}

impl CellResult {
    /// The exact one-sided binomial p-value of the passed trials under the chance level.
    pub fn p_value(&self) -> Option<f64> {
        crate::significance::binomial_upper_tail(
            self.passed_trials as u64,
            self.trials as u64,
            self.trial_chance?,
        )
    }
}

/// Aggregates trial verdicts into a cell result (SPEC §2, "trials → cell").
pub fn aggregate(test: TestId, verdicts: &[TrialVerdict]) -> CellResult {
    let trials = verdicts.len();
    let passed_trials = verdicts.iter().filter(|v| v.passed).count();
    let invalid_trials = verdicts.iter().filter(|v| v.invalid).count();
    let passed = match test {
        TestId::IncompleteCompletion => passed_trials >= 3,
        TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => false,
        _ => passed_trials > 0,
    };
    let score = match test.kind() {
        TestKind::Classification => ratio(passed_trials, trials),
        _ if test == TestId::Membership => ratio(passed_trials, trials),
        _ => f64::from(u8::from(passed)),
    };
    CellResult {
        passed,
        score,
        trials,
        passed_trials,
        invalid_trials,
        trial_chance: None,
    }
}

/// One judged trial as the cell decision sees it.
pub struct JudgedTrial<'a> {
    pub expected: &'a Expected,
    pub output: &'a str,
    pub verdict: TrialVerdict,
}

/// The chance level of a trial of `test` (SPEC §8): 0.5 for membership; for
/// classification the majority-class rate among the cell's rows; for the first-token test
/// the share of the file's rows starting with its most common first token; for the other
/// verbatim tests the *shuffled-row rate*: every output judged against the expectation of
/// every other trial of the cell, (matches + 1) / (pairs + 2) so that no match never
/// claims an impossible chance of 0. `None` for tests 1–9.
pub fn trial_chance(
    test: TestId,
    trials: &[JudgedTrial<'_>],
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> Option<f64> {
    if trials.is_empty() {
        return None;
    }
    match test {
        TestId::Membership => Some(0.5),
        TestId::Classify0Shot | TestId::Classify1Shot => {
            let mut counts = std::collections::BTreeMap::new();
            for t in trials {
                if let Expected::Choice { correct, .. } = t.expected {
                    *counts.entry(*correct).or_insert(0usize) += 1;
                }
            }
            let majority = counts.values().copied().max()?;
            Some(majority as f64 / trials.len() as f64)
        }
        TestId::FirstToken => match trials[0].expected {
            Expected::FirstToken { baseline, .. } => Some(*baseline),
            _ => None,
        },
        TestId::Header | TestId::RowCompletion | TestId::FeatureCompletionVerbatim => {
            let mut matches = 0usize;
            let mut pairs = 0usize;
            for (i, a) in trials.iter().enumerate() {
                for (j, b) in trials.iter().enumerate() {
                    if i != j {
                        pairs += 1;
                        matches +=
                            usize::from(judge(b.expected, a.output, dictionary, profile).passed);
                    }
                }
            }
            Some((matches + 1) as f64 / (pairs + 2) as f64)
        }
        _ => None,
    }
}

/// The verbatim tests' decisions, stated once for the reports.
pub const VERBATIM_RULE: &str = "Verbatim tests (13-16) on the raw CSV text: header passes when some cut's output reproduces the file beyond what copying from the prompt explains by at least one whole field (score: longest exact continuation, characters); row-completion, feature-completion-verbatim and first-token pass when their exact matches are significantly above chance (one-sided exact binomial p < 0.05; chance: the shuffled-row rate, resp. the most-common-first-token share); score: share of exact trials.";

/// Decides one sample of a cell: [`aggregate`], with the chance level attached and, for
/// the verbatim tests, their own rule and score ([`VERBATIM_RULE`]).
pub fn decide_cell(
    test: TestId,
    trials: &[JudgedTrial<'_>],
    dictionary: &Dictionary,
    profile: Alg1Profile,
) -> CellResult {
    let verdicts: Vec<TrialVerdict> = trials.iter().map(|t| t.verdict).collect();
    let mut result = aggregate(test, &verdicts);
    result.trial_chance = trial_chance(test, trials, dictionary, profile);
    match test {
        TestId::Header => {
            result.score = trials
                .iter()
                .filter_map(|t| match t.expected {
                    Expected::Continuation {
                        text,
                        copy_baseline,
                    } => Some(verbatim::header_verdict(t.output, text, *copy_baseline).0),
                    _ => None,
                })
                .max()
                .unwrap_or(0) as f64;
        }
        TestId::RowCompletion | TestId::FeatureCompletionVerbatim | TestId::FirstToken => {
            result.score = ratio(result.passed_trials, result.trials);
            result.passed = result.passed_trials > 0
                && result
                    .p_value()
                    .is_some_and(|p| p < crate::significance::ALPHA);
        }
        _ => {}
    }
    result
}

/// How a cell with several samples (SPEC §5: temperature > 0, `samples = n`) is decided,
/// as the reports state it. Each sample is judged on its own by the test's rule.
pub const SAMPLE_RULE: &str = "Each sample is judged on its own by its test's rule (any of n trials, at least 3 of 5, accuracy over the trials); a cell of tests 1-9 passes when any sample passes, with the fraction of samples that pass as its detection rate; the accuracy of tests 10-12 is the mean over samples.";

/// Combines the per-sample results of one cell (each from [`aggregate`] over that sample's
/// trials): tests 1–9 pass when any sample passes; tests 10–12 score the mean accuracy
/// over samples. Trial counts are summed. One sample gives that sample's result.
pub fn aggregate_samples(test: TestId, samples: &[CellResult]) -> CellResult {
    if let [only] = samples {
        return *only;
    }
    let trials = samples.iter().map(|s| s.trials).sum();
    let passed_trials = samples.iter().map(|s| s.passed_trials).sum();
    let invalid_trials = samples.iter().map(|s| s.invalid_trials).sum();
    let passed = samples.iter().any(|s| s.passed);
    let score = match test {
        TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => {
            if samples.is_empty() {
                0.0
            } else {
                samples.iter().map(|s| s.score).sum::<f64>() / samples.len() as f64
            }
        }
        TestId::RowCompletion | TestId::FeatureCompletionVerbatim | TestId::FirstToken => {
            ratio(passed_trials, trials)
        }
        TestId::Header => samples.iter().map(|s| s.score).fold(0.0, f64::max),
        _ => f64::from(u8::from(passed)),
    };
    // Samples of one cell share their expectations; their chance levels differ only by
    // the outputs the shuffled-row rate is computed from: the cell keeps their mean.
    let chances: Vec<f64> = samples.iter().filter_map(|s| s.trial_chance).collect();
    let trial_chance =
        (!chances.is_empty()).then(|| chances.iter().sum::<f64>() / chances.len() as f64);
    CellResult {
        passed,
        score,
        trials,
        passed_trials,
        invalid_trials,
        trial_chance,
    }
}

fn ratio(n: usize, d: usize) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

/// The Alg1 word for one cell (booleans and missing values keep their meaning).
fn word(table: &Table, row: usize, col: usize) -> Word {
    match table.value(row, col) {
        Value::Missing => Word::Missing,
        Value::Bool(b) => Word::Bool(b),
        _ => Word::Text(table.rows[row][col].clone()),
    }
}

/// The Alg2 cell for one value, spelled as in the file.
fn cell(table: &Table, row: usize, col: usize) -> Cell {
    let text = &table.rows[row][col];
    match table.value(row, col) {
        Value::Int(i) => Cell::Int(i),
        Value::Float(f) => Cell::Float(f),
        _ => Cell::Text(text.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests 7–9 stop where their scope's judged line ends; no other decision stops early.
    /// Tests 10–12 cannot: the text after the first answer may make it invalid.
    #[test]
    fn only_row_completions_have_a_stop_rule() {
        let row = |scope| Expected::Row {
            fields: vec![("a".into(), Cell::Int(1))],
            scope,
        };
        assert_eq!(
            row(Alg2Scope::FirstLine).stop_rule(),
            Some(decide::StopRule::FirstLine)
        );
        assert_eq!(
            row(Alg2Scope::FirstRowLike).stop_rule(),
            Some(decide::StopRule::FirstRowLike)
        );
        assert_eq!(row(Alg2Scope::Whole).stop_rule(), None);
        assert_eq!(Expected::Words { words: vec![] }.stop_rule(), None);
        let choice = Expected::Choice {
            choices: vec!["Yes".into(), "No".into()],
            correct: 0,
        };
        assert_eq!(choice.stop_rule(), None);
        let dictionary = Dictionary::shipped().unwrap();
        let verdict = |text| judge(&choice, text, &dictionary, Alg1Profile::Hunspell);
        // Cut after its first answer, `Yes or no` would pass; whole, it is invalid.
        assert!(verdict("Yes").passed);
        assert!(verdict("Yes or no").invalid);
    }
}
