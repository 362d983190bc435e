//! "Score this text" requests: the per-token log-probabilities of a given text under a
//! model (no generation), their content-addressed key and the result.
//!
//! Architecture Invariant: a score key is derived under its own blake3 domain, so no
//! scoring request can share a key with a generation request.

use serde::{Deserialize, Serialize};

use super::ModelIdentity;

const DOMAIN: &str = "tabcontam score key v1";

/// Log-probabilities of a text as the model tokenizes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprobs {
    /// Every token of the text (BOS included when the model prepends one).
    pub tokens: Vec<u32>,
    /// `log p(tokens[i + 1] | tokens[..= i])`: one per token after the first (the first
    /// token has no context to be predicted from).
    pub logprobs: Vec<f64>,
    /// Mean of `log p(z)` under the next-token distribution at each scored position
    /// (Min-K%++); only where the full distribution is known (local models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mu: Option<Vec<f64>>,
    /// Standard deviation of `log p(z)` at each scored position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma: Option<Vec<f64>>,
}

/// One text to score under one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreRequest {
    pub model: ModelIdentity,
    pub text: String,
}

impl ScoreRequest {
    pub fn key(&self) -> ScoreKey {
        let mut h = blake3::Hasher::new_derive_key(DOMAIN);
        let mut field = |bytes: &[u8]| {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(self.model.backend.id().as_bytes());
        field(self.model.model.as_bytes());
        field(self.model.revision.as_bytes());
        field(self.text.as_bytes());
        ScoreKey(*h.finalize().as_bytes())
    }
}

/// 32-byte blake3 digest of a [`ScoreRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScoreKey(pub [u8; 32]);

#[cfg(test)]
mod tests {
    use super::super::{ApiMode, BackendKind, GenerationParams, Request, RequestKey};
    use super::*;

    #[test]
    fn score_keys_never_equal_generation_keys() {
        let model = ModelIdentity {
            backend: BackendKind::Local,
            model: "m".into(),
            revision: "r".into(),
        };
        let score = ScoreRequest {
            model: model.clone(),
            text: "a, b".into(),
        };
        let generation = Request {
            model,
            api: ApiMode::Completions,
            prompt: "a, b".into(),
            params: GenerationParams {
                max_tokens: 0,
                temperature: 0.0,
                top_p: None,
                seed: None,
                stop: vec![],
                stop_rule: None,
            },
            sample: 0,
        };
        assert_ne!(score.key().0, RequestKey::of(&generation).0);
        let mut other = score.clone();
        other.text.push(' ');
        assert_ne!(other.key(), score.key());
        let mut other = score.clone();
        other.model.revision = "r2".into();
        assert_ne!(other.key(), score.key());
    }
}
