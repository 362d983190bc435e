//! The trainer's attention as one op: `softmax(scale · q kᵀ) v` from the rotated queries and
//! keys and the values in the layout the projections wrote them, its backward pass in the
//! same op; each head's products run on one core (the heads side by side on all of them),
//! and only the causal half of each head's scores is multiplied.
//!
//! Why: composed of candle ops, the heads were copied to head-major order and back on the
//! main thread, each small product of a head was split over both cores, and the value
//! product's backward pass went through candle's gradient store (zero-filled buffers and
//! adds): the attention ran at 150–158 % of 2 cores where the projections ran at 185 %
//! (`contaminate`, batch 4 × 256). The values are the ones those ops computed: the same dot
//! products summed in the same order (the causal half leaves out only products with zero).
//! Gemma 3's sliding layers longer than their window compose candle ops
//! ([`sliding_attention`]).

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor, bail};
use rayon::prelude::*;
use tabcontam_kernels::train as k;

use super::linear::products::{Product, gemm_f32};
use super::linear::{Precision, slice, with_values};

/// Query rows per block of a head's products: rows `r0..r1` meet keys `0..r1` only.
const ROW_BLOCK: usize = 64;

/// The shapes of one attention: `q` `(batch, seq, heads, dim)`, `k` and `v` `(batch, seq,
/// kv_heads, dim)` (grouped-query attention: each kv head serves `heads / kv_heads`).
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    seq: usize,
    heads: usize,
    kv_heads: usize,
    dim: usize,
}

impl Dims {
    fn group(self) -> usize {
        self.heads / self.kv_heads
    }

    /// Floats from one position's queries (or outputs) to the next's.
    fn q_row(self) -> usize {
        self.heads * self.dim
    }

    /// Floats from one position's keys (or values) to the next's.
    fn kv_row(self) -> usize {
        self.kv_heads * self.dim
    }

    /// Query head `h` of sequence `b` at position 0, in a `(batch, seq, heads, dim)` tensor.
    fn q_at(self, b: usize, h: usize) -> usize {
        b * self.seq * self.q_row() + h * self.dim
    }

    /// kv head `h` of sequence `b` at position 0, in a `(batch, seq, kv_heads, dim)` tensor.
    fn kv_at(self, b: usize, h: usize) -> usize {
        b * self.seq * self.kv_row() + h * self.dim
    }

    /// Head `h` of sequence `b`'s `seq × seq` block of the probabilities.
    fn probs_at(self, b: usize, h: usize) -> usize {
        (b * self.heads + h) * self.seq * self.seq
    }
}

/// A buffer that the parallel tasks write at disjoint places.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: every task writes its own head's (or kv head's) part of the buffer, which outlives
// the parallel loop.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn at(self, index: usize) -> *mut f32 {
        self.0.wrapping_add(index)
    }
}

/// `dst = lhs · rhs` on the calling core, f32.
///
/// # Safety
/// As `products::gemm_f32`: the operands valid at their strides, `dst` room for the product.
unsafe fn product(p: Product, dst: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { gemm_f32(p, dst, false, 1, Precision::F32) }
}

/// One head's two products around its scores, by blocks of query rows: `scores = rows ·
/// firstᵀ` over the keys up to the block's end, `each_row(i, scores row i)`, then `out =
/// scores · second`. `rows` and `out` are the head's `(seq, dim)` rows in a `(batch, seq,
/// heads, dim)` tensor, `first` and `second` its kv head's in a `(batch, seq, kv_heads,
/// dim)` one, `scores` its `seq × seq` block. The forward pass runs it on `q`, `k`, `v`
/// (the softmax between); the backward pass on the output's gradient, `v`, `k` (the
/// softmax's gradient between, `dq` out).
///
/// # Safety
/// The pointers must address those rows and blocks, and no other thread may write this
/// head's scores or output rows meanwhile.
unsafe fn head_products(
    d: Dims,
    (rows, first, second): (*const f32, *const f32, *const f32),
    scores: *mut f32,
    out: *mut f32,
    each_row: impl Fn(usize, &mut [f32]),
) {
    let (seq, q_row, kv_row) = (d.seq, d.q_row() as isize, d.kv_row() as isize);
    for r0 in (0..seq).step_by(ROW_BLOCK) {
        let r1 = (r0 + ROW_BLOCK).min(seq);
        // SAFETY: rows r0..r1 of the head's scores (keys 0..r1) and output, within the
        // blocks the caller vouches for.
        unsafe {
            product(
                Product {
                    m: r1 - r0,
                    n: r1,
                    k: d.dim,
                    dst: (seq as isize, 1),
                    lhs: (rows.add(r0 * d.q_row()), q_row, 1),
                    rhs: (first, 1, kv_row),
                },
                scores.add(r0 * seq),
            );
            for i in r0..r1 {
                each_row(i, std::slice::from_raw_parts_mut(scores.add(i * seq), seq));
            }
            product(
                Product {
                    m: r1 - r0,
                    n: d.dim,
                    k: r1,
                    dst: (q_row, 1),
                    lhs: (scores.add(r0 * seq), seq as isize, 1),
                    rhs: (second, kv_row, 1),
                },
                out.add(r0 * d.q_row()),
            );
        }
    }
}

