//! Qwen2 and Qwen2.5 (`model_type = "qwen2"`, GGUF `qwen2`): the llama block with biases
//! on the query, key and value projections (loaded wherever a checkpoint has them), and
//! sliding-window attention on the upper layers only when `use_sliding_window` is set.

use super::{Common, GgufHparams};
use crate::infer::decoder_spec::{DecoderSpec, NormKind};

/// `config.json` of qwen2 checkpoints.
pub type Config = Common;

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "qwen2".into();
    spec.norm = NormKind::Rms {
        eps: config.rms_norm_eps.unwrap_or(1e-6) as f32,
    };
    spec.sliding_window = qwen_sliding_windows(config);
    Ok(spec)
}

/// Per-layer windows as transformers' Qwen2/Qwen3 decide them: `layer_types` when the
/// config lists them; otherwise, with `use_sliding_window`, layers from
/// `max_window_layers` on. Released Qwen configs carry a `sliding_window` number with
/// `use_sliding_window: false`, which means full attention everywhere.
pub fn qwen_sliding_windows(config: &Config) -> Vec<Option<usize>> {
    (0..config.num_hidden_layers)
        .map(|i| {
            let sliding = match &config.layer_types {
                Some(types) => types.get(i).is_some_and(|t| t == "sliding_attention"),
                None => {
                    config.use_sliding_window.unwrap_or(false)
                        && i >= config.max_window_layers.unwrap_or(28)
                }
            };
            if sliding { config.sliding_window } else { None }
        })
        .collect()
}

/// llama.cpp converts Qwen2 without permuting q/k rows: rope rotates halves (NeoX style).
pub fn from_gguf(hparams: &GgufHparams) -> DecoderSpec {
    hparams.base_spec(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn config(json: serde_json::Value) -> Config {
        Config::deserialize(json).unwrap()
    }

    #[test]
    fn released_qwen_configs_attend_fully_despite_their_sliding_window_number() {
        // The fields of Qwen2.5-0.5B's config.json that decide attention windows.
        let released = config(serde_json::json!({
            "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
            "num_attention_heads": 14, "num_key_value_heads": 2,
            "sliding_window": 32768, "use_sliding_window": false, "max_window_layers": 21
        }));
        assert_eq!(qwen_sliding_windows(&released), vec![None; 24]);
    }

    #[test]
    fn sliding_layers_start_at_max_window_layers_or_follow_layer_types() {
        let mut json = serde_json::json!({
            "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 3,
            "num_attention_heads": 2, "sliding_window": 4, "use_sliding_window": true,
            "max_window_layers": 1
        });
        assert_eq!(
            qwen_sliding_windows(&config(json.clone())),
            vec![None, Some(4), Some(4)]
        );
        json["layer_types"] =
            serde_json::json!(["sliding_attention", "full_attention", "full_attention"]);
        assert_eq!(
            qwen_sliding_windows(&config(json)),
            vec![Some(4), None, None]
        );
    }
}
