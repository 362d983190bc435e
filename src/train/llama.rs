//! The llama family (Llama 2/3, SmolLM2) as a differentiable network: every weight a candle
//! `Var`, the forward pass candle matmuls and the fused differentiable ops of `ops.rs` (the
//! composed forward pass of plain candle ops kept as the tests' reference); with LoRA
//! (`lora.rs`) every weight frozen and adapters trained beside chosen projections.
//!
//! Weights come from a safetensors folder (Hugging Face names) or a GGUF file (llama.cpp
//! names, dequantized to f32); GGUF q/k rows were permuted by llama.cpp for its
//! interleaved rotary embedding, and are permuted back here, so that training and the saved
//! checkpoint use the Hugging Face layout that `backend = "local"` loads from safetensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use serde_json::Value;

use super::TrainError;
pub use super::llama_config::LlamaConfig;
use super::llama_config::unpermute_rows;
use super::lora::{Adapters, LoraSettings, LoraTarget};
use super::ops;
use crate::infer::files::{ModelFiles, WeightFormat};
use crate::infer::weights::Weights;

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
}

impl Layer {
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
    final_norm: Var,
    layers: Vec<Layer>,
    lora: Option<Adapters>,
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
                    let p = format!("model.layers.{i}");
                    layers.push([
                        get(&format!("{p}.input_layernorm.weight"))?,
                        get(&format!("{p}.self_attn.q_proj.weight"))?,
                        get(&format!("{p}.self_attn.k_proj.weight"))?,
                        get(&format!("{p}.self_attn.v_proj.weight"))?,
                        get(&format!("{p}.self_attn.o_proj.weight"))?,
                        get(&format!("{p}.post_attention_layernorm.weight"))?,
                        get(&format!("{p}.mlp.gate_proj.weight"))?,
                        get(&format!("{p}.mlp.up_proj.weight"))?,
                        get(&format!("{p}.mlp.down_proj.weight"))?,
                    ]);
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
                let final_norm = weights.tensor("output_norm.weight")?;
                let mut layers = Vec::with_capacity(config.num_layers);
                for i in 0..config.num_layers {
                    let mut get = |name: &str| weights.tensor(&format!("blk.{i}.{name}.weight"));
                    let q = get("attn_q")?;
                    let k = get("attn_k")?;
                    let q = unpermute_rows(&q, config.num_heads)
                        .map_err(candle(format!("un-permuting blk.{i}.attn_q")))?;
                    let k = unpermute_rows(&k, config.num_kv_heads)
                        .map_err(candle(format!("un-permuting blk.{i}.attn_k")))?;
                    layers.push([
                        get("attn_norm")?,
                        q,
                        k,
                        get("attn_v")?,
                        get("attn_output")?,
                        get("ffn_norm")?,
                        get("ffn_gate")?,
                        get("ffn_up")?,
                        get("ffn_down")?,
                    ]);
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
        layers: Vec<[Tensor; 9]>,
    ) -> Result<Self, TrainError> {
        let var = |t: Tensor| {
            Var::from_tensor(&t).map_err(|source| TrainError::Candle {
                context: "making the weights trainable".into(),
                source,
            })
        };
        let layers = layers
            .into_iter()
            .map(|[attn_norm, q, k, v, o, ffn_norm, gate, up, down]| {
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
                })
            })
            .collect::<Result<Vec<_>, TrainError>>()?;
        Ok(LlamaTrainer {
            embed: var(embed)?,
            lm_head: lm_head.map(var).transpose()?,
            final_norm: var(final_norm)?,
            layers,
            config,
            lora: None,
        })
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

    /// `h Wᵀ` for one projection of layer `i`, plus its adapter's share under LoRA.
    fn project(&self, h: &Tensor, i: usize, target: LoraTarget) -> candle_core::Result<Tensor> {
        let w = self.layers[i].projection(target);
        let Some(lora) = &self.lora else {
            return linear(h, w);
        };
        let base = ops::frozen_linear(h, w.as_tensor())?;
        match lora.get(i, target) {
            Some(adapter) => base + lora.delta(adapter, h)?,
            None => Ok(base),
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
            let p = format!("model.layers.{i}");
            vars.extend([
                (format!("{p}.input_layernorm.weight"), &l.attn_norm),
                (format!("{p}.self_attn.q_proj.weight"), &l.q),
                (format!("{p}.self_attn.k_proj.weight"), &l.k),
                (format!("{p}.self_attn.v_proj.weight"), &l.v),
                (format!("{p}.self_attn.o_proj.weight"), &l.o),
                (format!("{p}.post_attention_layernorm.weight"), &l.ffn_norm),
                (format!("{p}.mlp.gate_proj.weight"), &l.gate),
                (format!("{p}.mlp.up_proj.weight"), &l.up),
                (format!("{p}.mlp.down_proj.weight"), &l.down),
            ]);
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
        let weights = dir.join("model.safetensors");
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
        let (_, len) = ids.dims2()?;
        let seq = len - 1;
        let inputs = ids.narrow(1, 0, seq)?;
        let targets = ids.narrow(1, 1, seq)?.flatten_all()?.to_vec1::<u32>()?;
        let weights = weights
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let count = weights.iter().sum::<f32>();
        let hidden = self.hidden(&inputs)?;
        let head = self.weight(self.lm_head.as_ref().unwrap_or(&self.embed));
        ops::head_cross_entropy(&hidden, &head, targets, weights, count)
    }

    /// The final hidden state (after the last norm) of every position, `(batch * seq,
    /// hidden)`, through the fused ops of [`ops`].
    fn hidden(&self, inputs: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq) = inputs.dims2()?;
        let c = &self.config;
        let mut xs = self
            .weight(&self.embed)
            .index_select(&inputs.flatten_all()?, 0)?; // (batch * seq, hidden)
        let rope = ops::Rope::new(seq, c.head_dim, c.rope_theta);
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        for (i, layer) in self.layers.iter().enumerate() {
            let h = ops::rms_norm(&xs, &self.weight(&layer.attn_norm), c.rms_eps)?;
            // Rotated in the `(batch, seq, heads, dim)` layout the projection writes; the
            // attention op moves them to head-major order itself (and does not keep the
            // copies). Grouped-query attention: each kv head serves `group` query heads,
            // which are folded into the query rows so k and v are never copied.
            let q = ops::rope(
                &self.project(&h, i, LoraTarget::Q)?.reshape((
                    batch,
                    seq,
                    c.num_heads,
                    c.head_dim,
                ))?,
                &rope,
            )?;
            let k = ops::rope(
                &self.project(&h, i, LoraTarget::K)?.reshape((
                    batch,
                    seq,
                    c.num_kv_heads,
                    c.head_dim,
                ))?,
                &rope,
            )?;
            let v = self
                .project(&h, i, LoraTarget::V)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let probs = ops::attention_probs(&q, &k, c.num_kv_heads, scale)?;
            let attended = probs
                .matmul(&v)?
                .reshape((batch, c.num_heads, seq, c.head_dim))?
                .transpose(1, 2)?
                .reshape((batch * seq, c.num_heads * c.head_dim))?;
            xs = (xs + self.project(&attended, i, LoraTarget::O)?)?;
            let h = ops::rms_norm(&xs, &self.weight(&layer.ffn_norm), c.rms_eps)?;
            let gate = self.project(&h, i, LoraTarget::Gate)?;
            let up = self.project(&h, i, LoraTarget::Up)?;
            let down = match self
                .lora
                .as_ref()
                .and_then(|l| Some((l, l.get(i, LoraTarget::Down)?)))
            {
                // An adapted down projection needs the product itself as its input.
                Some((lora, adapter)) => {
                    let gated = ops::swiglu(&gate, &up)?;
                    (ops::frozen_linear(&gated, layer.down.as_tensor())?
                        + lora.delta(adapter, &gated)?)?
                }
                None => ops::swiglu_down(&gate, &up, &self.weight(&layer.down))?,
            };
            xs = (xs + down)?;
        }
        ops::rms_norm(&xs, &self.weight(&self.final_norm), c.rms_eps)
    }

    /// The loss composed of plain candle ops (the forward pass before the fused ops), the
    /// reference the fused network is checked against.
    #[cfg(test)]
    fn composed_loss(&self, ids: &Tensor, weights: &Tensor) -> candle_core::Result<Tensor> {
        use ops::composed::*;
        let (batch, len) = ids.dims2()?;
        let seq = len - 1;
        let inputs = ids.narrow(1, 0, seq)?;
        let targets = ids.narrow(1, 1, seq)?.flatten_all()?;
        let c = &self.config;
        let mut xs = self
            .embed
            .as_tensor()
            .index_select(&inputs.flatten_all()?, 0)?;
        let (cos, sin) = rope_tables(seq, c.head_dim, c.rope_theta, &Device::Cpu)?;
        let mask = causal_mask(seq, &Device::Cpu)?;
        for layer in &self.layers {
            let h = rms_norm(&xs, layer.attn_norm.as_tensor(), c.rms_eps)?;
            let q = linear(&h, &layer.q)?
                .reshape((batch, seq, c.num_heads, c.head_dim))?
                .transpose(1, 2)?;
            let k = linear(&h, &layer.k)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?;
            let v = linear(&h, &layer.v)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let q = rotate(&q, &cos, &sin)?;
            let k = rotate(&k, &cos, &sin)?;
            let group = c.num_heads / c.num_kv_heads;
            let q = q.reshape((batch, c.num_kv_heads, group * seq, c.head_dim))?;
            let scores = (q.matmul(&k.t()?)? * (1.0 / (c.head_dim as f64).sqrt()))?
                .reshape((batch, c.num_kv_heads, group, seq, seq))?
                .broadcast_add(&mask)?;
            let probs = softmax(&scores)?.reshape((batch, c.num_kv_heads, group * seq, seq))?;
            let attended = probs
                .matmul(&v)?
                .reshape((batch, c.num_heads, seq, c.head_dim))?
                .transpose(1, 2)?
                .reshape((batch * seq, c.num_heads * c.head_dim))?;
            xs = (xs + linear(&attended, &layer.o)?)?;
            let h = rms_norm(&xs, layer.ffn_norm.as_tensor(), c.rms_eps)?;
            let gate = linear(&h, &layer.gate)?;
            let gated = (silu(&gate)? * linear(&h, &layer.up)?)?;
            xs = (xs + linear(&gated, &layer.down)?)?;
        }
        let xs = rms_norm(&xs, self.final_norm.as_tensor(), c.rms_eps)?;
        let logits = linear(&xs, self.lm_head.as_ref().unwrap_or(&self.embed))?;
        let picked = log_softmax(&logits)?
            .gather(&targets.unsqueeze(1)?, 1)?
            .squeeze(1)?
            .reshape((batch, seq))?;
        let weights = weights.to_dtype(DType::F32)?;
        let count = weights.sum_all()?.to_scalar::<f32>()?.max(1.0);
        (picked * weights)?
            .sum_all()?
            .affine(-1.0 / count as f64, 0.0)
    }
}

