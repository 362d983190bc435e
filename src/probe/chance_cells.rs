//! The chance level of every (dataset, test 7–9) cell of a catalog, as `datasets chance`
//! prints it: per trial the guesser's pass rate under Alg2, the cell's level under its
//! rule, and what `--scoring strict` makes of a pass, beside the own-column rule it replaced.

use serde::Serialize;

use super::chance::{
    GuessRates, STRICT_CHANCE_THRESHOLD, at_least, chance_level, guess_rates, own_column_rates,
    passes_needed, unseen_bound,
};
use super::{ProbeContext, PromptPack, TestId, Variant};
use crate::dataset::Serialization;
use crate::dataset::catalog::Catalog;

/// The chance level of one (dataset, test) cell of tests 7–9.
#[derive(Debug, Serialize)]
pub struct ChanceCell {
    pub dataset: String,
    pub test: &'static str,
    pub number: u8,
    pub serialization: String,
    /// Per trial: the guesser's pass probability as Alg2 judges it.
    pub trial_rates: Vec<f64>,
    /// Per trial: its Monte Carlo standard error (0 when exact).
    pub trial_errors: Vec<f64>,
    /// Per trial: guessed lines drawn (`None`: every joint guess enumerated, exact).
    pub trial_draws: Vec<Option<usize>>,
    /// The cell's chance level under its rule (any of n, at least 3 of 5).
    pub chance: Option<f64>,
    pub basis: String,
    /// The same rule over the own-column products (the chance level before issue 21).
    pub own_column_chance: Option<f64>,
    /// Whether `--scoring strict` lets a pass of this cell count (chance below the threshold).
    pub strict_counts_a_pass: Option<bool>,
    pub own_column_strict_counts_a_pass: Option<bool>,
    pub skipped: Option<String>,
}

impl ChanceCell {
    /// How the level was computed: exact, Monte Carlo with its error or its rule-of-three
    /// bound, or why the cell was skipped.
    pub fn method(&self) -> String {
        match (&self.skipped, self.trial_draws.iter().flatten().max()) {
            (Some(reason), _) => format!("skipped: {reason}"),
            (None, Some(draws)) => {
                let worst = self.trial_errors.iter().copied().fold(0.0, f64::max);
                match unseen_bound(
                    self.trial_rates
                        .iter()
                        .copied()
                        .zip(self.trial_draws.clone()),
                ) {
                    Some(bound) => format!(
                        "Monte Carlo, {draws} lines per trial, no line passed: rate < {bound:.1e} per trial (95 %)"
                    ),
                    None => {
                        format!("Monte Carlo, {draws} lines per trial, standard error ≤ {worst:.4}")
                    }
                }
            }
            (None, None) => "exact".to_string(),
        }
    }
}

/// The cells of tests 7–9 on `names` (every dataset whose file is present when empty),
/// prompts built as a run with `serialization` and `seed` builds them.
pub fn chance_cells(
    catalog: &Catalog,
    names: &[String],
    serialization: &Serialization,
    seed: u64,
) -> anyhow::Result<Vec<ChanceCell>> {
    let pack = PromptPack::builtin();
    let names: Vec<String> = if names.is_empty() {
        catalog
            .descriptors
            .iter()
            .filter(|d| catalog.locate(d).is_some())
            .map(|d| d.id.clone())
            .collect()
    } else {
        names.to_vec()
    };
    let mut entries = Vec::new();
    for name in &names {
        let dataset = catalog.load(name)?;
        let ctx = ProbeContext {
            dataset: &dataset,
            serialization,
            seed,
            pack: &pack,
            variant: Variant::Paper,
        };
        for test in [
            TestId::IncompleteCompletion,
            TestId::FullCompletion,
            TestId::FeatureCompletion,
        ] {
            let probe = crate::probe::build(test, &ctx)?;
            let rates = guess_rates(test, &dataset.table, serialization, &probe.prompts);
            let level = chance_level(test, &rates, &[], 1);
            let (trial_rates, trial_errors, trial_draws) = match &rates {
                GuessRates::PerTrial(r) => (
                    r.iter().map(|g| g.rate).collect(),
                    r.iter().map(|g| g.standard_error).collect(),
                    r.iter().map(|g| g.draws).collect(),
                ),
                _ => (Vec::new(), Vec::new(), Vec::new()),
            };
            let own = own_column_rates(&dataset.table, &probe.prompts);
            let own_column_chance = (!own.is_empty()).then(|| at_least(&own, passes_needed(test)));
            let counts = |c: Option<f64>| c.map(|c| c < STRICT_CHANCE_THRESHOLD);
            entries.push(ChanceCell {
                dataset: dataset.id.clone(),
                test: test.id(),
                number: test.number(),
                serialization: serialization.id.clone(),
                trial_rates,
                trial_errors,
                trial_draws,
                chance: level.level,
                basis: level.basis,
                own_column_chance,
                strict_counts_a_pass: counts(level.level),
                own_column_strict_counts_a_pass: counts(own_column_chance),
                skipped: probe.skipped,
            });
        }
    }
    Ok(entries)
}
