//! Attention for a prompt's rows (prefill) on AVX-512, read straight from a KV cache: per
//! (sequence, head), blocks of query rows against the keys they may see, softmax and the
//! weighted values in one pass, without the masked keys past each block's last visible one.
//!
//! Why: through candle a prefill's attention was two batched GEMMs per layer around the
//! softmax. Their products are small (a head's `tq × 64` by `64 × tk`), so the GEMM's
//! packing and dispatch weighed as much as the arithmetic, and half of each causal product
//! is masked away: together about a tenth of SmolLM2's prefill time on AVX-512. Here the
//! keys of a head are transposed once, scores come from a 4-row by 32-key register block,
//! and a block of rows stops at the last key any of them sees (the causal mask's
//! upper triangle is never computed). Masked keys inside the range get exactly 0 from the
//! softmax, as before. Below AVX-512 the engine keeps candle's passes (unchanged numbers).

use rayon::prelude::*;

use crate::attention::{CacheView, Mask, Shape};

/// Query rows per register block.
const ROWS: usize = 4;

/// Whether [`prefill`] runs on this CPU (the path [`crate::cpu::isa`] selected) for heads
/// of `head_dim` values.
pub fn available(head_dim: usize) -> bool {
    crate::cpu::isa() >= crate::cpu::Isa::Avx512 && head_dim.is_multiple_of(16)
}

/// `softmax(q kᵀ · scale + mask) v` for dense `queries` `(batch, heads, queries,
/// head_dim)` against cache views of `keys` and `values`; returns `(batch, heads, queries,
/// head_dim)`. A mask value of `−∞` hides a key; the keys past the last visible one of a
/// block of rows are skipped. Callers check [`available`].
pub fn prefill(
    shape: Shape,
    queries: &[f32],
    keys: CacheView<'_>,
    values: CacheView<'_>,
    mask: Option<Mask<'_>>,
    scale: f32,
) -> Vec<f32> {
    assert!(
        available(shape.head_dim),
        "prefill attention needs AVX-512 and heads of a multiple of 16 values"
    );
    let Shape {
        batch,
        heads,
        kv_heads,
        queries: tq,
        keys: tk,
        head_dim,
    } = shape;
    assert_eq!(queries.len(), batch * heads * tq * head_dim, "query size");
    let group = heads / kv_heads;
    let mut out = vec![0f32; batch * heads * tq * head_dim];
    out.par_chunks_mut(tq * head_dim)
        .enumerate()
        .for_each(|(index, out)| {
            let (b, h) = (index / heads, index % heads);
            let kv = h / group;
            let queries = &queries[index * tq * head_dim..][..tq * head_dim];
            let mask_rows = mask.map(|m| {
                let first = if m.rows == tq { 0 } else { (h % group) * tq };
                &m.values[(b * m.rows + first) * tk..][..tq * tk]
            });
            SCRATCH.with_borrow_mut(|scratch| {
                // SAFETY: `available` was asserted; the views hold `tk` rows of `head_dim`
                // values for (b, kv), `queries`, `mask_rows` and `out` hold `tq` rows.
                unsafe {
                    avx512::head(
                        scratch,
                        queries,
                        |j| keys.row(b, kv, j, head_dim),
                        |j| values.row(b, kv, j, head_dim),
                        mask_rows,
                        tk,
                        head_dim,
                        scale,
                        out,
                    )
                }
            });
        });
    out
}

