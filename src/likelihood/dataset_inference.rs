//! Dataset inference (Maini et al., "LLM Dataset Inference", NeurIPS 2024): per-row
//! likelihood features of a suspect set and of a held-out set combined into one p-value.
//! Each set is split in half (seeded); a linear combination of the standardized features
//! is learnt on the first halves (ridge least squares, suspect = +1, held out = −1) and
//! applied to the second halves, whose combined scores a one-sided Welch t-test compares.
//! Learning and testing on disjoint rows keeps the p-value valid whatever the features:
//! under the null (the model treats both sets alike) the learnt weights are independent of
//! the test halves.
//!
//! Architecture Invariant: pure. Features come in as numbers; which detectors produce them
//! and on which rows is the caller's choice.

use serde::{Deserialize, Serialize};

/// Fewest rows per set: each half needs at least two rows for a variance.
pub const MIN_ROWS_PER_SET: usize = 6;

/// The test id of a run's dataset-inference cells (a likelihood cell: its `p_value` is
/// the Welch p-value below, its AUROC that of the combined scores on the test halves);
/// with [`super::GROUND_TRUTH_SUFFIX`], the cell of a checkpoint's trained vs held-out
/// rows.
pub const TEST_ID: &str = "dataset-inference";

/// Whether a likelihood cell's test id is dataset inference (either split).
pub fn is_test_id(test: &str) -> bool {
    test.strip_suffix(super::GROUND_TRUTH_SUFFIX)
        .unwrap_or(test)
        == TEST_ID
}

/// The test id of dataset inference on a checkpoint's trained vs held-out rows.
pub fn ground_truth_id() -> String {
    format!("{TEST_ID}{}", super::GROUND_TRUTH_SUFFIX)
}

/// Ridge penalty per training row on the standardized features: enough to keep the normal
/// equations solvable when two detectors are nearly collinear (perplexity and Min-K% often
/// are), too small to move well-determined weights.
const RIDGE_PER_ROW: f64 = 1e-3;

/// The result for one (model, dataset, suspect vs held-out split).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetInference {
    /// Rows of each set used (all rows with every feature present).
    pub suspect_rows: usize,
    pub held_out_rows: usize,
    /// Weights of the standardized features, in the caller's feature order (no intercept).
    pub weights: Vec<f64>,
    /// Welch's t of suspect vs held-out combined scores on the test halves.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// One-sided P(T ≥ t): small when the suspect rows score higher than held-out ones.
    pub p_value: f64,
    /// The combined scores of the test halves (suspect, held out), for an AUROC beside the
    /// p-value.
    #[serde(skip)]
    pub test_scores: (Vec<f64>, Vec<f64>),
}

/// Feature rows cut to the features every row of both sets has (a detector that could not
/// score some row, `None` there, is left out of the combination for all rows). When no
/// feature is complete the rows come back empty.
pub fn complete_features(
    suspect: &[Vec<Option<f64>>],
    held_out: &[Vec<Option<f64>>],
) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let dims = suspect
        .iter()
        .chain(held_out)
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    let usable: Vec<usize> = (0..dims)
        .filter(|&d| {
            suspect
                .iter()
                .chain(held_out)
                .all(|f| f.get(d).copied().flatten().is_some())
        })
        .collect();
    let complete = |rows: &[Vec<Option<f64>>]| -> Vec<Vec<f64>> {
        rows.iter()
            .map(|f| usable.iter().map(|&d| f[d].expect("usable")).collect())
            .collect()
    };
    (complete(suspect), complete(held_out))
}

