//! Prefill throughput on every kernel path this CPU runs, against each path's roofline, in
//! one run: the demo's prompts (`experiments/demo.toml`, what `tabcontam run` sends) through
//! SmolLM2-135M Q4_1 (or `BENCH_MODEL=gemma3`, below) with one new token each, scheduled as `tabcontam run` schedules them
//! (micro-batches, shared prefixes once, one lane per core), prompt tokens per second of
//! wall time (each prompt's one new token included).
//!
//! Each path runs in a child process with `TABCONTAM_CPU` forcing it (the level is read once
//! per process). The roofline of a path is the arithmetic of its matmuls at the peak its
//! inner instruction reaches on this machine, measured in the same child by a register-only
//! loop on every core at once (no memory traffic): 256-bit FMAs for `avx2` (its prefill is
//! an f32 GEMM over expanded weights), 512-bit `vpdpbusd` for `avx512` (int8 panels). A
//! token costs the model's matmul multiply-adds (q, k, v, o, gate, up, down per layer; the
//! head is left out, since only the last position of a prompt needs it): 106.2 M for
//! SmolLM2-135M.
//!
//! `BENCH_MODEL=gemma3` runs Gemma 3 270M Q4_K_M on `experiments/gemma3.toml` instead
//! (100.3 M multiply-adds per token: 18 layers of q (640×1024), k and v (640×256 each), o
//! (1024×640), gate, up and down (640×2048 each)).
//!
//! `cargo bench --bench prefill` (env: `TABCONTAM_TEST_ASSETS`, `BENCH_MODEL`, `BENCH_LIMIT`
//! (the first N requests, default all), `BENCH_PATHS` (default every runnable path but
//! `portable`)).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tabcontam::infer::fetch::DEFAULT_MODEL_FILE;
use tabcontam::infer::{LocalModel, LocalOptions};
use tabcontam::run::{local_exec, session};
use tabcontam_kernels::cpu::{CPU_ENV, Isa};

/// One benchmarked model: its file under the assets' `models/`, the spec whose prompts it
/// prefills, and its matmul multiply-adds per prompt token.
struct Bench {
    label: &'static str,
    file: &'static str,
    spec: &'static str,
    macs_per_token: f64,
}

const SMOLLM2: Bench = Bench {
    label: "SmolLM2-135M Q4_1",
    file: DEFAULT_MODEL_FILE,
    spec: "experiments/demo.toml",
    // 30 layers of q (576×576), k and v (576×192 each), o (576×576), gate and up (576×1536
    // each) and down (1536×576).
    macs_per_token: 30.0 * (576.0 * 576.0 * 2.0 + 576.0 * 192.0 * 2.0 + 576.0 * 1536.0 * 3.0),
};

const GEMMA3: Bench = Bench {
    label: "Gemma 3 270M Q4_K_M",
    file: "gemma-3-270m-q4_k_m.gguf",
    spec: "experiments/gemma3.toml",
    macs_per_token: 18.0 * (640.0 * 1024.0 * 2.0 + 640.0 * 256.0 * 2.0 + 640.0 * 2048.0 * 3.0),
};

fn bench() -> Bench {
    match std::env::var("BENCH_MODEL").as_deref() {
        Ok("gemma3") => GEMMA3,
        _ => SMOLLM2,
    }
}

const CHILD_ENV: &str = "TABCONTAM_BENCH_PREFILL_CHILD";

fn assets_dir() -> PathBuf {
    std::env::var_os("TABCONTAM_TEST_ASSETS").map_or_else(
        || {
            PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/tabcontam-test-assets")
        },
        PathBuf::from,
    )
}

