//! The report's view: numbers formatted, names resolved, figures drawn — what the HTML and
//! LaTeX templates interpolate. Strings here are raw text; the templates escape them.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use askama::Template;

use super::explorer::{Anchors, ExplorerSeries, PromptView};
use super::svg::{self, Point, Square};
use super::timeline;
use super::{File, Options, file_stem};
use crate::analyze::{Analysis, Interval, MeanAccuracy, SeriesKey, SeriesScores};
use crate::probe::{TestId, TestKind};
use crate::store::OWN_SOURCE;

/// Shown where a value does not exist.
const NONE: &str = "–";

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
}

pub struct TimelineView {
    pub anchor: String,
    pub family: String,
    pub axis: &'static str,
    pub svg: String,
    /// pgfplots figure (already escaped).
    pub tikz: String,
    pub file_stem: String,
    /// Versions in order, with their x value as shown.
    pub versions: String,
    pub left_out: String,
}

pub struct DatasetCol {
    pub id: String,
    pub name: String,
    pub released: String,
}

pub struct TestRow {
    pub number: u8,
    pub name: String,
    pub id: String,
    pub kind: &'static str,
}

pub struct Table2Row {
    pub rank: usize,
    pub label: String,
    pub model: String,
    pub source: String,
    pub contamination: String,
    pub fraction: String,
    pub knowledge: String,
    pub memorization: String,
    pub membership: String,
    pub zero_shot: String,
    pub one_shot: String,
    /// Mean over cells of the fraction of samples that pass (with several samples).
    pub sample_contamination: String,
    /// The series' section of the trial explorer, when it has trials.
    pub explorer_anchor: Option<String>,
    /// The best value of each column is bold, as in the paper.
    pub best_contamination: bool,
    pub best_membership: bool,
    pub best_zero_shot: bool,
    pub best_one_shot: bool,
}

/// Per series with several samples: tests 1–9 × datasets, each cell's detection rate
/// ("3/5": samples that pass the test's rule on their own, over samples).
pub struct SampleRateTable {
    pub label: String,
    pub model: String,
    pub source: String,
    pub samples: u64,
    pub rows: Vec<SampleRateRow>,
}

pub struct SampleRateRow {
    pub test: String,
    /// One per dataset of the page ("3/5", "skipped" or "–").
    pub cells: Vec<String>,
}

pub struct Heatmap {
    pub anchor: String,
    pub label: String,
    pub model: String,
    pub source: String,
    pub score: String,
    pub svg: String,
    /// Rendered `heatmap.tex` (already escaped).
    pub tikz: String,
    pub file_stem: String,
}

pub struct RateRow {
    pub name: String,
    pub passed: u64,
    pub cells: u64,
    pub rate: String,
}

pub struct AccuracyTable {
    pub title: String,
    pub note: String,
    pub datasets: Vec<DatasetCol>,
    pub rows: Vec<AccuracyRow>,
    pub has_p_value: bool,
}

pub struct AccuracyRow {
    pub label: String,
    pub source: String,
    /// Per dataset of the table: accuracy and its interval, or nothing.
    pub cells: Vec<AccuracyCellView>,
    pub mean: String,
    /// Correct over all trials: the estimate `interval` is built around.
    pub pooled: String,
    pub interval: String,
    pub invalid: String,
    pub p_value: String,
}

pub struct AccuracyCellView {
    pub value: String,
    pub detail: String,
    /// The cell's trials in the explorer.
    pub anchor: Option<String>,
}

pub struct CorrelationRow {
    pub against: String,
    pub n: usize,
    pub pearson: String,
    pub spearman: String,
}

pub struct SerializationSummaryRow {
    pub label: String,
    pub source: String,
    pub seed: u64,
    pub templates: u64,
    pub compared: u64,
    pub changed: u64,
}

pub struct SerializationChangeRow {
    pub label: String,
    pub seed: u64,
    pub dataset: String,
    pub test: String,
    pub passed_with: String,
    pub failed_with: String,
}

pub struct EvolutionRow {
    pub family: String,
    pub from: String,
    pub to: String,
    pub release_date: String,
    pub delta: String,
    pub gained: String,
    pub lost: String,
}

pub struct ControlRow {
    pub label: String,
    pub source: String,
    pub cutoff: String,
    pub dataset: String,
    pub released: String,
    pub passed: u64,
    pub cells: u64,
}

pub struct SuspectedRow {
    pub label: String,
    pub dataset: String,
    pub test: String,
}

pub struct ExampleGroup {
    pub label: String,
    pub model: String,
    pub items: Vec<ExampleItem>,
}