/// Dataset inference on feature rows (each the same length, higher = more likely seen).
/// `None` with fewer than [`MIN_ROWS_PER_SET`] rows in a set, rows of unequal length, or
/// test-half scores without variance.
pub fn dataset_inference(
    suspect: &[Vec<f64>],
    held_out: &[Vec<f64>],
    seed: u64,
) -> Option<DatasetInference> {
    let dims = suspect.first()?.len();
    if suspect.len() < MIN_ROWS_PER_SET
        || held_out.len() < MIN_ROWS_PER_SET
        || dims == 0
        || suspect.iter().chain(held_out).any(|row| row.len() != dims)
        || suspect
            .iter()
            .chain(held_out)
            .flatten()
            .any(|v| !v.is_finite())
    {
        return None;
    }
    let (suspect_train, suspect_test) = split_half(suspect, seed);
    let (held_train, held_test) = split_half(held_out, seed ^ 0x5EED_0F4E_1D00);

    // Standardize with the training rows' statistics only.
    let train: Vec<&Vec<f64>> = suspect_train.iter().chain(&held_train).copied().collect();
    let (mean, scale) = standardization(&train, dims);
    let standardized = |row: &Vec<f64>| -> Vec<f64> {
        row.iter()
            .zip(&mean)
            .zip(&scale)
            .map(|((v, m), s)| (v - m) / s)
            .collect()
    };
    let xs: Vec<Vec<f64>> = train.iter().map(|r| standardized(r)).collect();
    let ys: Vec<f64> = suspect_train
        .iter()
        .map(|_| 1.0)
        .chain(held_train.iter().map(|_| -1.0))
        .collect();
    let weights = ridge_fit(&xs, &ys, RIDGE_PER_ROW * xs.len() as f64)?;
    let combine = |row: &&Vec<f64>| -> f64 {
        standardized(row)
            .iter()
            .zip(&weights)
            .map(|(x, w)| x * w)
            .sum()
    };
    let a: Vec<f64> = suspect_test.iter().map(combine).collect();
    let b: Vec<f64> = held_test.iter().map(combine).collect();
    let welch = welch_t_test(&a, &b)?;
    Some(DatasetInference {
        suspect_rows: suspect.len(),
        held_out_rows: held_out.len(),
        weights,
        t: welch.t,
        df: welch.df,
        p_value: welch.p_greater,
        test_scores: (a, b),
    })
}

/// A seeded shuffle (splitmix64 Fisher–Yates) cut in two; the first half gets the extra
/// row of an odd count.
fn split_half(rows: &[Vec<f64>], seed: u64) -> (Vec<&Vec<f64>>, Vec<&Vec<f64>>) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let mut state = seed;
    for i in (1..order.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = ((z as u128 * (i as u128 + 1)) >> 64) as usize;
        order.swap(i, j);
    }
    let cut = rows.len().div_ceil(2);
    let pick = |ids: &[usize]| ids.iter().map(|&i| &rows[i]).collect::<Vec<_>>();
    (pick(&order[..cut]), pick(&order[cut..]))
}

/// Per feature: mean and standard deviation (1 for a constant feature, so it standardizes
/// to 0 and the ridge gives it no weight).
fn standardization(rows: &[&Vec<f64>], dims: usize) -> (Vec<f64>, Vec<f64>) {
    let n = rows.len() as f64;
    let mean: Vec<f64> = (0..dims)
        .map(|d| rows.iter().map(|r| r[d]).sum::<f64>() / n)
        .collect();
    let scale = (0..dims)
        .map(|d| {
            let var = rows.iter().map(|r| (r[d] - mean[d]).powi(2)).sum::<f64>() / n;
            if var > 0.0 { var.sqrt() } else { 1.0 }
        })
        .collect();
    (mean, scale)
}

/// Ridge least squares with an unpenalized intercept: the weights of `xs` (the intercept
/// is dropped, as the t-test is shift-invariant). `None` when the system is singular.
fn ridge_fit(xs: &[Vec<f64>], ys: &[f64], penalty: f64) -> Option<Vec<f64>> {
    let dims = xs.first()?.len();
    let size = dims + 1;
    // Normal equations [X 1]ᵀ[X 1] w = [X 1]ᵀ y, penalty on the feature weights.
    let mut a = vec![vec![0.0; size + 1]; size];
    for (x, y) in xs.iter().zip(ys) {
        let row: Vec<f64> = x.iter().copied().chain([1.0]).collect();
        for i in 0..size {
            for j in 0..size {
                a[i][j] += row[i] * row[j];
            }
            a[i][size] += row[i] * y;
        }
    }
    for (i, row) in a.iter_mut().enumerate().take(dims) {
        row[i] += penalty;
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..size {
        let pivot = (col..size).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let factor = row[col] / pivot_row[col];
                for (value, pivot_value) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *value -= factor * pivot_value;
                }
            }
        }
    }
    Some((0..dims).map(|i| a[i][size] / a[i][i]).collect())
}

/// Welch's unequal-variance t-test of mean(a) > mean(b).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Welch {
    pub t: f64,
    pub df: f64,
    /// One-sided P(T ≥ t) under Student's t with `df` degrees of freedom.
    pub p_greater: f64,
}

/// `None` with fewer than two values on a side or no variance on either.
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let moments = |v: &[f64]| {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (n, mean, var)
    };
    let (na, ma, va) = moments(a);
    let (nb, mb, vb) = moments(b);
    let (sa, sb) = (va / na, vb / nb);
    let se2 = sa + sb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let t = (ma - mb) / se2.sqrt();
    let df = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    Some(Welch {
        t,
        df,
        p_greater: student_t_upper_tail(t, df),
    })
}

