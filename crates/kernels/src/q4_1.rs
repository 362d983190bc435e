//! Q4_1 weights multiplied as stored: 4-bit unsigned codes against 8-bit activations with
//! AVX2 integer dot products (the arithmetic of llama.cpp's q4_1 × q8_1), and expanded to
//! f32 on both cores when a prefill wants a dense GEMM.
//!
//! Why not candle: candle 0.11 has only scalar loops for Q4_1, so the weights used to be
//! re-blocked to Q8_0 at load. That costs 8.5 bits per weight instead of 5: 47 MB more
//! resident memory for SmolLM2-135M, and 1.5× the bytes read per decoded token, which is
//! what a decoding step waits on. Here the codes stay 4-bit; each weight block is unpacked
//! once and multiplied with up to four activation rows.

use std::mem::MaybeUninit;

pub use crate::int8_rows::{Activations, BLOCK};

/// Bytes per stored Q4_1 block: f16 scale `d`, f16 minimum `m`, 16 bytes of packed codes
/// (value `i` in the low nibble of byte `i`, value `16 + i` in its high nibble).
const BLOCK_BYTES: usize = 20;
/// Output columns per rayon task (as in tabcontam's `infer::qmatmul`).
const COLUMNS_PER_TASK: usize = 64;
/// Activation rows multiplied per unpacked weight block (accumulators stay in registers).
const ROWS_PER_PASS: usize = 4;

/// Whether the AVX2 kernel runs (on the path [`crate::cpu::isa`] selected); otherwise the
/// same sums run as plain loops ([`scalar_dot`]), so every path multiplies the file's own
/// Q4_1 weights with llama.cpp's arithmetic.
pub fn simd() -> bool {
    crate::cpu::isa() >= crate::cpu::Isa::Avx2
}

#[inline]
fn f16_bits(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// `xs Wᵀ` for `W` of `n` rows of `k` values stored as Q4_1 blocks in `data` and `rows`
/// rows of f32 activations; row-major `(rows, n)`.
pub fn matmul(data: &[u8], n: usize, k: usize, lhs: &[f32], rows: usize) -> Vec<f32> {
    assert!(
        k.is_multiple_of(BLOCK),
        "width {k} is not whole Q4_1 blocks"
    );
    assert_eq!(data.len(), n * k / BLOCK * BLOCK_BYTES, "Q4_1 storage size");
    assert_eq!(lhs.len(), rows * k, "activation size");
    let xs = Activations::quantize(lhs, k);
    if rows >= crate::vnni::PANEL_ROWS && crate::vnni::available() {
        return crate::vnni::matmul(crate::vnni::Blocks::Q4_1, data, n, k, &xs, rows);
    }
    let row_bytes = k / BLOCK * BLOCK_BYTES;
    crate::by_column_tasks(n, rows, COLUMNS_PER_TASK, |first, out| {
        for (c, column_out) in out.chunks_exact_mut(rows).enumerate() {
            let weight = &data[(first + c) * row_bytes..(first + c + 1) * row_bytes];
            column_dot(weight, &xs, column_out);
        }
    })
}

/// One weight row against every activation row: `out[r] = w · x_r`.
fn column_dot(weight: &[u8], xs: &Activations, out: &mut [f32]) {
    let rows = xs.rows();
    let mut first = 0;
    while first < rows {
        let count = ROWS_PER_PASS.min(rows - first);
        let out = &mut out[first..first + count];
        #[cfg(target_arch = "x86_64")]
        if simd() {
            // SAFETY: the CPU has AVX2, FMA and F16C (`cpu::isa` never selects a level the
            // CPU lacks).
            unsafe {
                match count {
                    4 => avx2::dot::<4>(weight, xs, first, out),
                    3 => avx2::dot::<3>(weight, xs, first, out),
                    2 => avx2::dot::<2>(weight, xs, first, out),
                    _ => avx2::dot::<1>(weight, xs, first, out),
                }
            }
            first += count;
            continue;
        }
        scalar_dot(weight, xs, first, out);
        first += count;
    }
}

/// The same sums without SIMD (other CPUs, and the reference the kernel is tested against).
fn scalar_dot(weight: &[u8], xs: &Activations, first: usize, out: &mut [f32]) {
    let per_row = xs.blocks_per_row;
    for (r, out) in out.iter_mut().enumerate() {
        let row = first + r;
        let mut total = 0f32;
        let mut minimums = 0f32;
        for b in 0..per_row {
            let block = &weight[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
            let (d, m) = (f16_bits(block, 0), f16_bits(block, 2));
            let q = &xs.q[(row * per_row + b) * BLOCK..][..BLOCK];
            let mut sum = 0i32;
            for i in 0..16 {
                sum += i32::from(block[4 + i] & 0x0F) * i32::from(q[i]);
                sum += i32::from(block[4 + i] >> 4) * i32::from(q[16 + i]);
            }
            total += d * xs.d[row * per_row + b] * sum as f32;
            minimums += m * xs.s[row * per_row + b];
        }
        *out = total + minimums;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Activations, BLOCK, BLOCK_BYTES};

    /// `out[r] = w · x_{first + r}` for `R` rows: each weight block is unpacked once.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot<const R: usize>(
        weight: &[u8],
        xs: &Activations,
        first: usize,
        out: &mut [f32],
    ) {
        // SAFETY: the caller guarantees the CPU features; every index is within the
        // blocks of `weight` and of the activation rows `first..first + R` (asserted sizes).
        unsafe {
            let per_row = xs.blocks_per_row;
            let low_nibbles = _mm_set1_epi8(0x0F);
            let ones = _mm256_set1_epi16(1);
            let mut acc = [_mm256_setzero_ps(); R];
            let mut minimums = [0f32; R];
            for b in 0..per_row {
                let block = weight.as_ptr().add(b * BLOCK_BYTES);
                let scales =
                    _mm_cvtph_ps(_mm_cvtsi32_si128((block as *const i32).read_unaligned()));
                let d = _mm_cvtss_f32(scales);
                let m = _mm_cvtss_f32(_mm_shuffle_ps(scales, scales, 1));
                let packed = _mm_loadu_si128(block.add(4) as *const __m128i);
                let low = _mm_and_si128(packed, low_nibbles);
                let high = _mm_and_si128(_mm_srli_epi16(packed, 4), low_nibbles);
                let codes = _mm256_set_m128i(high, low);
                for r in 0..R {
                    let index = (first + r) * per_row + b;
                    let x = _mm256_loadu_si256(xs.q.as_ptr().add(index * BLOCK) as *const __m256i);
                    let pairs = _mm256_maddubs_epi16(codes, x);
                    let sums = _mm256_madd_epi16(pairs, ones);
                    let scale = _mm256_set1_ps(d * *xs.d.get_unchecked(index));
                    acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[r]);
                    minimums[r] += m * *xs.s.get_unchecked(index);
                }
            }
            for r in 0..R {
                let halves = _mm_add_ps(
                    _mm256_castps256_ps128(acc[r]),
                    _mm256_extractf128_ps(acc[r], 1),
                );
                let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
                let single = _mm_add_ss(pairs, _mm_movehdup_ps(pairs));
                out[r] = _mm_cvtss_f32(single) + minimums[r];
            }
        }
    }
}

