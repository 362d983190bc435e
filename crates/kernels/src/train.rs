//! The elementwise and row-wise loops of full fine-tuning, forward and backward, on every
//! core: RMSNorm, SiLU·mul (SwiGLU), the rotary embedding, the causal softmax of attention
//! and the softmax cross-entropy of the output head, each on plain row-major slices.
//!
//! Written as candle ops these were chains of single-threaded tensor passes (one core idle)
//! whose every intermediate autograd kept for the backward pass; here each is one pass in
//! each direction, split over rows so that the result never depends on the split (each
//! row is computed by one task, in one order). `src/train/ops.rs` wraps them as candle ops
//! with a backward.

use rayon::prelude::*;

/// Elements a parallel task handles at least: below this the pool's scheduling costs more
/// than the loop.
const MIN_TASK: usize = 1 << 13;

/// Rows per task for rows of `width` elements (at least one row).
fn rows_per_task(rows: usize, width: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    // A few tasks per thread so that a slow core does not hold up the others.
    let even = rows.div_ceil(threads * 4).max(1);
    even.max(MIN_TASK.div_ceil(width.max(1))).max(1)
}

/// `e^x` in f32 arithmetic only (Cephes' `expf`: `2^k · p(r)`, `|r| ≤ ln2/2`, relative error
/// about 2e-7), so that the loops over it vectorize; libm's `expf` is a call per element.
/// Inputs below −87 give ≈1e-38 rather than 0, which no softmax here can tell apart.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + MAGIC;
    let k = t - MAGIC;
    let ki = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = x - k * LN2_HI - k * LN2_LO;
    let mut p = 1.987_569_2e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    e * f32::from_bits(((ki + 127) << 23) as u32)
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// RMSNorm of rows of `w.len()` elements: `out = x / √(mean(x²) + eps) · w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let dim = w.len();
    assert!(
        x.len() == out.len() && x.len().is_multiple_of(dim),
        "rms_norm: bad lengths"
    );
    let per = rows_per_task(x.len() / dim, dim) * dim;
    out.par_chunks_mut(per)
        .zip(x.par_chunks(per))
        .for_each(|(out, x)| {
            for (out, x) in out.chunks_exact_mut(dim).zip(x.chunks_exact(dim)) {
                let inv = inv_rms(x, eps);
                for ((o, &x), &w) in out.iter_mut().zip(x).zip(w) {
                    *o = x * inv * w;
                }
            }
        });
}

#[inline(always)]
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let square: f32 = x.iter().map(|v| v * v).sum();
    1.0 / (square / x.len() as f32 + eps).sqrt()
}

/// The gradients of [`rms_norm`] given the output's `grad`: `dx` (overwritten) and `dw`
/// (overwritten with the sum over rows). With `n = x·inv` and `gw = grad·w`:
/// `dx = inv · (gw − n · mean(gw · n))`, `dw = Σ_rows grad · n`.
pub fn rms_norm_backward(
    x: &[f32],
    w: &[f32],
    eps: f32,
    grad: &[f32],
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let dim = w.len();
    assert!(
        x.len() == grad.len()
            && x.len() == dx.len()
            && dw.len() == dim
            && x.len().is_multiple_of(dim),
        "rms_norm_backward: bad lengths"
    );
    let per = rows_per_task(x.len() / dim, dim) * dim;
    // Each task sums its rows' share of `dw`; the partial sums are added in task order.
    let partial: Vec<Vec<f32>> = dx
        .par_chunks_mut(per)
        .zip(x.par_chunks(per))
        .zip(grad.par_chunks(per))
        .map(|((dx, x), grad)| {
            let mut dw = vec![0f32; dim];
            for ((dx, x), g) in dx
                .chunks_exact_mut(dim)
                .zip(x.chunks_exact(dim))
                .zip(grad.chunks_exact(dim))
            {
                let inv = inv_rms(x, eps);
                let mut dot = 0f32;
                for i in 0..dim {
                    dot += g[i] * w[i] * x[i] * inv;
                    dw[i] += g[i] * x[i] * inv;
                }
                let mean = dot / dim as f32;
                for i in 0..dim {
                    let n = x[i] * inv;
                    dx[i] = inv * (g[i] * w[i] - n * mean);
                }
            }
            dw
        })
        .collect();
    dw.fill(0.0);
    for part in partial {
        for (d, p) in dw.iter_mut().zip(part) {
            *d += p;
        }
    }
}

/// `silu(gate) · up` (the llama MLP's gate).
pub fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, |g, u| g * sigmoid(g) * u);
}

