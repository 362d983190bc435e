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
            let mut max = f32::NEG_INFINITY;
            for (j, score) in scores.iter_mut().enumerate() {
                let mut s = dot(query, keys.row(b, kv, j, head_dim)) * scale;
                if let Some(cap) = softcap {
                    s = (s / cap).tanh() * cap;
                }
                if let Some(row) = mask_row {
                    s += row[j];
                }
                *score = s;
                max = max.max(s);
            }
            let mut total = 0f32;
            for score in scores.iter_mut() {
                *score = (*score - max).exp();
                total += *score;
            }
            for (j, &p) in scores.iter().enumerate() {
                if p == 0.0 {
                    continue;
                }
                let weight = p / total;
                for (o, &x) in output.iter_mut().zip(values.row(b, kv, j, head_dim)) {
                    *o += weight * x;
                }
            }
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
}
