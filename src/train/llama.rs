//! The llama family (Llama 2/3, SmolLM2) and Gemma 3 as a differentiable network: every
//! weight a candle `Var`, the forward pass candle matmuls and the fused differentiable ops of
//! `ops.rs` (the composed llama forward pass of plain candle ops kept as the tests'
//! reference; Gemma 3's reference is the engine); with LoRA (`lora.rs`) every weight frozen
//! and adapters trained beside chosen projections.
//!
//! Gemma 3 is the llama block plus `(1 + w)` norms, embeddings scaled by `sqrt(hidden)`,
//! per-head query/key norms, norms after attention and around the MLP, a tanh-GELU gate,
//! its own query scale and a second rotary base on its sliding-window layers
//! (`gemma3_config.rs`).
//!
//! Weights come from a safetensors folder (Hugging Face names) or a GGUF file (llama.cpp
//! names, dequantized to f32); GGUF llama q/k rows were permuted by llama.cpp for its
//! interleaved rotary embedding, and are permuted back here, and GGUF Gemma norms hold
//! `1 + w`, from which 1 is taken back, so that training and the saved checkpoint use the
//! Hugging Face layout that `backend = "local"` loads from safetensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use serde_json::Value;

use super::TrainError;
use super::attention::{attention, sliding_attention};
use super::linear::{GradSink, Precision, trained_linear};
pub use super::llama_config::LlamaConfig;
use super::llama_config::unpermute_rows;
use super::lora::{Adapters, LoraSettings, LoraTarget, adapted_linear};
use super::ops;
use crate::infer::files::{ModelFiles, WeightFormat};
use crate::infer::weights::Weights;

/// Gemma 3's extra norms of one layer (stored as `w` of `x · (1 + w)`).
struct GemmaNorms {
    q_norm: Var,
    k_norm: Var,
    post_attn_norm: Var,
    post_ffn_norm: Var,
}

/// Hugging Face names of a layer's nine llama weights and, for Gemma 3, its four extra
/// norms (Gemma's `post_attention_layernorm` follows attention; llama's precedes the MLP).
fn layer_names(i: usize, gemma: bool) -> ([String; 9], Option<[String; 4]>) {
    let p = format!("model.layers.{i}");
    let ffn_norm = if gemma {
        "pre_feedforward_layernorm"
    } else {
        "post_attention_layernorm"
    };
    let main = [
        "input_layernorm",
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        ffn_norm,
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ]
    .map(|n| format!("{p}.{n}.weight"));
    let extra = gemma.then(|| {
        [
            "self_attn.q_norm",
            "self_attn.k_norm",
            "post_attention_layernorm",
            "post_feedforward_layernorm",
        ]
        .map(|n| format!("{p}.{n}.weight"))
    });
    (main, extra)
}

/// llama.cpp's names of the same weights, in the same order.
fn gguf_layer_names(i: usize, gemma: bool) -> ([String; 9], Option<[String; 4]>) {
    let main = [
        "attn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_norm",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ]
    .map(|n| format!("blk.{i}.{n}.weight"));
    let extra = gemma.then(|| {
        [
            "attn_q_norm",
            "attn_k_norm",
            "post_attention_norm",
            "post_ffw_norm",
        ]
        .map(|n| format!("blk.{i}.{n}.weight"))
    });
    (main, extra)
}

/// The weights of one layer as read from a file: the nine llama weights, and Gemma's norms.
type LayerTensors = ([Tensor; 9], Option<[Tensor; 4]>);

/// The trainable weights of one decoder layer.
struct Layer {
    attn_norm: Var,
    q: Var,
    k: Var,
    v: Var,
    o: Var,
    ffn_norm: Var,
    gate: Var,
    up: Var,
    down: Var,
    gemma: Option<GemmaNorms>,
    /// Where each projection's weight gradient lands (`linear.rs`), by [`LoraTarget`].
    sinks: [GradSink; 7],
}

impl Layer {
    fn sink(&self, target: LoraTarget) -> &GradSink {
        &self.sinks[target.index()]
    }

