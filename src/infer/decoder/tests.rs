//! The decoder's own checks on a tiny random llama: what trimming the last layer keeps.

use std::collections::HashMap;

use super::*;
use crate::infer::arch::llama;
use crate::infer::generate::{Layout, build_masks, token_tensor};
use crate::infer::weights::Quantize;

const VOCAB: usize = 96;

/// A three-layer llama with random weights (rows of 64 and 128: whole blocks, so
/// `quantize` applies to every projection).
fn tiny_llama(dir: &std::path::Path, quantize: Option<Quantize>) -> DecoderModel {
    let (hidden, inter, layers) = (64, 128, 3);
    let config: llama::Config = serde_json::from_value(serde_json::json!({
        "vocab_size": VOCAB, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0
    }))
    .unwrap();
    let random = |shape: &[usize]| Tensor::randn(0f32, 0.3, shape, &Device::Cpu).unwrap();
    let mut tensors = HashMap::new();
    tensors.insert(
        "model.embed_tokens.weight".to_string(),
        random(&[VOCAB, hidden]),
    );
    tensors.insert("lm_head.weight".to_string(), random(&[VOCAB, hidden]));
    let ones = Tensor::ones(hidden, DType::F32, &Device::Cpu).unwrap();
    tensors.insert("model.norm.weight".to_string(), ones.clone());
    for layer in 0..layers {
        let p = format!("model.layers.{layer}");
        for (name, shape) in [
            ("self_attn.q_proj", [hidden, hidden]),
            ("self_attn.k_proj", [hidden / 2, hidden]),
            ("self_attn.v_proj", [hidden / 2, hidden]),
            ("self_attn.o_proj", [hidden, hidden]),
            ("mlp.gate_proj", [inter, hidden]),
            ("mlp.up_proj", [inter, hidden]),
            ("mlp.down_proj", [hidden, inter]),
        ] {
            tensors.insert(format!("{p}.{name}.weight"), random(&shape));
        }
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            tensors.insert(format!("{p}.{norm}.weight"), ones.clone());
        }
    }
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).unwrap();
    let mut weights = Weights::open_safetensors(&[path], &Device::Cpu, DType::F32).unwrap();
    weights.quantize = quantize;
    DecoderModel::load(&mut weights, llama::spec(&config).unwrap()).unwrap()
}

/// Logits of each sequence's last token from `forward`, which trims the last layer to
/// those rows, are the bits of the untrimmed pass's last rows through the head, and both
/// leave the same keys and values in the cache: dense weights, and Q8_0 ones (int8
/// panels where the CPU has AVX-512 VNNI, otherwise untrimmed block products).
#[test]
fn trimming_the_last_layer_changes_no_logit_and_no_cached_key() {
    let dir = tempfile::tempdir().unwrap();
    for quantize in [None, Some(Quantize::Q8_0)] {
        let model = tiny_llama(dir.path(), quantize);
        // Rows are independent for dense weights on every path: the trim must run.
        assert!(quantize.is_some() || model.trims_last_layer());
        let (batch, new) = (3, 9);
        let rows: Vec<Vec<u32>> = (0..batch)
            .map(|b| {
                (0..new)
                    .map(|i| ((7 * b + 5 * i + 3) % VOCAB) as u32)
                    .collect()
            })
            .collect();
        let tokens = token_tensor(&rows, &Device::Cpu).unwrap();
        let positions: Vec<Vec<u32>> = vec![(0..new as u32).collect(); batch];
        let layouts = vec![
            Layout {
                prefix: new,
                pad: 0
            };
            batch
        ];
        let masks = build_masks(&layouts, 0..new, new, None, &Device::Cpu, DType::F32).unwrap();
        let step = Step {
            tokens: &tokens,
            positions: &positions,
            masks: &masks,
            offset: 0,
            want_logits: true,
        };
        let mut trimmed_cache = model.new_cache(batch, new).unwrap();
        let trimmed = model.forward(&step, &mut trimmed_cache).unwrap().unwrap();
        let mut full_cache = model.new_cache(batch, new).unwrap();
        let full = model
            .uniform_hidden_states(&step, &mut full_cache, Wanted::All)
            .unwrap();
        let full_last = full.narrow(1, new - 1, 1).unwrap().squeeze(1).unwrap();
        // The same rows through the head: only the last layer differs.
        let full_last = model.logits(&full_last).unwrap();
        assert_eq!(trimmed.dims(), &[batch, VOCAB]);
        assert_eq!(
            trimmed.to_vec2::<f32>().unwrap(),
            full_last.to_vec2::<f32>().unwrap(),
            "{quantize:?}"
        );
        for (a, b) in trimmed_cache.iter().zip(&full_cache) {
            let (ka, va) = a.row_view(1, 0..new).unwrap();
            let (kb, vb) = b.row_view(1, 0..new).unwrap();
            let values = |t: Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(values(ka), values(kb));
            assert_eq!(values(va), values(vb));
        }
        // A prefix pass asks for no logits: the last layer stops after its keys.
        let prefix_step = Step {
            want_logits: false,
            ..step
        };
        let mut prefix_cache = model.new_cache(batch, new).unwrap();
        assert!(
            model
                .forward(&prefix_step, &mut prefix_cache)
                .unwrap()
                .is_none()
        );
    }
}
