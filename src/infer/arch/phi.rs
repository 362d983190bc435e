//! Phi-2 (`model_type = "phi"`, GGUF `phi2`): LayerNorm, attention and MLP in parallel on
//! the same normed input, partial rotary embeddings, GELU MLP, biases everywhere.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, NormKind, TensorNames};
use crate::infer::layers::Activation;

/// `config.json` of phi checkpoints.
pub type Config = Common;

const HF_NAMES: TensorNames = TensorNames {
    final_norm: "model.final_layernorm",
    o: "model.layers.{i}.self_attn.dense",
    ffn_norm: None,
    up: "model.layers.{i}.mlp.fc1",
    down: "model.layers.{i}.mlp.fc2",
    ..TensorNames::HF_LLAMA
};

const GGUF_NAMES: TensorNames = TensorNames {
    ffn_norm: None,
    ..TensorNames::GGUF
};

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "phi".into();
    spec.norm = NormKind::Layer {
        eps: config.layer_norm_eps.unwrap_or(1e-5) as f32,
    };
    let factor = config.partial_rotary_factor.unwrap_or(0.5);
    spec.rope = config.rope((spec.head_dim as f64 * factor) as usize)?;
    spec.activation = config.activation("gelu_new")?;
    spec.gated_mlp = false;
    spec.parallel_block = true;
    spec.names = HF_NAMES;
    Ok(spec)
}

pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    let mut spec = hparams.base_spec(false);
    spec.norm = NormKind::Layer {
        eps: hparams.layer_norm_eps,
    };
    spec.activation = Activation::GeluTanh;
    spec.gated_mlp = false;
    spec.parallel_block = true;
    spec.names = GGUF_NAMES;
    spec
}