    fn projection(&self, target: LoraTarget) -> &Var {
        match target {
            LoraTarget::Q => &self.q,
            LoraTarget::K => &self.k,
            LoraTarget::V => &self.v,
            LoraTarget::O => &self.o,
            LoraTarget::Gate => &self.gate,
            LoraTarget::Up => &self.up,
            LoraTarget::Down => &self.down,
        }
    }
}

/// A llama network: every weight trainable, or (with [`LlamaTrainer::with_lora`]) every
/// weight frozen and LoRA adapters trained beside chosen projections.
pub struct LlamaTrainer {
    pub config: LlamaConfig,
    embed: Var,
    /// `None` when tied to the embeddings.
    lm_head: Option<Var>,
    /// Where the embeddings' and an untied head's gradients land (`embedding.rs`).
    embed_sink: GradSink,
    head_sink: GradSink,
    final_norm: Var,
    layers: Vec<Layer>,
    lora: Option<Adapters>,
    /// The arithmetic of the projections and the output head.
    precision: Precision,
}

impl LlamaTrainer {
    /// Loads the model at `path` (a safetensors folder or a GGUF file) in f32 on CPU.
    pub fn load(files: &ModelFiles) -> Result<Self, TrainError> {
        let device = Device::Cpu;
        let candle = |context: String| move |source| TrainError::Candle { context, source };
        match &files.format {
            WeightFormat::Safetensors { config, shards } => {
                let text =
                    std::fs::read_to_string(config).map_err(|e| TrainError::io(config, e))?;
                let json: Value =
                    serde_json::from_str(&text).map_err(|e| TrainError::BadModel {
                        path: config.clone(),
                        detail: e.to_string(),
                    })?;
                let config = LlamaConfig::from_hf_json(config, &json)?;
                let mut weights = Weights::open_safetensors(shards, &device, DType::F32)?;
                let mut get = |name: &str| weights.tensor(name);
                let embed = get("model.embed_tokens.weight")?;
                let lm_head = if config.tie_embeddings {
                    None
                } else {
                    Some(get("lm_head.weight")?)
                };
                let final_norm = get("model.norm.weight")?;
                let mut layers = Vec::with_capacity(config.num_layers);
                for i in 0..config.num_layers {
                    let (main, extra) = layer_names(i, config.gemma3.is_some());
                    layers.push(read_layer(main, extra, |name, _| Ok(get(name)?))?);
                }
                Self::from_tensors(config, embed, lm_head, final_norm, layers)
            }
            WeightFormat::Gguf(path) => {
                let (mut weights, meta) = Weights::open_gguf(path, &device, DType::F32)?;
                weights.dequantize = true;
                let embed = weights.tensor("token_embd.weight")?;
                let mut config = LlamaConfig::from_gguf(path, &meta, embed.dim(0).unwrap_or(0))?;
                let lm_head = weights.optional_tensor("output.weight")?;
                config.tie_embeddings = lm_head.is_none();
                let gemma = config.gemma3.is_some();
                // llama.cpp stores Gemma's norms as `1 + w`; the trainer keeps `w`.
                let norm = |name: &str, t: Tensor| -> Result<Tensor, TrainError> {
                    if gemma {
                        (t - 1.0).map_err(candle(format!("reading {name}")))
                    } else {
                        Ok(t)
                    }
                };
                let final_norm = norm("output_norm", weights.tensor("output_norm.weight")?)?;
                let mut layers = Vec::with_capacity(config.num_layers);
                for i in 0..config.num_layers {
                    let (main, extra) = gguf_layer_names(i, gemma);
                    let mut layer = read_layer(main, extra, |name, is_norm| {
                        let t = weights.tensor(name)?;
                        if is_norm { norm(name, t) } else { Ok(t) }
                    })?;
                    if !gemma {
                        // llama.cpp permuted llama's q/k rows for its interleaved rotary
                        // embedding (Gemma uses the halves layout and was left alone).
                        let [_, q, k, ..] = &mut layer.0;
                        *q = unpermute_rows(q, config.num_heads)
                            .map_err(candle(format!("un-permuting blk.{i}.attn_q")))?;
                        *k = unpermute_rows(k, config.num_kv_heads)
                            .map_err(candle(format!("un-permuting blk.{i}.attn_k")))?;
                    }
                    layers.push(layer);
                }
                Self::from_tensors(config, embed, lm_head, final_norm, layers)
            }
        }
    }