/// P(T ≥ t) for Student's t with `df` degrees of freedom (any real `df` > 0), through the
/// regularized incomplete beta function: P(|T| ≥ |t|) = I_{df/(df+t²)}(df/2, 1/2).
pub fn student_t_upper_tail(t: f64, df: f64) -> f64 {
    let two_sided = regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5);
    if t >= 0.0 {
        two_sided / 2.0
    } else {
        1.0 - two_sided / 2.0
    }
}

/// I_x(a, b), by the continued fraction (modified Lentz), using the symmetry
/// I_x(a, b) = 1 − I_{1−x}(b, a) where the fraction converges slowly.
fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let floor = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / floor(1.0 - qab * x / qap);
    let mut h = d;
    // One Lentz step with coefficient `aa`: updates c and d, returns the factor on h.
    let mut step = |aa: f64| {
        d = 1.0 / floor(1.0 + aa * d);
        c = floor(1.0 + aa / c);
        d * c
    };
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        h *= step(m * (b - m) * x / ((qam + m2) * (a + m2)));
        let last = step(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)));
        h *= last;
        if (last - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error below 1e-15).
fn ln_gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// References: scipy 1.17.1, `scipy.stats.t.sf(t, df)` and
    /// `scipy.stats.ttest_ind(a, b, equal_var=False, alternative="greater")`.
    #[test]
    fn student_tail_and_welch_match_scipy() {
        for (t, df, expected) in [
            (2.0, 5.0, 0.050_969_739_414_929_174),
            (-1.3, 7.5, 0.883_936_610_592_195_6),
            (0.0, 3.2, 0.5),
            (4.5, 40.3, 2.832_511_027_739_631_6e-5),
        ] {
            let got = student_t_upper_tail(t, df);
            assert!(
                (got - expected).abs() < 1e-9,
                "t {t} df {df}: {got} vs {expected}"
            );
        }
        let a = [1.2, 2.3, 1.9, 3.1, 2.8, 2.2];
        let b = [1.0, 1.4, 0.7, 1.9, 1.1];
        let welch = welch_t_test(&a, &b).unwrap();
        assert!(
            (welch.t - 3.016_824_427_339_648_3).abs() < 1e-9,
            "{welch:?}"
        );
        assert!((welch.df - 8.718_528_409_876_763).abs() < 1e-6, "{welch:?}");
        assert!(
            (welch.p_greater - 0.007_541_144_211_741_913_6).abs() < 1e-9,
            "{welch:?}"
        );
        assert!(welch_t_test(&[1.0, 1.0], &[2.0, 2.0]).is_none());
    }

    /// Rows from a seeded generator: two features, the first shifted up for the suspect
    /// set (a detector that sees membership), the second pure noise.
    fn rows(n: usize, shift: f64, seed: u64) -> Vec<Vec<f64>> {
        let mut state = seed;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| {
                // Box–Muller: two standard normals.
                let (u, v) = (uniform(), uniform());
                let r = (-2.0 * u.ln()).sqrt();
                let (z1, z2) = (
                    r * (2.0 * std::f64::consts::PI * v).cos(),
                    r * (2.0 * std::f64::consts::PI * v).sin(),
                );
                vec![z1 + shift, z2]
            })
            .collect()
    }

    #[test]
    fn a_shifted_feature_is_detected_and_weighted() {
        let result = dataset_inference(&rows(200, 0.5, 1), &rows(200, 0.0, 2), 7).unwrap();
        assert!(result.p_value < 1e-3, "{result:?}");
        assert!(
            result.weights[0] > 2.0 * result.weights[1].abs(),
            "{result:?}"
        );
        assert_eq!((result.suspect_rows, result.held_out_rows), (200, 200));
        // The same seed gives the same figures.
        assert_eq!(
            dataset_inference(&rows(200, 0.5, 1), &rows(200, 0.0, 2), 7),
            Some(result)
        );
    }

    /// Under the null the p-values are uniform: over 200 seeded pairs of same-distribution
    /// sets, about 5 % fall below 0.05 (binomial 95 % range for 200 draws: 4–17).
    #[test]
    fn the_null_rejects_at_its_level() {
        let rejections = (0..200u64)
            .filter(|&i| {
                let r =
                    dataset_inference(&rows(60, 0.0, 2 * i + 11), &rows(60, 0.0, 2 * i + 12), i)
                        .unwrap();
                r.p_value < 0.05
            })
            .count();
        assert!((4..=17).contains(&rejections), "{rejections} of 200");
    }

    #[test]
    fn too_few_rows_or_ragged_rows_give_none() {
        assert!(dataset_inference(&rows(5, 0.0, 1), &rows(50, 0.0, 2), 0).is_none());
        let mut ragged = rows(10, 0.0, 1);
        ragged[3].push(1.0);
        assert!(dataset_inference(&ragged, &rows(10, 0.0, 2), 0).is_none());
    }
}
