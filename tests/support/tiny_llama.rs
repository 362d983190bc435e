//! A tiny llama (2 layers, hidden 32, random weights, word-level tokenizer) written from
//! Rust, for tests that need a local model that loads and generates without downloads.
//! Shared by tests/local_inference.rs (engine checks) and tests that run it through
//! `tabcontam run` (tests/failures.rs).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::{Value, json};

pub const VOCAB: usize = 48;

/// Deterministic pseudo-random values (no RNG crate state shared with anything else).
pub fn values(count: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

pub fn word_tokenizer(vocab: usize) -> Value {
    let mut words: serde_json::Map<String, Value> = serde_json::Map::new();
    words.insert("<unk>".into(), json!(0));
    words.insert("</s>".into(), json!(1));
    for id in 2..vocab {
        words.insert(format!("w{id}"), json!(id));
    }
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": 1, "content": "</s>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<unk>"}
    })
}

/// Writes a 2-layer llama (hidden 32, GQA 4/2 heads) with random weights into `dir`.
pub fn write_tiny_llama(dir: &Path, tokenizer_vocab: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let hidden = 32;
    let inter = 64;
    let config = json!({
        "model_type": "llama", "vocab_size": VOCAB, "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "eos_token_id": 1, "tie_word_embeddings": false
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        word_tokenizer(tokenizer_vocab).to_string(),
    )
    .unwrap();
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let add = |tensors: &mut HashMap<String, Tensor>, name: String, shape: &[usize], scale: f32| {
        let seed = tensors.len() as u64 + 2;
        let count = shape.iter().product();
        let t = Tensor::from_vec(values(count, seed, scale), shape, &Device::Cpu).unwrap();
        tensors.insert(name, t);
    };
    add(
        &mut tensors,
        "model.embed_tokens.weight".into(),
        &[VOCAB, hidden],
        1.0,
    );
    add(&mut tensors, "lm_head.weight".into(), &[VOCAB, hidden], 0.5);
    tensors.insert(
        "model.norm.weight".into(),
        Tensor::ones(hidden, DType::F32, &Device::Cpu).unwrap(),
    );
    for layer in 0..2 {
        let p = format!("model.layers.{layer}");
        add(
            &mut tensors,
            format!("{p}.self_attn.q_proj.weight"),
            &[hidden, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.self_attn.k_proj.weight"),
            &[hidden / 2, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.self_attn.v_proj.weight"),
            &[hidden / 2, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.self_attn.o_proj.weight"),
            &[hidden, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.mlp.gate_proj.weight"),
            &[inter, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.mlp.up_proj.weight"),
            &[inter, hidden],
            0.3,
        );
        add(
            &mut tensors,
            format!("{p}.mlp.down_proj.weight"),
            &[hidden, inter],
            0.3,
        );
        for norm in ["input_layernorm", "post_attention_layernorm"] {
            tensors.insert(
                format!("{p}.{norm}.weight"),
                Tensor::ones(hidden, DType::F32, &Device::Cpu).unwrap(),
            );
        }
    }
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
}
