//! The calibration card (issue 24 items 5 and 6): what a calibration study measured about
//! every test, as data — per test its sensitivity at every dose, its false-positive rate on
//! all negatives and on synthetic ones, and its minimum detectable dose under `paper` and
//! `strict` — built from the cache by `tabcontam calibrate` (the card's Markdown is
//! [`crate::report::card`]) and read back by `tabcontam report --calibration PATH`, from a
//! card or straight from a calibration cache.
//!
//! Beyond the contamination tests 1–9 of [`super::calibration`], a card has a row for
//! membership (a cell detects when its binomial p-value against 0.5 is below
//! [`crate::significance::ALPHA`]), for the verbatim tests 13–16 (their own verdicts) and
//! for the likelihood detectors (originals vs perturbed copies: detected when the
//! permutation p-value is below α; under `strict` the detector must also beat the blind
//! baseline) and for test 17, `row-order` (its exact permutation p-value below α), each
//! only when the study ran it; then the sections of [`super::card_sections`]: rows seen vs
//! held out (membership and the detectors) and classification against the base.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::calibration::{
    Calibration, DoseRate, MembershipRows, Rate, calibrate, minimum_detectable_dose,
};
use super::card_sections::{CardClassification, CardGroundTruth, classification, ground_truth};
use crate::dataset::synth::is_synthetic;
use crate::exposure::Exposure;
use crate::probe::TestId;
use crate::significance::ALPHA;
use crate::store::{
    CellRow, LikelihoodCellRow, ModelRow, OWN_SOURCE, RowOrderCellRow, Store, TrialRow,
};

/// The line that opens a card's machine-readable block (a fenced `json` block follows).
pub const CARD_MARKER: &str = "<!-- tabcontam-calibration-card -->";
/// The card format this build writes and reads.
pub const CARD_FORMAT: u32 = 1;

/// Errors of reading a card; one line each, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    #[error(
        "{path}: cannot read the calibration card ({reason}); name a card written by `tabcontam calibrate SPEC` (e.g. docs/calibration.md) or the study's cache"
    )]
    Unreadable { path: String, reason: String },
    #[error(
        "{path}: not a calibration card (no `{CARD_MARKER}` block followed by a ```json block); write it with `tabcontam calibrate SPEC`, never by hand"
    )]
    NoBlock { path: String },
    #[error(
        "{path}: corrupt calibration card ({reason}); write it again with `tabcontam calibrate SPEC`"
    )]
    Corrupt { path: String, reason: String },
    #[error(
        "{path}: the cache holds no model with a declared exposure, so no calibration; run `tabcontam calibrate SPEC` on it first or name its card"
    )]
    NoStudy { path: String },
    #[error(
        "{path}: none of the report's tests ({report}) was measured by this calibration (it has {card}); add them to the study's `tests` and run `tabcontam calibrate` again, or name the card of a study that ran them"
    )]
    Mismatch {
        path: String,
        report: String,
        card: String,
    },
}

/// The spec a card was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardSpec {
    /// The spec's `name`.
    pub name: String,
    /// blake3 of the spec file's bytes, hex.
    pub blake3: String,
    /// The base model's spec id and its revision in the cache (weights digest).
    pub base: String,
    pub base_revision: Option<String>,
    /// The training settings of the `[calibration]` table, in words.
    pub training: String,
}

/// One dataset of a treatment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardDataset {
    pub name: String,
    pub rows: usize,
    pub columns: usize,
    /// Σ over columns of the Shannon entropy of the column's value distribution, in bits
    /// ([`entropy_per_row`]); `None` when the dataset could not be loaded.
    pub entropy_bits: Option<f64>,
}

/// One treatment: the datasets one checkpoint series was trained on together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardTreatment {
    pub datasets: Vec<CardDataset>,
}

