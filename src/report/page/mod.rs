//! The report's view: numbers formatted, names resolved, figures drawn — what the HTML and
//! LaTeX templates interpolate. Strings here are raw text; the templates escape them.

use std::collections::HashMap;

use anyhow::Context;
use askama::Template;

use super::explorer::{ExplorerSeries, PromptView};
use super::{File, Options};
use crate::analyze::{Analysis, SeriesKey};
use crate::probe::TestId;

mod figures;
pub(in crate::report) mod format;
mod tables;

pub use figures::*;
use format::*;
pub use tables::*;

pub struct Page {
    /// The scoring profile's rule in words (`paper` or `strict`).
    pub scoring_rule: String,
    /// Every cell of ours with its echo count and chance level (SPEC §8).
    pub evidence: Vec<super::evidence_page::EvidenceRow>,
    /// The calibration study, when some model declares its exposure.
    pub calibration: Option<super::evidence_page::CalibrationView>,
    pub timestamp: Option<String>,
    /// Whether any cell has several samples (SPEC §5): Table 2 then states the sample rule
    /// and shows the per-sample contamination, and per-cell detection rates are shown.
    pub sampled: bool,
    pub sample_rule: &'static str,
    pub sample_rates: Vec<SampleRateTable>,
    pub primary_serialization: String,
    /// One line per series scored with another template than the primary one (it has no
    /// cell under the primary template), naming that template.
    pub template_notes: Vec<String>,
    /// Per model whose server reported them, the versions that answered (issue 27).
    pub served_notes: Vec<String>,
    pub models: usize,
    pub datasets: Vec<DatasetCol>,
    pub tests: Vec<TestRow>,
    pub table2: Vec<Table2Row>,
    pub heatmaps: Vec<Heatmap>,
    pub test_rates: Vec<RateRow>,
    pub dataset_rates: Vec<RateRow>,
    pub accuracy_tables: Vec<AccuracyTable>,
    /// Cells with a chance level: pass/fail with the p-value beside it (SPEC §8).
    pub significance: Vec<SignificanceRow>,
    pub significance_note: &'static str,
    pub verbatim_rule: &'static str,
    pub correlations: Vec<CorrelationRow>,
    pub scatter_svg: Option<String>,
    pub serialization_summaries: Vec<SerializationSummaryRow>,
    pub serialization_changes: Vec<SerializationChangeRow>,
    pub evolution: Vec<EvolutionRow>,
    pub controls: Vec<ControlRow>,
    pub suspected: Vec<SuspectedRow>,
    pub examples: Vec<ExampleGroup>,
    /// Every trial of our cells (HTML only).
    pub explorer: Vec<ExplorerSeries>,
    /// The explorer's distinct prompts, each shown once.
    pub explorer_prompts: Vec<PromptView>,
    pub explorer_trials_cap: usize,
    /// One figure per model family with two or more placed versions.
    pub timelines: Vec<TimelineView>,
    /// The likelihood section (SPEC §8); `None` when no likelihood test was run.
    pub likelihood: Option<super::likelihood::LikelihoodView>,
    /// Test 17's table (empty when it was not run).
    pub row_order: Vec<super::likelihood::RowOrderRow>,
    /// Membership cells beside the blind baseline of their rows (empty when none has one).
    pub membership_blind: Vec<super::likelihood::MembershipBlindRow>,
    /// With `report --calibration`: the card's path as given, and per test it measured
    /// (tests 1–16, likelihood detectors) its label and what its verdicts mean.
    pub calibration_source: Option<String>,
    pub calibration_notes: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "report.html")]
pub struct HtmlReport<'a> {
    pub page: &'a Page,
}

#[derive(Template)]
#[template(path = "report.tex", syntax = "tex")]
struct LatexReport<'a> {
    page: &'a Page,
    table2: &'a str,
}

#[derive(Template)]
#[template(path = "table2.tex", syntax = "tex")]
struct Table2Tex<'a> {
    rows: &'a [Table2Row],
    sampled: bool,
    sample_rule: &'a str,
}

