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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

pub use super::dose_response::{DoseRate, Rate, format_dose, minimum_detectable_dose};
use super::dose_response::{sentence, test_rates};
use crate::exposure::Exposure;
use crate::probe::{MEMBERSHIP_ROW_NOTE, TestId};
use crate::store::{CellRow, ModelRow, OWN_SOURCE, TrialRow};

/// A model of the study and what it was trained on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationModel {
    pub model: String,
    pub label: String,
    #[serde(flatten)]
    pub exposure: Exposure,
}

/// One contamination test (1–9) calibrated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestCalibration {
    pub test: String,
    pub number: u8,
    /// Detected positives / positives, per dose (exposures), ascending.
    pub sensitivity: Vec<DoseRate>,
    /// Detected negatives / negatives, every negative (base model included).
    pub false_positives: Rate,
    /// The same on synthetic datasets only: the negatives whose ground truth is certain.
    pub synthetic_false_positives: Rate,
    /// One sentence for the report.
    pub sentence: String,
    /// The smallest dose whose sensitivity's Wilson lower bound exceeds the false-positive
    /// rate's upper bound ([`minimum_detectable_dose`]), under the report's scoring
    /// profile; `None`: not reached.
    pub minimum_detectable_dose: Option<f64>,
    /// The same under the strict profile (echoes and guessable passes dropped).
    pub minimum_detectable_dose_strict: Option<f64>,
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
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct MembershipRows {
    pub model: String,
    pub dataset: String,
    pub dose: f64,
    pub seen: Rate,
    pub held_out: Rate,
    /// Share of the sample answers, seen and held-out rows together, that were neither
    /// choice (counted wrong).
    #[serde(default)]
    pub invalid: f64,
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

    // The strict profile (no echoes, no guessable passes) re-decided from the trials, for
    // the minimum detectable dose under both profiles.
    let strict_all = super::evidence::strict_cells(
        &cells.iter().map(|&c| c.clone()).collect::<Vec<_>>(),
        trials,
    );
    let strict: Vec<&CellRow> = strict_all.iter().collect();
    let tests = TestId::CONTAMINATION
        .iter()
        .map(|&test| {
            let (sensitivity, false_positives, synthetic_false_positives) =
                test_rates(test, &cells, &doses, &exposure);
            let (strict_sensitivity, strict_false_positives, _) =
                test_rates(test, &strict, &doses, &exposure);
            let sentence = sentence(
                test,
                &sensitivity,
                &false_positives,
                &synthetic_false_positives,
            );
            TestCalibration {
                test: test.id().to_string(),
                number: test.number(),
                minimum_detectable_dose: minimum_detectable_dose(&sensitivity, &false_positives),
                minimum_detectable_dose_strict: minimum_detectable_dose(
                    &strict_sensitivity,
                    &strict_false_positives,
                ),
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
    // Keyed with the seed: cells of other seeds hold other prompts, so a checkpoint's cell is
    // compared with the base model's cell of the same seed (never an arbitrary one).
    let verdicts: HashMap<(&str, &str, TestId, u64), bool> = cells
        .iter()
        .filter(|c| TestId::CONTAMINATION.contains(&c.test) && c.skipped.is_none())
        .map(|c| {
            (
                (c.model.as_str(), c.dataset.as_str(), c.test, c.seed),
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
            for ((model, dataset, test, seed), &passed) in &verdicts {
                if *model != m.model {
                    continue;
                }
                let Some(&before) = verdicts.get(&(base, *dataset, *test, *seed)) else {
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
    // (correct sample answers, sample answers, distinct trials): each trial counted once,
    // its samples pooled as the verdict's accuracy pools them.
    let mut accuracy_counts: BTreeMap<(u8, u64, bool), (u64, u64, u64)> = BTreeMap::new();
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
        entry.2 += (c.result.trials / c.samples.len().max(1)) as u64;
    }
    let mut accuracy: Vec<AccuracyDose> = accuracy_counts
        .into_iter()
        .map(
            |((number, dose, trained), (correct, answers, trials))| AccuracyDose {
                test: TestId::ALL[number as usize - 1].id().to_string(),
                dose: f64::from_bits(dose),
                trained,
                accuracy: Rate::pooled(correct, answers, trials),
            },
        )
        .collect();
    accuracy.sort_by(|a, b| {
        (&a.test, a.dose, a.trained)
            .partial_cmp(&(&b.test, b.dose, b.trained))
            .unwrap_or(std::cmp::Ordering::Equal)
    });

    // Membership on rows trained on vs held-out rows: the study's serialization only (the
    // same row under another template is the same question again), each trial (seed, trial)
    // counted once with its samples pooled as the verdict's accuracy pools them.
    type TrialId = (String, String, u64, u32);
    let mut answers: BTreeMap<TrialId, (usize, u64, u64, u64)> = BTreeMap::new();
    for t in trials.iter().filter(|t| {
        t.test == TestId::Membership && t.serialization.as_deref().is_none_or(|s| s == primary)
    }) {
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
        let slot = usize::from(!trained_rows.contains(&row));
        let entry = answers
            .entry((t.model.clone(), t.dataset.clone(), t.seed, t.trial))
            .or_insert((slot, 0, 0, 0));
        entry.1 += u64::from(t.verdict.passed);
        entry.2 += 1;
        entry.3 += u64::from(t.verdict.invalid);
    }
    /// (correct sample answers, sample answers, distinct trials) of one slot.
    type Pooled = (u64, u64, u64);
    // Per (model, dataset): the seen slot, then the held-out one.
    let mut rows: BTreeMap<(String, String), ([Pooled; 2], u64)> = BTreeMap::new();
    for ((model, dataset, _, _), (slot, correct, total, invalid)) in answers {
        let entry = rows.entry((model, dataset)).or_default();
        entry.0[slot].0 += correct;
        entry.0[slot].1 += total;
        entry.0[slot].2 += 1;
        entry.1 += invalid;
    }
    let membership_rows = rows
        .into_iter()
        .map(
            |((model, dataset), ([seen, held_out], invalid))| MembershipRows {
                dose: exposure[model.as_str()].dose,
                model,
                dataset,
                seen: Rate::pooled(seen.0, seen.1, seen.2),
                held_out: Rate::pooled(held_out.0, held_out.1, held_out.2),
                invalid: invalid as f64 / (seen.1 + held_out.1).max(1) as f64,
            },
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{CellResult, Expected, TrialVerdict};
    use crate::request::RequestKey;

    fn model(id: &str, exposure: serde_json::Value) -> ModelRow {
        serde_json::from_value(serde_json::json!({
            "id": id, "label": id, "family": null, "backend": "local", "model": id,
            "revision": id, "release_date": null, "training_cutoff": null,
            "exposure": exposure, "updated_at": null,
        }))
        .unwrap()
    }

    fn trial(serialization: &str, seed: u64, sample: u32, row: u32, passed: bool) -> TrialRow {
        TrialRow {
            model: "ckpt".into(),
            dataset: "toy".into(),
            test: TestId::Membership,
            serialization: Some(serialization.into()),
            seed,
            sample,
            trial: row,
            request_key: RequestKey([0; 32]),
            note: Some(format!("{MEMBERSHIP_ROW_NOTE}{row}")),
            expected: Expected::Choice {
                choices: vec!["Yes".into(), "No".into()],
                correct: 0,
            },
            verdict: TrialVerdict {
                passed,
                invalid: false,
            },
            echo: false,
            run_id: None,
        }
    }

    fn cell(model: &str, seed: u64, passed: bool) -> CellRow {
        CellRow {
            source: OWN_SOURCE.into(),
            model: model.into(),
            dataset: "toy".into(),
            test: TestId::FeatureCompletion,
            serialization: Some("the-is".into()),
            seed,
            result: CellResult {
                passed,
                score: f64::from(u8::from(passed)),
                trials: 5,
                passed_trials: usize::from(passed),
                invalid_trials: 0,
                trial_chance: None,
            },
            samples: Vec::new(),
            skipped: None,
            echo_trials: None,
            chance: None,
            run_id: None,
        }
    }

    /// Issue 21: 10 membership trials (rows 0–9, rows 0–4 trained on) asked under two
    /// templates with two samples each. The study's template counts each trial once: 5 seen
    /// and 5 held out (the old code counted 4 × 5 = 20 each, narrowing the intervals by
    /// half). Samples are pooled per trial: on the seen rows sample 0 is right 4 times and
    /// sample 1 twice, 6 of 10 answers, rate 0.6 from 5 trials; Wilson 95 % of 0.6 over
    /// n = 5 (scripts/reference_stats.py formula with z = norm.ppf(0.975)):
    /// (0.23072..., 0.88238...) — by hand: centre (0.6 + 1.9208/5)/(1 + 3.8415/5).
    /// Flips are keyed with the seed: the checkpoint gains the cell of seed 1 only.
    #[test]
    fn membership_rows_count_each_trial_once_and_flips_match_seeds() {
        let models = vec![
            model("base", serde_json::json!({"trained_on": [], "dose": 0.0})),
            model(
                "ckpt",
                serde_json::json!({"trained_on": ["toy"], "dose": 1.0, "base": "base",
                    "trained_rows": {"toy": [0, 1, 2, 3, 4]}}),
            ),
        ];
        let mut trials = Vec::new();
        for serialization in ["the-is", "equals"] {
            for sample in 0..2 {
                for row in 0..10u32 {
                    let passed = match (row < 5, sample) {
                        (true, 0) => row < 4,
                        (true, _) => row < 2,
                        (false, _) => row % 2 == 0,
                    };
                    trials.push(trial(serialization, 0, sample, row, passed));
                }
            }
        }
        let cells = vec![
            cell("base", 0, true),
            cell("base", 1, false),
            cell("ckpt", 0, true),
            cell("ckpt", 1, true),
        ];
        let study = calibrate(&models, &cells, &trials, "the-is").unwrap();
        let [rows] = study.membership_rows.as_slice() else {
            panic!("{:?}", study.membership_rows)
        };
        assert_eq!((rows.seen.total, rows.held_out.total), (5, 5));
        assert_eq!(rows.seen.rate, Some(0.6));
        let interval = rows.seen.interval.unwrap();
        let z2: f64 = 1.959_963_984_540_054f64.powi(2);
        let centre = (0.6 + z2 / 10.0) / (1.0 + z2 / 5.0);
        let half = (z2 * (0.24 / 5.0 + z2 / 100.0)).sqrt() / (1.0 + z2 / 5.0);
        assert!((interval.low - (centre - half)).abs() < 1e-12);
        assert!((interval.high - (centre + half)).abs() < 1e-12);
        // Held out: rows 6 and 8 right in both samples: 4 of 10 answers.
        assert_eq!(rows.held_out.rate, Some(0.4));

        let [flip] = study.flips.as_slice() else {
            panic!("{:?}", study.flips)
        };
        assert_eq!((flip.compared, flip.gained, flip.lost), (2, 1, 0));
    }
    /// The strict profile is computed from the trials: a checkpoint's passes that are all
    /// echoes detect under `paper` but not under `strict`.
    #[test]
    fn the_strict_minimum_dose_drops_echo_passes() {
        let models = vec![
            model("base", serde_json::json!({"trained_on": [], "dose": 0.0})),
            model(
                "ckpt",
                serde_json::json!({"trained_on": ["toy"], "dose": 2.0, "base": "base"}),
            ),
        ];
        let mut cells = Vec::new();
        let mut trials = Vec::new();
        for seed in 0..12 {
            cells.push(cell("base", seed, false));
            cells.push(cell("ckpt", seed, true));
            let mut echo = trial("the-is", seed, 0, 0, true);
            echo.test = TestId::FeatureCompletion;
            echo.echo = true;
            trials.push(echo);
        }
        let study = calibrate(&models, &cells, &trials, "the-is").unwrap();
        let test = study
            .tests
            .iter()
            .find(|t| t.test == "feature-completion")
            .unwrap();
        assert_eq!(test.minimum_detectable_dose, Some(2.0), "{test:?}");
        assert_eq!(test.minimum_detectable_dose_strict, None, "{test:?}");
    }
}
