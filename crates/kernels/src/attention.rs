//! Attention for a few new tokens per sequence (decoding), read straight from a KV cache:
//! one pass per (sequence, head) computes the scores, the masked softmax and the weighted
//! values.
//!
//! Why: through candle, each decoding step's attention was two batched matmuls (a gemm
//! call per head, each asking the OS for the CPU count and waking the thread pool for a
//! 3 × 64 by 64 × 300 product), a scale, a mask add and a softmax: a fifth of the time of
//! a SmolLM2-135M decoding step went there. The work itself is a few hundred thousand
//! multiply-adds, which one core does in tens of microseconds.

use rayon::prelude::*;

use crate::decode_products::{score_keys, weigh_values};

/// Multiply-adds from which the heads are spread over the pool (a 30-layer model at
/// 100k per layer wakes it 30 times per token for ~20 µs of work each: not worth it).
const PARALLEL_WORK: usize = 128 * 1024;

/// Sizes of one attention call: `batch` sequences, `heads` query heads sharing
/// `kv_heads` key/value heads, `queries` new tokens against `keys` cached positions.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub queries: usize,
    pub keys: usize,
    pub head_dim: usize,
}

/// A `(batch, kv_heads, positions, head_dim)` view over a cache buffer: the element at
/// `(b, h, j, 0)` is `values[start + b·strides[0] + h·strides[1] + j·strides[2]]`, and
/// each row of `head_dim` values is dense.
#[derive(Clone, Copy, Debug)]
pub struct CacheView<'a> {
    pub values: &'a [f32],
    pub start: usize,
    pub strides: [usize; 3],
}

impl CacheView<'_> {
    #[inline]
    fn row(&self, b: usize, kv_head: usize, position: usize, head_dim: usize) -> &[f32] {
        let at = self.start
            + b * self.strides[0]
            + kv_head * self.strides[1]
            + position * self.strides[2];
        &self.values[at..at + head_dim]
    }
}

/// An additive mask, dense `(batch, rows, keys)`: `rows` is either `queries` (one row per
/// new token, shared by the heads) or `heads / kv_heads · queries` (grouped rows).
#[derive(Clone, Copy, Debug)]
pub struct Mask<'a> {
    pub values: &'a [f32],
    pub rows: usize,
}

/// `softmax(q kᵀ · scale [soft-capped] + mask) v` for dense `queries`
/// `(batch, heads, queries, head_dim)`; returns `(batch, heads, queries, head_dim)`.
pub fn decode(
    shape: Shape,
    queries: &[f32],
    keys: CacheView<'_>,
    values: CacheView<'_>,
    mask: Option<Mask<'_>>,
    scale: f32,
    softcap: Option<f32>,
) -> Vec<f32> {
    let level = crate::cpu::isa();
    decode_on(level, shape, queries, keys, values, mask, scale, softcap)
}

/// [`decode`] on the instruction set `level` (tests compare the paths).
#[allow(clippy::too_many_arguments)]
fn decode_on(
    level: crate::cpu::Isa,
    shape: Shape,
    queries: &[f32],
    keys: CacheView<'_>,
    values: CacheView<'_>,
    mask: Option<Mask<'_>>,
    scale: f32,
    softcap: Option<f32>,
) -> Vec<f32> {
    let Shape {
        batch,
        heads,
        kv_heads,
        queries: tq,
        keys: tk,
        head_dim,
    } = shape;
    let group = heads / kv_heads;
    let mut out = vec![0f32; batch * heads * tq * head_dim];
    let head = |(index, output): (usize, &mut [f32])| {
        let (b, h) = (index / heads, index % heads);
        let kv = h / group;
        let mut scores = vec![0f32; tk];
        let mut probs = vec![0f32; tk];
        for (t, output) in output.chunks_exact_mut(head_dim).enumerate() {
            let query = &queries[((b * heads + h) * tq + t) * head_dim..][..head_dim];
            let mask_row = mask.map(|m| {
                let row = if m.rows == tq {
                    t
                } else {
                    (h % group) * tq + t
                };
                &m.values[(b * m.rows + row) * tk..][..tk]
            });
            score_keys(
                level,
                query,
                |j| keys.row(b, kv, j, head_dim),
                mask_row,
                &mut scores,
            );
            if let Some(cap) = softcap {
                // A masked key's 0 stays 0 (tanh(0) = 0); its −∞ comes with the mask.
                for score in scores.iter_mut() {
                    *score = (*score * scale / cap).tanh() * cap;
                }
            }
            // Scale, mask and softmax in one pass, vectorized where the CPU allows (libm's
            // `expf` once per key was a third of this kernel's time).
            let scale = if softcap.is_some() { 1.0 } else { scale };
            softmax_row(level, &scores, scale, mask_row, &mut probs);
            weigh_values(level, &probs, |j| values.row(b, kv, j, head_dim), output);
        }
    };
    // One task per (sequence, head); on the pool only when there is enough work to pay
    // for waking it (long caches), since decoding steps come by thousands.
    let per_head = tq * head_dim;
    if batch * heads * tq * tk * head_dim >= PARALLEL_WORK {
        out.par_chunks_mut(per_head).enumerate().for_each(head);
    } else {
        out.chunks_mut(per_head).enumerate().for_each(head);
    }
    out
}

