//! L2-regularized logistic regression with an intercept on a linear kernel, for the blind
//! baseline ([`super::blind`]): the model of a fold is a combination of its training texts,
//! so a few hundred texts of a few hundred hashed n-grams each need only their dot
//! products; solved by accelerated gradient descent to a fixed tolerance, deterministically.

/// Optimizer steps at most; it stops earlier once the gradient is below [`TOLERANCE`].
pub const MAX_STEPS: usize = 2000;
/// Largest gradient coefficient (`a + C g`, see [`fit`]) at which training stops (on the
/// synthetic rows of the blind baseline's tests, AUROCs agreed to four decimals with those
/// of 1e-6, in two thirds of the steps).
pub const TOLERANCE: f64 = 1e-4;

/// Every pair's dot product of the feature vectors (the linear kernel): the model of a
/// fold is a combination of its training texts, so training and scoring need nothing else.
pub(super) struct Gram {
    n: usize,
    values: Vec<f64>,
}

impl Gram {
    /// The kernel of sparse `vectors` whose indices are below `dimensions`.
    pub(super) fn of(vectors: &[Vec<(u32, f64)>], dimensions: usize) -> Gram {
        let n = vectors.len();
        let mut values = vec![0.0; n * n];
        // One text spread over the buckets at a time: each dot product is then a pass over
        // the other text's few hundred entries.
        let mut dense = vec![0.0; dimensions];
        for (i, vector) in vectors.iter().enumerate() {
            for &(k, v) in vector {
                dense[k as usize] = v;
            }
            for j in i..n {
                let dot: f64 = vectors[j].iter().map(|&(k, v)| dense[k as usize] * v).sum();
                values[i * n + j] = dot;
                values[j * n + i] = dot;
            }
            for &(k, _) in vector {
                dense[k as usize] = 0.0;
            }
        }
        Gram { n, values }
    }

    pub(super) fn at(&self, i: usize, j: usize) -> f64 {
        self.values[i * self.n + j]
    }
}

/// A fold's logistic regression on centred features: `w = Σ aⱼ (x(train[j]) − μ)`, `μ` the
/// mean of the training texts' vectors, score `w·(x − μ) + b`.
pub(super) struct Fit {
    pub(super) train: Vec<usize>,
    pub(super) coefficients: Vec<f64>,
    pub(super) intercept: f64,
    /// Per training text `j`: `x(j)·μ`; and `μ·μ`.
    dot_mean: Vec<f64>,
    mean_dot_mean: f64,
}

impl Fit {
    /// The score of text `i` (held out or not): `Σ aⱼ (x − μ)·(xⱼ − μ) + b`, from the
    /// uncentred kernel.
    pub(super) fn score(&self, gram: &Gram, i: usize) -> f64 {
        let to_train: Vec<f64> = self.train.iter().map(|&j| gram.at(i, j)).collect();
        let i_dot_mean = to_train.iter().sum::<f64>() / to_train.len() as f64;
        self.intercept
            + to_train
                .iter()
                .zip(&self.dot_mean)
                .zip(&self.coefficients)
                .map(|((k, j_dot_mean), a)| a * (k - i_dot_mean - j_dot_mean + self.mean_dot_mean))
                .sum::<f64>()
    }
}

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