pub struct ExampleItem {
    pub test: String,
    pub dataset: String,
    pub serialization: String,
    pub verdict: &'static str,
    pub output: String,
    /// The output's lines (LaTeX prints one paragraph per line).
    pub lines: Vec<String>,
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

#[derive(Template)]
#[template(path = "heatmap.tex", syntax = "tex")]
struct HeatmapTex<'a> {
    title: &'a str,
    datasets: Vec<(usize, String)>,
    tests: Vec<(usize, String)>,
    squares: Vec<TikzSquare>,
    width: usize,
}

struct TikzSquare {
    x: usize,
    y: usize,
    style: &'static str,
    passed: bool,
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
            models: analysis.series.len(),
            tests: analysis
                .tests
                .iter()
                .map(|t| TestRow {
                    number: t.number,
                    name: t.name.clone(),
                    id: t.id.clone(),
                    kind: kind_name(t.kind),
                })
                .collect(),
            table2,
            heatmaps: heatmaps(analysis, &anchors),
            test_rates: analysis
                .test_pass_rates
                .iter()
                .map(|r| RateRow {
                    name: test_name(&r.key),
                    passed: r.passed,
                    cells: r.cells,
                    rate: opt(r.rate),
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

fn kind_name(kind: TestKind) -> &'static str {
    match kind {
        TestKind::Knowledge => "knowledge",
        TestKind::Memorization => "memorization",
        TestKind::Classification => "classification",
    }
}

fn fixed2(x: f64) -> String {
    format!("{x:.2}")
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| NONE.to_string(), fixed2)
}

fn mean(m: &Option<MeanAccuracy>) -> String {
    m.as_ref()
        .map_or_else(|| NONE.to_string(), |m| fixed2(m.mean))
}

fn interval(i: &Option<Interval>) -> String {
    i.as_ref().map_or_else(
        || NONE.to_string(),
        |i| format!("[{:.2}, {:.2}]", i.low, i.high),
    )
}

fn p_value(p: Option<f64>) -> String {
    match p {
        None => NONE.to_string(),
        Some(p) if p < 0.001 => "<0.001".to_string(),
        Some(p) => format!("{p:.3}"),
    }
}

/// One row of the significance table (strings; the templates escape them).
#[derive(Debug, Clone)]
pub struct SignificanceRow {
    pub model: String,
    pub dataset: String,
    pub test: String,
    pub serialization: String,
    pub result: &'static str,
    pub score: String,
    pub count: String,
    pub chance: String,
    pub p_value: String,
    pub p_holm: String,
}

fn significance_rows(analysis: &Analysis) -> Vec<SignificanceRow> {
    let label = |model: &str| {
        analysis
            .series
            .iter()
            .find(|s| s.key.source == crate::store::OWN_SOURCE && s.key.model == model)
            .map_or_else(|| model.to_string(), |s| s.label.clone())
    };
    analysis
        .significance
        .iter()
        .map(|c| SignificanceRow {
            model: label(&c.model),
            dataset: dataset_name_in(analysis, &c.dataset),
            test: format!("{} {}", c.number, c.test),
            serialization: c.serialization.clone().unwrap_or_else(|| NONE.to_string()),
            result: match (c.family, c.number) {
                // Accuracy tests have no pass/fail of their own: the p-value is the verdict.
                ("paper", 10..=12) => "n/a",
                _ if c.passed => "pass",
                _ => "fail",
            },
            score: if c.test == "header" {
                format!("{:.0} chars", c.score)
            } else {
                fixed2(c.score)
            },
            count: format!("{}/{}", c.passed_trials, c.trials),
            chance: format!("{:.3}", c.chance),
            p_value: p_value(Some(c.p_value)),
            p_holm: p_value(Some(c.p_holm)),
        })
        .collect()
}

fn dataset_name_in(analysis: &Analysis, id: &str) -> String {
    analysis
        .datasets
        .iter()
        .find(|d| d.id == id)
        .map_or_else(|| id.to_string(), |d| d.name.clone())
}

fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Series whose scores come from another template than the primary one, and which.
fn template_notes(analysis: &Analysis) -> Vec<String> {
    let primary = analysis.primary_serialization.as_str();
    analysis
        .series
        .iter()
        .filter_map(|s| {
            let template = s.serialization.as_deref()?;
            (template != primary).then(|| {
                let source = if s.key.source == OWN_SOURCE {
                    String::new()
                } else {
                    format!(" ({})", s.key.source)
                };
                format!(
                    "{}{source}: template {template} (no cell under {primary})",
                    s.label
                )
            })
        })
        .collect()
}

fn table2(series: &[SeriesScores]) -> Vec<Table2Row> {
    // Bold: the best value as printed (two decimals), as in the paper's table.
    let best = |get: &dyn Fn(&SeriesScores) -> Option<f64>| {
        series
            .iter()
            .filter_map(get)
            .map(|v| (v * 100.0).round() as i64)
            .max()
    };
    let is_best = |value: Option<f64>, best: Option<i64>| {
        value.is_some_and(|v| Some((v * 100.0).round() as i64) == best)
    };
    let best_contamination = best(&|s| s.contamination);
    let best_membership = best(&|s| s.membership.as_ref().map(|m| m.mean));
    let best_zero = best(&|s| s.zero_shot.as_ref().map(|m| m.mean));
    let best_one = best(&|s| s.one_shot.as_ref().map(|m| m.mean));
    series
        .iter()
        .map(|s| Table2Row {
            rank: s.rank,
            label: s.label.clone(),
            model: s.key.model.clone(),
            source: s.key.source.clone(),
            contamination: opt(s.contamination),
            fraction: if s.cells > 0 {
                format!("{}/{}", s.passed, s.cells)
            } else {
                NONE.to_string()
            },
            knowledge: opt(s.knowledge),
            memorization: opt(s.memorization),
            membership: mean(&s.membership),
            zero_shot: mean(&s.zero_shot),
            one_shot: mean(&s.one_shot),
            sample_contamination: opt(s.sample_contamination),
            explorer_anchor: None,
            best_contamination: is_best(s.contamination, best_contamination),
            best_membership: is_best(s.membership.as_ref().map(|m| m.mean), best_membership),
            best_zero_shot: is_best(s.zero_shot.as_ref().map(|m| m.mean), best_zero),
            best_one_shot: is_best(s.one_shot.as_ref().map(|m| m.mean), best_one),
        })
        .collect()
}

fn sample_rates(analysis: &Analysis) -> Vec<SampleRateTable> {
    let dataset_index: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    analysis
        .series
        .iter()
        .filter(|s| s.samples > 1)
        .map(|s| {
            let mut cells = vec![vec![NONE.to_string(); analysis.datasets.len()]; 9];
            for cell in analysis.grid.iter().filter(|c| c.key == s.key) {
                if let (Some(&d), Some(t)) = (
                    dataset_index.get(cell.dataset.as_str()),
                    (cell.number as usize).checked_sub(1).filter(|&t| t < 9),
                ) {
                    cells[t][d] = match &cell.skipped {
                        Some(_) => "skipped".to_string(),
                        None => format!("{}/{}", cell.samples_passed, cell.samples),
                    };
                }
            }
            SampleRateTable {
                label: s.label.clone(),
                model: s.key.model.clone(),
                source: s.key.source.clone(),
                samples: s.samples,
                rows: analysis
                    .tests
                    .iter()
                    .filter(|t| t.number <= 9)
                    .zip(cells)
                    .map(|(t, cells)| SampleRateRow {
                        test: format!("{} {}", t.number, t.name),
                        cells,
                    })
                    .collect(),
            }
        })
        .collect()
}

fn heatmaps(analysis: &Analysis, anchors: &Anchors) -> Vec<Heatmap> {
    let tests: Vec<_> = analysis.tests.iter().filter(|t| t.number <= 9).collect();
    let test_names: [String; 9] =
        std::array::from_fn(|i| tests.get(i).map_or_else(String::new, |t| t.name.clone()));
    let dataset_index: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let dataset_names: Vec<String> = analysis.datasets.iter().map(|d| d.name.clone()).collect();
    let mut grids: BTreeMap<&SeriesKey, Vec<[Square; 9]>> = BTreeMap::new();
    for cell in &analysis.grid {
        let grid = grids
            .entry(&cell.key)
            .or_insert_with(|| vec![[Square::Missing; 9]; analysis.datasets.len()]);
        if let (Some(&d), Some(t)) = (
            dataset_index.get(cell.dataset.as_str()),
            (cell.number as usize).checked_sub(1),
        ) {
            grid[d][t] = match (cell.passed, &cell.skipped) {
                (true, _) => Square::Passed,
                (false, Some(_)) => Square::Skipped,
                (false, None) => Square::NotPassed,
            };
        }
    }
    let mut stems: HashMap<String, usize> = HashMap::new();
    analysis
        .series
        .iter()
        .enumerate()
        .filter_map(|(index, s)| {
            let squares = grids.get(&s.key)?;
            let title = if s.key.source == OWN_SOURCE {
                s.label.clone()
            } else {
                format!("{} ({})", s.label, s.key.source)
            };
            let mut stem = if s.key.source == OWN_SOURCE {
                file_stem(&s.key.model)
            } else {
                file_stem(&format!("{}-{}", s.key.source, s.key.model))
            };
            // Distinct ids may sanitize to one stem: number the later ones.
            let seen = stems.entry(stem.clone()).or_insert(0);
            *seen += 1;
            if *seen > 1 {
                stem = format!("{stem}-{seen}");
            }
            let tikz = heatmap_tikz(&title, &test_names, &dataset_names, squares);
            let links: Vec<(usize, usize, String)> = (0..dataset_names.len())
                .flat_map(|d| (0..9).map(move |t| (d, t)))
                .filter_map(|(d, t)| {
                    let anchor = anchors.by_cell.get(&(index, d + 1, t as u8 + 1))?;
                    Some((d, t, anchor.clone()))
                })
                .collect();
            let svg = svg::link_heatmap(
                &svg::heatmap(&title, &test_names, &dataset_names, squares),
                &dataset_names,
                &links,
            );
            Some(Heatmap {
                anchor: format!("heatmap-{}", index + 1),
                svg,
                tikz,
                label: s.label.clone(),
                model: s.key.model.clone(),
                source: s.key.source.clone(),
                score: match s.contamination {
                    Some(c) => format!("{:.2} ({}/{})", c, s.passed, s.cells),
                    None => NONE.to_string(),
                },
                file_stem: stem,
            })
        })
        .collect()
}

fn heatmap_tikz(
    title: &str,
    test_names: &[String; 9],
    dataset_names: &[String],
    squares: &[[Square; 9]],
) -> String {
    let squares_view = squares
        .iter()
        .enumerate()
        .flat_map(|(x, column)| {
            column
                .iter()
                .enumerate()
                .map(move |(y, square)| TikzSquare {
                    x,
                    y,
                    style: match square {
                        Square::Passed => "detected",
                        Square::NotPassed => "notdetected",
                        Square::Skipped => "skippedcell",
                        Square::Missing => "missingcell",
                    },
                    passed: *square == Square::Passed,
                })
        })
        .collect();
    HeatmapTex {
        title,
        datasets: dataset_names.iter().cloned().enumerate().collect(),
        tests: test_names.iter().cloned().enumerate().collect(),
        squares: squares_view,
        width: dataset_names.len(),
    }
    .render()
    .expect("templates/heatmap.tex renders plain values")
}

fn accuracy_tables(
    analysis: &Analysis,
    datasets: &[DatasetCol],
    anchors: &Anchors,
) -> Vec<AccuracyTable> {
    let series_index: HashMap<&SeriesKey, usize> = analysis
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.key, i))
        .collect();
    let dataset_position: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i + 1))
        .collect();
    let specs = [
        (
            TestId::Membership,
            "Membership (test 10)",
            "Accuracy at telling original rows from modified ones (chance: 0.50). Mean over datasets (the paper's score); pooled: correct over all trials, with its 95 % Wilson interval; p: exact one-sided binomial test of the pooled trials above 0.5, P(X ≥ correct); invalid: answers that were neither yes nor no (counted as wrong).",
        ),
        (
            TestId::Classify0Shot,
            "0-shot classification (test 11)",
            "Accuracy per dataset; mean over the datasets evaluated (the paper divided by 10 for 9 datasets); pooled: correct over all trials, with its 95 % Wilson interval; invalid: no admissible class in the answer.",
        ),
        (
            TestId::Classify1Shot,
            "1-shot classification (test 12)",
            "As above, with one labelled example per class in the prompt.",
        ),
    ];
    let mut tables = Vec::new();
    for (test, title, note) in specs {
        let cells: Vec<_> = analysis
            .accuracy
            .iter()
            .filter(|c| c.test == test.id())
            .collect();
        if cells.is_empty() {
            continue;
        }
        let used: Vec<&DatasetCol> = datasets
            .iter()
            .filter(|d| cells.iter().any(|c| c.dataset == d.id))
            .collect();
        let rows = analysis
            .series
            .iter()
            .filter_map(|s| {
                let mean = match test {
                    TestId::Membership => s.membership.as_ref(),
                    TestId::Classify0Shot => s.zero_shot.as_ref(),
                    _ => s.one_shot.as_ref(),
                }?;
                Some(AccuracyRow {
                    label: s.label.clone(),
                    source: s.key.source.clone(),
                    cells: used
                        .iter()
                        .map(
                            |d| match cells.iter().find(|c| c.key == s.key && c.dataset == d.id) {
                                Some(c) => AccuracyCellView {
                                    anchor: series_index.get(&s.key).and_then(|&i| {
                                        let d = *dataset_position.get(d.id.as_str())?;
                                        anchors.by_cell.get(&(i, d, test.number())).cloned()
                                    }),
                                    value: fixed2(c.accuracy),
                                    detail: format!(
                                        "{}/{} correct, 95% CI {}, {} invalid{}",
                                        c.correct,
                                        c.trials,
                                        interval(&c.interval),
                                        c.invalid,
                                        c.p_value.map_or_else(String::new, |p| format!(
                                            ", p = {}",
                                            p_value(Some(p))
                                        ))
                                    ),
                                },
                                None => AccuracyCellView {
                                    anchor: None,
                                    value: NONE.to_string(),
                                    detail: "not evaluated".to_string(),
                                },
                            },
                        )
                        .collect(),
                    mean: fixed2(mean.mean),
                    pooled: fixed2(mean.pooled),
                    interval: interval(&mean.interval),
                    invalid: percent(mean.invalid_rate),
                    p_value: p_value(mean.p_value),
                })
            })
            .collect();
        tables.push(AccuracyTable {
            title: title.to_string(),
            note: note.to_string(),
            datasets: used
                .into_iter()
                .map(|d| DatasetCol {
                    id: d.id.clone(),
                    name: d.name.clone(),
                    released: d.released.clone(),
                })
                .collect(),
            rows,
            has_p_value: test == TestId::Membership,
        });
    }
    tables
}

