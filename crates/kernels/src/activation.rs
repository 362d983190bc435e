//! The gated MLP's activation, `act(gate) · up` with `act` SiLU (llama, qwen…) or GELU's
//! tanh approximation (Gemma), in one pass over the fused gate/up projection, on both cores,
//! with the exponential in AVX-512 registers where the CPU has them.
//!
//! Why: candle computes it as three passes (a strided copy of the gate half, the activation
//! with one libm `expf` or `tanhf` call per value, a product), which took more prefill time
//! on SmolLM2 than some of the matmuls once those ran as int8 panels, and 17 % of Gemma 3's
//! run in libm's `tanhf`/`expm1f`. The AVX2 and portable paths keep candle's exact
//! arithmetic (`g / (1 + exp(−g)) · u`; `0.5 g (1 + tanh(√(2/π) g (1 + 0.044715 g²))) · u`,
//! with libm); the AVX-512 path's exponential is Cephes' single-precision polynomial (within
//! 2 ulp of libm), and its GELU is the same function written `g / (1 + exp(−2z))`, which
//! also keeps its relative precision where `1 + tanh(z)` cancels (large negative `g`).

use rayon::prelude::*;

use crate::cpu::Isa;

/// Rows handed to one rayon task (a few tens of thousands of values).
const ROWS_PER_TASK: usize = 8;

/// The activation applied to the gate half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Silu,
    /// `gelu_pytorch_tanh` / `gelu_new`.
    GeluTanh,
}

/// `√(2/π)`, as candle spells it.
const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;

