//! What the analytics hand to the report: plain, serializable structs, no connection.
//!
//! Every list is in a fixed order (documented per field) so that the same cache always
//! gives byte-identical reports.

use serde::Serialize;

use super::stats::Interval;
use crate::probe::{TestId, TestKind};

/// Everything the reports show.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The template whose cells the scores use (tests without rows have none). A series
    /// without cells under it is scored with its own template: see
    /// [`SeriesScores::serialization`].
    pub primary_serialization: String,
    /// Every template with at least one cell, by id (tests without rows excluded).
    pub templates: Vec<String>,
    /// The twelve tests, in the paper's order.
    pub tests: Vec<TestInfo>,
    /// Datasets with at least one cell, in display order (the paper's, then by id).
    pub datasets: Vec<DatasetInfo>,
    /// One per (source, model), ranked: contamination (descending), then release date,
    /// label and source. The order of Table 2.
    pub series: Vec<SeriesScores>,
    /// The scored cells of tests 1–9, by series (in `series` order), dataset, test.
    pub grid: Vec<GridCell>,
    /// Tests 1–9 pass rates over every series: per test, then per dataset.
    pub test_pass_rates: Vec<PassRate>,
    pub dataset_pass_rates: Vec<PassRate>,
    /// Membership and 0/1-shot accuracy per series and dataset (series order, test, dataset).
    pub accuracy: Vec<AccuracyCell>,
    /// Contamination against 0-shot, 1-shot and membership accuracy across series.
    pub correlations: Vec<Correlation>,
    pub serialization: SerializationStudy,
    /// Consecutive versions within each family, by release date.
    pub evolution: Vec<EvolutionStep>,
    pub negative_controls: NegativeControls,
    /// Model outputs: per series of ours and test, one trial's output (a passed one when
    /// there is one). Imported results have none.
    pub examples: Vec<Example>,
    /// Every cell of ours with a chance level (membership, classification, verbatim
    /// tests), with its exact binomial p-value and the Holm-adjusted one; by model,
    /// dataset, test number, serialization, seed.
    pub significance: Vec<SignificanceCell>,
    /// The scoring profile the cells were scored with, and its rule in words.
    pub scoring: super::Scoring,
    pub scoring_rule: String,
    /// Every cell of ours with its echo count and chance level (SPEC §8).
    pub evidence: Vec<super::evidence::EvidenceCell>,
    /// The calibration study, when some model declares its exposure (SPEC §8).
    pub calibration: Option<super::calibration::Calibration>,
    /// Every cell of ours with its trials (prompt, output, expected, echo), in Table 2's
    /// order: the report's trial explorer. Imported results have none.
    pub explorer: Vec<ExplorerCell>,
    /// The most trials `explorer` keeps per cell (0: no explorer).
    pub explorer_trials: usize,
    /// The likelihood tests' cells (SPEC §8), by model, dataset, test, template.
    pub likelihood: Vec<crate::store::LikelihoodCellRow>,
    /// Test 17's cells, `row-order`, by model, dataset and seed.
    pub row_order: Vec<crate::store::RowOrderCellRow>,
    /// Model identities, dataset digests and run specs: the results site's
    /// reproducibility blocks.
    pub provenance: super::provenance::Provenance,
}

impl Analysis {
    /// Each dataset's position in [`Analysis::datasets`] (the report's column order).
    pub fn dataset_index(&self) -> std::collections::HashMap<&str, usize> {
        self.datasets
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.as_str(), i))
            .collect()
    }
}

