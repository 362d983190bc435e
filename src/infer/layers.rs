//! Building blocks shared by the architectures: linear layers (dense or quantized), norms,
//! activations, rotary embeddings with per-sequence positions, attention with an additive
//! mask, and a preallocated KV cache that can be copied per prompt.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::{QMatMul, QStorage, QTensor};
use candle_core::{D, DType, Device, Module, Tensor};

use tabcontam_kernels::vnni::LaidOut;

use super::error::LocalError;
use super::tensor_values::with_f32_values;
use super::weights::Weights;

pub use super::error::CResult;

/// `y = x Wᵀ + b`.
#[derive(Debug, Clone)]
pub struct Linear {
    weight: QMatMul,
    bias: Option<Tensor>,
    /// A quantized weight laid out for the int8 panels on its first product, when this CPU
    /// runs them (`qmatmul::lay_out`); shared by the clones.
    panels: Arc<OnceLock<Option<LaidOut>>>,
}

impl Linear {
    /// Loads `{prefix}.weight` and, when present (or `bias` is required), `{prefix}.bias`.
    pub fn load(weights: &mut Weights, prefix: &str) -> Result<Self, LocalError> {
        let weight = weights.matmul_weight(&format!("{prefix}.weight"))?;
        let bias = weights.optional_tensor(&format!("{prefix}.bias"))?;
        Ok(Linear::new(weight, bias))
    }

    fn new(weight: QMatMul, bias: Option<Tensor>) -> Self {
        Linear {
            weight,
            bias,
            panels: Arc::default(),
        }
    }

    pub fn from_weight(weight: QMatMul) -> Self {
        Linear::new(weight, None)
    }

    /// One linear computing all of `parts` side by side, with the output width of each:
    /// one matmul instead of several narrow ones (one activation quantization and one
    /// thread fork for quantized weights). Dense weights, or quantized CPU weights of one
    /// block type; `None` otherwise.
    pub fn concat(parts: &[Linear]) -> CResult<Option<(Linear, Vec<usize>)>> {
        let bias = if parts.iter().all(|p| p.bias.is_none()) {
            None
        } else if let Some(biases) = parts
            .iter()
            .map(|p| p.bias.clone())
            .collect::<Option<Vec<_>>>()
        {
            Some(Tensor::cat(&biases, 0)?)
        } else {
            return Ok(None);
        };
        let mut dense = Vec::with_capacity(parts.len());
        let mut quantized = Vec::with_capacity(parts.len());
        for part in parts {
            match &part.weight {
                QMatMul::Tensor(w) => dense.push(w.clone()),
                QMatMul::QTensor(q) => quantized.push(Arc::clone(q)),
                QMatMul::TensorF16(_) => return Ok(None),
            }
        }
        if dense.len() == parts.len() {
            let sizes = dense
                .iter()
                .map(|w| w.dim(0))
                .collect::<CResult<Vec<_>>>()?;
            let weight = QMatMul::Tensor(Tensor::cat(&dense, 0)?);
            return Ok(Some((Linear::new(weight, bias), sizes)));
        }
        if quantized.len() != parts.len() {
            return Ok(None);
        }
        let dtype = quantized[0].dtype();
        let mut sizes = Vec::with_capacity(parts.len());
        let mut columns = None;
        for q in &quantized {
            let (rows, cols) = q.shape().dims2()?;
            if q.dtype() != dtype || !q.device().is_cpu() || columns.is_some_and(|c| c != cols) {
                return Ok(None);
            }
            columns = Some(cols);
            sizes.push(rows);
        }
        // Rows of a quantized matrix are whole blocks, stored one after the other: the
        // stacked matrix is the bytes of its parts end to end.
        let mut bytes = Vec::new();
        for q in &quantized {
            bytes.extend_from_slice(&q.data()?);
        }
        let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype)?;
        let stacked = QTensor::new(storage, (sizes.iter().sum::<usize>(), columns.unwrap_or(0)))?;
        let weight = QMatMul::QTensor(Arc::new(stacked));
        Ok(Some((Linear::new(weight, bias), sizes)))
    }

    /// Whether a row's product is the same whatever rows share the call: dense weights
    /// (few rows padded, see [`MIN_DENSE_ROWS`]), or quantized ones on the int8 panels.
    /// Elsewhere a call of few rows takes block dot products over 8-bit activations and one
    /// of many an f32 GEMM over expanded blocks.
    pub fn rows_independent(&self) -> bool {
        match &self.weight {
            QMatMul::QTensor(q) => super::qmatmul::int8_prefill(q),
            QMatMul::Tensor(_) | QMatMul::TensorF16(_) => true,
        }
    }

    pub fn forward(&self, xs: &Tensor) -> CResult<Tensor> {
        let rows = xs.elem_count() / xs.dim(D::Minus1)?.max(1);
        let ys = match &self.weight {
            QMatMul::Tensor(w) => dense_matmul(xs, w)?,
            // On AVX-512 VNNI, Q4_1, Q8_0 and Q4_K stay 8-bit for any number of rows: int8
            // panels over the weight laid out once (`tabcontam_kernels::vnni`), ~3× the
            // f32 GEMM of a prefill and several times the block dot products of a step.
            QMatMul::QTensor(q)
                if xs.device().is_cpu()
                    && let Some(laid_out) = self
                        .panels
                        .get_or_init(|| super::qmatmul::lay_out(q))
                        .as_ref() =>
            {
                super::qmatmul::matmul_laid_out(xs, laid_out)?
            }
            // Many rows (prefill): expanding the blocks to f32 for this call and running
            // one f32 GEMM beats block dot products by far; the expanded copy is dropped at
            // once, so memory stays that of the quantized weights.
            // Past the layout budget, Q4_1, Q8_0 and Q4_K stay 8-bit on AVX-512 VNNI all the
            // same (panels laid out per call, in `qmatmul::matmul`).
            QMatMul::QTensor(q)
                if rows >= DENSE_ROWS
                    && xs.device().is_cpu()
                    && !super::qmatmul::int8_prefill(q) =>
            {
                dense_matmul(xs, &super::qmatmul::dequantize(q, xs.dtype())?)?
            }
            // Few rows (decoding): block dot products read 4× less memory than f32.
            QMatMul::QTensor(q) if super::qmatmul::supports(q) => super::qmatmul::matmul(xs, q)?,
            other => other.forward(&xs.contiguous()?)?,
        };
        match &self.bias {
            Some(bias) => ys.broadcast_add(bias),
            None => Ok(ys),
        }
    }
}

