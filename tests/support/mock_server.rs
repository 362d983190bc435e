//! A loopback mock of the OpenAI-compatible, Anthropic and Gemini HTTP APIs, with scripted
//! and random faults, counters and a record of every request.
//!
//! Include it from an integration test or benchmark with
//! `#[path = "support/mock_server.rs"] mod mock_server;` and start it inside a tokio runtime:
//!
//! ```ignore
//! let server = MockServer::start(MockConfig::default()).await;
//! let config = server.client_config(BackendKind::OpenaiCompatible, ApiMode::Completions, "m");
//! // … send requests …
//! assert_eq!(server.request_count(), 0); // e.g. "a cached run sends nothing"
//! ```
//!
//! Answers are deterministic: `mock_server::answer(prompt, max_tokens, stop)` says exactly
//! what each endpoint returns. Like vLLM, llama.cpp and OpenAI, the server honours `seed`
//! when sampling: a request with `temperature > 0` and a `seed` is answered by
//! `sampled_answer` (or `MockConfig::sampled` when set), which depends on the seed. A minimal HTTP/1.1 server on `TcpListener` (keep-alive,
//! Content-Length bodies) rather than hyper, so that faults can break the protocol on
//! purpose: a body shorter than its Content-Length, a connection reset instead of an answer.
//! Dropping the server stops it (open connections included).

#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tabcontam::llm::client::ClientConfig;
use tabcontam::llm::{ApiMode, BackendKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the server does with one request instead of answering normally.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Fault {
    #[default]
    None,
    /// An error status with an OpenAI-style error body and, optionally, a `Retry-After` value.
    Status {
        status: u16,
        retry_after: Option<String>,
        message: String,
    },
    /// Read the request and never answer (the client's timeout must fire).
    Hang,
    /// Send the headers with the full Content-Length but only half of the body, then close.
    TruncatedBody,
    /// Close the connection (with a TCP reset) without answering.
    Reset,
    /// Answer 200 with this JSON instead of the normal body (empty `choices`, odd shapes…).
    Body(Value),
}

impl Fault {
    pub fn status(status: u16) -> Self {
        Fault::Status {
            status,
            retry_after: None,
            message: format!("mock status {status}"),
        }
    }

    /// 429 with `Retry-After: <value>` (seconds or an HTTP date).
    pub fn rate_limited(retry_after: &str) -> Self {
        Fault::Status {
            status: 429,
            retry_after: Some(retry_after.into()),
            message: "Rate limit reached".into(),
        }
    }

    /// The faults a flaky provider produces, for `MockConfig::fault_rate` (no hangs: those
    /// cost a client timeout each).
    pub fn transient_mix() -> Vec<Fault> {
        vec![
            Fault::rate_limited("0"),
            Fault::status(500),
            Fault::status(502),
            Fault::status(503),
            Fault::TruncatedBody,
            Fault::Reset,
        ]
    }
}

/// How to treat one request: wait `latency`, then answer or fail with `fault`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub latency: Duration,
    pub fault: Fault,
}

/// Decides the plan of each request (it sees the request with its arrival index).
pub type Script = Arc<dyn Fn(&RecordedRequest) -> Plan + Send + Sync>;

/// A sampled answer: `(prompt, seed)` → the text, or `None` for the default
/// [`sampled_answer`].
pub type Sampler = Arc<dyn Fn(&str, u64) -> Option<String> + Send + Sync>;

#[derive(Clone)]
pub struct MockConfig {
    /// Latency of every normal answer (a script's plan overrides it).
    pub latency: Duration,
    pub script: Option<Script>,
    /// Probability that a request (by arrival index, seeded) gets a fault from `random_faults`.
    pub fault_rate: f64,
    pub fault_seed: u64,
    /// Faults drawn from when `fault_rate` fires (default: `Fault::transient_mix()`).
    pub random_faults: Vec<Fault>,
    /// When set, requests must carry this key in the backend's header, else 401 (whose
    /// message echoes the key sent, as real APIs do, to test that clients scrub it).
    pub required_api_key: Option<String>,
    /// Keep request bodies in `requests()` (turn off for long benchmarks).
    pub record_bodies: bool,
    /// Overrides the answers of seeded sampling requests (temperature > 0 with a seed).
    pub sampled: Option<Sampler>,
    /// The version every answer reports (see [`ReportedVersion`]); unset, the server
    /// echoes the requested model name, as vLLM does.
    pub reported: ReportedVersion,
}

