//! What the report adds to the queries' results in plain Rust: significance with Holm and
//! Benjamini–Hochberg, example outputs, series ranks, mean accuracies and correlations, test descriptions.

use super::*;

/// Every cell of ours with a p-value (the report's family, see
/// [`crate::significance::MULTIPLE_COMPARISONS_NOTE`]): tests 10–16 with the exact binomial
/// p of their passed trials under the per-trial chance level; tests 7–9 with the p-value of
/// their verdict under the cell's chance level ([`verdict_p_value`]); the likelihood
/// detectors with the label-permutation p-value of their AUROC; test 17 (`row-order`) with
/// its exact rank-sum p-value. Holm's adjustment runs across each model's cells,
/// Benjamini–Hochberg's q-values across all of them (plain Rust: a model has a few thousand
/// cells at most). Cells without a p-value (tests 1–6, skipped cells, cells whose chance
/// level is not computable or predates the chance column) are not in the family.
///
/// [`verdict_p_value`]: crate::significance::verdict_p_value
pub fn significance(
    cells: &[CellRow],
    likelihood: &[crate::store::LikelihoodCellRow],
    row_order: &[crate::store::RowOrderCellRow],
) -> Vec<SignificanceCell> {
    let mut rows: Vec<SignificanceCell> = cells
        .iter()
        .filter(|c| c.source == crate::store::OWN_SOURCE)
        .filter_map(|c| {
            let (chance, chance_of, p_value) = match c.result.p_value() {
                Some(p) => (c.result.trial_chance?, "trial", p),
                None => {
                    let chance = verdict_chance(c)?;
                    let p = crate::significance::verdict_p_value(c.result.passed, chance);
                    (chance, "cell", p)
                }
            };
            Some(SignificanceCell {
                model: c.model.clone(),
                dataset: c.dataset.clone(),
                test: c.test.id().to_string(),
                number: c.test.number(),
                family: c.test.family(),
                serialization: c.serialization.clone(),
                seed: c.seed,
                passed: c.result.passed,
                score: c.result.score,
                trials: c.result.trials as u64,
                passed_trials: c.result.passed_trials as u64,
                chance,
                chance_of,
                p_value,
                p_holm: p_value,
                q_value: p_value,
            })
        })
        .collect();
    rows.extend(likelihood.iter().filter_map(likelihood_significance));
    rows.extend(row_order.iter().filter_map(row_order_significance));
    rows.sort_by(|a, b| {
        (&a.model, &a.dataset, a.number, &a.serialization, a.seed).cmp(&(
            &b.model,
            &b.dataset,
            b.number,
            &b.serialization,
            b.seed,
        ))
    });
    let mut start = 0;
    while start < rows.len() {
        let end = start
            + rows[start..]
                .iter()
                .take_while(|r| r.model == rows[start].model)
                .count();
        let p: Vec<f64> = rows[start..end].iter().map(|r| r.p_value).collect();
        for (row, adjusted) in rows[start..end]
            .iter_mut()
            .zip(crate::significance::holm(&p))
        {
            row.p_holm = adjusted;
        }
        start = end;
    }
    let p: Vec<f64> = rows.iter().map(|r| r.p_value).collect();
    for (row, q) in rows
        .iter_mut()
        .zip(crate::significance::benjamini_hochberg(&p))
    {
        row.q_value = q;
    }
    rows
}

/// A likelihood cell in the family: its AUROC against the 0.5 of a detector that cannot
/// tell the groups apart, with the label-permutation p-value. `trials` counts the texts
/// compared, `passed_trials` the positives among them (original rows, or rows trained on).
fn likelihood_significance(cell: &crate::store::LikelihoodCellRow) -> Option<SignificanceCell> {
    let stats = cell.stats.as_ref()?;
    Some(SignificanceCell {
        model: cell.model.clone(),
        dataset: cell.dataset.clone(),
        test: cell.test.clone(),
        number: 0,
        family: "likelihood",
        serialization: Some(cell.serialization.clone()),
        seed: cell.seed,
        passed: stats.p_value < crate::significance::ALPHA,
        score: stats.auroc,
        trials: (stats.positives + stats.negatives) as u64,
        passed_trials: stats.positives as u64,
        chance: 0.5,
        chance_of: "auroc",
        p_value: stats.p_value,
        p_holm: stats.p_value,
        q_value: stats.p_value,
    })
}

