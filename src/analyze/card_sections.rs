//! The calibration card's sections beside its table of tests: membership and the
//! likelihood detectors on the rows a checkpoint saw against its held-out rows (a direct
//! membership-inference measurement, per dose), and classification (tests 11–12) on the
//! checkpoints against their base model on the same cells.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::calibration::Rate;
use crate::exposure::Exposure;
use crate::likelihood::{Detector, dataset_inference};
use crate::probe::TestId;
use crate::significance::ALPHA;
use crate::store::{CellRow, LikelihoodCellRow, OWN_SOURCE};

/// One likelihood detector (or dataset inference, their combination) on the rows trained
/// on against the held-out rows of the same tables, over the checkpoints of one dose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardGroundTruth {
    /// The detector's test id (`likelihood-min-k`).
    pub detector: String,
    pub dose: f64,
    /// Cells (checkpoint × dataset × seed) measured.
    pub cells: u64,
    pub auroc_mean: f64,
    pub auroc_min: f64,
    pub auroc_max: f64,
    /// Mean true-positive rate at a 5 % false-positive rate.
    pub tpr_at_5_fpr_mean: f64,
    /// Cells whose permutation p-value of "AUROC > 0.5" is below α.
    pub detected: Rate,
}

/// Classification accuracy of the checkpoints of one dose against their base model on the
/// same cells (dataset, template, seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardClassification {
    /// `classify-0shot` or `classify-1shot`.
    pub test: String,
    pub number: u8,
    pub dose: f64,
    /// On datasets the checkpoints were trained on (`false`: the others).
    pub trained: bool,
    /// Cells compared.
    pub cells: u64,
    pub checkpoint: Rate,
    pub base: Rate,
    /// Checkpoint accuracy minus base accuracy (pooled shares).
    pub change: f64,
    /// Share of the checkpoint's sample answers that named no class (counted wrong): a
    /// model fine-tuned into writing table rows can stop answering questions at all.
    pub checkpoint_invalid: f64,
}

/// The ground-truth rows of the likelihood detectors (cells `…/trained-vs-held-out` of
/// `primary`), per detector and dose, for models with a declared exposure.
pub fn ground_truth(
    likelihood: &[LikelihoodCellRow],
    exposure: &HashMap<&str, &Exposure>,
    primary: &str,
) -> Vec<CardGroundTruth> {
    let mut groups: BTreeMap<(String, u64), Vec<&crate::likelihood::DetectorStats>> =
        BTreeMap::new();
    for c in likelihood.iter().filter(|c| c.serialization == primary) {
        let detector = match Detector::parse_ground_truth(&c.test) {
            Some(detector) => detector.test_id(),
            None if c.test == dataset_inference::ground_truth_id() => dataset_inference::TEST_ID,
            None => continue,
        };
        let (Some(stats), Some(e)) = (c.stats.as_ref(), exposure.get(c.model.as_str())) else {
            continue;
        };
        groups
            .entry((detector.to_string(), e.dose.to_bits()))
            .or_default()
            .push(stats);
    }
    groups
        .into_iter()
        .map(|((detector, dose), stats)| {
            let n = stats.len() as f64;
            let aurocs = stats.iter().map(|s| s.auroc);
            CardGroundTruth {
                detector,
                dose: f64::from_bits(dose),
                cells: stats.len() as u64,
                auroc_mean: stats.iter().map(|s| s.auroc).sum::<f64>() / n,
                auroc_min: aurocs.clone().fold(f64::INFINITY, f64::min),
                auroc_max: aurocs.fold(f64::NEG_INFINITY, f64::max),
                tpr_at_5_fpr_mean: stats.iter().map(|s| s.tpr_at_5_fpr).sum::<f64>() / n,
                detected: Rate::new(
                    stats.iter().filter(|s| s.p_value < ALPHA).count() as u64,
                    stats.len() as u64,
                ),
            }
        })
        .collect()
}

/// (correct sample answers, sample answers, distinct trials, invalid sample answers) of a
/// set of cells.
type Pooled = (u64, u64, u64, u64);

fn add(pooled: &mut Pooled, cell: &CellRow) {
    pooled.0 += cell.result.passed_trials as u64;
    pooled.1 += cell.result.trials as u64;
    pooled.2 += (cell.result.trials / cell.samples.len().max(1)) as u64;
    pooled.3 += cell.result.invalid_trials as u64;
}

