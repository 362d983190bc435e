//! Chance level of a cell (SPEC §8): the probability that a model with no knowledge of the
//! dataset passes the cell under its test's rule, so a report can tell evidence from luck.
//!
//! Two kinds of tests have one:
//! - value-guessing tests (7 incomplete completion, 8 full completion, 9 feature
//!   completion). The guesser knows each column's value distribution (the file's own
//!   frequencies, e.g. from the example rows) but not the row: it writes the line a model
//!   would write — test 7 the three missing `name is value` pairs, test 8 a whole row, test 9
//!   the value alone — with every column's value drawn independently from that column.
//!   The line is judged by the real [`alg2`] against the trial's expected values. Alg2
//!   accepts an expected value found *anywhere* in the judged line, not only in its own
//!   column, so three yes/no columns pass a guessed row about 78 % of the time, not 1/8.
//!   The per-trial pass probability is exact (every joint guess enumerated) when the asked
//!   columns have at most [`EXACT_COMBINATIONS`] joint values, else a seeded Monte Carlo
//!   estimate over [`MONTE_CARLO_DRAWS`] guessed lines whose standard error the basis states
//!   (propagated to the cell by the delta method). Trials are independent and the test's
//!   rule (any of n, at least 3 of 5) is applied exactly (Poisson-binomial); with several
//!   samples the cell passes when any sample passes, as its verdict does;
//! - answer tests (10 membership, 11–12 classification): the binomial tail P(X ≥ correct)
//!   for every trial of every sample pooled (the verdict's accuracy is the mean over samples,
//!   i.e. the pooled share), answered at the base rate: 0.5 for membership, the
//!   majority-class share of the cell's own trials for classification.
//!
//! Tests 1–6 are judged by Alg1 on free text (feature names, the dataset's name, a
//! column's values): there is no distribution a knowledge-free guesser draws from, so their
//! chance level is `None` with that reason, never an invented number.
//!
//! Size: over 700 lines because a third is tests against independent references (scipy
//! values, a simulation of the real `alg2`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::rng::{DrawKey, TrialRng};
use super::{Expected, Prompt, TestId, TrialVerdict};
use crate::dataset::{Serialization, Table};
use crate::decide::{Alg2Scope, Cell, alg2};

/// Cells whose chance level reaches this are not evidence under the `strict` profile.
pub const STRICT_CHANCE_THRESHOLD: f64 = 0.05;

/// Joint guesses enumerated exactly up to this many (the product of the asked columns'
/// distinct-value counts); above it the rate is estimated by Monte Carlo.
pub const EXACT_COMBINATIONS: usize = 50_000;

/// Guessed lines drawn per trial when the rate is estimated: the standard error is at most
/// 0.5 / √20 000 ≈ 0.0035.
pub const MONTE_CARLO_DRAWS: usize = 20_000;

/// The `test` part of the draw key of the Monte Carlo guesser (its own stream: it never
/// shares draws with a prompt).
const GUESSER_STREAM: &str = "chance-guesser";

/// How likely each trial of a cell is to pass by guessing, computed once per prompt set
/// (while the table is loaded) and turned into a cell's chance level at decision time.
#[derive(Debug, Clone, PartialEq)]
pub enum GuessRates {
    /// Per-trial pass probability of the value guesser (index = the prompt's trial).
    PerTrial(Vec<TrialGuess>),
    /// Answer tests: the chance level depends on the trials' answers (binomial tail).
    Answers,
    /// No chance level; the reason.
    Unavailable(&'static str),
}

/// The value guesser's pass probability on one trial.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialGuess {
    pub rate: f64,
    /// Standard error of `rate`: 0 when exact.
    pub standard_error: f64,
    /// Guessed lines drawn; `None` when every joint guess was enumerated (exact).
    pub draws: Option<usize>,
}

impl TrialGuess {
    /// A rate known exactly (no sampling error).
    pub fn exact(rate: f64) -> TrialGuess {
        TrialGuess {
            rate,
            standard_error: 0.0,
            draws: None,
        }
    }
}

