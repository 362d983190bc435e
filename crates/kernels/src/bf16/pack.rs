//! Packing for [`super`]'s products: `A` in groups of [`MR`] rows and `B` in panels of
//! [`NR`] columns, the two values of each pair of `k` side by side, rounded to bf16 on the
//! way with the CPU's conversion instructions where it has them.

use rayon::prelude::*;

use super::{MR, NR, Operand, native, pair};

/// `A` as groups of [`MR`] rows, each pair of `k` as [`MR`] packed pairs (rows past `m`
/// and the `k` past an odd end are zeros), packed on `threads` cores.
pub(super) fn pack_a(
    a: Operand,
    m: usize,
    k: usize,
    groups: usize,
    pairs: usize,
    threads: usize,
) -> Vec<u32> {
    let mut packed = vec![0u32; groups * pairs * MR];
    // `converted`: one row's pairs, a buffer per task rather than per group.
    let fill = |converted: &mut Vec<u32>, (group, out): (usize, &mut [u32])| {
        let rows = MR.min(m - group * MR);
        let first = group * MR;
        // SAFETY: rows `first..first + rows` are below `m`, and `k` is `A`'s width.
        unsafe {
            if a.col_stride == 1 {
                // A row-major `A` (`x`, `dy`): each row's `k` converted as a run, then
                // dealt out to its pairs' slots.
                converted.resize(pairs, 0);
                for r in 0..rows {
                    let row = std::slice::from_raw_parts(a.row(first + r), k);
                    pairs_of_run(row, converted);
                    for (p, &value) in converted.iter().enumerate() {
                        out[p * MR + r] = value;
                    }
                }
            } else if a.row_stride == 1 {
                // A transposed `A` (`dyᵀ`): a group's rows lie side by side at each `k`.
                for p in 0..pairs {
                    let column =
                        |l: usize| std::slice::from_raw_parts(a.column(l).add(first), rows);
                    let second = (2 * p + 1 < k).then(|| column(2 * p + 1));
                    interleave(column(2 * p), second, &mut out[p * MR..p * MR + rows]);
                }
            } else {
                for r in 0..rows {
                    for p in 0..pairs {
                        out[p * MR + r] = pair(
                            a.at(first + r, 2 * p),
                            if 2 * p + 1 < k {
                                a.at(first + r, 2 * p + 1)
                            } else {
                                0.0
                            },
                        );
                    }
                }
            }
        }
    };
    if threads > 1 && groups > 1 {
        packed
            .par_chunks_mut(pairs * MR)
            .enumerate()
            .for_each_init(Vec::new, fill);
    } else {
        let mut converted = Vec::new();
        for chunk in packed.chunks_mut(pairs * MR).enumerate() {
            fill(&mut converted, chunk);
        }
    }
    packed
}

/// Columns `first..first + cols` of `B` as one panel: each pair of `k` as [`NR`] packed
/// pairs, columns past `cols` zeros.
///
/// # Safety
/// The columns are inside `B`, which has `k` rows.
pub(super) unsafe fn pack_b_panel(
    b: Operand,
    k: usize,
    first: usize,
    cols: usize,
    out: &mut [u32],
) {
    let pairs = k.div_ceil(2);
    if cols < NR {
        out.fill(0);
    }
    // SAFETY: columns `first..first + cols` and rows below `k` are inside `B`.
    unsafe {
        if b.col_stride == 1 {
            // A row-major `B` (`W`, `x`): two rows' columns interleaved at a time.
            for p in 0..pairs {
                let row = |l: usize| std::slice::from_raw_parts(b.row(l).add(first), cols);
                let second = (2 * p + 1 < k).then(|| row(2 * p + 1));
                interleave(row(2 * p), second, &mut out[p * NR..p * NR + cols]);
            }
        } else if b.row_stride == 1 {
            // A transposed `B` (`Wᵀ`): each column's `k` converted as a run, then dealt out.
            let mut converted = vec![0u32; pairs];
            for c in 0..cols {
                let column = std::slice::from_raw_parts(b.column(first + c), k);
                pairs_of_run(column, &mut converted);
                for (p, &value) in converted.iter().enumerate() {
                    out[p * NR + c] = value;
                }
            }
        } else {
            for p in 0..pairs {
                for c in 0..cols {
                    out[p * NR + c] = pair(
                        b.at(2 * p, first + c),
                        if 2 * p + 1 < k {
                            b.at(2 * p + 1, first + c)
                        } else {
                            0.0
                        },
                    );
                }
            }
        }
    }
}

