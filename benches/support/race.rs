//! What the benches that race llama.cpp share: the test assets, a fresh `llama-server` per
//! measurement (killed on drop), requests to its `/completion`, and the machine's state
//! (load average, the cores' speed, peak memory). Included by path (`#[path = "support/race.rs"]`).

#![allow(dead_code)] // each bench uses its own part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tabcontam::infer::LocalOptions;
use tabcontam::infer::fetch::DEFAULT_MODEL_FILE;
use tabcontam::llm::Request;
use tabcontam::run::session;

/// `TABCONTAM_TEST_ASSETS`, else `~/.cache/tabcontam-test-assets` (the install scripts'
/// folder: models under `models/`, servers under `bin/`).
pub fn assets_dir() -> PathBuf {
    std::env::var_os("TABCONTAM_TEST_ASSETS").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/tabcontam-test-assets")
        },
        PathBuf::from,
    )
}

/// `BENCH_MODEL`, else SmolLM2-135M-Instruct Q4_1 from the assets.
pub fn model_path() -> PathBuf {
    std::env::var_os("BENCH_MODEL").map_or_else(
        || assets_dir().join("models").join(DEFAULT_MODEL_FILE),
        PathBuf::from,
    )
}

/// The file llama-server loads: `BENCH_LLAMA_MODEL` (the same weights as GGUF where
/// `BENCH_MODEL` is a safetensors checkpoint), else [`model_path`].
pub fn llama_model_path() -> PathBuf {
    std::env::var_os("BENCH_LLAMA_MODEL").map_or_else(model_path, PathBuf::from)
}

/// How our engine loads the model: `BENCH_QUANTIZE` (`q8_0`, `q8_0-all`: a checkpoint's
/// matrices quantized at load, as a spec's `quantize`), else the defaults.
pub fn local_options() -> LocalOptions {
    let quantize = std::env::var("BENCH_QUANTIZE").ok().map(|name| {
        serde_json::from_value(Value::String(name.clone()))
            .unwrap_or_else(|_| panic!("BENCH_QUANTIZE={name}: expected q8_0 or q8_0-all"))
    });
    LocalOptions {
        quantize,
        ..LocalOptions::default()
    }
}

/// `BENCH_SPEC`, else `experiments/demo.toml`.
pub fn spec_path() -> PathBuf {
    std::env::var_os("BENCH_SPEC").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments/demo.toml"),
        PathBuf::from,
    )
}

/// The requests of `spec` as `tabcontam run` would send them, in plan order, and its first
/// model's micro-batch size.
pub fn spec_requests(spec: &Path) -> (Vec<Request>, usize) {
    let spec = tabcontam::run::spec::Spec::load(spec).expect("load the spec");
    let prepared = session::prepare(&spec, None, &[]).expect("plan the spec");
    let max_batch = prepared.spec.models[0]
        .max_batch
        .unwrap_or(LocalOptions::default().max_batch);
    let requests = prepared
        .plan
        .requests
        .values()
        .map(|source| prepared.plan.request(&prepared.spec, source))
        .collect();
    (requests, max_batch)
}

/// The number in environment variable `name`, else `default`.
pub fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The asset a benchmark needs, or a skip (a failure under `TABCONTAM_CI=1`).
pub fn require(path: &Path, why: &str) -> bool {
    if path.exists() {
        return true;
    }
    let message = format!("{} missing ({why})", path.display());
    if std::env::var("TABCONTAM_CI").as_deref() == Ok("1") {
        panic!("{message}");
    }
    eprintln!("SKIP: {message}");
    false
}

/// The llama-server built for this CPU (`scripts/install-test-server.sh --native`) when
/// present, else the portable test server.
pub fn server_binary() -> PathBuf {
    let native = assets_dir().join("bin").join("llama-server-native");
    if native.is_file() {
        native
    } else {
        assets_dir().join("bin").join("llama-server")
    }
}

/// What a race runs on, from the environment: our model and spec, and llama-server's
/// binary and model when both are installed.
pub struct Setup {
    pub model_path: PathBuf,
    pub spec: PathBuf,
    pub server_binary: PathBuf,
    pub llama_model: PathBuf,
    /// Without the server, our engine is still measured (a skip of the comparison).
    pub have_server: bool,
}