/// A cell's chance level, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chance {
    /// Probability of passing (tests 7–9) or of at least this many correct answers (tests
    /// 10–12) without knowledge of the data; `None` when it cannot be computed.
    pub level: Option<f64>,
    /// How it was computed (with its Monte Carlo standard error where estimated), or why it
    /// was not.
    pub basis: String,
}

const FREE_TEXT: &str = "free-text answer judged by Alg1: no value distribution to guess from";
const NO_TRIALS: &str = "the cell has no trials";

/// Per-trial guess rates of one prompt set of `test` built from `table` with
/// `serialization` (the guesser writes its line in the prompt's template).
pub fn guess_rates(
    test: TestId,
    table: &Table,
    serialization: &Serialization,
    prompts: &[Prompt],
) -> GuessRates {
    let line = match test {
        TestId::IncompleteCompletion => GuessedLine::AskedPairs,
        TestId::FullCompletion => GuessedLine::WholeRow,
        TestId::FeatureCompletion => GuessedLine::ValueOnly,
        TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => {
            return GuessRates::Answers;
        }
        _ => return GuessRates::Unavailable(FREE_TEXT),
    };
    let mut guesser = Guesser::new(table, serialization);
    let rates = prompts
        .iter()
        .map(|p| match &p.expected {
            Expected::Row { fields, scope } => {
                let key = DrawKey {
                    seed: 0,
                    dataset: &p.dataset,
                    test: GUESSER_STREAM,
                    trial: p.trial,
                    serialization: Some(&serialization.id),
                };
                guesser.pass_rate(line, fields, *scope, key)
            }
            _ => TrialGuess::exact(0.0),
        })
        .collect();
    GuessRates::PerTrial(rates)
}

/// What the guesser writes on the judged line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GuessedLine {
    /// The asked columns as `name is value` pairs in the template (test 7: the model
    /// continues the row after its shown columns).
    AskedPairs,
    /// Every column of a row, in file order (test 8).
    WholeRow,
    /// The asked value alone (test 9: the prompt ends on `The feature is`).
    ValueOnly,
}

/// The knowledge-free guesser of tests 7–9: each column's value drawn independently from
/// the file's own frequencies.
struct Guesser<'a> {
    table: &'a Table,
    serialization: &'a Serialization,
    /// Per column: its distinct raw values (first-appearance order) and their counts.
    distributions: HashMap<usize, Vec<(&'a str, usize)>>,
}

impl<'a> Guesser<'a> {
    fn new(table: &'a Table, serialization: &'a Serialization) -> Self {
        Guesser {
            table,
            serialization,
            distributions: HashMap::new(),
        }
    }

