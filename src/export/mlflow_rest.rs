//! A small client of MLflow's tracking REST API (`/api/2.0/mlflow/…`) and of its artifact
//! proxy (`/api/2.0/mlflow-artifacts/…`, a server started with `--serve-artifacts`), with
//! blocking calls on a current-thread runtime: experiments, runs, params, metrics, tags,
//! dataset inputs and artifact uploads, nothing else.
//!
//! Credentials come from the environment only (`MLFLOW_TRACKING_TOKEN`, or
//! `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`, as MLflow's own client reads
//! them); they are sent as a header and never printed: errors name the server by its URL
//! with any `user:password@` removed.

use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How the client authenticates, read from the environment by [`Auth::from_env`].
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    /// `Authorization: Bearer <token>` (`MLFLOW_TRACKING_TOKEN`).
    Token(String),
    /// HTTP basic authentication (`MLFLOW_TRACKING_USERNAME`, `MLFLOW_TRACKING_PASSWORD`).
    Basic { username: String, password: String },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself.
        f.write_str(match self {
            Auth::None => "Auth::None",
            Auth::Token(_) => "Auth::Token(…)",
            Auth::Basic { .. } => "Auth::Basic(…)",
        })
    }
}

impl Auth {
    /// MLflow's variables: a token wins over a user name and password.
    pub fn from_env() -> anyhow::Result<Auth> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(token) = var("MLFLOW_TRACKING_TOKEN") {
            return Ok(Auth::Token(token));
        }
        match (
            var("MLFLOW_TRACKING_USERNAME"),
            var("MLFLOW_TRACKING_PASSWORD"),
        ) {
            (Some(username), Some(password)) => Ok(Auth::Basic { username, password }),
            (None, None) => Ok(Auth::None),
            (Some(_), None) => anyhow::bail!(
                "MLFLOW_TRACKING_USERNAME is set but MLFLOW_TRACKING_PASSWORD is not: set both, or MLFLOW_TRACKING_TOKEN instead"
            ),
            (None, Some(_)) => anyhow::bail!(
                "MLFLOW_TRACKING_PASSWORD is set but MLFLOW_TRACKING_USERNAME is not: set both, or MLFLOW_TRACKING_TOKEN instead"
            ),
        }
    }

    fn is_some(&self) -> bool {
        !matches!(self, Auth::None)
    }
}

/// A key and value (params and tags).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// A metric's latest value as MLflow returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub key: String,
    pub value: f64,
    #[serde(default)]
    pub timestamp: i64,
    #[serde(default)]
    pub step: i64,
}

/// A dataset as MLflow stores it (`digest` at most 36 characters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dataset {
    pub name: String,
    pub digest: String,
    pub source_type: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// A dataset with the tags of its use by a run (`mlflow.data.context`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetInput {
    #[serde(default)]
    pub tags: Vec<KeyValue>,
    pub dataset: Dataset,
}

/// One run as `runs/search` and `runs/create` return it.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub info: RunInfo,
    #[serde(default)]
    pub data: RunData,
    #[serde(default)]
    pub inputs: RunInputs,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    pub status: String,
    #[serde(default)]
    pub start_time: i64,
    #[serde(default)]
    pub artifact_uri: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunData {
    #[serde(default)]
    pub metrics: Vec<Metric>,
    #[serde(default)]
    pub params: Vec<KeyValue>,
    #[serde(default)]
    pub tags: Vec<KeyValue>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunInputs {
    #[serde(default)]
    pub dataset_inputs: Vec<DatasetInput>,
}

impl Run {
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.data
            .tags
            .iter()
            .find(|t| t.key == key)
            .map(|t| t.value.as_str())
    }
}

/// An experiment: its id and where its runs' artifacts go.
#[derive(Debug, Clone, Deserialize)]
pub struct Experiment {
    pub experiment_id: String,
    pub name: String,
    #[serde(default)]
    pub artifact_location: String,
}

