//! The twelve tests of SPEC §2 as probes: prompts from (dataset, serialization, seed),
//! verdicts from outputs, cell results from verdicts.
//!
//! Architecture Invariant: pure. No IO, no clock, no global RNG: every draw comes from
//! [`rng::TrialRng`] keyed by (seed, dataset, test, trial, serialization).

mod classify;
pub mod echo;
mod knowledge;
mod membership;
mod memorization;
pub mod pack;
pub mod rng;

use serde::{Deserialize, Serialize};

use crate::dataset::{Dataset, Serialization, Table, Value};
use crate::decide::{self, Alg1Profile, Alg2Scope, Answer, Cell, Dictionary, Word};
pub use membership::{LabeledRow, likelihood_rows};
pub use pack::PromptPack;

/// How the serialization of a test without rows (1, 2, 3, 6) is spelled in the cache,
/// the plan and the analytics: one cell shared by every template.
pub const NO_SERIALIZATION: &str = "-";

/// The tests, in the paper's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestId {
    FeatureListInformed,
    FeatureListUninformed,
    RecognitionFeatures,
    RecognitionExamples,
    FeatureValuesInformed,
    FeatureValuesUninformed,
    IncompleteCompletion,
    FullCompletion,
    FeatureCompletion,
    Membership,
    #[serde(rename = "classify-0shot")]
    Classify0Shot,
    #[serde(rename = "classify-1shot")]
    Classify1Shot,
}

/// What a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    /// Uses metadata only.
    Knowledge,
    /// Uses rows.
    Memorization,
    /// Classification accuracy (not a contamination test).
    Classification,
}

impl TestId {
    pub const ALL: [TestId; 12] = [
        TestId::FeatureListInformed,
        TestId::FeatureListUninformed,
        TestId::RecognitionFeatures,
        TestId::RecognitionExamples,
        TestId::FeatureValuesInformed,
        TestId::FeatureValuesUninformed,
        TestId::IncompleteCompletion,
        TestId::FullCompletion,
        TestId::FeatureCompletion,
        TestId::Membership,
        TestId::Classify0Shot,
        TestId::Classify1Shot,
    ];

    /// The nine tests that make up the contamination score (SPEC §4).
    pub const CONTAMINATION: [TestId; 9] = [
        TestId::FeatureListInformed,
        TestId::FeatureListUninformed,
        TestId::RecognitionFeatures,
        TestId::RecognitionExamples,
        TestId::FeatureValuesInformed,
        TestId::FeatureValuesUninformed,
        TestId::IncompleteCompletion,
        TestId::FullCompletion,
        TestId::FeatureCompletion,
    ];

    pub fn id(self) -> &'static str {
        match self {
            TestId::FeatureListInformed => "feature-list-informed",
            TestId::FeatureListUninformed => "feature-list-uninformed",
            TestId::RecognitionFeatures => "recognition-features",
            TestId::RecognitionExamples => "recognition-examples",
            TestId::FeatureValuesInformed => "feature-values-informed",
            TestId::FeatureValuesUninformed => "feature-values-uninformed",
            TestId::IncompleteCompletion => "incomplete-completion",
            TestId::FullCompletion => "full-completion",
            TestId::FeatureCompletion => "feature-completion",
            TestId::Membership => "membership",
            TestId::Classify0Shot => "classify-0shot",
            TestId::Classify1Shot => "classify-1shot",
        }
    }

    /// The paper's test number (1–12).
    pub fn number(self) -> u8 {
        TestId::ALL.iter().position(|&t| t == self).unwrap() as u8 + 1
    }

    /// Accepts the id or the test number.
    pub fn parse(text: &str) -> Option<TestId> {
        let text = text.trim();
        TestId::ALL
            .into_iter()
            .find(|t| t.id() == text || t.number().to_string() == text)
    }

    /// Parses or explains which ids exist.
    pub fn parse_or_explain(text: &str) -> Result<TestId, ProbeError> {
        TestId::parse(text).ok_or_else(|| ProbeError::UnknownTest(text.to_string()))
    }

    pub fn kind(self) -> TestKind {
        match self {
            TestId::FeatureListInformed
            | TestId::FeatureListUninformed
            | TestId::RecognitionFeatures => TestKind::Knowledge,
            TestId::Classify0Shot | TestId::Classify1Shot => TestKind::Classification,
            _ => TestKind::Memorization,
        }
    }

    /// Max output tokens (paper's Table 1; 4 for the short-answer tests as in the paper's code).
    pub fn max_tokens(self) -> u32 {
        match self {
            TestId::FeatureListInformed | TestId::FeatureListUninformed => 256,
            TestId::RecognitionFeatures | TestId::RecognitionExamples => 16,
            TestId::FeatureValuesInformed | TestId::FeatureValuesUninformed => 128,
            TestId::IncompleteCompletion => 256,
            TestId::FullCompletion => 512,
            TestId::FeatureCompletion => 64,
            TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => 4,
        }
    }

    /// Whether the prompts contain serialized rows (and so depend on the template).
    /// Tests without rows draw the same prompts under every serialization, so their
    /// requests are shared across templates in the cache.
    pub fn serializes_rows(self) -> bool {
        !matches!(
            self,
            TestId::FeatureListInformed
                | TestId::FeatureListUninformed
                | TestId::RecognitionFeatures
                | TestId::FeatureValuesUninformed
        )
    }
}

impl std::fmt::Display for TestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Errors building prompts.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "unknown test `{0}`; known tests: feature-list-informed, feature-list-uninformed, recognition-features, recognition-examples, feature-values-informed, feature-values-uninformed, incomplete-completion, full-completion, feature-completion, membership, classify-0shot, classify-1shot (or their numbers 1–12)"
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
    pub max_tokens: u32,
    pub expected: Expected,
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
    }
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
        _ => f64::from(u8::from(passed)),
    };
    CellResult {
        passed,
        score,
        trials,
        passed_trials,
        invalid_trials,
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
