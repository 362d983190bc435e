//! Chance level of a cell (SPEC §8): the probability that a model with no knowledge of the
//! dataset passes the cell under its test's rule, so a report can tell evidence from luck.
//!
//! Two kinds of tests have one:
//! - value-guessing tests (7 incomplete completion, 8 full completion, 9 feature
//!   completion): the guesser writes, for every asked feature, a value drawn from that
//!   column's distribution in the file (it knows the marginals, e.g. from the example rows,
//!   but not the row). A trial passes by chance with the product over its asked features of
//!   the share of rows whose value Alg2 would accept for the expected one; trials are
//!   independent and the test's rule (any of n, at least 3 of 5) is applied exactly
//!   (Poisson-binomial);
//! - answer tests (10 membership, 11–12 classification): the binomial tail P(X ≥ correct)
//!   for n trials answered at the base rate, 0.5 for membership, the majority-class share
//!   of the cell's own trials for classification (so it depends on the observed count).
//!
//! Tests 1–6 are judged by Alg1 on free text (feature names, the dataset's name, a
//! column's values): there is no distribution a knowledge-free guesser draws from, so their
//! chance level is `None` with that reason, never an invented number.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Expected, Prompt, TestId, TrialVerdict};
use crate::dataset::Table;
use crate::decide::Cell;

/// Cells whose chance level reaches this are not evidence under the `strict` profile.
pub const STRICT_CHANCE_THRESHOLD: f64 = 0.05;

/// How likely each trial of a cell is to pass by guessing, computed once per prompt set
/// (while the table is loaded) and turned into a cell's chance level at decision time.
#[derive(Debug, Clone, PartialEq)]
pub enum GuessRates {
    /// Per-trial pass probability of the value guesser (index = the prompt's trial).
    PerTrial(Vec<f64>),
    /// Answer tests: the chance level depends on the trials' answers (binomial tail).
    Answers,
    /// No chance level; the reason.
    Unavailable(&'static str),
}

/// A cell's chance level, or why it has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chance {
    /// Probability of passing (tests 7–9) or of at least this many correct answers (tests
    /// 10–12) without knowledge of the data; `None` when it cannot be computed.
    pub level: Option<f64>,
    /// How it was computed, or why it was not.
    pub basis: String,
}

const FREE_TEXT: &str = "free-text answer judged by Alg1: no value distribution to guess from";
const NO_TRIALS: &str = "the cell has no trials";

/// Per-trial guess rates of one prompt set of `test` built from `table`.
pub fn guess_rates(test: TestId, table: &Table, prompts: &[Prompt]) -> GuessRates {
    match test {
        TestId::IncompleteCompletion | TestId::FullCompletion | TestId::FeatureCompletion => {
            let mut shares = ColumnShares::new(table);
            let rates = prompts
                .iter()
                .map(|p| match &p.expected {
                    Expected::Row { fields, .. } => fields
                        .iter()
                        .map(|(feature, value)| shares.share(feature, value))
                        .product(),
                    _ => 0.0,
                })
                .collect();
            GuessRates::PerTrial(rates)
        }
        TestId::Membership | TestId::Classify0Shot | TestId::Classify1Shot => GuessRates::Answers,
        _ => GuessRates::Unavailable(FREE_TEXT),
    }
}

/// The chance level of one sample's cell given its guess rates and (for answer tests) its
/// trials' expectations and verdicts. With several samples the cell passes when any sample
/// does: `1 − (1 − c)^samples`.
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
            let need = match test {
                TestId::IncompleteCompletion => 3,
                _ => 1,
            };
            let one = at_least(rates, need);
            Chance {
                level: Some(any_sample(one, samples)),
                basis: format!(
                    "value guesser drawing each asked value from its column's distribution; pass when ≥ {need} of {} trials match",
                    rates.len()
                ),
            }
        }
        GuessRates::Answers => {
            let n = trials.len() / samples;
            if n == 0 {
                return Chance {
                    level: None,
                    basis: NO_TRIALS.to_string(),
                };
            }
            let correct = trials.iter().filter(|(_, v)| v.passed).count() / samples;
            let (rate, what) = if test == TestId::Membership {
                (0.5, "0.5 (yes/no)".to_string())
            } else {
                let rate = majority_share(trials.iter().map(|(e, _)| *e));
                (rate, format!("the majority-class share {rate:.3}"))
            };
            Chance {
                level: Some(binomial_tail(n as u64, correct as u64, rate)),
                basis: format!(
                    "P(≥ {correct} of {n} correct) when answering at the base rate {what}"
                ),
            }
        }
    }
}

