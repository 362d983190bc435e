//! RMSNorm of the local engine's activation rows, `x / √(mean(x²) + eps) · w`, with each
//! row's sum of squares in AVX-512 registers where the CPU has them.
//!
//! Why: candle's `rms_norm` adds a row's squares one after the other (a float sum in its
//! strict order, which the compiler keeps scalar): 576 dependent additions per row of
//! SmolLM2, two norms per layer and token, 2 % of the demo's time in perf. Below AVX-512 the
//! rows keep candle's exact arithmetic (that sequential sum, then `x / rms · w`); the
//! AVX-512 path takes ggml's, the engine the parity tests hold us to: each square in f32
//! added in f64, `x · (1 / √(mean + eps))`, then the weight.

use rayon::prelude::*;

use crate::cpu::Isa;

/// Rows from which the rows are spread over the pool (as candle's op does).
const PARALLEL_ROWS: usize = 32;

/// RMSNorm of the rows of `x` (each `w.len()` values) with weight `w`; row-major.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let dim = w.len();
    assert!(
        dim > 0 && x.len().is_multiple_of(dim),
        "rms_norm: rows of {dim} values"
    );
    let level = crate::cpu::isa();
    // SAFETY: `rms_row` writes every value of each row, and the rows cover `out`.
    let mut out = unsafe { crate::unwritten::<f32>(x.len()) };
    let row = |(x, out): (&[f32], &mut [f32])| rms_row(level, x, w, eps, out);
    if x.len() / dim > PARALLEL_ROWS {
        x.par_chunks(dim).zip(out.par_chunks_mut(dim)).for_each(row);
    } else {
        x.chunks(dim).zip(out.chunks_mut(dim)).for_each(row);
    }
    out
}

fn rms_row(level: Isa, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Isa::Avx512 {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks; the three rows are as
        // long (`rms_norm` cut them so).
        unsafe { avx512::rms_row(x, w, eps, out) };
        return;
    }
    let _ = level;
    rms_row_plain(x, w, eps, out);
}

/// candle's arithmetic: the squares summed in order, then `x / rms · w` per value.
fn rms_row_plain(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let square: f32 = x.iter().map(|v| v * v).sum();
    let rms = (square / x.len() as f32 + eps).sqrt();
    for ((o, &x), &w) in out.iter_mut().zip(x).zip(w) {
        *o = x / rms * w;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512 F; `x`, `w` and `out` are as long.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn rms_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
        let n = x.len();
        let lanes = |at: usize| -> __mmask16 {
            if at + 16 <= n {
                !0
            } else {
                ((1u32 << (n - at)) - 1) as __mmask16
            }
        };
        // SAFETY: every access is a (masked) register within the three rows.
        unsafe {
            // Each square in f32, added in f64 (as ggml does), 8 lanes per register.
            let mut sums = [_mm512_setzero_pd(); 2];
            let mut at = 0;
            while at < n {
                let v = _mm512_maskz_loadu_ps(lanes(at), x.as_ptr().add(at));
                let squares = _mm512_mul_ps(v, v);
                let low = _mm512_cvtps_pd(_mm512_castps512_ps256(squares));
                let high = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(squares),
                )));
                sums[0] = _mm512_add_pd(sums[0], low);
                sums[1] = _mm512_add_pd(sums[1], high);
                at += 16;
            }
            let square = _mm512_reduce_add_pd(_mm512_add_pd(sums[0], sums[1]));
            let scale = _mm512_set1_ps(1.0 / ((square / n as f64) as f32 + eps).sqrt());
            let mut at = 0;
            while at < n {
                let mask = lanes(at);
                let v = _mm512_maskz_loadu_ps(mask, x.as_ptr().add(at));
                let weight = _mm512_maskz_loadu_ps(mask, w.as_ptr().add(at));
                let normed = _mm512_mul_ps(_mm512_mul_ps(v, scale), weight);
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), mask, normed);
                at += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path against the definition in f64, on rows whose length is not a multiple of
    /// 16 and rows of large and tiny values: within a few ulp.
    #[test]
    fn rows_are_normalized_on_every_path() {
        for dim in [576, 37, 16, 5] {
            let rows = 40; // more than PARALLEL_ROWS: the pool's path too
            let x: Vec<f32> = (0..rows * dim)
                .map(|i| {
                    let v = ((i * 7919) % 2003) as f32 / 2003.0 - 0.5;
                    if i / dim % 2 == 0 {
                        v * 300.0
                    } else {
                        v * 1e-3
                    }
                })
                .collect();
            let w: Vec<f32> = (0..dim).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
            let eps = 1e-6;
            for level in Isa::runnable() {
                let mut out = vec![0f32; x.len()];
                for (x, out) in x.chunks(dim).zip(out.chunks_mut(dim)) {
                    rms_row(level, x, &w, eps, out);
                }
                for (r, (x, out)) in x.chunks(dim).zip(out.chunks(dim)).enumerate() {
                    let square: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                    let rms = (square / dim as f64 + f64::from(eps)).sqrt();
                    for j in 0..dim {
                        let expected = f64::from(x[j]) / rms * f64::from(w[j]);
                        let error = (f64::from(out[j]) - expected).abs();
                        assert!(
                            error <= expected.abs() * 4e-6 + 1e-30,
                            "{} row {r} value {j}: {} against {expected}",
                            level.name(),
                            out[j]
                        );
                    }
                }
            }
            assert_eq!(rms_norm(&x, &w, eps).len(), x.len());
        }
    }
}