/// Each pool thread's buffers, reused from call to call (a prefill makes one per layer).
#[derive(Default)]
struct Scratch {
    /// The head's keys transposed, `(head_dim, padded keys)`.
    keys_t: Vec<f32>,
    /// A block's scores, then probabilities, `(ROWS, padded keys)`.
    scores: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// One past the last key a mask row leaves visible (0 when it hides every key).
fn visible_keys(mask_row: &[f32]) -> usize {
    mask_row
        .iter()
        .rposition(|&m| m != f32::NEG_INFINITY)
        .map_or(0, |last| last + 1)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{ROWS, Scratch, visible_keys};

    /// One (sequence, head): `queries` and `out` hold its `tq` rows, `mask_rows` its
    /// `tq × tk` mask.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F; `head_dim` is a multiple of 16, `key(j)` and
    /// `value(j)` return `head_dim` values for every `j < tk`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn head<'a>(
        scratch: &mut Scratch,
        queries: &[f32],
        key: impl Fn(usize) -> &'a [f32],
        value: impl Fn(usize) -> &'a [f32],
        mask_rows: Option<&[f32]>,
        tk: usize,
        head_dim: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let tq = queries.len() / head_dim;
        let padded = tk.div_ceil(32) * 32;
        scratch.keys_t.clear();
        scratch.keys_t.resize(head_dim * padded, 0.0);
        for j in 0..tk {
            for (i, &x) in key(j).iter().enumerate() {
                scratch.keys_t[i * padded + j] = x;
            }
        }
        scratch.scores.resize(ROWS * padded, 0.0);
        let mut first = 0;
        while first < tq {
            let rows = ROWS.min(tq - first);
            let seen = match mask_rows {
                Some(mask) => (first..first + rows)
                    .map(|t| visible_keys(&mask[t * tk..(t + 1) * tk]))
                    .max()
                    .unwrap_or(0),
                None => tk,
            };
            let out = &mut out[first * head_dim..(first + rows) * head_dim];
            if seen == 0 {
                // Every key hidden: candle's softmax gives NaN rows; no sequence reads
                // them (padding rows), so zeros do as well.
                out.fill(0.0);
                first += rows;
                continue;
            }
            // SAFETY: forwarded; the block's rows exist and `seen ≤ tk ≤ padded`.
            unsafe {
                scores(
                    &queries[first * head_dim..(first + rows) * head_dim],
                    &scratch.keys_t,
                    padded,
                    seen,
                    head_dim,
                    &mut scratch.scores,
                );
            }
            for r in 0..rows {
                let row = &mut scratch.scores[r * padded..r * padded + seen];
                let mask = mask_rows.map(|m| &m[(first + r) * tk..(first + r) * tk + seen]);
                // SAFETY: AVX-512 F (the caller's contract); in place: each value is read
                // before it is written in every pass.
                unsafe { softmax_in_place(row, scale, mask) };
            }
            // SAFETY: as above.
            unsafe { weighted_values(&scratch.scores, padded, rows, seen, &value, head_dim, out) };
            first += rows;
        }
    }

