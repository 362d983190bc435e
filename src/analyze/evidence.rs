//! Evidence behind each verdict (SPEC §8): how many passing trials are echoes and the
//! cell's chance level, shown beside the verdict, and the scoring profiles beyond the
//! paper's: `strict` drops echo passes and cells a knowledge-free model passes too often,
//! `fdr` keeps only passes whose Benjamini–Hochberg q-value is below 0.05.

use std::collections::HashMap;

use serde::Serialize;

use super::SignificanceCell;
use crate::likelihood::BlindAuroc;
use crate::likelihood::blind::ORIGINAL_VS_PERTURBED;
use crate::probe::chance::{Chance, STRICT_CHANCE_THRESHOLD};
use crate::probe::{NO_SERIALIZATION, TestId, TestKind};
use crate::store::{BlindBaselineRow, CellRow, OWN_SOURCE, TrialRow};

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
    /// A cell of tests 1–9 of ours passes only when its Benjamini–Hochberg q-value (across
    /// every cell with a p-value in the report) is below [`crate::significance::ALPHA`];
    /// a cell without a p-value does not pass.
    Fdr,
}

impl Scoring {
    pub fn id(self) -> &'static str {
        match self {
            Scoring::Paper => "paper",
            Scoring::Strict => "strict",
            Scoring::Fdr => "fdr",
        }
    }

    pub fn parse(text: &str) -> Option<Scoring> {
        [Scoring::Paper, Scoring::Strict, Scoring::Fdr]
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
            Scoring::Fdr => format!(
                "fdr: a cell of tests 1–9 passes only when it passed by its test's rule and its Benjamini–Hochberg q-value, across every cell with a p-value in this report, is < {alpha} (p: the cell's chance level when passed, 1 otherwise), so at most {percent} % of the passes counted are expected to be false discoveries; a cell without a p-value does not pass, since a pass with no error rate would void that guarantee: tests 1–6 always (free-text answers have no knowledge-free null), tests 7–9 whose chance level is not computable or not recorded (a new tabcontam run of the spec records it). Imported cells keep their published verdict (their chance levels are not known)",
                alpha = crate::significance::ALPHA,
                percent = crate::significance::ALPHA * 100.0,
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
    /// Membership cells (test 10): the blind baseline of the original and perturbed rows
    /// the test draws (a model-free classifier's AUROC, issue 26 item 2), its bootstrap
    /// interval, and whether the cell's accuracy does not exceed the interval's upper end
    /// or 0.5 ([`crate::likelihood::BlindAuroc::not_exceeded_by`]). Absent for other tests and
    /// where no baseline was computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blind_auroc: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blind_auroc_interval: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_better_than_blind: Option<bool>,
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

/// The cells as the `fdr` profile scores them: a cell of tests 1–9 of ours keeps its pass
/// only when its q-value in `significance` (the report's family) is below
/// [`crate::significance::ALPHA`]; a cell with no q-value there does not pass. Imported
/// cells and tests 10–16 are unchanged.
pub fn fdr_cells(cells: &[CellRow], significance: &[SignificanceCell]) -> Vec<CellRow> {
    let q: HashMap<CellKey<'_>, f64> = significance
        .iter()
        .filter_map(|s| {
            let test = TestId::parse(&s.test)?;
            let serialization = s.serialization.as_deref().unwrap_or(NO_SERIALIZATION);
            Some((
                (
                    s.model.as_str(),
                    s.dataset.as_str(),
                    test,
                    serialization,
                    s.seed,
                ),
                s.q_value,
            ))
        })
        .collect();
    cells
        .iter()
        .map(|c| {
            let mut fdr = c.clone();
            if c.source != OWN_SOURCE || !TestId::CONTAMINATION.contains(&c.test) {
                return fdr;
            }
            let significant = q
                .get(&cell_key(c))
                .is_some_and(|&q| q < crate::significance::ALPHA);
            if c.result.passed && !significant {
                fdr.result.passed = false;
                fdr.result.score = 0.0;
                for sample in &mut fdr.samples {
                    sample.passed = false;
                    sample.score = 0.0;
                }
            }
            fdr
        })
        .collect()
}

/// The evidence of every cell of ours, in (model, dataset, test number, serialization)
/// order, membership cells with their blind baselines (from `blind`).
pub fn evidence(
    cells: &[CellRow],
    trials: &[TrialRow],
    blind: &[BlindBaselineRow],
) -> Vec<EvidenceCell> {
    let passes = non_echo_passes(trials);
    let membership_blind: HashMap<(&str, &str, u64), &BlindAuroc> = blind
        .iter()
        .filter(|b| b.group_pair == ORIGINAL_VS_PERTURBED)
        .map(|b| {
            (
                (b.dataset.as_str(), b.serialization.as_str(), b.seed),
                &b.stats,
            )
        })
        .collect();
    let mut rows: Vec<EvidenceCell> = cells
        .iter()
        .filter(|c| c.source == OWN_SOURCE)
        .map(|c| {
            let strict_passed = strict_verdict(c, &passes);
            let blind = match (c.test, &c.serialization) {
                (TestId::Membership, Some(serialization)) if c.result.trials > 0 => {
                    membership_blind.get(&(c.dataset.as_str(), serialization.as_str(), c.seed))
                }
                _ => None,
            };
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
                blind_auroc: blind.map(|b| b.auroc),
                blind_auroc_interval: blind.map(|b| [b.auroc_low, b.auroc_high]),
                no_better_than_blind: blind.map(|b| b.not_exceeded_by(c.result.score)),
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
pub(super) mod tests {
    use super::*;
    use crate::probe::{CellResult, Expected, TrialVerdict};
    use crate::request::RequestKey;

    pub(in crate::analyze) fn cell(
        test: TestId,
        passed_trials: usize,
        chance: Option<f64>,
    ) -> CellRow {
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

    /// The report's family: tests 7–9 by their verdict's p-value (chance level when passed,
    /// raised to a Monte Carlo cell's bound; 1 when not passed), test 10 by its binomial p;
    /// tests 1–6 and imported cells are not in it. Reference values:
    /// scipy.stats.binomtest(62, 100, 0.5, alternative="greater").pvalue =
    /// 0.01048936783892586; scipy.stats.false_discovery_control([1.0, 0.2, 0.001,
    /// 0.01048936783892586, 0.0004], method="bh") = [1.0, 0.25, 0.0025, 0.0174822797315431,
    /// 0.002]; Holm for model m (by hand): 0.001 × 4 = 0.004.
    #[test]
    fn fdr_keeps_passes_with_q_below_005_and_fails_cells_without_a_p_value() {
        let mut cells = vec![
            cell(TestId::IncompleteCompletion, 0, Some(0.01)),
            cell(TestId::FullCompletion, 1, Some(0.2)),
            cell(TestId::FeatureCompletion, 1, Some(0.001)),
            cell(TestId::FeatureListInformed, 1, None),
        ];
        let mut membership = cell(TestId::Membership, 62, None);
        membership.result = CellResult {
            passed: false,
            score: 0.62,
            trials: 100,
            passed_trials: 62,
            invalid_trials: 0,
            trial_chance: Some(0.5),
        };
        membership.chance = None;
        cells.push(membership);
        // Model n: a Monte Carlo cell no guessed line passed (estimate 0, bound 4e-4).
        let mut unseen = cell(TestId::FeatureCompletion, 1, Some(0.0));
        unseen.model = "n".into();
        unseen.chance.as_mut().unwrap().basis =
            "Monte Carlo, 20000 guessed lines per trial; cell chance < 4.0e-4".into();
        cells.push(unseen);
        let mut imported = cell(TestId::FeatureListInformed, 1, None);
        imported.source = "paper".into();
        cells.push(imported);

        let rows = crate::analyze::significance(&cells, &[], &[]);
        let got: Vec<(&str, &str, f64, &str)> = rows
            .iter()
            .map(|r| (r.model.as_str(), r.test.as_str(), r.p_value, r.chance_of))
            .collect();
        assert_eq!(
            got,
            [
                ("m", "incomplete-completion", 1.0, "cell"),
                ("m", "full-completion", 0.2, "cell"),
                ("m", "feature-completion", 0.001, "cell"),
                ("m", "membership", rows[3].p_value, "trial"),
                ("n", "feature-completion", 4.0e-4, "cell"),
            ]
        );
        assert!((rows[3].p_value - 0.010_489_367_838_925_86).abs() < 1e-12);
        let expected_q = [1.0, 0.25, 0.0025, 0.017_482_279_731_543_1, 0.002];
        for (row, q) in rows.iter().zip(expected_q) {
            assert!((row.q_value - q).abs() < 1e-12, "{row:?}");
        }
        assert!((rows[2].p_holm - 0.004).abs() < 1e-12);
        // BH runs across both models; Holm within each (n's only cell keeps its p).
        assert_eq!(rows[4].p_holm, 4.0e-4);

        let fdr = fdr_cells(&cells, &rows);
        let passed: Vec<bool> = fdr.iter().map(|c| c.result.passed).collect();
        // 7: not passed, stays; 8: q 0.25, dropped; 9: q 0.0025, kept; 1: no p-value,
        // dropped; membership: unchanged; n's 9: q 0.002, kept; imported: unchanged.
        assert_eq!(passed, [false, false, true, false, false, true, true]);
        assert!(fdr[1].samples.iter().all(|s| !s.passed) && fdr[1].result.score == 0.0);
        assert_eq!(fdr[4], cells[4]);
        assert_eq!(Scoring::parse("fdr"), Some(Scoring::Fdr));
        assert!(Scoring::Fdr.rule().contains("tests 1–6 always"));
    }

    /// Issue 26 item 2: a membership cell carries the blind baseline of its (dataset,
    /// template, seed) rows, flagged when its accuracy does not exceed the upper end;
    /// other tests, seeds and group pairs get nothing.
    #[test]
    fn membership_cells_carry_their_blind_baseline() {
        let membership = |seed: u64, accuracy: f64| {
            let mut c = cell(TestId::Membership, 0, Some(0.5));
            c.seed = seed;
            c.result.trials = 100;
            c.result.score = accuracy;
            c
        };
        let baseline = |seed: u64, group_pair: &str| BlindBaselineRow {
            dataset: "iris".into(),
            serialization: "the-is".into(),
            seed,
            group_pair: group_pair.into(),
            stats: BlindAuroc {
                positives: 100,
                negatives: 100,
                auroc: 0.55,
                auroc_low: 0.47,
                auroc_high: 0.63,
            },
            run_id: None,
        };
        let cells = [
            membership(0, 0.6),
            membership(1, 0.7),
            membership(2, 0.7),
            cell(TestId::FeatureListInformed, 1, Some(0.1)),
        ];
        let blind = [
            baseline(0, ORIGINAL_VS_PERTURBED),
            baseline(1, ORIGINAL_VS_PERTURBED),
            baseline(2, "trained-vs-held-out:m"),
            baseline(0, "trained-vs-held-out:m"),
        ];
        let rows = evidence(&cells, &[], &blind);
        let low = rows.iter().find(|r| r.score == 0.6).unwrap();
        assert_eq!(low.blind_auroc, Some(0.55));
        assert_eq!(low.blind_auroc_interval, Some([0.47, 0.63]));
        assert_eq!(low.no_better_than_blind, Some(true));
        let seeds: Vec<Option<bool>> = rows
            .iter()
            .filter(|r| r.score == 0.7)
            .map(|r| r.no_better_than_blind)
            .collect();
        // Seed 1 beats its baseline; seed 2 has only a ground-truth pair, not its own.
        assert_eq!(seeds.len(), 2);
        assert!(seeds.contains(&Some(false)) && seeds.contains(&None));
        let other = rows.iter().find(|r| r.test != "membership").unwrap();
        assert_eq!(other.blind_auroc, None);
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