/// `act(gate) · up` for `rows` rows of `2 · hidden` values (the gate half, then the up
/// half); row-major `(rows, hidden)`.
pub fn gated(gate: Gate, gate_up: &[f32], rows: usize, hidden: usize) -> Vec<f32> {
    assert_eq!(gate_up.len(), rows * 2 * hidden, "fused gate/up size");
    let level = crate::cpu::isa();
    // SAFETY: `gated_row` writes every value of each row, and the rows cover `out`.
    let mut out = unsafe { crate::unwritten::<f32>(rows * hidden) };
    let run = |(inputs, outputs): (&[f32], &mut [f32])| {
        for (row, out) in inputs
            .chunks_exact(2 * hidden)
            .zip(outputs.chunks_exact_mut(hidden))
        {
            let (g, up) = row.split_at(hidden);
            gated_row(level, gate, g, up, out);
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

fn gated_row(level: Isa, kind: Gate, gate: &[f32], up: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if level >= Isa::Avx512 {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        unsafe { avx512::gated_row(kind, gate, up, out) };
        return;
    }
    let _ = level;
    gated_plain(kind, gate, up, out);
}

/// candle's arithmetic: the activation, then the product, each rounded to f32.
fn gated_plain(kind: Gate, gate: &[f32], up: &[f32], out: &mut [f32]) {
    match kind {
        Gate::Silu => {
            for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *out = g / (1.0 + (-g).exp()) * u;
            }
        }
        Gate::GeluTanh => {
            for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                let gelu =
                    0.5 * g * (1.0 + f32::tanh(SQRT_TWO_OVER_PI * g * (1.0 + 0.044715 * g * g)));
                *out = gelu * u;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{Gate, SQRT_TWO_OVER_PI};

    /// # Safety
    /// The CPU must support AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn gated_row(kind: Gate, gate: &[f32], up: &[f32], out: &mut [f32]) {
        let whole = out.len() / 16 * 16;
        let one = _mm512_set1_ps(1.0);
        // SAFETY: 16 values at a time within the three slices of equal length.
        unsafe {
            for at in (0..whole).step_by(16) {
                let g = _mm512_loadu_ps(gate.as_ptr().add(at));
                let u = _mm512_loadu_ps(up.as_ptr().add(at));
                // Both are `g / (1 + exp(−t))`: SiLU with t = g, GELU with t = 2z, since
                // 0.5 (1 + tanh z) = 1 / (1 + exp(−2z)).
                let t = match kind {
                    Gate::Silu => g,
                    Gate::GeluTanh => {
                        let cubic =
                            _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715), g), g, one);
                        let z = _mm512_mul_ps(
                            _mm512_mul_ps(_mm512_set1_ps(SQRT_TWO_OVER_PI), g),
                            cubic,
                        );
                        _mm512_add_ps(z, z)
                    }
                };
                let e = exp(_mm512_sub_ps(_mm512_setzero_ps(), t));
                let activated = _mm512_div_ps(g, _mm512_add_ps(one, e));
                _mm512_storeu_ps(out.as_mut_ptr().add(at), _mm512_mul_ps(activated, u));
            }
        }
        super::gated_plain(kind, &gate[whole..], &up[whole..], &mut out[whole..]);
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
    use candle_core::{Device, Tensor};

    const HIDDEN: usize = 37;
    const ROWS: usize = 20;

    /// Gates from −120 to 120 (both tails of each activation) and ups around ±2.
    fn gate_up() -> Vec<f32> {
        (0..ROWS * 2 * HIDDEN)
            .map(|i| ((i * 7919) % 4001) as f32 / 4000.0 * 240.0 - 120.0)
            .collect()
    }

    fn by_rows(kind: Gate, level: Isa, gate_up: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; ROWS * HIDDEN];
        for (row, out) in gate_up
            .chunks_exact(2 * HIDDEN)
            .zip(out.chunks_exact_mut(HIDDEN))
        {
            gated_row(level, kind, &row[..HIDDEN], &row[HIDDEN..], out);
        }
        out
    }

    /// candle's own ops on the gate half, then the product: what the plain paths equal.
    fn candles(kind: Gate, gate_up: &[f32]) -> Vec<f32> {
        let joined = Tensor::from_slice(gate_up, (ROWS, 2 * HIDDEN), &Device::Cpu).unwrap();
        let gate = joined.narrow(1, 0, HIDDEN).unwrap();
        let up = joined.narrow(1, HIDDEN, HIDDEN).unwrap();
        let activated = match kind {
            Gate::Silu => candle_nn_free_silu(&gate),
            Gate::GeluTanh => gate.gelu().unwrap(),
        };
        (activated * up)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    /// `silu` as candle-nn computes it (`x / (1 + exp(−x))`), without the crate.
    fn candle_nn_free_silu(x: &Tensor) -> Tensor {
        (x / (x.neg().unwrap().exp().unwrap() + 1.0).unwrap()).unwrap()
    }

    fn ulps(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    /// SiLU: every path within 4 ulp of candle's arithmetic, from deep negatives (→ −0)
    /// to large positives (→ g), and exactly it on the paths that share it.
    #[test]
    fn every_path_matches_candles_silu_times_up() {
        let gate_up = gate_up();
        let expected = candles(Gate::Silu, &gate_up);
        for level in Isa::runnable() {
            let got = by_rows(Gate::Silu, level, &gate_up);
            for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    ulps(*g, *e) <= 4 || (g - e).abs() <= 1e-30,
                    "{} at {i}: {g} vs {e}",
                    level.name()
                );
                if level < Isa::Avx512 {
                    assert_eq!(g.to_bits(), e.to_bits(), "{} at {i}", level.name());
                }
            }
        }
        let whole = gated(Gate::Silu, &gate_up, ROWS, HIDDEN);
        assert_eq!(whole, by_rows(Gate::Silu, crate::cpu::isa(), &gate_up));
    }

    /// GELU (tanh approximation): the plain paths are candle's `gelu` times up bit for
    /// bit; every path, candle's formula included, is within 8 ulp of the function computed
    /// in f64 or within 2⁻²² of `|gate · up|` (an f32 rounding of the inputs' scale): in the
    /// negative tail the f32 function is ill-conditioned (candle's `1 + tanh` cancels; ours,
    /// `g / (1 + e^{−2z})`, is closer there but rounds `2z`).
    #[test]
    fn every_path_matches_candles_gelu_times_up() {
        let gate_up = gate_up();
        let expected = candles(Gate::GeluTanh, &gate_up);
        let (mut exact, mut scale) = (Vec::new(), Vec::new());
        for row in gate_up.chunks_exact(2 * HIDDEN) {
            let (gate, up) = row.split_at(HIDDEN);
            for (&g, &u) in gate.iter().zip(up) {
                let (g, u) = (g as f64, u as f64);
                let z = (2.0 / std::f64::consts::PI).sqrt() * g * (1.0 + 0.044715 * g * g);
                exact.push((0.5 * g * (1.0 + z.tanh()) * u) as f32);
                scale.push((g * u).abs() as f32);
            }
        }
        let close = |got: &[f32], name: &str| {
            for (i, ((g, x), s)) in got.iter().zip(&exact).zip(&scale).enumerate() {
                assert!(
                    ulps(*g, *x) <= 8 || (g - x).abs() <= s * 2f32.powi(-22),
                    "{name} at {i}: {g} vs {x} (f64)"
                );
            }
        };
        close(&expected, "candle");
        for level in Isa::runnable() {
            let got = by_rows(Gate::GeluTanh, level, &gate_up);
            close(&got, level.name());
            if level < Isa::Avx512 {
                for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                    assert_eq!(g.to_bits(), e.to_bits(), "{} at {i}", level.name());
                }
            }
        }
        let whole = gated(Gate::GeluTanh, &gate_up, ROWS, HIDDEN);
        assert_eq!(whole, by_rows(Gate::GeluTanh, crate::cpu::isa(), &gate_up));
    }
}
