//! The prefill's attention over a pass of packed prompts in one call: each (prompt,
//! key/value head) is one task of two gemm products, the query heads sharing those keys
//! stacked into one operand, read straight from the KV cache; a query meets only the keys
//! at or before its position (blocks of 64 query rows, each multiplied against the keys up
//! to its last row).
//!
//! Why: through candle, each prompt's attention copied its queries to fold the query groups
//! into rows, built and repeated a causal mask, multiplied every query by every key (the
//! masked upper triangle too), zero-filled the probabilities and concatenated the prompts'
//! outputs for a transpose: a quarter of the demo's prefill time. The values are the ones
//! those ops gave: the same dot products (gemm sums along `k` in one order whatever the
//! blocking of rows and columns), the same softmax of each row's seen keys (a masked key
//! added exactly 0 to its sums), and value products that leave out only zero
//! probabilities.

use candle_core::{DType, Device, Tensor};
use rayon::prelude::*;
use tabcontam_kernels::unwritten;

use super::error::CResult;
use super::kv_cache::LayerCache;
use super::tensor_values::with_f32_values;

/// Query rows per block of a head's products: rows `t0..t1` of a prompt's segment meet
/// keys `0..start + t1` only.
const ROW_BLOCK: usize = 64;

/// One prompt's queries of a pass: queries `packed..packed + (end − start)` of the pass are
/// positions `start..end` of sequence `row` of the cache, whose position 0 is at slot `pad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queries {
    pub row: usize,
    pub pad: usize,
    pub start: usize,
    pub end: usize,
    pub packed: usize,
}

impl Queries {
    fn len(&self) -> usize {
        self.end - self.start
    }
}

/// Whether [`attention`] computes this layer's attention: f32 on CPU, no soft-capping, and
/// no query of the pass further than `window` from a key it would see unwindowed (the
/// windowed rows would need a mask at their start).
pub fn applies(
    (device, dtype): (&Device, DType),
    softcap: Option<f64>,
    window: Option<usize>,
    queries: &[Queries],
) -> bool {
    device.is_cpu()
        && dtype == DType::F32
        && softcap.is_none()
        && window.is_none_or(|w| queries.iter().all(|s| s.end <= w))
}

/// `softmax(scale · q kᵀ) v`, causal within each prompt, for `q` `(1, heads, total,
/// head_dim)` (the pass's packed queries) against each prompt's keys and values in
/// `cache` (written there already); returns `(1, heads, total, head_dim)` as the transpose
/// of a dense `(1, total, heads, head_dim)`, so the output projection reads it uncopied.
pub fn attention(
    q: &Tensor,
    cache: &LayerCache,
    queries: &[Queries],
    scale: f32,
) -> CResult<Tensor> {
    let (_, heads, total, head_dim) = q.dims4()?;
    let (keys, values) = cache.tensors();
    let (_, kv_heads, capacity, _) = keys.dims4()?;
    if !heads.is_multiple_of(kv_heads) {
        candle_core::bail!("{heads} query heads cannot share {kv_heads} key/value heads");
    }
    let group = heads / kv_heads;
    if queries.iter().map(Queries::len).sum::<usize>() != total {
        candle_core::bail!("the packed prompts' rows do not cover the {total} queries");
    }
    // SAFETY: the prompts' rows cover the `total` rows (checked above) and each task
    // writes its heads' columns of its prompt's rows, so every value is written.
    let mut out = unsafe { tabcontam_kernels::unwritten::<f32>(total * heads * head_dim) };
    let target = Shared(out.as_mut_ptr());
    with_f32_values(q, |q| {
        with_f32_values(keys, |keys| {
            with_f32_values(values, |values| {
                (0..queries.len() * kv_heads)
                    .into_par_iter()
                    .for_each(|task| {
                        let (s, kv) = (queries[task / kv_heads], task % kv_heads);
                        let first = s.row * kv_heads * capacity + kv * capacity + s.pad;
                        let group = Group {
                            queries: s,
                            heads: kv * group..(kv + 1) * group,
                            head_dim,
                            total,
                            q,
                            keys: &keys[first * head_dim..(first + s.end) * head_dim],
                            values: &values[first * head_dim..(first + s.end) * head_dim],
                            out_row: heads * head_dim,
                        };
                        // SAFETY: this task alone writes its heads' columns of rows
                        // `packed..packed + len` of `out`, which hold `heads · head_dim`
                        // values each.
                        unsafe { group.run(target.at(s.packed * heads * head_dim), scale) };
                    })
            })
        })
    })???;
    Tensor::from_vec(out, (1, total, heads, head_dim), q.device())?.transpose(1, 2)
}

