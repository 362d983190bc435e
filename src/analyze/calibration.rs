//! Calibration of the tests on models whose contamination is known (SPEC §8, controlled
//! contamination): per test, sensitivity per dose and false-positive rate with Wilson
//! intervals, the contamination matrix (trained-on × tested), flips against the base model,
//! the accuracy change of membership and classification with dose, and for membership the
//! accuracy on rows trained on vs held-out rows.
//!
//! Inputs are the models' declared exposure (spec keys or the checkpoint manifest, stored
//! in `models.exposure`) and the scored cells: a pure function of them, so it follows the
//! scoring profile (`paper` or `strict`) the cells were scored with. Only models with a
//! declared exposure take part; a cell is a positive when its dataset is one the model was
//! trained on, a negative otherwise (a base model's cells are all negatives).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::stats::{Interval, wilson};
use crate::dataset::synth::is_synthetic;
use crate::exposure::Exposure;
use crate::probe::{MEMBERSHIP_ROW_NOTE, TestId};
use crate::store::{CellRow, ModelRow, OWN_SOURCE, TrialRow};

/// A count of detections (or correct answers) out of a total, with its Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rate {
    pub hits: u64,
    pub total: u64,
    pub rate: Option<f64>,
    pub interval: Option<Interval>,
}

impl Rate {
    fn new(hits: u64, total: u64) -> Rate {
        Rate {
            hits,
            total,
            rate: (total > 0).then(|| hits as f64 / total as f64),
            interval: wilson(hits, total),
        }
    }
}

/// A model of the study and what it was trained on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationModel {
    pub model: String,
    pub label: String,
    #[serde(flatten)]
    pub exposure: Exposure,
}

/// Sensitivity at one dose.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DoseRate {
    pub dose: f64,
    #[serde(flatten)]
    pub sensitivity: Rate,
}

/// One contamination test (1–9) calibrated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestCalibration {
    pub test: String,
    pub number: u8,
    /// Detected positives / positives, per dose (epochs), ascending.
    pub sensitivity: Vec<DoseRate>,
    /// Detected negatives / negatives, every negative (base model included).
    pub false_positives: Rate,
    /// The same on synthetic datasets only: the negatives whose ground truth is certain.
    pub synthetic_false_positives: Rate,
    /// One sentence for the report.
    pub sentence: String,
}

/// One square of the contamination matrix: the share of contamination cells (tests 1–9)
/// detected on `dataset` by models trained on `condition`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixCell {
    /// The trained-on datasets joined with `+`, or `none` for base models.
    pub condition: String,
    pub dataset: String,
    pub positive: bool,
    #[serde(flatten)]
    pub detected: Rate,
}

/// Verdict changes of one checkpoint against its base model on the same cells (tests 1–9).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flip {
    pub model: String,
    pub base: String,
    pub compared: u64,
    /// Not passed on the base, passed on the checkpoint.
    pub gained: u64,
    /// Passed on the base, not on the checkpoint.
    pub lost: u64,
    /// Of the gained ones, on datasets the checkpoint was trained on.
    pub gained_on_trained: u64,
}

/// Accuracy of membership or classification at one dose, on trained or untrained data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AccuracyDose {
    pub test: String,
    pub dose: f64,
    /// Datasets the models were trained on (`false`: the others).
    pub trained: bool,
    #[serde(flatten)]
    pub accuracy: Rate,
}

/// Membership accuracy of one checkpoint on one trained dataset, split by whether the
/// queried row was among the rows trained on (a direct membership-inference measurement).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MembershipRows {
    pub model: String,
    pub dataset: String,
    pub dose: f64,
    pub seen: Rate,
    pub held_out: Rate,
}

/// The whole study.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub models: Vec<CalibrationModel>,
    /// Positive doses, ascending.
    pub doses: Vec<f64>,
    /// Matrix rows (trained-on conditions) and columns (datasets tested), in order.
    pub conditions: Vec<String>,
    pub datasets: Vec<String>,
    pub tests: Vec<TestCalibration>,
    pub matrix: Vec<MatrixCell>,
    pub flips: Vec<Flip>,
    pub accuracy: Vec<AccuracyDose>,
    pub membership_rows: Vec<MembershipRows>,
}

fn condition(exposure: &Exposure) -> String {
    if exposure.trained_on.is_empty() {
        "none".to_string()
    } else {
        exposure.trained_on.join("+")
    }
}

/// A dose as people write it: `1`, `2.5`.
pub fn format_dose(dose: f64) -> String {
    if dose.fract() == 0.0 {
        format!("{dose:.0}")
    } else {
        format!("{dose}")
    }
}