/// Rows from which a quantized linear is computed as an f32 GEMM over its expanded
/// weights (prefill) rather than by block dot products (decoding). On 2 AVX2 cores, with
/// SmolLM2-135M's 576×1536 Q8_0 matrices: expanding costs as much as ~10 rows of dot
/// products, and the GEMM runs ~4× faster per row.
const DENSE_ROWS: usize = 16;

/// `xs Wᵀ` as one 2-D GEMM over every token of every sequence: candle would otherwise run
/// one small matmul per sequence of the batch.
/// Fewer rows than this are padded with zero rows before a dense product on CPU: gemm
/// takes other paths for a single row (and, on small matrices, for a few), which sum in
/// another order, so a row's product would depend on how many rows share the call. From
/// this many on it takes one path (`dense_rows_are_independent_of_their_call`), which is
/// what lets prompts copy keys and values computed in another pass and the last layer run
/// on some rows only.
const MIN_DENSE_ROWS: usize = 8;

fn dense_matmul(xs: &Tensor, w: &Tensor) -> CResult<Tensor> {
    let dims = xs.dims().to_vec();
    let (last, lead) = dims.split_last().expect("linear input has a feature dim");
    let rows: usize = lead.iter().product();
    let xs = xs.reshape((rows, *last))?;
    let flat = if rows < MIN_DENSE_ROWS && xs.device().is_cpu() {
        let padding = Tensor::zeros((MIN_DENSE_ROWS - rows, *last), xs.dtype(), xs.device())?;
        Tensor::cat(&[&xs, &padding], 0)?
            .matmul(&w.t()?)?
            .narrow(0, 0, rows)?
    } else {
        xs.matmul(&w.t()?)?
    };
    let mut out_dims = lead.to_vec();
    out_dims.push(w.dim(0)?);
    flat.reshape(out_dims)
}

#[derive(Debug, Clone)]
pub enum Norm {
    /// `x / rms(x) * w` (Gemma's `(1 + w)` is folded into `w` at load).
    Rms { weight: Tensor, eps: f32 },
    Layer {
        weight: Tensor,
        bias: Tensor,
        eps: f32,
    },
}

