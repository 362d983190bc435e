//! Exact binomial tails, the Holm correction and Benjamini–Hochberg q-values (SPEC §8
//! "Significance"): how surprising a cell's count of passed trials (or its verdict) is under
//! its chance level, and how many such surprises a report may hold by luck. Pure functions
//! of numbers, shared by the decisions (`probe`) and the reports (`analyze`).

/// The significance level of the verbatim count tests' decisions (one-sided, per cell,
/// before any correction; the reports show the Holm-adjusted value beside it).
pub const ALPHA: f64 = 0.05;

/// The one-line note on multiple comparisons every report carries beside its p-values.
pub const MULTIPLE_COMPARISONS_NOTE: &str = "p: tests 10-16, exact one-sided binomial P(X >= k) of the cell's passed trials under its per-trial chance level; tests 7-9, the verdict's p-value, P(a model with no knowledge of the data passes the cell) = the cell's chance level when it passed and 1 when it did not (tests 1-6 have no chance level, hence no p-value); likelihood detectors, the label-permutation p-value of AUROC > 0.5 (count: texts in each group); test 17 (row-order), the exact rank-sum p-value over its shards (count: shards whose file order beat all its permutations). p(Holm): Holm's step-down adjustment across all cells of the same model that have a p-value (controls the family-wise error rate at 5 % when p(Holm) < 0.05). q(BH): Benjamini-Hochberg's step-up q-value across every cell with a p-value in this report, all models together (cells with q < 0.05 hold at most 5 % false discoveries in expectation; report --scoring fdr scores Table 2 by it). A pass/fail decided on the unadjusted p is expected to be wrong for about 1 in 20 chance-level cells.";

/// ln C(n, k), from ln Γ via a sum of logarithms (exact enough for any n a test uses:
/// at most a few thousand trials).
fn ln_choose(n: u64, k: u64) -> f64 {
    let k = k.min(n - k);
    (0..k)
        .map(|i| ((n - i) as f64).ln() - ((i + 1) as f64).ln())
        .sum()
}

/// P(X = i) for X ~ Binomial(n, p), in log space.
fn ln_pmf(n: u64, i: u64, p: f64) -> f64 {
    let (mut a, mut b) = (i as f64 * p.ln(), (n - i) as f64 * (1.0 - p).ln());
    // 0·ln 0 = 0: the certain outcomes at p = 0 and p = 1.
    if i == 0 {
        a = 0.0;
    }
    if i == n {
        b = 0.0;
    }
    ln_choose(n, i) + a + b
}

/// The exact one-sided binomial p-value P(X ≥ k) for X ~ Binomial(n, p): the chance of
/// passing at least `k` of `n` trials when each passes with probability `p`. `None` when
/// `n` is 0, `k > n` or `p` is not a probability.
pub fn binomial_upper_tail(k: u64, n: u64, p: f64) -> Option<f64> {
    if n == 0 || k > n || !(0.0..=1.0).contains(&p) {
        return None;
    }
    if k == 0 {
        return Some(1.0);
    }
    if p == 0.0 {
        return Some(0.0);
    }
    if p == 1.0 {
        return Some(1.0);
    }
    let logs: Vec<f64> = (k..=n).map(|i| ln_pmf(n, i, p)).collect();
    let max = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum = max.exp() * logs.iter().map(|l| (l - max).exp()).sum::<f64>();
    Some(sum.min(1.0))
}

/// Holm's step-down adjustment: the i-th smallest of m p-values is multiplied by
/// (m − i + 1), made non-decreasing in that order and capped at 1. Returned in the input
/// order.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0_f64;
    for (rank, &index) in order.iter().enumerate() {
        let value = (p_values[index] * (m - rank) as f64).min(1.0);
        running = running.max(value);
        adjusted[index] = running;
    }
    adjusted
}

/// Benjamini–Hochberg's step-up q-values: the i-th smallest of m p-values becomes
/// min over j ≥ i of p₍ⱼ₎ · m / j (the monotone adjustment: a smaller p never gets a larger
/// q), capped at 1. Returned in the input order. A cell with q < α belongs to the largest
/// set whose expected share of false discoveries is at most α (independent or positively
/// dependent p-values).
pub fn benjamini_hochberg(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 1.0_f64;
    for (rank, &index) in order.iter().enumerate().rev() {
        let value = (p_values[index] * m as f64 / (rank + 1) as f64).min(1.0);
        running = running.min(value);
        adjusted[index] = running;
    }
    adjusted
}