/// The study over the models with a declared exposure; `None` when no model declares one.
/// `cells` are the scored cells; only ours with serialization `None` or `primary` count.
pub fn calibrate(
    models: &[ModelRow],
    cells: &[CellRow],
    trials: &[TrialRow],
    primary: &str,
) -> Option<Calibration> {
    let study: Vec<CalibrationModel> = models
        .iter()
        .filter_map(|m| {
            m.exposure.clone().map(|exposure| CalibrationModel {
                model: m.id.clone(),
                label: m.label.clone(),
                exposure,
            })
        })
        .collect();
    if study.is_empty() {
        return None;
    }
    let exposure: HashMap<&str, &Exposure> = study
        .iter()
        .map(|m| (m.model.as_str(), &m.exposure))
        .collect();
    let cells: Vec<&CellRow> = cells
        .iter()
        .filter(|c| {
            c.source == OWN_SOURCE
                && exposure.contains_key(c.model.as_str())
                && c.serialization.as_deref().is_none_or(|s| s == primary)
        })
        .collect();
    let mut doses: Vec<f64> = study
        .iter()
        .filter(|m| !m.exposure.trained_on.is_empty())
        .map(|m| m.exposure.dose)
        .collect();
    doses.sort_by(f64::total_cmp);
    doses.dedup();

    let tests = TestId::CONTAMINATION
        .iter()
        .map(|&test| {
            let of_test: Vec<&&CellRow> = cells
                .iter()
                .filter(|c| c.test == test && c.skipped.is_none())
                .collect();
            let sensitivity: Vec<DoseRate> = doses
                .iter()
                .map(|&dose| {
                    let positives: Vec<&&&CellRow> = of_test
                        .iter()
                        .filter(|c| {
                            let e = exposure[c.model.as_str()];
                            e.dose == dose && e.trained_on(&c.dataset)
                        })
                        .collect();
                    let hits = positives.iter().filter(|c| c.result.passed).count();
                    DoseRate {
                        dose,
                        sensitivity: Rate::new(hits as u64, positives.len() as u64),
                    }
                })
                .collect();
            let negatives: Vec<&&&CellRow> = of_test
                .iter()
                .filter(|c| !exposure[c.model.as_str()].trained_on(&c.dataset))
                .collect();
            let false_positives = Rate::new(
                negatives.iter().filter(|c| c.result.passed).count() as u64,
                negatives.len() as u64,
            );
            let synthetic: Vec<&&&&CellRow> = negatives
                .iter()
                .filter(|c| is_synthetic(&c.dataset))
                .collect();
            let synthetic_false_positives = Rate::new(
                synthetic.iter().filter(|c| c.result.passed).count() as u64,
                synthetic.len() as u64,
            );
            let sentence = sentence(
                test,
                &sensitivity,
                &false_positives,
                &synthetic_false_positives,
            );
            TestCalibration {
                test: test.id().to_string(),
                number: test.number(),
                sensitivity,
                false_positives,
                synthetic_false_positives,
                sentence,
            }
        })
        .collect();

    // Matrix: condition × dataset over tests 1–9.
    let mut conditions: Vec<String> = study.iter().map(|m| condition(&m.exposure)).collect();
    conditions.sort_by_key(|c| (c != "none", c.clone()));
    conditions.dedup();
    let datasets: Vec<String> = cells
        .iter()
        .map(|c| c.dataset.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut squares: BTreeMap<(String, String), (u64, u64, bool)> = BTreeMap::new();
    for c in cells
        .iter()
        .filter(|c| TestId::CONTAMINATION.contains(&c.test) && c.skipped.is_none())
    {
        let e = exposure[c.model.as_str()];
        let entry = squares.entry((condition(e), c.dataset.clone())).or_insert((
            0,
            0,
            e.trained_on(&c.dataset),
        ));
        entry.0 += u64::from(c.result.passed);
        entry.1 += 1;
    }
    let mut matrix = Vec::new();
    for condition in &conditions {
        for dataset in &datasets {
            if let Some(&(hits, total, positive)) =
                squares.get(&(condition.clone(), dataset.clone()))
            {
                matrix.push(MatrixCell {
                    condition: condition.clone(),
                    dataset: dataset.clone(),
                    positive,
                    detected: Rate::new(hits, total),
                });
            }
        }
    }

    // Flips against the base model named by each checkpoint.
    let verdicts: HashMap<(&str, &str, TestId), bool> = cells
        .iter()
        .filter(|c| TestId::CONTAMINATION.contains(&c.test) && c.skipped.is_none())
        .map(|c| {
            (
                (c.model.as_str(), c.dataset.as_str(), c.test),
                c.result.passed,
            )
        })
        .collect();
    let flips = study
        .iter()
        .filter_map(|m| {
            let base = m.exposure.base.as_deref()?;
            let mut flip = Flip {
                model: m.model.clone(),
                base: base.to_string(),
                compared: 0,
                gained: 0,
                lost: 0,
                gained_on_trained: 0,
            };
            for ((model, dataset, test), &passed) in &verdicts {
                if *model != m.model {
                    continue;
                }
                let Some(&before) = verdicts.get(&(base, *dataset, *test)) else {
                    continue;
                };
                flip.compared += 1;
                if passed && !before {
                    flip.gained += 1;
                    if m.exposure.trained_on(dataset) {
                        flip.gained_on_trained += 1;
                    }
                } else if before && !passed {
                    flip.lost += 1;
                }
            }
            Some(flip)
        })
        .collect();

    // Accuracy of tests 10–12 per dose (the base models are dose 0), trained vs not.
    let mut accuracy_counts: BTreeMap<(u8, u64, bool), (u64, u64)> = BTreeMap::new();
    for c in cells.iter().filter(|c| {
        matches!(
            c.test,
            TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot
        ) && c.skipped.is_none()
    }) {
        let e = exposure[c.model.as_str()];
        let entry = accuracy_counts
            .entry((c.test.number(), e.dose.to_bits(), e.trained_on(&c.dataset)))
            .or_default();
        entry.0 += c.result.passed_trials as u64;
        entry.1 += c.result.trials as u64;
    }
    let mut accuracy: Vec<AccuracyDose> = accuracy_counts
        .into_iter()
        .map(|((number, dose, trained), (correct, total))| AccuracyDose {
            test: TestId::ALL[number as usize - 1].id().to_string(),
            dose: f64::from_bits(dose),
            trained,
            accuracy: Rate::new(correct, total),
        })
        .collect();
    accuracy.sort_by(|a, b| {
        (&a.test, a.dose, a.trained)
            .partial_cmp(&(&b.test, b.dose, b.trained))
            .unwrap_or(std::cmp::Ordering::Equal)
    });

    // Membership on rows trained on vs held-out rows.
    let mut rows: BTreeMap<(String, String), [(u64, u64); 2]> = BTreeMap::new();
    for t in trials.iter().filter(|t| t.test == TestId::Membership) {
        let Some(e) = exposure.get(t.model.as_str()) else {
            continue;
        };
        let Some(trained_rows) = e.rows_trained(&t.dataset) else {
            continue;
        };
        let Some(row) = t
            .note
            .as_deref()
            .and_then(|n| n.strip_prefix(MEMBERSHIP_ROW_NOTE))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let seen: HashSet<usize> = trained_rows.iter().copied().collect();
        let slot = usize::from(!seen.contains(&row));
        let entry = rows
            .entry((t.model.clone(), t.dataset.clone()))
            .or_default();
        entry[slot].0 += u64::from(t.verdict.passed);
        entry[slot].1 += 1;
    }
    let membership_rows = rows
        .into_iter()
        .map(|((model, dataset), [seen, held_out])| MembershipRows {
            dose: exposure[model.as_str()].dose,
            model,
            dataset,
            seen: Rate::new(seen.0, seen.1),
            held_out: Rate::new(held_out.0, held_out.1),
        })
        .collect();

    Some(Calibration {
        models: study,
        doses,
        conditions,
        datasets,
        tests,
        matrix,
        flips,
        accuracy,
        membership_rows,
    })
}

fn sentence(test: TestId, sensitivity: &[DoseRate], fp: &Rate, synthetic: &Rate) -> String {
    if fp.total == 0 && sensitivity.iter().all(|d| d.sensitivity.total == 0) {
        return format!("{}: not run on the models of the study.", test.id());
    }
    let detections: Vec<String> = sensitivity
        .iter()
        .filter(|d| d.sensitivity.total > 0)
        .map(|d| {
            format!(
                "after {} epoch{} in {} of {}",
                format_dose(d.dose),
                if d.dose == 1.0 { "" } else { "s" },
                d.sensitivity.hits,
                d.sensitivity.total
            )
        })
        .collect();
    let detects = if detections.is_empty() {
        "has no trained-on dataset to detect".to_string()
    } else {
        format!(
            "detects training on the data {} trained datasets",
            detections.join(", ")
        )
    };
    let synthetic = if synthetic.total > 0 {
        format!(
            " ({} of {} on synthetic datasets)",
            synthetic.hits, synthetic.total
        )
    } else {
        String::new()
    };
    format!(
        "{}: {detects}; false positives in {} of {}{synthetic}.",
        test.id(),
        fp.hits,
        fp.total
    )
}