    fn distribution(&mut self, col: usize) -> &[(&'a str, usize)] {
        let table = self.table;
        self.distributions.entry(col).or_insert_with(|| {
            let mut index: HashMap<&str, usize> = HashMap::new();
            let mut values: Vec<(&str, usize)> = Vec::new();
            for row in &table.rows {
                let raw = row[col].as_str();
                match index.get(raw) {
                    Some(&i) => values[i].1 += 1,
                    None => {
                        index.insert(raw, values.len());
                        values.push((raw, 1));
                    }
                }
            }
            values
        })
    }

    /// The probability that the guessed line passes Alg2 for `fields`.
    fn pass_rate(
        &mut self,
        line: GuessedLine,
        fields: &[(String, Cell)],
        scope: Alg2Scope,
        key: DrawKey<'_>,
    ) -> TrialGuess {
        let n_rows = self.table.n_rows();
        let asked: Option<Vec<usize>> = fields
            .iter()
            .map(|(name, _)| self.table.column_index(name))
            .collect();
        let (Some(asked), false) = (asked, n_rows == 0 || fields.is_empty()) else {
            return TrialGuess::exact(0.0);
        };
        let columns: Vec<usize> = match line {
            GuessedLine::WholeRow => (0..self.table.n_cols()).collect(),
            GuessedLine::AskedPairs | GuessedLine::ValueOnly => asked,
        };
        let combinations = columns.iter().try_fold(1usize, |product, &c| {
            product
                .checked_mul(self.distribution(c).len())
                .filter(|&p| p <= EXACT_COMBINATIONS)
        });
        let mut values: Vec<&str> = vec![""; columns.len()];
        let mut text = String::new();
        match combinations {
            Some(_) => {
                let distributions: Vec<&[(&str, usize)]> = columns
                    .iter()
                    .map(|c| self.distributions[c].as_slice())
                    .collect();
                // A mixed-radix counter over every joint guess, weighted by its probability.
                let mut digits = vec![0usize; columns.len()];
                let mut total = 0.0;
                loop {
                    let mut weight = 1.0;
                    for (i, (&d, dist)) in digits.iter().zip(&distributions).enumerate() {
                        values[i] = dist[d].0;
                        weight *= dist[d].1 as f64 / n_rows as f64;
                    }
                    self.write_line(line, &columns, &values, &mut text);
                    if alg2(&text, fields, scope) {
                        total += weight;
                    }
                    let mut i = 0;
                    loop {
                        if i == digits.len() {
                            return TrialGuess::exact(total.clamp(0.0, 1.0));
                        }
                        digits[i] += 1;
                        if digits[i] < distributions[i].len() {
                            break;
                        }
                        digits[i] = 0;
                        i += 1;
                    }
                }
            }
            None => {
                // Drawing a uniform row per column is drawing from its value frequencies.
                let mut rng = TrialRng::new(key);
                let mut passed = 0usize;
                for _ in 0..MONTE_CARLO_DRAWS {
                    for (value, &c) in values.iter_mut().zip(&columns) {
                        *value = self.table.rows[rng.below(n_rows)][c].as_str();
                    }
                    self.write_line(line, &columns, &values, &mut text);
                    passed += usize::from(alg2(&text, fields, scope));
                }
                let rate = passed as f64 / MONTE_CARLO_DRAWS as f64;
                TrialGuess {
                    rate,
                    standard_error: (rate * (1.0 - rate) / MONTE_CARLO_DRAWS as f64).sqrt(),
                    draws: Some(MONTE_CARLO_DRAWS),
                }
            }
        }
    }

    fn write_line(&self, line: GuessedLine, columns: &[usize], values: &[&str], out: &mut String) {
        out.clear();
        if line == GuessedLine::ValueOnly {
            // One asked value; the prompt's cue (`The feature is`) ends with the separator.
            for value in values {
                out.push(' ');
                out.push_str(value);
            }
            return;
        }
        // Test 7's prompt ends on the feature separator: the model writes a space first.
        if line == GuessedLine::AskedPairs {
            out.push(' ');
        }
        for (i, (&c, value)) in columns.iter().zip(values).enumerate() {
            if i > 0 {
                out.push_str(&self.serialization.feature_sep);
            }
            out.push_str(&self.serialization.pair(&self.table.columns[c].name, value));
        }
    }
}

/// Trials of a value test that must pass for its cell to pass: 3 of 5 for incomplete
/// completion, any one otherwise (SPEC's cell rules).
pub fn passes_needed(test: TestId) -> usize {
    match test {
        TestId::IncompleteCompletion => 3,
        _ => 1,
    }
}

/// How a basis states the cell-level bound of a Monte Carlo level with unseen trials (read
/// back by [`cell_bound`]).
const CELL_BOUND: &str = "cell chance < ";

/// The upper bound a Monte Carlo basis states for its cell (some trial's guessed lines never
/// passed, so the estimate may be 0 while the draws only vouch for this much); `None` for
/// every other basis.
pub fn cell_bound(basis: &str) -> Option<f64> {
    let at = basis.rfind(CELL_BOUND)? + CELL_BOUND.len();
    let number: String = basis[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
        .collect();
    number.parse().ok()
}

/// When a Monte Carlo trial passed on none of its draws, its standard error is 0 by the
/// formula; what the draws show is the rule-of-three bound `3 / draws` (95 %). `None` when
/// every estimated trial saw a pass. Takes each trial's (rate, draws).
pub fn unseen_bound(trials: impl IntoIterator<Item = (f64, Option<usize>)>) -> Option<f64> {
    trials
        .into_iter()
        .filter_map(|(rate, draws)| draws.filter(|_| rate == 0.0))
        .max()
        .map(|draws| 3.0 / draws as f64)
}

/// The chance level of a cell given its guess rates and (for answer tests) every sample's
/// trials' expectations and verdicts. With several samples, tests 7–9 pass when any sample
/// passes (`1 − (1 − c)^samples`, as [`super::aggregate_samples`] decides), and tests 10–12
/// pool every sample's trials (their accuracy is the mean over samples).
pub fn chance_level(
    test: TestId,
    rates: &GuessRates,
    trials: &[(&Expected, TrialVerdict)],
    samples: usize,
) -> Chance {
    let samples = samples.max(1);
    match rates {
        GuessRates::Unavailable(reason) => Chance {
            level: None,
            basis: (*reason).to_string(),
        },
        GuessRates::PerTrial(rates) if rates.is_empty() => Chance {
            level: None,
            basis: NO_TRIALS.to_string(),
        },
        GuessRates::PerTrial(rates) => {
            let need = passes_needed(test);
            let probabilities: Vec<f64> = rates.iter().map(|r| r.rate).collect();
            let one = at_least(&probabilities, need);
            let level = any_sample(one, samples);
            let how = match rates.iter().filter_map(|r| r.draws).max() {
                None => "exact (every joint guess enumerated)".to_string(),
                Some(draws) => {
                    let errors: Vec<f64> = rates.iter().map(|r| r.standard_error).collect();
                    let cell_error = at_least_standard_error(&probabilities, &errors, need)
                        * samples as f64
                        * (1.0 - one).powi(samples as i32 - 1);
                    // A trial no draw passed has a standard error of 0 by the formula;
                    // its honest bound is the rule of three.
                    let unseen = match unseen_bound(rates.iter().map(|r| (r.rate, r.draws))) {
                        Some(bound) => {
                            // The cell's level under the same rule with every unseen trial
                            // at its bound: what the draws can vouch for.
                            let upper: Vec<f64> = rates
                                .iter()
                                .map(|r| match r.draws {
                                    Some(d) if r.rate == 0.0 => 3.0 / d as f64,
                                    _ => r.rate,
                                })
                                .collect();
                            let cell = any_sample(at_least(&upper, need), samples);
                            format!(
                                " (a trial no line passed: rate < {bound:.1e} at 95 %; {CELL_BOUND}{cell:.1e})"
                            )
                        }
                        None => String::new(),
                    };
                    format!(
                        "Monte Carlo, {draws} guessed lines per trial through Alg2, standard error {cell_error:.4}{unseen}"
                    )
                }
            };
            let sample_rule = if samples > 1 {
                format!(", in any of {samples} samples")
            } else {
                String::new()
            };
            Chance {
                level: Some(level),
                basis: format!(
                    "guesser writing each column's value drawn from the file's frequencies (independent columns), judged by Alg2 anywhere in the line; pass when ≥ {need} of {} trials match{sample_rule}; {how}",
                    rates.len()
                ),
            }
        }
        GuessRates::Answers => {
            // Every sample's trials pooled: the verdict's accuracy is their mean over samples.
            let n = trials.len();
            if n == 0 {
                return Chance {
                    level: None,
                    basis: NO_TRIALS.to_string(),
                };
            }
            let correct = trials.iter().filter(|(_, v)| v.passed).count();
            let (rate, what) = if test == TestId::Membership {
                (0.5, "0.5 (yes/no)".to_string())
            } else {
                let rate = majority_share(trials.iter().map(|(e, _)| *e));
                (rate, format!("the majority-class share {rate:.3}"))
            };
            let pooled = if samples > 1 {
                format!(" ({samples} samples pooled)")
            } else {
                String::new()
            };
            Chance {
                level: crate::significance::binomial_upper_tail(correct as u64, n as u64, rate),
                basis: format!(
                    "P(≥ {correct} of {n} correct{pooled}) when answering at the base rate {what}"
                ),
            }
        }
    }
}

/// The per-trial rate the guesser would have if Alg2 accepted a value only in its own
/// column: the product over the asked features of the share of rows holding that value
/// (numbers compared numerically). Shown beside the real rate ([`guess_rates`]) to tell how
/// much the "anywhere in the line" rule adds. Not a bound: Alg2 spells an expected float in
/// its shortest form, so a guessed file spelling such as `3.50` is not accepted where this
/// product counts it. Reports before issue 21 used it as the chance level, which made cells
/// with shared values (yes/no, 0/1 columns) look like evidence.
pub fn own_column_rates(table: &Table, prompts: &[Prompt]) -> Vec<f64> {
    let n = table.n_rows();
    let mut counts: HashMap<usize, HashMap<ValueKey, usize>> = HashMap::new();
    prompts
        .iter()
        .map(|p| match &p.expected {
            Expected::Row { fields, .. } if n > 0 => fields
                .iter()
                .map(|(feature, value)| {
                    let Some(col) = table.column_index(feature) else {
                        return 0.0;
                    };
                    let column = counts.entry(col).or_insert_with(|| {
                        let mut column = HashMap::new();
                        for row in &table.rows {
                            *column.entry(ValueKey::of_text(&row[col])).or_default() += 1;
                        }
                        column
                    });
                    *column.get(&ValueKey::of_cell(value)).unwrap_or(&0) as f64 / n as f64
                })
                .product(),
            _ => 0.0,
        })
        .collect()
}

/// A value as Alg2 compares it within its own column: numbers numerically, text as spelled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ValueKey {
    Number(u64),
    Text(String),
}

impl ValueKey {
    fn of_text(text: &str) -> ValueKey {
        match text.trim().parse::<f64>() {
            // `+ 0.0` folds −0 into 0, so both spellings share a key.
            Ok(f) if f.is_finite() => ValueKey::Number((f + 0.0).to_bits()),
            _ => ValueKey::Text(text.to_string()),
        }
    }