/// The additive mask of [`masked_softmax`]'s score rows: `(batch, rows_per_batch, keys)`
/// dense, shared by the `heads` blocks of each batch entry.
#[derive(Clone, Copy, Debug)]
pub struct RowMask<'a> {
    pub values: &'a [f32],
    /// Score rows per (batch entry, head): the mask has this many rows per batch entry.
    pub rows_per_head: usize,
    /// Heads per batch entry in the scores, `(batch, heads, rows_per_head, keys)`.
    pub heads: usize,
}

/// Score rows handed to one rayon task.
const SOFTMAX_ROWS_PER_TASK: usize = 64;

/// `softmax(scores · scale + mask)` over each row of `keys` values, written to `out`: the
/// scale, the mask and candle's three softmax passes (max, `exp(x − max)` with their sum,
/// division by the sum) in one call, the exponential in AVX-512 registers where the CPU has
/// them (Cephes' polynomial, within 2 ulp of libm; a masked `−∞` gives exactly 0 as libm's
/// does). Why: a prefill's attention probabilities through candle were a scale pass, a mask
/// pass and a softmax with one libm `expf` call per value, a tenth of SmolLM2's prefill time.
/// Below AVX-512 the same passes run on plain loops with libm's `expf`.
pub fn masked_softmax(
    scores: &[f32],
    keys: usize,
    scale: f32,
    mask: Option<RowMask<'_>>,
    out: &mut [f32],
) {
    assert_eq!(
        scores.len(),
        out.len(),
        "scores and probabilities differ in size"
    );
    assert!(
        keys > 0 && scores.len().is_multiple_of(keys),
        "rows of {keys} keys"
    );
    let level = crate::cpu::isa();
    let mask_row = |row: usize| {
        mask.map(|m| {
            let per_batch = m.heads * m.rows_per_head;
            let (b, r) = (row / per_batch, row % m.rows_per_head);
            &m.values[(b * m.rows_per_head + r) * keys..][..keys]
        })
    };
    let run = |first_row: usize, scores: &[f32], out: &mut [f32]| {
        for (i, (row, out)) in scores
            .chunks_exact(keys)
            .zip(out.chunks_exact_mut(keys))
            .enumerate()
        {
            softmax_row(level, row, scale, mask_row(first_row + i), out);
        }
    };
    let chunk = SOFTMAX_ROWS_PER_TASK * keys;
    if scores.len() > chunk {
        scores
            .par_chunks(chunk)
            .zip(out.par_chunks_mut(chunk))
            .enumerate()
            .for_each(|(task, (scores, out))| run(task * SOFTMAX_ROWS_PER_TASK, scores, out));
    } else {
        run(0, scores, out);
    }
}

/// `softmax(scale · row)` into `out` (as long as `row`): one row of [`masked_softmax`]
/// without a mask, for callers that hand it only the keys a query sees (a causal row's
/// first keys), with the same values as the masked row has there.
pub fn softmax(row: &[f32], scale: f32, out: &mut [f32]) {
    assert_eq!(
        row.len(),
        out.len(),
        "scores and probabilities differ in size"
    );
    softmax_row(crate::cpu::isa(), row, scale, None, out);
}

fn softmax_row(
    level: crate::cpu::Isa,
    row: &[f32],
    scale: f32,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx512 {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        unsafe { avx512::softmax_row(row, scale, mask, out) };
        return;
    }
    let _ = level;
    softmax_row_plain(row, scale, mask, out);
}

