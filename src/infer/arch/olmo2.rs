//! OLMo 2 (`model_type = "olmo2"`, GGUF `olmo2`): the llama block with no norm before
//! attention or MLP but one after each (`post_attention_layernorm`,
//! `post_feedforward_layernorm`, applied to the branch before the residual add), and an
//! RMSNorm over the whole projected queries and keys (not per head) before rope.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, NormKind, QkNorm, TensorNames};

/// `config.json` of olmo2 checkpoints.
pub type Config = Common;

const HF_NAMES: TensorNames = TensorNames {
    attn_norm: None,
    post_attn_norm: Some("model.layers.{i}.post_attention_layernorm"),
    ffn_norm: None,
    post_ffn_norm: Some("model.layers.{i}.post_feedforward_layernorm"),
    ..TensorNames::HF_LLAMA
};

const GGUF_NAMES: TensorNames = TensorNames {
    attn_norm: None,
    post_attn_norm: Some("blk.{i}.post_attention_norm"),
    ffn_norm: None,
    post_ffn_norm: Some("blk.{i}.post_ffw_norm"),
    ..TensorNames::GGUF
};

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "olmo2".into();
    spec.norm = NormKind::Rms {
        eps: config.rms_norm_eps.unwrap_or(1e-5) as f32,
    };
    spec.qk_norm = QkNorm::Whole;
    spec.names = HF_NAMES;
    Ok(spec)
}

/// llama.cpp converts OLMo 2 without permuting q/k rows: rope rotates halves (NeoX style).
pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    let mut spec = hparams.base_spec(false);
    spec.qk_norm = QkNorm::Whole;
    spec.names = GGUF_NAMES;
    spec
}
