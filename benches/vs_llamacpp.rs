//! The demo workload through tabcontam's in-process engine and through llama.cpp's own
//! server, in one run: the requests of `experiments/demo.toml` (built by the library's
//! planner, exactly what `tabcontam run` sends), the same GGUF file, the same max tokens,
//! greedy. Prints wall time, prefill and decode tokens per second and the wall-time ratio.
//!
//! llama-server runs in its best configuration here: `-np 4` parallel slots (continuous
//! batching, requests sent four at a time) with its prompt cache on, all cores. Our engine
//! runs the requests the way `tabcontam run` does (consecutive requests with the same
//! parameters in micro-batches of the spec's `max_batch`, shared prefixes encoded once).
//!
//! `cargo bench --bench vs_llamacpp` (env: `TABCONTAM_TEST_ASSETS` (the SmolLM2 GGUF under
//! `models/`, `llama-server` under `bin/`), `BENCH_MODEL` (another GGUF), `BENCH_SPEC`
//! (another spec), `BENCH_LLAMA_SLOTS` (4), `BENCH_LLAMA_THREADS` (all cores),
//! `BENCH_ROUNDS` (1: repeats of each engine, the
//! best wall time is kept), `BENCH_LIMIT` (the first N requests only)).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tabcontam::infer::fetch::DEFAULT_MODEL_FILE;
use tabcontam::infer::{LocalModel, LocalOptions};
use tabcontam::llm::{GenerationParams, Request};
use tabcontam::run::session;

fn assets_dir() -> PathBuf {
    std::env::var_os("TABCONTAM_TEST_ASSETS").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/tabcontam-test-assets")
        },
        PathBuf::from,
    )
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The asset a benchmark needs, or a skip (a failure under `TABCONTAM_CI=1`).
fn require(path: &Path, why: &str) -> bool {
    if path.exists() {
        return true;
    }
    let message = format!("{} missing ({why})", path.display());
    if std::env::var("TABCONTAM_CI").as_deref() == Ok("1") {
        panic!("{message}");
    }
    eprintln!("SKIP: vs_llamacpp: {message}");
    false
}

/// What one engine did on the whole request set.
struct Measured {
    wall: Duration,
    prompt_tokens: u64,
    prefill_seconds: f64,
    generated: u64,
    decode_seconds: f64,
    texts: Vec<String>,
}

impl Measured {
    fn prefill_rate(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_seconds.max(1e-9)
    }

    fn decode_rate(&self) -> f64 {
        self.generated as f64 / self.decode_seconds.max(1e-9)
    }
}

/// The requests as `tabcontam run` would send them, in plan order.
fn demo_requests(spec: &Path) -> (Vec<Request>, usize) {
    let prepared = session::prepare(spec, None, &[]).expect("plan the demo spec");
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

/// tabcontam's engine, batching as `run::local_exec::send_local` does (consecutive
/// requests with equal parameters), or, with `mixed_budgets`, also joining consecutive
/// requests that differ only in max tokens ([`LocalModel::generate_batch_budgets`]).
fn run_tabcontam(
    model: &mut LocalModel,
    requests: &[Request],
    max_batch: usize,
    mixed_budgets: bool,
) -> Measured {
    model.clear_prefix_cache();
    model.reset_stats();
    let started = Instant::now();
    let mut texts = Vec::with_capacity(requests.len());
    let mut index = 0;
    while index < requests.len() {
        let first = &requests[index];
        let mut end = index + 1;
        let joins = |r: &Request| {
            if mixed_budgets {
                GenerationParams {
                    max_tokens: first.params.max_tokens,
                    ..r.params.clone()
                } == first.params
            } else {
                r.params == first.params
            }
        };
        while end < requests.len()
            && end - index < max_batch
            && joins(&requests[end])
            && requests[end].sample == first.sample
        {
            end += 1;
        }
        let batch = &requests[index..end];
        let prompts: Vec<&str> = batch.iter().map(|r| r.prompt.as_str()).collect();
        let budgets: Vec<u32> = batch.iter().map(|r| r.params.max_tokens).collect();
        let responses = model
            .generate_batch_budgets(&prompts, &budgets, &first.params, first.sample)
            .expect("generate");
        texts.extend(responses.into_iter().map(|r| r.text));
        index = end;
    }
    let wall = started.elapsed();
    let stats = model.stats();
    Measured {
        wall,
        prompt_tokens: stats.prompt_tokens_processed,
        prefill_seconds: stats.prefill_nanos as f64 / 1e9,
        generated: stats.tokens_generated,
        decode_seconds: stats.decode_nanos as f64 / 1e9,
        texts,
    }
}

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_llama_server(binary: &Path, model: &Path, slots: usize, log: &Path) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let threads = env_number(
        "BENCH_LLAMA_THREADS",
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    );
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

/// Every request to llama-server's `/completion`, `slots` at a time, in plan order.
fn run_llama(port: u16, requests: &[Request], slots: usize) -> Measured {
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
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(slots));
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(requests.len());
        for request in requests {
            let client = client.clone();
            let gate = std::sync::Arc::clone(&gate);
            let body = json!({
                "prompt": request.prompt,
                "n_predict": request.params.max_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "seed": 0,
                "cache_prompt": true,
            });
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
        let wall = started.elapsed();
        let timing = |key: &str| -> f64 {
            answers
                .iter()
                .map(|a| a["timings"][key].as_f64().unwrap_or(0.0))
                .sum()
        };
        Measured {
            wall,
            prompt_tokens: timing("prompt_n") as u64,
            prefill_seconds: timing("prompt_ms") / 1e3,
            generated: timing("predicted_n") as u64,
            decode_seconds: timing("predicted_ms") / 1e3,
            texts: answers
                .iter()
                .map(|a| a["content"].as_str().unwrap_or_default().to_string())
                .collect(),
        }
    })
}