    fn of_cell(cell: &Cell) -> ValueKey {
        match cell {
            Cell::Int(i) => ValueKey::Number((*i as f64 + 0.0).to_bits()),
            Cell::Float(f) => ValueKey::Number((*f + 0.0).to_bits()),
            Cell::Text(t) => ValueKey::of_text(t),
        }
    }
}

fn any_sample(one: f64, samples: usize) -> f64 {
    1.0 - (1.0 - one).powi(samples as i32)
}

/// P(at least `need` successes) for independent trials with success probabilities `rates`
/// (the Poisson-binomial distribution, by dynamic programming).
pub fn at_least(rates: &[f64], need: usize) -> f64 {
    exactly_distribution(rates)
        .iter()
        .skip(need)
        .sum::<f64>()
        .clamp(0.0, 1.0)
}

/// `dist[k]` = P(exactly k successes) among independent trials with probabilities `rates`.
fn exactly_distribution(rates: &[f64]) -> Vec<f64> {
    let mut dist = vec![0.0; rates.len() + 1];
    dist[0] = 1.0;
    for (i, &p) in rates.iter().enumerate() {
        for k in (0..=i + 1).rev() {
            let stay = dist[k] * (1.0 - p);
            let up = if k > 0 { dist[k - 1] * p } else { 0.0 };
            dist[k] = stay + up;
        }
    }
    dist
}

/// Standard error of [`at_least`] when each rate has its own standard error (delta method:
/// ∂P(≥ need)/∂p_i is the probability that exactly `need − 1` of the other trials pass).
fn at_least_standard_error(rates: &[f64], errors: &[f64], need: usize) -> f64 {
    if need == 0 {
        return 0.0;
    }
    let variance: f64 = (0..rates.len())
        .map(|i| {
            let others: Vec<f64> = rates
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, &p)| p)
                .collect();
            let slope = exactly_distribution(&others)
                .get(need - 1)
                .copied()
                .unwrap_or(0.0);
            (slope * errors[i]).powi(2)
        })
        .sum();
    variance.sqrt()
}

