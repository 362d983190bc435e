//! Building blocks shared by the architectures: linear layers (dense or quantized), norms,
//! activations, rotary embeddings with per-sequence positions and attention with an additive
//! mask (the KV cache it reads is `kv_cache.rs`).

use std::borrow::Cow;
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
    weight: Weight,
    bias: Option<Tensor>,
    /// A quantized weight laid out for the int8 panels when it settles on them or else on
    /// its first product, where this CPU runs them (`qmatmul::lay_out`); shared by the
    /// clones.
    panels: Arc<OnceLock<Option<LaidOut>>>,
}

/// What a [`Linear`] multiplies with.
#[derive(Debug, Clone)]
enum Weight {
    /// The weight as loaded (a quantized one laid out for the panels beside its blocks on
    /// its first product, where this CPU runs them).
    Stored(QMatMul),
    /// The layout in `panels` only: [`Linear::settle_on_panels`] dropped the blocks.
    Panels,
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
            weight: Weight::Stored(weight),
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
                Weight::Stored(QMatMul::Tensor(w)) => dense.push(w.clone()),
                Weight::Stored(QMatMul::QTensor(q)) => quantized.push(Arc::clone(q)),
                Weight::Stored(QMatMul::TensorF16(_)) | Weight::Panels => return Ok(None),
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
            Weight::Stored(QMatMul::QTensor(q)) => super::qmatmul::int8_prefill(q),
            Weight::Stored(QMatMul::Tensor(_) | QMatMul::TensorF16(_)) | Weight::Panels => true,
        }
    }

    /// Lays a quantized weight out for the int8 panels now, where this CPU runs them and
    /// the layout budget allows, and drops its stored blocks: every product then reads the
    /// layout, so the blocks were only memory (SmolLM2-135M: 66 MB of them beside 115 MB
    /// of layout, a tenth of the demo's peak). Blocks another owner shares (a tied
    /// embedding's table) stay with it. Call it once nothing needs the blocks any more
    /// (after [`Linear::concat`]).
    pub fn settle_on_panels(&mut self) {
        let Weight::Stored(QMatMul::QTensor(q)) = &self.weight else {
            return;
        };
        if q.device().is_cpu()
            && self
                .panels
                .get_or_init(|| super::qmatmul::lay_out(q))
                .is_some()
        {
            self.weight = Weight::Panels;
        }
    }

    pub fn forward(&self, xs: &Tensor) -> CResult<Tensor> {
        let ys = match &self.weight {
            Weight::Stored(weight) => self.product(weight, xs)?,
            Weight::Panels => {
                let laid_out = self.panels.get().and_then(Option::as_ref);
                let laid_out = laid_out.expect("settled on panels only when laid out");
                super::qmatmul::matmul_laid_out(xs, laid_out)?
            }
        };
        match &self.bias {
            Some(bias) => ys.broadcast_add(bias),
            None => Ok(ys),
        }
    }

    /// `xs Wᵀ` with the weight as loaded.
    fn product(&self, weight: &QMatMul, xs: &Tensor) -> CResult<Tensor> {
        let rows = xs.elem_count() / xs.dim(D::Minus1)?.max(1);
        Ok(match weight {
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
        })
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

    /// A quantized linear settled on its panels multiplies from the layout alone, with the
    /// bits it gave beside its blocks, for a step's rows and a prefill's; where this CPU
    /// has no panels (or `TABCONTAM_CPU` forces a path without them) it keeps its blocks.
    #[test]
    fn settling_on_panels_drops_the_blocks_and_keeps_the_products() {
        use candle_core::quantized::GgmlDType;
        let device = Device::Cpu;
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let w = Tensor::randn(0f32, 1.0, (96, 128), &device).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let bias = Tensor::randn(0f32, 1.0, 96, &device).unwrap();
            let stored = Linear::new(QMatMul::from_qtensor(q).unwrap(), Some(bias));
            let mut settled = stored.clone();
            settled.settle_on_panels();
            let panels = super::super::qmatmul::int8_prefill(match &stored.weight {
                Weight::Stored(QMatMul::QTensor(q)) => q,
                other => panic!("loaded as {other:?}"),
            });
            assert_eq!(
                matches!(settled.weight, Weight::Panels),
                panels,
                "{dtype:?}"
            );
            for rows in [1, 3, 40] {
                let xs = Tensor::randn(0f32, 1.0, (rows, 128), &device).unwrap();
                let before = stored.forward(&xs).unwrap().to_vec2::<f32>().unwrap();
                let after = settled.forward(&xs).unwrap().to_vec2::<f32>().unwrap();
                assert_eq!(before, after, "{dtype:?}, {rows} rows");
            }
        }
    }
}