/// A test-17 cell in the family: `trials` are its shards, `passed_trials` the shards whose
/// file order scored above every one of their permutations (chance `1/(m+1)` each under an
/// exchangeable order); the p-value is the exact rank-sum one over all shards.
fn row_order_significance(cell: &crate::store::RowOrderCellRow) -> Option<SignificanceCell> {
    let stats = cell.stats.as_ref()?;
    Some(SignificanceCell {
        model: cell.model.clone(),
        dataset: cell.dataset.clone(),
        test: "row-order".into(),
        number: 17,
        family: "row-order",
        serialization: None,
        seed: cell.seed,
        passed: stats.p_value < crate::significance::ALPHA,
        score: stats.mean_gap_nats,
        trials: stats.shards as u64,
        passed_trials: stats
            .ranks
            .iter()
            .filter(|&&rank| rank == stats.permutations)
            .count() as u64,
        chance: 1.0 / (stats.permutations as f64 + 1.0),
        chance_of: "shard",
        p_value: stats.p_value,
        p_holm: stats.p_value,
        q_value: stats.p_value,
    })
}

/// The chance level a cell of tests 7–9 is judged against: its stored level, raised to the
/// bound its Monte Carlo draws vouch for when some trial's guesses never passed (an
/// estimate of 0 would claim more than the draws show). `None` for tests 1–6, skipped
/// cells and levels not computable or not recorded.
fn verdict_chance(c: &CellRow) -> Option<f64> {
    if !TestId::CONTAMINATION.contains(&c.test) || c.skipped.is_some() {
        return None;
    }
    let chance = c.chance.as_ref()?;
    let level = chance.level?;
    Some(crate::probe::chance::cell_bound(&chance.basis).map_or(level, |bound| level.max(bound)))
}

/// Per series of ours and test, one trial's output: the first passed trial (by dataset
/// order, primary template first, seed, trial), else the first trial.
pub(super) fn examples(
    store: &Store,
    trials: &[TrialRow],
    analysis: &Analysis,
) -> Result<Vec<Example>> {
    let position: HashMap<&str, usize> = analysis
        .datasets
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let primary = analysis.primary_serialization.as_str();
    // Smaller is preferred: passed first, then dataset order, primary template, seed, trial.
    let preference = |t: &TrialRow| {
        let serialization = t.serialization.as_deref().unwrap_or("");
        (
            !t.verdict.passed,
            position
                .get(t.dataset.as_str())
                .copied()
                .unwrap_or(usize::MAX),
            t.dataset.clone(),
            !(t.serialization.is_none() || serialization == primary),
            serialization.to_string(),
            t.seed,
            t.trial,
        )
    };
    let mut chosen: HashMap<(&str, TestId), &TrialRow> = HashMap::new();
    for t in trials {
        chosen
            .entry((t.model.as_str(), t.test))
            .and_modify(|best| {
                if preference(t) < preference(best) {
                    *best = t;
                }
            })
            .or_insert(t);
    }
    let keys: Vec<_> = chosen.values().map(|t| t.request_key).collect();
    let outputs = store.responses(&keys)?;
    let series_order: HashMap<&str, usize> = analysis
        .series
        .iter()
        .filter(|s| s.key.source == OWN_SOURCE)
        .map(|s| (s.key.model.as_str(), s.rank))
        .collect();
    let mut examples: Vec<(usize, String, u8, Example)> = chosen
        .into_iter()
        .filter_map(|((model, test), t)| {
            let output = outputs.get(&t.request_key)?;
            let example = Example {
                key: SeriesKey {
                    source: OWN_SOURCE.to_string(),
                    model: model.to_string(),
                },
                test: test.id().to_string(),
                dataset: t.dataset.clone(),
                serialization: t.serialization.clone(),
                trial: t.trial,
                passed: t.verdict.passed,
                output: cut(&output.text, MAX_EXAMPLE_CHARS),
            };
            Some((
                series_order.get(model).copied().unwrap_or(usize::MAX),
                model.to_string(),
                test.number(),
                example,
            ))
        })
        .collect();
    examples.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    Ok(examples.into_iter().map(|(_, _, _, e)| e).collect())
}