/// One cell's count against its chance level (SPEC §8 "Significance").
#[derive(Debug, Clone, Serialize)]
pub struct SignificanceCell {
    pub model: String,
    pub dataset: String,
    pub test: String,
    pub number: u8,
    /// `paper`, `verbatim`, `likelihood` (number 0) or `row-order` (number 17).
    pub family: &'static str,
    pub serialization: Option<String>,
    pub seed: u64,
    pub passed: bool,
    /// The cell's score (accuracy; share of exact trials; header: longest exact
    /// continuation in characters).
    pub score: f64,
    pub trials: u64,
    pub passed_trials: u64,
    /// Probability that one trial passes by chance (`chance_of` = `trial`, tests 10–16), or
    /// that the cell passes by chance (`cell`, tests 7–9: its chance level); the AUROC of a
    /// blind detector (`auroc`, 0.5, likelihood cells); the chance of one shard's file order
    /// scoring above all its permutations (`shard`, test 17).
    pub chance: f64,
    /// `trial`, `cell`, `auroc` or `shard`: what `chance` is the chance of.
    pub chance_of: &'static str,
    /// Tests 10–16: exact one-sided binomial P(X ≥ passed_trials) under `chance`; tests
    /// 7–9: `chance` when the cell passed, 1 when it did not.
    pub p_value: f64,
    /// Holm-adjusted across the cells of the same model.
    pub p_holm: f64,
    /// Benjamini–Hochberg q-value across every cell of the report that has a p-value.
    pub q_value: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TestInfo {
    pub id: String,
    pub number: u8,
    pub kind: TestKind,
    /// A short name for table headers, e.g. "Feature list (inf.)".
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatasetInfo {
    pub id: String,
    /// The name used in prompts (e.g. "adult income"); the id when unknown.
    pub name: String,
    pub released: Option<String>,
}

/// Which results a series is: ours (`tabcontam`) or imported (e.g. `paper`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SeriesKey {
    pub source: String,
    pub model: String,
}

/// Table 2's row for one series.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesScores {
    #[serde(flatten)]
    pub key: SeriesKey,
    /// 1-based position in the ranking.
    pub rank: usize,
    pub label: String,
    pub family: Option<String>,
    pub release_date: Option<String>,
    pub training_cutoff: Option<String>,
    /// Training step of a checkpoint (spec key `step`), for the timeline.
    pub step: Option<u64>,
    /// The template this series' scores come from: the primary one, or, when the series
    /// has no cell under it, the first of its own templates by id (never a mix). Tests 1,
    /// 2, 3 and 6 have no rows: their cells are shared by every template. `None` when the
    /// series has only such cells.
    pub serialization: Option<String>,
    /// Datasets with at least one cell of tests 1–9.
    pub datasets: usize,
    /// Passed cells of tests 1–9, and the denominator 9 × datasets.
    pub passed: usize,
    pub cells: usize,
    /// passed / cells; `None` without any cell of tests 1–9.
    pub contamination: Option<f64>,
    /// Passed knowledge cells / (3 × datasets), memorization / (6 × datasets).
    pub knowledge: Option<f64>,
    pub memorization: Option<f64>,
    pub skipped: usize,
    /// Samples per prompt (the most of any scored cell of tests 1–9; 1 without sampling).
    pub samples: u64,
    /// With several samples: the mean over the 9 × datasets cells of the fraction of
    /// samples that pass on their own (what one sample alone would score). `contamination`
    /// counts a cell as passed when any sample passes.
    pub sample_contamination: Option<f64>,
    pub membership: Option<MeanAccuracy>,
    pub zero_shot: Option<MeanAccuracy>,
    pub one_shot: Option<MeanAccuracy>,
    /// The versions the servers reported for the cached answers of this model's identity,
    /// known ones first; empty for imported results and where no server reported one.
    pub served: Vec<crate::store::ServedVersion>,
}

/// The mean accuracy over datasets (Table 2's membership, 0-shot and 1-shot rows).
#[derive(Debug, Clone, Serialize)]
pub struct MeanAccuracy {
    /// Mean over datasets of each dataset's accuracy (we divide by the datasets
    /// evaluated; the paper's 0/1-shot means divided by 10 for 9 datasets).
    pub mean: f64,
    pub datasets: usize,
    /// `correct / trials`: the pooled share, the estimate `interval` is built around (the
    /// mean over datasets can fall outside it when datasets have different trial counts:
    /// 10/10 and 50/100 have mean 0.75, pooled 0.545, interval 0.45–0.64).
    pub pooled: f64,
    /// Pooled trials, correct and invalid answers.
    pub trials: u64,
    pub correct: u64,
    pub invalid: u64,
    pub invalid_rate: f64,
    /// Wilson interval of the pooled trials (equal to the mean's when every dataset has
    /// the same number of trials, as in the paper: 100 each).
    pub interval: Option<Interval>,
    /// Exact one-sided binomial test of the pooled trials above 0.5 (membership only):
    /// P(X ≥ correct) under chance, as every "above chance" p of the reports.
    pub p_value: Option<f64>,
}

