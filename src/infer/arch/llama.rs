//! Llama 2 / 3 / 3.1 and SmolLM2 (`model_type = "llama"`, GGUF `llama`): RMSNorm,
//! rotary embeddings (with Llama 3.1 scaling), grouped-query attention, SwiGLU MLP.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, NormKind, QkNorm, TensorNames};

/// `config.json` of llama checkpoints (the shared fields; see [`Common`]).
pub type Config = Common;

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let head_dim = config.head_dim();
    Ok(DecoderSpec {
        arch: "llama".into(),
        vocab_size: config.vocab_size,
        hidden_size: config.hidden_size,
        num_layers: config.num_hidden_layers,
        num_heads: config.num_attention_heads,
        num_kv_heads: config.kv_heads(),
        head_dim,
        norm: NormKind::Rms {
            eps: config.rms_norm_eps.unwrap_or(1e-6) as f32,
        },
        norm_unit_offset: false,
        rope: config.rope(head_dim)?,
        local_rope: None,
        activation: config.activation("silu")?,
        gated_mlp: true,
        parallel_block: false,
        scale_embeddings: false,
        attn_scale: 1.0 / (head_dim as f64).sqrt(),
        attn_softcap: None,
        final_softcap: None,
        qk_norm: QkNorm::None,
        sliding_window: vec![None; config.num_hidden_layers],
        names: TensorNames::HF_LLAMA,
    })
}

/// llama.cpp permuted the q/k rows of llama checkpoints so that rotary embeddings rotate
/// adjacent pairs: hence the interleaved rope.
pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    hparams.base_spec(true)
}
