//! Attention for a few new tokens per sequence (decoding) on CPU, read straight from the
//! KV cache: one pass per head computes the scores, the masked softmax and the weighted
//! values.
//!
//! Why: through candle, each decoding step's attention was two batched matmuls (a gemm
//! call per head, each asking the OS for the CPU count and waking the thread pool for a
//! 3 × 64 by 64 × 300 product), a scale, a mask add and a softmax: a fifth of the time of
//! a SmolLM2-135M decoding step went there. The work itself is a few hundred thousand
//! multiply-adds, which one core does in tens of microseconds.

use candle_core::{DType, Device, Layout, Storage, Tensor};
use rayon::prelude::*;

use super::layers::CResult;

/// Query rows per (sequence, KV head) up to which this path is used: decoding steps
/// (grouped heads × one or a few tokens); prefill chunks go through candle's GEMMs.
pub const MAX_ROWS: usize = 32;

/// Multiply-adds from which the heads are spread over the pool (a 30-layer model at
/// 100k per layer wakes it 30 times per token for ~20 µs of work each: not worth it).
const PARALLEL_WORK: usize = 128 * 1024;

/// The f32 values of a CPU tensor with its layout (no copy).
fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32], &Layout) -> CResult<R>) -> CResult<R> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => f(cpu.as_slice::<f32>()?, layout),
        _ => candle_core::bail!("decode attention runs on CPU tensors"),
    }
}

/// Whether [`attention`] handles these inputs.
pub fn applies(q: &Tensor, k: &Tensor, rows_per_kv_head: usize) -> bool {
    q.device().is_cpu()
        && q.dtype() == DType::F32
        && k.dtype() == DType::F32
        && rows_per_kv_head <= MAX_ROWS
}

/// `softmax(q kᵀ · scale [softcapped] + mask) v` for `q` `(b, heads, tq, d)`, `k`, `v`
/// `(b, kv_heads, tk, d)` (views over a cache: any strides with dense rows), `mask`
/// additive `(b, 1, tq or heads/kv_heads · tq, tk)`. Returns `(b, heads, tq, d)`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    softcap: Option<f64>,
) -> CResult<Tensor> {
    let (batch, heads, tq, head_dim) = q.dims4()?;
    let (_, kv_heads, tk, _) = k.dims4()?;
    let group = heads / kv_heads;
    let queries = q.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let mask = match mask {
        Some(m) => {
            let rows = m.dim(2)?;
            Some((m.contiguous()?.flatten_all()?.to_vec1::<f32>()?, rows))
        }
        None => None,
    };
    let scale = scale as f32;
    let softcap = softcap.map(|c| c as f32);
    let mut out = vec![0f32; batch * heads * tq * head_dim];
    with_values(k, |keys, k_layout| {
        with_values(v, |values, v_layout| {
            let (k_start, k_stride) = (k_layout.start_offset(), k_layout.stride());
            let (v_start, v_stride) = (v_layout.start_offset(), v_layout.stride());
            if k_stride[3] != 1 || v_stride[3] != 1 {
                candle_core::bail!("decode attention needs dense key and value rows");
            }
            // One task per (sequence, head); on the pool only when there is enough work
            // to pay for waking it (long caches), since decoding steps come by thousands.
            let head = |(index, output): (usize, &mut [f32])| {
                let (b, h) = (index / heads, index % heads);
                let kv = h / group;
                let key = |j: usize| {
                    let at = k_start + b * k_stride[0] + kv * k_stride[1] + j * k_stride[2];
                    &keys[at..at + head_dim]
                };
                let value = |j: usize| {
                    let at = v_start + b * v_stride[0] + kv * v_stride[1] + j * v_stride[2];
                    &values[at..at + head_dim]
                };
                let mut scores = vec![0f32; tk];
                for (t, output) in output.chunks_exact_mut(head_dim).enumerate() {
                    let query = &queries[((b * heads + h) * tq + t) * head_dim..][..head_dim];
                    let mask_row = mask.as_ref().map(|(m, rows)| {
                        let row = if *rows == tq { t } else { (h % group) * tq + t };
                        &m[(b * rows + row) * tk..][..tk]
                    });
                    let mut max = f32::NEG_INFINITY;
                    for (j, score) in scores.iter_mut().enumerate() {
                        let mut s = dot(query, key(j)) * scale;
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
                        for (o, &x) in output.iter_mut().zip(value(j)) {
                            *o += weight * x;
                        }
                    }
                }
            };
            let per_head = tq * head_dim;
            if batch * heads * tq * tk * head_dim >= PARALLEL_WORK {
                out.par_chunks_mut(per_head).enumerate().for_each(head);
            } else {
                out.chunks_mut(per_head).enumerate().for_each(head);
            }
            Ok(())
        })
    })?;
    Tensor::from_vec(out, (batch, heads, tq, head_dim), &Device::Cpu)
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
    use candle_core::D;

    /// Same result as the candle formulation (matmul, scale, mask, softmax, matmul) on
    /// grouped heads, a cache view wider than the keys, masked slots and a soft-cap.
    #[test]
    fn matches_the_matmul_formulation() {
        for (batch, heads, kv_heads, tq, tk, d) in [(2, 6, 2, 2, 11, 16), (1, 4, 1, 7, 7, 256)] {
            compare(batch, heads, kv_heads, tq, tk, d);
        }
    }

    fn compare(batch: usize, heads: usize, kv_heads: usize, tq: usize, tk: usize, d: usize) {
        let device = Device::Cpu;
        let q = Tensor::randn(0f32, 1.0, (batch, heads, tq, d), &device).unwrap();
        let cache_k = Tensor::randn(0f32, 1.0, (batch, kv_heads, 20, d), &device).unwrap();
        let cache_v = Tensor::randn(0f32, 1.0, (batch, kv_heads, 20, d), &device).unwrap();
        let (k, v) = (
            cache_k.narrow(2, 0, tk).unwrap(),
            cache_v.narrow(2, 0, tk).unwrap(),
        );
        let mut mask = vec![0f32; batch * tq * tk];
        for (i, m) in mask.iter_mut().enumerate() {
            if i % 5 == 0 {
                *m = f32::NEG_INFINITY;
            }
        }
        let mask = Tensor::from_vec(mask, (batch, 1, tq, tk), &device).unwrap();
        for softcap in [None, Some(5.0)] {
            let ours = attention(&q, &k, &v, Some(&mask), 0.25, softcap).unwrap();
            let group = heads / kv_heads;
            let qg = q.reshape((batch, kv_heads, group * tq, d)).unwrap();
            let mut scores = (qg.matmul(&k.t().unwrap()).unwrap() * 0.25).unwrap();
            if let Some(cap) = softcap {
                scores = ((scores / cap).unwrap().tanh().unwrap() * cap).unwrap();
            }
            let scores = scores
                .broadcast_add(&mask.repeat((1, 1, group, 1)).unwrap())
                .unwrap();
            let probs = candle_nn::ops::softmax(&scores, D::Minus1).unwrap();
            let theirs = probs
                .matmul(&v.contiguous().unwrap())
                .unwrap()
                .reshape((batch, heads, tq, d))
                .unwrap();
            let diff = (ours - theirs)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(diff < 1e-5, "softcap {softcap:?}: max difference {diff}");
        }
    }
}
