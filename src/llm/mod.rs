//! Remote model backends: clients for OpenAI-compatible servers, Anthropic and Gemini, with
//! retries, rate limits and error classes. The request types live in `crate::request` and the
//! in-process engine in `crate::infer`.
//!
//! Architecture Invariant: `llm` is the only module that talks to model servers. API keys
//! are read from the environment at client construction and live only inside the client;
//! they are not part of any request, key, response, log line or error message.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod error;
pub mod gemini;
mod http;
pub mod limits;
pub mod logprobs;
pub mod openai;
pub mod retry;

pub use crate::request::{
    ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, RequestKey, Response,
};

/// The longest served version kept: real ones are short (`gpt-4o-2024-08-06`,
/// `fp_50cad350e4`, a GGUF path); a server's longer text is cut, not stored whole.
const MAX_SERVED_CHARS: usize = 200;

/// A version string as a server reported it (`model`, `system_fingerprint`,
/// `modelVersion`), made safe to keep: trimmed, control characters dropped, at most
/// [`MAX_SERVED_CHARS`] characters; empty is `None` (the server did not say).
pub(crate) fn served_version(reported: Option<String>) -> Option<String> {
    let cleaned: String = reported?
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SERVED_CHARS)
        .collect();
    (!cleaned.is_empty()).then_some(cleaned)
}
