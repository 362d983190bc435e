//! What an architecture file says about its decoder: sizes, norms, rotary embeddings,
//! attention and MLP variants ([`DecoderSpec`]) and where its tensors are named
//! ([`TensorNames`]); `decoder.rs` loads and runs any model described this way.

use super::layers::{Activation, Rope};

/// Everything that distinguishes one decoder architecture from another.
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    /// `model_type` / `general.architecture`, for messages.
    pub arch: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub norm: NormKind,
    /// Gemma stores `w` for a norm computing `x * (1 + w)`; GGUF files already hold `1 + w`.
    pub norm_unit_offset: bool,
    pub rope: Rope,
    /// Rotary embedding of the sliding-window layers when it differs from `rope` (Gemma 3:
    /// base 10 000 locally, 1 000 000 on the global layers).
    pub local_rope: Option<Rope>,
    pub activation: Activation,
    /// `down(act(gate(x)) * up(x))` (llama…) or `down(act(up(x)))` (phi).
    pub gated_mlp: bool,
    /// Attention and MLP read the same normed input and are added together (phi).
    pub parallel_block: bool,
    /// Multiply embeddings by `sqrt(hidden)` (gemma).
    pub scale_embeddings: bool,
    pub attn_scale: f64,
    pub attn_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
    /// RMSNorm of queries and keys before rotary embeddings (qwen3, olmo2).
    pub qk_norm: QkNorm,
    /// Sliding-window size per layer (mistral: all layers, gemma2: every other layer).
    pub sliding_window: Vec<Option<usize>>,
    pub names: TensorNames,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    Rms { eps: f32 },
    Layer { eps: f32 },
}

/// Where queries and keys are normalized, after their projection and before rope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    None,
    /// Over each head's `head_dim` features, one weight shared by the heads (qwen3).
    PerHead,
    /// Over the whole projection, `heads * head_dim` weights (olmo2).
    Whole,
}

/// Tensor name prefixes (without `.weight`/`.bias`); `{i}` stands for the layer index.
#[derive(Debug, Clone)]
pub struct TensorNames {
    pub embed: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
    /// Norm before attention; `None` where the block normalizes outputs instead (olmo2).
    pub attn_norm: Option<&'static str>,
    /// Fused `[q; k; v]` projection, tried before the separate ones.
    pub qkv: Option<&'static str>,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    /// Query and key norms, read when the spec's `qk_norm` is not `None`.
    pub q_norm: &'static str,
    pub k_norm: &'static str,
    pub post_attn_norm: Option<&'static str>,
    pub ffn_norm: Option<&'static str>,
    pub post_ffn_norm: Option<&'static str>,
    /// Fused `[gate; up]` projection (phi3), tried before the separate ones.
    pub gate_up: Option<&'static str>,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
}

impl TensorNames {
    /// Hugging Face names of the llama family (llama, mistral, gemma, gemma2, phi3, qwen2,
    /// qwen3, olmo2).
    pub const HF_LLAMA: TensorNames = TensorNames {
        embed: "model.embed_tokens",
        final_norm: "model.norm",
        lm_head: "lm_head",
        attn_norm: Some("model.layers.{i}.input_layernorm"),
        qkv: None,
        q: "model.layers.{i}.self_attn.q_proj",
        k: "model.layers.{i}.self_attn.k_proj",
        v: "model.layers.{i}.self_attn.v_proj",
        o: "model.layers.{i}.self_attn.o_proj",
        q_norm: "model.layers.{i}.self_attn.q_norm",
        k_norm: "model.layers.{i}.self_attn.k_norm",
        post_attn_norm: None,
        ffn_norm: Some("model.layers.{i}.post_attention_layernorm"),
        post_ffn_norm: None,
        gate_up: None,
        gate: "model.layers.{i}.mlp.gate_proj",
        up: "model.layers.{i}.mlp.up_proj",
        down: "model.layers.{i}.mlp.down_proj",
    };

    /// llama.cpp names, shared by every GGUF architecture.
    pub const GGUF: TensorNames = TensorNames {
        embed: "token_embd",
        final_norm: "output_norm",
        lm_head: "output",
        attn_norm: Some("blk.{i}.attn_norm"),
        qkv: Some("blk.{i}.attn_qkv"),
        q: "blk.{i}.attn_q",
        k: "blk.{i}.attn_k",
        v: "blk.{i}.attn_v",
        o: "blk.{i}.attn_output",
        q_norm: "blk.{i}.attn_q_norm",
        k_norm: "blk.{i}.attn_k_norm",
        post_attn_norm: None,
        ffn_norm: Some("blk.{i}.ffn_norm"),
        post_ffn_norm: None,
        gate_up: None,
        gate: "blk.{i}.ffn_gate",
        up: "blk.{i}.ffn_up",
        down: "blk.{i}.ffn_down",
    };
}

pub(super) fn layer_name(template: &str, layer: usize) -> String {
    template.replace("{i}", &layer.to_string())
}
