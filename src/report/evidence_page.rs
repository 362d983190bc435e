//! Report views of the evidence behind verdicts (echo counts, chance levels, the scoring
//! profile) and of the calibration study (SPEC §8): display strings, SVG figures and TikZ
//! figures, built from the analysis for `report.html` and `report.tex`.

use std::fmt::Write as _;

use crate::analyze::Analysis;
use crate::analyze::calibration::{Calibration, Rate, format_dose};
use crate::analyze::evidence::format_chance;
use crate::probe::{TestId, TestKind};

use super::svg::{self, DosePoint};
use super::tex::escape;

/// Shown where a value does not exist.
const NONE: &str = "–";

/// One cell with its evidence.
pub struct EvidenceRow {
    pub model: String,
    pub dataset: String,
    pub test: String,
    pub serialization: String,
    pub summary: String,
    pub echoes: String,
    pub chance: String,
    pub chance_basis: String,
    pub strict: String,
}

/// The calibration section.
pub struct CalibrationView {
    /// The headline: each test's minimum detectable dose under both profiles.
    pub headline: String,
    pub models: Vec<[String; 4]>,
    pub doses: Vec<String>,
    pub rows: Vec<CalibrationRow>,
    pub sentences: Vec<String>,
    pub matrix_svg: String,
    /// A TikZ picture (already escaped).
    pub matrix_tikz: String,
    pub plots: Vec<DosePlot>,
    pub flips: Vec<[String; 5]>,
    pub accuracy: Vec<[String; 4]>,
    pub membership_rows: Vec<[String; 5]>,
}

pub struct CalibrationRow {
    pub test: String,
    pub sensitivity: Vec<String>,
    pub false_positives: String,
    pub synthetic: String,
    /// Minimum detectable dose under the report's profile, then under `strict`.
    pub minimum_dose: String,
    pub minimum_dose_strict: String,
}

pub struct DosePlot {
    pub test: String,
    pub svg: String,
    /// A TikZ picture (already escaped).
    pub tikz: String,
}

/// A minimum detectable dose, or why there is none.
fn minimum_dose(dose: Option<f64>) -> String {
    dose.map_or_else(|| "not reached".to_string(), format_dose)
}

/// `Minimum detectable dose …: 7 incomplete-completion 4 (strict 16); …`, over the tests
/// the study ran.
fn calibration_headline(c: &crate::analyze::calibration::Calibration) -> String {
    let tests: Vec<String> = c
        .tests
        .iter()
        .filter(|t| {
            t.false_positives.total > 0 || t.sensitivity.iter().any(|d| d.sensitivity.total > 0)
        })
        .map(|t| {
            format!(
                "{} {} {} (strict {})",
                t.number,
                t.test,
                minimum_dose(t.minimum_detectable_dose),
                minimum_dose(t.minimum_detectable_dose_strict)
            )
        })
        .collect();
    format!(
        "Minimum detectable dose (exposures; the smallest dose whose sensitivity's Wilson 95% lower bound exceeds the false-positive rate's upper bound): {}.",
        if tests.is_empty() {
            "no test ran".to_string()
        } else {
            tests.join("; ")
        }
    )
}

fn rate(r: &Rate) -> String {
    match (r.rate, r.interval) {
        (Some(rate), Some(i)) => format!(
            "{}/{} = {rate:.2} [{:.2}, {:.2}]",
            r.hits, r.total, i.low, i.high
        ),
        _ => NONE.to_string(),
    }
}

