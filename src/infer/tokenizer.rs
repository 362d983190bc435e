//! Tokenizers: a model's `tokenizer.json`, or one rebuilt from a GGUF file's
//! `tokenizer.ggml.*` metadata (byte-level BPE like GPT-2/SmolLM2/Llama 3, or
//! SentencePiece-style BPE like Llama 2/Mistral/Gemma), the way transformers converts them.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokenizers::Tokenizer;

use super::error::LocalError;
use super::weights::GgufMetadata;

/// Encodes prompts and decodes generated ids.
pub struct TextTokenizer {
    inner: Tokenizer,
    /// Prepended by us when the tokenizer itself does not (GGUF `add_bos_token`).
    bos_to_prepend: Option<u32>,
    /// Where it came from, for messages.
    pub source: PathBuf,
}

impl TextTokenizer {
    pub fn from_file(path: &Path) -> Result<Self, LocalError> {
        let inner = Tokenizer::from_file(path).map_err(|e| LocalError::BadTokenizer {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        Ok(TextTokenizer {
            inner,
            bos_to_prepend: None,
            source: path.to_path_buf(),
        })
    }

    /// Rebuilds the tokenizer stored in a GGUF file's metadata.
    pub fn from_gguf(path: &Path, meta: &GgufMetadata) -> Result<Self, LocalError> {
        let bad = |detail: String| LocalError::BadTokenizer {
            path: path.to_path_buf(),
            detail,
        };
        let model =
            meta.string("tokenizer.ggml.model")
                .ok_or_else(|| LocalError::MissingTokenizer {
                    path: path.to_path_buf(),
                })?;
        let tokens = meta
            .strings("tokenizer.ggml.tokens")
            .ok_or_else(|| bad("tokenizer.ggml.tokens is missing".into()))?;
        let types = meta.i32s("tokenizer.ggml.token_type").unwrap_or_default();
        let (spec, add_bos_default) = match model.as_str() {
            "gpt2" => {
                let merges = meta
                    .strings("tokenizer.ggml.merges")
                    .ok_or_else(|| bad("tokenizer.ggml.merges is missing".into()))?;
                let pre = meta
                    .string("tokenizer.ggml.pre")
                    .unwrap_or_else(|| "default".into());
                (byte_level_bpe(&tokens, &merges, &pre).map_err(bad)?, false)
            }
            "llama" => {
                let scores = meta.f32s("tokenizer.ggml.scores").unwrap_or_default();
                let add_space_prefix = meta.bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
                let unk = meta.u32("tokenizer.ggml.unknown_token_id").unwrap_or(0) as usize;
                (
                    sentencepiece_bpe(&tokens, &scores, add_space_prefix, unk),
                    true,
                )
            }
            other => {
                return Err(bad(format!(
                    "tokenizer.ggml.model = \"{other}\" is not supported (gpt2 and llama are)"
                )));
            }
        };
        let spec = with_added_tokens(spec, &tokens, &types);
        let inner =
            Tokenizer::from_bytes(spec.to_string().as_bytes()).map_err(|e| bad(e.to_string()))?;
        let bos = meta.u32("tokenizer.ggml.bos_token_id");
        let add_bos = meta
            .bool("tokenizer.ggml.add_bos_token")
            .unwrap_or(add_bos_default);
        Ok(TextTokenizer {
            inner,
            bos_to_prepend: bos.filter(|_| add_bos),
            source: path.to_path_buf(),
        })
    }

    /// Token ids of a raw prompt, with the special tokens the model expects (BOS for
    /// Llama/Gemma, `</s>` for T5), as `tokenizer(prompt)` does in transformers.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, LocalError> {
        let encoding = self
            .inner
            .encode(text, true)
            .map_err(|e| LocalError::Encode(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        ids.extend(self.bos_to_prepend);
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// Text of generated ids, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String, LocalError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| LocalError::Encode(e.to_string()))
    }

    /// Number of ids the tokenizer can produce (added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Writes this tokenizer as a `tokenizer.json` that encodes the same ids (a GGUF
    /// tokenizer's BOS becomes a post-processor), for checkpoints written by `train`.
    pub fn save(&self, path: &Path) -> Result<(), LocalError> {
        let mut inner = self.inner.clone();
        if let Some(bos) = self.bos_to_prepend {
            let token = inner.id_to_token(bos).unwrap_or_default();
            let processor = tokenizers::processors::template::TemplateProcessing::builder()
                .try_single(format!("{token} $A"))
                .and_then(|b| b.try_pair(format!("{token} $A {token} $B")))
                .map_err(|e| LocalError::Encode(e.to_string()))?
                .special_tokens(vec![(token.clone(), bos)])
                .build()
                .map_err(|e| LocalError::Encode(e.to_string()))?;
            inner.with_post_processor(Some(processor));
        }
        inner
            .save(path, false)
            .map_err(|e| LocalError::io(path, std::io::Error::other(e.to_string())))
    }
}

/// `tokenizer.json` for byte-level BPE. `pre` is llama.cpp's pre-tokenizer name; each maps
/// to the pre-tokenizer of the Hugging Face tokenizer it was converted from.
fn byte_level_bpe(tokens: &[String], merges: &[String], pre: &str) -> Result<Value, String> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let pre_tokenizer = match pre {
        "default" | "gpt-2" | "gpt2" => byte_level(true),
        "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level(true),
        ]}),
        "llama-bpe" | "llama3" | "llama-v3" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]}),
        other => {
            return Err(format!(
                "GGUF pre-tokenizer `{other}` is not known here (default, gpt-2, smollm, starcoder, llama-bpe are)"
            ));
        }
    };
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), json!(id)))
        .collect();
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": byte_level(true),
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "vocab": vocab,
            "merges": merges,
        }
    }))
}

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizer.json` for SentencePiece BPE vocabularies (Llama 2, Mistral, Gemma): merges
/// are derived from the pieces' scores as transformers' `SentencePieceExtractor` does.
fn sentencepiece_bpe(
    tokens: &[String],
    scores: &[f32],
    add_space_prefix: bool,
    unk: usize,
) -> Value {
    let ids: std::collections::HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.as_str(), id))
        .collect();
    let score = |id: usize| scores.get(id).copied().unwrap_or(0.0);
    let mut by_score: Vec<usize> = (0..tokens.len()).collect();
    by_score.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
    let mut merges: Vec<(f32, usize, usize)> = Vec::new();
    for &id in &by_score {
        let piece = &tokens[id];
        let mut local = Vec::new();
        for (split, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(split);
            if let (Some(&l), Some(&r)) = (ids.get(left), ids.get(right)) {
                local.push((score(id), l, r));
            }
        }
        local.sort_by_key(|&(_, l, r)| (l, r));
        merges.extend(local);
    }
    // A stable sort keeps the per-piece order for equal scores.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0));
    let merges: Vec<Value> = merges
        .iter()
        .map(|&(_, l, r)| json!([tokens[l], tokens[r]]))
        .collect();
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), json!(id)))
        .collect();
    let mut normalizers = Vec::new();
    if add_space_prefix {
        normalizers.push(json!({"type": "Prepend", "prepend": "\u{2581}"}));
    }
    normalizers.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}));
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if add_space_prefix {
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": tokens.get(unk),
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": true,
            "byte_fallback": true,
            "vocab": vocab,
            "merges": merges,
        }
    })
}

/// Control tokens (type 3) become special added tokens, user-defined ones (type 4) plain
/// added tokens, so that both are matched whole in prompts.
fn with_added_tokens(mut spec: Value, tokens: &[String], types: &[i32]) -> Value {
    const CONTROL: i32 = 3;
    const USER_DEFINED: i32 = 4;
    let added: Vec<Value> = types
        .iter()
        .enumerate()
        .filter(|&(_, &kind)| kind == CONTROL || kind == USER_DEFINED)
        .map(|(id, &kind)| {
            json!({
                "id": id,
                "content": tokens[id],
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": kind == CONTROL,
            })
        })
        .collect();
    spec["added_tokens"] = Value::Array(added);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_merges_follow_scores() {
        let tokens: Vec<String> = [
            "<unk>",
            "<s>",
            "</s>",
            "\u{2581}",
            "a",
            "b",
            "ab",
            "\u{2581}ab",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let scores = vec![0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -0.1];
        let spec = sentencepiece_bpe(&tokens, &scores, true, 0);
        let tokenizer = Tokenizer::from_bytes(spec.to_string().as_bytes()).unwrap();
        let ids = tokenizer.encode("ab", false).unwrap().get_ids().to_vec();
        assert_eq!(ids, vec![7]);
        assert_eq!(tokenizer.decode(&[7, 6], true).unwrap(), "abab");
    }
}