fn softmax_row_plain(row: &[f32], scale: f32, mask: Option<&[f32]>, out: &mut [f32]) {
    let mut max = f32::NEG_INFINITY;
    for (j, (o, &s)) in out.iter_mut().zip(row).enumerate() {
        *o = s * scale + mask.map_or(0.0, |m| m[j]);
        max = max.max(*o);
    }
    let mut total = 0f32;
    for o in out.iter_mut() {
        *o = (*o - max).exp();
        total += *o;
    }
    for o in out.iter_mut() {
        *o /= total;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use crate::activation::avx512::exp;

    /// # Safety
    /// The CPU must support AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn softmax_row(row: &[f32], scale: f32, mask: Option<&[f32]>, out: &mut [f32]) {
        let n = out.len();
        let whole = n / 16 * 16;
        let tail: __mmask16 = ((1u32 << (n - whole)) - 1) as __mmask16;
        let scale = _mm512_set1_ps(scale);
        let minus_infinity = _mm512_set1_ps(f32::NEG_INFINITY);
        // SAFETY: every access is within `row`, `mask` and `out` (all `n` long): whole
        // vectors below `whole`, the masked tail above it.
        unsafe {
            let load = |values: *const f32, at: usize, lanes: __mmask16| {
                _mm512_mask_loadu_ps(minus_infinity, lanes, values.add(at))
            };
            let mut max = minus_infinity;
            let mut at = 0;
            while at < n {
                let lanes = if at < whole { !0 } else { tail };
                let mut s = _mm512_mul_ps(load(row.as_ptr(), at, lanes), scale);
                if let Some(mask) = mask {
                    s = _mm512_add_ps(s, load(mask.as_ptr(), at, lanes));
                }
                let s = _mm512_mask_mov_ps(minus_infinity, lanes, s);
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), lanes, s);
                max = _mm512_max_ps(max, s);
                at += 16;
            }
            let max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
            let mut total = _mm512_setzero_ps();
            let mut at = 0;
            while at < n {
                let lanes = if at < whole { !0 } else { tail };
                let s = load(out.as_ptr(), at, lanes);
                // exp(−∞) is 0 (the polynomial would clamp it to a denormal).
                let finite = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(s, minus_infinity) & lanes;
                let e = _mm512_maskz_mov_ps(finite, exp(_mm512_sub_ps(s, max)));
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), lanes, e);
                total = _mm512_add_ps(total, e);
                at += 16;
            }
            let total = _mm512_set1_ps(_mm512_reduce_add_ps(total));
            let mut at = 0;
            while at < n {
                let lanes = if at < whole { !0 } else { tail };
                let e = _mm512_maskz_loadu_ps(lanes, out.as_ptr().add(at));
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), lanes, _mm512_div_ps(e, total));
                at += 16;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path against the plain passes in f64 on rows with masked (−∞) slots, a row
    /// length that is not a multiple of 16, grouped mask rows and large scores: within a
    /// few ulp of the probabilities, exactly 0 where masked, rows summing to 1.
    #[test]
    fn masked_softmax_matches_the_plain_passes_on_every_path() {
        let (batch, heads, rows_per_head, keys) = (2, 3, 5, 37);
        let rows = batch * heads * rows_per_head;
        let scores: Vec<f32> = (0..rows * keys)
            .map(|i| ((i * 7919) % 2003) as f32 / 2003.0 * 60.0 - 30.0)
            .collect();
        let mask: Vec<f32> = (0..batch * rows_per_head * keys)
            .map(|i| {
                if (i % keys) > 3 && i % 7 == 0 {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let mask_at = |row: usize, j: usize| {
            let (b, r) = (row / (heads * rows_per_head), row % rows_per_head);
            mask[(b * rows_per_head + r) * keys + j]
        };
        for level in crate::cpu::Isa::runnable() {
            let mut out = vec![0f32; rows * keys];
            for (row, (s, o)) in scores
                .chunks_exact(keys)
                .zip(out.chunks_exact_mut(keys))
                .enumerate()
            {
                let m: Vec<f32> = (0..keys).map(|j| mask_at(row, j)).collect();
                softmax_row(level, s, 0.125, Some(&m), o);
            }
            for (row, (s, o)) in scores
                .chunks_exact(keys)
                .zip(out.chunks_exact(keys))
                .enumerate()
            {
                let z: Vec<f64> = (0..keys)
                    .map(|j| s[j] as f64 * 0.125 + mask_at(row, j) as f64)
                    .collect();
                let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = z.iter().map(|v| (v - max).exp()).sum();
                for j in 0..keys {
                    let expected = (z[j] - max).exp() / total;
                    if z[j] == f64::NEG_INFINITY {
                        assert_eq!(o[j], 0.0, "{} row {row} key {j}", level.name());
                    } else {
                        assert!(
                            ((o[j] as f64) - expected).abs() <= 1e-6 * expected.max(1e-30) + 1e-12,
                            "{} row {row} key {j}: {} vs {expected}",
                            level.name(),
                            o[j]
                        );
                    }
                }
                let sum: f32 = o.iter().sum();
                assert!(
                    (sum - 1.0).abs() < 1e-5,
                    "{} row {row} sums to {sum}",
                    level.name()
                );
            }
        }
        // The parallel entry point applies the mask rows of each batch entry to its heads.
        let mut whole = vec![0f32; rows * keys];
        let row_mask = RowMask {
            values: &mask,
            rows_per_head,
            heads,
        };
        masked_softmax(&scores, keys, 0.125, Some(row_mask), &mut whole);
        let mut one_by_one = vec![0f32; rows * keys];
        for (row, (s, o)) in scores
            .chunks_exact(keys)
            .zip(one_by_one.chunks_exact_mut(keys))
            .enumerate()
        {
            let m: Vec<f32> = (0..keys).map(|j| mask_at(row, j)).collect();
            softmax_row(crate::cpu::isa(), s, 0.125, Some(&m), o);
        }
        assert_eq!(whole, one_by_one);
    }

    /// One head, two cached positions, no mask: the textbook softmax-weighted average,
    /// and a -inf mask slot removes its position entirely.
    #[test]
    fn weights_values_by_softmax_of_scores() {
        let shape = Shape {
            batch: 1,
            heads: 1,
            kv_heads: 1,
            queries: 1,
            keys: 2,
            head_dim: 2,
        };
        let keys = [1.0, 0.0, 0.0, 1.0];
        let values = [10.0, 0.0, 0.0, 20.0];
        fn view(values: &[f32]) -> CacheView<'_> {
            CacheView {
                values,
                start: 0,
                strides: [4, 4, 2],
            }
        }
        let out = decode(
            shape,
            &[2.0, 0.0],
            view(&keys),
            view(&values),
            None,
            1.0,
            None,
        );
        let (w0, w1) = (2f32.exp() / (2f32.exp() + 1.0), 1.0 / (2f32.exp() + 1.0));
        assert!((out[0] - 10.0 * w0).abs() < 1e-5 && (out[1] - 20.0 * w1).abs() < 1e-5);
        let mask = Mask {
            values: &[0.0, f32::NEG_INFINITY],
            rows: 1,
        };
        let out = decode(
            shape,
            &[2.0, 0.0],
            view(&keys),
            view(&values),
            Some(mask),
            1.0,
            None,
        );
        assert_eq!(out, vec![10.0, 0.0]);
    }

    /// The AVX2 scores (8 keys at once) and weighted values give the plain loops' bits:
    /// grouped heads, a cache wider than the keys, masked keys (a whole block of 8 among
    /// them, the padding of a short prompt), a key count that is not a multiple of 8, and
    /// head sizes of SmolLM2 (64), Gemma 3 (256) and one of 32s but not 64s (96), with and
    /// without a soft-cap.
    #[test]
    fn the_avx2_decoding_path_gives_the_plain_bits() {
        use crate::cpu::Isa;
        if !Isa::runnable().contains(&Isa::Avx2) {
            eprintln!("this CPU has no AVX2: the plain loops are the only path");
            return;
        }
        for (heads, kv_heads, tq, tk, head_dim) in
            [(9, 3, 1, 45, 64), (4, 1, 2, 21, 256), (2, 2, 1, 19, 96)]
        {
            let batch = 2;
            let capacity = tk + 3;
            let random = |n: usize, seed: usize| -> Vec<f32> {
                (0..n)
                    .map(|i| (((i + seed) * 7919 % 2003) as f32 / 2003.0 - 0.5) * 3.0)
                    .collect()
            };
            let queries = random(batch * heads * tq * head_dim, 1);
            let cache_keys = random(batch * kv_heads * capacity * head_dim, 2);
            let cache_values = random(batch * kv_heads * capacity * head_dim, 3);
            let view = |values| CacheView {
                values,
                start: head_dim,
                strides: [
                    kv_heads * capacity * head_dim,
                    capacity * head_dim,
                    head_dim,
                ],
            };
            // Sequence 0 padded over its first 11 keys; sequence 1 sees all but key 17.
            let mask: Vec<f32> = (0..batch * tq * tk)
                .map(|i| {
                    let (b, j) = (i / (tq * tk), i % tk);
                    if (b == 0 && j < 11) || (b == 1 && j == 17) {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
                .collect();
            let shape = Shape {
                batch,
                heads,
                kv_heads,
                queries: tq,
                keys: tk,
                head_dim,
            };
            for softcap in [None, Some(4.0)] {
                let run = |level| {
                    decode_on(
                        level,
                        shape,
                        &queries,
                        view(&cache_keys[..]),
                        view(&cache_values[..]),
                        Some(Mask {
                            values: &mask,
                            rows: tq,
                        }),
                        0.125,
                        softcap,
                    )
                };
                let (plain, avx2) = (run(Isa::Portable), run(Isa::Avx2));
                let differing = plain
                    .iter()
                    .zip(&avx2)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(differing, 0, "head_dim {head_dim} softcap {softcap:?}");
            }
        }
    }
}
