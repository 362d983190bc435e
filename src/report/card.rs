//! The calibration card as a Markdown file (issue 24 item 5, `docs/calibration.md`): the
//! study's spec and base, its treatments with each table's entropy per row, one row per
//! test with its sensitivity at every dose, false-positive rates and minimum detectable
//! dose under `paper` and `strict`, and the same as a fenced JSON block that
//! [`crate::analyze::card::parse_card`] reads back. A pure function of the
//! [`Card`](crate::analyze::card::Card) (no clock): the same cache writes the same bytes;
//! [`write`] replaces the file atomically. [`CardInReport`] is a card named to `report
//! --calibration`: per test of the report, its figures for `scores.json` and the note the
//! HTML and LaTeX pages show beside its verdicts.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::markdown::{Align, Cell, escape, table};
use crate::analyze::calibration::{Rate, format_dose};
use crate::analyze::card::{CARD_MARKER, Card, CardTest, report_tests};
use crate::analyze::{Analysis, Scoring};

/// `3/5 (0.60, 0.23–0.88)`, or `–` when nothing was measured.
pub fn rate(r: &Rate) -> String {
    match (r.rate, r.interval) {
        (Some(rate), Some(i)) => format!(
            "{}/{} ({rate:.2}, {:.2}–{:.2})",
            r.hits, r.total, i.low, i.high
        ),
        _ => "–".to_string(),
    }
}

/// A minimum detectable dose, or `not reached`.
pub fn minimum(dose: Option<f64>) -> String {
    dose.map_or_else(|| "not reached".to_string(), format_dose)
}

/// The test as the card names it: `8 full-completion`, `likelihood-min-k`.
pub fn test_label(t: &CardTest) -> String {
    match t.number {
        Some(n) => format!("{n} {}", t.test),
        None => t.test.clone(),
    }
}