/// One scored cell of tests 1–9.
#[derive(Debug, Clone, Serialize)]
pub struct GridCell {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub dataset: String,
    pub test: String,
    pub number: u8,
    pub kind: TestKind,
    pub serialization: Option<String>,
    pub seed: u64,
    /// Passed when any sample passes (see `samples_passed`).
    pub passed: bool,
    /// Why the cell has no trials (counts as not passed).
    pub skipped: Option<String>,
    /// Samples per prompt (1 without repeated sampling) and how many of them passed the
    /// test's rule on their own: the cell's detection rate is `samples_passed / samples`.
    pub samples: u64,
    pub samples_passed: u64,
    /// `samples_passed / samples`.
    pub detection_rate: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PassRate {
    /// Test or dataset id.
    pub key: String,
    pub passed: u64,
    pub cells: u64,
    pub rate: Option<f64>,
}

/// Accuracy of one answer test (10–12) on one dataset.
#[derive(Debug, Clone, Serialize)]
pub struct AccuracyCell {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub dataset: String,
    pub test: String,
    /// Samples per prompt; `trials` counts every sample's trials, and `accuracy` (the
    /// pooled rate) equals the mean accuracy over samples since every sample answers the
    /// same prompts.
    pub samples: u64,
    pub trials: u64,
    pub correct: u64,
    pub invalid: u64,
    pub accuracy: f64,
    pub invalid_rate: f64,
    pub interval: Option<Interval>,
    /// Exact one-sided binomial test of "accuracy above 0.5", P(X ≥ correct) (membership
    /// only: its Yes/No classes are balanced 50/50, so 0.5 is chance; classification
    /// classes are not).
    pub p_value: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Correlation {
    /// What contamination is correlated with: `zero_shot`, `one_shot` or `membership`.
    pub against: String,
    /// Series with both values.
    pub n: usize,
    pub pearson: Option<f64>,
    pub spearman: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SerializationStudy {
    /// Per series and seed with cells under two or more templates.
    pub summaries: Vec<SerializationSummary>,
    /// Cells whose verdict differs between templates.
    pub changes: Vec<SerializationChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SerializationSummary {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub seed: u64,
    pub templates: u64,
    /// (dataset, test) cells decided under two or more templates.
    pub compared: u64,
    pub changed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SerializationChange {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub seed: u64,
    pub dataset: String,
    pub test: String,
    /// Templates under which the cell passed, and those under which it did not.
    pub passed_with: Vec<String>,
    pub failed_with: Vec<String>,
}

/// One version of a family against the version released before it.
#[derive(Debug, Clone, Serialize)]
pub struct EvolutionStep {
    pub family: String,
    pub from: SeriesKey,
    pub to: SeriesKey,
    pub to_release_date: String,
    /// Cells (dataset, test) the new version passes and the old did not, and the reverse.
    pub gained: Vec<CellRef>,
    pub lost: Vec<CellRef>,
    /// Contamination of the new version minus the old one's.
    pub delta: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellRef {
    pub dataset: String,
    pub test: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct NegativeControls {
    /// (series, dataset) pairs where the dataset was released after the model's training
    /// cut-off, with how many of their tests 1–9 cells passed.
    pub eligible: Vec<ControlPair>,
    /// Passed cells among them: suspected false positives.
    pub suspected: Vec<SuspectedCell>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ControlPair {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub training_cutoff: String,
    pub dataset: String,
    pub released: String,
    pub cells: u64,
    pub passed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SuspectedCell {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub dataset: String,
    pub test: String,
}

/// One model output shown in the report (untrusted text: every renderer escapes it).
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub test: String,
    pub dataset: String,
    pub serialization: Option<String>,
    pub trial: u32,
    pub passed: bool,
    pub output: String,
}

/// One cell of ours with the trials shown.
#[derive(Debug, Clone, Serialize)]
pub struct ExplorerCell {
    #[serde(flatten)]
    pub key: SeriesKey,
    pub dataset: String,
    pub test: TestId,
    pub serialization: Option<String>,
    pub seed: u64,
    /// The cell's verdict (tests 1–9) as stored.
    pub passed: bool,
    /// Trials the cell has (every sample), of which `trials` shows the first.
    pub total_trials: usize,
    pub passed_trials: usize,
    pub echo_trials: usize,
    /// The run whose decision the cell holds (see [`super::provenance::RunOrigin`]).
    pub run_id: Option<i64>,
    pub trials: Vec<ExplorerTrial>,
}

/// One trial as the model saw and answered it.
#[derive(Debug, Clone, Serialize)]
pub struct ExplorerTrial {
    pub sample: u32,
    pub trial: u32,
    /// The request key of the judged response, hex (its cache entry).
    pub request_key: String,
    pub note: Option<String>,
    pub prompt: String,
    pub output: String,
    /// Texts to highlight: the expected words, names, row values or correct choice.
    pub expected: Vec<String>,
    /// Completion tests (7–9): the true row (the expected fields in the cell's template),
    /// and the part of the output it is judged against.
    pub truth: Option<String>,
    pub judged: Option<String>,
    pub passed: bool,
    pub invalid: bool,
    /// A pass whose evidence was already printed in the prompt.
    pub echo: bool,
}