fn any_sample(one: f64, samples: usize) -> f64 {
    1.0 - (1.0 - one).powi(samples as i32)
}

/// P(at least `need` successes) for independent trials with success probabilities `rates`
/// (the Poisson-binomial distribution, by dynamic programming).
pub fn at_least(rates: &[f64], need: usize) -> f64 {
    // dist[k] = P(exactly k successes so far)
    let mut dist = vec![0.0; rates.len() + 1];
    dist[0] = 1.0;
    for (i, &p) in rates.iter().enumerate() {
        for k in (0..=i + 1).rev() {
            let stay = dist[k] * (1.0 - p);
            let up = if k > 0 { dist[k - 1] * p } else { 0.0 };
            dist[k] = stay + up;
        }
    }
    dist.iter().skip(need).sum::<f64>().clamp(0.0, 1.0)
}

/// P(X ≥ k) for X ~ Binomial(n, p), summed in log space (n up to thousands).
pub fn binomial_tail(n: u64, k: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let ln_choose = |n: u64, i: u64| ln_factorial(n) - ln_factorial(i) - ln_factorial(n - i);
    let total: f64 = (k..=n)
        .map(|i| (ln_choose(n, i) + i as f64 * p.ln() + (n - i) as f64 * (1.0 - p).ln()).exp())
        .sum();
    total.clamp(0.0, 1.0)
}

fn ln_factorial(n: u64) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
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

/// Value shares per column, keyed the way Alg2 compares values (numbers numerically, text
/// as spelled), computed lazily for the columns asked.
struct ColumnShares<'a> {
    table: &'a Table,
    columns: HashMap<String, HashMap<ValueKey, usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ValueKey {
    Number(u64),
    Text(String),
}

fn key_of_text(text: &str) -> ValueKey {
    match text.trim().parse::<f64>() {
        Ok(f) if f.is_finite() => ValueKey::Number((f + 0.0).to_bits()),
        _ => ValueKey::Text(text.to_string()),
    }
}

fn key_of_cell(cell: &Cell) -> ValueKey {
    match cell {
        Cell::Int(i) => ValueKey::Number((*i as f64 + 0.0).to_bits()),
        Cell::Float(f) => ValueKey::Number((*f + 0.0).to_bits()),
        Cell::Text(t) => key_of_text(t),
    }
}

impl<'a> ColumnShares<'a> {
    fn new(table: &'a Table) -> Self {
        ColumnShares {
            table,
            columns: HashMap::new(),
        }
    }

    /// Share of the table's rows whose value in `feature` equals `value` for Alg2.
    fn share(&mut self, feature: &str, value: &Cell) -> f64 {
        let table = self.table;
        let Some(col) = table.column_index(feature) else {
            return 0.0;
        };
        let counts = self.columns.entry(feature.to_string()).or_insert_with(|| {
            let mut counts = HashMap::new();
            for row in &table.rows {
                *counts.entry(key_of_text(&row[col])).or_default() += 1;
            }
            counts
        });
        let n = table.n_rows();
        if n == 0 {
            return 0.0;
        }
        *counts.get(&key_of_cell(value)).unwrap_or(&0) as f64 / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_tail_matches_hand_computed_values() {
        // P(X ≥ 3 | 5, 0.5) = (10 + 5 + 1) / 32
        assert!((binomial_tail(5, 3, 0.5) - 0.5).abs() < 1e-12);
        // P(X ≥ 1 | 5, 0.1) = 1 − 0.9^5
        assert!((binomial_tail(5, 1, 0.1) - (1.0 - 0.9f64.powi(5))).abs() < 1e-12);
        // P(X ≥ 60 | 100, 0.5) = 0.028443966820490392 (exact sum)
        assert!((binomial_tail(100, 60, 0.5) - 0.028_443_966_820_490_4).abs() < 1e-9);
        assert_eq!(binomial_tail(10, 0, 0.3), 1.0);
        assert_eq!(binomial_tail(10, 11, 0.3), 0.0);
    }

    #[test]
    fn poisson_binomial_reduces_to_the_binomial_and_to_any_of_n() {
        let same = [0.2; 5];
        assert!((at_least(&same, 3) - binomial_tail(5, 3, 0.2)).abs() < 1e-12);
        let mixed = [0.1, 0.5, 0.25];
        let none = 0.9 * 0.5 * 0.75;
        assert!((at_least(&mixed, 1) - (1.0 - none)).abs() < 1e-12);
        // exactly all three: 0.1 × 0.5 × 0.25
        assert!((at_least(&mixed, 3) - 0.0125).abs() < 1e-12);
    }
}
