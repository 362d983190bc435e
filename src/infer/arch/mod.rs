//! One file per architecture: each deserializes its `config.json` into a `Config` and turns
//! it (or GGUF metadata) into the shared decoder's [`DecoderSpec`]; T5 has its own model.

pub mod gemma;
pub mod gemma2;
pub mod gemma3;
pub mod llama;
pub mod mistral;
pub mod olmo2;
pub mod phi;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod t5;

use std::path::Path;

use serde::Deserialize;

use super::decoder_spec::{DecoderSpec, NormKind, QkNorm, TensorNames};
use super::error::{LocalError, SUPPORTED_GGUF_ARCHITECTURES, SUPPORTED_MODEL_TYPES};
use super::layers::{Activation, Rope};
use super::weights::GgufMetadata;

/// What a checkpoint's config describes.
pub enum Architecture {
    Decoder(Box<DecoderSpec>),
    T5(t5::Config),
}

/// Reads `config.json` and picks the architecture from its `model_type`.
pub fn from_config_file(path: &Path) -> Result<(Architecture, Vec<u32>), LocalError> {
    let text = std::fs::read_to_string(path).map_err(|e| LocalError::io(path, e))?;
    let bad = |detail: String| LocalError::BadConfig {
        path: path.to_path_buf(),
        detail,
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let model_type = json
        .get("model_type")
        .and_then(|v| v.as_str())
        .unwrap_or("(none)")
        .to_string();
    let parse = |json: &serde_json::Value| -> Result<_, LocalError> {
        Common::deserialize(json).map_err(|e| bad(e.to_string()))
    };
    let eos = eos_ids(&json);
    let arch = match model_type.as_str() {
        "llama" => Architecture::Decoder(Box::new(llama::spec(&parse(&json)?).map_err(bad)?)),
        "mistral" => Architecture::Decoder(Box::new(mistral::spec(&parse(&json)?).map_err(bad)?)),
        "gemma" => Architecture::Decoder(Box::new(gemma::spec(&parse(&json)?).map_err(bad)?)),
        "gemma2" => Architecture::Decoder(Box::new(gemma2::spec(&parse(&json)?).map_err(bad)?)),
        "gemma3_text" => {
            Architecture::Decoder(Box::new(gemma3::spec(&parse(&json)?).map_err(bad)?))
        }
        "phi" => Architecture::Decoder(Box::new(phi::spec(&parse(&json)?).map_err(bad)?)),
        "phi3" => Architecture::Decoder(Box::new(phi3::spec(&parse(&json)?).map_err(bad)?)),
        "qwen2" => Architecture::Decoder(Box::new(qwen2::spec(&parse(&json)?).map_err(bad)?)),
        "qwen3" => Architecture::Decoder(Box::new(qwen3::spec(&parse(&json)?).map_err(bad)?)),
        "olmo2" => Architecture::Decoder(Box::new(olmo2::spec(&parse(&json)?).map_err(bad)?)),
        "t5" => Architecture::T5(t5::Config::deserialize(&json).map_err(|e| bad(e.to_string()))?),
        other => {
            return Err(LocalError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                found: format!("model_type = \"{other}\""),
                supported: SUPPORTED_MODEL_TYPES,
            });
        }
    };
    Ok((arch, eos))
}

/// Builds the decoder spec from GGUF metadata (`general.architecture`).
pub fn from_gguf(
    path: &Path,
    meta: &GgufMetadata,
    embedding_rows: usize,
) -> Result<DecoderSpec, LocalError> {
    let arch = meta
        .string("general.architecture")
        .unwrap_or_else(|| "(none)".into());
    let gguf =
        GgufHparams::read(meta, &arch, embedding_rows).ok_or_else(|| LocalError::BadConfig {
            path: path.to_path_buf(),
            detail: format!(
                "GGUF metadata lacks {arch}.block_count, embedding_length or attention.head_count"
            ),
        })?;
    match arch.as_str() {
        "llama" | "mistral" => Ok(llama::from_gguf(&gguf)),
        "gemma" => Ok(gemma::from_gguf(&gguf)),
        "gemma2" => Ok(gemma2::from_gguf(&gguf, meta)),
        "gemma3" => Ok(gemma3::from_gguf(&gguf, meta)),
        "phi2" => Ok(phi::from_gguf(&gguf)),
        "phi3" => Ok(phi3::from_gguf(&gguf)),
        "qwen2" => Ok(qwen2::from_gguf(&gguf)),
        "qwen3" => Ok(qwen3::from_gguf(&gguf)),
        "olmo2" => Ok(olmo2::from_gguf(&gguf)),
        other => Err(LocalError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            found: format!("general.architecture = \"{other}\""),
            supported: SUPPORTED_GGUF_ARCHITECTURES,
        }),
    }
}

/// The `config.json` fields the decoder architectures share (each file reads the ones it
/// uses; names and defaults follow transformers).
#[derive(Debug, Clone, Deserialize)]
pub struct Common {
    pub vocab_size: usize,
    pub hidden_size: usize,
    #[serde(default)]
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    #[serde(default)]
    pub rms_norm_eps: Option<f64>,
    #[serde(default)]
    pub layer_norm_eps: Option<f64>,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// transformers ≥ 5 writes `rope_theta` and scaling here.
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub rope_scaling: Option<serde_json::Value>,
    #[serde(default)]
    pub partial_rotary_factor: Option<f64>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub hidden_activation: Option<String>,
    #[serde(default)]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// Qwen2/Qwen3: `sliding_window` applies only when this is true.
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
    /// Qwen2/Qwen3: the first layer that slides (without `layer_types`).
    #[serde(default)]
    pub max_window_layers: Option<usize>,
    #[serde(default)]
    pub query_pre_attn_scalar: Option<f64>,
    /// Gemma 3: rotary base of the sliding-window layers (transformers 4).
    #[serde(default)]
    pub rope_local_base_freq: Option<f64>,
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
}