/// Peak resident memory of this process so far, in MiB.
fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as f64 / 1024.0
}

fn best(runs: Vec<Measured>) -> Measured {
    runs.into_iter()
        .min_by_key(|m| m.wall)
        .expect("at least one round")
}

fn main() {
    let model_path = std::env::var_os("BENCH_MODEL").map_or_else(
        || assets_dir().join("models").join(DEFAULT_MODEL_FILE),
        PathBuf::from,
    );
    let spec = std::env::var_os("BENCH_SPEC").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments/demo.toml"),
        PathBuf::from,
    );
    let server_binary = assets_dir().join("bin").join("llama-server");
    if !require(&model_path, "scripts/ci-install-local-models.sh") {
        return;
    }
    // Without the server, our engine is still measured (a skip of the comparison).
    let have_server = require(&server_binary, "scripts/install-test-server.sh");
    let slots = env_number("BENCH_LLAMA_SLOTS", 4);
    let rounds = env_number("BENCH_ROUNDS", 1).max(1);
    let (mut requests, max_batch) = demo_requests(&spec);
    requests.truncate(env_number("BENCH_LIMIT", requests.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("spec: {} ({} requests)", spec.display(), requests.len());
    println!("model: {}", model_path.display());
    println!(
        "greedy, max tokens per request as planned ({} in all); {threads} cores",
        requests.iter().map(|r| r.params.max_tokens).sum::<u32>()
    );

    let loading = Instant::now();
    let mut model = LocalModel::load(&model_path, &LocalOptions::default()).expect("load model");
    let load_seconds = loading.elapsed().as_secs_f64();
    let ours = best(
        (0..rounds)
            .map(|_| run_tabcontam(&mut model, &requests, max_batch, false))
            .collect(),
    );
    let mixed = best(
        (0..rounds)
            .map(|_| run_tabcontam(&mut model, &requests, max_batch, true))
            .collect(),
    );
    let our_rss = peak_rss_mib();
    drop(model);

    let mut rows = vec![
        (format!("tabcontam, as run (batch {max_batch})"), &ours),
        (format!("tabcontam, mixed budgets ({max_batch})"), &mixed),
    ];
    let llama = have_server.then(|| {
        let logs = tempfile::tempdir().expect("temp dir");
        let loading = Instant::now();
        let server = start_llama_server(
            &server_binary,
            &model_path,
            slots,
            &logs.path().join("llama-server.log"),
        );
        let server_load_seconds = loading.elapsed().as_secs_f64();
        let theirs = best(
            (0..rounds)
                .map(|_| run_llama(server.port, &requests, slots))
                .collect(),
        );
        (theirs, server_load_seconds)
    });
    if let Some((theirs, _)) = &llama {
        rows.push((format!("llama-server (-np {slots}, prompt cache)"), theirs));
    }

    println!();
    println!(
        "{:<34} {:>8} {:>14} {:>13} {:>10} {:>12}",
        "engine", "wall s", "prompt tokens", "prefill t/s", "generated", "decode t/s"
    );
    for (name, m) in rows {
        println!(
            "{name:<34} {:>8.2} {:>14} {:>13.1} {:>10} {:>12.1}",
            m.wall.as_secs_f64(),
            m.prompt_tokens,
            m.prefill_rate(),
            m.generated,
            m.decode_rate()
        );
    }
    println!();
    println!("model load: {load_seconds:.2} s (not in wall times)");
    let Some((theirs, server_load_seconds)) = llama else {
        println!("llama-server: not measured");
        println!("peak RSS of this process after the in-process runs: {our_rss:.0} MiB");
        return;
    };
    let same_mixed = mixed
        .texts
        .iter()
        .zip(&theirs.texts)
        .filter(|(a, b)| a == b)
        .count();
    let same = ours
        .texts
        .iter()
        .zip(&theirs.texts)
        .filter(|(a, b)| a == b)
        .count();
    println!(
        "wall-time ratio (llama-server / tabcontam): {:.2}x as run, {:.2}x with mixed budgets (goal >= 1.20x)",
        theirs.wall.as_secs_f64() / ours.wall.as_secs_f64(),
        theirs.wall.as_secs_f64() / mixed.wall.as_secs_f64()
    );
    println!(
        "outputs identical to llama-server's: {same}/{} as run, {same_mixed} mixed; llama-server start {server_load_seconds:.2} s (not in wall times)",
        requests.len()
    );
    println!(
        "prompt tokens: those run through the model (shared prefixes and cached prompts count once); \
rates: tabcontam per micro-batch, llama-server from its per-request timings (summed over parallel slots)"
    );
    println!("peak RSS of this process after the in-process runs: {our_rss:.0} MiB");
}