/// One test measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardTest {
    /// The test id as reports name it (`full-completion`, `membership`, `header`,
    /// `likelihood-min-k`).
    pub test: String,
    /// Its number (1–16); `None` for a likelihood detector.
    pub number: Option<u8>,
    /// What counts as a detection.
    pub detection: String,
    /// Detected positives / positives per dose, ascending.
    pub sensitivity: Vec<DoseRate>,
    /// Detected negatives / negatives (every negative, base model included).
    pub false_positives: Rate,
    /// The same on synthetic datasets only.
    pub synthetic_false_positives: Rate,
    /// Smallest dose whose sensitivity's Wilson lower bound exceeds the false-positive
    /// rate's upper bound; `None`: not reached.
    pub minimum_detectable_dose: Option<f64>,
    pub minimum_detectable_dose_strict: Option<f64>,
}

impl CardTest {
    /// The dose a reader is told about: the minimum detectable dose (of `strict` when
    /// asked), else the top dose measured; with its sensitivity there.
    pub fn reference(&self, strict: bool) -> Option<&DoseRate> {
        let minimum = match strict {
            true => self.minimum_detectable_dose_strict,
            false => self.minimum_detectable_dose,
        };
        match minimum {
            Some(dose) => self.sensitivity.iter().find(|d| d.dose == dose),
            None => self
                .sensitivity
                .iter()
                .rev()
                .find(|d| d.sensitivity.total > 0),
        }
    }
}

/// A calibration card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub format: u32,
    /// `None` when the card was computed from a cache rather than written by `calibrate`.
    pub spec: Option<CardSpec>,
    /// Doses (exposures) of the checkpoints, ascending.
    pub doses: Vec<f64>,
    pub treatments: Vec<CardTreatment>,
    /// Models of the study: checkpoints and base models (negatives).
    pub checkpoints: usize,
    pub base_models: usize,
    /// The tests the study ran, in report order (1–17, then the likelihood detectors).
    pub tests: Vec<CardTest>,
    /// Membership (test 10) per checkpoint and trained dataset, on the rows it saw against
    /// its held-out rows; empty when no checkpoint held rows out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub membership_rows: Vec<MembershipRows>,
    /// The likelihood detectors on the rows seen against the held-out rows, per dose.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ground_truth: Vec<CardGroundTruth>,
    /// Tests 11–12 on the checkpoints against their base on the same cells, per dose.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classification: Vec<CardClassification>,
}

/// What a card is computed from: the study's rows, as the cache holds them.
#[derive(Debug, Clone, Copy)]
pub struct StudyRows<'a> {
    pub models: &'a [ModelRow],
    pub cells: &'a [CellRow],
    pub trials: &'a [TrialRow],
    pub likelihood: &'a [LikelihoodCellRow],
    pub row_order: &'a [RowOrderCellRow],
}

impl Card {
    /// The card's row of `test`, when the study ran it.
    pub fn test(&self, test: &str) -> Option<&CardTest> {
        self.tests.iter().find(|t| t.test == test)
    }
}

