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

/// A byte-level BPE `tokenizer.json` with no merges: one token per byte (256 ids), then
/// `</s>`. Decoding gives back exactly the text, so a tiny model trained on CSV rows can
/// write them (the word-level tokenizer above cannot spell numbers).
pub fn byte_tokenizer() -> Value {
    let mut alphabet: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    alphabet.sort_unstable();
    let mut vocab = serde_json::Map::new();
    for (id, c) in alphabet.iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    vocab.insert("</s>".into(), json!(alphabet.len()));
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false,
                            "trim_offsets": true, "use_regex": true});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": alphabet.len(), "content": "</s>", "single_word": false,
                          "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": []}
    })
}

/// Vocabulary of [`byte_tokenizer`]: 256 bytes and `</s>`.
pub const BYTE_VOCAB: usize = 257;

/// Pieces of `text` as [`piece_tokenizer`] cuts it: runs of letters/digits/`_` with the
/// space before them if there is one (as BPE tokenizers attach it), and every other
/// character alone (other spaces, commas, dots, newlines).
pub fn pieces(text: &str) -> Vec<String> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_word(c) {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        // A space waits: the word after it takes it.
        if c == ' ' {
            word.push(c);
        } else {
            out.push(c.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// A word-level `tokenizer.json` over the pieces of `corpus` (see [`pieces`]), each word
/// with and without its leading space: id 0 is `<unk>` (any other word, skipped when
/// decoding), id 1 `</s>`. Decoding concatenates pieces exactly (`Fuse`), so a model can
/// write numbers and punctuation back; a word and its space are one token, so prompts
/// stay short, which a tiny model needs. Returns the vocabulary size.
pub fn piece_tokenizer(corpus: &str) -> (Value, usize) {
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    vocab.insert("</s>".into(), json!(1));
    for piece in pieces(corpus) {
        let bare = piece.strip_prefix(' ').unwrap_or(&piece);
        let forms = if bare.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
            vec![bare.to_string(), format!(" {bare}")]
        } else {
            vec![piece.clone()]
        };
        for form in forms {
            let next = vocab.len();
            vocab.entry(form).or_insert(json!(next));
        }
    }
    let special = |id: usize, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let size = vocab.len();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "</s>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": " ?[\\p{L}\\p{N}_]+|[^\\p{L}\\p{N}_]"},
                          "behavior": "Isolated", "invert": false},
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    (tokenizer, size)
}

/// A small byte-level llama with random weights; see [`write_small_llama`].
pub fn write_byte_llama(dir: &Path, hidden: usize, layers: usize) {
    write_small_llama(dir, &byte_tokenizer(), BYTE_VOCAB, hidden, layers);
}

/// A small llama with random weights (standard deviation 0.02 like a fresh transformer)
/// and the given tokenizer, for training tests: `layers` layers of width `hidden`, 4 query
/// and 2 key/value heads.
pub fn write_small_llama(
    dir: &Path,
    tokenizer: &Value,
    vocab: usize,
    hidden: usize,
    layers: usize,
) {
    let shape = LlamaShape {
        vocab,
        hidden,
        intermediate: hidden * 3,
        layers,
        heads: 4,
        kv_heads: 2,
        tied: false,
    };
    write_llama(dir, tokenizer, &shape);
}

/// The shape of a llama written by [`write_llama`].
#[derive(Debug, Clone)]
pub struct LlamaShape {
    pub vocab: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// The output head shares the embeddings (no `lm_head.weight`).
    pub tied: bool,
}

/// SmolLM2-135M's shape (its GGUF's `llama.*` metadata: 30 blocks of 576, 9 query and 3
/// key/value heads of 64, feed-forward 1536, 49,152 ids, tied output head), for the
/// real-size training race.
pub const SMOLLM2_135M: LlamaShape = LlamaShape {
    vocab: 49_152,
    hidden: 576,
    intermediate: 1536,
    layers: 30,
    heads: 9,
    kv_heads: 3,
    tied: true,
};

