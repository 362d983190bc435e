//! Tracker benchmarks (issue "Tracker"), run with `cargo bench --bench tracker`:
//!
//! (a) `cached`: the full paper spec with every response already in the cache (seeded with
//!     synthetic answers): `tabcontam run --offline` = plan + lookup + decisions + storing
//!     verdicts, in a child process; wall time and peak RSS. Targets: ≤ 2 s, ≤ 200 MB.
//! (b) `throughput`: 5,000 requests to a loopback server answering after 100 ms, 64 slots,
//!     through the real executor and cache; against the ideal 5,000 / 64 × 0.1 s and against
//!     a one-request-at-a-time client measured in the same run. Targets: ≤ 1.15 × ideal,
//!     ≥ 50 × the sequential client.
//!
//! Set `TABCONTAM_PAPER_DATA` to the paper's data folder (default `../shared/datasets/paper`).

#[path = "../tests/support/mock_server.rs"]
mod mock_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mock_server::{MockConfig, MockServer};
use tabcontam::llm::client::Client;
use tabcontam::llm::{ApiMode, BackendKind, GenerationParams, ModelIdentity, Request, Response};
use tabcontam::probe::Expected;
use tabcontam::run::execute::{ModelWork, ProgressMode, Work, send_all};
use tabcontam::run::session::prepare;
use tabcontam::store::Store;

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if wants("cached") {
        bench_cached();
    }
    if wants("throughput") {
        bench_throughput();
    }
}

fn paper_data() -> PathBuf {
    std::env::var_os("TABCONTAM_PAPER_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets/paper"))
}

/// A plausible answer for each kind of expectation, so decisions do real work.
fn synthetic_answer(expected: &Expected, n: usize) -> String {
    match expected {
        Expected::Choice { choices, .. } => format!("{}.", choices[n % choices.len()]),
        Expected::Words { words } => {
            let listed: Vec<String> = words
                .iter()
                .take(1 + n % 4)
                .map(|w| format!("{w:?}"))
                .collect();
            format!("[{}, 'other_feature']", listed.join(", "))
        }
        Expected::Names { names } => {
            if n.is_multiple_of(2) {
                names[0].clone()
            } else {
                "a census dataset".into()
            }
        }
        Expected::Row { fields, .. } => fields
            .iter()
            .map(|(name, value)| format!("The {name} is {value:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        // Verbatim tests: half the answers exact, half not.
        Expected::Continuation { text, .. } => text.chars().take(n % 40).collect(),
        Expected::ExactRow { row } => {
            if n.is_multiple_of(2) {
                row.clone()
            } else {
                "1,2,3".into()
            }
        }
        Expected::ExactValue { value, .. } => value.clone(),
        Expected::FirstToken { token, .. } => format!("{token},"),
    }
}

fn bench_cached() {
    let data = paper_data();
    if !data.is_dir() {
        println!(
            "cached: SKIP ({} not found; set TABCONTAM_PAPER_DATA)",
            data.display()
        );
        return;
    }
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/paper.toml");
    let dir = tempfile::tempdir().unwrap();
    // TABCONTAM_BENCH_CACHE keeps the seeded cache for profiling.
    let cache = std::env::var_os("TABCONTAM_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().join("paper.sqlite"));
    let _ = std::fs::remove_file(&cache);
    let seed_start = Instant::now();
    let prepared = prepare(
        &tabcontam::run::spec::Spec::load(&spec).unwrap(),
        Some(&data),
        &[],
    )
    .unwrap();
    let mut store = Store::open(&cache).unwrap();
    let requests: Vec<(Request, Response)> = prepared
        .plan
        .requests
        .values()
        .enumerate()
        .map(|(n, source)| {
            let request = prepared.plan.request(&prepared.spec, source);
            let response = Response {
                text: synthetic_answer(&source.prompt.expected, n),
                finish_reason: Some("stop".into()),
                prompt_tokens: Some(100),
                completion_tokens: Some(10),
                latency_ms: 100,
                served_model: None,
                served_fingerprint: None,
            };
            (request, response)
        })
        .collect();
    store
        .put_responses(requests.iter().map(|(q, r)| (q, r)))
        .unwrap();
    drop(store);
    drop(prepared);
    println!(
        "cached: seeded {} synthetic responses in {:.1} s ({:.0} MB cache)",
        requests.len(),
        seed_start.elapsed().as_secs_f64(),
        std::fs::metadata(&cache).unwrap().len() as f64 / 1e6
    );
    drop(requests);

    let mut runs = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_tabcontam"))
            .args([
                "run",
                spec.to_str().unwrap(),
                "--offline",
                "--quiet",
                "--json",
                "--cache",
            ])
            .arg(&cache)
            .arg("--data-dir")
            .arg(&data)
            .env("TABCONTAM_HOME", dir.path().join("home"))
            .output()
            .unwrap();
        let wall = started.elapsed();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(summary["missing"], 0);
        assert_eq!(summary["counts"]["sent"], 0);
        runs.push((wall, summary["trials_decided"].as_u64().unwrap()));
    }
    let peak_mb = peak_child_rss_kb() as f64 / 1024.0;
    let best = runs.iter().map(|(w, _)| *w).min().unwrap();
    println!(
        "cached: full paper spec, every response cached: `run --offline` best of 3 = {:.2} s (runs: {}), {} trials decided, peak RSS {:.0} MB (targets ≤ 2 s, ≤ 200 MB)",
        best.as_secs_f64(),
        runs.iter()
            .map(|(w, _)| format!("{:.2}", w.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", "),
        runs[0].1,
        peak_mb
    );
}

/// Largest resident set of any waited-for child, in KiB.
fn peak_child_rss_kb() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr());
        usage.assume_init().ru_maxrss
    }
}