/// The version the server says answered: `model` (OpenAI-compatible, Anthropic) or
/// `modelVersion` (Gemini), and `system_fingerprint` (OpenAI-compatible). Shared with the
/// running server: a test changes it between two runs to play an alias (`gpt-4o`) that
/// now serves another snapshot.
#[derive(Clone, Default)]
pub struct ReportedVersion(Arc<Mutex<Option<Reported>>>);

/// A reported `(model, fingerprint)`.
type Reported = (String, Option<String>);

impl ReportedVersion {
    /// Every answer from now on reports `model` (and `fingerprint` where the API has one).
    pub fn set(&self, model: &str, fingerprint: Option<&str>) {
        *self.0.lock().unwrap() = Some((model.into(), fingerprint.map(str::to_owned)));
    }

    fn get(&self) -> Option<Reported> {
        self.0.lock().unwrap().clone()
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            script: None,
            fault_rate: 0.0,
            fault_seed: 0,
            random_faults: Vec::new(),
            required_api_key: None,
            record_bodies: true,
            sampled: None,
            reported: ReportedVersion::default(),
        }
    }
}

impl MockConfig {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    pub fn script(
        mut self,
        script: impl Fn(&RecordedRequest) -> Plan + Send + Sync + 'static,
    ) -> Self {
        self.script = Some(Arc::new(script));
        self
    }

    pub fn faults(mut self, rate: f64, seed: u64) -> Self {
        self.fault_rate = rate;
        self.fault_seed = seed;
        self
    }

    /// Answers seeded sampling requests with `sampler(prompt, seed)` where it gives one.
    pub fn sampled(
        mut self,
        sampler: impl Fn(&str, u64) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.sampled = Some(Arc::new(sampler));
        self
    }

    /// Answers report `model` and `fingerprint` until the handle changes them.
    pub fn reported(self, model: &str, fingerprint: Option<&str>) -> Self {
        self.reported.set(model, fingerprint);
        self
    }

    pub fn required_api_key(mut self, key: &str) -> Self {
        self.required_api_key = Some(key.into());
        self
    }
}

/// A script: the first `n` requests fail with `fault`, later ones are answered normally.
pub fn fail_first(
    n: u64,
    fault: Fault,
) -> impl Fn(&RecordedRequest) -> Plan + Send + Sync + 'static {
    move |request| Plan {
        latency: Duration::ZERO,
        fault: if request.index < n {
            fault.clone()
        } else {
            Fault::None
        },
    }
}

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Arrival order, from 0.
    pub index: u64,
    pub method: String,
    /// Path and query as sent.
    pub path: String,
    /// Lower-case names, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when it is not JSON or bodies are not recorded).
    pub json: Value,
    pub body_len: usize,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The prompt, whatever the API: `prompt`, the last chat message, Anthropic's message
    /// or Gemini's first part.
    pub fn prompt(&self) -> Option<&str> {
        let j = &self.json;
        j["prompt"]
            .as_str()
            .or_else(|| {
                j["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .and_then(|m| m["content"].as_str())
            })
            .or_else(|| j["contents"][0]["parts"][0]["text"].as_str())
    }
}

/// The normal answer to `prompt`: "mock answer to: <prompt>", cut to `max_tokens`
/// whitespace-separated words (then `truncated` is true), then before the first stop
/// sequence. Token counts are word counts.
pub fn answer(prompt: &str, max_tokens: u64, stop: &[String]) -> (String, bool) {
    let full = format!("mock answer to: {prompt}");
    let words: Vec<&str> = full.split_whitespace().collect();
    let truncated = words.len() as u64 > max_tokens;
    let mut text = words[..words.len().min(max_tokens as usize)].join(" ");
    if let Some(cut) = stop
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
    {
        text.truncate(cut);
        return (text, false);
    }
    (text, truncated)
}