/// `x Wᵀ` over rows `(n, in)`.
fn linear(xs: &Tensor, w: &Var) -> candle_core::Result<Tensor> {
    xs.matmul(&w.as_tensor().t()?)
}

#[cfg(test)]
mod tests {
    use super::ops::composed::*;
    use super::*;

    /// The hand-written ops agree with candle's fused inference kernels.
    #[test]
    fn composed_ops_match_the_fused_kernels() {
        let device = Device::Cpu;
        let xs = Tensor::randn(0f32, 1.0, (3, 2, 5, 8), &device).unwrap();
        let close = |a: &Tensor, b: &Tensor| {
            let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap();
            diff.to_scalar::<f32>().unwrap()
        };
        let fused = candle_nn::ops::softmax_last_dim(&xs).unwrap();
        assert!(close(&softmax(&xs).unwrap(), &fused) < 1e-6);
        let w = Var::from_tensor(&Tensor::randn(0f32, 1.0, 8, &device).unwrap()).unwrap();
        let fused = candle_nn::ops::rms_norm(&xs, w.as_tensor(), 1e-6).unwrap();
        assert!(close(&rms_norm(&xs, w.as_tensor(), 1e-6).unwrap(), &fused) < 1e-5);
        assert!(close(&silu(&xs).unwrap(), &candle_nn::ops::silu(&xs).unwrap()) < 1e-6);
        // Rotary tables of the halves layout against candle's `rope` kernel.
        let half = 4;
        let cos = Tensor::randn(0f32, 1.0, (5, half), &device).unwrap();
        let sin = Tensor::randn(0f32, 1.0, (5, half), &device).unwrap();
        let fused = candle_nn::rotary_emb::rope(&xs, &cos, &sin).unwrap();
        let cos2 = Tensor::cat(&[&cos, &cos], 1).unwrap();
        let sin2 = Tensor::cat(&[&sin, &sin], 1).unwrap();
        assert!(close(&rotate(&xs, &cos2, &sin2).unwrap(), &fused) < 1e-5);
        let log = log_softmax(&xs).unwrap().exp().unwrap();
        assert!(close(&log, &softmax(&xs).unwrap()) < 1e-6);
    }