fn requests(n: usize, tag: &str) -> Vec<Request> {
    (0..n)
        .map(|i| Request {
            model: ModelIdentity {
                backend: BackendKind::OpenaiCompatible,
                model: "bench".into(),
                revision: "r".into(),
            },
            api: ApiMode::Completions,
            prompt: format!(
                "{tag} benchmark prompt number {i}: The age is 39, The workclass is State-gov,"
            ),
            params: GenerationParams {
                max_tokens: 16,
                temperature: 0.0,
                top_p: None,
                seed: Some(0),
                stop: vec![],
                stop_rule: None,
            },
            sample: 0,
        })
        .collect()
}

fn bench_throughput() {
    const N: usize = 5_000;
    const SLOTS: usize = 64;
    const LATENCY: Duration = Duration::from_millis(100);
    const SEQUENTIAL_SAMPLE: usize = 100;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut config = MockConfig::new().latency(LATENCY);
    config.record_bodies = false;
    let server = runtime.block_on(MockServer::start(config));
    let mut client_config =
        server.client_config(BackendKind::OpenaiCompatible, ApiMode::Completions, "bench");
    client_config.concurrency = SLOTS;
    client_config.timeout_s = 30.0;

    // Sequential: one request at a time, the same client, the same server.
    let sequential = {
        let mut config = client_config.clone();
        config.concurrency = 1;
        let client = Client::new(config).unwrap();
        let batch = requests(SEQUENTIAL_SAMPLE, "sequential");
        runtime.block_on(async {
            let started = Instant::now();
            for request in &batch {
                client.complete(request).await.unwrap();
            }
            started.elapsed()
        })
    };
    let sequential_rate = SEQUENTIAL_SAMPLE as f64 / sequential.as_secs_f64();
    // `runtime` keeps serving the mock while the executor runs on its own runtime.

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("bench.sqlite")).unwrap();
    let mut store = store;
    let run = store.begin_run("bench", "").unwrap();
    let client = Client::new(client_config).unwrap();
    let work = Work {
        remote: vec![ModelWork {
            id: "bench".into(),
            client,
            requests: requests(N, "concurrent"),
            cached: 0,
            price_per_mtok: None,
        }],
        local: Vec::new(),
    };
    let started = Instant::now();
    let (store, outcome) = send_all(store, run, work, &ProgressMode::Off).unwrap();
    let wall = started.elapsed();
    let stored = store.status().unwrap().responses;
    assert_eq!(outcome.per_model["bench"].failed, 0, "{outcome:?}");
    assert_eq!(stored as usize, N);
    drop(runtime);
    let ideal = N as f64 / SLOTS as f64 * LATENCY.as_secs_f64();
    let rate = N as f64 / wall.as_secs_f64();
    println!(
        "throughput: {N} requests, {SLOTS} slots, {} ms latency: {:.2} s through executor + cache = {:.3} × ideal {:.2} s (target ≤ 1.15); \
         sequential client {:.1} req/s over {SEQUENTIAL_SAMPLE} requests vs {:.0} req/s = {:.1} × faster (target ≥ 50)",
        LATENCY.as_millis(),
        wall.as_secs_f64(),
        wall.as_secs_f64() / ideal,
        ideal,
        sequential_rate,
        rate,
        rate / sequential_rate
    );
}