impl Norm {
    pub fn forward(&self, xs: &Tensor) -> CResult<Tensor> {
        match self {
            Norm::Rms { weight, eps }
                if xs.device().is_cpu()
                    && xs.dtype() == DType::F32
                    && weight.dtype() == DType::F32 =>
            {
                // One pass per row with the squares summed in vector registers (candle's
                // op sums them one by one; see `tabcontam_kernels::norm`).
                let normed = with_f32_values(xs, |x| {
                    with_f32_values(weight, |w| tabcontam_kernels::norm::rms_norm(x, w, *eps))
                })??;
                Tensor::from_vec(normed, xs.shape(), xs.device())
            }
            Norm::Rms { weight, eps } => candle_nn::ops::rms_norm(&xs.contiguous()?, weight, *eps),
            Norm::Layer { weight, bias, eps } => {
                candle_nn::ops::layer_norm(&xs.contiguous()?, weight, bias, *eps)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// exact erf GELU (`gelu`).
    GeluErf,
    Relu,
}

impl Activation {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "silu" | "swish" => Activation::Silu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "gelu_tanh" => Activation::GeluTanh,
            "gelu" => Activation::GeluErf,
            "relu" => Activation::Relu,
            _ => return None,
        })
    }

    pub fn apply(self, xs: &Tensor) -> CResult<Tensor> {
        match self {
            Activation::Silu => candle_nn::ops::silu(xs),
            Activation::GeluTanh => xs.gelu(),
            Activation::GeluErf => xs.gelu_erf(),
            Activation::Relu => xs.relu(),
        }
    }
}

/// Rotary position embedding over the first `rotary_dim` features of each head.
#[derive(Debug, Clone)]
pub struct Rope {
    /// One inverse frequency per rotated pair, computed as transformers does (f32).
    inv_freq: Vec<f32>,
    pub rotary_dim: usize,
    /// GGUF llama checkpoints rotate adjacent pairs (their q/k rows were permuted at
    /// conversion); Hugging Face checkpoints rotate the two halves.
    pub interleaved: bool,
}

impl Rope {
    pub fn new(theta: f32, rotary_dim: usize, interleaved: bool) -> Self {
        let inv_freq = (0..rotary_dim / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / rotary_dim as f32))
            .collect();
        Rope {
            inv_freq,
            rotary_dim,
            interleaved,
        }
    }

    /// Llama 3.1's frequency-dependent scaling (`rope_type = "llama3"`).
    pub fn scale_llama3(
        &mut self,
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max: f32,
    ) {
        let low_freq_wavelen = original_max / low_freq_factor;
        let high_freq_wavelen = original_max / high_freq_factor;
        for freq in &mut self.inv_freq {
            let wavelen = 2.0 * std::f32::consts::PI / *freq;
            if wavelen > low_freq_wavelen {
                *freq /= factor;
            } else if wavelen >= high_freq_wavelen {
                let smooth = (original_max / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                *freq = (1.0 - smooth) * *freq / factor + smooth * *freq;
            }
        }
    }

    /// Linear position interpolation (`rope_type = "linear"`).
    pub fn scale_linear(&mut self, factor: f32) {
        for freq in &mut self.inv_freq {
            *freq /= factor;
        }
    }

    /// Per-frequency divisors stored in GGUF files (`rope_freqs.weight`).
    pub fn divide(&mut self, factors: &[f32]) {
        for (freq, factor) in self.inv_freq.iter_mut().zip(factors) {
            *freq /= factor;
        }
    }

    /// `cos`/`sin` tables of shape `(batch, seq, rotary_dim / 2)` for these positions.
    pub fn tables(
        &self,
        positions: &[Vec<u32>],
        device: &Device,
        dtype: DType,
    ) -> CResult<(Tensor, Tensor)> {
        let batch = positions.len();
        let seq = positions.first().map_or(0, Vec::len);
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(batch * seq * half);
        let mut sin = Vec::with_capacity(batch * seq * half);
        for row in positions {
            for &pos in row {
                for &freq in &self.inv_freq {
                    let angle = pos as f32 * freq;
                    cos.push(angle.cos());
                    sin.push(angle.sin());
                }
            }
        }
        let cos = Tensor::from_vec(cos, (batch, seq, half), device)?.to_dtype(dtype)?;
        let sin = Tensor::from_vec(sin, (batch, seq, half), device)?.to_dtype(dtype)?;
        Ok((cos, sin))
    }

    /// Rotates `xs` of shape `(batch, heads, seq, head_dim)`.
    pub fn apply(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor) -> CResult<Tensor> {
        let head_dim = xs.dim(D::Minus1)?;
        let rotate = |part: &Tensor| -> CResult<Tensor> {
            let part = part.contiguous()?;
            if self.interleaved {
                candle_nn::rotary_emb::rope_i(&part, cos, sin)
            } else {
                candle_nn::rotary_emb::rope(&part, cos, sin)
            }
        };
        if self.rotary_dim == head_dim {
            return rotate(xs);
        }
        let rotated = rotate(&xs.narrow(D::Minus1, 0, self.rotary_dim)?)?;
        let kept = xs.narrow(D::Minus1, self.rotary_dim, head_dim - self.rotary_dim)?;
        // candle concatenates along the last dim through transposes: make it dense again.
        Tensor::cat(&[&rotated, &kept], D::Minus1)?.contiguous()
    }
}

