//! Decoding attention on CPU tensors: the adapter from candle's KV cache views to the
//! slice kernel `tabcontam_kernels::attention::decode` (why a kernel: see there).

use candle_core::{DType, Device, Layout, Storage, Tensor};
use tabcontam_kernels::attention::{CacheView, Mask, Shape, decode};

use super::error::CResult;

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
    let (batch, heads, tq, head_dim) = q.dims4()?;
    let (_, kv_heads, tk, _) = k.dims4()?;
    let queries = q.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let mask = match mask {
        Some(m) => {
            let rows = m.dim(2)?;
            Some((m.contiguous()?.flatten_all()?.to_vec1::<f32>()?, rows))
        }
        None => None,
    };
    let shape = Shape {
        batch,
        heads,
        kv_heads,
        queries: tq,
        keys: tk,
        head_dim,
    };
    let out = with_values(k, |keys, k_layout| {
        with_values(v, |values, v_layout| {
            let keys = cache_view(keys, k_layout)?;
            let values = cache_view(values, v_layout)?;
            let mask = mask.as_ref().map(|(values, rows)| Mask {
                values,
                rows: *rows,
            });
            Ok(decode(
                shape,
                &queries,
                keys,
                values,
                mask,
                scale as f32,
                softcap.map(|c| c as f32),
            ))
        })
    })?;
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
