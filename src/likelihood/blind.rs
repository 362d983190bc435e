//! The blind baseline (issue 26 item 2; Das, Zhang & Tramèr 2024; Duan et al. 2024): how
//! well a classifier that never looks at the model tells two groups of texts apart (the
//! membership test's original rows from their perturbed copies, or a checkpoint's rows
//! trained on from its held-out rows). A detector whose AUROC does not beat it has found
//! the difference between the groups, not the model's memory.
//!
//! The classifier: character 1–4-grams hashed into 2¹⁸ buckets (sublinear counts,
//! L2-normalized), L2-regularized logistic regression with an intercept (C = 10,
//! `logistic.rs`), trained on 4 of 5 seeded, grouped, stratified folds and scored on the
//! fifth; the pooled out-of-fold scores give the AUROC ([`super::roc::auroc`]) and its
//! seeded bootstrap interval ([`super::roc::auroc_interval`]).
//!
//! A blind AUROC below 0.5 can be systematic rather than chance: on synthetic:101:60 three
//! of four templates gave 0.40–0.42 with intervals below 0.5. The likely reason: on a small
//! table of nearly unique values a perturbed copy is made of values borrowed from other
//! rows, which the classifier met as originals in its training folds, so held-out copies
//! look more original than the originals.
//!
//! Without a difference between the groups it is unbiased: on two samples of one
//! synthetic distribution (24 seeds, 100 rows each) the mean AUROC was 0.504, on random
//! halves of iris's rows (12 labellings) 0.492. Its interval resamples the out-of-fold
//! scores only, not the folds' models, so it is somewhat narrow: it held 0.5 in 22 of 24
//! and in 10 of 12 of those.
//!
//! Architecture Invariant: pure, and a function of the texts, their labels and groups and
//! the seed only (no model), so one computation serves every model's cells.

use std::collections::HashMap;

use serde::Serialize;

use super::logistic::{Gram, fit};
use super::roc::{BOOTSTRAP_RESAMPLES, SplitMix, auroc, auroc_interval};

/// Character n-gram lengths: single characters up to 4-grams (digits with their decimal
/// point, short words, a separator with what follows it).
pub const NGRAM_SIZES: std::ops::RangeInclusive<usize> = 1..=4;
/// Hashed feature space: 2¹⁸ buckets, so that collisions are rare for the few thousand
/// distinct n-grams of a few hundred short rows.
pub const HASH_BITS: u32 = 18;
/// Cross-validation folds: every text is scored by a model that did not see it.
pub const FOLDS: usize = 5;
/// Inverse regularization strength (scikit-learn's `C`: `½‖w‖² + C Σ loss`). Ten times
/// scikit-learn's default: a unit-length row spreads over a few hundred n-grams, so the
/// few that differ between the groups carry little weight each; with C = 1 a perfectly
/// separating mark (one character) reached an out-of-fold AUROC of only 0.94, with 10 0.997.
pub const INVERSE_PENALTY: f64 = 10.0;
/// Texts at most: a larger group pair (a checkpoint's thousands of rows) is cut to a seeded
/// sample of whole groups, so the kernel stays small (its size is the square of this).
pub const MAX_TEXTS: usize = 400;

/// The group pair of the likelihood detectors and the membership test (SPEC §8).
pub const ORIGINAL_VS_PERTURBED: &str = "original-vs-perturbed";

/// The group pair of the column-matched reference (`tabcontam rows` on a model without
/// held-out rows): the membership test's distinct original rows against as many synthetic
/// rows drawn from the file's columns ([`crate::probe::matched_rows`]).
pub const ORIGINAL_VS_MATCHED: &str = "original-vs-matched";

/// The group pair of a ground-truth cell: the checkpoint `model`'s rows trained on against
/// its held-out rows (each checkpoint declares its own rows).
pub fn trained_vs_held_out(model: &str) -> String {
    format!("trained-vs-held-out:{model}")
}

/// The group pair a likelihood cell compares: trained vs held-out rows for a ground-truth
/// test id ([`super::GROUND_TRUTH_SUFFIX`]), originals vs perturbed copies otherwise.
pub fn group_pair_of_cell(model: &str, test: &str) -> String {
    if test.ends_with(super::GROUND_TRUTH_SUFFIX) {
        trained_vs_held_out(model)
    } else {
        ORIGINAL_VS_PERTURBED.to_string()
    }
}

