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
                for (j, score) in scores.iter_mut().enumerate() {
                    if !mask_row.is_some_and(|m| m[j] == f32::NEG_INFINITY) {
                        *score = (*score * scale / cap).tanh() * cap;
                    }
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

/// `scores[j] = query · key(j)`, 0 where the mask row has −∞: a masked key (the padding
/// before a short prompt, all but itself for a finished row) needs no dot product, the
/// mask's −∞ decides its score. On AVX2, eight keys at a time with the same sums in the
/// same order as [`dot`] (so the same bits): a call per key, 8-lane sums in half-width
/// registers and a horizontal sum each were 5 % of the demo's time.
fn score_keys<'a>(
    level: crate::cpu::Isa,
    query: &[f32],
    key: impl Fn(usize) -> &'a [f32],
    mask_row: Option<&[f32]>,
    scores: &mut [f32],
) {
    let masked = |j: usize| mask_row.is_some_and(|m| m[j] == f32::NEG_INFINITY);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx2 && query.len().is_multiple_of(8) {
        while j + 8 <= scores.len() {
            if !(j..j + 8).all(masked) {
                let keys: [&[f32]; 8] = std::array::from_fn(|i| key(j + i));
                // SAFETY: `cpu::isa` never selects a level the CPU lacks; the keys are
                // `query.len()` long (cache rows of `head_dim`).
                unsafe { avx2::dot8(query, &keys, &mut scores[j..j + 8]) };
            }
            j += 8;
        }
    }
    let _ = level;
    for (j, score) in scores.iter_mut().enumerate().skip(j) {
        if !masked(j) {
            *score = dot(query, key(j));
        }
    }
    for (j, score) in scores.iter_mut().enumerate() {
        if masked(j) {
            *score = 0.0;
        }
    }
}

/// `output += Σⱼ probs[j] · value(j)` over the keys of nonzero probability, each element's
/// terms added in key order (the same bits on every path).
fn weigh_values<'a>(
    level: crate::cpu::Isa,
    probs: &[f32],
    value: impl Fn(usize) -> &'a [f32],
    output: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx2 && output.len().is_multiple_of(32) {
        // SAFETY: as in `score_keys`; the value rows are `output.len()` long.
        unsafe { avx2::weigh_values(probs, value, output) };
        return;
    }
    let _ = level;
    for (j, &p) in probs.iter().enumerate() {
        if p == 0.0 {
            continue;
        }
        for (o, &x) in output.iter_mut().zip(value(j)) {
            *o += p * x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// `out[i] = query · keys[i]` for 8 keys: per key the 8 running sums of [`super::dot`]
    /// (lane `l` sums the products of elements `l`, `l + 8`, …, multiplied then added, in
    /// order), then added lane 0 to 7 in order, the 8 keys at once after a transpose.
    ///
    /// # Safety
    /// The CPU must support AVX2; `query.len()` must be a multiple of 8 and every key at
    /// least as long.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot8(query: &[f32], keys: &[&[f32]; 8], out: &mut [f32]) {
        // SAFETY: the loads stay within `query` and each key (the caller's contract), the
        // store within `out` (8 values).
        unsafe {
            let mut sums = [_mm256_setzero_ps(); 8];
            for at in (0..query.len()).step_by(8) {
                let q = _mm256_loadu_ps(query.as_ptr().add(at));
                for (sum, key) in sums.iter_mut().zip(keys) {
                    let k = _mm256_loadu_ps(key.as_ptr().add(at));
                    *sum = _mm256_add_ps(*sum, _mm256_mul_ps(q, k));
                }
            }
            // Transpose: lane `i` of `lanes[l]` is lane `l` of key `i`'s sums.
            let [r0, r1, r2, r3, r4, r5, r6, r7] = sums;
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let lanes = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            let mut total = lanes[0];
            for lane in &lanes[1..] {
                total = _mm256_add_ps(total, *lane);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), total);
        }
    }

    /// [`super::weigh_values`] 32 elements at a time, their sums in registers across the
    /// keys.
    ///
    /// # Safety
    /// The CPU must support AVX2; `output.len()` must be a multiple of 32 and every value
    /// row at least as long.
    #[target_feature(enable = "avx2")]
    pub unsafe fn weigh_values<'a>(
        probs: &[f32],
        value: impl Fn(usize) -> &'a [f32],
        output: &mut [f32],
    ) {
        // SAFETY: the loads and stores stay within `output` and each value row (the
        // caller's contract).
        unsafe {
            for at in (0..output.len()).step_by(32) {
                let out = output.as_mut_ptr().add(at);
                let mut sums: [__m256; 4] =
                    std::array::from_fn(|i| _mm256_loadu_ps(out.add(8 * i)));
                for (j, &p) in probs.iter().enumerate() {
                    if p == 0.0 {
                        continue;
                    }
                    let weight = _mm256_set1_ps(p);
                    let row = value(j).as_ptr().add(at);
                    for (i, sum) in sums.iter_mut().enumerate() {
                        let x = _mm256_loadu_ps(row.add(8 * i));
                        *sum = _mm256_add_ps(*sum, _mm256_mul_ps(weight, x));
                    }
                }
                for (i, sum) in sums.iter().enumerate() {
                    _mm256_storeu_ps(out.add(8 * i), *sum);
                }
            }
        }
    }
}

/// Eight running sums so that the compiler keeps them in one vector register.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; 8];
    let (a_blocks, a_rest) = a.split_at(a.len() / 8 * 8);
    let (b_blocks, b_rest) = b.split_at(a_blocks.len());
    for (x, y) in a_blocks.chunks_exact(8).zip(b_blocks.chunks_exact(8)) {
        for i in 0..8 {
            sums[i] += x[i] * y[i];
        }
    }
    let mut total: f32 = sums.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        total += x * y;
    }
    total
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
    /// head sizes of SmolLM2 (64) and Gemma 3 (256), with and without a soft-cap.
    #[test]
    fn the_avx2_decoding_path_gives_the_plain_bits() {
        use crate::cpu::Isa;
        if !Isa::runnable().contains(&Isa::Avx2) {
            eprintln!("this CPU has no AVX2: the plain loops are the only path");
            return;
        }
        for (heads, kv_heads, tq, tk, head_dim) in [(9, 3, 1, 45, 64), (4, 1, 2, 21, 256)] {
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
