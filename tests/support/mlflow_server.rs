//! A real MLflow tracking server for the tests, started from the venv that
//! `scripts/ci-install-mlflow.sh` installs: `mlflow server` on a free loopback port with a
//! SQLite backend store and proxied artifacts (`--serve-artifacts`) in a temporary folder,
//! stopped (its whole process group: uvicorn and its job runner) when dropped; and a small
//! client of its REST API to read back what an export wrote.
//!
//! Include it with `#[path = "support/mlflow_server.rs"] mod mlflow_server;` beside
//! `#[path = "support/skip.rs"] mod skip;`.

#![allow(dead_code)] // each test binary uses a different part

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::skip;

/// How long the server may take to answer `/health` (about 40 s on a busy 2-core machine:
/// it migrates its SQLite store first).
const STARTUP: Duration = Duration::from_secs(240);

pub struct MlflowServer {
    child: Child,
    pub url: String,
    pub dir: PathBuf,
    log: PathBuf,
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
}

/// The `mlflow` command of the test venv.
pub fn mlflow_bin() -> PathBuf {
    skip::assets_dir().join("venv-mlflow/bin/mlflow")
}

impl MlflowServer {
    /// Starts a server storing everything under `dir`; `None` after a [`skip::skip`] when
    /// MLflow is not installed (a failure in CI).
    pub fn start(dir: &Path) -> Option<MlflowServer> {
        let bin = skip::require(
            mlflow_bin(),
            |b| b.is_file(),
            format!(
                "{} is not installed (run `bash scripts/ci-install-mlflow.sh`)",
                mlflow_bin().display()
            ),
        )?;
        std::fs::create_dir_all(dir).unwrap();
        let port = free_port();
        let log = dir.join("mlflow-server.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--backend-store-uri")
            .arg(format!("sqlite:///{}", dir.join("mlflow.db").display()))
            .arg("--serve-artifacts")
            .arg("--artifacts-destination")
            .arg(dir.join("artifacts"))
            .args(["--workers", "1"])
            // No job runner (seven huey consumers for GenAI scorers the tests never use).
            .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            // Its own process group, so that drop stops uvicorn's children too.
            .process_group(0)
            .spawn()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let http = reqwest::Client::builder()
            .no_proxy()
            // A fresh connection per call: the server closes idle ones after 5 s.
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let mut server = MlflowServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir: dir.to_path_buf(),
            log,
            runtime,
            http,
        };
        server.wait_healthy();
        Some(server)
    }

    fn wait_healthy(&mut self) {
        let started = Instant::now();
        let health = format!("{}/health", self.url);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "mlflow server exited ({status}) before answering; its log:\n{}",
                    self.log_tail()
                );
            }
            let up = self
                .runtime
                .block_on(async { self.http.get(&health).send().await })
                .is_ok_and(|r| r.status().is_success());
            if up {
                eprintln!(
                    "mlflow server up at {} after {:.1} s",
                    self.url,
                    started.elapsed().as_secs_f64()
                );
                return;
            }
            assert!(
                started.elapsed() < STARTUP,
                "mlflow server did not answer {health} within {STARTUP:?}; its log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// GET `path` (with `query`); the JSON answer, or the error body with its status.
    pub fn get(&self, path: &str, query: &[(&str, &str)]) -> (u16, Value) {
        let url = format!("{}/{path}", self.url);
        self.runtime.block_on(async {
            let response = self.http.get(&url).query(query).send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        })
    }

    /// GET the raw bytes at `path`.
    pub fn get_bytes(&self, path: &str) -> Vec<u8> {
        let url = format!("{}/{path}", self.url);
        self.runtime.block_on(async {
            let response = self.http.get(&url).send().await.unwrap();
            assert!(
                response.status().is_success(),
                "GET {url}: {}",
                response.status()
            );
            response.bytes().await.unwrap().to_vec()
        })
    }

    /// POST `body` as JSON to `path`; the JSON answer (panics on an error status).
    pub fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/{path}", self.url);
        self.runtime.block_on(async {
            let response = self.http.post(&url).json(&body).send().await.unwrap();
            let status = response.status();
            let text = response.text().await.unwrap();
            assert!(status.is_success(), "POST {url}: {status}: {text}");
            serde_json::from_str(&text).unwrap()
        })
    }
}

impl Drop for MlflowServer {
    fn drop(&mut self) {
        let group = self.child.id() as libc::pid_t;
        // SAFETY: signals the process group this server was started in, and nothing else.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above; whatever of the group is still there.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