/// The blind classifier's figures on one group pair.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BlindAuroc {
    pub positives: usize,
    pub negatives: usize,
    /// Out-of-fold AUROC: 0.5 = the groups cannot be told apart without a model.
    pub auroc: f64,
    /// Bootstrap 95 % percentile interval of the AUROC ([`BOOTSTRAP_RESAMPLES`] stratified
    /// resamples of the out-of-fold scores).
    pub auroc_low: f64,
    pub auroc_high: f64,
}

impl BlindAuroc {
    /// The report's flag: a detector (AUROC) or a membership cell (accuracy, a balanced
    /// yes/no question) whose figure does not exceed the upper end of the blind baseline's
    /// interval, or 0.5, is no better than a model-free classifier: what it separates, the
    /// texts alone already separate. The bar is never below 0.5, which a classifier that
    /// ignores the texts reaches; a blind AUROC below 0.5 (the classifier learnt a
    /// direction that reverses on held-out texts) does not lower it.
    pub fn not_exceeded_by(&self, figure: f64) -> bool {
        figure <= self.auroc_high.max(0.5)
    }
}

/// One text of a group pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabeledText<'a> {
    pub text: &'a str,
    /// In the first group (original rows, rows trained on).
    pub positive: bool,
    /// Texts of one group id always share a fold: a row and its perturbed copy, a row
    /// drawn twice. Otherwise the classifier would score a text it was trained on.
    pub group: usize,
}

/// The blind baseline of `texts` (at most [`MAX_TEXTS`] of them, see `sample_groups`),
/// seeded (sample, folds and bootstrap). `None` when there are fewer than [`FOLDS`]
/// groups, or some fold's training texts lack a class.
pub fn blind_auroc(texts: &[LabeledText<'_>], seed: u64) -> Option<BlindAuroc> {
    let texts = &sample_groups(texts, seed);
    let (scores, _) = out_of_fold_scores(texts, seed)?;
    let (mut positives, mut negatives) = (Vec::new(), Vec::new());
    for (text, score) in texts.iter().zip(scores) {
        match text.positive {
            true => positives.push(score),
            false => negatives.push(score),
        }
    }
    // Another stream than the folds' shuffle, from the same seed.
    let bootstrap_seed = seed ^ 0x424C_494E_4442_4F4F;
    let (auroc_low, auroc_high) =
        auroc_interval(&positives, &negatives, BOOTSTRAP_RESAMPLES, bootstrap_seed)?;
    Some(BlindAuroc {
        positives: positives.len(),
        negatives: negatives.len(),
        auroc: auroc(&positives, &negatives)?,
        auroc_low,
        auroc_high,
    })
}

/// Every text's score (the logistic regression's log-odds of "positive") by the model of
/// the folds that left it out, and its fold.
pub fn out_of_fold_scores(texts: &[LabeledText<'_>], seed: u64) -> Option<(Vec<f64>, Vec<usize>)> {
    let folds = assign_folds(texts, seed)?;
    let vectors: Vec<Vec<(u32, f64)>> = texts.iter().map(|t| features(t.text)).collect();
    let gram = Gram::of(&vectors, 1 << HASH_BITS);
    let labels: Vec<f64> = texts
        .iter()
        .map(|t| if t.positive { 1.0 } else { -1.0 })
        .collect();
    let mut scores = vec![0.0; texts.len()];
    for fold in 0..FOLDS {
        let (held_out, train): (Vec<usize>, Vec<usize>) =
            (0..texts.len()).partition(|&i| folds[i] == fold);
        let both = train.iter().any(|&i| labels[i] > 0.0) && train.iter().any(|&i| labels[i] < 0.0);
        if !both {
            return None;
        }
        let model = fit(&gram, train, &labels, INVERSE_PENALTY);
        for &i in &held_out {
            scores[i] = model.score(&gram, i);
        }
    }
    Some((scores, folds))
}

/// `texts` when there are at most [`MAX_TEXTS`], else a seeded sample of whole groups:
/// groups in a shuffled order, each taken while the total stays within the limit (both
/// groups of the pair keep about their shares).
fn sample_groups<'a>(texts: &[LabeledText<'a>], seed: u64) -> Vec<LabeledText<'a>> {
    if texts.len() <= MAX_TEXTS {
        return texts.to_vec();
    }
    let mut size_of: HashMap<usize, usize> = HashMap::new();
    let mut groups: Vec<usize> = Vec::new();
    for text in texts {
        let size = size_of.entry(text.group).or_insert(0);
        if *size == 0 {
            groups.push(text.group);
        }
        *size += 1;
    }
    // Another stream than the folds' shuffle and the bootstrap, from the same seed.
    let mut rng = SplitMix(seed ^ 0x5341_4D50_4C45_5331);
    for i in (1..groups.len()).rev() {
        groups.swap(i, rng.below(i + 1));
    }
    let mut taken = std::collections::HashSet::new();
    let mut total = 0;
    for group in groups {
        if total + size_of[&group] <= MAX_TEXTS {
            total += size_of[&group];
            taken.insert(group);
        }
    }
    texts
        .iter()
        .filter(|t| taken.contains(&t.group))
        .copied()
        .collect()
}

