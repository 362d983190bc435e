//! Gemma (`model_type = "gemma"`, GGUF `gemma`): the llama block with `(1 + w)` RMSNorm,
//! embeddings scaled by `sqrt(hidden)`, GeGLU MLP and tied embeddings.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::DecoderSpec;
use crate::infer::layers::Activation;

/// `config.json` of gemma checkpoints.
pub type Config = Common;

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "gemma".into();
    spec.norm_unit_offset = true;
    spec.scale_embeddings = true;
    // transformers' Gemma reads `hidden_activation` and falls back to the tanh GELU.
    let name = config
        .hidden_activation
        .as_deref()
        .unwrap_or("gelu_pytorch_tanh");
    spec.activation =
        Activation::parse(name).ok_or_else(|| format!("unsupported activation `{name}`"))?;
    Ok(spec)
}

/// llama.cpp stores Gemma's norm weights as `1 + w` already and keeps the halves rope.
pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    let mut spec = hparams.base_spec(false);
    spec.rope.interleaved = false;
    spec.scale_embeddings = true;
    spec.activation = Activation::GeluTanh;
    spec
}
