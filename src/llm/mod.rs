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
pub mod limits;
pub mod logprobs;
pub mod openai;
pub mod retry;

pub use crate::request::{
    ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, RequestKey, Response,
};
