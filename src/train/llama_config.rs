//! The decoder shape (`LlamaConfig`) as the trainer reads it: from a safetensors folder's
//! `config.json` or a GGUF file's `llama.*` / `gemma3.*` metadata, and written back as the
//! `config.json` of every checkpoint (what the local engine's loaders read); and the GGUF
//! q/k row order of llama files undone. Gemma 3's additions live in `gemma3_config.rs`.

use std::path::Path;

use candle_core::Tensor;
use serde_json::{Value, json};

use super::TrainError;
use super::gemma3_config::Gemma3Shape;
use crate::infer::weights::GgufMetadata;

/// The shape of a llama network, or of a Gemma 3 one (`gemma3` set).
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
    /// Gemma 3's norms, scaling and sliding layers; `None` for llama.
    pub gemma3: Option<Gemma3Shape>,
}

impl LlamaConfig {
    /// `config.json` of the saved checkpoint (what the local engine's llama loader reads).
    pub fn to_hf_json(&self) -> Value {
        let mut json = json!({
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
        });
        if let Some(gemma3) = &self.gemma3 {
            gemma3.extend_hf_json(&mut json);
        }
        json
    }

    pub(super) fn from_hf_json(path: &Path, json: &Value) -> Result<Self, TrainError> {
        let model_type = json["model_type"].as_str().unwrap_or("(none)");
        let is_gemma3 = model_type == "gemma3_text";
        if model_type != "llama" && !is_gemma3 {
            return Err(TrainError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: model_type.to_string(),
            });
        }
        if !is_gemma3 && json.get("rope_scaling").is_some_and(|v| !v.is_null()) {
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
        let num_layers = size("num_hidden_layers")?;
        let head_dim = json["head_dim"]
            .as_u64()
            .map_or(hidden_size / num_heads, |v| v as usize);
        let gemma3 = is_gemma3
            .then(|| Gemma3Shape::from_hf_json(path, json, head_dim, num_layers))
            .transpose()?;
        let default_theta = if is_gemma3 { 1_000_000.0 } else { 10_000.0 };
        Ok(LlamaConfig {
            vocab_size: size("vocab_size")?,
            hidden_size,
            intermediate_size: size("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads: json["num_key_value_heads"]
                .as_u64()
                .map_or(num_heads, |v| v as usize),
            head_dim,
            rms_eps: json["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            rope_theta: Gemma3Shape::hf_rope_theta(json).unwrap_or(default_theta),
            // Gemma ties its embeddings unless told otherwise; llama does not.
            tie_embeddings: json["tie_word_embeddings"].as_bool().unwrap_or(is_gemma3),
            max_position_embeddings: json["max_position_embeddings"].as_u64().unwrap_or(2048)
                as usize,
            bos_token_id: first_id(&json["bos_token_id"]).map(|v| v as u32),
            eos_token_id: first_id(&json["eos_token_id"]).map(|v| v as u32),
            gemma3,
        })
    }

    pub(super) fn from_gguf(
        path: &Path,
        meta: &GgufMetadata,
        embedding_rows: usize,
    ) -> Result<Self, TrainError> {
        let arch = meta.string("general.architecture").unwrap_or_default();
        if arch != "llama" && arch != "gemma3" {
            return Err(TrainError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: arch,
            });
        }
        let arch = arch.as_str();
        let need = |key: &str| -> Result<usize, TrainError> {
            meta.arch_u32(arch, key)
                .map(|v| v as usize)
                .ok_or_else(|| TrainError::BadModel {
                    path: path.to_path_buf(),
                    detail: format!("GGUF metadata lacks {arch}.{key}"),
                })
        };
        let hidden_size = need("embedding_length")?;
        let num_heads = need("attention.head_count")?;
        let num_layers = need("block_count")?;
        let head_dim = meta
            .arch_u32(arch, "attention.key_length")
            .map_or(hidden_size / num_heads, |v| v as usize);
        let gemma3 = (arch == "gemma3")
            .then(|| Gemma3Shape::from_gguf(path, meta, head_dim, num_layers))
            .transpose()?;
        Ok(LlamaConfig {
            vocab_size: embedding_rows,
            hidden_size,
            intermediate_size: need("feed_forward_length")?,
            num_layers,
            num_heads,
            num_kv_heads: meta
                .arch_u32(arch, "attention.head_count_kv")
                .map_or(num_heads, |v| v as usize),
            head_dim,
            rms_eps: meta
                .arch_f32(arch, "attention.layer_norm_rms_epsilon")
                .unwrap_or(1e-5) as f64,
            rope_theta: meta.arch_f32(arch, "rope.freq_base").unwrap_or(10_000.0) as f64,
            tie_embeddings: false,
            max_position_embeddings: meta.arch_u32(arch, "context_length").unwrap_or(2048) as usize,
            bos_token_id: meta.u32("tokenizer.ggml.bos_token_id"),
            eos_token_id: meta.u32("tokenizer.ggml.eos_token_id"),
            gemma3,
        })
    }
}

/// llama.cpp's `permute` of q/k rows undone: `(heads, 2, half, in)` was stored as
/// `(heads, half, 2, in)`.
pub(super) fn unpermute_rows(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    w.reshape((heads, rows / heads / 2, 2, cols))?
        .transpose(1, 2)?
        .reshape((rows, cols))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

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