/// MLflow's limits on one `runs/log-batch` call (`mlflow/utils/validation.py`).
pub const MAX_METRICS_PER_BATCH: usize = 1000;
pub const MAX_PARAMS_TAGS_PER_BATCH: usize = 100;

/// A connection to one tracking server.
pub struct Client {
    base: reqwest::Url,
    /// `base` without credentials, for messages.
    shown: String,
    http: reqwest::Client,
    auth: Auth,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.shown)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `uri` (`http://` or `https://`; plain http sends no
    /// credentials except to this machine). Contacts nothing yet.
    pub fn new(uri: &str, auth: Auth) -> anyhow::Result<Client> {
        let mut base = reqwest::Url::parse(uri.trim()).map_err(|err| {
            anyhow::anyhow!(
                "--tracking-uri {uri}: not a URL ({err}); pass the tracking server's address, e.g. http://127.0.0.1:5000"
            )
        })?;
        let mut auth = auth;
        // `http://user:pass@host` as MLflow accepts it: basic credentials, taken out of the URL.
        if !base.username().is_empty() && !auth.is_some() {
            let decode = |s: &str| percent_decode(s).unwrap_or_else(|| s.to_string());
            auth = Auth::Basic {
                username: decode(base.username()),
                password: decode(base.password().unwrap_or("")),
            };
        }
        let _ = base.set_username("");
        let _ = base.set_password(None);
        let shown = base.as_str().trim_end_matches('/').to_string();
        match base.scheme() {
            "https" => {}
            "http" if auth.is_some() && !is_loopback(&base) => anyhow::bail!(
                "{shown}: refusing to send MLflow credentials over plain http to another machine; use https://"
            ),
            "http" => {}
            other => anyhow::bail!(
                "--tracking-uri {shown}: `{other}:` tracking URIs are not supported; tabcontam talks to a tracking server over HTTP (start one with `mlflow server --serve-artifacts` and pass its http:// or https:// address)"
            ),
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            // Servers close idle keep-alive connections early (uvicorn after 5 s, gunicorn
            // after 2 s): a connection idle longer (say, while the analysis runs) is not
            // reused, or the next call would meet a closed socket.
            .pool_idle_timeout(Duration::from_secs(1))
            .user_agent(concat!("tabcontam/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&base) {
            // A proxy from the environment must not intercept a server on this machine.
            builder = builder.no_proxy();
        }
        let http = builder.build().context("cannot build the HTTP client")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the HTTP runtime")?;
        Ok(Client {
            base,
            shown,
            http,
            auth,
            runtime,
        })
    }

    /// The server's address as messages show it (no credentials).
    pub fn server(&self) -> &str {
        &self.shown
    }

    /// The experiment named `name`, `None` when there is none (or it was deleted).
    pub fn experiment_by_name(&self, name: &str) -> anyhow::Result<Option<Experiment>> {
        let found = self.call(
            reqwest::Method::GET,
            "api/2.0/mlflow/experiments/get-by-name",
            &[("experiment_name", name)],
            None,
        );
        match found {
            Ok(body) => {
                let experiment: Experiment = parse(&body["experiment"], "experiments/get-by-name")?;
                let deleted = body["experiment"]["lifecycle_stage"] == "deleted";
                Ok((!deleted).then_some(experiment))
            }
            Err(CallError::Api { code, .. }) if code == "RESOURCE_DOES_NOT_EXIST" => Ok(None),
            Err(err) => Err(err.into_anyhow(&self.shown)),
        }
    }

    /// Creates experiment `name` and returns it.
    pub fn create_experiment(&self, name: &str) -> anyhow::Result<Experiment> {
        self.post("experiments/create", json!({ "name": name }))?;
        self.experiment_by_name(name)?.ok_or_else(|| {
            anyhow::anyhow!(
                "{}: experiment {name:?} was created but cannot be read back; check the server's log",
                self.shown
            )
        })
    }

    /// Every active run of `experiment` that has tag `tag_key`, oldest first.
    pub fn runs_with_tag(&self, experiment: &str, tag_key: &str) -> anyhow::Result<Vec<Run>> {
        let mut runs = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut body = json!({
                "experiment_ids": [experiment],
                "filter": format!("tags.`{tag_key}` LIKE '%'"),
                "run_view_type": "ACTIVE_ONLY",
                "max_results": 1000,
                "order_by": ["attributes.start_time ASC"],
            });
            if let Some(t) = &token {
                body["page_token"] = json!(t);
            }
            let page = self.post("runs/search", body)?;
            if let Some(list) = page.get("runs") {
                let list: Vec<Run> = parse(list, "runs/search")?;
                runs.extend(list);
            }
            token = page["next_page_token"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(runs);
            }
        }
    }

    /// A new run (status RUNNING) with `tags`.
    pub fn create_run(
        &self,
        experiment: &str,
        name: &str,
        start_time: i64,
        tags: &[KeyValue],
    ) -> anyhow::Result<Run> {
        let body = self.post(
            "runs/create",
            json!({ "experiment_id": experiment, "run_name": name, "start_time": start_time, "tags": tags }),
        )?;
        parse(&body["run"], "runs/create")
    }

    /// Moves a run to MLflow's trash (restorable with `mlflow runs restore`).
    pub fn delete_run(&self, run_id: &str) -> anyhow::Result<()> {
        self.post("runs/delete", json!({ "run_id": run_id }))
            .map(drop)
    }

    /// Logs params, tags and metrics, split into batches within MLflow's limits.
    pub fn log_batch(
        &self,
        run_id: &str,
        params: &[KeyValue],
        tags: &[KeyValue],
        metrics: &[Metric],
    ) -> anyhow::Result<()> {
        for chunk in params.chunks(MAX_PARAMS_TAGS_PER_BATCH) {
            self.post(
                "runs/log-batch",
                json!({ "run_id": run_id, "params": chunk }),
            )?;
        }
        for chunk in tags.chunks(MAX_PARAMS_TAGS_PER_BATCH) {
            self.post("runs/log-batch", json!({ "run_id": run_id, "tags": chunk }))?;
        }
        for chunk in metrics.chunks(MAX_METRICS_PER_BATCH) {
            self.post(
                "runs/log-batch",
                json!({ "run_id": run_id, "metrics": chunk }),
            )?;
        }
        Ok(())
    }

    /// Logs dataset inputs (MLflow keeps one input per dataset name and digest).
    pub fn log_inputs(&self, run_id: &str, datasets: &[DatasetInput]) -> anyhow::Result<()> {
        if datasets.is_empty() {
            return Ok(());
        }
        self.post(
            "runs/log-inputs",
            json!({ "run_id": run_id, "datasets": datasets }),
        )
        .map(drop)
    }

    /// Sets a run's status (`FINISHED`, …) and end time.
    pub fn finish_run(&self, run_id: &str, end_time: i64) -> anyhow::Result<()> {
        self.post(
            "runs/update",
            json!({ "run_id": run_id, "status": "FINISHED", "end_time": end_time }),
        )
        .map(drop)
    }

    /// Uploads `bytes` as `path` under the run's artifact root, through the server's
    /// artifact proxy (`artifact_root` from [`proxied_artifact_root`]).
    pub fn upload_artifact(
        &self,
        artifact_root: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<()> {
        let mut endpoint = String::from("api/2.0/mlflow-artifacts/artifacts");
        for segment in artifact_root.split('/').chain(path.split('/')) {
            if !segment.is_empty() {
                endpoint.push('/');
                endpoint.push_str(&percent_encode(segment));
            }
        }
        self.send(reqwest::Method::PUT, &endpoint, &[], Body::Bytes(bytes))
            .map(drop)
            .map_err(|err| err.into_anyhow(&self.shown))
    }

    fn post(&self, endpoint: &str, body: Value) -> anyhow::Result<Value> {
        self.call(
            reqwest::Method::POST,
            &format!("api/2.0/mlflow/{endpoint}"),
            &[],
            Some(body),
        )
        .map_err(|err| err.into_anyhow(&self.shown))
    }

    fn call(
        &self,
        method: reqwest::Method,
        endpoint: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> Result<Value, CallError> {
        let body = body.map_or(Body::None, Body::Json);
        self.send(method, endpoint, query, body)
    }

    fn send(
        &self,
        method: reqwest::Method,
        endpoint: &str,
        query: &[(&str, &str)],
        body: Body,
    ) -> Result<Value, CallError> {
        let url = self
            .base
            .join(endpoint)
            .map_err(|err| CallError::Other(format!("bad endpoint {endpoint}: {err}")))?;
        let what = endpoint.trim_start_matches("api/2.0/").to_string();
        self.runtime.block_on(async {
            let mut request = self.http.request(method, url).query(query);
            request = match &self.auth {
                Auth::None => request,
                Auth::Token(token) => request.bearer_auth(token),
                Auth::Basic { username, password } => request.basic_auth(username, Some(password)),
            };
            request = match body {
                Body::None => request,
                Body::Json(value) => request.json(&value),
                Body::Bytes(bytes) => request
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(bytes),
            };
            let response = request.send().await.map_err(CallError::Network)?;
            let status = response.status();
            let text = response.text().await.map_err(CallError::Network)?;
            if status.is_success() {
                if text.trim().is_empty() {
                    return Ok(Value::Null);
                }
                return serde_json::from_str(&text).map_err(|_| CallError::NotMlflow {
                    what: what.clone(),
                    status: status.as_u16(),
                });
            }
            if status.as_u16() == 401 || status.as_u16() == 403 {
                return Err(CallError::Denied(status.as_u16()));
            }
            match serde_json::from_str::<Value>(&text) {
                Ok(error) if error.get("error_code").is_some() => Err(CallError::Api {
                    what,
                    code: error["error_code"].as_str().unwrap_or("").to_string(),
                    message: one_line(error["message"].as_str().unwrap_or("")),
                }),
                _ => Err(CallError::NotMlflow {
                    what,
                    status: status.as_u16(),
                }),
            }
        })
    }
}

enum Body {
    None,
    Json(Value),
    Bytes(Vec<u8>),
}

/// Why one call failed (made a one-line message by [`CallError::into_anyhow`]).
#[derive(Debug)]
enum CallError {
    Network(reqwest::Error),
    Denied(u16),
    Api {
        what: String,
        code: String,
        message: String,
    },
    NotMlflow {
        what: String,
        status: u16,
    },
    Other(String),
}

impl CallError {
    fn into_anyhow(self, server: &str) -> anyhow::Error {
        match self {
            CallError::Network(err) => {
                let mut cause: &dyn std::error::Error = &err;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                let what = if err.is_timeout() {
                    "timed out"
                } else if err.is_connect() {
                    "cannot connect"
                } else {
                    "request failed"
                };
                anyhow::anyhow!(
                    "{server}: {what} ({cause}); is the MLflow tracking server running there? Start one with `mlflow server --serve-artifacts`, or pass its address with --tracking-uri or MLFLOW_TRACKING_URI"
                )
            }
            CallError::Denied(status) => anyhow::anyhow!(
                "{server}: the tracking server refused access (HTTP {status}); set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
            ),
            CallError::Api {
                what,
                code,
                message,
            } => anyhow::anyhow!("{server}: {what} failed: {code}: {message}"),
            CallError::NotMlflow { what, status } => anyhow::anyhow!(
                "{server}: answered HTTP {status} without MLflow's JSON to {what}; is this an MLflow tracking server (2.x or later)? check --tracking-uri"
            ),
            CallError::Other(message) => anyhow::anyhow!("{server}: {message}"),
        }
    }
}

/// The path under the artifact proxy of an artifact URI the proxy serves
/// (`mlflow-artifacts:/1/<run>/artifacts` or `mlflow-artifacts://host:port/1/…`), else
/// `None`: the server hands out a location it does not proxy (no `--serve-artifacts`).
pub fn proxied_artifact_root(artifact_uri: &str) -> Option<String> {
    let rest = artifact_uri.strip_prefix("mlflow-artifacts:")?;
    let path = match rest.strip_prefix("//") {
        Some(with_authority) => with_authority
            .find('/')
            .map_or("", |at| &with_authority[at..]),
        None => rest,
    };
    Some(path.trim_matches('/').to_string())
}

fn parse<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> anyhow::Result<T> {
    serde_json::from_value(value.clone()).map_err(|err| {
        anyhow::anyhow!(
            "unexpected answer to {what} ({err}); is this an MLflow tracking server (2.x or later)?"
        )
    })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Percent-encodes one path segment (everything but RFC 3986's unreserved characters).
fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxied_artifact_roots_are_recognised() {
        assert_eq!(
            proxied_artifact_root("mlflow-artifacts:/1/abc/artifacts").as_deref(),
            Some("1/abc/artifacts")
        );
        assert_eq!(
            proxied_artifact_root("mlflow-artifacts://127.0.0.1:5000/1/abc/artifacts").as_deref(),
            Some("1/abc/artifacts")
        );
        assert_eq!(proxied_artifact_root("/srv/mlruns/1/abc/artifacts"), None);
        assert_eq!(proxied_artifact_root("s3://bucket/1/abc/artifacts"), None);
    }

    #[test]
    fn uris_credentials_and_schemes() {
        let client = Client::new("http://127.0.0.1:5000", Auth::None).unwrap();
        assert_eq!(client.server(), "http://127.0.0.1:5000");
        // Credentials in the URL become basic auth and leave every message.
        let client = Client::new("http://me:s%40cret@localhost:5000/mlflow", Auth::None).unwrap();
        assert_eq!(client.server(), "http://localhost:5000/mlflow");
        assert!(
            matches!(&client.auth, Auth::Basic { username, password } if username == "me" && password == "s@cret")
        );
        assert!(!format!("{client:?} {:?}", client.auth).contains("cret"));
        let plain = Client::new("http://mlflow.example.org", Auth::Token("t0k3n".into()))
            .unwrap_err()
            .to_string();
        assert!(
            plain.contains("use https://") && !plain.contains("t0k3n"),
            "{plain}"
        );
        assert!(Client::new("https://mlflow.example.org", Auth::Token("t".into())).is_ok());
        let file = Client::new("file:///tmp/mlruns", Auth::None)
            .unwrap_err()
            .to_string();
        assert!(
            file.contains("`file:` tracking URIs are not supported"),
            "{file}"
        );
        let junk = Client::new("not a uri", Auth::None)
            .unwrap_err()
            .to_string();
        assert!(
            junk.starts_with("--tracking-uri not a uri: not a URL"),
            "{junk}"
        );
    }

    #[test]
    fn artifact_paths_are_percent_encoded() {
        assert_eq!(percent_encode("heatmap-gpt 4o.tex"), "heatmap-gpt%204o.tex");
        assert_eq!(percent_encode("a/b"), "a%2Fb");
        assert_eq!(percent_decode("s%40cret").as_deref(), Some("s@cret"));
    }

    #[test]
    fn a_closed_port_is_one_line_naming_the_server_and_the_fix() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = Client::new(&format!("http://127.0.0.1:{port}"), Auth::None).unwrap();
        let err = client.experiment_by_name("x").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("http://127.0.0.1:{port}: cannot connect")),
            "{err}"
        );
        assert!(
            err.contains("mlflow server --serve-artifacts") && !err.contains('\n'),
            "{err}"
        );
    }
}
