//! The demo workload through tabcontam's in-process engine and through llama.cpp's own
//! server, in one run: the requests of `experiments/demo.toml` (built by the library's
//! planner, exactly what `tabcontam run` sends), the same GGUF file, the same max tokens,
//! greedy. Prints, per engine, the median wall time over the rounds, prefill and decode
//! tokens per second, and the wall-time ratio.
//!
//! Our engine runs the requests exactly as `tabcontam run` does
//! ([`local_exec::schedule`]: prompts tokenized once, grouped by everything but their
//! token budget, sorted by length then token ids into micro-batches of the spec's
//! `max_batch`, shared prefixes encoded once). llama-server runs with its prompt cache
//! on and continuous batching, threads = cores, once per parallel-slot count of
//! `BENCH_LLAMA_SLOTS` (requests sent that many at a time); the best configuration is the
//! one compared. The server is the one built for this CPU (`bin/llama-server-native`,
//! `scripts/install-test-server.sh --native`) when present, else the portable test server;
//! `BENCH_LLAMA_ARGS` adds flags (e.g. `--no-repack`).
//!
//! Every round is cold on both sides: a fresh llama-server per round and configuration
//! (its host-memory prompt cache would otherwise answer the prompts of the previous
//! round, which tabcontam never sends twice), and our engine's prefix cache cleared.
//!
//! The machine may be shared: the engines run interleaved (ours, then each llama-server
//! configuration, round after round) and the table shows medians; the load average is
//! printed before and after.
//!
//! `cargo bench --bench vs_llamacpp` (env: `TABCONTAM_TEST_ASSETS` (the SmolLM2 GGUF under
//! `models/`, `llama-server` under `bin/`), `BENCH_MODEL` (another GGUF), `BENCH_SPEC`
//! (another spec), `BENCH_LLAMA_SLOTS` (`1,2,4`), `BENCH_LLAMA_THREADS` (all cores),
//! `BENCH_ROUNDS` (3), `BENCH_LIMIT` (the first N requests only), `BENCH_LLAMA_ARGS`,
//! `TABCONTAM_CPU` (our kernel path)).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tabcontam::infer::fetch::DEFAULT_MODEL_FILE;
use tabcontam::infer::{LocalModel, LocalOptions};
use tabcontam::llm::Request;
use tabcontam::run::{local_exec, session};

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
    let spec = tabcontam::run::spec::Spec::load(spec).expect("load the demo spec");
    let prepared = session::prepare(&spec, None, &[]).expect("plan the demo spec");
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

