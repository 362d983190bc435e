//! The llama family (Llama 2/3, SmolLM2) as a differentiable network: every weight a candle
//! `Var`, the forward pass written with plain candle ops that have backward (matmul, exp,
//! sums, broadcasts, index_select), not the inference engine's fused kernels (`rms_norm`,
//! `softmax_last_dim`, `rope`), which have none.
//!
//! Weights come from a safetensors folder (Hugging Face names) or a GGUF file (llama.cpp
//! names, dequantized to f32); GGUF q/k rows were permuted by llama.cpp for its
//! interleaved rotary embedding, and are permuted back here, so that training and the saved
//! checkpoint use the Hugging Face layout that `backend = "local"` loads from safetensors.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use serde_json::{Value, json};

use super::TrainError;
use super::ops;
use crate::infer::files::{ModelFiles, WeightFormat};
use crate::infer::weights::{GgufMetadata, Weights};

/// The shape of a llama network.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    pub rope_theta: f64,
    pub tie_embeddings: bool,
    pub max_position_embeddings: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
}

impl LlamaConfig {
    /// `config.json` of the saved checkpoint (what the local engine's llama loader reads).
    pub fn to_hf_json(&self) -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_eps,
            "rope_theta": self.rope_theta,
            "hidden_act": "silu",
            "tie_word_embeddings": self.tie_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "float32",
        })
    }

    fn from_hf_json(path: &Path, json: &Value) -> Result<Self, TrainError> {
        let model_type = json["model_type"].as_str().unwrap_or("(none)");
        if model_type != "llama" {
            return Err(TrainError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: model_type.to_string(),
            });
        }
        if json.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err(TrainError::BadModel {
                path: path.to_path_buf(),
                detail: "rope_scaling is not supported by the trainer (plain rotary only)".into(),
            });
        }
        let size = |key: &str| -> Result<usize, TrainError> {
            json[key]
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| TrainError::BadModel {
                    path: path.to_path_buf(),
                    detail: format!("config.json lacks `{key}`"),
                })
        };
        let hidden_size = size("hidden_size")?;
        let num_heads = size("num_attention_heads")?;
        let first_id = |v: &Value| v.as_u64().or_else(|| v.get(0).and_then(Value::as_u64));
        Ok(LlamaConfig {
            vocab_size: size("vocab_size")?,
            hidden_size,
            intermediate_size: size("intermediate_size")?,
            num_layers: size("num_hidden_layers")?,
            num_heads,
            num_kv_heads: json["num_key_value_heads"]
                .as_u64()
                .map_or(num_heads, |v| v as usize),
            head_dim: json["head_dim"]
                .as_u64()
                .map_or(hidden_size / num_heads, |v| v as usize),
            rms_eps: json["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            rope_theta: json["rope_theta"].as_f64().unwrap_or(10_000.0),
            tie_embeddings: json["tie_word_embeddings"].as_bool().unwrap_or(false),
            max_position_embeddings: json["max_position_embeddings"].as_u64().unwrap_or(2048)
                as usize,
            bos_token_id: first_id(&json["bos_token_id"]).map(|v| v as u32),
            eos_token_id: first_id(&json["eos_token_id"]).map(|v| v as u32),
        })
    }

    fn from_gguf(
        path: &Path,
        meta: &GgufMetadata,
        embedding_rows: usize,
    ) -> Result<Self, TrainError> {
        let arch = meta.string("general.architecture").unwrap_or_default();
        if arch != "llama" {
            return Err(TrainError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: arch,
            });
        }
        let need = |key: &str| -> Result<usize, TrainError> {
            meta.arch_u32("llama", key)
                .map(|v| v as usize)
                .ok_or_else(|| TrainError::BadModel {
                    path: path.to_path_buf(),
                    detail: format!("GGUF metadata lacks llama.{key}"),
                })
        };
        let hidden_size = need("embedding_length")?;
        let num_heads = need("attention.head_count")?;
        Ok(LlamaConfig {
            vocab_size: embedding_rows,
            hidden_size,
            intermediate_size: need("feed_forward_length")?,
            num_layers: need("block_count")?,
            num_heads,
            num_kv_heads: meta
                .arch_u32("llama", "attention.head_count_kv")
                .map_or(num_heads, |v| v as usize),
            head_dim: meta
                .arch_u32("llama", "attention.key_length")
                .map_or(hidden_size / num_heads, |v| v as usize),
            rms_eps: meta
                .arch_f32("llama", "attention.layer_norm_rms_epsilon")
                .unwrap_or(1e-5) as f64,
            rope_theta: meta.arch_f32("llama", "rope.freq_base").unwrap_or(10_000.0) as f64,
            tie_embeddings: false,
            max_position_embeddings: meta.arch_u32("llama", "context_length").unwrap_or(2048)
                as usize,
            bos_token_id: meta.u32("tokenizer.ggml.bos_token_id"),
            eos_token_id: meta.u32("tokenizer.ggml.eos_token_id"),
        })
    }
}

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

