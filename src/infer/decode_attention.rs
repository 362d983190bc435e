//! Attention on CPU tensors read from the KV cache: the adapters from candle's cache views
//! to the slice kernels `tabcontam_kernels::attention::decode` (decoding steps) and
//! `tabcontam_kernels::prefill_attention::prefill` (a prompt's rows on AVX-512; why
//! kernels: see there).

use candle_core::{DType, Device, Layout, Storage, Tensor};
use tabcontam_kernels::attention::{CacheView, Mask, Shape, decode};
use tabcontam_kernels::prefill_attention;

use super::error::CResult;
use super::tensor_values::with_f32_values;

/// Query rows per (sequence, KV head) up to which this path is used: decoding steps
/// (grouped heads × one or a few tokens); prefill chunks go through candle's GEMMs.
pub const MAX_ROWS: usize = 32;

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
    with_kernel_inputs(q, k, v, mask, |shape, queries, keys, values, mask| {
        decode(
            shape,
            queries,
            keys,
            values,
            mask,
            scale as f32,
            softcap.map(|c| c as f32),
        )
    })
}

/// Whether [`prefill`] handles these inputs: CPU f32 on AVX-512, heads of a multiple of 16
/// values, a mask (if any) dense per sequence.
pub fn prefill_applies(q: &Tensor, k: &Tensor, mask: Option<&Tensor>) -> CResult<bool> {
    let (batch, _, _, head_dim) = q.dims4()?;
    let dense_mask = match mask {
        Some(m) => {
            let (mb, mh, _, mk) = m.dims4()?;
            mb == batch && mh == 1 && mk == k.dim(2)?
        }
        None => true,
    };
    Ok(q.device().is_cpu()
        && q.dtype() == DType::F32
        && k.dtype() == DType::F32
        && dense_mask
        && prefill_attention::available(head_dim))
}

/// `softmax(q kᵀ · scale + mask) v` for a prompt's rows, shapes as [`attention`]'s
/// (no soft-cap): the blocked kernel, which skips the keys a causal mask hides.
pub fn prefill(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
) -> CResult<Tensor> {
    with_kernel_inputs(q, k, v, mask, |shape, queries, keys, values, mask| {
        prefill_attention::prefill(shape, queries, keys, values, mask, scale as f32)
    })
}

/// Runs `kernel` on the slices behind `q` (copied only when not contiguous), the cache
/// views of `k` and `v`, and the mask; the result as a `(b, heads, tq, d)` tensor.
fn with_kernel_inputs(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    kernel: impl FnOnce(Shape, &[f32], CacheView<'_>, CacheView<'_>, Option<Mask<'_>>) -> Vec<f32>,
) -> CResult<Tensor> {
    let (batch, heads, tq, head_dim) = q.dims4()?;
    let (_, kv_heads, tk, _) = k.dims4()?;
    let q = q.contiguous()?;
    let mask = mask.map(Tensor::contiguous).transpose()?;
    let shape = Shape {
        batch,
        heads,
        kv_heads,
        queries: tq,
        keys: tk,
        head_dim,
    };
    // Queries and mask read in place (a prefill's are megabytes per layer).
    let out = with_f32_values(&q, |queries| {
        let with_mask = |mask: Option<Mask<'_>>| {
            with_values(k, |keys, k_layout| {
                with_values(v, |values, v_layout| {
                    let keys = cache_view(keys, k_layout)?;
                    let values = cache_view(values, v_layout)?;
                    Ok(kernel(shape, queries, keys, values, mask))
                })
            })
        };
        match &mask {
            Some(m) => {
                let rows = m.dim(2)?;
                with_f32_values(m, |values| with_mask(Some(Mask { values, rows })))?
            }
            None => with_mask(None),
        }
    })??;
    Tensor::from_vec(out, (batch, heads, tq, head_dim), &Device::Cpu)
}

/// A 4-d `(batch, kv_heads, positions, head_dim)` cache tensor's layout as a kernel view.
fn cache_view<'a>(values: &'a [f32], layout: &Layout) -> CResult<CacheView<'a>> {
    let stride = layout.stride();
    if stride[3] != 1 {
        candle_core::bail!("decode attention needs dense key and value rows");
    }
    Ok(CacheView {
        values,
        start: layout.start_offset(),
        strides: [stride[0], stride[1], stride[2]],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::D;

    /// Same result as the candle formulation (matmul, scale, mask, softmax, matmul) on
    /// grouped heads, a cache view wider than the keys, masked slots and a soft-cap; the
    /// prefill kernel too where this CPU runs it.
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
            // The prefill kernel where it runs (AVX-512; no soft-cap), on the same inputs.
            let prefill_ours = (softcap.is_none() && prefill_applies(&q, &k, Some(&mask)).unwrap())
                .then(|| prefill(&q, &k, &v, Some(&mask), 0.25).unwrap());
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
            let difference = |ours: Tensor| {
                (ours - &theirs)
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap()
            };
            let diff = difference(ours);
            assert!(diff < 1e-5, "softcap {softcap:?}: max difference {diff}");
            if let Some(prefill_ours) = prefill_ours {
                let diff = difference(prefill_ours);
                assert!(diff < 1e-5, "prefill kernel: max difference {diff}");
            }
        }
    }
}
