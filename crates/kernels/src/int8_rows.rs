//! Activation rows quantized to int8 per block of 32 values, as ggml's q8_1 stores them:
//! the left operand of every integer kernel ([`crate::q4_1`]'s dot products, the
//! [`crate::vnni`] and [`crate::amx`] panels), kept apart so each of those depends on it
//! and none on another.

use rayon::prelude::*;

/// Values per block (weights and activations alike).
pub const BLOCK: usize = 32;
/// One activation block's values, codes, scale and scaled code sums (f16 and exact), as
/// zipped iterators hand them over.
type BlockSlots<'a> = (
    (((&'a [f32], &'a mut [i8]), &'a mut f32), &'a mut f32),
    &'a mut f32,
);

/// Activation rows quantized per block of 32: `x ≈ d·q` with `q` in −127…127 and
/// `s = d·Σq`, both scales rounded to f16 as ggml's q8_1 stores them (so that greedy
/// choices agree with llama.cpp's); `sums` is `d·Σq` unrounded, for weights whose block
/// offset is large (the int8 panels' Q8_0 and Q4_K).
pub struct Activations {
    pub(crate) blocks_per_row: usize,
    pub(crate) d: Vec<f32>,
    pub(crate) s: Vec<f32>,
    pub(crate) sums: Vec<f32>,
    pub(crate) q: Vec<i8>,
}

impl Activations {
    pub fn quantize(lhs: &[f32], k: usize) -> Self {
        let blocks_per_row = k / BLOCK;
        let blocks = lhs.len() / BLOCK;
        let mut d = vec![0f32; blocks];
        let mut s = vec![0f32; blocks];
        let mut sums = vec![0f32; blocks];
        let mut q = vec![0i8; lhs.len()];
        let level = crate::cpu::isa();
        let quantize_block = |((((x, q), d), s), exact): BlockSlots| {
            let x: &[f32; BLOCK] = x.try_into().expect("whole block");
            let q: &mut [i8; BLOCK] = q.try_into().expect("whole block");
            let (scale, sum) = quantize_block(level, x, q);
            *d = half::f16::from_f32(scale).to_f32();
            *s = half::f16::from_f32(sum as f32 * scale).to_f32();
            *exact = *d * sum as f32;
        };
        // Decoding quantizes one or a few rows: not worth waking the pool for.
        if blocks >= 256 {
            lhs.par_chunks(BLOCK)
                .zip(q.par_chunks_mut(BLOCK))
                .zip(d.par_iter_mut())
                .zip(s.par_iter_mut())
                .zip(sums.par_iter_mut())
                .for_each(quantize_block);
        } else {
            lhs.chunks(BLOCK)
                .zip(q.chunks_mut(BLOCK))
                .zip(d.iter_mut())
                .zip(s.iter_mut())
                .zip(sums.iter_mut())
                .for_each(quantize_block);
        }
        Activations {
            blocks_per_row,
            d,
            s,
            sums,
            q,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.d.len() / self.blocks_per_row.max(1)
    }
}

/// One block's codes, its scale `d` and the sum of its codes, on the widest vectors the
/// selected path allows (the same arithmetic on every path: a maximum, one product and a
/// rounding per value, so the codes are identical bit for bit).
fn quantize_block(level: crate::cpu::Isa, x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::cpu::Isa;
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        if level >= Isa::Avx512 {
            return unsafe { quantize_block_avx512(x, q) };
        }
        if level >= Isa::Avx2 {
            return unsafe { quantize_block_avx2(x, q) };
        }
    }
    let _ = level;
    quantize_block_plain(x, q)
}

#[inline(always)]
fn quantize_block_plain(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = amax / 127.0;
    let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
    let mut sum = 0i32;
    for (x, q) in x.iter().zip(q.iter_mut()) {
        // `round` is ties-away-from-zero, C's `roundf` in ggml's reference code; with
        // SSE4.1 or wider LLVM computes it in vector registers instead of calling libm.
        let code = (x * inverse).round() as i8;
        *q = code;
        sum += i32::from(code);
    }
    (scale, sum)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_block_avx2(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> (f32, i32) {
    quantize_block_plain(x, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantize_block_avx512(x: &[f32; BLOCK], q: &mut [i8; BLOCK]) -> (f32, i32) {
    use std::arch::x86_64::*;
    // SAFETY: 32 values in, 32 codes out (two vectors of 16 each).
    unsafe {
        let halves = [
            _mm512_loadu_ps(x.as_ptr()),
            _mm512_loadu_ps(x.as_ptr().add(16)),
        ];
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(
            _mm512_abs_ps(halves[0]),
            _mm512_abs_ps(halves[1]),
        ));
        let scale = amax / 127.0;
        let inverse = _mm512_set1_ps(if scale == 0.0 { 0.0 } else { 1.0 / scale });
        let mut sum = 0;
        for (half, values) in halves.into_iter().enumerate() {
            let scaled = _mm512_mul_ps(values, inverse);
            // Ties away from zero, as `f32::round`: truncate, then step away from zero
            // where the dropped fraction is at least one half (exact for |v| < 2^23).
            let truncated =
                _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
            let fraction = _mm512_abs_ps(_mm512_sub_ps(scaled, truncated));
            let step_away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(fraction, _mm512_set1_ps(0.5));
            // ±1 with the sign of the value (integer operations: AVX-512 F has no float
            // `or`, which would need DQ).
            let sign = _mm512_and_si512(_mm512_castps_si512(scaled), _mm512_set1_epi32(i32::MIN));
            let unit = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_castps_si512(_mm512_set1_ps(1.0)),
                sign,
            ));
            let rounded = _mm512_mask_add_ps(truncated, step_away, truncated, unit);
            let codes = _mm512_cvttps_epi32(rounded);
            sum += _mm512_reduce_add_epi32(codes);
            _mm_storeu_si128(
                q.as_mut_ptr().add(16 * half) as *mut __m128i,
                _mm512_cvtepi32_epi8(codes),
            );
        }
        (scale, sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizers_agree_on_every_path() {
        let mut values = crate::q4_1::tests::random(64, BLOCK, 3);
        // Exact ties: 127 · (k + 0.5) / 127.5 scaled by amax = 127.5 / 127 lands on k + 0.5.
        values.extend((0..BLOCK).map(|i| (i as f32 - 16.0 + 0.5) * (1.0 / 127.0) * 4.0));
        values.extend([0.0; BLOCK]);
        for block in values.chunks_exact(BLOCK) {
            let block: &[f32; BLOCK] = block.try_into().unwrap();
            let mut expected = [0i8; BLOCK];
            let reference = quantize_block_plain(block, &mut expected);
            for level in crate::cpu::Isa::runnable() {
                let mut codes = [0i8; BLOCK];
                let got = quantize_block(level, block, &mut codes);
                assert_eq!((got, codes), (reference, expected), "{}", level.name());
            }
        }
    }
}