    fn from_tensors(
        config: LlamaConfig,
        embed: Tensor,
        lm_head: Option<Tensor>,
        final_norm: Tensor,
        layers: Vec<LayerTensors>,
    ) -> Result<Self, TrainError> {
        let var = |t: Tensor| {
            Var::from_tensor(&t).map_err(|source| TrainError::Candle {
                context: "making the weights trainable".into(),
                source,
            })
        };
        let layers = layers
            .into_iter()
            .map(
                |([attn_norm, q, k, v, o, ffn_norm, gate, up, down], extra)| {
                    let gemma = match extra {
                        Some([q_norm, k_norm, post_attn_norm, post_ffn_norm]) => Some(GemmaNorms {
                            q_norm: var(q_norm)?,
                            k_norm: var(k_norm)?,
                            post_attn_norm: var(post_attn_norm)?,
                            post_ffn_norm: var(post_ffn_norm)?,
                        }),
                        None => None,
                    };
                    Ok(Layer {
                        attn_norm: var(attn_norm)?,
                        q: var(q)?,
                        k: var(k)?,
                        v: var(v)?,
                        o: var(o)?,
                        ffn_norm: var(ffn_norm)?,
                        gate: var(gate)?,
                        up: var(up)?,
                        down: var(down)?,
                        gemma,
                        sinks: Default::default(),
                    })
                },
            )
            .collect::<Result<Vec<_>, TrainError>>()?;
        Ok(LlamaTrainer {
            embed: var(embed)?,
            lm_head: lm_head.map(var).transpose()?,
            embed_sink: GradSink::default(),
            head_sink: GradSink::default(),
            final_norm: var(final_norm)?,
            layers,
            config,
            lora: None,
            precision: Precision::F32,
        })
    }

    /// Multiplies the projections and the output head in `precision` (f32 by default).
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The arithmetic of the projections and the output head.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Freezes every weight and puts seeded LoRA adapters beside the chosen projections.
    pub fn with_lora(mut self, settings: LoraSettings, seed: u64) -> Result<Self, TrainError> {
        settings.check(self.config.hidden_size)?;
        let layers = &self.layers;
        let adapters = Adapters::new(settings, layers.len(), seed, |i, target| {
            let dims = layers[i].projection(target).dims();
            (dims[0], dims[1])
        })?;
        self.lora = Some(adapters);
        Ok(self)
    }

    /// A base weight as the forward pass uses it: tracked when trained, detached (no
    /// gradient asked of any op) when frozen under LoRA.
    fn weight(&self, var: &Var) -> Tensor {
        match self.lora {
            None => var.as_tensor().clone(),
            Some(_) => var.as_tensor().detach(),
        }
    }

    /// A norm's weight as it multiplies: `1 + w` for Gemma, `w` for llama.
    fn norm_weight(&self, var: &Var) -> candle_core::Result<Tensor> {
        let w = self.weight(var);
        match self.config.gemma3 {
            Some(_) => w + 1.0,
            None => Ok(w),
        }
    }

    /// RMSNorm of `(…, dim)` rows over their last dimension.
    fn norm(&self, xs: &Tensor, var: &Var) -> candle_core::Result<Tensor> {
        let dims = xs.dims().to_vec();
        let dim = *dims.last().expect("a norm's input has dimensions");
        let rows = xs.reshape(((), dim))?;
        ops::rms_norm(&rows, &self.norm_weight(var)?, self.config.rms_eps)?.reshape(dims)
    }

    /// `h Wᵀ` for one projection of layer `i`, plus its adapter's share under LoRA; the
    /// weight's gradient goes to `stream`'s slot of its sink.
    fn project(
        &self,
        h: &Tensor,
        i: usize,
        target: LoraTarget,
        stream: usize,
    ) -> candle_core::Result<Tensor> {
        let layer = &self.layers[i];
        let w = layer.projection(target);
        let Some(lora) = &self.lora else {
            return trained_linear(h, w, &layer.sink(target).on(stream), self.precision);
        };
        match lora.get(i, target) {
            Some(adapter) => adapted_linear(
                h,
                w.as_tensor(),
                adapter.a.as_tensor(),
                adapter.b.as_tensor(),
                lora.settings.scale(),
                self.precision,
            ),
            None => ops::frozen_linear(h, w.as_tensor(), self.precision),
        }
    }