    /// A 2-layer network of random weights (tied embeddings, grouped-query attention).
    fn tiny_model() -> LlamaTrainer {
        let device = Device::Cpu;
        let config = LlamaConfig {
            vocab_size: 40,
            hidden_size: 16,
            intermediate_size: 24,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 4,
            rms_eps: 1e-5,
            rope_theta: 10_000.0,
            tie_embeddings: true,
            max_position_embeddings: 64,
            bos_token_id: None,
            eos_token_id: None,
        };
        let randn = |shape: &[usize], std: f32| Tensor::randn(0f32, std, shape, &device).unwrap();
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let layers = (0..config.num_layers)
            .map(|_| {
                [
                    (randn(&[h], 0.1) + 1.0).unwrap(),
                    randn(&[16, h], 0.3),
                    randn(&[8, h], 0.3),
                    randn(&[8, h], 0.3),
                    randn(&[h, 16], 0.3),
                    (randn(&[h], 0.1) + 1.0).unwrap(),
                    randn(&[i, h], 0.3),
                    randn(&[i, h], 0.3),
                    randn(&[h, i], 0.3),
                ]
            })
            .collect();
        LlamaTrainer::from_tensors(
            config,
            randn(&[40, h], 1.0),
            None,
            (randn(&[h], 0.1) + 1.0).unwrap(),
            layers,
        )
        .unwrap()
    }

