//! ROC analysis of a detector's scores: AUROC (ties count one half), the ROC curve, TPR at
//! a fixed FPR (strictly below it, as Shi et al. and Zhang et al. report it), a seeded,
//! stratified bootstrap for intervals and a seeded label-permutation p-value of AUROC
//! against 0.5 (a test under the null, not a percentile of the observed data's bootstrap).

use serde::Serialize;

/// Bootstrap resamples (SPEC §8).
pub const BOOTSTRAP_RESAMPLES: usize = 1000;
/// Label permutations of the AUROC p-value: the smallest reachable p is 1 / 10 001.
pub const PERMUTATIONS: usize = 10_000;
/// The false-positive rate at which the true-positive rate is reported.
pub const TARGET_FPR: f64 = 0.05;

/// Probability that a random positive scores above a random negative, ties counting one
/// half (the Mann–Whitney U statistic over `|pos|·|neg|`). `None` when a class is empty.
pub fn auroc(positives: &[f64], negatives: &[f64]) -> Option<f64> {
    if positives.is_empty() || negatives.is_empty() {
        return None;
    }
    // Rank-based: O((n + m) log(n + m)) instead of comparing every pair.
    let mut all: Vec<(f64, bool)> = positives
        .iter()
        .map(|&s| (s, true))
        .chain(negatives.iter().map(|&s| (s, false)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            j += 1;
        }
        // Tied values share the mean of ranks i+1 ..= j.
        let mean_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += mean_rank * all[i..j].iter().filter(|(_, p)| *p).count() as f64;
        i = j;
    }
    let (n, m) = (positives.len() as f64, negatives.len() as f64);
    Some((rank_sum - n * (n + 1.0) / 2.0) / (n * m))
}

/// The ROC curve `(fpr, tpr)` from (0, 0) to (1, 1), one point per distinct score used as
/// the threshold "score ≥ t is called seen".
pub fn roc_curve(positives: &[f64], negatives: &[f64]) -> Vec<(f64, f64)> {
    let mut thresholds: Vec<f64> = positives.iter().chain(negatives).copied().collect();
    thresholds.sort_by(|a, b| b.total_cmp(a));
    thresholds.dedup();
    let rate = |scores: &[f64], t: f64| {
        scores.iter().filter(|&&s| s >= t).count() as f64 / scores.len().max(1) as f64
    };
    let mut curve = vec![(0.0, 0.0)];
    curve.extend(
        thresholds
            .iter()
            .map(|&t| (rate(negatives, t), rate(positives, t))),
    );
    if curve.last() != Some(&(1.0, 1.0)) {
        curve.push((1.0, 1.0));
    }
    curve
}

/// The highest TPR among thresholds whose FPR is strictly below `fpr` (0 when none is):
/// "TPR at 5 % FPR" as Shi et al. (Min-K% Prob) and Zhang et al. (Min-K%++) compute it,
/// `tpr[fpr < 0.05]` in their code. With 20 negatives the threshold that lets exactly one
/// through (FPR = 5 %) does not count.
pub fn tpr_at_fpr(positives: &[f64], negatives: &[f64], fpr: f64) -> Option<f64> {
    if positives.is_empty() || negatives.is_empty() {
        return None;
    }
    Some(
        roc_curve(positives, negatives)
            .into_iter()
            // An FPR equal to the target up to rounding is not below it.
            .filter(|&(f, _)| f < fpr - 1e-12)
            .map(|(_, t)| t)
            .fold(0.0, f64::max),
    )
}

/// A detector's figures on one (model, dataset, serialization).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectorStats {
    pub positives: usize,
    pub negatives: usize,
    pub auroc: f64,
    /// Bootstrap 95 % percentile interval of the AUROC.
    pub auroc_low: f64,
    pub auroc_high: f64,
    pub tpr_at_5_fpr: f64,
    pub tpr_low: f64,
    pub tpr_high: f64,
    /// One-sided label-permutation p-value of "AUROC > 0.5":
    /// `(1 + #{permuted AUROC ≥ observed}) / (1 + P)` over [`PERMUTATIONS`] seeded
    /// relabelings (exact under the null: the +1 counts the observed labelling).
    pub p_value: f64,
    pub roc: Vec<(f64, f64)>,
}

/// splitmix64: a fixed, dependency-free generator, so intervals never change with a crate
/// version.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2⁻⁵⁰ for our sizes).
    pub(super) fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

/// The bootstrap 95 % percentile interval of resampled `values` (sorted here): their 2.5 %
/// and 97.5 % percentiles, or `(point, point)` when there are none (no resample asked).
fn percentile_interval(values: &mut [f64], point: f64) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        (point, point)
    } else {
        (percentile(values, 0.025), percentile(values, 0.975))
    }
}

