//! Reports: turns an [`Analysis`] into `scores.json`, `report.html` (one self-contained
//! page), `report.tex` (standalone, plus `table2.tex` and `heatmap-<model>.tex` snippets to
//! `\input` into a paper), CSV files for pandas users and `report.md` (Table 2 and the
//! significance table as Markdown).
//!
//! Architecture Invariant: `report` takes plain structs, never a connection; rendering is
//! a pure function of the analysis (and of an optional timestamp, off by default), so the
//! same cache gives byte-identical files.
//!
//! Everything shown is untrusted text (model outputs, and ids, labels and dataset names
//! from user specs): HTML and LaTeX templates escape every interpolation automatically
//! (askama's HTML escaper; [`tex::Tex`] for `.tex`), plotters escapes SVG text, CSV quotes.

pub mod card;
mod csv;
mod evidence_page;
pub mod explorer;
pub mod likelihood;
pub mod markdown;
mod page;
pub mod site;
pub mod svg;
pub mod tex;
pub mod timeline;

use std::path::Path;

use anyhow::Context;
use askama::Template;
use serde::Serialize;

use crate::analyze::{Analysis, MeanAccuracy, SeriesScores};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    Json,
    Html,
    Latex,
    Csv,
    Markdown,
}

/// Rendering settings.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Printed in the reports when set (e.g. `2026-11-22T12:00:00Z`).
    pub timestamp: Option<String>,
    /// A calibration card (`report --calibration`): each test's measured sensitivity and
    /// false-positive rate beside its verdicts.
    pub calibration: Option<card::CardInReport>,
}

/// One output file: a name inside the output folder and its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub contents: String,
}

/// Renders the files of `formats` (in a fixed order whatever the order asked).
pub fn render(
    analysis: &Analysis,
    formats: &[Format],
    options: &Options,
) -> anyhow::Result<Vec<File>> {
    let mut formats = formats.to_vec();
    formats.sort();
    formats.dedup();
    let page = page::Page::new(analysis, options);
    let mut files = Vec::new();
    for format in formats {
        match format {
            Format::Json => files.push(File {
                name: "scores.json".into(),
                contents: scores_json(analysis, options)?,
            }),
            Format::Html => files.push(File {
                name: "report.html".into(),
                contents: page::HtmlReport { page: &page }
                    .render()
                    .context("rendering templates/report.html")?,
            }),
            Format::Latex => files.extend(page.latex_files()?),
            Format::Csv => files.extend(csv::files(analysis)),
            Format::Markdown => files.push(File {
                name: "report.md".into(),
                contents: markdown::report(analysis, options.timestamp.as_deref()),
            }),
        }
    }
    Ok(files)
}