/// Tests 11–12 of every checkpoint paired with its base model's cell of the same dataset,
/// template (`primary`) and seed, pooled per (test, dose, trained or not).
pub fn classification(
    cells: &[CellRow],
    exposure: &HashMap<&str, &Exposure>,
    primary: &str,
) -> Vec<CardClassification> {
    let of_primary = |c: &&CellRow| {
        matches!(c.test, TestId::Classify0Shot | TestId::Classify1Shot)
            && c.source == OWN_SOURCE
            && c.skipped.is_none()
            && c.serialization.as_deref().is_none_or(|s| s == primary)
    };
    let base_cells: HashMap<(&str, &str, TestId, u64), &CellRow> = cells
        .iter()
        .filter(of_primary)
        .map(|c| ((c.model.as_str(), c.dataset.as_str(), c.test, c.seed), c))
        .collect();
    let mut groups: BTreeMap<(u8, u64, bool), (u64, Pooled, Pooled)> = BTreeMap::new();
    for c in cells.iter().filter(of_primary) {
        let Some(e) = exposure.get(c.model.as_str()) else {
            continue;
        };
        let Some(base) = e.base.as_deref() else {
            continue;
        };
        let Some(before) = base_cells.get(&(base, c.dataset.as_str(), c.test, c.seed)) else {
            continue;
        };
        let group = groups
            .entry((c.test.number(), e.dose.to_bits(), e.trained_on(&c.dataset)))
            .or_default();
        group.0 += 1;
        add(&mut group.1, c);
        add(&mut group.2, before);
    }
    groups
        .into_iter()
        .map(|((number, dose, trained), (compared, after, before))| {
            let checkpoint = Rate::pooled(after.0, after.1, after.2);
            let base = Rate::pooled(before.0, before.1, before.2);
            CardClassification {
                test: TestId::ALL[number as usize - 1].id().to_string(),
                number,
                dose: f64::from_bits(dose),
                trained,
                cells: compared,
                change: checkpoint.rate.unwrap_or(0.0) - base.rate.unwrap_or(0.0),
                checkpoint_invalid: after.3 as f64 / after.1.max(1) as f64,
                checkpoint,
                base,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposure(json: serde_json::Value) -> Exposure {
        serde_json::from_value(json).unwrap()
    }

    fn classify(model: &str, dataset: &str, seed: u64, correct: usize) -> CellRow {
        CellRow {
            source: OWN_SOURCE.into(),
            model: model.into(),
            dataset: dataset.into(),
            test: TestId::Classify0Shot,
            serialization: Some("the-is".into()),
            seed,
            result: crate::probe::CellResult {
                passed: false,
                score: correct as f64 / 10.0,
                trials: 10,
                passed_trials: correct,
                invalid_trials: 0,
                trial_chance: None,
            },
            samples: Vec::new(),
            skipped: None,
            echo_trials: Some(0),
            chance: None,
            run_id: None,
        }
    }

    /// Each checkpoint cell is compared with its base's cell of the same dataset and seed;
    /// a cell without its base's counterpart, another template's cell and a base model's
    /// own cells make no row.
    #[test]
    fn classification_pairs_each_checkpoint_cell_with_its_bases() {
        let base = exposure(serde_json::json!({"trained_on": [], "dose": 0.0}));
        let ckpt =
            exposure(serde_json::json!({"trained_on": ["toy"], "dose": 8.0, "base": "base"}));
        let exposures: HashMap<&str, &Exposure> = [("base", &base), ("ckpt", &ckpt)].into();
        let mut other_template = classify("ckpt", "toy", 0, 10);
        other_template.serialization = Some("json".into());
        let cells = vec![
            classify("base", "toy", 0, 4),
            classify("base", "toy", 1, 6),
            classify("ckpt", "toy", 0, 9),
            classify("ckpt", "toy", 1, 9),
            classify("ckpt", "toy", 2, 10),
            classify("base", "other", 0, 7),
            classify("ckpt", "other", 0, 5),
            other_template,
        ];
        let rows = classification(&cells, &exposures, "the-is");
        assert_eq!(rows.len(), 2, "{rows:?}");
        let trained = rows.iter().find(|r| r.trained).unwrap();
        assert_eq!((trained.cells, trained.dose), (2, 8.0));
        assert_eq!(trained.checkpoint.rate, Some(0.9));
        assert_eq!(trained.base.rate, Some(0.5));
        assert!((trained.change - 0.4).abs() < 1e-12);
        assert_eq!(trained.checkpoint_invalid, 0.0);
        let other = rows.iter().find(|r| !r.trained).unwrap();
        assert!((other.change + 0.2).abs() < 1e-12, "{other:?}");
        assert_eq!(other.test, "classify-0shot");
    }

    /// Ground-truth cells group by detector and dose; the originals-vs-copies cells of the
    /// same detector are not ground truth.
    #[test]
    fn ground_truth_groups_by_detector_and_dose() {
        let ckpt = exposure(serde_json::json!({"trained_on": ["toy"], "dose": 4.0}));
        let exposures: HashMap<&str, &Exposure> = [("ckpt", &ckpt)].into();
        let cell = |test: &str, seed: u64, auroc: f64, p_value: f64| LikelihoodCellRow {
            model: "ckpt".into(),
            dataset: "toy".into(),
            test: test.into(),
            serialization: "the-is".into(),
            seed,
            method: "local".into(),
            stats: Some(crate::likelihood::DetectorStats {
                positives: 16,
                negatives: 4,
                auroc,
                auroc_low: 0.0,
                auroc_high: 1.0,
                tpr_at_5_fpr: auroc / 2.0,
                tpr_low: 0.0,
                tpr_high: 1.0,
                p_value,
                roc: Vec::new(),
            }),
            skipped: None,
            blind: None,
            run_id: None,
        };
        let gt = Detector::MinK.ground_truth_id();
        let cells = vec![
            cell(&gt, 0, 0.9, 0.01),
            cell(&gt, 1, 0.7, 0.2),
            cell("likelihood-min-k", 0, 0.99, 0.001),
        ];
        let rows = ground_truth(&cells, &exposures, "the-is");
        assert_eq!(rows.len(), 1, "{rows:?}");
        let row = &rows[0];
        assert_eq!(
            (row.detector.as_str(), row.dose, row.cells),
            ("likelihood-min-k", 4.0, 2)
        );
        assert!((row.auroc_mean - 0.8).abs() < 1e-12);
        assert_eq!((row.auroc_min, row.auroc_max), (0.7, 0.9));
        assert!((row.tpr_at_5_fpr_mean - 0.4).abs() < 1e-12);
        assert_eq!((row.detected.hits, row.detected.total), (1, 2));
    }
}