/// The query heads that share one key/value head, for one prompt: their queries (head `h`'s
/// row `t` at `(h · total + packed + t) · head_dim`), the shared keys and values (positions
/// `0..end`, dense rows) and where the output rows go (`out_row` apart, head `h` at column
/// `h · head_dim`).
struct Group<'a> {
    queries: Queries,
    heads: std::ops::Range<usize>,
    head_dim: usize,
    total: usize,
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    out_row: usize,
}

impl Group<'_> {
    /// Each block of query rows of every head in the group as one product with the keys
    /// and one with the values (the heads' rows stacked: the keys and values are packed
    /// once for all of them).
    ///
    /// # Safety
    /// `out` must have room for `len` rows of `out_row` values.
    unsafe fn run(&self, out: *mut f32, scale: f32) {
        let (start, len, d) = (self.queries.start, self.queries.len(), self.head_dim);
        let group = self.heads.len();
        let block = ROW_BLOCK.min(len);
        // SAFETY (of the four): each block writes the rows it reads, in each buffer
        // before reading it (the queries copied in, the scores and outputs by the
        // products, which do not read their destination, the probabilities by the
        // softmax and the zeros after each row's last key).
        let score_values = group * block * self.queries.end;
        let (mut stacked, mut scores, mut probs, mut outputs) = unsafe {
            (
                unwritten::<f32>(group * block * d),
                unwritten::<f32>(score_values),
                unwritten::<f32>(score_values),
                unwritten::<f32>(group * block * d),
            )
        };
        for t0 in (0..len).step_by(ROW_BLOCK) {
            let t1 = (t0 + ROW_BLOCK).min(len);
            let (rows, seen) = (t1 - t0, start + t1);
            for (i, h) in self.heads.clone().enumerate() {
                let from = (h * self.total + self.queries.packed + t0) * d;
                stacked[i * rows * d..(i + 1) * rows * d]
                    .copy_from_slice(&self.q[from..from + rows * d]);
            }
            // SAFETY: `scores` holds `group · rows × seen` values, `stacked` as many rows
            // of queries, the keys `seen` positions, `d` values each.
            unsafe {
                gemm_f32(
                    (group * rows, seen, d),
                    (scores.as_mut_ptr(), seen as isize),
                    (stacked.as_ptr(), d as isize, 1),
                    (self.keys.as_ptr(), 1, d as isize),
                )
            };
            for (r, (row, p)) in scores
                .chunks_exact(seen)
                .zip(probs.chunks_exact_mut(seen))
                .take(group * rows)
                .enumerate()
            {
                // Query `t0 + r % rows` (of the group's head `r / rows`) sees keys up to its
                // own position, `start + t0 + r % rows`.
                let sees = start + t0 + r % rows + 1;
                tabcontam_kernels::attention::softmax(&row[..sees], scale, &mut p[..sees]);
                p[sees..].fill(0.0);
            }
            // SAFETY: `probs` holds `group · rows × seen` values, the values `seen`
            // positions, `outputs` `group · rows` rows of `d`.
            unsafe {
                gemm_f32(
                    (group * rows, d, seen),
                    (outputs.as_mut_ptr(), d as isize),
                    (probs.as_ptr(), seen as isize, 1),
                    (self.values.as_ptr(), d as isize, 1),
                )
            };
            for (i, h) in self.heads.clone().enumerate() {
                for r in 0..rows {
                    let from = &outputs[(i * rows + r) * d..(i * rows + r + 1) * d];
                    // SAFETY: row `t0 + r` of the prompt's output rows, head `h`'s columns
                    // (the caller vouches for them).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            from.as_ptr(),
                            out.add((t0 + r) * self.out_row + h * d),
                            d,
                        )
                    };
                }
            }
        }
    }
}