    /// `scores[r][j] = q_r · k_j` for the block's rows and keys `0..seen` (rounded up to 32;
    /// the padding columns of `keys_t` are zero).
    ///
    /// # Safety
    /// AVX-512 F; `keys_t` is `(head_dim, padded)` with `padded` a multiple of 32 ≥ `seen`.
    #[target_feature(enable = "avx512f")]
    unsafe fn scores(
        queries: &[f32],
        keys_t: &[f32],
        padded: usize,
        seen: usize,
        head_dim: usize,
        scores: &mut [f32],
    ) {
        let rows = queries.len() / head_dim;
        // SAFETY: every load is within `keys_t` (`i < head_dim`, `j + 32 ≤ padded`) or the
        // block's query rows; every store within `scores` (`rows × padded`).
        unsafe {
            let kt = keys_t.as_ptr();
            let mut j = 0;
            while j < seen {
                let mut acc = [[_mm512_setzero_ps(); 2]; ROWS];
                for i in 0..head_dim {
                    let k0 = _mm512_loadu_ps(kt.add(i * padded + j));
                    let k1 = _mm512_loadu_ps(kt.add(i * padded + j + 16));
                    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
                        let x = _mm512_set1_ps(*queries.get_unchecked(r * head_dim + i));
                        acc[0] = _mm512_fmadd_ps(x, k0, acc[0]);
                        acc[1] = _mm512_fmadd_ps(x, k1, acc[1]);
                    }
                }
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    let at = scores.as_mut_ptr().add(r * padded + j);
                    _mm512_storeu_ps(at, acc[0]);
                    _mm512_storeu_ps(at.add(16), acc[1]);
                }
                j += 32;
            }
        }
    }

    /// `row ← softmax(row · scale + mask)`, the exponential as in
    /// [`crate::attention::masked_softmax`] (a hidden key gives exactly 0).
    ///
    /// # Safety
    /// AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn softmax_in_place(row: &mut [f32], scale: f32, mask: Option<&[f32]>) {
        let scores: *const f32 = row.as_ptr();
        let n = row.len();
        // SAFETY: `softmax_row` reads value `i` of its input before it writes value `i`
        // of its output in each pass, so the same buffer may be both.
        unsafe {
            crate::attention::avx512::softmax_row(
                std::slice::from_raw_parts(scores, n),
                scale,
                mask,
                row,
            )
        }
    }

    /// `out[r] = Σ_j p[r][j] · v_j` over keys `0..seen`, 64 values of the head at a time.
    ///
    /// # Safety
    /// AVX-512 F; `probs` holds `rows × padded` values, `value(j)` `head_dim` values
    /// (a multiple of 16) for `j < seen`, `out` `rows × head_dim`.
    #[target_feature(enable = "avx512f")]
    unsafe fn weighted_values<'a>(
        probs: &[f32],
        padded: usize,
        rows: usize,
        seen: usize,
        value: &impl Fn(usize) -> &'a [f32],
        head_dim: usize,
        out: &mut [f32],
    ) {
        const VECTORS: usize = 4;
        // SAFETY: loads within each value row (`d + 16·v < head_dim`) and `probs`; stores
        // within `out`.
        unsafe {
            let mut d = 0;
            while d < head_dim {
                let vectors = VECTORS.min((head_dim - d) / 16);
                let mut acc = [[_mm512_setzero_ps(); VECTORS]; ROWS];
                for j in 0..seen {
                    let v = value(j).as_ptr().add(d);
                    let mut loaded = [_mm512_setzero_ps(); VECTORS];
                    for (x, lane) in loaded.iter_mut().enumerate().take(vectors) {
                        *lane = _mm512_loadu_ps(v.add(16 * x));
                    }
                    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
                        let p = *probs.get_unchecked(r * padded + j);
                        if p == 0.0 {
                            continue;
                        }
                        let p = _mm512_set1_ps(p);
                        for (a, &x) in acc.iter_mut().zip(&loaded).take(vectors) {
                            *a = _mm512_fmadd_ps(p, x, *a);
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate().take(rows) {
                    for (x, a) in acc.iter().enumerate().take(vectors) {
                        _mm512_storeu_ps(out.as_mut_ptr().add(r * head_dim + d + 16 * x), *a);
                    }
                }
                d += 16 * vectors;
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::Scratch;

    /// Never called: [`super::available`] is false off x86-64.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn head<'a>(
        _: &mut Scratch,
        _: &[f32],
        _: impl Fn(usize) -> &'a [f32],
        _: impl Fn(usize) -> &'a [f32],
        _: Option<&[f32]>,
        _: usize,
        _: usize,
        _: f32,
        _: &mut [f32],
    ) {
        unreachable!("AVX-512 attention on a CPU without AVX-512")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::decode;

    /// The blocked kernel against the plain per-row one ([`decode`], which computes every
    /// key) on causal masks with left padding (the engine's layout: shared prefix, padding,
    /// own suffix), grouped heads with per-group mask rows, a cache wider than the keys, a
    /// row count that is not a multiple of the block, and a head of 256 values (Gemma 3).
    #[test]
    fn blocked_prefill_equals_the_plain_rows() {
        if !available(64) {
            eprintln!("this CPU has no AVX-512: the prefill kernel never runs here");
            return;
        }
        for (batch, heads, kv_heads, tq, tk, head_dim, grouped_mask) in [
            (2, 9, 3, 13, 29, 64, false),
            (3, 4, 1, 7, 70, 256, true),
            (1, 2, 2, 40, 40, 16, false),
        ] {
            let capacity = tk + 5;
            let mut state = 7u64;
            let mut random = || {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
            };
            let queries: Vec<f32> = (0..batch * heads * tq * head_dim)
                .map(|_| random())
                .collect();
            let cache: Vec<f32> = (0..batch * kv_heads * capacity * head_dim)
                .map(|_| random())
                .collect();
            let other: Vec<f32> = (0..cache.len()).map(|_| random()).collect();
            let view = |values| CacheView {
                values,
                start: 0,
                strides: [
                    kv_heads * capacity * head_dim,
                    capacity * head_dim,
                    head_dim,
                ],
            };
            // Sequence b: a prefix of 3 keys, `b + 2` padding slots, then its own tokens;
            // query row t is the key at tk − tq + t and sees keys up to it.
            let group = heads / kv_heads;
            let mask_rows = if grouped_mask { group * tq } else { tq };
            let mut mask = vec![0f32; batch * mask_rows * tk];
            for b in 0..batch {
                for row in 0..mask_rows {
                    let t = row % tq;
                    for j in 0..tk {
                        let padding = (3..3 + b + 2).contains(&j);
                        if padding || j > tk - tq + t {
                            mask[(b * mask_rows + row) * tk + j] = f32::NEG_INFINITY;
                        }
                    }
                }
            }
            let shape = Shape {
                batch,
                heads,
                kv_heads,
                queries: tq,
                keys: tk,
                head_dim,
            };
            let mask = Some(Mask {
                values: &mask,
                rows: mask_rows,
            });
            let scale = 1.0 / (head_dim as f32).sqrt();
            let ours = prefill(shape, &queries, view(&cache), view(&other), mask, scale);
            let plain = decode(
                shape,
                &queries,
                view(&cache),
                view(&other),
                mask,
                scale,
                None,
            );
            let worst = ours
                .iter()
                .zip(&plain)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 2e-5,
                "{batch}×{heads}/{kv_heads} heads, {tq} rows, {tk} keys, d {head_dim}: {worst}"
            );
        }
    }
}