/// tabcontam's engine on the requests, scheduled as `tabcontam run` schedules them;
/// texts in request order.
fn run_tabcontam(model: &mut LocalModel, requests: &[Request], max_batch: usize) -> Measured {
    model.clear_prefix_cache();
    model.reset_stats();
    let started = Instant::now();
    let tokenized = local_exec::tokenize_all(model, requests)
        .map_err(|(error, _)| error)
        .expect("tokenize");
    let texts = std::sync::Mutex::new(vec![String::new(); requests.len()]);
    let batches = local_exec::schedule(requests, &tokenized, max_batch);
    let lanes = local_exec::lane_count();
    let stats = local_exec::run_in_lanes(
        model,
        requests,
        &tokenized,
        &batches,
        lanes,
        &Default::default(),
        &Default::default(),
        &|batch, responses, _| {
            let mut texts = texts.lock().expect("texts");
            for (&i, response) in batch.iter().zip(responses) {
                texts[i] = response.text;
            }
            true
        },
    )
    .expect("generate");
    let wall = started.elapsed();
    // Lanes prefill and decode at once: each phase's time summed over the lanes, divided
    // by their number (every lane is busy until the last batches).
    let lanes = lanes.min(batches.len()).max(1) as f64;
    Measured {
        wall,
        prompt_tokens: stats.prompt_tokens_processed,
        prefill_seconds: stats.prefill_nanos as f64 / 1e9 / lanes,
        generated: stats.tokens_generated,
        decode_seconds: stats.decode_nanos as f64 / 1e9 / lanes,
        texts: texts.into_inner().expect("texts"),
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

/// A fresh llama-server with `slots` slots (the bench's threads and `BENCH_LLAMA_ARGS`, then
/// `extra`), once it answers `/health`.
fn start_llama_server(
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
fn cpu_features_of_server(binary: &Path, model: &Path, log: &Path) -> String {
    drop(start_llama_server(binary, model, 1, log, &["-lv", "4"]));
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

/// The run with the median wall time (the lower middle one for an even count), and the
/// fastest and slowest wall times.
fn median(mut runs: Vec<Measured>) -> (Measured, f64, f64) {
    runs.sort_by_key(|m| m.wall);
    let low = runs.first().map_or(0.0, |m| m.wall.as_secs_f64());
    let high = runs.last().map_or(0.0, |m| m.wall.as_secs_f64());
    let middle = (runs.len() - 1) / 2;
    (runs.swap_remove(middle), low, high)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    // As the `tabcontam` binary does (src/main.rs): candle's elementwise ops on the calling
    // thread instead of its spinning barrier pool.
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
    let model_path = std::env::var_os("BENCH_MODEL").map_or_else(
        || assets_dir().join("models").join(DEFAULT_MODEL_FILE),
        PathBuf::from,
    );
    let spec = std::env::var_os("BENCH_SPEC").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments/demo.toml"),
        PathBuf::from,
    );
    let native = assets_dir().join("bin").join("llama-server-native");
    let server_binary = if native.is_file() {
        native
    } else {
        assets_dir().join("bin").join("llama-server")
    };
    if !require(&model_path, "scripts/ci-install-local-models.sh") {
        return;
    }
    // Without the server, our engine is still measured (a skip of the comparison).
    let have_server = require(&server_binary, "scripts/install-test-server.sh");
    let slot_counts: Vec<usize> = std::env::var("BENCH_LLAMA_SLOTS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let rounds = env_number("BENCH_ROUNDS", 3).max(1);
    let (mut requests, max_batch) = demo_requests(&spec);
    requests.truncate(env_number("BENCH_LIMIT", requests.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("spec: {} ({} requests)", spec.display(), requests.len());
    println!("model: {}", model_path.display());
    println!(
        "greedy, max tokens per request as planned ({} in all); {threads} cores; {rounds} rounds, engines interleaved",
        requests.iter().map(|r| r.params.max_tokens).sum::<u32>()
    );
    let load_before = load_average();

    let loading = Instant::now();
    let mut model = LocalModel::load(&model_path, &LocalOptions::default()).expect("load model");
    let load_seconds = loading.elapsed().as_secs_f64();
    let logs = tempfile::tempdir().expect("temp dir");
    let configurations: Vec<usize> = if have_server {
        slot_counts.clone()
    } else {
        Vec::new()
    };
    let mut ours = Vec::with_capacity(rounds);
    let mut theirs: Vec<Vec<Measured>> = configurations.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let measured = run_tabcontam(&mut model, &requests, max_batch);
        eprintln!(
            "round {}: tabcontam {:.2} s (load {})",
            round + 1,
            measured.wall.as_secs_f64(),
            load_average()
        );
        ours.push(measured);
        for (slots, runs) in configurations.iter().zip(&mut theirs) {
            let log = logs
                .path()
                .join(format!("llama-server-{slots}-{round}.log"));
            // A fresh server: nothing of the previous round in its prompt cache.
            let server = start_llama_server(&server_binary, &model_path, *slots, &log, &[]);
            let measured = run_llama(server.port, &requests, *slots);
            drop(server);
            eprintln!(
                "round {}: llama-server -np {slots} {:.2} s (load {})",
                round + 1,
                measured.wall.as_secs_f64(),
                load_average()
            );
            runs.push(measured);
        }
    }
    let our_rss = peak_rss_mib();
    drop(model);
    let load_after = load_average();

    let (ours, our_low, our_high) = median(ours);
    let theirs: Vec<(usize, (Measured, f64, f64))> = slot_counts
        .iter()
        .copied()
        .zip(theirs.into_iter().map(median))
        .collect();
    let best = theirs
        .iter()
        .min_by_key(|(_, (m, _, _))| m.wall)
        .map(|(slots, _)| *slots);

    println!();
    println!(
        "{:<36} {:>8} {:>15} {:>14} {:>12} {:>10} {:>11}",
        "engine (median of rounds)",
        "wall s",
        "min-max s",
        "prompt tokens",
        "prefill t/s",
        "generated",
        "decode t/s"
    );
    let row = |name: String, (m, low, high): &(Measured, f64, f64)| {
        println!(
            "{name:<36} {:>8.2} {:>15} {:>14} {:>12.1} {:>10} {:>11.1}",
            m.wall.as_secs_f64(),
            format!("{low:.1}-{high:.1}"),
            m.prompt_tokens,
            m.prefill_rate(),
            m.generated,
            m.decode_rate()
        );
    };
    let ours = (ours, our_low, our_high);
    row(
        format!(
            "tabcontam (run's schedule, batch {max_batch}, {} lanes)",
            local_exec::lane_count()
        ),
        &ours,
    );
    for (slots, measured) in &theirs {
        let mark = if Some(*slots) == best { " *" } else { "" };
        row(
            format!("llama-server -np {slots}, prompt cache{mark}"),
            measured,
        );
    }
    println!();
    println!("model load: {load_seconds:.2} s (not in wall times)");
    println!("load average (1, 5, 15 min): {load_before} before, {load_after} after");
    println!("peak RSS of this process after the in-process runs: {our_rss:.0} MiB");
    let their_path = if theirs.is_empty() {
        "not measured".to_string()
    } else {
        cpu_features_of_server(
            &server_binary,
            &model_path,
            &logs.path().join("llama-server-system-info.log"),
        )
    };
    println!(
        "CPU paths: tabcontam {} (TABCONTAM_CPU forces another); {} {}",
        tabcontam_kernels::cpu::isa().name(),
        server_binary.display(),
        their_path
    );
    let Some((slots, (best_run, _, _))) = theirs.iter().find(|(s, _)| Some(*s) == best) else {
        println!("llama-server: not measured");
        return;
    };
    let same = ours
        .0
        .texts
        .iter()
        .zip(&best_run.texts)
        .filter(|(a, b)| a == b)
        .count();
    println!(
        "wall-time ratio (llama-server's best, -np {slots} / tabcontam): {:.2}x (goal >= 3x, issue 25)",
        best_run.wall.as_secs_f64() / ours.0.wall.as_secs_f64()
    );
    println!(
        "outputs identical to llama-server's: {same}/{}",
        requests.len()
    );
    println!(
        "prompt tokens: those run through the model (shared prefixes and cached prompts count once); \
rates: tabcontam per micro-batch, llama-server from its per-request timings (summed over parallel slots)"
    );
}
