//! Small statistics for the report: Wilson intervals, Pearson and Spearman correlation.
//! Pure functions of integers and floats. (Every "above chance" test is the one-sided
//! [`crate::significance::binomial_upper_tail`].)

use serde::Serialize;

/// z for a two-sided 95 % interval.
const Z_95: f64 = 1.959_963_984_540_054;

/// A 95 % confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
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
    wilson_of_share(k as f64 / n as f64, n)
}

/// The Wilson score interval (95 %) of a share `p` observed on `n` independent trials: for a
/// share pooled over repeated samples of the same trials, whose information is that of
/// `n` trials, not of every sample's answer.
pub fn wilson_of_share(p: f64, n: u64) -> Option<Interval> {
    if n == 0 || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let n = n as f64;
    let z2 = Z_95 * Z_95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    // At 0 and n successes the bound is exactly 0 (resp. 1); the subtraction leaves
    // rounding noise (3.5e-18 at 0/100) that would put the interval beside its own estimate.
    Some(Interval {
        low: if p == 0.0 {
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
