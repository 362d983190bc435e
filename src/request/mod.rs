//! What a model is asked and what it answered: the request, its content-addressed key, the
//! model identity and the response, shared by the remote clients (`llm`), the local engine
//! (`infer`) and the cache (`store`) without any of them importing another.
//!
//! Architecture Invariant: this module owns no I/O; it is plain data plus the key encoding.

pub mod key;
pub mod score;

use serde::{Deserialize, Serialize};

pub use crate::decide::StopRule;
pub use key::RequestKey;
pub use score::{ScoreKey, ScoreRequest, TokenLogprobs};

/// Which protocol a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// `/v1/completions` or `/v1/chat/completions` (OpenAI, vLLM, llama.cpp, Ollama, TGI…).
    OpenaiCompatible,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
    /// In-process inference with candle.
    Local,
}

impl BackendKind {
    pub fn id(self) -> &'static str {
        match self {
            BackendKind::OpenaiCompatible => "openai-compatible",
            BackendKind::Anthropic => "anthropic",
            BackendKind::Gemini => "gemini",
            BackendKind::Local => "local",
        }
    }
}

/// Raw completion (the paper's setting for base models) or one user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ApiMode {
    #[default]
    Completions,
    Chat,
}

/// What identifies a model's answers in the cache: a changed revision never reuses answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelIdentity {
    pub backend: BackendKind,
    /// The model name sent to the API; [`LOCAL_WEIGHTS_MODEL`] for local weights.
    pub model: String,
    /// Snapshot name for APIs (e.g. `gpt-4o-2024-08-06`), weights digest for local files.
    pub revision: String,
}

/// The model name of every local identity: local weights are identified by their digest
/// alone (the revision), so the same file under two paths or two spec names shares every
/// cache entry.
pub const LOCAL_WEIGHTS_MODEL: &str = "local-weights";

impl ModelIdentity {
    /// The identity of local weights with this digest.
    pub fn local(weights_digest: &str) -> ModelIdentity {
        ModelIdentity {
            backend: BackendKind::Local,
            model: LOCAL_WEIGHTS_MODEL.to_string(),
            revision: weights_digest.to_string(),
        }
    }
}

/// Generation parameters. Every field is part of the request key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationParams {
    pub max_tokens: u32,
    /// 0 = greedy (SPEC §5 default).
    pub temperature: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// API seed where supported (SPEC §5: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Stop once the test's rule has read everything it judges (the local engine applies
    /// it; see [`StopRule`]). Stored and hashed only when present, so the keys of requests
    /// without one are those they always had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_rule: Option<StopRule>,
}

/// One request to one model. The cache key is computed from exactly these fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub model: ModelIdentity,
    pub api: ApiMode,
    /// Raw prompt (completions) or the single user message (chat).
    pub prompt: String,
    pub params: GenerationParams,
    /// Sample index: with sampling (temperature > 0), each sample is its own cache entry.
    pub sample: u32,
}

impl Request {
    pub fn key(&self) -> RequestKey {
        RequestKey::of(self)
    }
}

/// A successful, complete response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Newly generated text only (the prompt is never echoed).
    pub text: String,
    /// `stop`, `length`, … as the server reported it.
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    /// Wall time of the successful attempt.
    pub latency_ms: u64,
    /// The model version the server says answered (OpenAI-compatible and Anthropic `model`,
    /// Gemini `modelVersion`): an alias such as `gpt-4o` is served by different snapshots
    /// over time. `None` when the server does not say (local models, older caches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    /// OpenAI-compatible `system_fingerprint`: the backend configuration that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_fingerprint: Option<String>,
}