    /// Token ids `(3, 10)` and loss weights `(3, 9)` with some positions out of the loss.
    fn tiny_batch() -> (Tensor, Tensor) {
        let device = Device::Cpu;
        let ids: Vec<u32> = (0..3 * 10).map(|i| (i * 13 % 40) as u32).collect();
        let ids = Tensor::from_vec(ids, (3, 10), &device).unwrap();
        let mut weights = vec![1f32; 3 * 9];
        weights[20..].fill(0.0);
        (ids, Tensor::from_vec(weights, (3, 9), &device).unwrap())
    }

    /// The network through the fused ops gives the loss and every weight's gradient of the
    /// network composed of plain candle ops (tied embeddings, grouped-query attention, some
    /// positions out of the loss).
    #[test]
    fn fused_network_matches_the_composed_one() {
        let model = tiny_model();
        let (ids, weights) = tiny_batch();
        let fused = model.loss(&ids, &weights).unwrap();
        let composed = model.composed_loss(&ids, &weights).unwrap();
        let (a, b) = (
            fused.to_scalar::<f32>().unwrap(),
            composed.to_scalar::<f32>().unwrap(),
        );
        assert!((a - b).abs() < 1e-4, "fused loss {a}, composed {b}");
        let (ga, gb) = (fused.backward().unwrap(), composed.backward().unwrap());
        for (name, var) in model.named_vars() {
            let (x, y) = (
                ga.get(var.as_tensor()).unwrap(),
                gb.get(var.as_tensor()).unwrap(),
            );
            let diff = (x - y).unwrap().abs().unwrap().max_all().unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            assert!(diff < 1e-4, "{name}: gradients differ by {diff}");
        }
    }