/// The gradients of [`swiglu`]: `dup = grad · silu(gate)`,
/// `dgate = grad · up · s · (1 + gate · (1 − s))` with `s = sigmoid(gate)`.
pub fn swiglu_backward(gate: &[f32], up: &[f32], grad: &[f32], dgate: &mut [f32], dup: &mut [f32]) {
    gated_backward(gate, up, grad, dgate, dup, |g, u, grad| {
        let s = sigmoid(g);
        (grad * u * s * (1.0 + g * (1.0 - s)), grad * g * s)
    });
}

/// `gelu(gate) · up` with the tanh GELU `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))` (Gemma's
/// MLP; candle's `gelu`, the same expression).
pub fn geglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    gated(gate, up, out, |g, u| gelu_tanh(g) * u);
}

/// The gradients of [`geglu`]: `dup = grad · gelu(gate)`, `dgate = grad · up · gelu'(gate)`.
pub fn geglu_backward(gate: &[f32], up: &[f32], grad: &[f32], dgate: &mut [f32], dup: &mut [f32]) {
    gated_backward(gate, up, grad, dgate, dup, |g, u, grad| {
        (grad * u * gelu_tanh_grad(g), grad * gelu_tanh(g))
    });
}

const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;

fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + f32::tanh(SQRT_TWO_OVER_PI * x * (1.0 + 0.044715 * x * x)))
}

/// The tanh GELU's derivative, in candle's backward pass's form:
/// `0.5 t + (0.0535161 x³ + 0.398942 x)(1 − t²) + 0.5`, `t = tanh(0.0356774 x³ + 0.797885 x)`.
fn gelu_tanh_grad(x: f32) -> f32 {
    let cube = x * x * x;
    let t = f32::tanh(0.035_677_4 * cube + 0.797_885 * x);
    0.5 * t + (0.053_516_1 * cube + 0.398_942 * x) * (1.0 - t * t) + 0.5
}

/// `out[i] = f(gate[i], up[i])` in parallel chunks: a gated MLP's product.
fn gated(gate: &[f32], up: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32 + Sync) {
    assert!(
        gate.len() == up.len() && gate.len() == out.len(),
        "gated product: bad lengths"
    );
    out.par_chunks_mut(MIN_TASK * 4)
        .zip(gate.par_chunks(MIN_TASK * 4))
        .zip(up.par_chunks(MIN_TASK * 4))
        .for_each(|((out, gate), up)| {
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = f(g, u);
            }
        });
}

/// `(dgate[i], dup[i]) = f(gate[i], up[i], grad[i])` in parallel chunks: the gradients of
/// a [`gated`] product.
fn gated_backward(
    gate: &[f32],
    up: &[f32],
    grad: &[f32],
    dgate: &mut [f32],
    dup: &mut [f32],
    f: impl Fn(f32, f32, f32) -> (f32, f32) + Sync,
) {
    let n = gate.len();
    assert!(
        up.len() == n && grad.len() == n && dgate.len() == n && dup.len() == n,
        "gated product backward: bad lengths"
    );
    let c = MIN_TASK * 4;
    dgate
        .par_chunks_mut(c)
        .zip(dup.par_chunks_mut(c))
        .zip(gate.par_chunks(c))
        .zip(up.par_chunks(c))
        .zip(grad.par_chunks(c))
        .for_each(|((((dgate, dup), gate), up), grad)| {
            for i in 0..gate.len() {
                (dgate[i], dup[i]) = f(gate[i], up[i], grad[i]);
            }
        });
}

/// The rotary embedding, halves layout, of `x` shaped `(…, seq, heads, dim)`: the vector of
/// a head at position `p` has its pairs `(i, i + dim/2)` rotated by the angle whose `cos`
/// and `sin` are `cos[p·dim/2 + i]`, `sin[…]` (tables `(seq, dim/2)`). `inverse` rotates
/// the other way, which is the backward pass (a rotation's transpose is its inverse).
pub fn rope(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    inverse: bool,
    out: &mut [f32],
) {
    let half = cos.len() / seq;
    let dim = 2 * half;
    let row = heads * dim;
    assert!(
        sin.len() == cos.len() && x.len() == out.len() && x.len().is_multiple_of(seq * row),
        "rope: bad lengths"
    );
    let sign = if inverse { -1.0 } else { 1.0 };
    let per = rows_per_task(x.len() / row, row) * row;
    out.par_chunks_mut(per)
        .zip(x.par_chunks(per))
        .enumerate()
        .for_each(|(task, (out, x))| {
            let first = task * per / row;
            for (r, (out, x)) in out
                .chunks_exact_mut(row)
                .zip(x.chunks_exact(row))
                .enumerate()
            {
                let pos = (first + r) % seq;
                let cos = &cos[pos * half..(pos + 1) * half];
                let sin = &sin[pos * half..(pos + 1) * half];
                for (out, x) in out.chunks_exact_mut(dim).zip(x.chunks_exact(dim)) {
                    let (x1, x2) = x.split_at(half);
                    let (o1, o2) = out.split_at_mut(half);
                    for i in 0..half {
                        let s = sign * sin[i];
                        o1[i] = x1[i] * cos[i] - x2[i] * s;
                        o2[i] = x2[i] * cos[i] + x1[i] * s;
                    }
                }
            }
        });
}

