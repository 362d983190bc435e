//! Dose–response of one test in a calibration study: detections per dose and false alarms
//! as [`Rate`]s with Wilson intervals, the minimum detectable dose, and the test's sentence
//! for the report. [`super::calibration`] assembles these over the tests of a study.

use std::collections::HashMap;

use serde::Serialize;

use super::stats::{Interval, wilson, wilson_of_share};
use crate::dataset::synth::is_synthetic;
use crate::exposure::Exposure;
use crate::probe::TestId;
use crate::store::CellRow;

/// A count of detections (or correct answers) out of a total, with its Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Rate {
    pub hits: u64,
    pub total: u64,
    pub rate: Option<f64>,
    pub interval: Option<Interval>,
}

impl Rate {
    pub(super) fn new(hits: u64, total: u64) -> Rate {
        Rate {
            hits,
            total,
            rate: (total > 0).then(|| hits as f64 / total as f64),
            interval: wilson(hits, total),
        }
    }

    /// A share pooled over the samples of `trials` distinct trials (`correct` of `answers`
    /// sample answers): the rate is the pooled share (what the verdict's accuracy is), its
    /// interval counts each trial once, since samples of one prompt are not independent
    /// evidence. `hits`/`total` are the trials, the pooled share rounded to whole trials.
    pub(super) fn pooled(correct: u64, answers: u64, trials: u64) -> Rate {
        if answers == 0 || trials == 0 {
            return Rate::new(0, 0);
        }
        let share = correct as f64 / answers as f64;
        Rate {
            hits: (share * trials as f64).round() as u64,
            total: trials,
            rate: Some(share),
            interval: wilson_of_share(share, trials),
        }
    }
}

/// Sensitivity at one dose.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DoseRate {
    pub dose: f64,
    #[serde(flatten)]
    pub sensitivity: Rate,
}

/// A dose as people write it: `1`, `2.5`.
pub fn format_dose(dose: f64) -> String {
    if dose.fract() == 0.0 {
        format!("{dose:.0}")
    } else {
        format!("{dose}")
    }
}

/// One test's sensitivity per dose, false-positive rate, and false-positive rate on
/// synthetic datasets, over `cells` (the study's, one scoring profile).
pub(super) fn test_rates(
    test: TestId,
    cells: &[&CellRow],
    doses: &[f64],
    exposure: &HashMap<&str, &Exposure>,
) -> (Vec<DoseRate>, Rate, Rate) {
    let of_test: Vec<&CellRow> = cells
        .iter()
        .filter(|c| c.test == test && c.skipped.is_none())
        .copied()
        .collect();
    let sensitivity = doses
        .iter()
        .map(|&dose| {
            let positives: Vec<&CellRow> = of_test
                .iter()
                .filter(|c| {
                    let e = exposure[c.model.as_str()];
                    e.dose == dose && e.trained_on(&c.dataset)
                })
                .copied()
                .collect();
            let hits = positives.iter().filter(|c| c.result.passed).count();
            DoseRate {
                dose,
                sensitivity: Rate::new(hits as u64, positives.len() as u64),
            }
        })
        .collect();
    let negatives: Vec<&CellRow> = of_test
        .iter()
        .filter(|c| !exposure[c.model.as_str()].trained_on(&c.dataset))
        .copied()
        .collect();
    let detected = |cells: &[&CellRow]| cells.iter().filter(|c| c.result.passed).count() as u64;
    let synthetic: Vec<&CellRow> = negatives
        .iter()
        .filter(|c| is_synthetic(&c.dataset))
        .copied()
        .collect();
    (
        sensitivity,
        Rate::new(detected(&negatives), negatives.len() as u64),
        Rate::new(detected(&synthetic), synthetic.len() as u64),
    )
}

/// The smallest dose at which a test's detections are told apart from its false alarms:
/// the Wilson 95 % lower bound of its sensitivity there exceeds the upper bound of its
/// false-positive rate. `None` ("not reached") when no dose does, or when the study has
/// no negatives to bound the false-positive rate with.
pub fn minimum_detectable_dose(sensitivity: &[DoseRate], false_positives: &Rate) -> Option<f64> {
    let ceiling = false_positives.interval?.high;
    sensitivity
        .iter()
        .find(|d| d.sensitivity.interval.is_some_and(|i| i.low > ceiling))
        .map(|d| d.dose)
}

pub(super) fn sentence(
    test: TestId,
    sensitivity: &[DoseRate],
    fp: &Rate,
    synthetic: &Rate,
) -> String {
    if fp.total == 0 && sensitivity.iter().all(|d| d.sensitivity.total == 0) {
        return format!("{}: not run on the models of the study.", test.id());
    }
    let detections: Vec<String> = sensitivity
        .iter()
        .filter(|d| d.sensitivity.total > 0)
        .map(|d| {
            format!(
                "after {} exposure{} in {} of {}",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Wilson 95 % bounds (by hand, z = 1.96): 0/20 → (0, 0.161); 4/10 → (0.168, 0.687);
    /// 2/10 → (0.057, 0.510); 10/10 → (0.722, 1). The false-positive rate 0/20 caps at
    /// 0.161: dose 4's lower bound 0.168 is above it, dose 1's 0.057 is not.
    #[test]
    fn minimum_detectable_dose_needs_the_lower_bound_above_the_false_positive_ceiling() {
        let dose = |dose: f64, hits: u64, total: u64| DoseRate {
            dose,
            sensitivity: Rate::new(hits, total),
        };
        let clean = Rate::new(0, 20);
        let curve = [dose(1.0, 2, 10), dose(4.0, 4, 10), dose(16.0, 10, 10)];
        assert_eq!(minimum_detectable_dose(&curve, &clean), Some(4.0));
        // Three false alarms in twenty raise the ceiling to 0.36: only dose 16 clears it.
        assert_eq!(
            minimum_detectable_dose(&curve, &Rate::new(3, 20)),
            Some(16.0)
        );
        // Without negatives there is no ceiling to clear; without detections nothing does.
        assert_eq!(minimum_detectable_dose(&curve, &Rate::new(0, 0)), None);
        assert_eq!(
            minimum_detectable_dose(&[dose(1.0, 0, 10), dose(4.0, 1, 10)], &clean),
            None
        );
    }
}
