//! Gemma 2 (`model_type = "gemma2"`, GGUF `gemma2`): Gemma with norms after attention and
//! around the MLP, logit soft-capping, and sliding-window attention on every other layer.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, TensorNames};
use crate::infer::weights::GgufMetadata;

/// `config.json` of gemma2 checkpoints.
pub type Config = Common;

pub(super) const HF_NAMES: TensorNames = TensorNames {
    post_attn_norm: Some("model.layers.{i}.post_attention_layernorm"),
    ffn_norm: Some("model.layers.{i}.pre_feedforward_layernorm"),
    post_ffn_norm: Some("model.layers.{i}.post_feedforward_layernorm"),
    ..TensorNames::HF_LLAMA
};

const GGUF_NAMES: TensorNames = TensorNames {
    post_attn_norm: Some("blk.{i}.post_attention_norm"),
    post_ffn_norm: Some("blk.{i}.post_ffw_norm"),
    ..TensorNames::GGUF
};

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::gemma::spec(config)?;
    spec.arch = "gemma2".into();
    spec.names = HF_NAMES;
    let scalar = config.query_pre_attn_scalar.unwrap_or(spec.head_dim as f64);
    spec.attn_scale = 1.0 / scalar.sqrt();
    spec.attn_softcap = config.attn_logit_softcapping;
    spec.final_softcap = config.final_logit_softcapping;
    spec.sliding_window = (0..config.num_hidden_layers)
        .map(|i| {
            let sliding = match &config.layer_types {
                Some(types) => types.get(i).is_some_and(|t| t == "sliding_attention"),
                // transformers < 4.53: even layers slide.
                None => i % 2 == 0,
            };
            if sliding { config.sliding_window } else { None }
        })
        .collect();
    Ok(spec)
}

pub fn from_gguf(hparams: &GgufHparams, meta: &GgufMetadata) -> DecoderSpec {
    let mut spec = super::gemma::from_gguf(hparams);
    spec.names = GGUF_NAMES;
    let arch = &hparams.arch;
    spec.attn_softcap = meta.arch_f32(arch, "attn_logit_softcapping").map(f64::from);
    spec.final_softcap = meta
        .arch_f32(arch, "final_logit_softcapping")
        .map(f64::from);
    let window = meta
        .arch_u32(arch, "attention.sliding_window")
        .map(|w| w as usize);
    spec.sliding_window = (0..hparams.num_layers)
        .map(|i| if i % 2 == 0 { window } else { None })
        .collect();
    // llama.cpp: Gemma 2 27B (46 layers) scales queries by hidden / heads, the others by head_dim.
    if hparams.num_layers == 46 {
        spec.attn_scale = 1.0 / ((hparams.hidden_size / hparams.num_heads) as f64).sqrt();
    }
    spec
}
