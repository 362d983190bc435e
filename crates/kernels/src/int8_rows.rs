//! Activation rows quantized to int8 per block of 32 values, as ggml's q8_1 stores them:
//! the left operand of every integer kernel ([`crate::q4_1`]'s dot products, the
//! [`crate::vnni`] and [`crate::amx`] panels), kept apart so each of those depends on it
//! and none on another.

use rayon::prelude::*;

/// Values per block (weights and activations alike).
pub const BLOCK: usize = 32;
/// Blocks quantized together where AVX-512 runs: one 16-lane vector holds a value of each,
/// so their maxima and code sums are reduced side by side rather than one at a time.
const GROUP_BLOCKS: usize = 16;
/// A group's values, codes, scales and scaled code sums (f16 and exact), as zipped
/// iterators hand them over: up to [`GROUP_BLOCKS`] blocks, fewer at the end.
type GroupSlots<'a> = (
    (((&'a [f32], &'a mut [i8]), &'a mut [f32]), &'a mut [f32]),
    &'a mut [f32],
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
        assert!(
            lhs.len().is_multiple_of(BLOCK) && k.is_multiple_of(BLOCK),
            "activations in whole blocks of {BLOCK}"
        );
        // SAFETY: `quantize_group` writes every code, scale and sum of its group, and the
        // groups cover the blocks.
        let (mut d, mut s, mut sums, mut q) = unsafe {
            (
                crate::unwritten::<f32>(blocks),
                crate::unwritten::<f32>(blocks),
                crate::unwritten::<f32>(blocks),
                crate::unwritten::<i8>(lhs.len()),
            )
        };
        let level = crate::cpu::isa();
        let quantize_group =
            |((((x, q), d), s), exact): GroupSlots| quantize_group(level, x, q, d, s, exact);
        // Decoding quantizes one or a few rows: not worth waking the pool for.
        let group = GROUP_BLOCKS * BLOCK;
        if blocks >= 256 {
            lhs.par_chunks(group)
                .zip(q.par_chunks_mut(group))
                .zip(d.par_chunks_mut(GROUP_BLOCKS))
                .zip(s.par_chunks_mut(GROUP_BLOCKS))
                .zip(sums.par_chunks_mut(GROUP_BLOCKS))
                .for_each(quantize_group);
        } else {
            lhs.chunks(group)
                .zip(q.chunks_mut(group))
                .zip(d.chunks_mut(GROUP_BLOCKS))
                .zip(s.chunks_mut(GROUP_BLOCKS))
                .zip(sums.chunks_mut(GROUP_BLOCKS))
                .for_each(quantize_group);
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

/// A group of blocks' codes `q` and, per block, its scale `d` and scaled code sums `s`
/// (both rounded to f16) and `exact` (`d · Σq` unrounded); a whole group of 16 on
/// AVX-512 at once, else block by block. The same arithmetic either way, so the results
/// are identical bit for bit.
fn quantize_group(
    level: crate::cpu::Isa,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [f32],
    exact: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx512 && d.len() == GROUP_BLOCKS {
        let whole = "whole group";
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        unsafe {
            quantize_group_avx512(
                x.try_into().expect(whole),
                q.try_into().expect(whole),
                d.try_into().expect(whole),
                s.try_into().expect(whole),
                exact.try_into().expect(whole),
            )
        };
        return;
    }
    for ((((x, q), d), s), exact) in x
        .chunks_exact(BLOCK)
        .zip(q.chunks_exact_mut(BLOCK))
        .zip(d.iter_mut())
        .zip(s.iter_mut())
        .zip(exact.iter_mut())
    {
        let x: &[f32; BLOCK] = x.try_into().expect("whole block");
        let q: &mut [i8; BLOCK] = q.try_into().expect("whole block");
        let (scale, sum) = quantize_block(level, x, q);
        *d = half::f16::from_f32(scale).to_f32();
        *s = half::f16::from_f32(sum as f32 * scale).to_f32();
        *exact = *d * sum as f32;
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
            let codes = round_codes(_mm512_mul_ps(values, inverse));
            sum += _mm512_reduce_add_epi32(codes);
            _mm_storeu_si128(
                q.as_mut_ptr().add(16 * half) as *mut __m128i,
                _mm512_cvtepi32_epi8(codes),
            );
        }
        (scale, sum)
    }
}

/// Lane `i` of the result: `v[i]`'s 16 lanes combined by `combine` (maximum or sum), for
/// 16 vectors at once: four rounds of pairwise shuffles halve the vectors and the lanes
/// each holds per vector, then one permutation puts vector `i`'s result in lane `i`. Exact
/// for the maximum and for integer sums (the order does not matter to them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn reduce_sixteen(
    v: [std::arch::x86_64::__m512; 16],
    combine: impl Fn(std::arch::x86_64::__m512, std::arch::x86_64::__m512) -> std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // Vectors 2j and 2j+1: their 128-bit quarters 0-1 and 2-3 against each other, each
    // keeping 8 partial results (quarters 0-1 of the result for 2j, 2-3 for 2j+1).
    let halves: [__m512; 8] = std::array::from_fn(|j| {
        let (a, b) = (v[2 * j], v[2 * j + 1]);
        combine(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        )
    });
    // 4 partials each: quarter `l` of result `j` holds vector `4j + l`'s.
    let quarters: [__m512; 4] = std::array::from_fn(|j| {
        let (a, b) = (halves[2 * j], halves[2 * j + 1]);
        combine(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        )
    });
    // 2 partials each, within quarters: values 0-1 of quarter `l` of result `j` belong
    // to vector `8j + l`, values 2-3 to vector `8j + 4 + l`.
    let pairs: [__m512; 2] = std::array::from_fn(|j| {
        let (a, b) = (quarters[2 * j], quarters[2 * j + 1]);
        combine(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        )
    });
    // Value `e` of quarter `l` now holds vector `l + 4e`'s result.
    let whole = combine(
        _mm512_shuffle_ps::<0x88>(pairs[0], pairs[1]),
        _mm512_shuffle_ps::<0xDD>(pairs[0], pairs[1]),
    );
    let in_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(in_order, whole)
}

