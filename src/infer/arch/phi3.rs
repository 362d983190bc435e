//! Phi-3 (`model_type = "phi3"`, GGUF `phi3`): the llama block with fused `qkv_proj` and
//! `gate_up_proj` projections.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, TensorNames};

/// `config.json` of phi3 checkpoints.
pub type Config = Common;

const HF_NAMES: TensorNames = TensorNames {
    qkv: Some("model.layers.{i}.self_attn.qkv_proj"),
    gate_up: Some("model.layers.{i}.mlp.gate_up_proj"),
    ..TensorNames::HF_LLAMA
};

/// llama.cpp keeps Phi-3's fused gate/up projection under the `ffn_up` name.
const GGUF_NAMES: TensorNames = TensorNames {
    gate_up: Some("blk.{i}.ffn_up"),
    ..TensorNames::GGUF
};

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "phi3".into();
    let factor = config.partial_rotary_factor.unwrap_or(1.0);
    spec.rope = config.rope((spec.head_dim as f64 * factor) as usize)?;
    spec.norm = crate::infer::decoder_spec::NormKind::Rms {
        eps: config.rms_norm_eps.unwrap_or(1e-5) as f32,
    };
    // Phi-3-mini-4k attends within a 2047-token window.
    spec.sliding_window = vec![config.sliding_window; config.num_hidden_layers];
    spec.names = HF_NAMES;
    Ok(spec)
}

pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    let mut spec = hparams.base_spec(false);
    spec.names = GGUF_NAMES;
    spec
}