/// The race's [`Setup`] (candle set up first, as the `tabcontam` binary does), or `None`
/// when our model is missing (a skip, a failure under `TABCONTAM_CI=1`).
pub fn setup() -> Option<Setup> {
    candle_on_calling_thread();
    let model_path = model_path();
    if !require(&model_path, "scripts/ci-install-local-models.sh") {
        return None;
    }
    let server_binary = server_binary();
    let llama_model = llama_model_path();
    let have_server = require(&server_binary, "scripts/install-test-server.sh")
        && require(&llama_model, "BENCH_LLAMA_MODEL");
    Some(Setup {
        model_path,
        spec: spec_path(),
        server_binary,
        llama_model,
        have_server,
    })
}

/// Threads llama-server computes with: `BENCH_LLAMA_THREADS`, else every core.
pub fn llama_threads() -> usize {
    env_number(
        "BENCH_LLAMA_THREADS",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    )
}

pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh llama-server with `slots` slots (2048 positions each; the bench's threads and
/// `BENCH_LLAMA_ARGS`, then `extra`), once it answers `/health`.
pub fn start_server(
    binary: &Path,
    model: &Path,
    slots: usize,
    log: &Path,
    extra: &[&str],
) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let threads = llama_threads();
    let log_file = std::fs::File::create(log).expect("log file");
    let child = Command::new(binary)
        .args(["-m".as_ref(), model.as_os_str()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // 2048 positions per slot: the longest demo prompt plus its answer.
        .args(["-c", &(2048 * slots).to_string(), "-np", &slots.to_string()])
        .args(["-t", &threads.to_string(), "-tb", &threads.to_string()])
        // Continuous batching and the prompt cache are llama-server's defaults (the prompt
        // cache is also asked for in every request).
        .arg("--no-webui")
        .args(
            std::env::var("BENCH_LLAMA_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log file"))
        .stderr(log_file)
        .spawn()
        .expect("start llama-server");
    let mut server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!(
                "llama-server exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if http_get(port, "/health").is_some_and(|(code, _)| code == 200) {
            return server;
        }
        assert!(Instant::now() < deadline, "llama-server not ready in 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The instruction sets llama-server reports using (its `system_info` line), or why not.
/// Newer builds print that line only at verbosity 4, which also logs every request, so a
/// server of its own is started for it after the timed rounds.
pub fn cpu_features(binary: &Path, model: &Path, log: &Path) -> String {
    drop(start_server(binary, model, 1, log, &["-lv", "4"]));
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .find(|line| line.contains("system_info"))
        .map(|line| {
            let enabled: Vec<&str> = line
                .split('|')
                .map(str::trim)
                .filter(|part| part.ends_with("= 1"))
                .map(|part| part.trim_end_matches(" = 1"))
                .collect();
            format!("({})", enabled.join(", "))
        })
        .unwrap_or_else(|| "(no system_info line in its log)".into())
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().ok()?;
        let response = client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .await
            .ok()?;
        let code = response.status().as_u16();
        Some((code, response.text().await.ok()?))
    })
}

/// Every body POSTed to `/completion`, `concurrency` at a time in order; the answers in
/// the bodies' order and the wall time of all of them.
pub fn complete_all(port: u16, bodies: Vec<Value>, concurrency: usize) -> (Vec<Value>, Duration) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(bodies.len());
        for body in bodies {
            let client = client.clone();
            let gate = std::sync::Arc::clone(&gate);
            let url = format!("http://127.0.0.1:{port}/completion");
            tasks.push(tokio::spawn(async move {
                let _permit = gate.acquire_owned().await.expect("semaphore");
                let answer: Value = client
                    .post(url)
                    .json(&body)
                    .send()
                    .await
                    .expect("llama-server request")
                    .json()
                    .await
                    .expect("llama-server JSON");
                answer
            }));
        }
        let mut answers = Vec::with_capacity(tasks.len());
        for task in tasks {
            answers.push(task.await.expect("request task"));
        }
        (answers, started.elapsed())
    })
}

/// Peak resident memory of this process so far, in MiB.
pub fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as f64 / 1024.0
}

/// What the cores deliver now: the selected path's inner instruction (`vpdpbusd` on
/// `avx512`, FMA on `avx2`; `tabcontam_kernels::peak`) run on every core at once, in G
/// multiply-adds per second with the path's name. This machine's vCPUs have measured from
/// half to all of their best over a day, so a wall time means little without it.
pub fn core_speed() -> String {
    let isa = tabcontam_kernels::cpu::isa();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "{:.0} G MAC/s ({} on {cores} cores)",
        tabcontam_kernels::peak::on_every_core(isa) / 1e9,
        isa.name()
    )
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Before the first thread, as the `tabcontam` binary does (src/main.rs): candle's
/// elementwise ops on the calling thread instead of its spinning barrier pool.
fn candle_on_calling_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}
