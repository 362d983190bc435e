//! The HTTP client of one model: configuration, API key, connection pool, endpoint
//! balancing, limits and retries, dispatching to the backend's wire format.
//!
//! Architecture Invariant: the API key is read from the environment here, once, and lives
//! only in `Client` as a header marked sensitive; `Debug` redacts it, errors scrub it, and
//! it never goes into a URL.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use tokio::time::Instant;

pub use super::config::{Balance, ClientConfig};
use super::error::{self, BodyError, LlmError};
use super::http::{error_chain, extra_headers, is_loopback, retry_after, url_root};
use super::limits::Limits;
use super::retry::RetryPolicy;
use super::{BackendKind, Request, Response, anthropic, gemini, openai};

/// Which wire format a client speaks (enum dispatch: no trait objects, no boxed futures).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Backend {
    OpenAi,
    Anthropic,
    Gemini,
}

/// A model's API key. `Debug` never shows it.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

struct Endpoint {
    base: String,
    /// `base` as messages show it: credentials in the URL redacted (errors are printed and
    /// recorded in the cache).
    shown: String,
    in_flight: AtomicUsize,
}

/// Counts a request against its endpoint while it is in flight (also when its future is dropped).
struct InFlight<'a>(&'a Endpoint);

impl<'a> InFlight<'a> {
    fn enter(endpoint: &'a Endpoint) -> Self {
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(endpoint)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client for one model: cheap to clone (shared state behind an `Arc`), shared by every
/// task that sends to that model, so that the limits and the connection pool are the model's.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    config: ClientConfig,
    backend: Backend,
    http: reqwest::Client,
    endpoints: Vec<Endpoint>,
    rotation: AtomicUsize,
    /// Authentication headers, values marked sensitive.
    auth: HeaderMap,
    api_key: Option<ApiKey>,
    timeout: Duration,
    limits: Limits,
    retry: RetryPolicy,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("Client")
            .field("id", &inner.id)
            .field("backend", &inner.config.backend)
            .field("api", &inner.config.api)
            .field("model", &inner.config.model)
            .field(
                "endpoints",
                &inner
                    .endpoints
                    .iter()
                    .map(|e| e.shown.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("api_key_env", &inner.config.api_key_env)
            .field("api_key", &inner.api_key)
            .field("limits", &inner.limits)
            .field("retry", &inner.retry)
            .finish()
    }
}

impl Client {
    /// Builds the client, reading the key from the variable named by `api_key_env`.
    pub fn new(config: ClientConfig) -> Result<Self, LlmError> {
        Self::with_env(config, |name| std::env::var(name).ok())
    }

    /// As `new`, with the environment looked up through `env` (tests, embedding).
    pub fn with_env(
        config: ClientConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let id = config.display_id().to_owned();
        let invalid = |message: String| LlmError::Config {
            model: id.clone(),
            message,
        };
        let backend = match config.backend {
            BackendKind::OpenaiCompatible => Backend::OpenAi,
            BackendKind::Anthropic => Backend::Anthropic,
            BackendKind::Gemini => Backend::Gemini,
            BackendKind::Local => {
                return Err(invalid(
                    "backend `local` runs in-process and has no HTTP client".into(),
                ));
            }
        };
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => match env(var).filter(|v| !v.trim().is_empty()) {
                Some(key) => Some(ApiKey(key.trim().to_owned())),
                None => {
                    return Err(LlmError::MissingApiKey {
                        model: id,
                        var: var.clone(),
                    });
                }
            },
        };
        let timeout = Duration::try_from_secs_f64(config.timeout_s)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| {
                invalid(format!(
                    "timeout_s must be a positive number of seconds, not {}",
                    config.timeout_s
                ))
            })?;
        let endpoints = config.endpoints();
        if endpoints.is_empty() {
            return Err(invalid("base_url is an empty list".into()));
        }
        for url in &endpoints {
            if reqwest::Url::parse(url).is_err()
                || !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(invalid(format!(
                    "base_url {:?} is not an http:// or https:// URL",
                    error::redact_url(url)
                )));
            }
        }
        let auth = auth_headers(&backend, &config, api_key.as_ref()).map_err(invalid)?;
        let extra_headers = extra_headers(&config.headers).map_err(invalid)?;

        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("tabcontam/", env!("CARGO_PKG_VERSION")))
            .default_headers(extra_headers)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            // Every slot keeps its connection between requests: no reconnect per request.
            .pool_max_idle_per_host(config.concurrency.max(1))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .tcp_keepalive(Duration::from_secs(30))
            .http1_only();
        if endpoints.iter().all(|u| is_loopback(u)) {
            // A server on this machine is never reached through a proxy from the environment.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {e}")))?;

        Ok(Self {
            inner: Arc::new(Inner {
                id,
                backend,
                http,
                endpoints: endpoints
                    .into_iter()
                    .map(|base| Endpoint {
                        shown: error::redact_url(&base),
                        base,
                        in_flight: AtomicUsize::new(0),
                    })
                    .collect(),
                rotation: AtomicUsize::new(0),
                auth,
                api_key,
                timeout,
                limits: Limits::new(
                    config.concurrency,
                    config.requests_per_minute,
                    config.tokens_per_minute,
                ),
                retry: config.retry_policy(),
                config,
            }),
        })
    }

    /// One request, within the model's limits, retried per the policy: what a run calls.
    /// Each attempt takes its own concurrency slot (released during the backoff so others
    /// can use it), and a `Retry-After` pauses every task of the model, not just this one:
    /// the limit that was hit is the model's.
    pub async fn complete(&self, request: &Request) -> Result<Response, LlmError> {
        let key = request.key();
        let tokens = Limits::estimate_tokens(request);
        let policy = self.retry_policy();
        let limits = self.limits();
        policy
            .run(&key, |_attempt| async move {
                let permit = limits.acquire(tokens).await;
                let result = self.complete_once(request).await;
                drop(permit);
                if let Err(error) = &result
                    && let Some(asked) = error.retry_after()
                {
                    limits.pause_until(Instant::now() + asked.min(policy.max_retry_after));
                }
                result
            })
            .await
    }

    /// Exactly one HTTP attempt, ignoring limits and retries.
    pub async fn complete_once(&self, request: &Request) -> Result<Response, LlmError> {
        let inner = &*self.inner;
        self.check_model(request)?;
        let model = inner.config.model.as_str();
        let (path, body) = match inner.backend {
            Backend::OpenAi => (
                openai::path(request.api).to_owned(),
                openai::request_body(model, request),
            ),
            Backend::Anthropic => (
                anthropic::PATH.to_owned(),
                anthropic::request_body(model, request),
            ),
            Backend::Gemini => (gemini::path(model), gemini::request_body(request)),
        };
        let endpoint = self.pick_endpoint();
        let _in_flight = InFlight::enter(endpoint);
        let request_url = format!("{}{path}", endpoint.base);
        // What errors name: the URL with its credentials redacted.
        let url = format!("{}{path}", endpoint.shown);

        let started = Instant::now();
        let sent = inner
            .http
            .post(&request_url)
            .headers(inner.auth.clone())
            .json(&body)
            .send()
            .await;
        let response = sent.map_err(|e| self.transport_error(&url, &e))?;
        let status = response.status();
        let retry_after = retry_after(status, response.headers());
        let bytes = response.bytes().await;
        if !status.is_success() {
            let message = match &bytes {
                Ok(bytes) => error::server_message(bytes, self.secret()),
                Err(e) => format!("(body unreadable: {})", error_chain(e)),
            };
            return Err(LlmError::Http {
                model: inner.id.clone(),
                status: status.as_u16(),
                url,
                message,
                hint: error::status_hint(status.as_u16(), inner.config.api_key_env.as_deref()),
                retry_after,
            });
        }
        let bytes = bytes.map_err(|e| match e.is_timeout() {
            true => LlmError::Timeout {
                model: inner.id.clone(),
                url: url.clone(),
                timeout: inner.timeout,
            },
            false => LlmError::InvalidBody {
                model: inner.id.clone(),
                url: url.clone(),
                message: format!("body ended early: {}", self.scrub(&error_chain(&e))),
            },
        })?;
        let latency = started.elapsed();
        let parsed = match inner.backend {
            Backend::OpenAi => openai::parse_response(request.api, &bytes),
            Backend::Anthropic => anthropic::parse_response(&bytes),
            Backend::Gemini => gemini::parse_response(&bytes),
        };
        let mut parsed = parsed.map_err(|e| match e {
            BodyError::Unreadable(message) => LlmError::InvalidBody {
                model: inner.id.clone(),
                url: url.clone(),
                message: self.scrub(&message),
            },
            BodyError::Format(message) => LlmError::ResponseFormat {
                model: inner.id.clone(),
                url: url.clone(),
                message: self.scrub(&message),
            },
        })?;
        parsed.latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        // A server cannot stop on a rule, so it is not told of one (the planner gives
        // servers none). A request that carries one anyway is answered with the text its
        // key promises: the answer cut where the rule stops it, as the local engine stores
        // it (the tokens past the cut are paid for all the same).
        if let Some(rule) = request.params.stop_rule
            && rule.cut(&mut parsed.text)
        {
            parsed.finish_reason = Some("stop".to_string());
        }
        Ok(parsed)
    }

    /// One POST of a JSON body to `path` under the endpoint's base URL (or under its root
    /// when `from_root`: llama.cpp's own `/tokenize` and `/completion` live beside `/v1`),
    /// with the client's headers; the parsed JSON answer. No retries (the scoring loop
    /// decides what to do on failure).
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        from_root: bool,
    ) -> Result<serde_json::Value, LlmError> {
        let inner = &*self.inner;
        let endpoint = self.pick_endpoint();
        let request = inner
            .http
            .post(format!("{}{path}", url_root(&endpoint.base, from_root)))
            .json(body);
        let url = format!("{}{path}", url_root(&endpoint.shown, from_root));
        let key_env = inner.config.api_key_env.as_deref();
        self.json_answer(request, url, |status| error::status_hint(status, key_env))
            .await
    }

    /// One GET of `path` (under the root when `from_root`, see [`post_json`](Self::post_json)),
    /// parsed as JSON.
    pub async fn get_json(
        &self,
        path: &str,
        from_root: bool,
    ) -> Result<serde_json::Value, LlmError> {
        let endpoint = self.pick_endpoint();
        let request = self
            .inner
            .http
            .get(format!("{}{path}", url_root(&endpoint.base, from_root)));
        let url = format!("{}{path}", url_root(&endpoint.shown, from_root));
        self.json_answer(request, url, |_| String::new()).await
    }

    /// Sends `request` with the client's headers and parses the answer as JSON; `url` is
    /// the redacted URL errors name, `hint` the fix for an HTTP status.
    async fn json_answer(
        &self,
        request: reqwest::RequestBuilder,
        url: String,
        hint: impl Fn(u16) -> String,
    ) -> Result<serde_json::Value, LlmError> {
        let inner = &*self.inner;
        let response = request
            .headers(inner.auth.clone())
            .send()
            .await
            .map_err(|e| self.transport_error(&url, &e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&url, &e))?;
        if !status.is_success() {
            return Err(LlmError::Http {
                model: inner.id.clone(),
                status: status.as_u16(),
                url,
                message: error::server_message(&bytes, self.secret()),
                hint: hint(status.as_u16()),
                retry_after: None,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| LlmError::InvalidBody {
            model: inner.id.clone(),
            url,
            message: self.scrub(&e.to_string()),
        })
    }

    /// The experiment's name for this model.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Checks that every endpoint accepts TCP connections, so an unreachable server fails
    /// the run at once with one clear line instead of thousands of retried requests.
    pub async fn preflight(&self, timeout: Duration) -> Result<(), LlmError> {
        for endpoint in &self.inner.endpoints {
            let url = reqwest::Url::parse(&endpoint.base).map_err(|e| LlmError::Config {
                model: self.inner.id.clone(),
                message: format!("base_url `{}` is not a URL: {e}", endpoint.shown),
            })?;
            let host = url.host_str().unwrap_or_default().to_string();
            let port = url.port_or_known_default().unwrap_or(443);
            let connect = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port));
            let outcome = tokio::time::timeout(timeout, connect).await;
            let problem = match outcome {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {:.0} s", timeout.as_secs_f64()),
            };
            return Err(LlmError::Config {
                model: self.inner.id.clone(),
                message: format!(
                    "cannot reach {} ({problem}); start the server or fix base_url in the spec",
                    endpoint.shown
                ),
            });
        }
        Ok(())
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// Base URLs in use and the requests now in flight to each.
    pub fn endpoint_load(&self) -> Vec<(String, usize)> {
        self.inner
            .endpoints
            .iter()
            .map(|e| (e.shown.clone(), e.in_flight.load(Ordering::Relaxed)))
            .collect()
    }

    /// A request built for another model would be answered by this one and cached under
    /// the other's key: refuse it.
    fn check_model(&self, request: &Request) -> Result<(), LlmError> {
        let config = &self.inner.config;
        if request.model.backend != config.backend || request.model.model != config.model {
            return Err(LlmError::Config {
                model: self.inner.id.clone(),
                message: format!(
                    "request for {} model {:?} sent to the client of {} model {:?}",
                    request.model.backend.id(),
                    request.model.model,
                    config.backend.id(),
                    config.model
                ),
            });
        }
        Ok(())
    }

    fn pick_endpoint(&self) -> &Endpoint {
        let endpoints = &self.inner.endpoints;
        let n = endpoints.len();
        let start = self.inner.rotation.fetch_add(1, Ordering::Relaxed) % n;
        match self.inner.config.balance {
            Balance::RoundRobin => &endpoints[start],
            Balance::LeastInFlight => (0..n)
                .map(|i| &endpoints[(start + i) % n])
                .min_by_key(|e| e.in_flight.load(Ordering::Relaxed))
                .unwrap_or(&endpoints[start]),
        }
    }

    fn secret(&self) -> Option<&str> {
        self.inner.api_key.as_ref().map(|k| k.0.as_str())
    }

    fn scrub(&self, text: &str) -> String {
        let mut text = error::redact(text, self.secret());
        // Causes may quote the URL they failed on, credentials included.
        for endpoint in &self.inner.endpoints {
            if endpoint.base != endpoint.shown {
                text = text.replace(&endpoint.base, &endpoint.shown);
            }
        }
        text
    }

    fn transport_error(&self, url: &str, e: &reqwest::Error) -> LlmError {
        let model = self.inner.id.clone();
        let url = url.to_owned();
        if e.is_timeout() {
            return LlmError::Timeout {
                model,
                url,
                timeout: self.inner.timeout,
            };
        }
        let message = self.scrub(&error_chain(e));
        LlmError::Connection {
            model,
            url,
            message,
        }
    }
}

