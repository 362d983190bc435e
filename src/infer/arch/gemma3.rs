//! Gemma 3 text models (`model_type = "gemma3_text"`, GGUF `gemma3`, e.g. Gemma 3 270M and
//! the checkpoints `tabcontam contaminate` trains from it): Gemma 2's block with per-head
//! RMSNorm on queries and keys, five sliding-window layers for every global one, a separate
//! rotary base on the sliding layers, and no logit soft-capping.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, QkNorm, TensorNames};
use crate::infer::layers::Rope;
use crate::infer::weights::GgufMetadata;

/// Every sixth layer attends globally, the other five through the sliding window
/// (llama.cpp's `set_swa_pattern(6)`, transformers' `sliding_window_pattern = 6`).
const SLIDING_WINDOW_PATTERN: usize = 6;

/// Rotary base of the sliding-window layers: transformers' `rope_local_base_freq`; llama.cpp
/// does not store it in the GGUF file and uses this value.
const LOCAL_ROPE_BASE: f32 = 10_000.0;

/// Rotary base of the global layers when a `config.json` states none (transformers'
/// `Gemma3TextConfig` default).
const GLOBAL_ROPE_BASE: f64 = 1_000_000.0;

/// `config.json` of gemma3_text checkpoints.
pub type Config = Common;

/// Gemma 2's Hugging Face names; the query/key norms keep the shared `self_attn.q_norm`.
const HF_NAMES: TensorNames = super::gemma2::HF_NAMES;

/// From `config.json`: transformers 4 writes `rope_theta` and `rope_local_base_freq`,
/// transformers 5 one `rope_parameters` entry per attention kind.
pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::gemma2::spec(config)?;
    spec.arch = "gemma3_text".into();
    spec.names = HF_NAMES;
    spec.qk_norm = QkNorm::PerHead;
    let per_kind = |kind: &str| {
        config
            .rope_parameters
            .as_ref()
            .and_then(|p| p.get(kind))
            .filter(|p| p.is_object())
    };
    let theta = |kind: &str| per_kind(kind).and_then(|p| p.get("rope_theta")?.as_f64());
    // Without `rope_theta` the shared parser fell back to llama's base; Gemma 3's global
    // layers use transformers 5's `full_attention` entry, else transformers' 1 000 000.
    if config.rope_theta.is_none() {
        if let Some(kind) = per_kind("full_attention")
            .and_then(|p| p.get("rope_type")?.as_str())
            .filter(|k| *k != "default")
        {
            return Err(format!(
                "rope scaling `{kind}` of Gemma 3's global layers is not supported"
            ));
        }
        let global = theta("full_attention").unwrap_or(GLOBAL_ROPE_BASE);
        spec.rope = Rope::new(global as f32, spec.head_dim, false);
    }
    let local = config
        .rope_local_base_freq
        .or_else(|| theta("sliding_attention"))
        .unwrap_or(LOCAL_ROPE_BASE as f64);
    spec.local_rope = Some(Rope::new(local as f32, spec.head_dim, false));
    if config.layer_types.is_none() {
        spec.sliding_window = (0..config.num_hidden_layers)
            .map(|i| {
                if is_sliding(i) {
                    config.sliding_window
                } else {
                    None
                }
            })
            .collect();
    }
    Ok(spec)
}

const GGUF_NAMES: TensorNames = TensorNames {
    q_norm: "blk.{i}.attn_q_norm",
    k_norm: "blk.{i}.attn_k_norm",
    post_attn_norm: Some("blk.{i}.post_attention_norm"),
    post_ffn_norm: Some("blk.{i}.post_ffw_norm"),
    ..TensorNames::GGUF
};

/// Whether layer `index` uses the sliding window.
fn is_sliding(index: usize) -> bool {
    index % SLIDING_WINDOW_PATTERN < SLIDING_WINDOW_PATTERN - 1
}

pub fn from_gguf(hparams: &GgufHparams, meta: &GgufMetadata) -> DecoderSpec {
    let mut spec = super::gemma::from_gguf(hparams);
    let arch = &hparams.arch;
    spec.names = GGUF_NAMES;
    spec.qk_norm = QkNorm::PerHead;
    // Larger Gemma 3 checkpoints stretch the global layers' positions linearly.
    let linear = meta.string(&format!("{arch}.rope.scaling.type")).as_deref() == Some("linear");
    if let Some(factor) = meta
        .arch_f32(arch, "rope.scaling.factor")
        .filter(|_| linear)
    {
        spec.rope.scale_linear(factor);
    }
    let local_base = meta
        .arch_f32(arch, "rope.freq_base_swa")
        .unwrap_or(LOCAL_ROPE_BASE);
    spec.local_rope = Some(Rope::new(local_base, hparams.rotary_dim, false));
    let window = meta
        .arch_u32(arch, "attention.sliding_window")
        .map(|w| w as usize);
    spec.sliding_window = (0..hparams.num_layers)
        .map(|i| if is_sliding(i) { window } else { None })
        .collect();
    // llama.cpp: Gemma 3 27B (62 layers) scales queries by hidden / heads, the others by
    // head_dim (`query_pre_attn_scalar`).
    if hparams.num_layers == 62 {
        spec.attn_scale = 1.0 / ((hparams.hidden_size / hparams.num_heads) as f64).sqrt();
    }
    spec.attn_softcap = None;
    spec.final_softcap = meta
        .arch_f32(arch, "final_logit_softcapping")
        .map(f64::from);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_sliding_layers_for_each_global_one() {
        let global: Vec<usize> = (0..18).filter(|&i| !is_sliding(i)).collect();
        assert_eq!(global, vec![5, 11, 17]);
    }
}