/// `run` (consecutive values along `k`) as its packed pairs, the last one completed with a
/// zero when the run is odd.
fn pairs_of_run(run: &[f32], out: &mut [u32]) {
    assert_eq!(out.len(), run.len().div_ceil(2));
    let whole = run.len() / 2;
    #[cfg(target_arch = "x86_64")]
    if native() {
        // SAFETY: the CPU has AVX-512 BF16 ([`native`]).
        unsafe { x86::pairs_of_run(&run[..2 * whole], &mut out[..whole]) };
    } else {
        portable_pairs_of_run(&run[..2 * whole], &mut out[..whole]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    portable_pairs_of_run(&run[..2 * whole], &mut out[..whole]);
    if run.len() % 2 == 1 {
        out[whole] = pair(run[run.len() - 1], 0.0);
    }
}

fn portable_pairs_of_run(run: &[f32], out: &mut [u32]) {
    for (out, two) in out.iter_mut().zip(run.chunks_exact(2)) {
        *out = pair(two[0], two[1]);
    }
}

/// The pairs `(first[i], second[i])` (zeros for a missing `second`: an odd `k`'s end).
fn interleave(first: &[f32], second: Option<&[f32]>, out: &mut [u32]) {
    assert!(first.len() == out.len() && second.is_none_or(|s| s.len() == first.len()));
    #[cfg(target_arch = "x86_64")]
    if native() {
        // SAFETY: the CPU has AVX-512 BF16 ([`native`]).
        return unsafe { x86::interleave(first, second, out) };
    }
    portable_interleave(first, second, out);
}

fn portable_interleave(first: &[f32], second: Option<&[f32]>, out: &mut [u32]) {
    for (i, out) in out.iter_mut().enumerate() {
        *out = pair(first[i], second.map_or(0.0, |s| s[i]));
    }
}

/// The conversions on AVX-512 BF16: `vcvtne2ps2bf16` and `vcvtneps2bf16` round to nearest
/// even as [`to_bf16`] does (they flush denormal inputs to zero, which training's values
/// never are in any way that shows).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
    pub(super) fn pairs_of_run(run: &[f32], out: &mut [u32]) {
        let mut chunks = run.chunks_exact(32);
        let mut outs = out.chunks_exact_mut(16);
        for (run, out) in (&mut chunks).zip(&mut outs) {
            // SAFETY: 32 values read, 16 pairs written, inside the chunks.
            unsafe {
                let low = _mm512_loadu_ps(run.as_ptr());
                let high = _mm512_loadu_ps(run.as_ptr().add(16));
                // Lanes 0–15 from the second argument: the run in order, two per pair.
                let pairs = _mm512_cvtne2ps_pbh(high, low);
                _mm512_storeu_si512(
                    out.as_mut_ptr().cast(),
                    std::mem::transmute::<__m512bh, __m512i>(pairs),
                );
            }
        }
        super::portable_pairs_of_run(chunks.remainder(), outs.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
    pub(super) fn interleave(first: &[f32], second: Option<&[f32]>, out: &mut [u32]) {
        let whole = first.len() / 16 * 16;
        let mut i = 0;
        while i < whole {
            // SAFETY: `i + 16 ≤ len` for every slice.
            unsafe {
                let a = _mm512_cvtneps_pbh(_mm512_loadu_ps(first.as_ptr().add(i)));
                let a = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(a));
                let pairs = match second {
                    Some(second) => {
                        let b = _mm512_cvtneps_pbh(_mm512_loadu_ps(second.as_ptr().add(i)));
                        let b = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(b));
                        _mm512_or_si512(a, _mm512_slli_epi32::<16>(b))
                    }
                    None => a,
                };
                _mm512_storeu_si512(out.as_mut_ptr().add(i).cast(), pairs);
            }
            i += 16;
        }
        // A group of `A`'s rows is 8 wide: half a vector.
        if first.len() - i >= 8 {
            // SAFETY: `i + 8 ≤ len` for every slice.
            unsafe {
                let a = _mm256_cvtneps_pbh(_mm256_loadu_ps(first.as_ptr().add(i)));
                let a = _mm256_cvtepu16_epi32(std::mem::transmute::<__m128bh, __m128i>(a));
                let pairs = match second {
                    Some(second) => {
                        let b = _mm256_cvtneps_pbh(_mm256_loadu_ps(second.as_ptr().add(i)));
                        let b = _mm256_cvtepu16_epi32(std::mem::transmute::<__m128bh, __m128i>(b));
                        _mm256_or_si256(a, _mm256_slli_epi32::<16>(b))
                    }
                    None => a,
                };
                _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), pairs);
            }
            i += 8;
        }
        super::portable_interleave(&first[i..], second.map(|s| &s[i..]), &mut out[i..]);
    }
}