    /// Under LoRA (every projection adapted, B made non-zero) the loss is that of the
    /// merged weights, only the adapters get gradients, and an adapter's gradient is the
    /// loss's slope along it (central difference).
    #[test]
    fn lora_trains_adapters_only_and_merges_to_the_same_network() {
        let mut settings = LoraSettings::new(2);
        settings.targets = LoraTarget::ALL.to_vec();
        settings.alpha = 4.0;
        let model = tiny_model().with_lora(settings, 1).unwrap();
        let lora = model.lora().unwrap();
        for (_, var) in lora.named_vars() {
            if var.dims()[1] == 2 {
                var.set(&Tensor::randn(0f32, 0.3, var.dims(), &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        let (ids, weights) = tiny_batch();
        let loss = model.loss(&ids, &weights).unwrap();
        let dir = std::env::temp_dir().join(format!("tabcontam-lora-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        model.save(&dir).unwrap();
        let merged =
            candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
        let adapters = candle_core::safetensors::load(
            dir.join(super::super::lora::ADAPTER_FILE),
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(adapters.len(), 2 * 7 * 2);
        assert!(adapters.contains_key("model.layers.1.mlp.down_proj.lora_B.weight"));
        let layers = (0..2)
            .map(|i| {
                let get = |n: &str| merged[&format!("model.layers.{i}.{n}.weight")].clone();
                [
                    get("input_layernorm"),
                    get("self_attn.q_proj"),
                    get("self_attn.k_proj"),
                    get("self_attn.v_proj"),
                    get("self_attn.o_proj"),
                    get("post_attention_layernorm"),
                    get("mlp.gate_proj"),
                    get("mlp.up_proj"),
                    get("mlp.down_proj"),
                ]
            })
            .collect();
        let full = LlamaTrainer::from_tensors(
            model.config.clone(),
            merged["model.embed_tokens.weight"].clone(),
            None,
            merged["model.norm.weight"].clone(),
            layers,
        )
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let (a, b) = (
            loss.to_scalar::<f32>().unwrap(),
            full.loss(&ids, &weights)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap(),
        );
        assert!((a - b).abs() < 1e-4, "adapted {a}, merged {b}");

        let grads = loss.backward().unwrap();
        for (name, var) in model.named_vars() {
            assert!(
                grads.get(var.as_tensor()).is_none(),
                "{name} got a gradient"
            );
        }
        for (name, var) in model.trainable_vars() {
            assert!(
                grads.get(var.as_tensor()).is_some(),
                "{name} got no gradient"
            );
        }
        let (name, var) = &model.trainable_vars()[3];
        let grad = grads.get(var.as_tensor()).unwrap();
        let direction = Tensor::randn(0f32, 1.0, var.dims(), &Device::Cpu).unwrap();
        let slope = (grad * &direction)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let original = var.as_tensor().copy().unwrap();
        let at = |step: f64| {
            var.set(&(&original + (&direction * step).unwrap()).unwrap())
                .unwrap();
            model
                .loss(&ids, &weights)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap() as f64
        };
        // Richardson extrapolation of two central differences cancels their h² error: the
        // random network's third derivative alone put one plain difference 4 % off in CI.
        let central = |h: f64| (at(h) - at(-h)) / (2.0 * h);
        let h = 1e-2;
        let numeric = ((4.0 * central(h / 2.0) - central(h)) / 3.0) as f32;
        assert!(
            (numeric - slope).abs() < 2e-2 * slope.abs().max(1.0),
            "{name}: gradient slope {slope}, central difference {numeric}"
        );
    }
}
