//! Small statistics for the report: Wilson intervals, the exact binomial test against
//! chance, Pearson and Spearman correlation. Pure functions of integers and floats.

use serde::Serialize;

/// z for a two-sided 95 % interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// A 95 % confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// The Wilson score interval (95 %) of `k` successes in `n` trials. Unlike the normal
/// approximation it stays within [0, 1] and behaves at 0 and n successes, which the
/// membership test hits (models answering "Yes" to everything).
pub fn wilson(k: u64, n: u64) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let p = k as f64 / n;
    let z2 = Z_95 * Z_95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    // At 0 and n successes the bound is exactly 0 (resp. 1); the subtraction leaves
    // rounding noise (3.5e-18 at 0/100) that would put the interval beside its own estimate.
    Some(Interval {
        low: if k == 0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        high: if p == 1.0 {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}

/// The exact two-sided binomial test of `k` successes in `n` trials against p = 0.5
/// (chance for the membership test's balanced Yes/No): the probability, under chance, of
/// an outcome at least as far from n/2 as `k`. With p = 0.5 the distribution is symmetric,
/// so this is 2·P(X ≤ min(k, n−k)), capped at 1. Summed in log space, exact for any n.
pub fn binomial_p_value_half(k: u64, n: u64) -> Option<f64> {
    if n == 0 || k > n {
        return None;
    }
    let tail_end = k.min(n - k);
    // ln C(n, i) − n·ln 2, built up term by term: C(n, i) = C(n, i−1)·(n−i+1)/i.
    let mut log_term = -(n as f64) * std::f64::consts::LN_2;
    let mut log_terms = Vec::with_capacity(tail_end as usize + 1);
    log_terms.push(log_term);
    for i in 1..=tail_end {
        log_term += ((n - i + 1) as f64).ln() - (i as f64).ln();
        log_terms.push(log_term);
    }
    let max = log_terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tail = max.exp() * log_terms.iter().map(|t| (t - max).exp()).sum::<f64>();
    Some((2.0 * tail).min(1.0))
}

/// Pearson's r; `None` below 3 pairs or when either side is constant.
pub fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    if pairs.len() < 3 {
        return None;
    }
    let n = pairs.len() as f64;
    let mean_x = pairs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in pairs {
        sxy += (x - mean_x) * (y - mean_y);
        sxx += (x - mean_x) * (x - mean_x);
        syy += (y - mean_y) * (y - mean_y);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

/// Spearman's ρ: Pearson's r of the ranks, ties sharing their average rank.
pub fn spearman(pairs: &[(f64, f64)]) -> Option<f64> {
    let xs = average_ranks(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let ys = average_ranks(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    pearson(&xs.into_iter().zip(ys).collect::<Vec<_>>())
}

/// 1-based ranks; tied values get the mean of the ranks they span.
fn average_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start;
        while end + 1 < order.len() && values[order[end + 1]] == values[order[start]] {
            end += 1;
        }
        let rank = (start + end) as f64 / 2.0 + 1.0;
        for &index in &order[start..=end] {
            ranks[index] = rank;
        }
        start = end + 1;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn wilson_matches_reference_values() {
        // statsmodels proportion_confint(50, 100, method="wilson") = (0.40383, 0.59617)
        let i = wilson(50, 100).unwrap();
        assert!(
            close(i.low, 0.403_831_4) && close(i.high, 0.596_168_6),
            "{i:?}"
        );
        // All correct: the interval still has width.
        let i = wilson(100, 100).unwrap();
        assert!(close(i.high, 1.0) && close(i.low, 0.963_007_1), "{i:?}");
        assert_eq!(wilson(0, 0), None);
        // The bounds at 0 and n successes contain the estimate exactly.
        for n in [1, 7, 100, 1000] {
            assert_eq!(wilson(0, n).unwrap().low, 0.0);
            assert_eq!(wilson(n, n).unwrap().high, 1.0);
        }
    }

    #[test]
    fn binomial_test_matches_scipy() {
        // scipy.stats.binomtest(60, 100).pvalue = 0.05688793364098078
        assert!(close(
            binomial_p_value_half(60, 100).unwrap(),
            0.056_887_933_640_980_78
        ));
        assert!(close(
            binomial_p_value_half(40, 100).unwrap(),
            0.056_887_933_640_980_78
        ));
        assert_eq!(binomial_p_value_half(50, 100), Some(1.0));
        // binomtest(100, 100).pvalue = 2 * 0.5**100
        let p = binomial_p_value_half(100, 100).unwrap();
        assert!((p / (2.0 * 0.5f64.powi(100)) - 1.0).abs() < 1e-9);
        // Large n stays finite (no underflow of 2^-n).
        assert!(binomial_p_value_half(5_100, 10_000).unwrap() > 0.0);
    }

    #[test]
    fn correlations() {
        let pairs = [(1.0, 2.0), (2.0, 4.0), (3.0, 6.5), (4.0, 8.0)];
        assert!(pearson(&pairs).unwrap() > 0.99);
        assert!(close(spearman(&pairs).unwrap(), 1.0));
        // Ties: scipy.stats.spearmanr([1,2,2,3],[1,3,2,4]).statistic = 0.9486832980505138
        let tied = [(1.0, 1.0), (2.0, 3.0), (2.0, 2.0), (3.0, 4.0)];
        assert!(close(spearman(&tied).unwrap(), 0.948_683_298_050_513_8));
        assert_eq!(pearson(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
        assert_eq!(pearson(&[(1.0, 1.0), (2.0, 2.0)]), None);
    }
}