/// Scaled dot-product attention. `q`: `(b, heads, tq, d)`; `k`, `v`: `(b, kv_heads, tk, d)`;
/// `mask`: additive `(b, 1, tq, tk)`; `bias`: additive `(1 or b, heads, tq, tk)` (T5).
/// Grouped-query heads are folded into the query rows instead of copying `k` and `v`.
pub fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: f64,
    softcap: Option<f64>,
    bias: Option<&Tensor>,
) -> CResult<Tensor> {
    let (batch, heads, tq, head_dim) = q.dims4()?;
    let kv_heads = k.dim(1)?;
    let group = heads / kv_heads;
    if bias.is_none() && super::decode_attention::applies(q, k, group * tq) {
        return super::decode_attention::attention(q, k, v, mask, scale, softcap);
    }
    let q = if group > 1 {
        q.contiguous()?
            .reshape((batch, kv_heads, group * tq, head_dim))?
    } else {
        q.clone()
    };
    // The kernel reads one dense mask row per batch entry and query row (no broadcasting).
    let dense_mask = match mask {
        Some(m) => {
            let (mb, mh, _, mk) = m.dims4()?;
            mb == batch && mh == 1 && mk == k.dim(2)?
        }
        None => true,
    };
    if softcap.is_none()
        && bias.is_none()
        && dense_mask
        && q.device().is_cpu()
        && q.dtype() == DType::F32
        && tabcontam_kernels::cpu::isa() >= tabcontam_kernels::cpu::Isa::Avx512
    {
        // Scale, mask and softmax in one kernel call on the product.
        let scores = q.matmul(&k.t()?)?;
        let (_, _, rows, keys) = scores.dims4()?;
        let mask = mask
            .map(|m| {
                if group > 1 && m.dim(2)? != rows {
                    m.repeat((1, 1, group, 1))?.contiguous()
                } else {
                    m.contiguous()
                }
            })
            .transpose()?;
        let probs = with_f32_values(&scores, |scores| -> CResult<Vec<f32>> {
            let mut probs = vec![0f32; scores.len()];
            match &mask {
                Some(mask) => with_f32_values(mask, |values| {
                    let mask = tabcontam_kernels::attention::RowMask {
                        values,
                        rows_per_head: rows,
                        heads: kv_heads,
                    };
                    tabcontam_kernels::attention::masked_softmax(
                        scores,
                        keys,
                        scale as f32,
                        Some(mask),
                        &mut probs,
                    )
                })?,
                None => tabcontam_kernels::attention::masked_softmax(
                    scores,
                    keys,
                    scale as f32,
                    None,
                    &mut probs,
                ),
            }
            Ok(probs)
        })??;
        let probs = Tensor::from_vec(probs, scores.shape(), &Device::Cpu)?;
        let out = probs.matmul(v)?;
        return if group > 1 {
            out.reshape((batch, heads, tq, head_dim))
        } else {
            Ok(out)
        };
    }
    let mut scores = (q.matmul(&k.t()?)? * scale)?;
    if let Some(cap) = softcap {
        scores = ((scores / cap)?.tanh()? * cap)?;
    }
    if let Some(bias) = bias {
        scores = scores.broadcast_add(bias)?;
    }
    if let Some(mask) = mask {
        // The decoder repeats its masks for the query groups once per step.
        let mask = if group > 1 && mask.dim(2)? != group * tq {
            mask.repeat((1, 1, group, 1))?
        } else {
            mask.clone()
        };
        scores = scores.broadcast_add(&mask)?;
    }
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    // `v` may be a view over the preallocated cache: rows are dense, no copy needed.
    let out = probs.matmul(v)?;
    if group > 1 {
        out.reshape((batch, heads, tq, head_dim))
    } else {
        Ok(out)
    }
}

