//! Evidence behind each verdict (SPEC §8): how many passing trials are echoes and the
//! cell's chance level, shown beside the verdict, and the `strict` scoring profile that
//! drops echo passes and cells a knowledge-free model passes too often.

use std::collections::HashMap;

use serde::Serialize;

use crate::probe::chance::{Chance, STRICT_CHANCE_THRESHOLD};
use crate::probe::{NO_SERIALIZATION, TestId, TestKind};
use crate::store::{CellRow, OWN_SOURCE, TrialRow};

/// How cells of tests 1–9 count in scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// The paper's rule (default): a cell passes by its test's rule.
    #[default]
    Paper,
    /// Echo passes do not count, and a cell whose chance level is at least
    /// [`STRICT_CHANCE_THRESHOLD`] does not pass.
    Strict,
}

impl Scoring {
    pub fn id(self) -> &'static str {
        match self {
            Scoring::Paper => "paper",
            Scoring::Strict => "strict",
        }
    }

    pub fn parse(text: &str) -> Option<Scoring> {
        [Scoring::Paper, Scoring::Strict]
            .into_iter()
            .find(|s| s.id() == text.trim())
    }

    /// The rule in one sentence, for the reports.
    pub fn rule(self) -> String {
        match self {
            Scoring::Paper => "paper: a cell passes by its test's rule (echoes and chance are shown, not subtracted)".to_string(),
            Scoring::Strict => format!(
                "strict: passing trials that are echoes do not count toward the test's rule, and a cell whose chance level is ≥ {STRICT_CHANCE_THRESHOLD} does not pass (cells without a computable chance level keep their verdict)"
            ),
        }
    }
}

/// One of our cells with the evidence behind its verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvidenceCell {
    pub model: String,
    pub dataset: String,
    pub test: String,
    pub number: u8,
    pub serialization: Option<String>,
    /// The paper's verdict (tests 1–9) or whether the accuracy beats chance (10–12: never
    /// set; see `score`).
    pub passed: bool,
    /// The verdict under the strict profile (tests 1–9).
    pub strict_passed: bool,
    /// Accuracy for tests 10–12, 1/0 otherwise.
    pub score: f64,
    pub trials: usize,
    pub passed_trials: usize,
    /// Passing trials that are echoes; `None` when the cell was decided before the guard.
    pub echo_trials: Option<usize>,
    /// Chance level; `None` when it cannot be computed (`chance_basis` says why) or the cell
    /// predates it.
    pub chance: Option<f64>,
    pub chance_basis: Option<String>,
    /// The verdict with its evidence, e.g. `passed (2 of 2 passing trials are echoes)`.
    pub summary: String,
    pub skipped: Option<String>,
}

/// Minimum passing trials of a sample under the test's rule (tests 1–9).
fn needed(test: TestId) -> usize {
    if test == TestId::IncompleteCompletion {
        3
    } else {
        1
    }
}

type CellKey<'a> = (&'a str, &'a str, TestId, &'a str, u64);

fn trial_key(t: &TrialRow) -> CellKey<'_> {
    (
        &t.model,
        &t.dataset,
        t.test,
        t.serialization.as_deref().unwrap_or(NO_SERIALIZATION),
        t.seed,
    )
}

fn cell_key(c: &CellRow) -> CellKey<'_> {
    (
        &c.model,
        &c.dataset,
        c.test,
        c.serialization.as_deref().unwrap_or(NO_SERIALIZATION),
        c.seed,
    )
}

/// Non-echo passing trials per (cell, sample).
fn non_echo_passes(trials: &[TrialRow]) -> HashMap<(CellKey<'_>, u32), usize> {
    let mut counts = HashMap::new();
    for t in trials {
        if t.verdict.passed && !t.echo {
            *counts.entry((trial_key(t), t.sample)).or_default() += 1;
        }
    }
    counts
}

