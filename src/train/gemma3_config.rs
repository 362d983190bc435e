//! What Gemma 3 (text) adds to the shared decoder shape the trainer reads: query scaling,
//! the sliding-window layers and their own rotary base, read from a `config.json`
//! (`model_type = "gemma3_text"`, transformers 4 or 5 layout) or a GGUF file's `gemma3.*`
//! metadata, and written back into every checkpoint's `config.json`.
//!
//! The network itself (the `1 + w` norms, scaled embeddings, per-head query/key norms, the
//! norms after attention and around the MLP, the tanh-GELU gate) is the shared trainer's
//! `gemma3` branch in `llama.rs`; the engine reads the same `config.json` through
//! `infer::arch::gemma3::spec`.

use std::path::Path;

use serde_json::{Value, json};

use super::TrainError;
use crate::infer::weights::GgufMetadata;

/// Every sixth layer attends globally, the other five through the sliding window, when a
/// config has no `layer_types` (transformers' `sliding_window_pattern`, llama.cpp's swa
/// pattern).
const SLIDING_WINDOW_PATTERN: usize = 6;
/// Rotary base of the sliding layers when neither file states it (transformers'
/// `rope_local_base_freq` default; llama.cpp does not store it).
const LOCAL_ROPE_THETA: f64 = 10_000.0;

/// Gemma 3's additions to the decoder shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Shape {
    /// Queries are scaled by `query_pre_attn_scalar^-1/2` (not `head_dim^-1/2`).
    pub query_pre_attn_scalar: f64,
    /// Rotary base of the sliding-window layers (the global layers use the config's).
    pub local_rope_theta: f64,
    pub sliding_window: usize,
    /// Whether each layer attends through the sliding window.
    pub sliding: Vec<bool>,
}

impl Gemma3Shape {
    /// The sliding layers when a file does not list them.
    fn default_pattern(num_layers: usize) -> Vec<bool> {
        (0..num_layers)
            .map(|i| i % SLIDING_WINDOW_PATTERN < SLIDING_WINDOW_PATTERN - 1)
            .collect()
    }

    /// The global layers' rotary base of a `config.json`: `rope_theta`, or transformers 5's
    /// `rope_parameters.full_attention.rope_theta`.
    pub(super) fn hf_rope_theta(json: &Value) -> Option<f64> {
        json["rope_theta"]
            .as_f64()
            .or_else(|| json["rope_parameters"]["full_attention"]["rope_theta"].as_f64())
    }

    pub(super) fn from_hf_json(
        path: &Path,
        json: &Value,
        head_dim: usize,
        num_layers: usize,
    ) -> Result<Self, TrainError> {
        let bad = |detail: String| TrainError::BadModel {
            path: path.to_path_buf(),
            detail,
        };
        let scaled = |v: &Value| v.is_object() && v["rope_type"].as_str() != Some("default");
        if scaled(&json["rope_scaling"]) || scaled(&json["rope_parameters"]["full_attention"]) {
            return Err(bad(
                "rope scaling is not supported by the trainer (Gemma 3 270M and 1B have none)"
                    .into(),
            ));
        }
        for softcap in ["attn_logit_softcapping", "final_logit_softcapping"] {
            if json[softcap].as_f64().is_some() {
                return Err(bad(format!(
                    "`{softcap}` is set; the trainer runs Gemma 3 without soft-capping"
                )));
            }
        }
        let sliding = match json["layer_types"].as_array() {
            Some(types) if types.len() == num_layers => types
                .iter()
                .map(|t| t.as_str() == Some("sliding_attention"))
                .collect(),
            Some(types) => {
                return Err(bad(format!(
                    "`layer_types` lists {} layers, `num_hidden_layers` is {num_layers}",
                    types.len()
                )));
            }
            None => Self::default_pattern(num_layers),
        };
        Ok(Gemma3Shape {
            query_pre_attn_scalar: json["query_pre_attn_scalar"]
                .as_f64()
                .unwrap_or(head_dim as f64),
            local_rope_theta: json["rope_local_base_freq"]
                .as_f64()
                .or_else(|| json["rope_parameters"]["sliding_attention"]["rope_theta"].as_f64())
                .unwrap_or(LOCAL_ROPE_THETA),
            sliding_window: json["sliding_window"].as_u64().unwrap_or(512) as usize,
            sliding,
        })
    }