/// Minimizes `½‖w‖² + C Σ log(1 + exp(−yᵢ(w·(xᵢ − μ) + b)))` over the texts `train`
/// (labels ±1, `C` = `inverse_penalty`),
/// written for `w = Σ aⱼ (xⱼ − μ)` (the minimizer has that form): the gradient in `w` is
/// `Σ rⱼ (xⱼ − μ)` with `r = a + C g`, `gⱼ = −yⱼ σ(−yⱼ mⱼ)`, so a gradient step on `w` is
/// a step on `a`. Centring changes neither `w` nor the scores (the intercept absorbs
/// `w·μ`); it takes the direction every row shares (column names, separators) out of the
/// kernel, which would otherwise make the problem badly conditioned.
///
/// Nesterov's accelerated gradient (FISTA's momentum) with O'Donoghue & Candès's gradient
/// restart (momentum drops to zero when a step goes against the gradient). The loss's
/// curvature is at most `C/4 · [X 1]ᵀ[X 1]` for the centred `X`, block-diagonal because
/// `Xᵀ1 = 0`: `w` takes steps `1/(1 + C·tr(K)/4)` (the trace bounds the largest
/// eigenvalue) and `b` steps `1/(C·m/4)`. `K a` is carried along the iterates, so a step
/// costs one product of the kernel with `r`. Deterministic: a fixed order of sums.
pub(super) fn fit(gram: &Gram, train: Vec<usize>, labels: &[f64], inverse_penalty: f64) -> Fit {
    let m = train.len();
    let raw: Vec<f64> = train
        .iter()
        .flat_map(|&i| train.iter().map(move |&j| gram.at(i, j)))
        .collect();
    let dot_mean: Vec<f64> = raw
        .chunks(m)
        .map(|row| row.iter().sum::<f64>() / m as f64)
        .collect();
    let mean_dot_mean = dot_mean.iter().sum::<f64>() / m as f64;
    let kernel: Vec<f64> = raw
        .chunks(m)
        .zip(&dot_mean)
        .flat_map(|(row, ri)| {
            row.iter()
                .zip(&dot_mean)
                .map(move |(k, rj)| k - ri - rj + mean_dot_mean)
        })
        .collect();
    let times_kernel = |v: &[f64]| -> Vec<f64> {
        kernel
            .chunks(m)
            .map(|row| row.iter().zip(v).map(|(k, x)| k * x).sum())
            .collect()
    };
    let y: Vec<f64> = train.iter().map(|&i| labels[i]).collect();
    let trace: f64 = (0..m).map(|i| kernel[i * m + i]).sum();
    let step = 1.0 / (1.0 + inverse_penalty * trace / 4.0);
    let step_b = 1.0 / (inverse_penalty * m as f64 / 4.0);
    // The iterate (a, K a, b) and the point the gradient is taken at (the look-ahead).
    let (mut a, mut kernel_a, mut b) = (vec![0.0; m], vec![0.0; m], 0.0);
    let (mut look, mut kernel_look, mut look_b) = (a.clone(), kernel_a.clone(), b);
    let mut t = 1.0_f64;
    let mut gradient = vec![0.0; m];
    for _ in 0..MAX_STEPS {
        let mut gradient_b = 0.0;
        for row in 0..m {
            let margin = kernel_look[row] + look_b;
            let g = -y[row] * sigmoid(-y[row] * margin);
            gradient[row] = look[row] + inverse_penalty * g;
            gradient_b += inverse_penalty * g;
        }
        let largest = gradient
            .iter()
            .fold(gradient_b.abs(), |m, g| m.max(g.abs()));
        if largest < TOLERANCE {
            (a, b) = (look, look_b);
            break;
        }
        let kernel_gradient = times_kernel(&gradient);
        let next: Vec<f64> = look
            .iter()
            .zip(&gradient)
            .map(|(l, g)| l - step * g)
            .collect();
        let kernel_next: Vec<f64> = kernel_look
            .iter()
            .zip(&kernel_gradient)
            .map(|(l, g)| l - step * g)
            .collect();
        let next_b = look_b - step_b * gradient_b;
        // ⟨∇, Δ⟩ = rᵀ K Δa + r_b Δb.
        let along: f64 = gradient
            .iter()
            .zip(kernel_next.iter().zip(&kernel_a))
            .map(|(r, (n, k))| r * (n - k))
            .sum::<f64>()
            + gradient_b * (next_b - b);
        let momentum = if along > 0.0 {
            t = 1.0;
            0.0
        } else {
            let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            let momentum = (t - 1.0) / t_next;
            t = t_next;
            momentum
        };
        for j in 0..m {
            look[j] = next[j] + momentum * (next[j] - a[j]);
            kernel_look[j] = kernel_next[j] + momentum * (kernel_next[j] - kernel_a[j]);
        }
        look_b = next_b + momentum * (next_b - b);
        (a, kernel_a, b) = (next, kernel_next, next_b);
    }
    Fit {
        train,
        coefficients: a,
        intercept: b,
        dot_mean,
        mean_dot_mean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::likelihood::roc::SplitMix;

    /// Sparse unit vectors over 64 dimensions, each with a shared block (as every row shares
    /// its column names) and a few random entries; the label follows dimension 40 when
    /// present, with noise.
    fn data(count: usize, seed: u64) -> (Vec<Vec<(u32, f64)>>, Vec<f64>) {
        let mut rng = SplitMix(seed);
        let mut vectors = Vec::new();
        let mut labels = Vec::new();
        for _ in 0..count {
            let mut entries: Vec<u32> = (0..8).collect();
            entries.extend((0..6).map(|_| 8 + rng.below(56) as u32));
            entries.sort_unstable();
            entries.dedup();
            let norm = (entries.len() as f64).sqrt();
            let positive = entries.contains(&40) || rng.below(4) == 0;
            vectors.push(entries.into_iter().map(|k| (k, 1.0 / norm)).collect());
            labels.push(if positive { 1.0 } else { -1.0 });
        }
        (vectors, labels)
    }

    /// The optimizer reaches the regularized optimum: the representer condition
    /// `a = −C g` holds (the gradient in `w` vanishes) and the intercept's gradient too; and
    /// centring changes nothing: the scores equal those of `w = Σ aⱼ (xⱼ − μ)` built from
    /// the vectors themselves.
    #[test]
    fn training_converges_to_the_optimum() {
        let (vectors, labels) = data(120, 12);
        let gram = Gram::of(&vectors, 64);
        let c = 10.0;
        let model = fit(&gram, (0..vectors.len()).collect(), &labels, c);
        let mut gradient_b = 0.0;
        for (row, &i) in model.train.iter().enumerate() {
            let margin = model.score(&gram, i);
            let g = -labels[i] * sigmoid(-labels[i] * margin);
            assert!(
                (model.coefficients[row] + c * g).abs() <= TOLERANCE,
                "row {row}"
            );
            gradient_b += c * g;
        }
        assert!(gradient_b.abs() <= TOLERANCE, "{gradient_b}");
        let m = model.train.len() as f64;
        let mut mean = [0.0; 64];
        for vector in &vectors {
            for &(k, v) in vector {
                mean[k as usize] += v / m;
            }
        }
        let mut w = [0.0; 64];
        for (vector, a) in vectors.iter().zip(&model.coefficients) {
            for &(k, v) in vector {
                w[k as usize] += a * v;
            }
            for (w, mu) in w.iter_mut().zip(&mean) {
                *w -= a * mu;
            }
        }
        let w_dot_mean: f64 = w.iter().zip(&mean).map(|(a, b)| a * b).sum();
        for i in [0, 17, 99] {
            let direct = vectors[i]
                .iter()
                .map(|&(k, v)| w[k as usize] * v)
                .sum::<f64>()
                - w_dot_mean
                + model.intercept;
            assert!((direct - model.score(&gram, i)).abs() < 1e-9, "{i}");
        }
        // The label follows dimension 40: its weight is the largest.
        let largest = (8..64).max_by(|&a, &b| w[a].total_cmp(&w[b])).unwrap();
        assert_eq!(largest, 40);
    }

    #[test]
    fn the_kernel_holds_every_dot_product() {
        let (vectors, _) = data(10, 3);
        let gram = Gram::of(&vectors, 64);
        for i in 0..10 {
            assert!((gram.at(i, i) - 1.0).abs() < 1e-12);
            for j in 0..10 {
                let direct: f64 = vectors[i]
                    .iter()
                    .map(|&(k, v)| v * vectors[j].iter().find(|e| e.0 == k).map_or(0.0, |e| e.1))
                    .sum();
                assert!((gram.at(i, j) - direct).abs() < 1e-12);
            }
        }
    }
}