/// The p-value of a pass/fail verdict whose chance level (the probability that a
/// knowledge-free model passes the cell) is `chance`: the chance level when the cell passed,
/// 1 when it did not (failing is the least surprising outcome). Valid: under that null,
/// P(p ≤ α) ≤ α for every α.
pub fn verdict_p_value(passed: bool, chance: f64) -> f64 {
    if passed { chance.clamp(0.0, 1.0) } else { 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1e-300)
    }

    /// Values of scipy.stats.binomtest(k, n, p, alternative="greater").pvalue (equal to
    /// binom.sf(k - 1, n, p)), and closed forms computed by hand.
    #[test]
    fn upper_tail_matches_known_values() {
        // scipy: binomtest(60, 100, 0.5, alternative="greater").pvalue
        assert!(close(
            binomial_upper_tail(60, 100, 0.5).unwrap(),
            0.028_443_966_820_490_392,
            1e-12
        ));
        // By hand: P(X >= 8 | 10, 1/2) = (45 + 10 + 1) / 1024.
        assert!(close(
            binomial_upper_tail(8, 10, 0.5).unwrap(),
            56.0 / 1024.0,
            1e-12
        ));
        // By hand: P(X >= 1 | 25, p) = 1 - (1 - p)^25.
        let p = 1.0 / 602.0;
        assert!(close(
            binomial_upper_tail(1, 25, p).unwrap(),
            1.0 - (1.0 - p).powi(25),
            1e-9
        ));
        // By hand: P(X >= 3 | 25, 0.1) = 1 - P(0) - P(1) - P(2).
        let q: f64 = 0.9;
        let below = q.powi(25) + 25.0 * 0.1 * q.powi(24) + 300.0 * 0.01 * q.powi(23);
        assert!(close(
            binomial_upper_tail(3, 25, 0.1).unwrap(),
            1.0 - below,
            1e-9
        ));
        // By hand: all of 100 under 0.5 is 2^-100 (underflows nothing in log space).
        assert!(close(
            binomial_upper_tail(100, 100, 0.5).unwrap(),
            0.5f64.powi(100),
            1e-9
        ));
    }

    #[test]
    fn upper_tail_edges() {
        assert_eq!(binomial_upper_tail(0, 25, 0.3), Some(1.0));
        assert_eq!(binomial_upper_tail(1, 25, 0.0), Some(0.0));
        assert_eq!(binomial_upper_tail(25, 25, 1.0), Some(1.0));
        assert_eq!(binomial_upper_tail(1, 0, 0.5), None);
        assert_eq!(binomial_upper_tail(26, 25, 0.5), None);
        assert_eq!(binomial_upper_tail(1, 25, 1.5), None);
    }

    /// R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
    #[test]
    fn holm_matches_r() {
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (a, b) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!(close(*a, b, 1e-12), "{adjusted:?}");
        }
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    /// Reference values of scipy 1.17.1 `scipy.stats.false_discovery_control(p, method="bh")`
    /// (the same as R's `p.adjust(p, method = "BH")`); scripts/reference_stats.py prints them.
    #[test]
    fn benjamini_hochberg_matches_scipy() {
        let cases: [(&[f64], &[f64]); 3] = [
            // false_discovery_control([0.01, 0.04, 0.03, 0.005], method="bh")
            (&[0.01, 0.04, 0.03, 0.005], &[0.02, 0.04, 0.04, 0.02]),
            // The 15 p-values of Benjamini & Hochberg (1995), section 4: q < 0.05 rejects
            // the first four, as the paper's step-up procedure does at 0.05.
            (
                &[
                    0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240,
                    0.4262, 0.5719, 0.6528, 0.7590, 1.000,
                ],
                &[
                    0.0015,
                    0.003,
                    0.0095,
                    0.035625,
                    0.0603,
                    0.06385714285714286,
                    0.06385714285714286,
                    0.0645,
                    0.0765,
                    0.486,
                    0.5811818181818181,
                    0.714875,
                    0.7532307692307693,
                    0.8132142857142857,
                    1.0,
                ],
            ),
            // Ties and a zero, unsorted: [0.9, 0.8, 0.05, 0.05, 0.0]. The step-up minimum
            // gives 0.8 (p · 5/4 = 1.0) the q of 0.9 (0.9 · 5/5).
            (
                &[0.9, 0.8, 0.05, 0.05, 0.0],
                &[0.9, 0.9, 0.08333333333333334, 0.08333333333333334, 0.0],
            ),
        ];
        for (p, expected) in cases {
            let q = benjamini_hochberg(p);
            assert_eq!(q.len(), expected.len());
            for (a, b) in q.iter().zip(expected) {
                assert!(
                    (a - b).abs() <= 1e-12,
                    "{p:?} -> {q:?}, expected {expected:?}"
                );
            }
        }
        // Never below the raw p, never above Holm's (BH is the less conservative), never
        // above 1.
        let p = [0.0001, 0.04, 0.03, 0.2, 0.7, 0.01];
        for ((q, h), p) in benjamini_hochberg(&p).iter().zip(holm(&p)).zip(p) {
            assert!(
                p <= *q + 1e-15 && *q <= h + 1e-15 && *q <= 1.0,
                "p {p} q {q} holm {h}"
            );
        }
        assert!(benjamini_hochberg(&[]).is_empty());
        assert_eq!(benjamini_hochberg(&[0.3]), vec![0.3]);
    }

    #[test]
    fn a_verdict_p_value_is_its_chance_level_when_passed_and_1_otherwise() {
        assert_eq!(verdict_p_value(true, 0.0056), 0.0056);
        assert_eq!(verdict_p_value(false, 0.0056), 1.0);
        assert_eq!(verdict_p_value(true, 0.0), 0.0);
    }
}