/// The weights expanded to f32, `(n, k)` row-major, on the pool (a prefill's dense GEMM).
pub fn dequantize(data: &[u8], n: usize, k: usize) -> Vec<f32> {
    crate::expand_blocks::<BLOCK_BYTES>(data, n, k, |block, values| {
        let (low, high) = values.split_at_mut(16);
        let (d, m) = (f16_bits(block, 0), f16_bits(block, 2));
        for ((code, low), high) in block[4..].iter().zip(low).zip(high) {
            *low = MaybeUninit::new(d * f32::from(code & 0x0F) + m);
            *high = MaybeUninit::new(d * f32::from(code >> 4) + m);
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    /// `rows × cols` seeded values in [−1, 1) (the kernel tests' inputs).
    pub(crate) fn random(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..rows * cols)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn stored(n: usize, k: usize) -> (QTensor, Vec<u8>) {
        let weight = Tensor::from_vec(random(n, k, 7), (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&weight, GgmlDType::Q4_1).unwrap();
        let data = q.data().unwrap().to_vec();
        (q, data)
    }

    /// Every path's quantizer gives the plain loop's codes, scale and sum, bit for bit
    /// (ties included: values on exact halves of a code round away from zero).
    /// Expanding the blocks gives candle's own dequantization, bit for bit.
    #[test]
    fn dequantize_matches_candle() {
        let (q, data) = stored(70, 256);
        let ours = dequantize(&data, 70, 256);
        let theirs = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(ours, theirs);
    }

    /// The kernel (every row count of a pass, and more rows than one pass) equals the
    /// scalar sums, and both are the f32 product up to the activations' 8-bit rounding.
    #[test]
    fn kernel_matches_scalar_sums_and_the_f32_product() {
        for (n, k, rows) in [
            (70, 576, 1),
            (70, 576, 2),
            (70, 576, 3),
            (70, 576, 4),
            (70, 576, 7),
            // Enough blocks to quantize the activations on the pool; on AVX-512 VNNI
            // these run as int8 panels (a partial tile of 2 columns, partial row passes).
            (130, 1536, 9),
            (34, 576, 8),
            (50, 64, 21),
        ] {
            let (_, data) = stored(n, k);
            let dense = dequantize(&data, n, k);
            let lhs = random(rows, k, rows as u64);
            let ours = matmul(&data, n, k, &lhs, rows);
            let xs = Activations::quantize(&lhs, k);
            let row_bytes = k / BLOCK * BLOCK_BYTES;
            for c in 0..n {
                let mut scalar = vec![0f32; rows];
                scalar_dot(
                    &data[c * row_bytes..(c + 1) * row_bytes],
                    &xs,
                    0,
                    &mut scalar,
                );
                for r in 0..rows {
                    let got = ours[r * n + c];
                    assert!(
                        (got - scalar[r]).abs() <= 1e-4 * scalar[r].abs().max(1.0),
                        "rows {rows}, ({r}, {c}): kernel {got} vs scalar {}",
                        scalar[r]
                    );
                    let exact: f32 = (0..k).map(|i| lhs[r * k + i] * dense[c * k + i]).sum();
                    // 576 activations rounded to 1/254 of their block's range: an error
                    // of about 0.03 (one sigma) on these sums of size ~8.
                    assert!(
                        (got - exact).abs() <= 0.2 + 0.02 * exact.abs(),
                        "rows {rows}, ({r}, {c}): {got} vs f32 {exact}"
                    );
                }
            }
        }
    }
}