/// AUROC, TPR at 5 % FPR, their bootstrap 95 % intervals (`resamples` stratified resamples:
/// positives and negatives are each drawn with replacement, so both classes are always
/// present) and the permutation p-value of AUROC vs 0.5 ([`permutation_p_value`] with
/// [`PERMUTATIONS`]). Same `seed`, same figures.
pub fn bootstrap_stats(
    positives: &[f64],
    negatives: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<DetectorStats> {
    let auroc_value = auroc(positives, negatives)?;
    let tpr_value = tpr_at_fpr(positives, negatives, TARGET_FPR)?;
    let mut aurocs = Vec::with_capacity(resamples);
    let mut tprs = Vec::with_capacity(resamples);
    for_each_resample(positives, negatives, resamples, seed, |pos, neg| {
        aurocs.push(auroc(pos, neg)?);
        tprs.push(tpr_at_fpr(pos, neg, TARGET_FPR)?);
        Some(())
    })?;
    let (auroc_low, auroc_high) = percentile_interval(&mut aurocs, auroc_value);
    let (tpr_low, tpr_high) = percentile_interval(&mut tprs, tpr_value);
    Some(DetectorStats {
        positives: positives.len(),
        negatives: negatives.len(),
        auroc: auroc_value,
        auroc_low,
        auroc_high,
        tpr_at_5_fpr: tpr_value,
        tpr_low,
        tpr_high,
        p_value: permutation_p_value(positives, negatives, PERMUTATIONS, seed)?,
        roc: roc_curve(positives, negatives),
    })
}

/// The bootstrap 95 % percentile interval of the AUROC alone: the resamples
/// [`bootstrap_stats`] draws for `seed` (so its interval), without the TPR and the
/// permutation p-value. `None` when a class is empty.
pub fn auroc_interval(
    positives: &[f64],
    negatives: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    let point = auroc(positives, negatives)?;
    let mut aurocs = Vec::with_capacity(resamples);
    for_each_resample(positives, negatives, resamples, seed, |pos, neg| {
        aurocs.push(auroc(pos, neg)?);
        Some(())
    })?;
    Some(percentile_interval(&mut aurocs, point))
}

/// Draws `resamples` stratified bootstrap resamples from `seed` (positives and negatives
/// each drawn with replacement, so both classes are always present) and hands each to
/// `visit`; stops at its first `None`.
fn for_each_resample(
    positives: &[f64],
    negatives: &[f64],
    resamples: usize,
    seed: u64,
    mut visit: impl FnMut(&[f64], &[f64]) -> Option<()>,
) -> Option<()> {
    let mut rng = SplitMix(seed);
    let (mut pos, mut neg) = (vec![0.0; positives.len()], vec![0.0; negatives.len()]);
    for _ in 0..resamples {
        for slot in pos.iter_mut() {
            *slot = positives[rng.below(positives.len())];
        }
        for slot in neg.iter_mut() {
            *slot = negatives[rng.below(negatives.len())];
        }
        visit(&pos, &neg)?;
    }
    Some(())
}

/// The one-sided label-permutation p-value of "positives score higher" (AUROC > 0.5): the
/// pooled scores are relabelled `permutations` times (seeded Fisher–Yates: the first
/// `|positives|` of each shuffle are called positive) and
/// `p = (1 + #{permuted AUROC ≥ observed}) / (1 + permutations)`, which is exact (never
/// below the true p in expectation) because the observed labelling is one of the
/// relabellings under the null. `None` when a class is empty.
pub fn permutation_p_value(
    positives: &[f64],
    negatives: &[f64],
    permutations: usize,
    seed: u64,
) -> Option<f64> {
    let observed = auroc(positives, negatives)?;
    let mut pooled: Vec<f64> = positives.iter().chain(negatives).copied().collect();
    let n = positives.len();
    // A separate stream from the bootstrap's (same seed, different constant).
    let mut rng = SplitMix(seed ^ 0x5045_524D_5554_4531);
    let mut at_least_as_high = 0usize;
    for _ in 0..permutations {
        for i in (1..pooled.len()).rev() {
            let j = rng.below(i + 1);
            pooled.swap(i, j);
        }
        let (pos, neg) = pooled.split_at(n);
        // Rounding of the rank sums must not turn a tie into a miss.
        if auroc(pos, neg)? >= observed - 1e-12 {
            at_least_as_high += 1;
        }
    }
    Some((1 + at_least_as_high) as f64 / (1 + permutations) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auroc_counts_ties_as_half() {
        // Pairs (p, n): 3>1 ✓, 3>2 ✓, 3>2 ✓; 2>1 ✓, 2=2 ½, 2=2 ½; 1=1 ½, 1<2, 1<2
        // → (4 wins + 3 ties · ½) / 9 = 5.5 / 9.
        let a = auroc(&[3.0, 2.0, 1.0], &[1.0, 2.0, 2.0]).unwrap();
        assert!((a - 5.5 / 9.0).abs() < 1e-12, "{a}");
        assert_eq!(auroc(&[1.0, 1.0], &[1.0]), Some(0.5));
        assert_eq!(auroc(&[2.0], &[1.0]), Some(1.0));
        assert_eq!(auroc(&[0.0], &[1.0]), Some(0.0));
        assert_eq!(auroc(&[], &[1.0]), None);
    }

    #[test]
    fn auroc_equals_the_pairwise_definition() {
        let mut rng = SplitMix(7);
        let pos: Vec<f64> = (0..37).map(|_| rng.below(10) as f64).collect();
        let neg: Vec<f64> = (0..23).map(|_| rng.below(8) as f64).collect();
        let mut wins = 0.0;
        for p in &pos {
            for n in &neg {
                wins += if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                };
            }
        }
        let pairwise = wins / (pos.len() * neg.len()) as f64;
        assert!((auroc(&pos, &neg).unwrap() - pairwise).abs() < 1e-12);
    }

    #[test]
    fn roc_curve_and_tpr_at_five_percent() {
        // Negatives 0..20 (one per 5 % FPR), positives 10..30.
        let neg: Vec<f64> = (0..20).map(f64::from).collect();
        let pos: Vec<f64> = (10..30).map(f64::from).collect();
        let curve = roc_curve(&pos, &neg);
        assert_eq!(curve.first(), Some(&(0.0, 0.0)));
        assert_eq!(curve.last(), Some(&(1.0, 1.0)));
        // FPR strictly below 5 % (Shi et al., Zhang et al.: `tpr[fpr < 0.05]`): only
        // threshold 20 (FPR 0) qualifies, TPR 20..29 → 10/20; threshold 19 has FPR exactly
        // 1/20 and is excluded (the old `≤` gave 0.55). scripts/reference_stats.py: 0.5.
        assert_eq!(tpr_at_fpr(&pos, &neg, 0.05), Some(0.5));
        // Ties across classes move both rates at once: threshold 1 catches everything.
        assert_eq!(roc_curve(&[1.0], &[1.0]), vec![(0.0, 0.0), (1.0, 1.0)]);
        assert_eq!(tpr_at_fpr(&[1.0], &[1.0], 0.05), Some(0.0));
    }

    /// The permutation p-value against the exact permutation distribution of the
    /// Mann–Whitney U (no ties): scipy.stats.mannwhitneyu(pos, neg, alternative='greater',
    /// method='exact').pvalue = 0.02494172494172494, AUROC = 0.796875
    /// (scripts/reference_stats.py). With 10,000 permutations the estimate's standard error
    /// is √(p(1−p)/10⁴) ≈ 0.0016; it must lie within 4 of them. The bootstrap percentile
    /// it replaces was not a test under the null.
    #[test]
    fn permutation_p_value_matches_the_exact_mann_whitney_test() {
        let pos = [0.9, 0.8, 0.75, 0.7, 0.62, 0.55, 0.4, 0.33];
        let neg = [0.72, 0.6, 0.5, 0.45, 0.35, 0.3, 0.2, 0.1];
        assert!((auroc(&pos, &neg).unwrap() - 0.796_875).abs() < 1e-12);
        let exact = 0.024_941_724_941_724_94;
        let p = permutation_p_value(&pos, &neg, PERMUTATIONS, 42).unwrap();
        let se = (exact * (1.0 - exact) / PERMUTATIONS as f64).sqrt();
        assert!((p - exact).abs() < 4.0 * se, "{p} vs {exact}");
        assert_eq!(
            p,
            permutation_p_value(&pos, &neg, PERMUTATIONS, 42).unwrap()
        );
        let stats = bootstrap_stats(&pos, &neg, BOOTSTRAP_RESAMPLES, 42).unwrap();
        assert_eq!(stats.p_value, p);
        // The +1 correction: never 0, at least 1 / (1 + permutations).
        let separated = permutation_p_value(&[10.0, 11.0, 12.0], &[1.0, 2.0, 3.0], 999, 1).unwrap();
        assert!(separated >= 1.0 / 1000.0);
        // Exact p of a perfect split of 3 vs 3 is 1 / C(6, 3) = 0.05.
        assert!((separated - 0.05).abs() < 0.03, "{separated}");
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_estimate() {
        let neg: Vec<f64> = (0..50).map(|i| f64::from(i % 17)).collect();
        let pos: Vec<f64> = (0..50).map(|i| f64::from(i % 17) + 8.0).collect();
        let a = bootstrap_stats(&pos, &neg, 1000, 42).unwrap();
        let b = bootstrap_stats(&pos, &neg, 1000, 42).unwrap();
        assert_eq!(a, b);
        assert!(a.auroc_low <= a.auroc && a.auroc <= a.auroc_high, "{a:?}");
        assert!(a.tpr_low <= a.tpr_at_5_fpr && a.tpr_at_5_fpr <= a.tpr_high);
        assert!(a.p_value < 0.01, "{a:?}");
        // The AUROC interval alone comes from the same resamples.
        assert_eq!(
            auroc_interval(&pos, &neg, 1000, 42),
            Some((a.auroc_low, a.auroc_high))
        );
        // Identical classes: AUROC 0.5 and nothing significant.
        let same = bootstrap_stats(&neg, &neg, 1000, 42).unwrap();
        assert_eq!(same.auroc, 0.5);
        assert!(same.p_value > 0.3, "{same:?}");
    }
}