fn auth_headers(
    backend: &Backend,
    config: &ClientConfig,
    key: Option<&ApiKey>,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    let secret = |value: String| {
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            "the API key contains characters not allowed in an HTTP header".to_owned()
        })?;
        value.set_sensitive(true);
        Ok::<_, String>(value)
    };
    match backend {
        Backend::OpenAi => {
            if let Some(key) = key {
                headers.insert(
                    reqwest::header::AUTHORIZATION,
                    secret(format!("Bearer {}", key.0))?,
                );
            }
        }
        Backend::Anthropic => {
            if let Some(key) = key {
                headers.insert("x-api-key", secret(key.0.clone())?);
            }
            let version = config
                .anthropic_version
                .as_deref()
                .unwrap_or(anthropic::DEFAULT_VERSION);
            let version = HeaderValue::from_str(version)
                .map_err(|_| format!("anthropic_version {version:?} is not a header value"))?;
            headers.insert("anthropic-version", version);
        }
        Backend::Gemini => {
            if let Some(key) = key {
                headers.insert("x-goog-api-key", secret(key.0.clone())?);
            }
        }
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_key_names_the_variable() {
        let mut config = ClientConfig::new(BackendKind::OpenaiCompatible, "gpt");
        config.id = Some("gpt4o".into());
        config.api_key_env = Some("OPENAI_API_KEY".into());
        let error = Client::with_env(config, |_| None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "model gpt4o: environment variable OPENAI_API_KEY is not set (api_key_env in the spec); \
             export it or remove api_key_env for a server without keys"
        );
    }

    #[test]
    fn debug_redacts_the_key_and_credential_headers_are_refused() {
        let key = "sk-very-secret-value-1234567890";
        let mut config = ClientConfig::new(BackendKind::Anthropic, "claude");
        config.api_key_env = Some("ANTHROPIC_API_KEY".into());
        let client = Client::with_env(config.clone(), |_| Some(key.into())).unwrap();
        let debug = format!("{client:?}");
        assert!(
            !debug.contains(key) && !debug.contains("1234567890"),
            "{debug}"
        );
        assert!(debug.contains("[redacted]"));
        config
            .headers
            .insert("Authorization".into(), "Bearer x".into());
        let error = Client::with_env(config, |_| Some(key.into())).unwrap_err();
        assert!(error.to_string().contains("api_key_env"), "{error}");
    }

    #[test]
    fn loopback_urls_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8080/v1"));
        assert!(is_loopback("http://localhost:8080"));
        assert!(is_loopback("http://[::1]:80"));
        assert!(!is_loopback("https://api.openai.com/v1"));
    }
}