pub(super) fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Table 2's order: contamination (descending; series without a score last), then the
/// earlier release (the paper lists Llama 3 before Llama 3.1 and Mistral before Gemma 2 at
/// equal scores), then label and source.
pub(super) fn rank(series: &mut [SeriesScores]) {
    use std::cmp::Ordering;
    // Present values first; `None` last.
    fn present_first<T>(
        a: &Option<T>,
        b: &Option<T>,
        cmp: impl Fn(&T, &T) -> Ordering,
    ) -> Ordering {
        match (a, b) {
            (Some(x), Some(y)) => cmp(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
    }
    series.sort_by(|a, b| {
        // Fractions compared exactly (cross-multiplied), descending.
        let score = |s: &SeriesScores| s.contamination.map(|_| (s.passed as u128, s.cells as u128));
        present_first(&score(a), &score(b), |x, y| (y.0 * x.1).cmp(&(x.0 * y.1)))
            .then_with(|| present_first(&a.release_date, &b.release_date, |x, y| x.cmp(y)))
            .then_with(|| a.label.cmp(&b.label))
            .then_with(|| a.key.cmp(&b.key))
    });
    for (i, s) in series.iter_mut().enumerate() {
        s.rank = i + 1;
    }
}

/// Per series: the most samples of any scored cell of tests 1–9, and (with several
/// samples) the per-sample contamination: the mean over the 9 × datasets cells of the
/// fraction of samples that pass (missing and skipped cells count 0) — what one sample
/// alone would score. Summed in grid order, so the value is the same on every run.
pub(super) fn attach_sample_rates(series: &mut [SeriesScores], grid: &[GridCell]) {
    let mut by_series: HashMap<&SeriesKey, (u64, f64)> = HashMap::new();
    for cell in grid {
        let entry = by_series.entry(&cell.key).or_insert((1, 0.0));
        entry.0 = entry.0.max(cell.samples);
        entry.1 += cell.samples_passed as f64 / cell.samples.max(1) as f64;
    }
    for s in series.iter_mut() {
        if let Some(&(samples, rate_sum)) = by_series.get(&s.key) {
            s.samples = samples;
            if samples > 1 && s.cells > 0 {
                s.sample_contamination = Some(rate_sum / s.cells as f64);
            }
        }
    }
}

pub(super) fn mean_accuracy(cells: &[&AccuracyCell], test: TestId) -> MeanAccuracy {
    let datasets = cells.len();
    let mean = cells.iter().map(|c| c.accuracy).sum::<f64>() / datasets as f64;
    let trials: u64 = cells.iter().map(|c| c.trials).sum();
    let correct: u64 = cells.iter().map(|c| c.correct).sum();
    let invalid: u64 = cells.iter().map(|c| c.invalid).sum();
    MeanAccuracy {
        mean,
        datasets,
        pooled: if trials == 0 {
            0.0
        } else {
            correct as f64 / trials as f64
        },
        trials,
        correct,
        invalid,
        invalid_rate: if trials == 0 {
            0.0
        } else {
            invalid as f64 / trials as f64
        },
        interval: stats::wilson(correct, trials),
        p_value: if test == TestId::Membership {
            crate::significance::binomial_upper_tail(correct, trials, 0.5)
        } else {
            None
        },
    }
}

pub(super) fn correlations(series: &[SeriesScores]) -> Vec<Correlation> {
    type Getter = fn(&SeriesScores) -> Option<&MeanAccuracy>;
    let against: [(&str, Getter); 3] = [
        ("zero_shot", |s| s.zero_shot.as_ref()),
        ("one_shot", |s| s.one_shot.as_ref()),
        ("membership", |s| s.membership.as_ref()),
    ];
    against
        .into_iter()
        .map(|(name, get)| {
            let pairs: Vec<(f64, f64)> = series
                .iter()
                .filter_map(|s| Some((s.contamination?, get(s)?.mean)))
                .collect();
            Correlation {
                against: name.to_string(),
                n: pairs.len(),
                pearson: stats::pearson(&pairs),
                spearman: stats::spearman(&pairs),
            }
        })
        .collect()
}

pub(super) fn kind_id(kind: TestKind) -> &'static str {
    match kind {
        TestKind::Knowledge => "knowledge",
        TestKind::Memorization => "memorization",
        TestKind::Classification => "classification",
    }
}

pub(super) fn test_info(test: TestId) -> TestInfo {
    let name = match test {
        TestId::FeatureListInformed => "Feature list (inf.)",
        TestId::FeatureListUninformed => "Feature list (uninf.)",
        TestId::RecognitionFeatures => "Recognition (feat.)",
        TestId::RecognitionExamples => "Recognition (ex.)",
        TestId::FeatureValuesInformed => "Feature values (inf.)",
        TestId::FeatureValuesUninformed => "Feature values (uninf.)",
        TestId::IncompleteCompletion => "Incomplete completion",
        TestId::FullCompletion => "Full completion",
        TestId::FeatureCompletion => "Feature completion",
        TestId::Membership => "Membership",
        TestId::Classify0Shot => "0-shot classification",
        TestId::Classify1Shot => "1-shot classification",
        TestId::Header => "Header (verbatim)",
        TestId::RowCompletion => "Row completion (verbatim)",
        TestId::FeatureCompletionVerbatim => "Feature completion (verbatim)",
        TestId::FirstToken => "First token (verbatim)",
    };
    TestInfo {
        id: test.id().to_string(),
        number: test.number(),
        kind: test.kind(),
        name: name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::evidence::tests::cell;
    use crate::probe::TestId;

    /// Likelihood and row-order cells join the family with their own p-values; skipped ones
    /// stay out. Reference: scipy.stats.false_discovery_control([0.001, 0.03, 0.04],
    /// method="bh") = [0.003, 0.04, 0.04]; Holm for model m (by hand): [0.003, 0.06, 0.06].
    #[test]
    fn likelihood_and_row_order_cells_share_the_reports_family() {
        use crate::likelihood::DetectorStats;
        use crate::likelihood::row_order::RowOrderStats;
        use crate::store::{LikelihoodCellRow, RowOrderCellRow};
        let detector = |p_value: f64| DetectorStats {
            positives: 100,
            negatives: 100,
            auroc: 0.7,
            auroc_low: 0.6,
            auroc_high: 0.8,
            tpr_at_5_fpr: 0.2,
            tpr_low: 0.1,
            tpr_high: 0.3,
            p_value,
            roc: Vec::new(),
        };
        let likelihood_cell = |test: &str, stats: Option<DetectorStats>| LikelihoodCellRow {
            model: "m".into(),
            dataset: "iris".into(),
            test: test.into(),
            serialization: "the-is".into(),
            seed: 0,
            method: "local".into(),
            skipped: stats.is_none().then(|| "no log-probabilities".into()),
            stats,
            blind: None,
            run_id: None,
        };
        let likelihood = [
            likelihood_cell("likelihood-zlib", Some(detector(0.03))),
            likelihood_cell("likelihood-min-k", None),
        ];
        let row_order = [RowOrderCellRow {
            model: "m".into(),
            dataset: "iris".into(),
            seed: 0,
            method: "local".into(),
            blocked_by: vec!["species".into()],
            stats: Some(RowOrderStats {
                shards: 3,
                permutations: 19,
                ranks: vec![19, 19, 12],
                rank_sum: 50,
                p_value: 0.001,
                mean_gap_nats: 2.5,
            }),
            skipped: None,
            run_id: None,
        }];
        let cells = [cell(TestId::FullCompletion, 1, Some(0.04))];
        let rows = crate::analyze::significance(&cells, &likelihood, &row_order);
        let got: Vec<(&str, u8, &str, f64, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r.test.as_str(),
                    r.number,
                    r.family,
                    r.p_value,
                    r.passed_trials,
                    r.trials,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("likelihood-zlib", 0, "likelihood", 0.03, 100, 200),
                ("full-completion", 8, "paper", 0.04, 1, 5),
                ("row-order", 17, "row-order", 0.001, 2, 3),
            ]
        );
        for (row, (q, holm)) in rows
            .iter()
            .zip([(0.04, 0.06), (0.04, 0.06), (0.003, 0.003)])
        {
            assert!((row.q_value - q).abs() < 1e-12, "{row:?}");
            assert!((row.p_holm - holm).abs() < 1e-12, "{row:?}");
        }
        assert!(rows[0].passed && rows[2].passed);
        assert_eq!((rows[2].chance, rows[2].chance_of), (0.05, "shard"));
    }
}