/// 16 blocks' codes and their `d`, `s` and `exact` as [`quantize_group`]'s block loop gives
/// them: the same maximum, division and rounding per value, with the maxima and code sums
/// reduced for all 16 blocks together ([`reduce_sixteen`]) and the scales rounded to f16 in
/// one vector conversion (to nearest, ties to even, as [`half`] rounds).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantize_group_avx512(
    x: &[f32; GROUP_BLOCKS * BLOCK],
    q: &mut [i8; GROUP_BLOCKS * BLOCK],
    d: &mut [f32; GROUP_BLOCKS],
    s: &mut [f32; GROUP_BLOCKS],
    exact: &mut [f32; GROUP_BLOCKS],
) {
    use std::arch::x86_64::*;
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    // SAFETY: 16 blocks of 32 values in, as many codes out (two vectors of 16 a block),
    // 16 values of each of `d`, `s` and `exact`.
    unsafe {
        let values: [[__m512; 2]; GROUP_BLOCKS] = std::array::from_fn(|b| {
            [
                _mm512_loadu_ps(x.as_ptr().add(b * BLOCK)),
                _mm512_loadu_ps(x.as_ptr().add(b * BLOCK + 16)),
            ]
        });
        let maxima = std::array::from_fn(|b| {
            _mm512_max_ps(_mm512_abs_ps(values[b][0]), _mm512_abs_ps(values[b][1]))
        });
        let amax = reduce_sixteen(maxima, |a, b| _mm512_max_ps(a, b));
        let scales = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(scales, _mm512_setzero_ps());
        let inverses = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0), scales);
        let mut inverse = [0f32; GROUP_BLOCKS];
        _mm512_storeu_ps(inverse.as_mut_ptr(), inverses);
        let code_sums: [__m512; GROUP_BLOCKS] = std::array::from_fn(|b| {
            let inverse = _mm512_set1_ps(inverse[b]);
            let [low, high] = values[b].map(|v| round_codes(_mm512_mul_ps(v, inverse)));
            _mm_storeu_si128(
                q.as_mut_ptr().add(b * BLOCK) as *mut __m128i,
                _mm512_cvtepi32_epi8(low),
            );
            _mm_storeu_si128(
                q.as_mut_ptr().add(b * BLOCK + 16) as *mut __m128i,
                _mm512_cvtepi32_epi8(high),
            );
            _mm512_castsi512_ps(_mm512_add_epi32(low, high))
        });
        let sums = _mm512_cvtepi32_ps(_mm512_castps_si512(reduce_sixteen(code_sums, |a, b| {
            _mm512_castsi512_ps(_mm512_add_epi32(
                _mm512_castps_si512(a),
                _mm512_castps_si512(b),
            ))
        })));
        let to_half = |v: __m512| _mm512_cvtph_ps(_mm512_cvtps_ph::<NEAREST>(v));
        let rounded = to_half(scales);
        _mm512_storeu_ps(d.as_mut_ptr(), rounded);
        _mm512_storeu_ps(s.as_mut_ptr(), to_half(_mm512_mul_ps(sums, scales)));
        _mm512_storeu_ps(exact.as_mut_ptr(), _mm512_mul_ps(rounded, sums));
    }
}