fn main() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: first thing in `main`, before any other thread exists (as src/main.rs).
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
    let bench = bench();
    let model = assets_dir().join("models").join(bench.file);
    if !model.is_file() {
        let message = format!(
            "{} missing (scripts/ci-install-local-models.sh)",
            model.display()
        );
        assert!(
            std::env::var("TABCONTAM_CI").as_deref() != Ok("1"),
            "{message}"
        );
        eprintln!("SKIP: prefill: {message}");
        return;
    }
    if std::env::var_os(CHILD_ENV).is_some() {
        child(&model, bench.spec);
        return;
    }
    let paths: Vec<String> = std::env::var("BENCH_PATHS").map_or_else(
        |_| {
            Isa::runnable()
                .into_iter()
                .filter(|&isa| isa != Isa::Portable)
                .map(|isa| isa.name().to_string())
                .collect()
        },
        |list| list.split(',').map(|p| p.trim().to_string()).collect(),
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{}, the prompts of {}, one new token each; {cores} cores; {:.1} M multiply-adds per prompt token",
        bench.label,
        bench.spec,
        bench.macs_per_token / 1e6
    );
    println!(
        "{:<8} {:>14} {:>10} {:>12} {:>26} {:>16} {:>10}",
        "path",
        "prompt tokens",
        "prefill s",
        "tokens/s",
        "peak (all cores)",
        "roofline t/s",
        "of peak"
    );
    let mut rates = Vec::new();
    for path in &paths {
        let output = Command::new(std::env::current_exe().expect("this bench"))
            .env(CHILD_ENV, "1")
            .env(CPU_ENV, path)
            .output()
            .expect("run the bench for one path");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let Some(line) = stdout.lines().find(|l| l.starts_with("RESULT ")) else {
            panic!(
                "{CPU_ENV}={path}: no result ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let fields: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().expect("a number"))
            .collect();
        let [tokens, seconds, peak] = fields[..] else {
            panic!("malformed result line {line}");
        };
        let rate = tokens / seconds;
        let roofline = peak / bench.macs_per_token;
        println!(
            "{path:<8} {tokens:>14.0} {seconds:>10.2} {rate:>12.0} {:>26} {roofline:>16.0} {:>9.0}%",
            format!("{:.0} G MAC/s ({})", peak / 1e9, instruction(path)),
            100.0 * rate / roofline
        );
        rates.push((path.clone(), rate));
    }
    if let (Some((base, slow)), Some((fast_path, fast))) = (
        rates.iter().find(|(p, _)| p == "avx2"),
        rates.iter().find(|(p, _)| p == "avx512"),
    ) {
        println!("prefill speed-up {fast_path} / {base}: {:.2}x", fast / slow);
    }
}

fn instruction(path: &str) -> &'static str {
    match path {
        "avx512" => "vpdpbusd zmm",
        "avx2" => "vfmadd ymm, f32",
        _ => "scalar",
    }
}

/// One path: the prefill of every demo prompt, then the peak of that path's instruction
/// on every core, printed as `RESULT tokens seconds peak`.
fn child(model_path: &Path, spec: &str) {
    let spec_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(spec);
    let spec = tabcontam::run::spec::Spec::load(&spec_path).expect("load the spec");
    let prepared = session::prepare(&spec, None, &[]).expect("plan the spec");
    let max_batch = prepared.spec.models[0]
        .max_batch
        .unwrap_or(LocalOptions::default().max_batch);
    let limit = std::env::var("BENCH_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let mut requests: Vec<_> = prepared
        .plan
        .requests
        .values()
        .map(|source| prepared.plan.request(&prepared.spec, source))
        .take(limit)
        .collect();
    for request in &mut requests {
        request.params.max_tokens = 1;
    }
    let mut model = LocalModel::load(model_path, &LocalOptions::default()).expect("load model");
    let tokenized = local_exec::tokenize_all(&model, &requests)
        .map_err(|(error, _)| error)
        .expect("tokenize");
    model.reset_stats();
    let batches = local_exec::schedule(&requests, &tokenized, max_batch);
    let started = Instant::now();
    let stats = local_exec::run_in_lanes(
        &model,
        &requests,
        &tokenized,
        &batches,
        local_exec::lane_count(),
        &Default::default(),
        &Default::default(),
        &|_, _, _| true,
    )
    .expect("prefill");
    // The lanes prefill at once: their wall time, not the sum of each lane's prefill time.
    let seconds = started.elapsed().as_secs_f64();
    let peak = tabcontam_kernels::peak::on_every_core(tabcontam_kernels::cpu::isa());
    println!("RESULT {} {seconds} {peak}", stats.prompt_tokens_processed);
}