/// The tests of a study over `models` (only those with a declared exposure count): the
/// calibration of tests 1–9 and the rows of membership, tests 13–16 and the likelihood
/// detectors computed from the same cells; `None` when no model declares an exposure.
pub fn card_from_rows(rows: StudyRows, primary: &str) -> Option<(Calibration, Card)> {
    let StudyRows {
        models,
        cells,
        trials,
        likelihood,
        row_order,
    } = rows;
    let calibration = calibrate(models, cells, trials, primary)?;
    let exposure: HashMap<&str, &Exposure> = models
        .iter()
        .filter_map(|m| Some((m.id.as_str(), m.exposure.as_ref()?)))
        .collect();
    let doses = calibration.doses.clone();
    let ran = |t: &CardTest| {
        t.false_positives.total > 0 || t.sensitivity.iter().any(|s| s.sensitivity.total > 0)
    };
    let mut tests: Vec<CardTest> = calibration
        .tests
        .iter()
        .map(|t| CardTest {
            test: t.test.clone(),
            number: Some(t.number),
            detection: "the cell passes (the paper's rule)".into(),
            sensitivity: t.sensitivity.clone(),
            false_positives: t.false_positives,
            synthetic_false_positives: t.synthetic_false_positives,
            minimum_detectable_dose: t.minimum_detectable_dose,
            minimum_detectable_dose_strict: t.minimum_detectable_dose_strict,
        })
        .collect();
    let ours = |c: &&CellRow| {
        c.source == OWN_SOURCE
            && c.skipped.is_none()
            && exposure.contains_key(c.model.as_str())
            && c.serialization.as_deref().is_none_or(|s| s == primary)
    };
    let mut extra = vec![TestId::Membership];
    extra.extend(TestId::VERBATIM);
    for test in extra {
        let outcomes: Vec<Outcome> = cells
            .iter()
            .filter(ours)
            .filter(|c| c.test == test)
            .map(|c| {
                let detected = match test {
                    TestId::Membership => c
                        .chance
                        .as_ref()
                        .and_then(|ch| ch.level)
                        .is_some_and(|p| p < ALPHA),
                    _ => c.result.passed,
                };
                (c.model.as_str(), c.dataset.as_str(), detected, detected)
            })
            .collect();
        let detection = match test {
            TestId::Membership => {
                "accuracy above 0.5: binomial p-value < 0.05 (rows vs perturbed copies)"
            }
            _ => "the cell passes (p < 0.05 against its chance level)",
        };
        tests.push(card_test(
            test.id(),
            Some(test.number()),
            detection,
            &outcomes,
            &doses,
            &exposure,
        ));
    }
    let mut detectors: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for c in likelihood.iter().filter(|c| {
        (crate::likelihood::Detector::parse(&c.test).is_some()
            || c.test == crate::likelihood::dataset_inference::TEST_ID)
            && c.serialization == primary
            && exposure.contains_key(c.model.as_str())
    }) {
        let Some(stats) = &c.stats else { continue };
        let detected = stats.p_value < ALPHA;
        let strict = detected && !c.blind.is_some_and(|b| b.not_exceeded_by(stats.auroc));
        detectors.entry(c.test.as_str()).or_default().push((
            c.model.as_str(),
            c.dataset.as_str(),
            detected,
            strict,
        ));
    }
    let order_outcomes: Vec<Outcome> = row_order
        .iter()
        .filter(|c| exposure.contains_key(c.model.as_str()))
        .filter_map(|c| {
            let detected = c.stats.as_ref()?.p_value < ALPHA;
            Some((c.model.as_str(), c.dataset.as_str(), detected, detected))
        })
        .collect();
    tests.push(card_test(
        "row-order",
        Some(17),
        "the file's row order is likelier than its seeded permutations: exact permutation p < 0.05",
        &order_outcomes,
        &doses,
        &exposure,
    ));
    for (test, outcomes) in detectors {
        let detection = match test {
            crate::likelihood::dataset_inference::TEST_ID => {
                "the detectors' scores combined (learnt on half the rows), originals above perturbed copies on the other half: Welch p < 0.05 (strict: and above the blind baseline)"
            }
            _ => {
                "AUROC above 0.5 on originals vs perturbed copies: permutation p < 0.05 (strict: and above the blind baseline)"
            }
        };
        tests.push(card_test(
            test, None, detection, &outcomes, &doses, &exposure,
        ));
    }
    tests.retain(ran);
    let checkpoints = calibration
        .models
        .iter()
        .filter(|m| !m.exposure.trained_on.is_empty())
        .count();
    let card = Card {
        format: CARD_FORMAT,
        spec: None,
        doses,
        treatments: Vec::new(),
        checkpoints,
        base_models: calibration.models.len() - checkpoints,
        tests,
        membership_rows: {
            let mut rows = calibration.membership_rows.clone();
            rows.sort_by(|a, b| {
                (a.dose, &a.dataset, &a.model)
                    .partial_cmp(&(b.dose, &b.dataset, &b.model))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            rows
        },
        ground_truth: ground_truth(likelihood, &exposure, primary),
        classification: classification(cells, &exposure, primary),
    };
    Some((calibration, card))
}

/// (model, dataset, detected under `paper`, detected under `strict`).
type Outcome<'a> = (&'a str, &'a str, bool, bool);

fn card_test(
    test: &str,
    number: Option<u8>,
    detection: &str,
    outcomes: &[Outcome],
    doses: &[f64],
    exposure: &HashMap<&str, &Exposure>,
) -> CardTest {
    let rates = |strict: bool| {
        let count = |of: &[&Outcome]| {
            let hits = of.iter().filter(|o| if strict { o.3 } else { o.2 }).count();
            Rate::new(hits as u64, of.len() as u64)
        };
        let sensitivity: Vec<DoseRate> = doses
            .iter()
            .map(|&dose| {
                let positives: Vec<&Outcome> = outcomes
                    .iter()
                    .filter(|o| {
                        let e = exposure[o.0];
                        e.dose == dose && e.trained_on(o.1)
                    })
                    .collect();
                DoseRate {
                    dose,
                    sensitivity: count(&positives),
                }
            })
            .collect();
        let negatives: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| !exposure[o.0].trained_on(o.1))
            .collect();
        let synthetic: Vec<&Outcome> = negatives
            .iter()
            .filter(|o| is_synthetic(o.1))
            .copied()
            .collect();
        (sensitivity, count(&negatives), count(&synthetic))
    };
    let (sensitivity, false_positives, synthetic_false_positives) = rates(false);
    let (strict_sensitivity, strict_false_positives, _) = rates(true);
    CardTest {
        test: test.to_string(),
        number,
        detection: detection.to_string(),
        minimum_detectable_dose: minimum_detectable_dose(&sensitivity, &false_positives),
        minimum_detectable_dose_strict: minimum_detectable_dose(
            &strict_sensitivity,
            &strict_false_positives,
        ),
        sensitivity,
        false_positives,
        synthetic_false_positives,
    }
}

/// The card of the study in a cache: every model with a declared exposure, the default
/// template's cells. `Ok(None)` when no model declares one.
pub fn card_from_store(store: &Store, primary: &str) -> anyhow::Result<Option<Card>> {
    let rows = StudyRows {
        models: &store.models()?,
        cells: &store.cells()?,
        trials: &store.trials()?,
        likelihood: &store.likelihood_cells()?,
        row_order: &store.row_order_cells()?,
    };
    Ok(card_from_rows(rows, primary).map(|(_, card)| card))
}

/// The card in the text of a card file: the JSON block after [`CARD_MARKER`].
pub fn parse_card(text: &str) -> Result<Card, ParseError> {
    let Some((_, after)) = text.split_once(CARD_MARKER) else {
        return Err(ParseError::NoBlock);
    };
    let after = after.trim_start();
    let Some(body) = after.strip_prefix("```json") else {
        return Err(ParseError::NoBlock);
    };
    let Some((json, _)) = body.split_once("\n```") else {
        return Err(ParseError::Corrupt(
            "the ```json block is not closed".into(),
        ));
    };
    let card: Card = serde_json::from_str(json)
        .map_err(|e| ParseError::Corrupt(format!("its JSON block does not parse: {e}")))?;
    if card.format != CARD_FORMAT {
        return Err(ParseError::Corrupt(format!(
            "card format {}, this tabcontam reads format {CARD_FORMAT}",
            card.format
        )));
    }
    Ok(card)
}

/// Why a card's text is not one.
#[derive(Debug, PartialEq)]
pub enum ParseError {
    NoBlock,
    Corrupt(String),
}

/// Reads the card at `path`: a card file (Markdown with the JSON block), or a SQLite
/// cache whose calibration study is computed on the spot (template `primary`).
pub fn read_card(path: &Path, primary: &str) -> Result<Card, CardError> {
    let shown = path.display().to_string();
    let unreadable = |reason: String| CardError::Unreadable {
        path: shown.clone(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
    if bytes.starts_with(b"SQLite format 3\0") {
        let card = Store::open_read_only(path)
            .map_err(anyhow::Error::from)
            .and_then(|store| card_from_store(&store, primary))
            .map_err(|e| unreadable(format!("{e:#}")))?;
        return card.ok_or(CardError::NoStudy { path: shown });
    }
    let text = String::from_utf8(bytes).map_err(|_| CardError::NoBlock {
        path: shown.clone(),
    })?;
    parse_card(&text).map_err(|e| match e {
        ParseError::NoBlock => CardError::NoBlock {
            path: shown.clone(),
        },
        ParseError::Corrupt(reason) => CardError::Corrupt {
            path: shown.clone(),
            reason,
        },
    })
}

/// The card's rows of the tests in `report_tests` (the ids of the tests a report shows
/// verdicts of); an error naming the file when none of them was measured.
pub fn check_against<'a>(
    card: &'a Card,
    path: &Path,
    report_tests: &[String],
) -> Result<Vec<&'a CardTest>, CardError> {
    let found: Vec<&CardTest> = report_tests.iter().filter_map(|t| card.test(t)).collect();
    if found.is_empty() {
        let list = |ids: Vec<&str>| match ids.is_empty() {
            true => "none".to_string(),
            false => ids.join(", "),
        };
        return Err(CardError::Mismatch {
            path: path.display().to_string(),
            report: list(report_tests.iter().map(String::as_str).collect()),
            card: list(card.tests.iter().map(|t| t.test.as_str()).collect()),
        });
    }
    Ok(found)
}

/// The ids of the tests a report shows verdicts of, in report order: tests 1–16 with a
/// cell, then the likelihood detectors.
pub fn report_tests(analysis: &super::Analysis) -> Vec<String> {
    let mut ids: Vec<&str> = analysis
        .grid
        .iter()
        .map(|c| c.test.as_str())
        .chain(analysis.accuracy.iter().map(|c| c.test.as_str()))
        .chain(analysis.significance.iter().map(|c| c.test.as_str()))
        .collect();
    ids.sort_by_key(|id| (TestId::parse(id).map_or(u8::MAX, TestId::number), *id));
    ids.dedup();
    let mut detectors: Vec<&str> = analysis
        .likelihood
        .iter()
        .map(|c| c.test.as_str())
        .filter(|t| crate::likelihood::Detector::parse(t).is_some())
        .collect();
    detectors.sort();
    detectors.dedup();
    ids.extend(detectors);
    ids.into_iter().map(String::from).collect()
}

/// `report --calibration PATH`: the card at `path` (a card file or a calibration cache,
/// its study under the report's template), refused when it measured none of the report's
/// tests.
pub fn card_for_report(path: &Path, analysis: &super::Analysis) -> Result<Card, CardError> {
    let card = read_card(path, &analysis.primary_serialization)?;
    check_against(&card, path, &report_tests(analysis))?;
    Ok(card)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(id: &str, exposure: serde_json::Value) -> ModelRow {
        serde_json::from_value(serde_json::json!({
            "id": id, "label": id, "family": null, "backend": "local", "model": id,
            "revision": id, "release_date": null, "training_cutoff": null,
            "exposure": exposure, "updated_at": null,
        }))
        .unwrap()
    }

    fn membership(model: &str, dataset: &str, seed: u64, p: f64) -> CellRow {
        CellRow {
            source: OWN_SOURCE.into(),
            model: model.into(),
            dataset: dataset.into(),
            test: TestId::Membership,
            serialization: Some("the-is".into()),
            seed,
            result: crate::probe::CellResult {
                passed: false,
                score: 0.5,
                trials: 10,
                passed_trials: 5,
                invalid_trials: 0,
                trial_chance: None,
            },
            samples: Vec::new(),
            skipped: None,
            echo_trials: Some(0),
            chance: Some(crate::probe::chance::Chance {
                level: Some(p),
                basis: "binomial".into(),
            }),
            run_id: None,
        }
    }

    fn detector(model: &str, dataset: &str, seed: u64, p_value: f64) -> LikelihoodCellRow {
        LikelihoodCellRow {
            model: model.into(),
            dataset: dataset.into(),
            test: "likelihood-min-k".into(),
            serialization: "the-is".into(),
            seed,
            method: "local".into(),
            stats: Some(crate::likelihood::DetectorStats {
                positives: 100,
                negatives: 100,
                auroc: 0.9,
                auroc_low: 0.85,
                auroc_high: 0.95,
                tpr_at_5_fpr: 0.5,
                tpr_low: 0.4,
                tpr_high: 0.6,
                p_value,
                roc: Vec::new(),
            }),
            skipped: None,
            // The blind classifier tells the groups apart as well: strict drops it.
            blind: Some(crate::likelihood::BlindAuroc {
                positives: 100,
                negatives: 100,
                auroc: 0.93,
                auroc_low: 0.9,
                auroc_high: 0.96,
            }),
            run_id: None,
        }
    }

    /// Membership detects by its p-value, a likelihood detector by its permutation
    /// p-value (and under `strict` only above the blind baseline); tests the study did not
    /// run have no row. Twelve seeds: 12/12 detected at dose 2 (Wilson lower bound 0.76)
    /// against 0/24 false alarms (upper bound 0.14).
    #[test]
    fn membership_and_likelihood_rows_follow_their_own_detection_rules() {
        let models = vec![
            model("base", serde_json::json!({"trained_on": [], "dose": 0.0})),
            model(
                "ckpt",
                serde_json::json!({"trained_on": ["toy"], "dose": 2.0, "base": "base"}),
            ),
        ];
        let mut cells = Vec::new();
        let mut likelihood = Vec::new();
        for seed in 0..12 {
            cells.push(membership("ckpt", "toy", seed, 0.001));
            cells.push(membership("base", "toy", seed, 0.4));
            cells.push(membership("ckpt", "synthetic-1-10", seed, 0.6));
            likelihood.push(detector("ckpt", "toy", seed, 0.001));
            likelihood.push(detector("base", "toy", seed, 0.3));
            likelihood.push(detector("ckpt", "synthetic-1-10", seed, 0.5));
        }
        let rows = StudyRows {
            models: &models,
            cells: &cells,
            trials: &[],
            likelihood: &likelihood,
            row_order: &[],
        };
        let (_, card) = card_from_rows(rows, "the-is").unwrap();
        let ids: Vec<&str> = card.tests.iter().map(|t| t.test.as_str()).collect();
        assert_eq!(ids, ["membership", "likelihood-min-k"]);
        for t in &card.tests {
            assert_eq!(t.sensitivity[0].sensitivity.hits, 12, "{t:?}");
            assert_eq!(t.sensitivity[0].sensitivity.total, 12, "{t:?}");
            assert_eq!((t.false_positives.hits, t.false_positives.total), (0, 24));
            assert_eq!(t.synthetic_false_positives.total, 12);
            assert_eq!(t.minimum_detectable_dose, Some(2.0), "{t:?}");
        }
        assert_eq!(card.tests[0].number, Some(10));
        assert_eq!(card.tests[0].minimum_detectable_dose_strict, Some(2.0));
        assert_eq!(card.tests[1].number, None);
        assert_eq!(card.tests[1].minimum_detectable_dose_strict, None);
        assert_eq!((card.checkpoints, card.base_models), (1, 1));

        // A report of these tests finds its rows; a report of other tests is refused. (The
        // Markdown round trip is `report --calibration` in tests/contamination.rs.)
        let found = check_against(&card, Path::new("c.md"), &["membership".into()]).unwrap();
        assert_eq!(found.len(), 1);
        let refused = check_against(&card, Path::new("c.md"), &["header".into()])
            .unwrap_err()
            .to_string();
        assert!(
            refused.starts_with("c.md: none of the report's tests (header) was measured by this calibration (it has membership, likelihood-min-k)"),
            "{refused}"
        );
    }

    #[test]
    fn a_card_without_its_block_or_with_broken_json_is_refused() {
        assert_eq!(parse_card("# Calibration\n"), Err(ParseError::NoBlock));
        let broken = format!("x\n{CARD_MARKER}\n```json\n{{\"format\": 1,\n```\n");
        assert!(matches!(parse_card(&broken), Err(ParseError::Corrupt(_))));
    }
}