/// Scaled values rounded to integer codes, ties away from zero as `f32::round` (and C's
/// `roundf` in ggml's reference code): truncate, then step away from zero where the
/// dropped fraction is at least one half (exact for |v| < 2^23).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn round_codes(scaled: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let truncated = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(scaled);
    let fraction = _mm512_abs_ps(_mm512_sub_ps(scaled, truncated));
    let step_away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(fraction, _mm512_set1_ps(0.5));
    // ±1 with the sign of the value (integer operations: AVX-512 F has no float `or`,
    // which would need DQ).
    let sign = _mm512_and_si512(_mm512_castps_si512(scaled), _mm512_set1_epi32(i32::MIN));
    let unit = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(_mm512_set1_ps(1.0)),
        sign,
    ));
    _mm512_cvttps_epi32(_mm512_mask_add_ps(truncated, step_away, truncated, unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups of 16 blocks (AVX-512 reduces their maxima and sums side by side) against the
    /// plain per-block quantizer: two whole groups and a partial one, blocks of every
    /// magnitude (so a block's result landing in another's lane shows), exact ties and a
    /// block of zeros.
    #[test]
    fn groups_agree_with_blocks_on_every_path() {
        let blocks = 2 * GROUP_BLOCKS + 5;
        let mut values = crate::q4_1::tests::random(blocks - 2, BLOCK, 7);
        for (b, block) in values.chunks_exact_mut(BLOCK).enumerate() {
            let magnitude = 2f32.powi(b as i32 % 13 - 6);
            block.iter_mut().for_each(|v| *v *= magnitude);
        }
        values.extend((0..BLOCK).map(|i| (i as f32 - 16.0 + 0.5) * (1.0 / 127.0) * 4.0));
        values.extend([0.0; BLOCK]);
        values.rotate_left(20 * BLOCK);
        let mut expected = (vec![0i8; values.len()], Vec::new(), Vec::new(), Vec::new());
        for (x, q) in values
            .chunks_exact(BLOCK)
            .zip(expected.0.chunks_exact_mut(BLOCK))
        {
            let (scale, sum) = quantize_block_plain(x.try_into().unwrap(), q.try_into().unwrap());
            let d = half::f16::from_f32(scale).to_f32();
            expected.1.push(d);
            expected
                .2
                .push(half::f16::from_f32(sum as f32 * scale).to_f32());
            expected.3.push(d * sum as f32);
        }
        for level in crate::cpu::Isa::runnable() {
            let mut got = (
                vec![0i8; values.len()],
                vec![0f32; blocks],
                vec![0f32; blocks],
                vec![0f32; blocks],
            );
            for ((((x, q), d), s), exact) in values
                .chunks(GROUP_BLOCKS * BLOCK)
                .zip(got.0.chunks_mut(GROUP_BLOCKS * BLOCK))
                .zip(got.1.chunks_mut(GROUP_BLOCKS))
                .zip(got.2.chunks_mut(GROUP_BLOCKS))
                .zip(got.3.chunks_mut(GROUP_BLOCKS))
            {
                quantize_group(level, x, q, d, s, exact);
            }
            assert_eq!(got, expected, "{}", level.name());
        }
    }

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