/// Causal softmax of one row of attention scores in place: its first `seen` scores (the
/// keys at or before the query's position) become `softmax(scale · x)` over them, the rest
/// 0 (the values there are not read).
pub fn causal_softmax_row(row: &mut [f32], seen: usize, scale: f32) {
    let max = row[..seen].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) * scale;
    let mut sum = 0f32;
    for o in &mut row[..seen] {
        *o = exp(*o * scale - max);
        sum += *o;
    }
    let inv = 1.0 / sum;
    row[..seen].iter_mut().for_each(|o| *o *= inv);
    row[seen..].fill(0.0);
}

/// The gradient of [`causal_softmax_row`] in place, from its output `p`: `row` holds the
/// gradient of the probabilities and becomes `scale · p · (grad − Σ p·grad)` over the
/// first `seen` values (where they may be non-zero), 0 after them (not read there).
pub fn causal_softmax_backward_row(p: &[f32], row: &mut [f32], seen: usize, scale: f32) {
    let dot: f32 = p[..seen].iter().zip(&row[..seen]).map(|(p, g)| p * g).sum();
    for (dx, &p) in row[..seen].iter_mut().zip(&p[..seen]) {
        *dx = scale * p * (*dx - dot);
    }
    row[seen..].fill(0.0);
}

/// Softmax cross-entropy of rows of `logits` (`vocab` each) against `targets`, each row's
/// loss multiplied by its `weights` entry: returns `weight · (logsumexp − logit[target])`
/// per row. With `grad_scale = Some(s)`, the logits are overwritten with the gradient of
/// `s · Σ losses`: `s · weight · (softmax − onehot(target))`, so that the caller never holds
/// a second copy of a `tokens × vocab` block.
pub fn cross_entropy_rows(
    logits: &mut [f32],
    vocab: usize,
    targets: &[u32],
    weights: &[f32],
    grad_scale: Option<f32>,
) -> Vec<f32> {
    let rows = targets.len();
    assert!(
        logits.len() == rows * vocab && weights.len() == rows,
        "cross_entropy_rows: bad lengths"
    );
    let mut losses = vec![0f32; rows];
    logits
        .par_chunks_mut(vocab)
        .zip(losses.par_iter_mut())
        .zip(targets.par_iter().zip(weights.par_iter()))
        .with_min_len(rows_per_task(rows, vocab))
        .for_each(|((row, loss), (&target, &weight))| {
            let target = target as usize;
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f32 = row.iter().map(|&v| exp(v - max)).sum();
            let lse = max + sum.ln();
            *loss = weight * (lse - row[target]);
            if let Some(scale) = grad_scale {
                let s = scale * weight;
                if s == 0.0 {
                    row.fill(0.0);
                } else {
                    row.iter_mut().for_each(|v| *v = s * exp(*v - lse));
                    row[target] -= s;
                }
            }
        });
    losses
}

