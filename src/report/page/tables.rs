//! The report's tables as rows of strings (the templates escape them): Table 2, sample
//! rates, accuracy, significance, template notes and example outputs.

use super::format::*;
use crate::analyze::{AccuracyCell, Analysis, SeriesKey, SeriesScores};
use crate::probe::TestId;
use crate::report::explorer::Anchors;
use crate::store::OWN_SOURCE;
use std::collections::HashMap;

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
    /// With `report --calibration`: what the card measured of this test (`None`: not
    /// measured, or no card).
    pub calibration: Option<String>,
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
    pub q_value: String,
}

pub(in crate::report) fn significance_rows(analysis: &Analysis) -> Vec<SignificanceRow> {
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
            test: match c.number {
                // The likelihood detectors have no number.
                0 => c.test.clone(),
                number => format!("{number} {}", c.test),
            },
            serialization: c.serialization.clone().unwrap_or_else(|| NONE.to_string()),
            result: match (c.family, c.number) {
                // Accuracy tests have no pass/fail of their own: the p-value is the verdict.
                ("paper", 10..=12) => "n/a",
                _ if c.passed => "pass",
                _ => "fail",
            },
            score: match (c.family, c.test.as_str()) {
                (_, "header") => format!("{:.0} chars", c.score),
                ("likelihood", _) => format!("AUROC {}", fixed2(c.score)),
                ("row-order", _) => format!("{:+.2} nats", c.score),
                _ => fixed2(c.score),
            },
            count: match c.family {
                "likelihood" => format!("{} vs {}", c.passed_trials, c.trials - c.passed_trials),
                "row-order" => format!("{}/{} shards", c.passed_trials, c.trials),
                _ => format!("{}/{}", c.passed_trials, c.trials),
            },
            chance: match c.chance_of {
                "cell" => format!(
                    "{} (cell)",
                    crate::analyze::evidence::format_probability(c.chance)
                ),
                "auroc" => "0.5 (AUROC)".to_string(),
                "shard" => format!("{:.3} (shard)", c.chance),
                _ => format!("{:.3}", c.chance),
            },
            p_value: p_value(Some(c.p_value)),
            p_holm: p_value(Some(c.p_holm)),
            q_value: p_value(Some(c.q_value)),
        })
        .collect()
}

/// Series whose scores come from another template than the primary one, and which.
pub(in crate::report) fn template_notes(analysis: &Analysis) -> Vec<String> {
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

/// Per series whose server reported versions, which ones answered its cached answers
/// (an alias such as `gpt-4o` serves different snapshots over time).
pub(in crate::report) fn served_notes(analysis: &Analysis) -> Vec<String> {
    analysis
        .series
        .iter()
        .filter(|s| !s.served.is_empty())
        .map(|s| format!("{}: {}", s.label, crate::store::describe_served(&s.served)))
        .collect()
}

pub(in crate::report) fn table2(series: &[SeriesScores]) -> Vec<Table2Row> {
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

pub(super) fn sample_rates(analysis: &Analysis) -> Vec<SampleRateTable> {
    let dataset_index = analysis.dataset_index();
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

pub(super) fn accuracy_tables(
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
                                    detail: accuracy_detail(c),
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

/// An accuracy cell in words: `62/100 correct, 95% CI [0.52, 0.71], 3 invalid, p = 0.010`.
pub(in crate::report) fn accuracy_detail(c: &AccuracyCell) -> String {
    format!(
        "{}/{} correct, 95% CI {}, {} invalid{}",
        c.correct,
        c.trials,
        interval(&c.interval),
        c.invalid,
        c.p_value
            .map_or_else(String::new, |p| format!(", p = {}", p_value(Some(p))))
    )
}

pub(super) fn examples(
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