/// The answer to a sampling request (temperature > 0) with `seed`: "mock sample <seed>
/// answer to: <prompt>", cut like [`answer`]. Another seed gives another answer, the same
/// seed the same one, as seeded servers do.
pub fn sampled_answer(prompt: &str, seed: u64, max_tokens: u64, stop: &[String]) -> (String, bool) {
    let (text, truncated) = answer(prompt, max_tokens.saturating_sub(2), stop);
    let text = text.replacen(
        "mock answer to:",
        &format!("mock sample {seed} answer to:"),
        1,
    );
    (text, truncated)
}

struct State {
    config: MockConfig,
    next_index: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    connections: AtomicUsize,
    faults: AtomicU64,
    per_path: Mutex<BTreeMap<String, u64>>,
    recorded: Mutex<Vec<RecordedRequest>>,
}

pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl MockServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    pub async fn start(mut config: MockConfig) -> Self {
        if config.random_faults.is_empty() {
            config.random_faults = Fault::transient_mix();
        }
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(State {
            config,
            next_index: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            faults: AtomicU64::new(0),
            per_path: Mutex::new(BTreeMap::new()),
            recorded: Mutex::new(Vec::new()),
        });
        let (shutdown, mut stop) = watch::channel(false);
        let accept_state = state.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        accept_state.connections.fetch_add(1, Ordering::SeqCst);
                        tokio::spawn(serve_connection(stream, accept_state.clone(), stop.clone()));
                    }
                    _ = stop.changed() => return,
                }
            }
        });
        Self {
            addr,
            state,
            shutdown,
        }
    }

    /// A server answering every request normally and at once.
    pub async fn start_default() -> Self {
        Self::start(MockConfig::default()).await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>` (Anthropic and Gemini base URL).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL a client of `backend` is configured with (`…/v1` for OpenAI-compatible).
    pub fn base_url(&self, backend: BackendKind) -> String {
        match backend {
            BackendKind::OpenaiCompatible => format!("{}/v1", self.url()),
            _ => self.url(),
        }
    }

    /// A client configuration pointing at this server, with test-friendly retry timing
    /// (1 ms backoff base, 50 ms ceiling) and a 5 s timeout.
    pub fn client_config(&self, backend: BackendKind, api: ApiMode, model: &str) -> ClientConfig {
        let mut config = ClientConfig::new(backend, model);
        config.api = api;
        config.base_url = vec![self.base_url(backend)];
        config.timeout_s = 5.0;
        config.backoff_base_ms = 1;
        config.backoff_max_ms = 50;
        config
    }

    /// Requests received (complete request heads and bodies), faulted ones included.
    pub fn request_count(&self) -> u64 {
        self.state.next_index.load(Ordering::SeqCst)
    }

    /// Requests received for one exact path (e.g. `/v1/completions`).
    pub fn requests_to(&self, path: &str) -> u64 {
        self.state
            .per_path
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub fn per_path(&self) -> BTreeMap<String, u64> {
        self.state.per_path.lock().unwrap().clone()
    }

    /// The most requests that were being handled at the same moment.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// TCP connections accepted (with keep-alive, at most the client's concurrency).
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Requests that got a fault (scripted or random).
    pub fn fault_count(&self) -> u64 {
        self.state.faults.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorded.lock().unwrap().clone()
    }

    /// The version the server reports, to change between runs.
    pub fn reported_version(&self) -> ReportedVersion {
        self.state.config.reported.clone()
    }
}

/// Decrements the in-flight count however the request ends.
struct Handling<'a>(&'a State);

impl<'a> Handling<'a> {
    fn start(state: &'a State) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    content_length: usize,
    close: bool,
}

fn parse_head(bytes: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let version = request_line.next()?;
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some() {
        return None; // chunked request bodies are not supported (reqwest sends Content-Length)
    }
    let content_length = header("content-length").map_or(Some(0), |v| v.parse().ok())?;
    let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"))
        || version == "HTTP/1.0";
    Some(Head {
        method,
        path,
        headers,
        content_length,
        close,
    })
}

async fn serve_connection(
    mut stream: TcpStream,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        // Read one request head and body.
        let head_end = loop {
            if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break pos + 4;
            }
            if buf.len() > 1 << 20 || !read_more(&mut stream, &mut buf, &mut stop).await {
                return;
            }
        };
        let Some(head) = parse_head(&buf[..head_end - 4]) else {
            let _ = stream
                .write_all(&http_response(
                    400,
                    &[],
                    b"{\"error\":\"bad request head\"}",
                ))
                .await;
            return;
        };
        while buf.len() < head_end + head.content_length {
            if !read_more(&mut stream, &mut buf, &mut stop).await {
                return;
            }
        }
        let body: Vec<u8> = buf
            .drain(..head_end + head.content_length)
            .skip(head_end)
            .collect();

        let _handling = Handling::start(&state);
        let index = state.next_index.fetch_add(1, Ordering::SeqCst);
        *state
            .per_path
            .lock()
            .unwrap()
            .entry(head.path.clone())
            .or_insert(0) += 1;
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let request = RecordedRequest {
            index,
            method: head.method.clone(),
            path: head.path.clone(),
            headers: head.headers.clone(),
            json: if state.config.record_bodies {
                json.clone()
            } else {
                Value::Null
            },
            body_len: body.len(),
        };
        let mut plan = match &state.config.script {
            Some(script) => script(&request),
            None => Plan {
                latency: state.config.latency,
                fault: Fault::None,
            },
        };
        if plan.fault == Fault::None && state.config.fault_rate > 0.0 {
            let draw =
                splitmix(state.config.fault_seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            if unit(draw) < state.config.fault_rate {
                let faults = &state.config.random_faults;
                plan.fault = faults[(splitmix(draw) % faults.len() as u64) as usize].clone();
            }
        }
        if plan.fault != Fault::None {
            state.faults.fetch_add(1, Ordering::SeqCst);
        }
        state.recorded.lock().unwrap().push(request.clone());

        if !plan.latency.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(plan.latency) => {}
                _ = stop.changed() => return,
            }
        }
        let reply = match plan.fault {
            Fault::None => respond(&state.config, &request, &json),
            Fault::Body(value) => http_response(200, &[], value.to_string().as_bytes()),
            Fault::Status {
                status,
                retry_after,
                message,
            } => {
                let headers: Vec<(&str, String)> = retry_after
                    .map(|v| ("Retry-After", v))
                    .into_iter()
                    .collect();
                let body = json!({"error": {"message": message, "type": "mock_error"}});
                http_response(status, &headers, body.to_string().as_bytes())
            }
            Fault::Hang => {
                // Wait for the client to give up (it closes the connection) or the server to stop.
                let mut sink = Vec::new();
                while read_more(&mut stream, &mut sink, &mut stop).await {}
                return;
            }
            Fault::TruncatedBody => {
                let full = respond(&state.config, &request, &json);
                let head_len = full
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map_or(full.len(), |p| p + 4);
                let cut = head_len + (full.len() - head_len) / 2;
                let _ = stream.write_all(&full[..cut]).await;
                let _ = stream.shutdown().await;
                return;
            }
            Fault::Reset => {
                let _ = stream.set_zero_linger();
                return;
            }
        };
        if stream.write_all(&reply).await.is_err() || head.close {
            return;
        }
    }
}

/// Reads more bytes; false when the peer closed, on error, or when the server stops.
async fn read_more(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        read = stream.read_buf(buf) => matches!(read, Ok(n) if n > 0),
        _ = stop.changed() => false,
    }
}

fn http_response(status: u16, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Mock Status",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The normal answer of the endpoint the request was sent to.
fn respond(config: &MockConfig, request: &RecordedRequest, body: &Value) -> Vec<u8> {
    let path = request.path.split('?').next().unwrap_or_default();
    if request.method == "GET" && (path == "/health" || path.ends_with("/models")) {
        return http_response(200, &[], br#"{"status":"ok","data":[{"id":"mock"}]}"#);
    }
    let api = if path.ends_with("/chat/completions") {
        Api::Chat
    } else if path.ends_with("/completions") {
        Api::Completions
    } else if path.ends_with("/v1/messages") {
        Api::Anthropic
    } else if path.starts_with("/v1beta/models/") && path.ends_with(":generateContent") {
        Api::Gemini
    } else {
        let error = json!({"error": {"message": format!("no route for {path}")}});
        return http_response(404, &[], error.to_string().as_bytes());
    };
    if let Some(required) = &config.required_api_key {
        let sent = match api {
            Api::Completions | Api::Chat => request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer ")),
            Api::Anthropic => request.header("x-api-key"),
            Api::Gemini => request.header("x-goog-api-key"),
        };
        if sent != Some(required.as_str()) {
            let message = format!("Incorrect API key provided: {}", sent.unwrap_or("(none)"));
            let error = json!({"error": {"message": message, "type": "invalid_request_error"}});
            return http_response(401, &[], error.to_string().as_bytes());
        }
    }
    let prompt = match api {
        Api::Completions => body["prompt"].as_str(),
        Api::Chat | Api::Anthropic => body["messages"][0]["content"].as_str(),
        Api::Gemini => body["contents"][0]["parts"][0]["text"].as_str(),
    };
    let Some(prompt) = prompt else {
        let error = json!({"error": {"message": "no prompt in the request body"}});
        return http_response(400, &[], error.to_string().as_bytes());
    };
    let (max_tokens, stop) = match api {
        Api::Gemini => (
            &body["generationConfig"]["maxOutputTokens"],
            &body["generationConfig"]["stopSequences"],
        ),
        Api::Anthropic => (&body["max_tokens"], &body["stop_sequences"]),
        _ => (&body["max_tokens"], &body["stop"]),
    };
    let max_tokens = max_tokens.as_u64().unwrap_or(16);
    let stop: Vec<String> = match stop {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let (temperature, seed) = match api {
        Api::Gemini => (
            &body["generationConfig"]["temperature"],
            &body["generationConfig"]["seed"],
        ),
        _ => (&body["temperature"], &body["seed"]),
    };
    let sampling_seed = seed
        .as_u64()
        .filter(|_| temperature.as_f64().is_some_and(|t| t > 0.0));
    let (text, truncated) = match sampling_seed {
        Some(seed) => match config.sampled.as_ref().and_then(|f| f(prompt, seed)) {
            Some(text) => (text, false),
            None => sampled_answer(prompt, seed, max_tokens, &stop),
        },
        None => answer(prompt, max_tokens, &stop),
    };
    let prompt_tokens = prompt.split_whitespace().count();
    let completion_tokens = text.split_whitespace().count();
    let (model, fingerprint) = config
        .reported
        .get()
        .unwrap_or_else(|| (body["model"].as_str().unwrap_or("mock").to_owned(), None));
    let mut reply = match api {
        Api::Completions => json!({
            "id": format!("cmpl-{}", request.index), "object": "text_completion", "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": null,
                         "finish_reason": if truncated { "length" } else { "stop" }}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }),
        Api::Chat => json!({
            "id": format!("chatcmpl-{}", request.index), "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": if truncated { "length" } else { "stop" }}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }),
        Api::Anthropic => json!({
            "id": format!("msg_{}", request.index), "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": if truncated { "max_tokens" } else { "end_turn" }, "stop_sequence": null,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
        }),
        Api::Gemini => json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": if truncated { "MAX_TOKENS" } else { "STOP" }, "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": completion_tokens,
                              "totalTokenCount": prompt_tokens + completion_tokens},
            "modelVersion": model,
        }),
    };
    if let (Some(fingerprint), Api::Completions | Api::Chat) = (fingerprint, api) {
        reply["system_fingerprint"] = json!(fingerprint);
    }
    http_response(200, &[], reply.to_string().as_bytes())
}

#[derive(Clone, Copy)]
enum Api {
    Completions,
    Chat,
    Anthropic,
    Gemini,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}
