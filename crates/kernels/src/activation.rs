//! The gated MLP's activation, `silu(gate) · up`, in one pass over the fused gate/up
//! projection, on both cores, with the exponential in AVX-512 registers where the CPU has
//! them.
//!
//! Why: candle computes it as three passes (a strided copy of the gate half, `silu` with one
//! libm `expf` call per value, a product), which took more prefill time on SmolLM2 than
//! some of the matmuls once those ran as int8 panels. The AVX2 and portable paths keep
//! candle's exact arithmetic (`g / (1 + exp(−g)) · u` with libm's `expf`); the AVX-512
//! path's exponential is Cephes' single-precision polynomial (within 2 ulp of libm).

use rayon::prelude::*;

use crate::cpu::Isa;

/// Rows handed to one rayon task (a few tens of thousands of values).
const ROWS_PER_TASK: usize = 8;

/// `silu(gate) · up` for `rows` rows of `2 · hidden` values (the gate half, then the up
/// half); row-major `(rows, hidden)`.
pub fn silu_mul(gate_up: &[f32], rows: usize, hidden: usize) -> Vec<f32> {
    assert_eq!(gate_up.len(), rows * 2 * hidden, "fused gate/up size");
    let level = crate::cpu::isa();
    let mut out = vec![0f32; rows * hidden];
    let run = |(inputs, outputs): (&[f32], &mut [f32])| {
        for (row, out) in inputs
            .chunks_exact(2 * hidden)
            .zip(outputs.chunks_exact_mut(hidden))
        {
            let (gate, up) = row.split_at(hidden);
            silu_mul_row(level, gate, up, out);
        }
    };
    if rows > ROWS_PER_TASK {
        gate_up
            .par_chunks(ROWS_PER_TASK * 2 * hidden)
            .zip(out.par_chunks_mut(ROWS_PER_TASK * hidden))
            .for_each(run);
    } else {
        run((gate_up, &mut out));
    }
    out
}

fn silu_mul_row(level: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Isa::Avx512 {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        unsafe { avx512::silu_mul_row(gate, up, out) };
        return;
    }
    let _ = level;
    silu_mul_plain(gate, up, out);
}

/// candle's arithmetic: `silu` then the product, each rounded to f32.
fn silu_mul_plain(gate: &[f32], up: &[f32], out: &mut [f32]) {
    for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *out = g / (1.0 + (-g).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must support AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn silu_mul_row(gate: &[f32], up: &[f32], out: &mut [f32]) {
        let whole = out.len() / 16 * 16;
        // SAFETY: 16 values at a time within the three slices of equal length.
        unsafe {
            for at in (0..whole).step_by(16) {
                let g = _mm512_loadu_ps(gate.as_ptr().add(at));
                let u = _mm512_loadu_ps(up.as_ptr().add(at));
                let e = exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
                let silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0), e));
                _mm512_storeu_ps(out.as_mut_ptr().add(at), _mm512_mul_ps(silu, u));
            }
        }
        super::silu_mul_plain(&gate[whole..], &up[whole..], &mut out[whole..]);
    }

    /// `exp(x)` per lane: Cephes' `expf` (x = n·ln2 + r, a degree-6 polynomial in r, then
    /// scaled by 2^n), clamped to the finite range as libm's is.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) fn exp(x: __m512) -> __m512 {
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(-103.972_08)),
            _mm512_set1_ps(88.722_84),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        // ln 2 in two parts, so that `n · ln2` is exact in the first.
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm512_set1_ps(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let r2 = _mm512_mul_ps(r, r);
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
        _mm512_scalef_ps(y, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path is within 4 ulp of candle's arithmetic, from deep negatives (silu → −0)
    /// to large positives (silu → g), and exactly it on the paths that share it.
    #[test]
    fn every_path_matches_candles_silu_times_up() {
        let hidden = 37;
        let rows = 20;
        let gate_up: Vec<f32> = (0..rows * 2 * hidden)
            .map(|i| ((i * 7919) % 4001) as f32 / 4000.0 * 240.0 - 120.0)
            .collect();
        let mut expected = vec![0f32; rows * hidden];
        for (row, out) in gate_up
            .chunks_exact(2 * hidden)
            .zip(expected.chunks_exact_mut(hidden))
        {
            silu_mul_plain(&row[..hidden], &row[hidden..], out);
        }
        for level in Isa::runnable() {
            let mut got = vec![0f32; rows * hidden];
            for (row, out) in gate_up
                .chunks_exact(2 * hidden)
                .zip(got.chunks_exact_mut(hidden))
            {
                silu_mul_row(level, &row[..hidden], &row[hidden..], out);
            }
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                let ulps = (g.to_bits() as i64 - e.to_bits() as i64).abs();
                assert!(
                    ulps <= 4 || (g - e).abs() <= 1e-30,
                    "{} at {i}: {g} vs {e} ({ulps} ulp)",
                    level.name()
                );
                if level < Isa::Avx512 {
                    assert_eq!(g.to_bits(), e.to_bits(), "{} at {i}", level.name());
                }
            }
        }
        assert_eq!(silu_mul(&gate_up, rows, hidden), {
            let mut out = vec![0f32; rows * hidden];
            for (row, out) in gate_up
                .chunks_exact(2 * hidden)
                .zip(out.chunks_exact_mut(hidden))
            {
                silu_mul_row(crate::cpu::isa(), &row[..hidden], &row[hidden..], out);
            }
            out
        });
    }
}
