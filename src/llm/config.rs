//! The configuration of one model's client as a spec gives it: backend, model name, base
//! URLs and how to balance them, key variable, headers, limits and retry policy.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::retry::RetryPolicy;
use super::{ApiMode, BackendKind, anthropic, gemini};

/// How requests are spread over several `base_url`s serving the same model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// The endpoint with the fewest requests in flight (ties rotate): a slow replica gets less.
    #[default]
    LeastInFlight,
    RoundRobin,
}

/// One `[[models]]` entry of an experiment spec, as far as talking to the model goes.
/// Unknown keys are ignored so that the spec can carry more (revision, labels…) in the
/// same table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ClientConfig {
    /// The experiment's name for the model, used in messages (defaults to `model`).
    #[serde(default)]
    pub id: Option<String>,
    pub backend: BackendKind,
    #[serde(default)]
    pub api: ApiMode,
    /// The model name the API expects.
    pub model: String,
    /// One URL or a list of replicas (default: the provider's public endpoint). For
    /// OpenAI-compatible servers it includes the version: `http://localhost:8000/v1`.
    #[serde(default, deserialize_with = "one_or_many")]
    pub base_url: Vec<String>,
    #[serde(default)]
    pub balance: Balance,
    /// Name of the environment variable holding the key (never the key itself). Leave it
    /// out for local servers without keys.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Requests in flight at once, over all endpoints.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Whole-request deadline (connect, send, wait, read body).
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Backoff base and ceiling (full jitter): 500 ms and 30 s unless set.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// The longest `Retry-After` obeyed.
    #[serde(default = "default_retry_after_max_s")]
    pub retry_after_max_s: f64,
    /// Extra, non-secret headers (e.g. an organisation or routing header). Credentials
    /// belong in the environment variable named by `api_key_env`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `anthropic-version` header (Anthropic only).
    #[serde(default)]
    pub anthropic_version: Option<String>,
}

fn default_concurrency() -> usize {
    16
}
fn default_timeout_s() -> f64 {
    120.0
}
fn default_max_retries() -> u32 {
    6
}
fn default_backoff_base_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_retry_after_max_s() -> f64 {
    120.0
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(url) => vec![url],
        OneOrMany::Many(urls) => urls,
    })
}

impl ClientConfig {
    /// A configuration with every default, for code and tests that build clients directly.
    pub fn new(backend: BackendKind, model: impl Into<String>) -> Self {
        Self {
            id: None,
            backend,
            api: ApiMode::default(),
            model: model.into(),
            base_url: Vec::new(),
            balance: Balance::default(),
            api_key_env: None,
            concurrency: default_concurrency(),
            requests_per_minute: None,
            tokens_per_minute: None,
            timeout_s: default_timeout_s(),
            max_retries: default_max_retries(),
            backoff_base_ms: default_backoff_base_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            retry_after_max_s: default_retry_after_max_s(),
            headers: BTreeMap::new(),
            anthropic_version: None,
        }
    }

    /// The name used in messages: `id` when the spec gives one, else the API model name.
    pub fn display_id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.model)
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            base_delay: Duration::from_millis(self.backoff_base_ms),
            max_delay: Duration::from_millis(self.backoff_max_ms),
            max_retry_after: Duration::try_from_secs_f64(self.retry_after_max_s)
                .unwrap_or(Duration::from_secs(120)),
        }
    }

    /// The configured URLs without trailing slashes, or the provider's default.
    pub fn endpoints(&self) -> Vec<String> {
        let urls: Vec<String> = if self.base_url.is_empty() {
            match self.backend {
                BackendKind::OpenaiCompatible => vec!["https://api.openai.com/v1".into()],
                BackendKind::Anthropic => vec![anthropic::DEFAULT_BASE_URL.into()],
                BackendKind::Gemini => vec![gemini::DEFAULT_BASE_URL.into()],
                BackendKind::Local => Vec::new(),
            }
        } else {
            self.base_url.clone()
        };
        urls.into_iter()
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_deserializes_with_defaults_and_url_lists() {
        let one: ClientConfig = toml::from_str(
            r#"backend = "openai-compatible"
               model = "gpt-4o-2024-08-06"
               base_url = "https://api.openai.com/v1/"
               api_key_env = "OPENAI_API_KEY"
               revision = "ignored here""#,
        )
        .unwrap();
        assert_eq!(one.api, ApiMode::Completions);
        assert_eq!(one.endpoints(), ["https://api.openai.com/v1"]);
        assert_eq!(
            (one.concurrency, one.timeout_s, one.max_retries),
            (16, 120.0, 6)
        );
        let many: ClientConfig = toml::from_str(
            r#"backend = "openai-compatible"
               api = "chat"
               model = "m"
               base_url = ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]
               balance = "round-robin"
               concurrency = 64
               requests_per_minute = 600"#,
        )
        .unwrap();
        assert_eq!(many.base_url.len(), 2);
        assert_eq!(
            (many.api, many.balance, many.requests_per_minute),
            (ApiMode::Chat, Balance::RoundRobin, Some(600))
        );
    }
}