/// Writes rendered files into `dir` (created when missing). Each file is written to a
/// temporary name and renamed, so a reader never sees half a report.
pub fn write(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the report folder {}", dir.display()))?;
    for file in files {
        let path = dir.join(&file.name);
        let partial = dir.join(format!(".{}.partial", file.name));
        std::fs::write(&partial, &file.contents)
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, &path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `scores.json`: `{"models": [{"id", "label", "contamination", "membership", "zero_shot",
/// "one_shot", …}], "grid": [...], …}`, models in Table 2's order.
fn scores_json<'a>(analysis: &'a Analysis, options: &'a Options) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct ScoresJson<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        generated_at: Option<&'a str>,
        primary_serialization: &'a str,
        /// How cells with several samples are decided (SPEC §5; see `probe::SAMPLE_RULE`).
        sample_rule: SampleRuleJson,
        models: Vec<ModelJson<'a>>,
        grid: &'a [crate::analyze::GridCell],
        /// The twelve tests; with `--calibration`, each measured one has a `calibration`
        /// object (the card's figures at its reference dose).
        tests: Vec<TestJson<'a>>,
        datasets: &'a [crate::analyze::DatasetInfo],
        test_pass_rates: &'a [crate::analyze::PassRate],
        dataset_pass_rates: &'a [crate::analyze::PassRate],
        accuracy: &'a [crate::analyze::AccuracyCell],
        correlations: &'a [crate::analyze::Correlation],
        serialization: &'a crate::analyze::SerializationStudy,
        evolution: &'a [crate::analyze::EvolutionStep],
        negative_controls: &'a crate::analyze::NegativeControls,
        examples: &'a [crate::analyze::Example],
        /// Cells with a p-value: `p_value`, `p_holm` (per model) and `q_value`
        /// (Benjamini–Hochberg across the report).
        significance: &'a [crate::analyze::SignificanceCell],
        significance_note: &'static str,
        verbatim_rule: &'static str,
        /// The scoring profile (`paper`, `strict` or `fdr`) and its rule.
        scoring: crate::analyze::Scoring,
        scoring_rule: &'a str,
        /// Every cell of ours with its echo count and chance level (SPEC §8).
        evidence: &'a [crate::analyze::evidence::EvidenceCell],
        /// The calibration study (SPEC §8), when some model declares its exposure.
        #[serde(skip_serializing_if = "Option::is_none")]
        calibration: Option<&'a crate::analyze::calibration::Calibration>,
        /// The likelihood tests (SPEC §8): AUROC of originals vs perturbed rows with its
        /// bootstrap interval, TPR at 5 % FPR and the bootstrap p-value against 0.5, and
        /// the blind baseline beside it.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        likelihood: Vec<LikelihoodJson<'a>>,
        /// Test 17, `row-order`: per (model, dataset), the rank of the file's row order
        /// among seeded permutations in every shard and the exact p-value of their sum.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        row_order: &'a [crate::store::RowOrderCellRow],
        /// With `--calibration`: the card named and every test of the report it measured
        /// (tests 13–16 and the likelihood detectors included).
        #[serde(skip_serializing_if = "Option::is_none")]
        calibration_card: Option<card::CardJson>,
    }
    #[derive(Serialize)]
    struct TestJson<'a> {
        #[serde(flatten)]
        info: &'a crate::analyze::TestInfo,
        #[serde(skip_serializing_if = "Option::is_none")]
        calibration: Option<card::TestCalibrationJson>,
    }
    #[derive(Serialize)]
    struct LikelihoodJson<'a> {
        model: &'a str,
        dataset: &'a str,
        test: &'a str,
        serialization: &'a str,
        seed: u64,
        method: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        auroc: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        auroc_interval: Option<[f64; 2]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tpr_at_5_fpr: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tpr_interval: Option<[f64; 2]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        p: Option<f64>,
        positives: usize,
        negatives: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<&'a str>,
        /// The model-free classifier's AUROC on the same two groups of texts, its
        /// bootstrap interval, and whether the detector's AUROC does not exceed the
        /// interval's upper end or 0.5 (`likelihood::BlindAuroc::not_exceeded_by`).
        #[serde(skip_serializing_if = "Option::is_none")]
        blind_auroc: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        blind_auroc_interval: Option<[f64; 2]>,
        #[serde(skip_serializing_if = "Option::is_none")]
        no_better_than_blind: Option<bool>,
    }
    #[derive(Serialize)]
    struct SampleRuleJson {
        /// `any-sample`: a cell of tests 1–9 passes when any sample passes; tests 10–12
        /// score the mean accuracy over samples.
        id: &'static str,
        text: &'static str,
        /// The most samples per prompt of any model (1: no repeated sampling).
        max_samples: u64,
    }
    #[derive(Serialize)]
    struct ModelJson<'a> {
        id: &'a str,
        source: &'a str,
        label: &'a str,
        rank: usize,
        family: Option<&'a str>,
        release_date: Option<&'a str>,
        training_cutoff: Option<&'a str>,
        contamination: Option<f64>,
        membership: Option<f64>,
        zero_shot: Option<f64>,
        one_shot: Option<f64>,
        knowledge: Option<f64>,
        memorization: Option<f64>,
        /// Passed cells of tests 1–9 and 9 × datasets.
        contamination_passed: usize,
        contamination_cells: usize,
        datasets: usize,
        /// Samples per prompt, and (with several) the mean per-cell detection rate.
        samples: u64,
        sample_contamination: Option<f64>,
        membership_detail: Option<&'a MeanAccuracy>,
        zero_shot_detail: Option<&'a MeanAccuracy>,
        one_shot_detail: Option<&'a MeanAccuracy>,
        /// The versions the server reported for this model's cached answers (`model`,
        /// `fingerprint`, `answers`); absent when none was reported.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        served: &'a [crate::store::ServedVersion],
    }
    let model = |s: &'a SeriesScores| ModelJson {
        id: &s.key.model,
        source: &s.key.source,
        label: &s.label,
        rank: s.rank,
        family: s.family.as_deref(),
        release_date: s.release_date.as_deref(),
        training_cutoff: s.training_cutoff.as_deref(),
        contamination: s.contamination,
        membership: s.membership.as_ref().map(|m| m.mean),
        zero_shot: s.zero_shot.as_ref().map(|m| m.mean),
        one_shot: s.one_shot.as_ref().map(|m| m.mean),
        knowledge: s.knowledge,
        memorization: s.memorization,
        contamination_passed: s.passed,
        contamination_cells: s.cells,
        datasets: s.datasets,
        samples: s.samples,
        sample_contamination: s.sample_contamination,
        membership_detail: s.membership.as_ref(),
        zero_shot_detail: s.zero_shot.as_ref(),
        one_shot_detail: s.one_shot.as_ref(),
        served: &s.served,
    };
    let json = ScoresJson {
        generated_at: options.timestamp.as_deref(),
        primary_serialization: &analysis.primary_serialization,
        sample_rule: SampleRuleJson {
            id: "any-sample",
            text: crate::probe::SAMPLE_RULE,
            max_samples: analysis.series.iter().map(|s| s.samples).max().unwrap_or(1),
        },
        models: analysis.series.iter().map(model).collect(),
        grid: &analysis.grid,
        tests: analysis
            .tests
            .iter()
            .map(|info| TestJson {
                info,
                calibration: options
                    .calibration
                    .as_ref()
                    .and_then(|c| c.test_json(&info.id, analysis.scoring)),
            })
            .collect(),
        datasets: &analysis.datasets,
        test_pass_rates: &analysis.test_pass_rates,
        dataset_pass_rates: &analysis.dataset_pass_rates,
        accuracy: &analysis.accuracy,
        correlations: &analysis.correlations,
        serialization: &analysis.serialization,
        evolution: &analysis.evolution,
        negative_controls: &analysis.negative_controls,
        examples: &analysis.examples,
        significance: &analysis.significance,
        significance_note: crate::significance::MULTIPLE_COMPARISONS_NOTE,
        verbatim_rule: crate::probe::VERBATIM_RULE,
        scoring: analysis.scoring,
        scoring_rule: &analysis.scoring_rule,
        evidence: &analysis.evidence,
        calibration: analysis.calibration.as_ref(),
        likelihood: analysis
            .likelihood
            .iter()
            .map(|c| {
                let s = c.stats.as_ref();
                LikelihoodJson {
                    model: &c.model,
                    dataset: &c.dataset,
                    test: &c.test,
                    serialization: &c.serialization,
                    seed: c.seed,
                    method: &c.method,
                    auroc: s.map(|s| s.auroc),
                    auroc_interval: s.map(|s| [s.auroc_low, s.auroc_high]),
                    tpr_at_5_fpr: s.map(|s| s.tpr_at_5_fpr),
                    tpr_interval: s.map(|s| [s.tpr_low, s.tpr_high]),
                    p: s.map(|s| s.p_value),
                    positives: s.map_or(0, |s| s.positives),
                    negatives: s.map_or(0, |s| s.negatives),
                    skipped: c.skipped.as_deref(),
                    blind_auroc: c.blind.map(|b| b.auroc),
                    blind_auroc_interval: c.blind.map(|b| [b.auroc_low, b.auroc_high]),
                    no_better_than_blind: c.blind.zip(s).map(|(b, s)| b.not_exceeded_by(s.auroc)),
                }
            })
            .collect(),
        row_order: &analysis.row_order,
        calibration_card: options.calibration.as_ref().map(|c| c.json(analysis)),
    };
    let mut text = serde_json::to_string_pretty(&json).context("serializing scores.json")?;
    text.push('\n');
    Ok(text)
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (for `--timestamp`).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// File-name-safe form of a model id for `heatmap-<model>.tex` (ids are untrusted: no path
/// separators, no leading dot).
pub fn file_stem(text: &str) -> String {
    let stem: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let stem = stem.trim_start_matches('.');
    if stem.is_empty() {
        "model".to_string()
    } else {
        stem.chars().take(80).collect()
    }
}
