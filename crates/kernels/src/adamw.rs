//! The AdamW update (decoupled weight decay, bias-corrected moments) over plain slices, on
//! every core: the optimizer step of full fine-tuning touches every weight four times, and
//! as a chain of tensor operations it ran on one core.

use rayon::prelude::*;

/// Elements per parallel task: large enough that scheduling costs nothing, small enough
/// that both cores share even a norm's weights.
const CHUNK: usize = 1 << 14;

/// AdamW's settings and the step they are applied at (1 for the first update).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub t: u64,
    /// Each gradient is multiplied by this first (gradient clipping's factor; 1 leaves it
    /// exact), so clipping needs no scaled copy of the gradients.
    pub grad_scale: f32,
}

/// One AdamW update of `param` in place from `grad`, updating the moments `m` and `v`:
/// `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`, `θ ← θ(1 − lr·λ) − lr·m̂/(√v̂ + ε)` with
/// `m̂ = m/(1−β₁ᵗ)`, `v̂ = v/(1−β₂ᵗ)` (Loshchilov & Hutter; the update of PyTorch's and
/// candle's `AdamW`). Every element is independent, so the result does not depend on how
/// the work is split.
pub fn adamw_update(param: &mut [f32], grad: &[f32], m: &mut [f32], v: &mut [f32], s: AdamWStep) {
    assert!(
        grad.len() == param.len() && m.len() == param.len() && v.len() == param.len(),
        "adamw_update: slices of different lengths"
    );
    let beta1 = s.beta1 as f32;
    let beta2 = s.beta2 as f32;
    let scale_m = (1.0 / (1.0 - s.beta1.powf(s.t as f64))) as f32;
    let scale_v = (1.0 / (1.0 - s.beta2.powf(s.t as f64))) as f32;
    let decay = (1.0 - s.lr * s.weight_decay) as f32;
    let lr = s.lr as f32;
    let eps = s.eps as f32;
    let grad_scale = s.grad_scale;
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| {
            for i in 0..p.len() {
                let g = g[i] * grad_scale;
                m[i] = beta1 * m[i] + (1.0 - beta1) * g;
                v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
                let m_hat = m[i] * scale_m;
                let v_hat = v[i] * scale_v;
                p[i] = p[i] * decay - lr * (m_hat / (v_hat.sqrt() + eps));
            }
        });
}

/// `Σ x²` in f64, on every core (a gradient's share of the global norm that clipping needs,
/// without a squared copy of the gradient).
pub fn sum_of_squares(x: &[f32]) -> f64 {
    x.par_chunks(CHUNK)
        .map(|chunk| {
            chunk
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two steps on three weights against PyTorch: `torch.optim.AdamW([p], lr=0.1,
    /// betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)` on p = [1, -2, 0.5] with grads
    /// [0.5, -1, 0] then [0.25, 0.5, 2] (torch 2.15.0, printed to 7 decimals). Within a few
    /// f32 rounding steps: torch orders the same operations differently (`lerp_`,
    /// `addcdiv_`).
    #[test]
    fn two_steps_match_pytorch() {
        let mut p = vec![1.0f32, -2.0, 0.5];
        let mut m = vec![0.0f32; 3];
        let mut v = vec![0.0f32; 3];
        let step = |t| AdamWStep {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            t,
            grad_scale: 1.0,
        };
        adamw_update(&mut p, &[0.5, -1.0, 0.0], &mut m, &mut v, step(1));
        for (got, want) in p.iter().zip([0.899_000_0_f64, -1.898_000_0, 0.499_500_0]) {
            assert!((f64::from(*got) - want).abs() < 5e-6, "{p:?}");
        }
        adamw_update(&mut p, &[0.25, 0.5, 2.0], &mut m, &mut v, step(2));
        for (got, want) in p.iter().zip([0.804_883_1_f64, -1.869_468_3, 0.424_586_8]) {
            assert!((f64::from(*got) - want).abs() < 5e-6, "{p:?}");
        }
    }

    #[test]
    fn the_split_does_not_change_the_result() {
        let n = 3 * CHUNK + 17;
        let grad: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let run = |split: bool| {
            let mut p: Vec<f32> = (0..n).map(|i| (i % 13) as f32 / 13.0).collect();
            let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
            let s = AdamWStep {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.1,
                t: 3,
                grad_scale: 1.0,
            };
            if split {
                let at = CHUNK + 5;
                let (p1, p2) = p.split_at_mut(at);
                let (m1, m2) = m.split_at_mut(at);
                let (v1, v2) = v.split_at_mut(at);
                adamw_update(p1, &grad[..at], m1, v1, s);
                adamw_update(p2, &grad[at..], m2, v2, s);
            } else {
                adamw_update(&mut p, &grad, &mut m, &mut v, s);
            }
            p
        };
        assert_eq!(run(false), run(true));
    }

    /// A scaled update equals the update of the scaled gradient, and the sum of squares
    /// over chunks is the plain one.
    #[test]
    fn the_gradient_scale_is_the_scaled_gradients_update() {
        let n = 2 * CHUNK + 3;
        let grad: Vec<f32> = (0..n)
            .map(|i| ((i * 31) % 97) as f32 / 48.0 - 1.0)
            .collect();
        let run = |grad: &[f32], grad_scale: f32| {
            let mut p = vec![0.5f32; n];
            let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
            let s = AdamWStep {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                t: 1,
                grad_scale,
            };
            adamw_update(&mut p, grad, &mut m, &mut v, s);
            (p, m)
        };
        let scaled: Vec<f32> = grad.iter().map(|g| g * 0.25).collect();
        assert_eq!(run(&grad, 0.25), run(&scaled, 1.0));
        let plain: f64 = grad.iter().map(|&g| f64::from(g) * f64::from(g)).sum();
        assert!((sum_of_squares(&grad) - plain).abs() <= 1e-9 * plain);
    }
}