/// Keys and values of one attention layer for a batch, preallocated to the longest
/// sequence the batch can reach so that each step writes in place.
#[derive(Debug, Clone)]
pub struct LayerCache {
    k: Tensor,
    v: Tensor,
}

impl LayerCache {
    pub fn new(k: Tensor, v: Tensor) -> Self {
        LayerCache { k, v }
    }

    pub fn empty(
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> CResult<Self> {
        let shape = (batch, kv_heads, capacity, head_dim);
        Ok(LayerCache {
            k: Tensor::zeros(shape, dtype, device)?,
            v: Tensor::zeros(shape, dtype, device)?,
        })
    }

    pub fn capacity(&self) -> usize {
        self.k.dim(2).unwrap_or(0)
    }

    /// The keys and values, `(batch, kv_heads, capacity, head_dim)` each.
    pub fn tensors(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }

    /// Writes `k`, `v` at `offset` and returns the views over `[0, offset + new)`. The
    /// cache grows (by a quarter) when the sequences outrun it: generations are sized
    /// for what they produce, not for their token budget.
    pub fn append(&mut self, offset: usize, k: &Tensor, v: &Tensor) -> CResult<(Tensor, Tensor)> {
        let new = k.dim(2)?;
        let needed = offset + new;
        let capacity = self.capacity();
        if needed > capacity {
            self.grow(needed + needed / 4 + 16 - capacity)?;
        }
        self.k.slice_set(&k.contiguous()?, 2, offset)?;
        self.v.slice_set(&v.contiguous()?, 2, offset)?;
        Ok((
            self.k.narrow(2, 0, offset + new)?,
            self.v.narrow(2, 0, offset + new)?,
        ))
    }

    fn grow(&mut self, extra: usize) -> CResult<()> {
        let widen = |t: &Tensor| -> CResult<Tensor> {
            let (b, heads, _, head_dim) = t.dims4()?;
            let room = Tensor::zeros((b, heads, extra, head_dim), t.dtype(), t.device())?;
            Tensor::cat(&[t, &room], 2)
        };
        self.k = widen(&self.k)?;
        self.v = widen(&self.v)?;
        Ok(())
    }

    /// The first `len` positions copied into a new cache of `batch` sequences and
    /// `capacity` positions (the shared-prefix snapshot handed to each prompt).
    pub fn expand(&self, len: usize, batch: usize, capacity: usize) -> CResult<Self> {
        if self.k.device().is_cpu() && self.k.dtype() == DType::F32 {
            return Ok(LayerCache {
                k: expand_cpu(&self.k, len, batch, capacity)?,
                v: expand_cpu(&self.v, len, batch, capacity)?,
            });
        }
        let grow = |t: &Tensor| -> CResult<Tensor> {
            let (b, heads, _, head_dim) = t.dims4()?;
            let prefix = t.narrow(2, 0, len)?;
            let prefix = if b == batch {
                prefix
            } else {
                prefix.broadcast_as((batch, heads, len, head_dim))?
            };
            let rest = Tensor::zeros(
                (batch, heads, capacity - len, head_dim),
                t.dtype(),
                t.device(),
            )?;
            Tensor::cat(&[&prefix.contiguous()?, &rest], 2)
        };
        Ok(LayerCache {
            k: grow(&self.k)?,
            v: grow(&self.v)?,
        })
    }

    /// Writes `k`, `v` `(1, kv_heads, new, head_dim)` into sequence `row` from `slot` on.
    pub fn write_row(&mut self, row: usize, slot: usize, k: &Tensor, v: &Tensor) -> CResult<()> {
        self.k
            .narrow(0, row, 1)?
            .slice_set(&k.contiguous()?, 2, slot)?;
        self.v
            .narrow(0, row, 1)?
            .slice_set(&v.contiguous()?, 2, slot)
    }

    /// Sequence `row`'s keys and values over `slots`, `(1, kv_heads, len, head_dim)` views.
    pub fn row_view(&self, row: usize, slots: Range<usize>) -> CResult<(Tensor, Tensor)> {
        let view = |t: &Tensor| t.narrow(0, row, 1)?.narrow(2, slots.start, slots.len());
        Ok((view(&self.k)?, view(&self.v)?))
    }

    /// Sequence `row`'s `slots` as a cache of one sequence holding just them.
    pub fn row_copy(&self, row: usize, slots: Range<usize>) -> CResult<Self> {
        let (k, v) = self.row_view(row, slots)?;
        Ok(LayerCache {
            k: k.force_contiguous()?,
            v: v.force_contiguous()?,
        })
    }

    /// Copies `len` slots of `source`'s sequence `from.0` (this cache's when `source` is
    /// `None`) starting at slot `from.1` into sequence `to.0` from slot `to.1`.
    pub fn copy_slots(
        &mut self,
        source: Option<&LayerCache>,
        from: (usize, usize),
        to: (usize, usize),
        len: usize,
    ) -> CResult<()> {
        let (k, v) = source
            .unwrap_or(self)
            .row_view(from.0, from.1..from.1 + len)?;
        // A dense copy first: the source may share this cache's storage.
        self.write_row(to.0, to.1, &k.force_contiguous()?, &v.force_contiguous()?)
    }

    /// Keeps only the sequences at `rows` (finished ones leave the batch).
    pub fn select(&self, rows: &Tensor) -> CResult<Self> {
        Ok(LayerCache {
            k: self.k.index_select(rows, 0)?,
            v: self.v.index_select(rows, 0)?,
        })
    }
}

/// [`LayerCache::expand`] on CPU: the new cache written once, in place, instead of a
/// broadcast copy, a zero block and their concatenation (three times the cache at peak).
fn expand_cpu(t: &Tensor, len: usize, batch: usize, capacity: usize) -> CResult<Tensor> {
    let (b, heads, _, head_dim) = t.dims4()?;
    if b != 1 && b != batch {
        candle_core::bail!("cannot expand a cache of {b} sequences to {batch}");
    }
    // `(b, heads, len, head_dim)` rows of the source, dense.
    let prefix = t
        .narrow(2, 0, len)?
        .contiguous()?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let per_head = len * head_dim;
    let mut out = vec![0f32; batch * heads * capacity * head_dim];
    for (sequence, block) in out
        .chunks_exact_mut(heads * capacity * head_dim)
        .enumerate()
    {
        // One source sequence broadcast to every row, or row for row.
        let source = if b == 1 { 0 } else { sequence };
        for (head, rows) in block.chunks_exact_mut(capacity * head_dim).enumerate() {
            let from = (source * heads + head) * per_head;
            rows[..per_head].copy_from_slice(&prefix[from..from + per_head]);
        }
    }
    Tensor::from_vec(out, (batch, heads, capacity, head_dim), t.device())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's dense product has the same bits whatever rows share the call, from one
    /// row to many, on the tiny test models' shapes and SmolLM2's.
    #[test]
    fn dense_rows_are_independent_of_their_call() {
        let device = Device::Cpu;
        for (k, n) in [
            (64, 64),
            (64, 128),
            (128, 64),
            (576, 576),
            (576, 1536),
            (1536, 576),
        ] {
            let xs = Tensor::randn(0f32, 1.0, (40, k), &device).unwrap();
            let w = Tensor::randn(0f32, 1.0, (n, k), &device).unwrap();
            let all = dense_matmul(&xs, &w).unwrap().to_vec2::<f32>().unwrap();
            for rows in [1, 2, 3, 5, 7, 8, 9, 17, 33] {
                for first in [0, 40 - rows] {
                    let part = dense_matmul(&xs.narrow(0, first, rows).unwrap(), &w)
                        .unwrap()
                        .to_vec2::<f32>()
                        .unwrap();
                    assert!(
                        part.iter().zip(&all[first..]).all(|(a, b)| a == b),
                        "{rows} rows from {first} of a {k} → {n} product differ from the same rows among 40"
                    );
                }
            }
        }
    }
}
