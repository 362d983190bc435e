//! The decoder-only transformer shared by the llama, mistral, gemma, gemma2, gemma3, phi,
//! phi3, qwen2, qwen3 and olmo2 files: each architecture file turns its `config.json` (or
//! GGUF metadata) into a [`DecoderSpec`] (`decoder_spec.rs`) and names its tensors; this
//! file loads them and runs them over a batch with a KV cache.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{D, DType, Device, Tensor};
use tabcontam_kernels::activation::Gate;

use super::decoder_spec::{DecoderSpec, NormKind, QkNorm, layer_name};
use super::error::{CandleContext, LocalError};
use super::kv_cache::LayerCache;
use super::layers::{Activation, CResult, Linear, Norm, Rope, attention};
use super::rotary_heads::rotate_into_heads;
use super::tensor_values::with_f32_values;
use super::weights::Weights;

/// Projections whose outputs are split: fused in the checkpoint, or separate.
#[derive(Debug, Clone)]
enum Projection {
    Fused { linear: Linear, sizes: Vec<usize> },
    Separate(Vec<Linear>),
}

impl Projection {
    /// Separate projections, fused into one matmul when their weights are dense.
    fn separate(parts: Vec<Linear>) -> Result<Self, LocalError> {
        match Linear::concat(&parts).context(|| "fusing projections".into())? {
            Some((linear, sizes)) => Ok(Projection::Fused { linear, sizes }),
            None => Ok(Projection::Separate(parts)),
        }
    }

    fn forward(&self, xs: &Tensor) -> CResult<Vec<Tensor>> {
        match self {
            Projection::Fused { linear, sizes } => {
                let ys = linear.forward(xs)?;
                let mut start = 0;
                sizes
                    .iter()
                    .map(|&size| {
                        let part = ys.narrow(D::Minus1, start, size);
                        start += size;
                        part
                    })
                    .collect()
            }
            Projection::Separate(linears) => linears.iter().map(|l| l.forward(xs)).collect(),
        }
    }

    fn rows_independent(&self) -> bool {
        match self {
            Projection::Fused { linear, .. } => linear.rows_independent(),
            Projection::Separate(linears) => linears.iter().all(Linear::rows_independent),
        }
    }

    fn settle_on_panels(&mut self) {
        match self {
            Projection::Fused { linear, .. } => linear.settle_on_panels(),
            Projection::Separate(linears) => linears.iter_mut().for_each(Linear::settle_on_panels),
        }
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Option<Norm>,
    qkv: Projection,
    q_norm: Option<Norm>,
    k_norm: Option<Norm>,
    o: Linear,
    post_attn_norm: Option<Norm>,
    ffn_norm: Option<Norm>,
    post_ffn_norm: Option<Norm>,
    /// `[gate, up]` for gated MLPs, `[up]` otherwise.
    mlp_in: Projection,
    down: Linear,
    sliding_window: Option<usize>,
}

impl Layer {
    /// Every projection laid out for the int8 panels, its stored blocks dropped
    /// ([`Linear::settle_on_panels`]).
    fn settle_on_panels(&mut self) {
        self.qkv.settle_on_panels();
        self.o.settle_on_panels();
        self.mlp_in.settle_on_panels();
        self.down.settle_on_panels();
    }
}

/// Additive attention masks for one forward step, `(batch, 1, new, cached + new)`.
pub struct Masks {
    /// For full-attention layers; `None` when nothing is masked (one sequence, one token).
    pub full: Option<Tensor>,
    /// For sliding-window layers (the model has at most one window size).
    pub sliding: Option<Tensor>,
}

/// One forward step over a batch whose sequences share the cache layout.
pub struct Step<'a> {
    /// `(batch, new)` token ids.
    pub tokens: &'a Tensor,
    /// Rotary position of every new token, per sequence.
    pub positions: &'a [Vec<u32>],
    pub masks: &'a Masks,
    /// Where the new tokens go in the cache (the same slot for every sequence).
    pub offset: usize,
    /// Compute next-token logits (skipped while encoding a shared prefix).
    pub want_logits: bool,
}

/// One layer's attention over its new tokens: queries `(batch, heads, new, head_dim)`,
/// keys and values `(batch, kv_heads, new, head_dim)` after the rotary embedding.
pub(super) struct LayerAttention<'a> {
    pub layer: usize,
    /// The layer's sliding window, if it has one.
    pub window: Option<usize>,
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub cache: &'a mut LayerCache,
}