/// `dst += src`, on every core.
pub fn add_assign(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "add_assign: bad lengths");
    dst.par_chunks_mut(MIN_TASK * 8)
        .zip(src.par_chunks(MIN_TASK * 8))
        .for_each(|(d, s)| d.iter_mut().zip(s).for_each(|(d, s)| *d += s));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        // splitmix64 to [-2, 2): deterministic inputs without a rand dependency.
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (z >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect()
    }

    #[test]
    fn exp_matches_libm() {
        for i in -8000..8000 {
            let x = i as f32 / 100.0;
            let (got, want) = (exp(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 5e-7,
                "exp({x}) = {got}, libm {want}"
            );
        }
    }

    /// Finite differences of `loss = Σ grad · f(x)` against the analytic backward.
    fn check_gradient(
        x: &[f32],
        grad: &[f32],
        f: impl Fn(&[f32]) -> Vec<f32>,
        analytic: &[f32],
        tolerance: f32,
    ) {
        let loss = |x: &[f32]| -> f64 {
            f(x).iter()
                .zip(grad)
                .map(|(&y, &g)| f64::from(y) * f64::from(g))
                .sum()
        };
        for i in (0..x.len()).step_by(x.len().div_ceil(40)) {
            let h = 1e-2f32;
            let mut up = x.to_vec();
            up[i] += h;
            let mut down = x.to_vec();
            down[i] -= h;
            let numeric = ((loss(&up) - loss(&down)) / (2.0 * f64::from(h))) as f32;
            assert!(
                (numeric - analytic[i]).abs() < tolerance * (1.0 + numeric.abs()),
                "element {i}: numeric {numeric}, analytic {}",
                analytic[i]
            );
        }
    }

    #[test]
    fn rms_norm_gradients_match_finite_differences() {
        let (rows, dim) = (5, 16);
        let x = values(rows * dim, 1);
        let w = values(dim, 2);
        let grad = values(rows * dim, 3);
        let (mut dx, mut dw) = (vec![0f32; rows * dim], vec![0f32; dim]);
        rms_norm_backward(&x, &w, 1e-5, &grad, &mut dx, &mut dw);
        let norm = |x: &[f32], w: &[f32]| {
            let mut out = vec![0f32; x.len()];
            rms_norm(x, w, 1e-5, &mut out);
            out
        };
        check_gradient(&x, &grad, |x| norm(x, &w), &dx, 2e-2);
        check_gradient(&w, &grad, |w| norm(&x, w), &dw, 2e-2);
    }

    #[test]
    fn swiglu_gradients_match_finite_differences() {
        let n = 64;
        let (gate, up, grad) = (values(n, 4), values(n, 5), values(n, 6));
        let (mut dgate, mut dup) = (vec![0f32; n], vec![0f32; n]);
        swiglu_backward(&gate, &up, &grad, &mut dgate, &mut dup);
        let f = |gate: &[f32], up: &[f32]| {
            let mut out = vec![0f32; gate.len()];
            swiglu(gate, up, &mut out);
            out
        };
        check_gradient(&gate, &grad, |g| f(g, &up), &dgate, 1e-2);
        check_gradient(&up, &grad, |u| f(&gate, u), &dup, 1e-2);
    }

    #[test]
    fn rope_backward_is_the_inverse_rotation() {
        let (seq, heads, dim) = (6, 3, 8);
        let x = values(2 * seq * heads * dim, 7);
        let angles = values(seq * dim / 2, 8);
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let mut rotated = vec![0f32; x.len()];
        rope(&x, &cos, &sin, seq, heads, false, &mut rotated);
        let mut back = vec![0f32; x.len()];
        rope(&rotated, &cos, &sin, seq, heads, true, &mut back);
        for (a, b) in x.iter().zip(&back) {
            assert!((a - b).abs() < 1e-5);
        }
        let grad = values(x.len(), 9);
        let mut dx = vec![0f32; x.len()];
        rope(&grad, &cos, &sin, seq, heads, true, &mut dx);
        let f = |x: &[f32]| {
            let mut out = vec![0f32; x.len()];
            rope(x, &cos, &sin, seq, heads, false, &mut out);
            out
        };
        check_gradient(&x, &grad, f, &dx, 1e-2);
    }

    #[test]
    fn causal_softmax_masks_and_differentiates() {
        let seq = 7;
        // Rows of 3 heads' scores, the row `r` the query at position `r % seq`.
        let softmax = |x: &[f32]| {
            let mut out = x.to_vec();
            for (r, row) in out.chunks_mut(seq).enumerate() {
                causal_softmax_row(row, r % seq + 1, 0.5);
            }
            out
        };
        let x = values(3 * seq * seq, 10);
        let p = softmax(&x);
        for (r, row) in p.chunks(seq).enumerate() {
            let pos = r % seq;
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert!(row[pos + 1..].iter().all(|&v| v == 0.0));
        }
        let grad = values(x.len(), 11);
        let mut dx = grad.clone();
        for (r, (row, p)) in dx.chunks_mut(seq).zip(p.chunks(seq)).enumerate() {
            causal_softmax_backward_row(p, row, r % seq + 1, 0.5);
        }
        check_gradient(&x, &grad, softmax, &dx, 1e-2);
    }

    #[test]
    fn cross_entropy_gradient_matches_finite_differences() {
        let (rows, vocab) = (4, 33);
        let logits = values(rows * vocab, 12);
        let targets = [3u32, 0, 32, 17];
        let weights = [1.0f32, 0.0, 0.5, 1.0];
        let mut grad = logits.clone();
        let losses = cross_entropy_rows(&mut grad, vocab, &targets, &weights, Some(1.0));
        // Row 0 by hand: logsumexp − logit[target].
        let row = &logits[..vocab];
        let lse = row.iter().map(|v| f64::from(*v).exp()).sum::<f64>().ln();
        assert!((f64::from(losses[0]) - (lse - f64::from(row[3]))).abs() < 1e-5);
        assert_eq!(losses[1], 0.0);
        let total = |x: &[f32]| {
            let mut x = x.to_vec();
            vec![
                cross_entropy_rows(&mut x, vocab, &targets, &weights, None)
                    .iter()
                    .sum::<f32>(),
            ]
        };
        check_gradient(&logits, &[1.0], total, &grad, 1e-2);
    }
}