/// The evidence rows of tests 1–9 and of 10–12 (every cell of ours).
pub fn evidence_rows(analysis: &Analysis) -> Vec<EvidenceRow> {
    analysis
        .evidence
        .iter()
        .map(|e| {
            let answers = TestId::parse(&e.test)
                .is_some_and(|t| t == TestId::Membership || t.kind() == TestKind::Classification);
            EvidenceRow {
                model: e.model.clone(),
                dataset: e.dataset.clone(),
                test: format!("{} {}", e.number, e.test),
                serialization: e.serialization.clone().unwrap_or_else(|| NONE.to_string()),
                summary: e.summary.clone(),
                echoes: match (e.echo_trials, e.passed_trials) {
                    (Some(echo), passed) if !answers => format!("{echo} of {passed}"),
                    _ => NONE.to_string(),
                },
                chance: e.chance.map_or_else(
                    || NONE.to_string(),
                    |level| format_chance(level, e.chance_basis.as_deref().unwrap_or_default()),
                ),
                chance_basis: e.chance_basis.clone().unwrap_or_default(),
                strict: if answers || e.skipped.is_some() {
                    NONE.to_string()
                } else if e.strict_passed {
                    "passed".to_string()
                } else {
                    "not passed".to_string()
                },
            }
        })
        .collect()
}

/// The calibration section, when the analysis has a study.
pub fn calibration_view(analysis: &Analysis) -> Option<CalibrationView> {
    let c: &Calibration = analysis.calibration.as_ref()?;
    let models = c
        .models
        .iter()
        .map(|m| {
            [
                m.label.clone(),
                if m.exposure.trained_on.is_empty() {
                    "none (base)".to_string()
                } else {
                    m.exposure.trained_on.join(", ")
                },
                format_dose(m.exposure.dose),
                m.exposure.base.clone().unwrap_or_else(|| NONE.to_string()),
            ]
        })
        .collect();
    let rows = c
        .tests
        .iter()
        .map(|t| CalibrationRow {
            test: format!("{} {}", t.number, t.test),
            sensitivity: t.sensitivity.iter().map(|d| rate(&d.sensitivity)).collect(),
            false_positives: rate(&t.false_positives),
            synthetic: rate(&t.synthetic_false_positives),
            minimum_dose: minimum_dose(t.minimum_detectable_dose),
            minimum_dose_strict: minimum_dose(t.minimum_detectable_dose_strict),
        })
        .collect();
    let rates: Vec<Vec<Option<f64>>> = c
        .conditions
        .iter()
        .map(|condition| {
            c.datasets
                .iter()
                .map(|dataset| {
                    c.matrix
                        .iter()
                        .find(|m| &m.condition == condition && &m.dataset == dataset)
                        .and_then(|m| m.detected.rate)
                })
                .collect()
        })
        .collect();
    let matrix_svg = svg::rate_matrix(&c.conditions, &c.datasets, &rates);
    let matrix_tikz = matrix_tikz(&c.conditions, &c.datasets, &rates);
    let plots = c
        .tests
        .iter()
        .map(|t| {
            let points: Vec<DosePoint> = t
                .sensitivity
                .iter()
                .filter_map(|d| {
                    let i = d.sensitivity.interval?;
                    Some(DosePoint {
                        dose: d.dose,
                        rate: d.sensitivity.rate?,
                        low: i.low,
                        high: i.high,
                    })
                })
                .collect();
            let title = format!("{} {}", t.number, t.test);
            DosePlot {
                svg: svg::dose_response(&title, &points, t.false_positives.rate),
                tikz: dose_tikz(&points, t.false_positives.rate),
                test: title,
            }
        })
        .collect();
    let flips = c
        .flips
        .iter()
        .map(|f| {
            [
                f.model.clone(),
                f.base.clone(),
                f.compared.to_string(),
                format!("{} ({} on trained data)", f.gained, f.gained_on_trained),
                f.lost.to_string(),
            ]
        })
        .collect();
    let accuracy = c
        .accuracy
        .iter()
        .map(|a| {
            [
                a.test.clone(),
                format_dose(a.dose),
                if a.trained {
                    "trained on"
                } else {
                    "not trained on"
                }
                .to_string(),
                rate(&a.accuracy),
            ]
        })
        .collect();
    let membership_rows = c
        .membership_rows
        .iter()
        .map(|m| {
            [
                m.model.clone(),
                m.dataset.clone(),
                format_dose(m.dose),
                rate(&m.seen),
                rate(&m.held_out),
            ]
        })
        .collect();
    Some(CalibrationView {
        models,
        doses: c.doses.iter().map(|d| format_dose(*d)).collect(),
        rows,
        sentences: c.tests.iter().map(|t| t.sentence.clone()).collect(),
        headline: calibration_headline(c),
        matrix_svg,
        matrix_tikz,
        plots,
        flips,
        accuracy,
        membership_rows,
    })
}