/// The output `(batch · seq, heads · dim)` and the probabilities `(batch, heads, seq, seq)`.
fn forward(d: Dims, q: &[f32], k: &[f32], v: &[f32], scale: f32) -> (Vec<f32>, Vec<f32>) {
    let mut probs = vec![0f32; d.batch * d.heads * d.seq * d.seq];
    let mut out = vec![0f32; q.len()];
    let (probs_out, values_out) = (Shared(probs.as_mut_ptr()), Shared(out.as_mut_ptr()));
    (0..d.batch * d.heads).into_par_iter().for_each(|task| {
        let (b, h) = (task / d.heads, task % d.heads);
        let kv = d.kv_at(b, h / d.group());
        // SAFETY: this task alone writes head `h` of sequence `b` (its probabilities and
        // output columns); q, k and v hold the rows the offsets address.
        unsafe {
            head_products(
                d,
                (
                    q[d.q_at(b, h)..].as_ptr(),
                    k[kv..].as_ptr(),
                    v[kv..].as_ptr(),
                ),
                probs_out.at(d.probs_at(b, h)),
                values_out.at(d.q_at(b, h)),
                |i, row| k::causal_softmax_row(row, i + 1, scale),
            )
        }
    });
    (out, probs)
}

/// `(dq, dk, dv)` from the output's gradient `grad` `(batch · seq, heads · dim)`.
fn backward(
    d: Dims,
    (q, k, v): (&[f32], &[f32], &[f32]),
    probs: &[f32],
    grad: &[f32],
    scale: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (seq, kv_row) = (d.seq, d.kv_row() as isize);
    // Per head: the scores' gradient (from the probabilities' `grad · vᵀ`), then `dq`.
    let mut ds = vec![0f32; probs.len()];
    let mut dq = vec![0f32; q.len()];
    let (ds_out, dq_out) = (Shared(ds.as_mut_ptr()), Shared(dq.as_mut_ptr()));
    (0..d.batch * d.heads).into_par_iter().for_each(|task| {
        let (b, h) = (task / d.heads, task % d.heads);
        let (at, kv) = (d.probs_at(b, h), d.kv_at(b, h / d.group()));
        let probs_row = |i: usize| &probs[at + i * seq..at + (i + 1) * seq];
        // SAFETY: this task alone writes head `h` of sequence `b` (its score gradients
        // and `dq` columns); grad, v and k hold the rows the offsets address.
        unsafe {
            head_products(
                d,
                (
                    grad[d.q_at(b, h)..].as_ptr(),
                    v[kv..].as_ptr(),
                    k[kv..].as_ptr(),
                ),
                ds_out.at(at),
                dq_out.at(d.q_at(b, h)),
                |i, row| k::causal_softmax_backward_row(probs_row(i), row, i + 1, scale),
            )
        }
    });
    // Per kv head: `dk = dsᵀ q` and `dv = pᵀ grad`, each one product over its group's
    // stacked heads (the group's blocks of `ds` and `probs` are consecutive).
    let mut dk = vec![0f32; k.len()];
    let mut dv = vec![0f32; v.len()];
    let (dk_out, dv_out) = (Shared(dk.as_mut_ptr()), Shared(dv.as_mut_ptr()));
    let group = d.group();
    (0..d.batch * d.kv_heads * 2)
        .into_par_iter()
        .for_each(|task| {
            let (b, kvh, values) = (task / 2 / d.kv_heads, task / 2 % d.kv_heads, task % 2 == 1);
            let (weights, from, out) = match values {
                false => (ds.as_slice(), q, dk_out),
                true => (probs, grad, dv_out),
            };
            // The group's rows of `from` in head-major order: `(group · seq, dim)`.
            let mut stacked = Vec::with_capacity(group * seq * d.dim);
            for g in 0..group {
                let start = d.q_at(b, kvh * group + g);
                for i in 0..seq {
                    let row = start + i * d.q_row();
                    stacked.extend_from_slice(&from[row..row + d.dim]);
                }
            }
            let first = d.probs_at(b, kvh * group);
            // SAFETY: this task alone writes kv head `kvh` of sequence `b`; `weightsᵀ` is read
            // as `(seq, group · seq)` within the group's blocks.
            unsafe {
                product(
                    Product {
                        m: seq,
                        n: d.dim,
                        k: group * seq,
                        dst: (kv_row, 1),
                        lhs: (weights[first..].as_ptr(), 1, seq as isize),
                        rhs: (stacked.as_ptr(), d.dim as isize, 1),
                    },
                    out.at(d.kv_at(b, kvh)),
                );
            }
        });
    (dq, dk, dv)
}