/// A llama network whose weights are all trainable.
pub struct LlamaTrainer {
    pub config: LlamaConfig,
    embed: Var,
    /// `None` when tied to the embeddings.
    lm_head: Option<Var>,
    final_norm: Var,
    layers: Vec<Layer>,
}

/// llama.cpp's `permute` of q/k rows undone: `(heads, 2, half, in)` was stored as
/// `(heads, half, 2, in)`.
fn unpermute_rows(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    w.reshape((heads, rows / heads / 2, 2, cols))?
        .transpose(1, 2)?
        .reshape((rows, cols))
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
        })
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

    pub fn vars(&self) -> Vec<Var> {
        self.named_vars()
            .into_iter()
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn parameter_count(&self) -> usize {
        self.named_vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Writes `model.safetensors` and `config.json` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        let tensors: HashMap<String, Tensor> = self
            .named_vars()
            .into_iter()
            .map(|(name, var)| (name, var.as_tensor().clone()))
            .collect();
        let weights = dir.join("model.safetensors");
        candle_core::safetensors::save(&tensors, &weights).map_err(|source| {
            TrainError::Candle {
                context: format!("writing {}", weights.display()),
                source,
            }
        })?;
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
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        ops::head_cross_entropy(&hidden, head.as_tensor(), targets, weights, count)
    }

    /// The final hidden state (after the last norm) of every position, `(batch * seq,
    /// hidden)`, through the fused ops of [`ops`].
    fn hidden(&self, inputs: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq) = inputs.dims2()?;
        let c = &self.config;
        let mut xs = self
            .embed
            .as_tensor()
            .index_select(&inputs.flatten_all()?, 0)?; // (batch * seq, hidden)
        let rope = ops::Rope::new(seq, c.head_dim, c.rope_theta);
        let scale = 1.0 / (c.head_dim as f64).sqrt();
        for layer in &self.layers {
            let h = ops::rms_norm(&xs, layer.attn_norm.as_tensor(), c.rms_eps)?;
            // Rotated in the `(batch, seq, heads, dim)` layout the projection writes; the
            // attention op moves them to head-major order itself (and does not keep the
            // copies). Grouped-query attention: each kv head serves `group` query heads,
            // which are folded into the query rows so k and v are never copied.
            let q = ops::rope(
                &linear(&h, &layer.q)?.reshape((batch, seq, c.num_heads, c.head_dim))?,
                &rope,
            )?;
            let k = ops::rope(
                &linear(&h, &layer.k)?.reshape((batch, seq, c.num_kv_heads, c.head_dim))?,
                &rope,
            )?;
            let v = linear(&h, &layer.v)?
                .reshape((batch, seq, c.num_kv_heads, c.head_dim))?
                .transpose(1, 2)?
                .contiguous()?;
            let probs = ops::attention_probs(&q, &k, c.num_kv_heads, scale)?;
            let attended = probs
                .matmul(&v)?
                .reshape((batch, c.num_heads, seq, c.head_dim))?
                .transpose(1, 2)?
                .reshape((batch * seq, c.num_heads * c.head_dim))?;
            xs = (xs + linear(&attended, &layer.o)?)?;
            let h = ops::rms_norm(&xs, layer.ffn_norm.as_tensor(), c.rms_eps)?;
            let down = ops::swiglu_down(
                &linear(&h, &layer.gate)?,
                &linear(&h, &layer.up)?,
                layer.down.as_tensor(),
            )?;
            xs = (xs + down)?;
        }
        ops::rms_norm(&xs, self.final_norm.as_tensor(), c.rms_eps)
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

    /// The network through the fused ops gives the loss and every weight's gradient of the
    /// network composed of plain candle ops (tied embeddings, grouped-query attention, some
    /// positions out of the loss).
    #[test]
    fn fused_network_matches_the_composed_one() {
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
        let model = LlamaTrainer::from_tensors(
            config,
            randn(&[40, h], 1.0),
            None,
            (randn(&[h], 0.1) + 1.0).unwrap(),
            layers,
        )
        .unwrap();
        let ids: Vec<u32> = (0..3 * 10).map(|i| (i * 13 % 40) as u32).collect();
        let ids = Tensor::from_vec(ids, (3, 10), &device).unwrap();
        let mut weights = vec![1f32; 3 * 9];
        weights[20..].fill(0.0);
        let weights = Tensor::from_vec(weights, (3, 9), &device).unwrap();
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

    /// llama.cpp's permutation (as in convert_hf_to_gguf.py) undone gives the original.
    #[test]
    fn gguf_row_permutation_is_undone() {
        let device = Device::Cpu;
        let heads = 2;
        let w = Tensor::arange(0f32, 48.0, &device)
            .unwrap()
            .reshape((8, 6))
            .unwrap();
        let permuted = w
            .reshape((heads, 2, 2, 6))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .reshape((8, 6))
            .unwrap();
        let back = unpermute_rows(&permuted, heads).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), w.to_vec2::<f32>().unwrap());
    }
}