fn timelines(analysis: &Analysis) -> Vec<TimelineView> {
    let mut stems: HashMap<String, usize> = HashMap::new();
    timeline::timelines(&analysis.series)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let mut stem = file_stem(&t.family);
            let seen = stems.entry(stem.clone()).or_insert(0);
            *seen += 1;
            if *seen > 1 {
                stem = format!("{stem}-{seen}");
            }
            let (axis, x_text): (&'static str, fn(f64) -> String) = match t.axis {
                timeline::Axis::Step => ("training step", |x| format!("step {x:.0}")),
                timeline::Axis::ReleaseDate => ("release date", |x| {
                    let year = x.floor();
                    format!("{year:.0}-{:02}", ((x - year) * 12.0).round() as i64 + 1)
                }),
            };
            TimelineView {
                anchor: format!("timeline-{}", i + 1),
                family: t.family.clone(),
                axis,
                svg: timeline::svg(&t),
                tikz: timeline::tikz(&t),
                file_stem: stem,
                versions: t
                    .points
                    .iter()
                    .map(|p| format!("{} ({})", p.label, x_text(p.x)))
                    .collect::<Vec<_>>()
                    .join(", "),
                left_out: t.left_out.join(", "),
            }
        })
        .collect()
}

fn scatter(series: &[SeriesScores]) -> Option<String> {
    let points: Vec<Point> = series
        .iter()
        .filter_map(|s| {
            let point = Point {
                label: s.label.clone(),
                contamination: s.contamination?,
                zero_shot: s.zero_shot.as_ref().map(|m| m.mean),
                one_shot: s.one_shot.as_ref().map(|m| m.mean),
            };
            (point.zero_shot.is_some() || point.one_shot.is_some()).then_some(point)
        })
        .collect();
    (!points.is_empty()).then(|| svg::scatter(&points))
}

fn examples(
    analysis: &Analysis,
    label_of: &dyn Fn(&SeriesKey) -> String,
    dataset_name: &dyn Fn(&str) -> String,
    test_name: &dyn Fn(&str) -> String,
) -> Vec<ExampleGroup> {
    let mut groups: Vec<ExampleGroup> = Vec::new();
    for e in &analysis.examples {
        if groups.last().is_none_or(|g| g.model != e.key.model) {
            groups.push(ExampleGroup {
                label: label_of(&e.key),
                model: e.key.model.clone(),
                items: Vec::new(),
            });
        }
        let group = groups.last_mut().expect("pushed above");
        group.items.push(ExampleItem {
            test: test_name(&e.test),
            dataset: dataset_name(&e.dataset),
            serialization: e.serialization.clone().unwrap_or_else(|| NONE.to_string()),
            verdict: if e.passed { "passed" } else { "not passed" },
            output: e.output.clone(),
            lines: e.output.lines().map(str::to_string).collect(),
        });
    }
    groups
}
