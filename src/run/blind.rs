//! The blind baselines of a run (issue 26 item 2): the model-free classifier of
//! [`crate::likelihood::blind`] on the membership test's original rows against their
//! perturbed copies, once per (dataset, template), and on a checkpoint's rows trained on
//! against its held-out rows, once per checkpoint; every model's cells of that group pair
//! share the result.

use std::collections::{BTreeMap, HashMap};

use crate::likelihood::BlindAuroc;
use crate::likelihood::blind::{self, LabeledText};
use crate::probe::{LabeledRow, ProbeContext};
use crate::store::BlindBaselineRow;

/// The baselines computed so far in a run, by (dataset, template, group pair); `None` where
/// the texts are too few to cross-validate.
pub struct BlindBaselines {
    seed: u64,
    computed: BTreeMap<(String, String, String), Option<BlindAuroc>>,
}

impl BlindBaselines {
    /// `seed`: the spec's; each group pair draws its folds and resamples from it and its
    /// coordinates (`pair_seed`).
    pub fn new(seed: u64) -> BlindBaselines {
        BlindBaselines {
            seed,
            computed: BTreeMap::new(),
        }
    }

    /// The baseline of the membership test's rows ([`crate::probe::likelihood_rows`] of
    /// `ctx`): originals against their perturbed copies, a row and its copies in one fold.
    pub fn original_vs_perturbed(
        &mut self,
        ctx: &ProbeContext<'_>,
        rows: &[LabeledRow],
    ) -> Option<BlindAuroc> {
        let texts: Vec<(&str, bool, usize)> = rows
            .iter()
            .map(|row| (row.text.as_str(), row.original, row.row))
            .collect();
        let original_text: HashMap<usize, &str> = rows
            .iter()
            .filter(|row| row.original)
            .map(|row| (row.row, row.text.as_str()))
            .collect();
        self.compute(ctx, blind::ORIGINAL_VS_PERTURBED, &texts, |row| {
            original_text.get(&row).copied()
        })
    }

    /// The baseline of the column-matched reference: `originals` (file row, text) against
    /// the `matched` synthetic rows, which belong to no file row (each its own group).
    pub fn original_vs_matched(
        &mut self,
        ctx: &ProbeContext<'_>,
        originals: &[(usize, &str)],
        matched: &[String],
    ) -> Option<BlindAuroc> {
        let rows = ctx.dataset.table.n_rows();
        let texts: Vec<(&str, bool, usize)> = originals
            .iter()
            .map(|&(row, text)| (text, true, row))
            .chain(
                matched
                    .iter()
                    .enumerate()
                    .map(|(i, text)| (text.as_str(), false, rows + i)),
            )
            .collect();
        let original_text: HashMap<usize, &str> = originals.iter().copied().collect();
        self.compute(ctx, blind::ORIGINAL_VS_MATCHED, &texts, |row| {
            original_text.get(&row).copied()
        })
    }

    /// The baseline of a checkpoint `model`'s rows: `texts` are the dataset's rows in file
    /// order ([`crate::probe::row_texts`]), `trained` whether the model was trained on each.
    pub fn trained_vs_held_out(
        &mut self,
        ctx: &ProbeContext<'_>,
        model: &str,
        texts: &[String],
        trained: &[bool],
    ) -> Option<BlindAuroc> {
        let labelled: Vec<(&str, bool, usize)> = texts
            .iter()
            .zip(trained)
            .enumerate()
            .map(|(row, (text, &trained))| (text.as_str(), trained, row))
            .collect();
        self.compute(ctx, &blind::trained_vs_held_out(model), &labelled, |row| {
            texts.get(row).map(String::as_str)
        })
    }