    /// What the optimizer updates (and the resume state keeps): every weight, or under
    /// LoRA the adapters only.
    pub fn trainable_vars(&self) -> Vec<(String, &Var)> {
        match &self.lora {
            None => self.named_vars(),
            Some(lora) => lora.named_vars(),
        }
    }

    /// The adapters, when training with LoRA.
    pub fn lora(&self) -> Option<&Adapters> {
        self.lora.as_ref()
    }

    /// Every weight under its Hugging Face name.
    pub fn named_vars(&self) -> Vec<(String, &Var)> {
        let mut vars = vec![
            ("model.embed_tokens.weight".to_string(), &self.embed),
            ("model.norm.weight".to_string(), &self.final_norm),
        ];
        if let Some(head) = &self.lm_head {
            vars.push(("lm_head.weight".to_string(), head));
        }
        for (i, l) in self.layers.iter().enumerate() {
            let (main, extra) = layer_names(i, l.gemma.is_some());
            let weights = [
                &l.attn_norm,
                &l.q,
                &l.k,
                &l.v,
                &l.o,
                &l.ffn_norm,
                &l.gate,
                &l.up,
                &l.down,
            ];
            vars.extend(main.into_iter().zip(weights));
            if let (Some(names), Some(g)) = (extra, &l.gemma) {
                let norms = [&g.q_norm, &g.k_norm, &g.post_attn_norm, &g.post_ffn_norm];
                vars.extend(names.into_iter().zip(norms));
            }
        }
        vars
    }

    /// The trainable variables (see [`Self::trainable_vars`]).
    pub fn vars(&self) -> Vec<Var> {
        self.trainable_vars()
            .into_iter()
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn parameter_count(&self) -> usize {
        self.named_vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    pub fn trainable_count(&self) -> usize {
        self.trainable_vars()
            .iter()
            .map(|(_, v)| v.elem_count())
            .sum()
    }

    /// Writes `model.safetensors` (under LoRA the adapters merged into the base weights,
    /// and the adapters alone in [`super::lora::ADAPTER_FILE`]) and `config.json` into
    /// `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        let candle = |path: &Path| {
            let context = format!("writing {}", path.display());
            move |source| TrainError::Candle { context, source }
        };
        let weights = dir.join(super::CHECKPOINT_WEIGHTS);
        let mut tensors: HashMap<String, Tensor> = self
            .named_vars()
            .into_iter()
            .map(|(name, var)| (name, var.as_tensor().clone()))
            .collect();
        if let Some(lora) = &self.lora {
            for (i, layer) in self.layers.iter().enumerate() {
                for target in LoraTarget::ALL {
                    if let Some(adapter) = lora.get(i, target) {
                        let name = format!("model.layers.{i}.{}.weight", target.module());
                        let merged = lora
                            .merged(adapter, layer.projection(target).as_tensor())
                            .map_err(candle(&weights))?;
                        tensors.insert(name, merged);
                    }
                }
            }
            let adapter_path = dir.join(super::lora::ADAPTER_FILE);
            let adapters: HashMap<String, Tensor> = lora
                .named_vars()
                .into_iter()
                .map(|(name, var)| (name, var.as_tensor().clone()))
                .collect();
            candle_core::safetensors::save(&adapters, &adapter_path)
                .map_err(candle(&adapter_path))?;
        }
        candle_core::safetensors::save(&tensors, &weights).map_err(candle(&weights))?;
        let config = dir.join("config.json");
        let text = serde_json::to_string_pretty(&self.config.to_hf_json()).expect("json");
        std::fs::write(&config, text).map_err(|e| TrainError::io(&config, e))
    }

    /// Mean next-token cross-entropy of `ids` (`batch × (seq + 1)` token ids, as u32)
    /// over the positions where `weights` (`batch × seq`, 1.0 or 0.0) is 1.
    pub fn loss(&self, ids: &Tensor, weights: &Tensor) -> candle_core::Result<Tensor> {
        self.loss_on(0, ids, weights)
    }