/// Stores a layer's new keys and values in its cache and returns the attention output
/// `(batch, heads, new, head_dim)`: at one slot for every sequence ([`Step`]), or per
/// sequence for packed prompts (`shared_prefill`).
pub(super) type Attend<'a> = dyn FnMut(LayerAttention) -> CResult<Tensor> + 'a;

/// The token embedding table: dense, or the GGUF blocks as stored (a quarter of the
/// memory of f32 for Q8_0; rows are expanded as they are looked up).
#[derive(Clone)]
enum Embedding {
    Dense(Tensor),
    Quantized(Arc<QTensor>),
}

impl std::fmt::Debug for Embedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Embedding::Dense(table) => write!(f, "Dense{:?}", table.shape()),
            Embedding::Quantized(table) => {
                write!(f, "Quantized({:?}{:?})", table.dtype(), table.shape())
            }
        }
    }
}

/// Which new tokens' outputs a caller reads from the last layer: every one (scoring a text),
/// or only some (each prompt's last token, whose logits start its generation; none while
/// encoding a shared prefix). The last layer computes keys and values for every token —
/// later tokens attend to them — but its output projection and MLP only for these rows.
#[derive(Clone, Copy)]
pub(super) enum Wanted<'a> {
    All,
    /// Indices into the `batch · new` tokens of the step, in the order returned.
    Rows(&'a [u32]),
}

/// The rotary embedding of one layer with its `cos`/`sin` tables for this step.
struct RotaryTables<'a> {
    rope: &'a Rope,
    cos: &'a Tensor,
    sin: &'a Tensor,
}

#[derive(Debug, Clone)]
pub struct DecoderModel {
    pub spec: DecoderSpec,
    embed: Embedding,
    layers: Vec<Layer>,
    final_norm: Norm,
    lm_head: Linear,
    device: Device,
    dtype: DType,
}