/// The fold of every text: its group's. Distinct groups are shuffled (seeded), then
/// ordered by their labels (only positives, both, only negatives; stable, so the shuffle
/// stays within each kind) and dealt round-robin, so every fold gets its share of each.
fn assign_folds(texts: &[LabeledText<'_>], seed: u64) -> Option<Vec<usize>> {
    // Per group id: its index among distinct groups, and which labels it holds.
    let mut index_of: HashMap<usize, usize> = HashMap::new();
    let mut kinds: Vec<(bool, bool)> = Vec::new();
    for text in texts {
        let next = kinds.len();
        let g = *index_of.entry(text.group).or_insert(next);
        if g == next {
            kinds.push((false, false));
        }
        if text.positive {
            kinds[g].0 = true;
        } else {
            kinds[g].1 = true;
        }
    }
    if kinds.len() < FOLDS {
        return None;
    }
    let mut order: Vec<usize> = (0..kinds.len()).collect();
    let mut rng = SplitMix(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    order.sort_by_key(|&g| match kinds[g] {
        (true, false) => 0,
        (true, true) => 1,
        _ => 2,
    });
    let mut fold_of_group = vec![0; kinds.len()];
    for (position, &g) in order.iter().enumerate() {
        fold_of_group[g] = position % FOLDS;
    }
    Some(
        texts
            .iter()
            .map(|t| fold_of_group[index_of[&t.group]])
            .collect(),
    )
}

/// The hashed character n-grams of `text`: per bucket `1 + ln(count)`, the vector scaled
/// to unit length (a long row does not outweigh a short one).
fn features(text: &str) -> Vec<(u32, f64)> {
    let chars: Vec<char> = text.chars().collect();
    let mut buckets: Vec<u32> = NGRAM_SIZES
        .flat_map(|n| chars.windows(n).map(bucket))
        .collect();
    buckets.sort_unstable();
    let mut vector: Vec<(u32, f64)> = Vec::new();
    let mut i = 0;
    while i < buckets.len() {
        let mut j = i;
        while j < buckets.len() && buckets[j] == buckets[i] {
            j += 1;
        }
        vector.push((buckets[i], 1.0 + ((j - i) as f64).ln()));
        i = j;
    }
    let norm = vector.iter().map(|(_, v)| v * v).sum::<f64>().sqrt();
    for (_, v) in &mut vector {
        *v /= norm;
    }
    vector
}

/// The bucket of one n-gram: FNV-1a over its length and characters, finished with
/// splitmix64's mixer (FNV's low bits mix poorly), top [`HASH_BITS`] bits.
fn bucket(ngram: &[char]) -> u32 {
    const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
    let mut hash = (FNV_OFFSET ^ ngram.len() as u64).wrapping_mul(FNV_PRIME);
    for &c in ngram {
        hash = (hash ^ u64::from(c)).wrapping_mul(FNV_PRIME);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    hash ^= hash >> 31;
    (hash >> (64 - HASH_BITS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows like a serialized table's: `x is 3.7, y is 12, label is k`, numbers from a
    /// seeded generator; `marker` is appended to the label (empty for none).
    fn rows(count: usize, seed: u64, marker: &str) -> Vec<String> {
        let mut rng = SplitMix(seed);
        (0..count)
            .map(|_| {
                format!(
                    "x is {}.{}, y is {}, label is {}{marker}",
                    rng.below(10),
                    rng.below(10),
                    rng.below(100),
                    ["a", "b", "c"][rng.below(3)]
                )
            })
            .collect()
    }

    fn labelled<'a>(positives: &'a [String], negatives: &'a [String]) -> Vec<LabeledText<'a>> {
        positives
            .iter()
            .map(|t| (t, true))
            .chain(negatives.iter().map(|t| (t, false)))
            .enumerate()
            .map(|(group, (text, positive))| LabeledText {
                text,
                positive,
                group,
            })
            .collect()
    }

    #[test]
    fn separable_groups_score_near_one() {
        // The second group's rows end in a character the first never has.
        let (positives, negatives) = (rows(60, 1, ""), rows(60, 2, "!"));
        let blind = blind_auroc(&labelled(&positives, &negatives), 7).unwrap();
        assert_eq!((blind.positives, blind.negatives), (60, 60));
        assert!(blind.auroc > 0.98, "{blind:?}");
        assert!(blind.auroc_low > 0.95, "{blind:?}");
        // The score is the log-odds of the first group, whichever group is marked.
        let swapped = blind_auroc(&labelled(&negatives, &positives), 7).unwrap();
        assert!(swapped.auroc > 0.98, "{swapped:?}");
    }

    #[test]
    fn the_flag_compares_with_the_upper_end_of_the_interval() {
        let blind = BlindAuroc {
            positives: 100,
            negatives: 100,
            auroc: 0.55,
            auroc_low: 0.47,
            auroc_high: 0.63,
        };
        assert!(blind.not_exceeded_by(0.5));
        assert!(blind.not_exceeded_by(0.63));
        assert!(!blind.not_exceeded_by(0.64));
        // Below 0.5 the bar is chance: what a classifier ignoring the texts reaches.
        let reversed = BlindAuroc {
            auroc: 0.39,
            auroc_low: 0.32,
            auroc_high: 0.47,
            ..blind
        };
        assert!(reversed.not_exceeded_by(0.48) && reversed.not_exceeded_by(0.5));
        assert!(!reversed.not_exceeded_by(0.51));
    }

    #[test]
    fn groups_from_one_distribution_score_near_one_half() {
        let (positives, negatives) = (rows(100, 3, ""), rows(100, 4, ""));
        let blind = blind_auroc(&labelled(&positives, &negatives), 11).unwrap();
        assert!(
            blind.auroc_low <= 0.5 && 0.5 <= blind.auroc_high,
            "{blind:?}"
        );
        assert!((blind.auroc - 0.5).abs() < 0.12, "{blind:?}");
        assert!(blind.auroc_low <= blind.auroc && blind.auroc <= blind.auroc_high);
    }

    #[test]
    fn a_seed_gives_the_same_figures_and_another_seed_other_folds() {
        let (positives, negatives) = (rows(40, 5, ""), rows(40, 6, " "));
        let texts = labelled(&positives, &negatives);
        assert_eq!(blind_auroc(&texts, 3), blind_auroc(&texts, 3));
        assert_eq!(out_of_fold_scores(&texts, 3), out_of_fold_scores(&texts, 3));
        assert_ne!(assign_folds(&texts, 3), assign_folds(&texts, 4));
    }

    #[test]
    fn a_group_stays_in_one_fold_and_each_fold_holds_both_labels() {
        let (positives, negatives) = (rows(30, 7, ""), rows(30, 8, ""));
        let mut texts = labelled(&positives, &negatives);
        // Pair text i with text 30 + i, as a row with its perturbed copy.
        for i in 0..30 {
            texts[30 + i].group = texts[i].group;
        }
        let folds = assign_folds(&texts, 9).unwrap();
        for i in 0..30 {
            assert_eq!(folds[i], folds[30 + i]);
        }
        for fold in 0..FOLDS {
            let in_fold: Vec<bool> = (0..texts.len())
                .filter(|&i| folds[i] == fold)
                .map(|i| texts[i].positive)
                .collect();
            assert_eq!(in_fold.len(), 12, "30 pairs over 5 folds");
            assert!(in_fold.contains(&true) && in_fold.contains(&false));
        }
        // Single-label groups are stratified: each fold gets 6 of each.
        let folds = assign_folds(&labelled(&positives, &negatives), 9).unwrap();
        for fold in 0..FOLDS {
            let positives = (0..60).filter(|&i| folds[i] == fold && i < 30).count();
            let negatives = (0..60).filter(|&i| folds[i] == fold && i >= 30).count();
            assert_eq!((positives, negatives), (6, 6));
        }
    }

    #[test]
    fn a_large_pair_is_cut_to_whole_groups() {
        // 300 pairs (a row and its copy) and 300 single rows: 900 texts.
        let (positives, negatives) = (rows(600, 14, ""), rows(300, 15, ""));
        let mut texts = labelled(&positives, &negatives);
        for i in 0..300 {
            texts[600 + i].group = texts[i].group;
        }
        let kept = sample_groups(&texts, 2);
        assert!(
            kept.len() <= MAX_TEXTS && kept.len() >= MAX_TEXTS - 1,
            "{}",
            kept.len()
        );
        // Whole groups: every copy kept has its row, and every paired row its copy.
        let groups = |positive: bool| -> Vec<usize> {
            let mut g: Vec<usize> = kept
                .iter()
                .filter(|t| t.positive == positive && t.group < 300)
                .map(|t| t.group)
                .collect();
            g.sort_unstable();
            g
        };
        assert_eq!(groups(true), groups(false));
        // About the pair's shares: 600 of 900 texts are positive.
        let share = kept.iter().filter(|t| t.positive).count() as f64 / kept.len() as f64;
        assert!((share - 2.0 / 3.0).abs() < 0.06, "{share}");
        assert_eq!(sample_groups(&texts, 2), kept);
        assert_eq!(sample_groups(&texts[..MAX_TEXTS], 2), texts[..MAX_TEXTS]);
    }

    #[test]
    fn too_few_groups_or_one_class_give_nothing() {
        let few = rows(4, 1, "");
        let texts = labelled(&few[..2], &few[2..]);
        assert_eq!(blind_auroc(&texts, 0), None);
        let only = rows(20, 1, "");
        assert_eq!(blind_auroc(&labelled(&only, &[]), 0), None);
    }

    #[test]
    fn features_are_unit_length_hashed_ngrams() {
        let vector = features("ab");
        // "a", "b", "ab": three n-grams, each once (1 + ln 1 = 1), scaled by 1/√3.
        assert_eq!(vector.len(), 3);
        for (_, v) in &vector {
            assert!((v - 1.0 / 3f64.sqrt()).abs() < 1e-12);
        }
        assert!(vector.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(vector.iter().all(|&(k, _)| k < 1 << HASH_BITS));
        // A repeated n-gram counts sublinearly: "aa" has "a" twice.
        let repeated = features("aa");
        assert_eq!(repeated.len(), 2);
        let weights: Vec<f64> = repeated.iter().map(|(_, v)| *v).collect();
        let (a, aa) = (1.0 + 2f64.ln(), 1.0);
        let norm = (a * a + aa * aa).sqrt();
        assert!(weights.contains(&(a / norm)) && weights.contains(&(aa / norm)));
        // The length is part of the hash: a 1-gram and a 2-gram of one char differ.
        assert_ne!(bucket(&['a']), bucket(&['a', 'a']));
    }

    #[test]
    fn group_pairs_follow_the_cell() {
        assert_eq!(
            group_pair_of_cell("m", "likelihood-min-k"),
            ORIGINAL_VS_PERTURBED
        );
        assert_eq!(
            group_pair_of_cell("ckpt", "likelihood-min-k/trained-vs-held-out"),
            "trained-vs-held-out:ckpt"
        );
    }
}