    /// [`LlamaTrainer::loss`] as stream `stream` ([`super::streams`]): its backward pass
    /// leaves the weight gradients in that stream's slots of the sinks.
    pub fn loss_on(
        &self,
        stream: usize,
        ids: &Tensor,
        weights: &Tensor,
    ) -> candle_core::Result<Tensor> {
        // A new forward pass starts new weight gradients: forget any no backward pass took.
        let layer_sinks = self.layers.iter().flat_map(|l| &l.sinks);
        for sink in layer_sinks.chain([&self.embed_sink, &self.head_sink]) {
            sink.on(stream).clear();
        }
        let (_, len) = ids.dims2()?;
        let seq = len - 1;
        let inputs = ids.narrow(1, 0, seq)?;
        let targets = ids.narrow(1, 1, seq)?.flatten_all()?.to_vec1::<u32>()?;
        let weights = weights
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let count = weights.iter().sum::<f32>();
        let hidden = self.hidden(&inputs, stream)?;
        let (head, sink) = match &self.lm_head {
            Some(head) => (head, &self.head_sink),
            None => (&self.embed, &self.embed_sink),
        };
        let sink = self.lora.is_none().then(|| sink.on(stream));
        let sink = sink.as_ref();
        let head = self.weight(head);
        ops::head_cross_entropy(
            &hidden,
            &head,
            targets,
            weights,
            count,
            self.precision,
            sink,
        )
    }

    /// The gradients of `loss` (a [`LlamaTrainer::loss`] of this model) for every trainable
    /// weight: candle's backward pass, and the weight gradients that the projections', the
    /// head's and the embeddings' ops left in their sinks (`linear.rs`, `embedding.rs`).
    pub fn backward(&self, loss: &Tensor) -> candle_core::Result<GradStore> {
        let mut grads = loss.backward()?;
        self.drain_sinks(&mut grads)?;
        Ok(grads)
    }

    /// Moves the weight gradients the ops left in the sinks (every stream's, summed) into
    /// `grads`, added to any candle computed for the same weight.
    pub fn drain_sinks(&self, grads: &mut GradStore) -> candle_core::Result<()> {
        let projections = self.layers.iter().flat_map(|layer| {
            LoraTarget::ALL.map(|target| (layer.projection(target), layer.sink(target)))
        });
        let ends = [(&self.embed, &self.embed_sink)]
            .into_iter()
            .chain(self.lm_head.as_ref().map(|head| (head, &self.head_sink)));
        for (var, sink) in projections.chain(ends) {
            let Some(grad) = sink.take(var.shape())? else {
                continue;
            };
            let total = match grads.get(var.as_tensor()) {
                Some(earlier) => (earlier + grad)?,
                None => grad,
            };
            grads.insert(var.as_tensor(), total);
        }
        Ok(())
    }