fn strict_verdict(c: &CellRow, passes: &HashMap<(CellKey<'_>, u32), usize>) -> bool {
    if !c.result.passed || c.test.kind() == TestKind::Classification || c.test == TestId::Membership
    {
        return c.result.passed;
    }
    if c.source != OWN_SOURCE {
        return c.result.passed;
    }
    let samples = c.samples.len().max(1) as u32;
    let key = cell_key(c);
    let any_sample =
        (0..samples).any(|s| passes.get(&(key, s)).copied().unwrap_or(0) >= needed(c.test));
    let chance_ok = c
        .chance
        .as_ref()
        .and_then(|ch| ch.level)
        .is_none_or(|level| level < STRICT_CHANCE_THRESHOLD);
    any_sample && chance_ok
}

/// The cells as the strict profile scores them: tests 1–9 of ours re-decided without echo
/// passes and failed when their chance level is high. Imported cells are unchanged (their
/// trials are not known).
pub fn strict_cells(cells: &[CellRow], trials: &[TrialRow]) -> Vec<CellRow> {
    let passes = non_echo_passes(trials);
    cells
        .iter()
        .map(|c| {
            let passed = strict_verdict(c, &passes);
            let key = cell_key(c);
            let need = needed(c.test);
            let mut strict = c.clone();
            if passed != c.result.passed {
                strict.result.passed = passed;
                strict.result.score = f64::from(u8::from(passed));
                for (s, sample) in strict.samples.iter_mut().enumerate() {
                    sample.passed =
                        passed && passes.get(&(key, s as u32)).copied().unwrap_or(0) >= need;
                    sample.score = f64::from(u8::from(sample.passed));
                }
            }
            strict
        })
        .collect()
}

/// The evidence of every cell of ours, in (model, dataset, test number, serialization) order.
pub fn evidence(cells: &[CellRow], trials: &[TrialRow]) -> Vec<EvidenceCell> {
    let passes = non_echo_passes(trials);
    let mut rows: Vec<EvidenceCell> = cells
        .iter()
        .filter(|c| c.source == OWN_SOURCE)
        .map(|c| {
            let strict_passed = strict_verdict(c, &passes);
            EvidenceCell {
                model: c.model.clone(),
                dataset: c.dataset.clone(),
                test: c.test.id().to_string(),
                number: c.test.number(),
                serialization: c.serialization.clone(),
                passed: c.result.passed,
                strict_passed,
                score: c.result.score,
                trials: c.result.trials,
                passed_trials: c.result.passed_trials,
                echo_trials: c.echo_trials,
                chance: c.chance.as_ref().and_then(|ch| ch.level),
                chance_basis: c.chance.as_ref().map(|ch| ch.basis.clone()),
                summary: summary(c),
                skipped: c.skipped.clone(),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.model, &a.dataset, a.number, &a.serialization).cmp(&(
            &b.model,
            &b.dataset,
            b.number,
            &b.serialization,
        ))
    });
    rows
}

/// `passed (2 of 2 passing trials are echoes; chance 0.18)`, `not passed (chance 0.003)`,
/// `accuracy 0.62 (chance of ≥ 62 of 100: 0.010)`.
pub fn summary(c: &CellRow) -> String {
    if let Some(reason) = &c.skipped {
        return format!("skipped ({reason})");
    }
    let chance = match &c.chance {
        Some(Chance {
            level: Some(level),
            basis,
        }) => format!("chance {}", format_chance(*level, basis)),
        Some(_) => "chance not computable".to_string(),
        None => "chance not recorded".to_string(),
    };
    let answers = c.test == TestId::Membership || c.test.kind() == TestKind::Classification;
    if answers {
        return format!(
            "accuracy {:.2} ({} of {} correct; {chance})",
            c.result.score, c.result.passed_trials, c.result.trials
        );
    }
    let verdict = if c.result.passed {
        "passed"
    } else {
        "not passed"
    };
    let echoes = match (c.echo_trials, c.result.passed_trials) {
        (_, 0) => None,
        (Some(e), p) => Some(format!("{e} of {p} passing trials are echoes")),
        (None, _) => Some("echoes not recorded".to_string()),
    };
    match echoes {
        Some(echoes) => format!("{verdict} ({echoes}; {chance})"),
        None => format!("{verdict} ({chance})"),
    }
}

/// A chance level as the reports show it: the probability, or, where a Monte Carlo estimate
/// is below what its draws can resolve (a trial no guessed line passed), the bound its basis
/// states (`< 4.5e-12`, not a misleading `< 1e-6`).
pub fn format_chance(level: f64, basis: &str) -> String {
    match crate::probe::chance::cell_bound(basis) {
        Some(bound) if level < bound => format!("< {bound:.1e} (Monte Carlo bound)"),
        _ => format_probability(level),
    }
}

/// A probability with three significant decimals (`0.18`, `0.0031`, `< 1e-6`).
pub fn format_probability(p: f64) -> String {
    if p < 1e-6 {
        "< 1e-6".to_string()
    } else if p < 0.01 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{CellResult, Expected, TrialVerdict};
    use crate::request::RequestKey;

    fn cell(test: TestId, passed_trials: usize, chance: Option<f64>) -> CellRow {
        let result = CellResult {
            passed: passed_trials > 0,
            score: f64::from(u8::from(passed_trials > 0)),
            trials: 5,
            passed_trials,
            invalid_trials: 0,
            trial_chance: None,
        };
        CellRow {
            source: OWN_SOURCE.into(),
            model: "m".into(),
            dataset: "iris".into(),
            test,
            serialization: Some("the-is".into()),
            seed: 0,
            result,
            samples: vec![result],
            skipped: None,
            echo_trials: Some(0),
            chance: Some(Chance {
                level: chance,
                basis: String::new(),
            }),
            run_id: None,
        }
    }

    fn trial(test: TestId, index: u32, passed: bool, echo: bool) -> TrialRow {
        TrialRow {
            model: "m".into(),
            dataset: "iris".into(),
            test,
            serialization: Some("the-is".into()),
            seed: 0,
            sample: 0,
            trial: index,
            request_key: RequestKey([0; 32]),
            note: None,
            expected: Expected::Names { names: vec![] },
            verdict: TrialVerdict {
                passed,
                invalid: false,
            },
            echo,
            run_id: None,
        }
    }

    #[test]
    fn strict_drops_echo_passes_and_likely_guesses() {
        let test = TestId::RecognitionExamples;
        // One passing trial, an echo: passes by the paper's rule, not under strict.
        let echo_only = [trial(test, 0, true, true)];
        let strict = strict_cells(&[cell(test, 1, None)], &echo_only);
        assert!(!strict[0].result.passed);
        // The same pass without echo, chance not computable: kept.
        let evidence = [trial(test, 0, true, false)];
        assert!(
            strict_cells(&[cell(test, 1, None)], &evidence)[0]
                .result
                .passed
        );
        // Feature completion passed once but guessing passes 20 % of the time: dropped;
        // at 1 % it is kept.
        let fc = TestId::FeatureCompletion;
        let trials = [trial(fc, 0, true, false)];
        assert!(
            !strict_cells(&[cell(fc, 1, Some(0.2))], &trials)[0]
                .result
                .passed
        );
        assert!(
            strict_cells(&[cell(fc, 1, Some(0.01))], &trials)[0]
                .result
                .passed
        );
        // Incomplete completion needs 3 non-echo passes of 5.
        let ic = TestId::IncompleteCompletion;
        let trials: Vec<TrialRow> = (0..3).map(|i| trial(ic, i, true, i == 0)).collect();
        assert!(
            !strict_cells(&[cell(ic, 3, Some(1e-9))], &trials)[0]
                .result
                .passed
        );
        assert_eq!(
            summary(&{
                let mut c = cell(test, 1, None);
                c.echo_trials = Some(1);
                c
            }),
            "passed (1 of 1 passing trials are echoes; chance not computable)"
        );
    }

    /// A Monte Carlo cell whose guessed lines never passed shows the bound its draws vouch
    /// for. Reference: P(X ≥ 3 | n = 5, p = 3 / 20,000) = 10 p³ (1 − p)² + 5 p⁴ (1 − p) + p⁵
    /// = 3.3745e-11 (scipy.stats.binom.sf(2, 5, 1.5e-4)).
    #[test]
    fn an_unseen_monte_carlo_cell_shows_its_rule_of_three_bound() {
        use crate::probe::chance::{GuessRates, TrialGuess, chance_level};
        let unseen = TrialGuess {
            rate: 0.0,
            standard_error: 0.0,
            draws: Some(20_000),
        };
        let rates = GuessRates::PerTrial(vec![unseen; 5]);
        let chance = chance_level(TestId::IncompleteCompletion, &rates, &[], 1);
        assert_eq!(chance.level, Some(0.0));
        assert_eq!(
            format_chance(0.0, &chance.basis),
            "< 3.4e-11 (Monte Carlo bound)",
            "{}",
            chance.basis
        );
        // An exact zero stays a probability, and a seen Monte Carlo rate is shown as estimated.
        assert_eq!(
            format_chance(0.0, "exact (every joint guess enumerated)"),
            "< 1e-6"
        );
        let seen = GuessRates::PerTrial(vec![
            TrialGuess {
                rate: 0.5,
                standard_error: 0.003,
                draws: Some(20_000),
            };
            5
        ]);
        let chance = chance_level(TestId::IncompleteCompletion, &seen, &[], 1);
        assert_eq!(format_chance(chance.level.unwrap(), &chance.basis), "0.500");
    }
}