/// The card's Markdown.
pub fn render(card: &Card) -> String {
    let mut out = String::new();
    let title = card.spec.as_ref().map_or("the cache's study", |s| &s.name);
    let _ = writeln!(out, "# Calibration card: {}\n", escape(title));
    out.push_str(
        "Written by `tabcontam calibrate` from the cache; do not edit by hand (run the command again: \
         it sends nothing when the cache holds every answer and rewrites the same bytes). \
         `tabcontam report --calibration` reads it back.\n\n",
    );
    if let Some(spec) = &card.spec {
        let _ = writeln!(
            out,
            "- Spec: {}, blake3 `{}`",
            escape(&spec.name),
            spec.blake3
        );
        let _ = writeln!(
            out,
            "- Base model: {}{}",
            escape(&spec.base),
            spec.base_revision
                .as_deref()
                .map_or(String::new(), |r| format!(", revision {}", escape(r)))
        );
        let _ = writeln!(out, "- Training: {}", escape(&spec.training));
    }
    let doses: Vec<String> = card.doses.iter().map(|d| format_dose(*d)).collect();
    let _ = writeln!(
        out,
        "- Doses (exposures: times each trained row was a target, the manifests' `exposures`; epochs for `packed` windows): {}",
        if doses.is_empty() {
            "none".to_string()
        } else {
            doses.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "- Models: {} checkpoint(s), {} base model(s)\n",
        card.checkpoints, card.base_models
    );

    if !card.treatments.is_empty() {
        out.push_str("## Treatments\n\n");
        out.push_str(
            "Entropy per row: the sum over columns of the Shannon entropy of the column's values in the file, in bits (columns taken as independent); a row of more bits needs more exposures to be reproduced.\n\n",
        );
        let mut rows = Vec::new();
        for (i, treatment) in card.treatments.iter().enumerate() {
            for d in &treatment.datasets {
                rows.push(vec![
                    Cell::text((i + 1).to_string()),
                    Cell::text(d.name.clone()),
                    Cell::text(d.rows.to_string()),
                    Cell::text(d.columns.to_string()),
                    Cell::text(
                        d.entropy_bits
                            .map_or("–".to_string(), |b| format!("{b:.1}")),
                    ),
                ]);
            }
        }
        out.push_str(&table(
            &[
                ("treatment", Align::Right),
                ("dataset", Align::Left),
                ("rows", Align::Right),
                ("columns", Align::Right),
                ("entropy per row (bits)", Align::Right),
            ],
            &rows,
        ));
        out.push('\n');
    }

    out.push_str("## Tests\n\n");
    out.push_str(
        "Sensitivity: detected cells of datasets the checkpoint was trained on / such cells, per dose. \
         False positives: detected cells of datasets the model was not trained on (the base model's included) / such cells; \
         on synthetic: the same on synthetic datasets only (negatives no corpus can hold). \
         Each rate reads hits/cells (rate, Wilson 95 % interval). Minimum detectable dose: the smallest dose whose sensitivity's lower bound exceeds \
         the false-positive rate's upper bound (`strict`: echoes and guessable passes dropped; likelihood detectors must also beat the blind baseline).\n\n",
    );
    let mut columns: Vec<(String, Align)> = vec![("test".into(), Align::Left)];
    for d in &doses {
        columns.push((format!("sensitivity @{d}"), Align::Right));
    }
    for name in [
        "false positives",
        "on synthetic",
        "min. dose (paper)",
        "min. dose (strict)",
    ] {
        columns.push((name.into(), Align::Right));
    }
    let rows: Vec<Vec<Cell>> = card
        .tests
        .iter()
        .map(|t| {
            let mut row = vec![Cell::text(test_label(t))];
            for dose in &card.doses {
                row.push(Cell::text(
                    t.sensitivity
                        .iter()
                        .find(|s| s.dose == *dose)
                        .map_or("–".to_string(), |s| rate(&s.sensitivity)),
                ));
            }
            row.push(Cell::text(rate(&t.false_positives)));
            row.push(Cell::text(rate(&t.synthetic_false_positives)));
            row.push(Cell::text(minimum(t.minimum_detectable_dose)));
            row.push(Cell::text(minimum(t.minimum_detectable_dose_strict)));
            row
        })
        .collect();
    let columns: Vec<(&str, Align)> = columns.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    out.push_str(&table(&columns, &rows));
    out.push('\n');
    if !card.tests.is_empty() {
        out.push_str("What counts as a detection:\n\n");
        for t in &card.tests {
            let _ = writeln!(
                out,
                "- {}: {}",
                escape(&test_label(t)),
                escape(&t.detection)
            );
        }
        out.push('\n');
    }

    render_sections(card, &mut out);

    out.push_str("## Machine-readable\n\n");
    out.push_str(CARD_MARKER);
    out.push_str("\n```json\n");
    out.push_str(&serde_json::to_string_pretty(card).expect("a card serializes"));
    out.push_str("\n```\n");
    out
}

/// The sections beside the table of tests, each only when the study measured it.
fn render_sections(card: &Card, out: &mut String) {
    if !card.membership_rows.is_empty() || !card.ground_truth.is_empty() {
        out.push_str("## Rows seen vs held out\n\n");
        out.push_str(
            "A checkpoint trained on part of a table and tested on all of it: the rows it saw against the rows held out of training, the same table, the same prompts.\n\n",
        );
    }
    if !card.membership_rows.is_empty() {
        out.push_str(
            "Membership (test 10): share of correct answers on the rows seen and on the held-out rows (samples pooled; trials/trials, Wilson 95 % interval over trials), and the share of answers that were neither choice (counted wrong).\n\n",
        );
        let rows: Vec<Vec<Cell>> = card
            .membership_rows
            .iter()
            .map(|m| {
                vec![
                    Cell::text(m.model.clone()),
                    Cell::text(m.dataset.clone()),
                    Cell::text(format_dose(m.dose)),
                    Cell::text(rate(&m.seen)),
                    Cell::text(rate(&m.held_out)),
                    Cell::text(format!("{:.0} %", 100.0 * m.invalid)),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                ("checkpoint", Align::Left),
                ("dataset", Align::Left),
                ("dose", Align::Right),
                ("rows seen", Align::Right),
                ("rows held out", Align::Right),
                ("neither choice", Align::Right),
            ],
            &rows,
        ));
        out.push('\n');
    }
    if !card.ground_truth.is_empty() {
        out.push_str(
            "Likelihood detectors with the held-out rows as negatives: AUROC of the rows seen against them (mean over cells, min–max), true-positive rate at 5 % false positives, and cells whose permutation p-value of AUROC > 0.5 is below 0.05 (dataset inference: the detectors combined, AUROC of the combined scores on the test halves, detected when its Welch p is below 0.05; it needs 6 rows a side).\n\n",
        );
        let rows: Vec<Vec<Cell>> = card
            .ground_truth
            .iter()
            .map(|g| {
                vec![
                    Cell::text(g.detector.clone()),
                    Cell::text(format_dose(g.dose)),
                    Cell::text(g.cells.to_string()),
                    Cell::text(format!(
                        "{:.2} ({:.2}–{:.2})",
                        g.auroc_mean, g.auroc_min, g.auroc_max
                    )),
                    Cell::text(format!("{:.2}", g.tpr_at_5_fpr_mean)),
                    Cell::text(rate(&g.detected)),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                ("detector", Align::Left),
                ("dose", Align::Right),
                ("cells", Align::Right),
                ("AUROC", Align::Right),
                ("TPR @ 5 % FPR", Align::Right),
                ("detected", Align::Right),
            ],
            &rows,
        ));
        out.push('\n');
    }
    if !card.classification.is_empty() {
        out.push_str("## Classification against the base\n\n");
        out.push_str(
            "Tests 11–12 on each checkpoint and on its base model, the same cells (dataset, template, seed): accuracy (samples pooled, Wilson 95 % interval over trials), its change in points, and the share of the checkpoint's answers that named no class (counted wrong). Training on a table can teach its labels (trained datasets) or cost general skill (the others), down to answering with table rows instead of a class.\n\n",
        );
        let rows: Vec<Vec<Cell>> = card
            .classification
            .iter()
            .map(|c| {
                vec![
                    Cell::text(format!("{} {}", c.number, c.test)),
                    Cell::text(format_dose(c.dose)),
                    Cell::text(
                        if c.trained {
                            "trained on"
                        } else {
                            "not trained on"
                        }
                        .to_string(),
                    ),
                    Cell::text(c.cells.to_string()),
                    Cell::text(rate(&c.base)),
                    Cell::text(rate(&c.checkpoint)),
                    Cell::text(format!("{:+.1}", 100.0 * c.change)),
                    Cell::text(format!("{:.0} %", 100.0 * c.checkpoint_invalid)),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                ("test", Align::Left),
                ("dose", Align::Right),
                ("datasets", Align::Left),
                ("cells", Align::Right),
                ("base", Align::Right),
                ("checkpoint", Align::Right),
                ("change (points)", Align::Right),
                ("no class named", Align::Right),
            ],
            &rows,
        ));
        out.push('\n');
    }
}

/// Writes `card` to `path` (its folder created when missing): the text is written beside
/// it under a temporary name and renamed over it, so a reader never sees half a card.
pub fn write(path: &Path, card: &Card) -> anyhow::Result<()> {
    let text = render(card);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the card's folder {}", dir.display()))?;
    let name = path
        .file_name()
        .with_context(|| format!("{}: a card needs a file name", path.display()))?;
    let partial = dir.join(format!(".{}.partial", name.to_string_lossy()));
    std::fs::write(&partial, text)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// A card named to `report --calibration`, with where it came from (shown in the report).
#[derive(Debug, Clone)]
pub struct CardInReport {
    /// The path as the user gave it.
    pub source: String,
    pub card: Card,
}

/// One test's figures from the card, as `scores.json` carries them.
#[derive(Debug, Clone, Serialize)]
pub struct TestCalibrationJson {
    pub test: String,
    /// The dose the figures are at: the minimum detectable dose under the report's profile
    /// (`strict` under `--scoring strict`, else `paper`), or the top dose when not reached.
    pub dose: Option<f64>,
    pub sensitivity: Option<Rate>,
    pub false_positives: Rate,
    pub synthetic_false_positives: Rate,
    pub minimum_detectable_dose: Option<f64>,
    pub minimum_detectable_dose_strict: Option<f64>,
    /// What a verdict of this test means, in words.
    pub note: String,
}

/// `calibration_card` of `scores.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CardJson {
    pub source: String,
    pub spec: Option<crate::analyze::card::CardSpec>,
    pub doses: Vec<f64>,
    pub tests: Vec<TestCalibrationJson>,
}

impl CardInReport {
    fn strict(scoring: Scoring) -> bool {
        scoring == Scoring::Strict
    }

    /// The figures of `test`, when the card measured it.
    pub fn test_json(&self, test: &str, scoring: Scoring) -> Option<TestCalibrationJson> {
        let t = self.card.test(test)?;
        let reference = t.reference(Self::strict(scoring));
        Some(TestCalibrationJson {
            test: t.test.clone(),
            dose: reference.map(|d| d.dose),
            sensitivity: reference.map(|d| d.sensitivity),
            false_positives: t.false_positives,
            synthetic_false_positives: t.synthetic_false_positives,
            minimum_detectable_dose: t.minimum_detectable_dose,
            minimum_detectable_dose_strict: t.minimum_detectable_dose_strict,
            note: note(t, Self::strict(scoring)),
        })
    }

    /// The card's figures for every test of the report it measured.
    pub fn json(&self, analysis: &Analysis) -> CardJson {
        CardJson {
            source: self.source.clone(),
            spec: self.card.spec.clone(),
            doses: self.card.doses.clone(),
            tests: report_tests(analysis)
                .iter()
                .filter_map(|t| self.test_json(t, analysis.scoring))
                .collect(),
        }
    }

    /// `(test label, note)` for every test of the report the card measured.
    pub fn notes(&self, analysis: &Analysis) -> Vec<(String, String)> {
        report_tests(analysis)
            .iter()
            .filter_map(|id| self.card.test(id))
            .map(|t| (test_label(t), note(t, Self::strict(analysis.scoring))))
            .collect()
    }

    /// `≥ 16` (the minimum detectable dose under the report's profile), `not reached`, or
    /// `–` when the card did not measure `test`.
    pub fn detects_from(&self, test: &str, scoring: Scoring) -> String {
        let Some(t) = self.card.test(test) else {
            return "–".to_string();
        };
        let minimum = match Self::strict(scoring) {
            true => t.minimum_detectable_dose_strict,
            false => t.minimum_detectable_dose,
        };
        minimum.map_or_else(
            || "not reached".to_string(),
            |d| format!("≥ {}", format_dose(d)),
        )
    }

    /// The note of `test` (an id), when the card measured it.
    pub fn note_of(&self, test: &str, scoring: Scoring) -> Option<String> {
        self.card.test(test).map(|t| note(t, Self::strict(scoring)))
    }
}

/// What a verdict of `t` means: "not detected" by a test that finds data trained on for
/// ≥ N exposures, with its sensitivity there and its false-positive rate.
pub fn note(t: &CardTest, strict: bool) -> String {
    let minimum = match strict {
        true => t.minimum_detectable_dose_strict,
        false => t.minimum_detectable_dose,
    };
    let at = t.reference(strict);
    let sensitivity = at.map_or_else(
        || "no trained-on cell measured".to_string(),
        |d| {
            format!(
                "sensitivity {} at dose {}",
                rate(&d.sensitivity),
                format_dose(d.dose)
            )
        },
    );
    let fp = format!("false positives {}", rate(&t.false_positives));
    match minimum {
        Some(dose) => format!(
            "finds data trained on for ≥ {} exposures ({sensitivity}); {fp}",
            format_dose(dose)
        ),
        None => format!(
            "minimum detectable dose not reached ({sensitivity}): “not detected” says little; {fp}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::calibration::DoseRate;

    fn rate_of(hits: u64, total: u64) -> Rate {
        let p = hits as f64 / total as f64;
        // The interval is only printed here, not checked.
        Rate {
            hits,
            total,
            rate: Some(p),
            interval: Some(crate::analyze::Interval {
                low: p / 2.0,
                high: (p + 1.0) / 2.0,
            }),
        }
    }

    /// A reached minimum dose names the dose and the sensitivity there; a test that never
    /// clears its false positives says that its "not detected" says little.
    #[test]
    fn notes_say_what_a_verdict_means() {
        let mut test = CardTest {
            test: "full-completion".into(),
            number: Some(8),
            detection: "the cell passes".into(),
            sensitivity: vec![
                DoseRate {
                    dose: 4.0,
                    sensitivity: rate_of(1, 4),
                },
                DoseRate {
                    dose: 16.0,
                    sensitivity: rate_of(4, 4),
                },
            ],
            false_positives: rate_of(0, 10),
            synthetic_false_positives: rate_of(0, 4),
            minimum_detectable_dose: Some(16.0),
            minimum_detectable_dose_strict: None,
        };
        assert_eq!(
            note(&test, false),
            "finds data trained on for ≥ 16 exposures (sensitivity 4/4 (1.00, 0.50–1.00) at dose 16); false positives 0/10 (0.00, 0.00–0.50)"
        );
        assert!(
            note(&test, true).starts_with("minimum detectable dose not reached (sensitivity 4/4")
        );
        test.minimum_detectable_dose = Some(4.0);
        assert!(note(&test, false).contains("≥ 4 exposures (sensitivity 1/4 (0.25,"));
    }
}