/// The matrix as a TikZ picture: one square per (condition, dataset), shaded by rate.
fn matrix_tikz(rows: &[String], columns: &[String], rates: &[Vec<Option<f64>>]) -> String {
    let mut t = String::from("\\begin{tikzpicture}[x=1.3cm,y=-0.6cm]\n");
    for (c, name) in columns.iter().enumerate() {
        let _ = writeln!(
            t,
            "\\node[rotate=60,anchor=south west,font=\\scriptsize] at ({}.5,-0.1) {{{}}};",
            c,
            escape(name)
        );
    }
    for (r, name) in rows.iter().enumerate() {
        let _ = writeln!(
            t,
            "\\node[anchor=east,font=\\scriptsize] at (0,{r}.5) {{{}}};",
            escape(name)
        );
        for (c, rate) in rates[r].iter().enumerate() {
            match rate {
                Some(rate) => {
                    let shade = (rate * 100.0).round() as u32;
                    let _ = writeln!(
                        t,
                        "\\fill[green!{shade}!white] ({c},{r}) rectangle +(1,1); \\node[font=\\scriptsize] at ({c}.5,{r}.5) {{{rate:.2}}};"
                    );
                }
                None => {
                    let _ = writeln!(t, "\\fill[gray!10] ({c},{r}) rectangle +(1,1);");
                }
            }
            let _ = writeln!(t, "\\draw[gray] ({c},{r}) rectangle +(1,1);");
        }
    }
    t.push_str("\\end{tikzpicture}");
    t
}

/// A dose–response plot in TikZ: 4 cm of exposures, 3 cm of sensitivity.
fn dose_tikz(points: &[DosePoint], false_positive_rate: Option<f64>) -> String {
    let max = points.iter().map(|p| p.dose).fold(1.0, f64::max);
    let x = |dose: f64| dose / max * 4.0;
    let mut t = String::from("\\begin{tikzpicture}\n");
    t.push_str("\\draw[->] (0,0) -- (4.3,0) node[right,font=\\scriptsize] {exposures};\n");
    t.push_str("\\draw[->] (0,0) -- (0,3.2) node[above,font=\\scriptsize] {sensitivity};\n");
    t.push_str("\\node[left,font=\\scriptsize] at (0,3) {1}; \\node[left,font=\\scriptsize] at (0,0) {0};\n");
    for p in points {
        let _ = writeln!(
            t,
            "\\node[below,font=\\scriptsize] at ({:.3},0) {{{}}};",
            x(p.dose),
            format_dose(p.dose)
        );
        let _ = writeln!(
            t,
            "\\draw[blue] ({:.3},{:.3}) -- ({:.3},{:.3});",
            x(p.dose),
            p.low * 3.0,
            x(p.dose),
            p.high * 3.0
        );
    }
    if !points.is_empty() {
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("({:.3},{:.3})", x(p.dose), p.rate * 3.0))
            .collect();
        let _ = writeln!(t, "\\draw[blue,thick] {};", path.join(" -- "));
        for p in points {
            let _ = writeln!(
                t,
                "\\fill[blue] ({:.3},{:.3}) circle (1.5pt);",
                x(p.dose),
                p.rate * 3.0
            );
        }
    }
    if let Some(fp) = false_positive_rate {
        let _ = writeln!(
            t,
            "\\draw[red,dashed] (0,{:.3}) -- (4.2,{:.3}) node[right,font=\\scriptsize] {{FPR}};",
            fp * 3.0,
            fp * 3.0
        );
    }
    t.push_str("\\end{tikzpicture}");
    t
}