impl Page {
    pub fn new(analysis: &Analysis, options: &Options) -> Page {
        let labels: HashMap<&SeriesKey, &str> = analysis
            .series
            .iter()
            .map(|s| (&s.key, s.label.as_str()))
            .collect();
        let label_of = |key: &SeriesKey| {
            labels
                .get(key)
                .map_or_else(|| key.model.clone(), |l| l.to_string())
        };
        let dataset_names: HashMap<&str, &str> = analysis
            .datasets
            .iter()
            .map(|d| (d.id.as_str(), d.name.as_str()))
            .collect();
        let dataset_name = |id: &str| {
            dataset_names
                .get(id)
                .map_or_else(|| id.to_string(), |n| n.to_string())
        };
        let test_name = |id: &str| {
            analysis
                .tests
                .iter()
                .find(|t| t.id == id)
                .map_or_else(|| id.to_string(), |t| format!("{} {}", t.number, t.name))
        };
        let datasets: Vec<DatasetCol> = analysis
            .datasets
            .iter()
            .map(|d| DatasetCol {
                id: d.id.clone(),
                name: d.name.clone(),
                released: d.released.clone().unwrap_or_default(),
            })
            .collect();

        let sample_rates = sample_rates(analysis);
        let (explorer, explorer_prompts, anchors) =
            super::explorer::explorer(analysis, &dataset_name, &test_name);
        let mut table2 = table2(&analysis.series);
        for (row, s) in table2.iter_mut().zip(0..) {
            let anchor = format!("explorer-{}", s + 1);
            row.explorer_anchor = explorer
                .iter()
                .any(|e| e.anchor == anchor)
                .then_some(anchor);
        }
        Page {
            scoring_rule: analysis.scoring_rule.clone(),
            evidence: super::evidence_page::evidence_rows(analysis),
            calibration: super::evidence_page::calibration_view(analysis),
            explorer,
            explorer_prompts,
            explorer_trials_cap: analysis.explorer_trials,
            timelines: timelines(analysis),
            timestamp: options.timestamp.clone(),
            sampled: analysis.series.iter().any(|s| s.samples > 1),
            sample_rule: crate::probe::SAMPLE_RULE,
            sample_rates,
            primary_serialization: analysis.primary_serialization.clone(),
            template_notes: template_notes(analysis),
            served_notes: served_notes(analysis),
            models: analysis.series.len(),
            tests: analysis
                .tests
                .iter()
                .map(|t| TestRow {
                    number: t.number,
                    name: t.name.clone(),
                    id: t.id.clone(),
                    kind: kind_name(t.kind),
                    calibration: options
                        .calibration
                        .as_ref()
                        .and_then(|c| c.note_of(&t.id, analysis.scoring)),
                })
                .collect(),
            table2,
            heatmaps: heatmaps(analysis, &|s, d, t| {
                anchors.by_cell.get(&(s, d + 1, t)).map(|a| format!("#{a}"))
            }),
            test_rates: analysis
                .test_pass_rates
                .iter()
                .map(|r| RateRow {
                    name: test_name(&r.key),
                    passed: r.passed,
                    cells: r.cells,
                    rate: opt(r.rate),
                    calibration: options
                        .calibration
                        .as_ref()
                        .map(|c| c.detects_from(&r.key, analysis.scoring)),
                })
                .collect(),
            dataset_rates: analysis
                .dataset_pass_rates
                .iter()
                .map(|r| RateRow {
                    name: dataset_name(&r.key),
                    passed: r.passed,
                    cells: r.cells,
                    rate: opt(r.rate),
                    calibration: None,
                })
                .collect(),
            accuracy_tables: accuracy_tables(analysis, &datasets, &anchors),
            significance: significance_rows(analysis),
            significance_note: crate::significance::MULTIPLE_COMPARISONS_NOTE,
            verbatim_rule: crate::probe::VERBATIM_RULE,
            correlations: analysis
                .correlations
                .iter()
                .map(|c| CorrelationRow {
                    against: match c.against.as_str() {
                        "zero_shot" => "0-shot accuracy",
                        "one_shot" => "1-shot accuracy",
                        _ => "membership accuracy",
                    }
                    .to_string(),
                    n: c.n,
                    pearson: opt(c.pearson),
                    spearman: opt(c.spearman),
                })
                .collect(),
            scatter_svg: scatter(&analysis.series),
            serialization_summaries: analysis
                .serialization
                .summaries
                .iter()
                .map(|s| SerializationSummaryRow {
                    label: label_of(&s.key),
                    source: s.key.source.clone(),
                    seed: s.seed,
                    templates: s.templates,
                    compared: s.compared,
                    changed: s.changed,
                })
                .collect(),
            serialization_changes: analysis
                .serialization
                .changes
                .iter()
                .map(|c| SerializationChangeRow {
                    label: label_of(&c.key),
                    seed: c.seed,
                    dataset: dataset_name(&c.dataset),
                    test: test_name(&c.test),
                    passed_with: c.passed_with.join(", "),
                    failed_with: c.failed_with.join(", "),
                })
                .collect(),
            evolution: analysis
                .evolution
                .iter()
                .map(|e| {
                    let cells = |cells: &[crate::analyze::CellRef]| {
                        if cells.is_empty() {
                            NONE.to_string()
                        } else {
                            cells
                                .iter()
                                .map(|c| {
                                    format!(
                                        "{} (test {})",
                                        dataset_name(&c.dataset),
                                        TestId::parse(&c.test).map_or(0, |t| t.number())
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    };
                    EvolutionRow {
                        family: e.family.clone(),
                        from: label_of(&e.from),
                        to: label_of(&e.to),
                        release_date: e.to_release_date.clone(),
                        delta: e
                            .delta
                            .map_or_else(|| NONE.to_string(), |d| format!("{d:+.2}")),
                        gained: cells(&e.gained),
                        lost: cells(&e.lost),
                    }
                })
                .collect(),
            controls: analysis
                .negative_controls
                .eligible
                .iter()
                .map(|c| ControlRow {
                    label: label_of(&c.key),
                    source: c.key.source.clone(),
                    cutoff: c.training_cutoff.clone(),
                    dataset: dataset_name(&c.dataset),
                    released: c.released.clone(),
                    passed: c.passed,
                    cells: c.cells,
                })
                .collect(),
            suspected: analysis
                .negative_controls
                .suspected
                .iter()
                .map(|s| SuspectedRow {
                    label: label_of(&s.key),
                    dataset: dataset_name(&s.dataset),
                    test: test_name(&s.test),
                })
                .collect(),
            examples: examples(analysis, &label_of, &dataset_name, &test_name),
            likelihood: super::likelihood::view(&analysis.likelihood),
            row_order: super::likelihood::row_order_rows(&analysis.row_order),
            membership_blind: super::likelihood::membership_blind_rows(&analysis.evidence),
            calibration_source: options.calibration.as_ref().map(|c| c.source.clone()),
            calibration_notes: options
                .calibration
                .as_ref()
                .map(|c| c.notes(analysis))
                .unwrap_or_default(),
            datasets,
        }
    }

    /// `report.tex`, `table2.tex` and one `heatmap-<model>.tex` per series.
    pub fn latex_files(&self) -> anyhow::Result<Vec<File>> {
        let table2 = Table2Tex {
            rows: &self.table2,
            sampled: self.sampled,
            sample_rule: self.sample_rule,
        }
        .render()
        .context("rendering templates/table2.tex")?;
        let report = LatexReport {
            page: self,
            table2: &table2,
        }
        .render()
        .context("rendering templates/report.tex")?;
        let mut files = vec![File {
            name: "report.tex".into(),
            contents: report,
        }];
        files.push(File {
            name: "table2.tex".into(),
            contents: table2,
        });
        for heatmap in &self.heatmaps {
            files.push(File {
                name: format!("heatmap-{}.tex", heatmap.file_stem),
                contents: heatmap.tikz.clone(),
            });
        }
        for t in &self.timelines {
            files.push(File {
                name: format!("timeline-{}.tex", t.file_stem),
                contents: t.tikz.clone(),
            });
        }
        Ok(files)
    }
}
