//! Qwen3 (`model_type = "qwen3"`, GGUF `qwen3`): the Qwen2 block without query/key/value
//! biases, with an RMSNorm over each head of the queries and keys (`q_norm`, `k_norm`)
//! before rotary embeddings, and a `head_dim` that need not be hidden / heads.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, QkNorm};

/// `config.json` of qwen3 checkpoints.
pub type Config = Common;

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::qwen2::spec(config)?;
    spec.arch = "qwen3".into();
    spec.qk_norm = QkNorm::PerHead;
    Ok(spec)
}

/// `{arch}.attention.key_length` gives the head size; rope rotates halves (NeoX style).
pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    let mut spec = hparams.base_spec(false);
    spec.qk_norm = QkNorm::PerHead;
    spec
}