impl Common {
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    pub fn activation(&self, default: &str) -> Result<Activation, String> {
        let name = self.hidden_act.as_deref().unwrap_or(default);
        Activation::parse(name).ok_or_else(|| format!("unsupported activation `{name}`"))
    }

    fn rope_parameter(&self, key: &str) -> Option<&serde_json::Value> {
        self.rope_parameters.as_ref().and_then(|p| p.get(key))
    }

    /// Rotary embedding from `rope_theta` and `rope_scaling` (or transformers 5's
    /// `rope_parameters`); `rotary_dim` is the rotated part of each head.
    pub fn rope(&self, rotary_dim: usize) -> Result<Rope, String> {
        let theta = self
            .rope_theta
            .or_else(|| self.rope_parameter("rope_theta").and_then(|v| v.as_f64()))
            .unwrap_or(10_000.0);
        let mut rope = Rope::new(theta as f32, rotary_dim, false);
        let scaling = self.rope_scaling.as_ref().or(self.rope_parameters.as_ref());
        let Some(scaling) = scaling.filter(|s| s.is_object()) else {
            return Ok(rope);
        };
        let kind = scaling
            .get("rope_type")
            .or_else(|| scaling.get("type"))
            .and_then(|v| v.as_str())
            .unwrap_or("default");
        let number = |key: &str, default: f64| {
            scaling.get(key).and_then(|v| v.as_f64()).unwrap_or(default) as f32
        };
        match kind {
            "default" => {}
            "linear" => rope.scale_linear(number("factor", 1.0)),
            "llama3" => rope.scale_llama3(
                number("factor", 8.0),
                number("low_freq_factor", 1.0),
                number("high_freq_factor", 4.0),
                number("original_max_position_embeddings", 8192.0),
            ),
            other => {
                return Err(format!(
                    "rope scaling `{other}` is not supported (default, linear, llama3 are)"
                ));
            }
        }
        Ok(rope)
    }
}

/// `eos_token_id` of a config: a number, a list, or absent.
pub fn eos_ids(json: &serde_json::Value) -> Vec<u32> {
    match json.get("eos_token_id") {
        Some(serde_json::Value::Number(n)) => {
            n.as_u64().map(|n| vec![n as u32]).unwrap_or_default()
        }
        Some(serde_json::Value::Array(ids)) => ids
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|n| n as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// Hyper-parameters every GGUF architecture stores under `{arch}.*`.
pub struct GgufHparams {
    pub arch: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_eps: f32,
    pub layer_norm_eps: f32,
    pub rope_theta: f32,
    pub rotary_dim: usize,
}

impl GgufHparams {
    fn read(meta: &GgufMetadata, arch: &str, embedding_rows: usize) -> Option<Self> {
        let hidden_size = meta.arch_u32(arch, "embedding_length")? as usize;
        let num_heads = meta.arch_u32(arch, "attention.head_count")? as usize;
        let head_dim = meta
            .arch_u32(arch, "attention.key_length")
            .map_or(hidden_size / num_heads, |d| d as usize);
        Some(GgufHparams {
            arch: arch.to_string(),
            vocab_size: meta
                .arch_u32(arch, "vocab_size")
                .map_or(embedding_rows, |v| v as usize),
            hidden_size,
            num_layers: meta.arch_u32(arch, "block_count")? as usize,
            num_heads,
            num_kv_heads: meta
                .arch_u32(arch, "attention.head_count_kv")
                .map_or(num_heads, |v| v as usize),
            head_dim,
            rms_eps: meta
                .arch_f32(arch, "attention.layer_norm_rms_epsilon")
                .unwrap_or(1e-5),
            layer_norm_eps: meta
                .arch_f32(arch, "attention.layer_norm_epsilon")
                .unwrap_or(1e-5),
            rope_theta: meta.arch_f32(arch, "rope.freq_base").unwrap_or(10_000.0),
            rotary_dim: meta
                .arch_u32(arch, "rope.dimension_count")
                .map_or(head_dim, |v| v as usize),
        })
    }

    /// The spec fields common to every GGUF decoder; architecture files adjust the rest.
    pub fn base_spec(&self, interleaved_rope: bool) -> DecoderSpec {
        DecoderSpec {
            arch: format!("GGUF {}", self.arch),
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            num_layers: self.num_layers,
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            norm: NormKind::Rms { eps: self.rms_eps },
            norm_unit_offset: false,
            rope: Rope::new(self.rope_theta, self.rotary_dim, interleaved_rope),
            local_rope: None,
            activation: Activation::Silu,
            gated_mlp: true,
            parallel_block: false,
            scale_embeddings: false,
            attn_scale: 1.0 / (self.head_dim as f64).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            qk_norm: QkNorm::None,
            sliding_window: vec![None; self.num_layers],
            names: TensorNames::GGUF,
        }
    }
}