impl DecoderModel {
    pub fn load(weights: &mut Weights, spec: DecoderSpec) -> Result<Self, LocalError> {
        weights.arch = spec.arch.clone();
        let names = spec.names.clone();
        let norm = |weights: &mut Weights, prefix: &str| -> Result<Norm, LocalError> {
            let weight = weights.tensor(&format!("{prefix}.weight"))?;
            Ok(match spec.norm {
                NormKind::Rms { eps } => {
                    let weight = if spec.norm_unit_offset {
                        (weight + 1.0).context(|| format!("{prefix}: 1 + w"))?
                    } else {
                        weight
                    };
                    Norm::Rms { weight, eps }
                }
                NormKind::Layer { eps } => {
                    let bias = match weights.optional_tensor(&format!("{prefix}.bias"))? {
                        Some(bias) => bias,
                        None => weight
                            .zeros_like()
                            .context(|| format!("{prefix}: zero bias"))?,
                    };
                    Norm::Layer { weight, bias, eps }
                }
            })
        };
        let q_size = spec.num_heads * spec.head_dim;
        let kv_size = spec.num_kv_heads * spec.head_dim;
        let mut layers = Vec::with_capacity(spec.num_layers);
        for i in 0..spec.num_layers {
            let name = |template: &str| layer_name(template, i);
            let fused_qkv = names
                .qkv
                .map(name)
                .filter(|n| weights.has(&format!("{n}.weight")));
            let qkv = match fused_qkv {
                Some(prefix) => Projection::Fused {
                    linear: Linear::load(weights, &prefix)?,
                    sizes: vec![q_size, kv_size, kv_size],
                },
                None => Projection::separate(vec![
                    Linear::load(weights, &name(names.q))?,
                    Linear::load(weights, &name(names.k))?,
                    Linear::load(weights, &name(names.v))?,
                ])?,
            };
            let fused_gate_up = names
                .gate_up
                .map(name)
                .filter(|n| weights.has(&format!("{n}.weight")));
            let mlp_in = match (spec.gated_mlp, fused_gate_up) {
                (true, Some(prefix)) => {
                    let linear = Linear::load(weights, &prefix)?;
                    let rows = weights
                        .shape(&format!("{prefix}.weight"))
                        .map_or(0, |s| s[0]);
                    Projection::Fused {
                        linear,
                        sizes: vec![rows / 2, rows / 2],
                    }
                }
                (true, None) => Projection::separate(vec![
                    Linear::load(weights, &name(names.gate))?,
                    Linear::load(weights, &name(names.up))?,
                ])?,
                (false, _) => Projection::Separate(vec![Linear::load(weights, &name(names.up))?]),
            };
            let optional_norm = |weights: &mut Weights,
                                 template: Option<&str>|
             -> Result<Option<Norm>, LocalError> {
                template.map(|t| norm(weights, &name(t))).transpose()
            };
            let (q_norm, k_norm) = if spec.qk_norm == QkNorm::None {
                (None, None)
            } else {
                (
                    Some(norm(weights, &name(names.q_norm))?),
                    Some(norm(weights, &name(names.k_norm))?),
                )
            };
            layers.push(Layer {
                attn_norm: optional_norm(weights, names.attn_norm)?,
                qkv,
                q_norm,
                k_norm,
                o: Linear::load(weights, &name(names.o))?,
                post_attn_norm: optional_norm(weights, names.post_attn_norm)?,
                ffn_norm: if spec.parallel_block {
                    None
                } else {
                    optional_norm(weights, names.ffn_norm)?
                },
                post_ffn_norm: optional_norm(weights, names.post_ffn_norm)?,
                mlp_in,
                down: Linear::load(weights, &name(names.down))?,
                sliding_window: spec.sliding_window.get(i).copied().flatten(),
            });
        }
        let embed_name = format!("{}.weight", names.embed);
        let embed = if weights.is_gguf() && !weights.dequantize {
            Embedding::Quantized(Arc::new(weights.quantized(&embed_name)?))
        } else if let Some(table) = weights.quantized_vocabulary_table(&embed_name)? {
            Embedding::Quantized(Arc::new(table))
        } else {
            Embedding::Dense(weights.tensor(&embed_name)?)
        };
        let lm_head_name = format!("{}.weight", names.lm_head);
        let mut lm_head = if weights.has(&lm_head_name) {
            // A biased head keeps `Linear::load`, which carries the bias.
            let quantized = if weights.has(&format!("{}.bias", names.lm_head)) {
                None
            } else {
                weights.quantized_vocabulary_table(&lm_head_name)?
            };
            match quantized {
                Some(head) => Linear::from_weight(
                    QMatMul::from_qtensor(head).context(|| format!("loading {lm_head_name}"))?,
                ),
                None => Linear::load(weights, names.lm_head)?,
            }
        } else {
            // Tied embeddings: the output projection is the embedding matrix (the same
            // quantized blocks, shared).
            Linear::from_weight(match &embed {
                Embedding::Dense(table) => QMatMul::Tensor(table.clone()),
                Embedding::Quantized(table) => QMatMul::from_arc(Arc::clone(table))
                    .context(|| format!("loading {embed_name}"))?,
            })
        };
        // Every weight is fused where it will be (`Projection::separate`): the stored
        // blocks have no reader left but the embedding lookup, which keeps its own.
        for layer in &mut layers {
            layer.settle_on_panels();
        }
        lm_head.settle_on_panels();
        let final_norm = norm(weights, names.final_norm)?;
        Ok(DecoderModel {
            embed,
            layers,
            final_norm,
            lm_head,
            device: weights.device.clone(),
            dtype: weights.dtype,
            spec,
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn embedding_rows(&self) -> usize {
        match &self.embed {
            Embedding::Dense(table) => table.dim(0).unwrap_or(0),
            Embedding::Quantized(table) => table.shape().dims().first().copied().unwrap_or(0),
        }
    }

    /// Bytes of KV cache one sequence holds per position (every layer's keys and values).
    pub fn kv_bytes_per_position(&self) -> usize {
        self.layers.len()
            * 2
            * self.spec.num_kv_heads
            * self.spec.head_dim
            * self.dtype.size_in_bytes()
    }

    /// The window of sliding-window layers, if any.
    pub fn sliding_window(&self) -> Option<usize> {
        self.layers.iter().find_map(|l| l.sliding_window)
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> CResult<Vec<LayerCache>> {
        (0..self.layers.len())
            .map(|_| {
                LayerCache::empty(
                    batch,
                    self.spec.num_kv_heads,
                    capacity,
                    self.spec.head_dim,
                    self.dtype,
                    &self.device,
                )
            })
            .collect()
    }

    /// Runs new tokens through the model, filling the cache; returns the logits of each
    /// sequence's last token `(batch, vocab)` when asked.
    pub fn forward(&self, step: &Step, cache: &mut [LayerCache]) -> CResult<Option<Tensor>> {
        let (batch, new) = step.tokens.dims2()?;
        let last_tokens: Vec<u32> = if step.want_logits {
            (1..=batch).map(|row| (row * new - 1) as u32).collect()
        } else {
            Vec::new()
        };
        let xs = self.uniform_hidden_states(step, cache, Wanted::Rows(&last_tokens))?;
        if !step.want_logits {
            return Ok(None);
        }
        self.logits(&xs.squeeze(0)?).map(Some)
    }

    /// Like [`forward`](Self::forward) but returns the logits after every new token,
    /// `(batch, new, vocab)`: what scoring a given text needs.
    pub fn forward_all_logits(&self, step: &Step, cache: &mut [LayerCache]) -> CResult<Tensor> {
        let xs = self.uniform_hidden_states(step, cache, Wanted::All)?;
        self.logits(&xs)
    }

    /// Whether a token's keys and values are the same whatever else its prefill pass holds
    /// (see [`Linear::rows_independent`]): only then may a prompt copy them from another
    /// call's pass (`shared_prefill`'s kept prompt) without changing its numbers.
    pub(super) fn prefill_rows_independent(&self) -> bool {
        self.layers.iter().all(|layer| {
            layer.qkv.rows_independent()
                && layer.o.rows_independent()
                && layer.mlp_in.rows_independent()
                && layer.down.rows_independent()
        })
    }

    /// Final norm, LM head and soft-cap, in f32.
    pub(super) fn logits(&self, hidden: &Tensor) -> CResult<Tensor> {
        let normed = self.final_norm.forward(hidden)?;
        let mut logits = self.lm_head.forward(&normed)?;
        if let Some(cap) = self.spec.final_softcap {
            logits = ((logits / cap)?.tanh()? * cap)?;
        }
        logits.to_dtype(DType::F32)
    }

    /// [`hidden_states`](Self::hidden_states) for a [`Step`]: every sequence writes its new
    /// keys and values at the step's slot and attends under the step's masks.
    fn uniform_hidden_states(
        &self,
        step: &Step,
        cache: &mut [LayerCache],
        wanted: Wanted,
    ) -> CResult<Tensor> {
        // Grouped-query attention folds the query groups into rows: repeat the masks to
        // match once here rather than in every layer.
        let group = self.spec.num_heads / self.spec.num_kv_heads.max(1);
        let grouped = |mask: Option<&Tensor>| -> CResult<Option<Tensor>> {
            mask.map(|m| {
                if group > 1 {
                    m.repeat((1, 1, group, 1))
                } else {
                    Ok(m.clone())
                }
            })
            .transpose()
        };
        let full = grouped(step.masks.full.as_ref())?;
        let sliding = grouped(step.masks.sliding.as_ref())?;
        let (scale, softcap) = (self.spec.attn_scale, self.spec.attn_softcap);
        let mut attend = |call: LayerAttention| -> CResult<Tensor> {
            let mask = match call.window {
                Some(_) => sliding.as_ref(),
                None => full.as_ref(),
            };
            let (k, v) = call.cache.append(step.offset, call.k, call.v)?;
            attention(call.q, &k, &v, mask, scale, softcap, None)
        };
        self.hidden_states(step.tokens, step.positions, cache, &mut attend, wanted)
    }

    /// The last layer's output for the new tokens `(batch, new)`: `(batch, new, hidden)`
    /// for [`Wanted::All`], else `(1, wanted rows, hidden)` in the order asked (the last
    /// layer runs on those rows only where that changes no row's numbers, see
    /// [`Self::trims_last_layer`]; otherwise they are picked from its whole output);
    /// `attend` stores each layer's new keys and values in its cache and attends.
    pub(super) fn hidden_states(
        &self,
        tokens: &Tensor,
        positions: &[Vec<u32>],
        cache: &mut [LayerCache],
        attend: &mut Attend,
        wanted: Wanted,
    ) -> CResult<Tensor> {
        let (batch, new) = tokens.dims2()?;
        let ids = tokens.flatten_all()?;
        let rows = match &self.embed {
            Embedding::Dense(table) => table.index_select(&ids, 0)?,
            // Only the looked-up rows are expanded.
            Embedding::Quantized(table) => table.embedding(&ids)?.to_dtype(self.dtype)?,
        };
        let mut xs = rows.reshape((batch, new, self.spec.hidden_size))?;
        if self.spec.scale_embeddings {
            // transformers rounds the factor to the activation type first.
            let factor = (self.spec.hidden_size as f32).sqrt();
            xs = (xs * factor as f64)?;
        }
        let global_tables = self.spec.rope.tables(positions, &self.device, self.dtype)?;
        let local_tables = self
            .spec
            .local_rope
            .as_ref()
            .map(|rope| rope.tables(positions, &self.device, self.dtype))
            .transpose()?;
        // Every row in order needs no selection; a subset is kept in the last layer, or
        // picked from its output where trimming could change a row's numbers.
        let every_row = |rows: &[u32]| rows.iter().enumerate().all(|(i, &r)| r as usize == i);
        let indices = |rows: &[u32]| Tensor::from_slice(rows, rows.len(), &self.device);
        let (trimmed, picked) = match wanted {
            Wanted::Rows(rows) if rows.len() == batch * new && every_row(rows) => (None, None),
            Wanted::Rows(rows) if self.trims_last_layer() => (Some(indices(rows)?), None),
            Wanted::Rows(rows) => (None, Some(indices(rows)?)),
            Wanted::All => (None, None),
        };
        let last_layer = self.layers.len().saturating_sub(1);
        for (index, (layer, layer_cache)) in self.layers.iter().zip(cache.iter_mut()).enumerate() {
            let (rope, (cos, sin)) = match (layer.sliding_window, &local_tables) {
                (Some(_), Some(tables)) => (
                    self.spec.local_rope.as_ref().unwrap_or(&self.spec.rope),
                    tables,
                ),
                _ => (&self.spec.rope, &global_tables),
            };
            let rotary = RotaryTables { rope, cos, sin };
            let kept = trimmed.as_ref().filter(|_| index == last_layer);
            xs = self.layer_forward(index, layer, &xs, &rotary, layer_cache, attend, kept)?;
        }
        match (wanted, picked) {
            (Wanted::All, _) => Ok(xs),
            (Wanted::Rows(_), Some(rows)) => select_rows(&xs, &rows),
            // Trimmed, or every row in order.
            (Wanted::Rows(_), None) => xs.reshape((1, (), self.spec.hidden_size)),
        }
    }

    /// Whether the last layer may run its output projection and MLP on some rows only:
    /// where each row's product is the same whatever rows share the call, so the rows kept
    /// get the bits they would have had.
    fn trims_last_layer(&self) -> bool {
        self.layers.last().is_some_and(|layer| {
            layer.o.rows_independent()
                && layer.mlp_in.rows_independent()
                && layer.down.rows_independent()
        })
    }

    /// One layer over the new tokens; with `kept`, only those rows (of the `batch · new`)
    /// go on past the attention, and the output is `(1, kept, hidden)`.
    #[allow(clippy::too_many_arguments)]
    fn layer_forward(
        &self,
        index: usize,
        layer: &Layer,
        xs: &Tensor,
        rotary: &RotaryTables,
        cache: &mut LayerCache,
        attend: &mut Attend,
        kept: Option<&Tensor>,
    ) -> CResult<Tensor> {
        let spec = &self.spec;
        let (batch, new, _) = xs.dims3()?;
        let normed = match &layer.attn_norm {
            Some(norm) => norm.forward(xs)?,
            None => xs.clone(),
        };
        let qkv = layer.qkv.forward(&normed)?;
        // `(batch, new, n * head_dim)`, normed per head or over the whole projection first
        // where the architecture says so.
        let normed_heads = |t: &Tensor, n: usize, norm: Option<&Norm>| -> CResult<Tensor> {
            match (spec.qk_norm, norm) {
                (QkNorm::Whole, Some(norm)) => norm.forward(t),
                (QkNorm::PerHead, Some(norm)) => norm
                    .forward(&t.reshape((batch, new, n, spec.head_dim))?)?
                    .reshape((batch, new, n * spec.head_dim)),
                _ => Ok(t.clone()),
            }
        };
        // To `(batch, n, new, head_dim)`.
        let heads = |t: &Tensor, n: usize| -> CResult<Tensor> {
            t.reshape((batch, new, n, spec.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        // Rotated on the way to the head layout, else moved and then rotated.
        let rotated_heads = |t: &Tensor, n: usize, norm: Option<&Norm>| -> CResult<Tensor> {
            let t = normed_heads(t, n, norm)?;
            let (rope, cos, sin) = (rotary.rope, rotary.cos, rotary.sin);
            match rotate_into_heads(rope, &t, n, cos, sin)? {
                Some(rotated) => Ok(rotated),
                None => rope.apply(&heads(&t, n)?, cos, sin),
            }
        };
        let q = rotated_heads(&qkv[0], spec.num_heads, layer.q_norm.as_ref())?;
        let k = rotated_heads(&qkv[1], spec.num_kv_heads, layer.k_norm.as_ref())?;
        let v = heads(&qkv[2], spec.num_kv_heads)?;
        let attn = attend(LayerAttention {
            layer: index,
            window: layer.sliding_window,
            q: &q,
            k: &k,
            v: &v,
            cache,
        })?;
        let attn = attn
            .transpose(1, 2)?
            .reshape((batch, new, spec.num_heads * spec.head_dim))?;
        // Keys and values are stored: the rows nobody reads stop here.
        let only_kept = |t: &Tensor| -> CResult<Tensor> {
            match kept {
                Some(rows) => select_rows(t, rows),
                None => Ok(t.clone()),
            }
        };
        let (attn, xs) = (only_kept(&attn)?, only_kept(xs)?);
        if xs.dim(1)? == 0 {
            return Ok(xs);
        }
        let xs = &xs;
        let mut attn = layer.o.forward(&attn)?;
        if let Some(norm) = &layer.post_attn_norm {
            attn = norm.forward(&attn)?;
        }
        if spec.parallel_block {
            let mlp = self.mlp(layer, &only_kept(&normed)?)?;
            return (xs + attn)? + mlp;
        }
        let xs = (xs + attn)?;
        let normed = match &layer.ffn_norm {
            Some(norm) => norm.forward(&xs)?,
            None => xs.clone(),
        };
        let mut mlp = self.mlp(layer, &normed)?;
        if let Some(norm) = &layer.post_ffn_norm {
            mlp = norm.forward(&mlp)?;
        }
        xs + mlp
    }

    fn mlp(&self, layer: &Layer, xs: &Tensor) -> CResult<Tensor> {
        // SiLU- or GELU-gated with gate and up in one matmul, on CPU: one fused pass over
        // both halves (`tabcontam_kernels::activation`) instead of candle's three.
        let gate = match self.spec.activation {
            Activation::Silu => Some(Gate::Silu),
            Activation::GeluTanh => Some(Gate::GeluTanh),
            Activation::GeluErf | Activation::Relu => None,
        };
        if let Projection::Fused { linear, sizes } = &layer.mlp_in
            && self.spec.gated_mlp
            && let Some(gate) = gate
            && sizes.len() == 2
            && sizes[0] == sizes[1]
            && xs.device().is_cpu()
            && xs.dtype() == DType::F32
        {
            let joined = linear.forward(xs)?;
            let mut dims = joined.dims().to_vec();
            let hidden = sizes[0];
            let rows = joined.elem_count() / (2 * hidden);
            let product = with_f32_values(&joined, |values| {
                tabcontam_kernels::activation::gated(gate, values, rows, hidden)
            })?;
            *dims.last_mut().expect("a feature dim") = hidden;
            let hidden = Tensor::from_vec(product, dims, xs.device())?;
            return layer.down.forward(&hidden);
        }
        let inputs = layer.mlp_in.forward(xs)?;
        let hidden = if self.spec.gated_mlp {
            (self.spec.activation.apply(&inputs[0])? * &inputs[1])?
        } else {
            self.spec.activation.apply(&inputs[0])?
        };
        layer.down.forward(&hidden)
    }
}

/// Rows `rows` of a `(batch, new, width)` tensor's `batch · new`, as `(1, rows, width)`.
fn select_rows(t: &Tensor, rows: &Tensor) -> CResult<Tensor> {
    let (batch, new, width) = t.dims3()?;
    t.reshape((batch * new, width))?
        .index_select(rows, 0)?
        .unsqueeze(0)
}

#[cfg(test)]
mod tests;