    /// The final hidden state (after the last norm) of every position, `(batch * seq,
    /// hidden)`, through the fused ops of [`ops`].
    fn hidden(&self, inputs: &Tensor, stream: usize) -> candle_core::Result<Tensor> {
        let (batch, seq) = inputs.dims2()?;
        let c = &self.config;
        let scale = match c.gemma3 {
            Some(_) => (c.hidden_size as f32).sqrt(),
            None => 1.0,
        };
        let ids = inputs.flatten_all()?.to_vec1::<u32>()?;
        let sink = self.lora.is_none().then(|| self.embed_sink.on(stream));
        // (batch * seq, hidden)
        let mut xs =
            super::embedding::lookup(&self.weight(&self.embed), ids, scale, sink.as_ref())?;
        let rope = ops::Rope::new(seq, c.head_dim, c.rope_theta);
        let local_rope = c
            .gemma3
            .as_ref()
            .map(|g| ops::Rope::new(seq, c.head_dim, g.local_rope_theta));
        let scale = match &c.gemma3 {
            Some(g) => 1.0 / g.query_pre_attn_scalar.sqrt(),
            None => 1.0 / (c.head_dim as f64).sqrt(),
        };
        for (i, layer) in self.layers.iter().enumerate() {
            let h = self.norm(&xs, &layer.attn_norm)?;
            let sliding = c.gemma3.as_ref().is_some_and(|g| g.sliding[i]);
            let rope = match (&local_rope, sliding) {
                (Some(local), true) => local,
                _ => &rope,
            };
            // Rotated in the `(batch, seq, heads, dim)` layout the projection writes, which
            // the attention op reads as it is (`attention.rs`). Grouped-query attention:
            // each kv head serves `heads / kv_heads` query heads.
            let mut q = self.project(&h, i, LoraTarget::Q, stream)?.reshape((
                batch,
                seq,
                c.num_heads,
                c.head_dim,
            ))?;
            let mut k = self.project(&h, i, LoraTarget::K, stream)?.reshape((
                batch,
                seq,
                c.num_kv_heads,
                c.head_dim,
            ))?;
            if let Some(g) = &layer.gemma {
                q = self.norm(&q, &g.q_norm)?;
                k = self.norm(&k, &g.k_norm)?;
            }
            let q = ops::rope(&q, rope)?;
            let k = ops::rope(&k, rope)?;
            let v = self.project(&h, i, LoraTarget::V, stream)?.reshape((
                batch,
                seq,
                c.num_kv_heads,
                c.head_dim,
            ))?;
            // A window no longer than the slide sees what causal attention sees.
            let kv_heads = c.num_kv_heads;
            let attended = match &c.gemma3 {
                Some(g) if sliding && seq > g.sliding_window => {
                    sliding_attention(&q, &k, &v, kv_heads, scale, g.sliding_window)?
                }
                _ => attention(&q, &k, &v, kv_heads, scale)?,
            };
            let mut attended = self.project(&attended, i, LoraTarget::O, stream)?;
            if let Some(g) = &layer.gemma {
                attended = self.norm(&attended, &g.post_attn_norm)?;
            }
            xs = (xs + attended)?;
            let h = self.norm(&xs, &layer.ffn_norm)?;
            let gate = self.project(&h, i, LoraTarget::Gate, stream)?;
            let up = self.project(&h, i, LoraTarget::Up, stream)?;
            // Gemma's gate is the tanh GELU, llama's the SiLU.
            let gated = match layer.gemma {
                Some(_) => ops::Gated::GeGlu,
                None => ops::Gated::SwiGlu,
            };
            let down = match self
                .lora
                .as_ref()
                .and_then(|l| Some((l, l.get(i, LoraTarget::Down)?)))
            {
                // An adapted down projection needs the product itself as its input.
                Some((lora, adapter)) => adapted_linear(
                    &gated.apply(&gate, &up)?,
                    layer.down.as_tensor(),
                    adapter.a.as_tensor(),
                    adapter.b.as_tensor(),
                    lora.settings.scale(),
                    self.precision,
                )?,
                None if self.lora.is_some() => {
                    ops::gated_down(gated, &gate, &up, &self.weight(&layer.down), self.precision)?
                }
                None => ops::gated_down_into(
                    gated,
                    &gate,
                    &up,
                    &layer.down,
                    &layer.sink(LoraTarget::Down).on(stream),
                    self.precision,
                )?,
            };
            let down = match &layer.gemma {
                Some(g) => self.norm(&down, &g.post_ffn_norm)?,
                None => down,
            };
            xs = (xs + down)?;
        }
        self.norm(&xs, &self.final_norm)
    }
}

/// Reads one layer's tensors by name; `get` learns whether a tensor is a norm.
fn read_layer(
    main: [String; 9],
    extra: Option<[String; 4]>,
    mut get: impl FnMut(&str, bool) -> Result<Tensor, TrainError>,
) -> Result<LayerTensors, TrainError> {
    const MAIN_NORMS: [usize; 2] = [0, 5];
    let mut read = |names: &[String], norm: &dyn Fn(usize) -> bool| {
        names
            .iter()
            .enumerate()
            .map(|(j, name)| get(name, norm(j)))
            .collect::<Result<Vec<_>, _>>()
    };
    let main: [Tensor; 9] = read(&main, &|j| MAIN_NORMS.contains(&j))?
        .try_into()
        .expect("nine weights");
    let extra = match extra {
        Some(names) => Some(read(&names, &|_| true)?.try_into().expect("four norms")),
        None => None,
    };
    Ok((main, extra))
}

#[cfg(test)]
mod tests;