    /// `texts`: (text, in the first group, file row it is or was made from). Rows whose
    /// original texts are equal (a duplicated row) are one group, so no fold is scored on a
    /// text its model was trained on.
    fn compute<'a>(
        &mut self,
        ctx: &ProbeContext<'_>,
        group_pair: &str,
        texts: &[(&str, bool, usize)],
        original_text: impl Fn(usize) -> Option<&'a str>,
    ) -> Option<BlindAuroc> {
        let key = (
            ctx.dataset.id.clone(),
            ctx.serialization.id.clone(),
            group_pair.to_string(),
        );
        if let Some(done) = self.computed.get(&key) {
            return *done;
        }
        let mut first_row_of: HashMap<&str, usize> = HashMap::new();
        let labelled: Vec<LabeledText<'_>> = texts
            .iter()
            .map(|&(text, positive, row)| LabeledText {
                text,
                positive,
                group: match original_text(row) {
                    Some(original) => *first_row_of.entry(original).or_insert(row),
                    None => row,
                },
            })
            .collect();
        let seed = pair_seed(self.seed, &key.0, &key.1, &key.2);
        let result = blind::blind_auroc(&labelled, seed);
        self.computed.insert(key, result);
        result
    }

    /// Every baseline computed, for the store.
    pub fn rows(&self) -> Vec<BlindBaselineRow> {
        self.computed
            .iter()
            .filter_map(|((dataset, serialization, group_pair), stats)| {
                Some(BlindBaselineRow {
                    dataset: dataset.clone(),
                    serialization: serialization.clone(),
                    seed: self.seed,
                    group_pair: group_pair.clone(),
                    stats: (*stats)?,
                    run_id: None,
                })
            })
            .collect()
    }
}

/// The seed of one group pair's folds and resamples: the spec's seed with the pair's
/// coordinates, so the same cache gives the same baseline and pairs do not share folds.
fn pair_seed(seed: u64, dataset: &str, serialization: &str, group_pair: &str) -> u64 {
    let text = format!("blind\0{seed}\0{dataset}\0{serialization}\0{group_pair}");
    let hash = blake3::hash(text.as_bytes());
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::catalog::Catalog;
    use crate::probe::{PromptPack, likelihood_rows, row_texts};

    /// The blind baseline on real data: iris's membership rows (originals against the
    /// copies test 10's perturbation makes) under two templates; the same rows with a mark
    /// (a trailing space) on every copy, which the classifier must find; and a split of the
    /// file into halves, which differ in what the file is sorted by.
    #[test]
    fn iris_originals_against_their_perturbed_copies() {
        let catalog = Catalog::open(None).unwrap();
        let iris = catalog.load("iris").unwrap();
        let pack = PromptPack::builtin();
        let mut baselines = BlindBaselines::new(0);
        for serialization in ["the-is", "colon"] {
            let serialization = crate::dataset::Serialization::builtin(serialization).unwrap();
            let ctx = ProbeContext {
                dataset: &iris,
                serialization: &serialization,
                seed: 0,
                pack: &pack,
                variant: crate::probe::Variant::Paper,
            };
            let rows = likelihood_rows(&ctx).unwrap().unwrap();
            let blind = baselines.original_vs_perturbed(&ctx, &rows).unwrap();
            eprintln!(
                "iris, {}: blind AUROC {:.3} [{:.3}, {:.3}] ({} originals, {} copies)",
                serialization.id,
                blind.auroc,
                blind.auroc_low,
                blind.auroc_high,
                blind.positives,
                blind.negatives
            );
            assert_eq!((blind.positives, blind.negatives), (100, 100));
            assert!(blind.auroc_low <= blind.auroc && blind.auroc <= blind.auroc_high);
            assert!((0.0..=1.0).contains(&blind.auroc_low) && blind.auroc_high <= 1.0);
            // Computed once: asking again gives the stored figures.
            assert_eq!(baselines.original_vs_perturbed(&ctx, &rows), Some(blind));

            // A mark on every copy (a formatting difference a perturbation could leave).
            let marked: Vec<LabeledRow> = rows
                .iter()
                .map(|row| LabeledRow {
                    text: match row.original {
                        true => row.text.clone(),
                        false => format!("{} ", row.text),
                    },
                    ..row.clone()
                })
                .collect();
            let mut fresh = BlindBaselines::new(0);
            let found = fresh.original_vs_perturbed(&ctx, &marked).unwrap();
            assert!(found.auroc > 0.9, "{found:?}");

            // A checkpoint trained on the file's first half: iris is sorted by species, so
            // the halves differ in their species names and no model is needed to tell them.
            let texts = row_texts(&ctx);
            let trained: Vec<bool> = (0..texts.len()).map(|i| i < texts.len() / 2).collect();
            let halves = fresh
                .trained_vs_held_out(&ctx, "checkpoint", &texts, &trained)
                .unwrap();
            eprintln!(
                "iris, {}: first half against second {halves:?}",
                serialization.id
            );
            assert_eq!((halves.positives, halves.negatives), (75, 75));
            assert!(halves.auroc > 0.9, "{halves:?}");
        }
        let rows = baselines.rows();
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter()
                .all(|r| r.group_pair == blind::ORIGINAL_VS_PERTURBED)
        );
    }
}