    pub(super) fn from_gguf(
        path: &Path,
        meta: &GgufMetadata,
        head_dim: usize,
        num_layers: usize,
    ) -> Result<Self, TrainError> {
        let linear = meta.string("gemma3.rope.scaling.type").as_deref() == Some("linear");
        if linear
            && meta
                .arch_f32("gemma3", "rope.scaling.factor")
                .unwrap_or(1.0)
                != 1.0
        {
            return Err(TrainError::BadModel {
                path: path.to_path_buf(),
                detail:
                    "rope scaling is not supported by the trainer (Gemma 3 270M and 1B have none)"
                        .into(),
            });
        }
        Ok(Gemma3Shape {
            // llama.cpp scales by head_dim except for the 27B model, which the trainer
            // does not take.
            query_pre_attn_scalar: head_dim as f64,
            local_rope_theta: meta
                .arch_f32("gemma3", "rope.freq_base_swa")
                .map_or(LOCAL_ROPE_THETA, f64::from),
            sliding_window: meta
                .arch_u32("gemma3", "attention.sliding_window")
                .unwrap_or(512) as usize,
            sliding: Self::default_pattern(num_layers),
        })
    }

    /// The Gemma 3 keys of a checkpoint's `config.json` (transformers 4 names, which
    /// transformers 5 still reads).
    pub(super) fn extend_hf_json(&self, json: &mut Value) {
        let types: Vec<&str> = self
            .sliding
            .iter()
            .map(|&s| {
                if s {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let extra = json!({
            "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": self.query_pre_attn_scalar,
            "rope_local_base_freq": self.local_rope_theta,
            "sliding_window": self.sliding_window,
            "layer_types": types,
            "attn_logit_softcapping": null,
            "final_logit_softcapping": null,
        });
        for (key, value) in extra.as_object().expect("object") {
            json[key] = value.clone();
        }
        if let Some(map) = json.as_object_mut() {
            map.remove("hidden_act");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_5_rope_parameters_and_layer_types_are_read() {
        let json = json!({
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
            "layer_types": ["sliding_attention", "full_attention"],
            "query_pre_attn_scalar": 256,
            "sliding_window": 512,
        });
        let shape = Gemma3Shape::from_hf_json(Path::new("c.json"), &json, 64, 2).unwrap();
        assert_eq!(shape.sliding, vec![true, false]);
        assert_eq!(shape.query_pre_attn_scalar, 256.0);
        assert_eq!(Gemma3Shape::hf_rope_theta(&json), Some(1_000_000.0));
        let mut written = json!({"hidden_act": "silu"});
        shape.extend_hf_json(&mut written);
        assert_eq!(
            Gemma3Shape::from_hf_json(Path::new("c.json"), &written, 64, 2).unwrap(),
            shape
        );
        assert!(written.get("hidden_act").is_none());
    }

    #[test]
    fn without_layer_types_five_layers_slide_for_each_global_one() {
        let shape = Gemma3Shape::from_hf_json(Path::new("c.json"), &json!({}), 64, 18).unwrap();
        let global: Vec<usize> = (0..18).filter(|&i| !shape.sliding[i]).collect();
        assert_eq!(global, vec![5, 11, 17]);
        let scaled = json!({"rope_scaling": {"rope_type": "linear", "factor": 8.0}});
        assert!(Gemma3Shape::from_hf_json(Path::new("c.json"), &scaled, 64, 18).is_err());
    }
}
