//! Mistral (`model_type = "mistral"`): the llama block with sliding-window attention.
//! GGUF files of Mistral say `general.architecture = "llama"` and load through llama.rs.

use super::Common;
use crate::infer::decoder_spec::DecoderSpec;

/// `config.json` of mistral checkpoints (llama's fields plus `sliding_window`).
pub type Config = Common;

pub fn spec(config: &Config) -> Result<DecoderSpec, String> {
    let mut spec = super::llama::spec(config)?;
    spec.arch = "mistral".into();
    spec.sliding_window = vec![config.sliding_window; config.num_hidden_layers];
    Ok(spec)
}