/// [`attention`]: keeps the probabilities from its forward pass for its backward pass
/// (when a gradient is wanted), as the composed ops kept theirs.
struct Attention {
    kv_heads: usize,
    scale: f32,
    keep: bool,
    probs: Mutex<Option<Vec<f32>>>,
}

impl Attention {
    fn dims(&self, q: &Shape, kv: &Shape) -> candle_core::Result<Dims> {
        let (batch, seq, heads, dim) = q.dims4()?;
        let (kv_batch, kv_seq, kv_heads, kv_dim) = kv.dims4()?;
        if (kv_batch, kv_seq, kv_heads, kv_dim) != (batch, seq, self.kv_heads, dim)
            || heads % kv_heads != 0
        {
            bail!("attention: queries {q:?} do not match keys {kv:?}")
        }
        Ok(Dims {
            batch,
            seq,
            heads,
            kv_heads,
            dim,
        })
    }
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "train-attention"
    }

    fn cpu_fwd(
        &self,
        sq: &CpuStorage,
        lq: &Layout,
        sk: &CpuStorage,
        lk: &Layout,
        sv: &CpuStorage,
        lv: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.dims(lq.shape(), lk.shape())?;
        if lv.shape() != lk.shape() {
            bail!("attention: values {:?} do not match keys", lv.shape())
        }
        let (q, k, v) = (
            slice(sq, lq, self.name())?,
            slice(sk, lk, self.name())?,
            slice(sv, lv, self.name())?,
        );
        let (out, probs) = forward(d, q, k, v, self.scale);
        if self.keep {
            *self.probs.lock().expect("never poisoned") = Some(probs);
        }
        Ok((
            CpuStorage::F32(out),
            Shape::from((d.batch * d.seq, d.q_row())),
        ))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let d = self.dims(q.shape(), k.shape())?;
        let Some(probs) = self.probs.lock().expect("never poisoned").take() else {
            bail!("attention: one backward pass per forward pass")
        };
        let (dq, dk, dv) = with_values(&q.detach(), |q| {
            with_values(&k.detach(), |k| {
                with_values(&v.detach(), |v| {
                    with_values(&grad.detach(), |grad| {
                        backward(d, (q, k, v), &probs, grad, self.scale)
                    })
                })
            })
        })????;
        let device = q.device();
        Ok((
            Some(Tensor::from_vec(dq, q.shape(), device)?),
            Some(Tensor::from_vec(dk, k.shape(), device)?),
            Some(Tensor::from_vec(dv, v.shape(), device)?),
        ))
    }
}

/// Causal attention of rotated `q` `(batch, seq, heads, dim)` over rotated `k` and `v`
/// `(batch, seq, kv_heads, dim)`: `softmax(scale · q kᵀ) v` with each position seeing itself
/// and the positions before it, as `(batch · seq, heads · dim)` rows (the output
/// projection's input).
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    kv_heads: usize,
    scale: f64,
) -> candle_core::Result<Tensor> {
    let keep = q.track_op() || k.track_op() || v.track_op();
    q.contiguous()?.apply_op3(
        &k.contiguous()?,
        &v.contiguous()?,
        Attention {
            kv_heads,
            scale: scale as f32,
            keep,
            probs: Mutex::new(None),
        },
    )
}