/// `dst = lhs · rhs` for `(m, n, k)` on this thread: `dst` row-major with its row stride,
/// `lhs` and `rhs` each with its (row, column) strides.
///
/// # Safety
/// Every operand must be valid at its strides for its shape.
unsafe fn gemm_f32(
    (m, n, k): (usize, usize, usize),
    (dst, dst_row): (*mut f32, isize),
    (lhs, lhs_row, lhs_col): (*const f32, isize, isize),
    (rhs, rhs_row, rhs_col): (*const f32, isize, isize),
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_row,
            false,
            lhs,
            lhs_col,
            lhs_row,
            rhs,
            rhs_col,
            rhs_row,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The output, written by every task at its own head's columns.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: tasks write disjoint (prompt, head) blocks, and the vector outlives the loop.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The value at `index` (a method, so closures capture the whole `Sync` wrapper).
    fn at(self, index: usize) -> *mut f32 {
        self.0.wrapping_add(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::layers::attention as composed;

    /// Against candle's composed attention with a causal mask, prompt by prompt: two
    /// prompts in one sequence each of a two-sequence cache, one continuing after 5
    /// inherited positions, one crossing a row block (70 queries), three query heads per
    /// key/value head.
    #[test]
    fn packed_prompts_match_the_composed_attention() {
        let (heads, kv_heads, d, capacity) = (6, 2, 16, 80);
        let device = Device::Cpu;
        let noise = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 2003.0 - 0.5) * 3.0)
                .collect()
        };
        let k = Tensor::from_vec(
            noise(2 * kv_heads * capacity * d, 1),
            (2, kv_heads, capacity, d),
            &device,
        )
        .unwrap();
        let v = Tensor::from_vec(
            noise(2 * kv_heads * capacity * d, 2),
            (2, kv_heads, capacity, d),
            &device,
        )
        .unwrap();
        let cache = LayerCache::new(k, v);
        let queries = [
            Queries {
                row: 1,
                pad: 3,
                start: 5,
                end: 9,
                packed: 0,
            },
            Queries {
                row: 0,
                pad: 0,
                start: 0,
                end: 70,
                packed: 4,
            },
        ];
        let total = 74;
        let q =
            Tensor::from_vec(noise(heads * total * d, 3), (1, heads, total, d), &device).unwrap();
        let scale = 0.25;
        let packed = attention(&q, &cache, &queries, scale)
            .unwrap()
            .contiguous()
            .unwrap();
        for s in queries {
            let len = s.end - s.start;
            let (keys, values) = cache.row_view(s.row, s.pad..s.pad + s.end).unwrap();
            let mask: Vec<f32> = (s.start..s.end)
                .flat_map(|p| (0..s.end).map(move |j| if j <= p { 0.0 } else { f32::NEG_INFINITY }))
                .collect();
            let mask = Tensor::from_vec(mask, (1, 1, len, s.end), &device).unwrap();
            let query = q.narrow(2, s.packed, len).unwrap();
            let expected = composed(
                &query,
                &keys,
                &values,
                Some(&mask),
                scale as f64,
                None,
                None,
            )
            .unwrap();
            let got = packed.narrow(2, s.packed, len).unwrap();
            let error = (expected - got)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(error < 1e-5, "prompt {s:?}: largest difference {error}");
        }
    }
}