/// A llama of `shape` with random weights (standard deviation 0.02) and the given
/// tokenizer, as a safetensors folder that both `src/train` and transformers load.
pub fn write_llama(dir: &Path, tokenizer: &Value, shape: &LlamaShape) {
    std::fs::create_dir_all(dir).unwrap();
    let LlamaShape {
        vocab,
        hidden,
        intermediate: inter,
        layers,
        heads,
        kv_heads,
        tied,
    } = *shape;
    let config = json!({
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "eos_token_id": 1, "tie_word_embeddings": tied
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();

    let kv = hidden / heads * kv_heads;
    let mut shapes: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![vocab, hidden])];
    if !tied {
        shapes.push(("lm_head.weight".into(), vec![vocab, hidden]));
    }
    for layer in 0..layers {
        let p = format!("model.layers.{layer}");
        shapes.extend([
            (format!("{p}.self_attn.q_proj.weight"), vec![hidden, hidden]),
            (format!("{p}.self_attn.k_proj.weight"), vec![kv, hidden]),
            (format!("{p}.self_attn.v_proj.weight"), vec![kv, hidden]),
            (format!("{p}.self_attn.o_proj.weight"), vec![hidden, hidden]),
            (format!("{p}.mlp.gate_proj.weight"), vec![inter, hidden]),
            (format!("{p}.mlp.up_proj.weight"), vec![inter, hidden]),
            (format!("{p}.mlp.down_proj.weight"), vec![hidden, inter]),
        ]);
    }
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for (seed, (name, shape)) in shapes.into_iter().enumerate() {
        let count = shape.iter().product();
        let scale = 0.02 * 3f32.sqrt(); // uniform with standard deviation 0.02
        let t = Tensor::from_vec(values(count, seed as u64 + 11, scale), shape, &Device::Cpu);
        tensors.insert(name, t.unwrap());
    }
    let ones = || Tensor::ones(hidden, DType::F32, &Device::Cpu).unwrap();
    tensors.insert("model.norm.weight".into(), ones());
    for layer in 0..layers {
        let p = format!("model.layers.{layer}");
        tensors.insert(format!("{p}.input_layernorm.weight"), ones());
        tensors.insert(format!("{p}.post_attention_layernorm.weight"), ones());
    }
    candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
}

/// A Gemma 3 text model (`gemma3_text`) of the small llama's size: one sliding layer
/// (window `window`) and one global layer, tied embeddings, every norm `1 + 0`, random
/// projections (standard deviation 0.02), as a safetensors folder the trainer and the
/// engine load.
pub fn write_small_gemma3(
    dir: &Path,
    tokenizer: &Value,
    vocab: usize,
    hidden: usize,
    window: usize,
) {
    let heads = 4;
    let head_dim = hidden / heads;
    write_llama(
        dir,
        tokenizer,
        &LlamaShape {
            vocab,
            hidden,
            intermediate: hidden * 3,
            layers: 2,
            heads,
            kv_heads: 2,
            tied: true,
        },
    );
    let config = json!({
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
        "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": hidden * 3,
        "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": 2,
        "head_dim": head_dim, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0, "sliding_window": window,
        "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": head_dim, "hidden_activation": "gelu_pytorch_tanh",
        "eos_token_id": 1, "tie_word_embeddings": true
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let weights = dir.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    // Gemma stores w of x·(1 + w): a neutral norm is 0.
    let zeros = |n: usize| Tensor::zeros(n, DType::F32, &Device::Cpu).unwrap();
    for (name, t) in tensors.iter_mut() {
        if name.ends_with("norm.weight") {
            *t = zeros(hidden);
        }
    }
    for layer in 0..2 {
        let p = format!("model.layers.{layer}");
        let ffn = tensors
            .remove(&format!("{p}.post_attention_layernorm.weight"))
            .unwrap();
        tensors.insert(format!("{p}.pre_feedforward_layernorm.weight"), ffn);
        tensors.insert(
            format!("{p}.post_attention_layernorm.weight"),
            zeros(hidden),
        );
        tensors.insert(
            format!("{p}.post_feedforward_layernorm.weight"),
            zeros(hidden),
        );
        tensors.insert(format!("{p}.self_attn.q_norm.weight"), zeros(head_dim));
        tensors.insert(format!("{p}.self_attn.k_norm.weight"), zeros(head_dim));
    }
    candle_core::safetensors::save(&tensors, &weights).unwrap();
}