/// [`attention`] where each position sees only itself and the `window − 1` before it
/// (Gemma 3's sliding layers on windows longer than the slide), composed of candle ops
/// (differentiable as they are); the causal op serves every shorter window.
pub fn sliding_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    kv_heads: usize,
    scale: f64,
    window: usize,
) -> candle_core::Result<Tensor> {
    let (batch, seq, heads, dim) = q.dims4()?;
    let group = heads / kv_heads;
    let q = q
        .transpose(1, 2)?
        .contiguous()?
        .reshape((batch, kv_heads, group * seq, dim))?;
    let (k, v) = (
        k.transpose(1, 2)?.contiguous()?,
        v.transpose(1, 2)?.contiguous()?,
    );
    let band: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..seq).map(move |j| {
                if j <= i && i - j < window {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    let band = Tensor::from_vec(band, (seq, seq), q.device())?;
    let scores = (q.matmul(&k.t()?)? * scale)?
        .reshape((batch, kv_heads, group, seq, seq))?
        .broadcast_add(&band)?;
    // The diagonal is always visible, so every row's maximum is finite; softmax does not
    // depend on the shift, which therefore needs no gradient.
    let max = scores.max_keepdim(candle_core::D::Minus1)?.detach();
    let exp = scores.broadcast_sub(&max)?.exp()?;
    let probs = exp
        .broadcast_div(&exp.sum_keepdim(candle_core::D::Minus1)?)?
        .reshape((batch, kv_heads, group * seq, seq))?;
    probs
        .matmul(&v)?
        .reshape((batch, heads, seq, dim))?
        .transpose(1, 2)?
        .reshape((batch * seq, heads * dim))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;
    use crate::train::ops::composed;

    /// The composed candle ops the op replaced: head-major copies, a masked softmax of the
    /// scores, the value product, and back to rows.
    fn composed_attention(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        kv_heads: usize,
        scale: f64,
    ) -> Tensor {
        let (batch, seq, heads, dim) = q.dims4().unwrap();
        let group = heads / kv_heads;
        let qh = q
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((batch, kv_heads, group * seq, dim))
            .unwrap();
        let kh = k.transpose(1, 2).unwrap().contiguous().unwrap();
        let vh = v.transpose(1, 2).unwrap().contiguous().unwrap();
        let mask = composed::causal_mask(seq, &Device::Cpu).unwrap();
        let scores = (qh.matmul(&kh.t().unwrap()).unwrap() * scale)
            .unwrap()
            .reshape((batch, kv_heads, group, seq, seq))
            .unwrap()
            .broadcast_add(&mask)
            .unwrap();
        let probs = composed::softmax(&scores)
            .unwrap()
            .reshape((batch, kv_heads, group * seq, seq))
            .unwrap();
        probs
            .matmul(&vh)
            .unwrap()
            .reshape((batch, heads, seq, dim))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((batch * seq, heads * dim))
            .unwrap()
    }

    /// Output and the three gradients equal the composed ops', on sequences that end inside
    /// a row block (70 = 64 + 6), with 3 query heads per kv head, and on a single position.
    #[test]
    fn attention_matches_the_composed_ops() {
        for (batch, seq) in [(2, 70), (1, 1), (3, 5)] {
            let (heads, kv_heads, dim) = (6, 2, 8);
            let var = |kv: bool| {
                let h = if kv { kv_heads } else { heads };
                Var::randn(0f32, 1.0, (batch, seq, h, dim), &Device::Cpu).unwrap()
            };
            let (q, k, v) = (var(false), var(true), var(true));
            let upstream =
                Tensor::randn(0f32, 1.0, (batch * seq, heads * dim), &Device::Cpu).unwrap();
            let scale = 0.35;
            let ours =
                attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), kv_heads, scale).unwrap();
            let reference =
                composed_attention(q.as_tensor(), k.as_tensor(), v.as_tensor(), kv_heads, scale);
            let diff = super::super::linear::max_abs_diff;
            assert!(diff(&ours, &reference) < 1e-5, "forward, seq {seq}");
            let ours = (ours * &upstream)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let reference = (reference * &upstream)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let (a, b) = (
                    ours.get(x.as_tensor()).unwrap(),
                    reference.get(x.as_tensor()).unwrap(),
                );
                assert!(diff(a, b) < 1e-4, "d{name}, seq {seq}: {}", diff(a, b));
            }
        }
    }

    /// Without a gradient to take, the op keeps no probabilities; with one, a second
    /// backward pass of the same forward pass is an error rather than a wrong gradient.
    #[test]
    fn probabilities_are_kept_for_one_backward_pass() {
        let shape = (1, 4, 2, 8);
        let frozen = Tensor::randn(0f32, 1.0, shape, &Device::Cpu).unwrap();
        let out = attention(&frozen, &frozen, &frozen, 2, 0.5).unwrap();
        assert!(!out.track_op());
        let q = Var::randn(0f32, 1.0, shape, &Device::Cpu).unwrap();
        let loss = attention(q.as_tensor(), &frozen, &frozen, 2, 0.5)
            .unwrap()
            .sum_all()
            .unwrap();
        assert!(loss.backward().is_ok());
        let error = loss.backward().unwrap_err().to_string();
        assert!(error.contains("one backward pass"), "{error}");
    }
}