/// The share of the most frequent correct answer among classification trials.
fn majority_share<'a>(expected: impl Iterator<Item = &'a Expected>) -> f64 {
    let mut counts: HashMap<usize, usize> = HashMap::new();
    let mut n = 0;
    for e in expected {
        if let Expected::Choice { correct, .. } = e {
            *counts.entry(*correct).or_default() += 1;
            n += 1;
        }
    }
    if n == 0 {
        return 0.5;
    }
    *counts.values().max().unwrap_or(&0) as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::csv::{CsvOptions, parse};

    fn table(csv: &str) -> Table {
        parse(
            csv.as_bytes(),
            std::path::Path::new("test.csv"),
            &CsvOptions::default(),
        )
        .unwrap()
    }

    fn row_prompt(test: TestId, trial: u32, fields: &[(&str, &str)], scope: Alg2Scope) -> Prompt {
        Prompt {
            test,
            dataset: "toy".into(),
            serialization: Some("the-is".into()),
            trial,
            note: None,
            text: String::new(),
            chat_text: None,
            max_tokens: 16,
            expected: Expected::Row {
                fields: fields
                    .iter()
                    .map(|(n, v)| ((*n).to_string(), Cell::Text((*v).to_string())))
                    .collect(),
                scope,
            },
        }
    }

    fn per_trial(rates: &GuessRates) -> Vec<TrialGuess> {
        match rates {
            GuessRates::PerTrial(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Issue 21: an id column and three independent 50/50 yes/no columns (every combination
    /// once). Alg2 accepts a value anywhere in the line, so a guessed row passes expected
    /// (yes, no, yes) unless it is all-yes or all-no: 1 − 2/8 = 0.75, and (yes, yes, yes)
    /// unless it is all-no: 7/8. The old per-column product said 1/8 for both.
    #[test]
    fn yes_no_columns_pass_a_guessed_row_anywhere_in_the_line() {
        let mut csv = String::from("id,a,b,c\n");
        for i in 0..8 {
            let yn = |bit: u32| if i >> bit & 1 == 1 { "yes" } else { "no" };
            csv.push_str(&format!("{i},{},{},{}\n", yn(0), yn(1), yn(2)));
        }
        let t = table(&csv);
        let the_is = Serialization::builtin("the-is").unwrap();
        let test = TestId::IncompleteCompletion;
        let mixed = [("a", "yes"), ("b", "no"), ("c", "yes")];
        let same = [("a", "yes"), ("b", "yes"), ("c", "yes")];
        let prompts: Vec<Prompt> = (0..5)
            .map(|trial| {
                let fields: &[(&str, &str)] = if trial == 0 { &same } else { &mixed };
                row_prompt(test, trial, fields, Alg2Scope::FirstLine)
            })
            .collect();
        let rates = guess_rates(test, &t, &the_is, &prompts);
        let r = per_trial(&rates);
        assert_eq!(r[0], TrialGuess::exact(7.0 / 8.0));
        assert_eq!(r[1], TrialGuess::exact(6.0 / 8.0));
        // Cell rule ≥ 3 of 5 with rates (7/8, 3/4, 3/4, 3/4, 3/4) (scripts/reference_stats.py,
        // enumerating all 32 outcomes: 0.9228515625); by hand (exactly k of the
        // four 3/4 trials: binom(4, 0.75) = 1/256·(1, 12, 54, 108, 81)) the cell passes
        // when trial 0 passes and ≥ 2 of 4 (243/256) or it fails and ≥ 3 of 4 (189/256):
        // 7/8·243/256 + 1/8·189/256 = 1890/2048 = 0.9228515625.
        let cell = chance_level(test, &rates, &[], 1);
        let level = cell.level.unwrap();
        assert!((level - 0.922_851_562_5).abs() < 1e-12, "{level}");
        assert!(cell.basis.contains("exact"), "{}", cell.basis);
        // Under `strict` such a cell is luck, not evidence. The old per-column product gave
        // 1/8 per trial and scipy.stats.binom.sf(2, 5, 1/8) = 0.01605224609375 < 0.05: it
        // let the cell count.
        assert!(level >= STRICT_CHANCE_THRESHOLD);
    }

    /// A deterministic generator for the reference simulation, independent of the crate's
    /// [`TrialRng`] (xorshift64*).
    struct Xorshift(u64);
    impl Xorshift {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as usize % n
        }
    }

    /// The reference: draw whole guessed rows (each column from a uniformly drawn row, so
    /// columns are independent with the file's frequencies), write the cell's line the way a
    /// model writes it, and count the real `alg2`'s passes.
    fn simulate(
        t: &Table,
        columns: &[usize],
        fields: &[(String, Cell)],
        scope: Alg2Scope,
        leading: &str,
        draws: usize,
        seed: u64,
    ) -> f64 {
        let s = Serialization::builtin("the-is").unwrap();
        let mut rng = Xorshift(seed);
        let mut passed = 0;
        for _ in 0..draws {
            let pairs: Vec<String> = columns
                .iter()
                .map(|&c| s.pair(&t.columns[c].name, &t.rows[rng.below(t.n_rows())][c]))
                .collect();
            let line = format!("{leading}{}", pairs.join(&s.feature_sep));
            passed += usize::from(alg2(&line, fields, scope));
        }
        passed as f64 / draws as f64
    }

    /// Columns sharing small integers (0–2 with unequal frequencies): the exact enumeration
    /// of test 7 and the Monte Carlo estimate of test 8 both agree with an independent
    /// simulation of Alg2 on guessed rows, within four standard errors.
    #[test]
    fn chance_agrees_with_a_simulation_of_alg2_on_guessed_rows() {
        let mut csv = String::from("w,x,y,z\n");
        let mut gen_ = Xorshift(99);
        for i in 0..300 {
            let small = |g: &mut Xorshift| ["0", "0", "0", "1", "1", "2"][g.below(6)];
            let x = small(&mut gen_);
            let y = small(&mut gen_);
            let z = small(&mut gen_);
            csv.push_str(&format!("{i},{x},{y},{z}\n"));
        }
        let t = table(&csv);
        let s = Serialization::builtin("the-is").unwrap();
        // Test 7 asks x, y, z = (2, 0, 1): exact (27 joint guesses).
        let asked = [("x", "2"), ("y", "0"), ("z", "1")];
        let p7 = row_prompt(
            TestId::IncompleteCompletion,
            0,
            &asked,
            Alg2Scope::FirstLine,
        );
        let Expected::Row { fields, scope } = &p7.expected else {
            unreachable!()
        };
        let exact = per_trial(&guess_rates(
            TestId::IncompleteCompletion,
            &t,
            &s,
            std::slice::from_ref(&p7),
        ))[0];
        assert_eq!(exact.draws, None);
        let draws = 200_000;
        let simulated = simulate(&t, &[1, 2, 3], fields, *scope, " ", draws, 7);
        let se = (simulated * (1.0 - simulated) / draws as f64).sqrt();
        assert!(
            (exact.rate - simulated).abs() < 4.0 * se,
            "exact {} vs simulated {simulated} ± {se}",
            exact.rate
        );
        // The per-column product (the old formula) is far below: P(x=2)·P(y=0)·P(z=1).
        let share = |c: usize, v: &str| {
            t.rows.iter().filter(|r| r[c] == v).count() as f64 / t.n_rows() as f64
        };
        let product = share(1, "2") * share(2, "0") * share(3, "1");
        assert!(exact.rate > product + 0.1, "{} vs {product}", exact.rate);

        // Test 8 asks the whole of row 5 (300 · 3 · 3 · 3 = 8,100 joint guesses: exact).
        let row5: Vec<(String, Cell)> = (0..4)
            .map(|c| (t.columns[c].name.clone(), Cell::Text(t.rows[5][c].clone())))
            .collect();
        let p8 = Prompt {
            test: TestId::FullCompletion,
            expected: Expected::Row {
                fields: row5.clone(),
                scope: Alg2Scope::FirstRowLike,
            },
            ..p7.clone()
        };
        let g8 = per_trial(&guess_rates(TestId::FullCompletion, &t, &s, &[p8]))[0];
        let simulated8 = simulate(
            &t,
            &[0, 1, 2, 3],
            &row5,
            Alg2Scope::FirstRowLike,
            "",
            draws,
            11,
        );
        let se8 = (simulated8 * (1.0 - simulated8) / draws as f64).sqrt() + g8.standard_error;
        assert!(
            (g8.rate - simulated8).abs() < 4.0 * se8.max(1e-4),
            "{g8:?} vs simulated {simulated8}"
        );
    }

    /// Test 8 on a table with too many joint values to enumerate is estimated, seeded (the
    /// same figure twice) and states its standard error.
    #[test]
    fn large_tables_are_estimated_by_seeded_monte_carlo_with_its_error() {
        let mut csv = String::from("id,u,v,w\n");
        for i in 0..100 {
            csv.push_str(&format!(
                "{i},{},{},{}\n",
                i % 7,
                (i * 3) % 11,
                (i * 5) % 13
            ));
        }
        let t = table(&csv);
        let s = Serialization::builtin("the-is").unwrap();
        let fields: Vec<(String, Cell)> = (0..4)
            .map(|c| (t.columns[c].name.clone(), Cell::Text(t.rows[9][c].clone())))
            .collect();
        let mut p = row_prompt(TestId::FullCompletion, 0, &[], Alg2Scope::FirstRowLike);
        p.expected = Expected::Row {
            fields,
            scope: Alg2Scope::FirstRowLike,
        };
        let rates = guess_rates(TestId::FullCompletion, &t, &s, std::slice::from_ref(&p));
        assert_eq!(rates, guess_rates(TestId::FullCompletion, &t, &s, &[p]));
        let g = per_trial(&rates)[0];
        assert_eq!(g.draws, Some(MONTE_CARLO_DRAWS));
        assert!(g.standard_error > 0.0 && g.standard_error < 0.004, "{g:?}");
        let cell = chance_level(TestId::FullCompletion, &rates, &[], 1);
        assert!(cell.basis.contains("Monte Carlo"), "{}", cell.basis);
        assert!(cell.basis.contains("standard error"), "{}", cell.basis);
    }

    /// Issue 21: 7 and 8 correct of 10 in two samples. The verdict's accuracy is the mean
    /// over samples (the pooled share), so chance pools: P(X ≥ 15 | 20, 0.5).
    /// scipy.stats.binom.sf(14, 20, 0.5) = 0.020694732666015625 (the old integer division
    /// scored P(X ≥ 7 | 10, 0.5) = 0.171875).
    #[test]
    fn several_samples_of_an_answer_test_pool_their_trials() {
        let expected = Expected::Choice {
            choices: vec!["Yes".into(), "No".into()],
            correct: 0,
        };
        let verdict = |passed| TrialVerdict {
            passed,
            invalid: false,
        };
        let mut trials = Vec::new();
        for i in 0..10 {
            trials.push((&expected, verdict(i < 7)));
        }
        for i in 0..10 {
            trials.push((&expected, verdict(i < 8)));
        }
        let c = chance_level(TestId::Membership, &GuessRates::Answers, &trials, 2);
        let level = c.level.unwrap();
        assert!((level - 0.020_694_732_666_015_625).abs() < 1e-12, "{level}");
        assert!(c.basis.contains("15 of 20"), "{}", c.basis);
    }

    /// Value tests with several samples pass when any sample passes (as the verdict):
    /// 1 − (1 − c)^s.
    #[test]
    fn several_samples_of_a_value_test_pass_when_any_sample_does() {
        let rates = GuessRates::PerTrial(vec![TrialGuess::exact(0.1); 5]);
        // 1 − 0.9^5 = 0.40951; any of 2 samples: 1 − 0.59049² = 0.6513215599
        let c = chance_level(TestId::FeatureCompletion, &rates, &[], 2);
        assert!((c.level.unwrap() - 0.651_321_559_9).abs() < 1e-10, "{c:?}");
    }

    #[test]
    fn poisson_binomial_matches_scipy() {
        // scipy.stats.binom.sf(2, 5, 0.2) = 0.05792
        assert!((at_least(&[0.2; 5], 3) - 0.05792).abs() < 1e-12);
        let mixed = [0.1, 0.5, 0.25];
        let none = 0.9 * 0.5 * 0.75;
        assert!((at_least(&mixed, 1) - (1.0 - none)).abs() < 1e-12);
        // exactly all three: 0.1 × 0.5 × 0.25
        assert!((at_least(&mixed, 3) - 0.0125).abs() < 1e-12);
    }

    #[test]
    fn delta_method_error_of_any_of_n() {
        // P(≥ 1 of 2) = 1 − (1 − p)(1 − q); ∂/∂p = 1 − q. With p = q = 0.5 and both errors
        // 0.01: √(0.5² · 0.01² · 2) = 0.0070710678.
        let se = at_least_standard_error(&[0.5, 0.5], &[0.01, 0.01], 1);
        assert!((se - 0.007_071_067_8).abs() < 1e-9, "{se}");
    }
}
