//! Training throughput against PyTorch, side by side in one run (issue 10, "Must show" 4;
//! issue 23 item 2): tokens/s of forward + backward + AdamW step and peak RSS for our
//! trainer (`src/train`, candle and the fused ops, f32 CPU) and for transformers'
//! `LlamaForCausalLM` on the same model folder, the same token windows, batch size,
//! sequence length, thread count and dtype (f32).
//!
//! Two races: a SmolLM2-135M-shaped model (its real size, random weights) and a toy
//! (hidden 256, 4 layers). Each side runs in a process of its own (ours is this bench
//! re-run with `TABCONTAM_BENCH_SIDE=ours`), so that each peak RSS (`VmHWM`, PyTorch's
//! `ru_maxrss`) is that side's training alone, and the two never hold memory at once.
//!
//! `cargo bench --bench train_vs_torch` (add `--profile dev` to skip the release build of
//! the dependencies: they are optimized in the dev profile too). Needs the PyTorch venv
//! (`~/.cache/tabcontam-test-assets/py-local`, or `TABCONTAM_BENCH_PYTHON`). Settings:
//! `TABCONTAM_BENCH_MODELS` (`smollm2,toy`), `_BATCH` (4), `_SEQ` (256), `_STEPS` (5),
//! `_THREADS` (2), and the toy's `_HIDDEN` (256) and `_LAYERS` (4).
//!
//! `TABCONTAM_BENCH_ONLY=ours` runs our side alone and prints its JSON line (for a profiler).
//!
//! `TABCONTAM_BENCH_LORA=RANK` races LoRA instead (issue 23 item 3): our adapters against
//! peft's `LoraConfig` at the same rank, alpha (= rank), targets (`_LORA_TARGETS`,
//! default `attention`: q, k, v, o) and no dropout, the base frozen on both sides.
//!
//! `TABCONTAM_BENCH_PRECISION=bf16` races the bf16 modes: our `--precision bf16` (the
//! projections and head on bf16 operands with f32 sums, AVX-512 BF16) against PyTorch's
//! `torch.autocast("cpu", dtype=torch.bfloat16)` around the forward pass and loss, both
//! with f32 master weights and AdamW.

#[path = "../tests/support/tiny_llama.rs"]
mod tiny_llama;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde_json::{Value, json};
use tabcontam::infer::files::ModelFiles;
use tabcontam::train::linear::Precision;
use tabcontam::train::llama::LlamaTrainer;
use tabcontam::train::lora::LoraSettings;
use tabcontam::train::optimizer::{AdamW, AdamWSettings};
use tabcontam::train::streams;
use tiny_llama::LlamaShape;

const LR: f64 = 1e-4;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(format!("TABCONTAM_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds of every thread of this process so far (user and system, `getrusage`), as
/// Python's `time.process_time` counts them on the other side.
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the whole struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// Peak resident memory of this process (`VmHWM` of /proc/self/status), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Our side, in the child process: trains on the windows and prints one JSON line.
fn ours(model_dir: &Path, windows_path: &Path) {
    // As `contaminate` runs (main.rs, train::build_checkpoints): one arena, the steps
    // keep their heap (and candle's elementwise ops on this thread: the parent's env).
    tabcontam::train::heap::one_arena();
    tabcontam::train::heap::keep_freed_memory();
    let batches: Vec<Vec<Vec<u32>>> =
        serde_json::from_str(&std::fs::read_to_string(windows_path).unwrap()).unwrap();
    let (batch, window) = (batches[0].len(), batches[0][0].len());
    let seq = window - 1;
    let files = ModelFiles::locate(model_dir).unwrap();
    let mut model = LlamaTrainer::load(&files)
        .unwrap()
        .with_precision(precision());
    if let Some(lora) = lora_settings() {
        model = model.with_lora(lora, 0).unwrap();
    }
    let vars = model.vars();
    let named = model
        .trainable_vars()
        .into_iter()
        .map(|(name, var)| (name, var.clone()))
        .collect();
    // The trainer's own optimizer (what `contaminate` runs), PyTorch's settings.
    let mut optimizer = AdamW::new(named, AdamWSettings::new(LR, 0.0));
    let mut run_step = |b: &Vec<Vec<u32>>| -> f32 {
        let flat: Vec<u32> = b.iter().flatten().copied().collect();
        let ids = Tensor::from_vec(flat, (batch, window), &Device::Cpu).unwrap();
        let weights = Tensor::ones((batch, seq), DType::F32, &Device::Cpu).unwrap();
        // As `contaminate` runs a micro-batch: its rows as two streams on two cores.
        let targets = (batch * seq) as f64;
        let (grads, summed) = streams::gradients(&model, &vars, &ids, &weights, targets).unwrap();
        optimizer.step(&grads).unwrap();
        (summed / targets) as f32
    };
    run_step(&batches[0]); // warm-up, as on PyTorch's side
    let started = Instant::now();
    let cpu_started = process_cpu_seconds();
    let losses: Vec<f32> = batches[1..].iter().map(&mut run_step).collect();
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = process_cpu_seconds() - cpu_started;
    let tokens = (batches.len() - 1) * batch * seq;
    println!(
        "{}",
        json!({
            "tokens_per_s": tokens as f64 / seconds,
            "cpu_percent": 100.0 * cpu_seconds / seconds,
            "losses": losses,
            "parameters": model.parameter_count(),
            "trainable": model.trainable_count(),
            "peak_rss": peak_rss(),
        })
    );
}

/// `TABCONTAM_BENCH_PRECISION`: `f32` (the default) or `bf16`.
fn precision() -> Precision {
    let name = std::env::var("TABCONTAM_BENCH_PRECISION").unwrap_or_else(|_| "f32".into());
    Precision::parse(&name).unwrap_or_else(|e| panic!("TABCONTAM_BENCH_PRECISION: {e}"))
}

/// `TABCONTAM_BENCH_LORA` and `_LORA_TARGETS`, when a LoRA race is asked for.
fn lora_settings() -> Option<LoraSettings> {
    let rank = setting("LORA", 0);
    (rank > 0).then(|| {
        let targets =
            std::env::var("TABCONTAM_BENCH_LORA_TARGETS").unwrap_or_else(|_| "attention".into());
        LoraSettings::from_options(rank, Some(&targets), None).unwrap()
    })
}

/// The last line of a side's output as JSON, or a panic with everything it printed.
fn run_side(command: &mut Command) -> Value {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / (1u64 << 30) as f64)
}

fn race(name: &str, shape: &LlamaShape, python: &str) {
    let batch = setting("BATCH", 4);
    let seq = setting("SEQ", 256);
    let steps = setting("STEPS", 5);
    let threads = setting("THREADS", 2);
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    tiny_llama::write_llama(&model_dir, &tiny_llama::byte_tokenizer(), shape);

    // The shipped iris file as bytes (the byte-level tokenizer's ids), cut into windows.
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/iris.csv")).unwrap();
    let ids: Vec<u32> = {
        let tokenizer = tokenizers::Tokenizer::from_file(model_dir.join("tokenizer.json")).unwrap();
        let text = String::from_utf8_lossy(&text).into_owned();
        tokenizer.encode(text, false).unwrap().get_ids().to_vec()
    };
    let window = seq + 1;
    assert!(ids.len() > window, "not enough text");
    let batches: Vec<Vec<Vec<u32>>> = (0..=steps)
        .map(|s| {
            (0..batch)
                .map(|i| {
                    let start = ((s * batch + i) * seq) % (ids.len() - window);
                    ids[start..start + window].to_vec()
                })
                .collect()
        })
        .collect();
    let windows_path = dir.path().join("windows.json");
    std::fs::write(&windows_path, serde_json::to_string(&batches).unwrap()).unwrap();

    let ours = run_side(
        Command::new(std::env::current_exe().unwrap())
            .env("TABCONTAM_BENCH_SIDE", "ours")
            .env("TABCONTAM_BENCH_MODEL_DIR", &model_dir)
            .env("TABCONTAM_BENCH_WINDOWS", &windows_path)
            // Both sides on the same number of threads (candle's CPU kernels and ours read
            // this).
            .env("RAYON_NUM_THREADS", threads.to_string())
            .env("CANDLE_NUM_THREADS", "1"),
    );
    // `TABCONTAM_BENCH_ONLY=ours`: our side alone (for a profiler), its JSON line printed.
    if std::env::var("TABCONTAM_BENCH_ONLY").as_deref() == Ok("ours") {
        println!("{name}: {ours}");
        return;
    }
    let theirs = run_side(
        Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/bench_train_torch.py"
            ))
            .arg(&model_dir)
            .arg(&windows_path)
            .env("TABCONTAM_BENCH_PRECISION", precision().name())
            .arg(steps.to_string())
            .arg(threads.to_string())
            .arg(LR.to_string())
            .args(
                lora_settings()
                    .map(|l| {
                        let modules: Vec<&str> = l
                            .targets
                            .iter()
                            .map(|t| t.module().rsplit('.').next().unwrap())
                            .collect();
                        [l.rank.to_string(), modules.join(",")]
                    })
                    .into_iter()
                    .flatten(),
            ),
    );
    let speed = |v: &Value| v["tokens_per_s"].as_f64().unwrap();
    let rss = |v: &Value| gib(v["peak_rss"].as_f64().unwrap());
    let method = match lora_settings() {
        None => "full fine-tuning".to_string(),
        Some(l) => format!(
            "LoRA rank {} on {} ({} trainable; PyTorch side: peft)",
            l.rank,
            l.targets
                .iter()
                .map(|t| t.id())
                .collect::<Vec<_>>()
                .join(","),
            ours["trainable"]
        ),
    };
    println!(
        "{name}: llama hidden {} × {} layers, vocab {} ({} parameters), {method}, {}, batch {batch} × seq {seq}, {steps} steps, {threads} threads",
        shape.hidden,
        shape.layers,
        shape.vocab,
        ours["parameters"],
        match precision() {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16 (ours: bf16 products, f32 sums; PyTorch: bf16 autocast)",
        }
    );
    // CPU time of the whole process over the timed steps, against their wall time.
    let cpu = |v: &Value| v["cpu_percent"].as_f64().unwrap_or(f64::NAN);
    println!(
        "  tabcontam (candle) {:>8.1} tokens/s  CPU {:>4.0} %  peak RSS {}  losses {}",
        speed(&ours),
        cpu(&ours),
        rss(&ours),
        ours["losses"]
    );
    println!(
        "  PyTorch            {:>8.1} tokens/s  CPU {:>4.0} %  peak RSS {}  losses {}",
        speed(&theirs),
        cpu(&theirs),
        rss(&theirs),
        theirs["losses"]
    );
    println!(
        "  ratio tabcontam / PyTorch: {:.2}x",
        speed(&ours) / speed(&theirs)
    );
}

fn main() {
    if std::env::var("TABCONTAM_BENCH_SIDE").as_deref() == Ok("ours") {
        let var = |name: &str| std::env::var_os(name).expect(name).into();
        let (model, windows): (std::path::PathBuf, std::path::PathBuf) = (
            var("TABCONTAM_BENCH_MODEL_DIR"),
            var("TABCONTAM_BENCH_WINDOWS"),
        );
        ours(&model, &windows);
        return;
    }
    let python = std::env::var("TABCONTAM_BENCH_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/.cache/tabcontam-test-assets/py-local/bin/python",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    if !Path::new(&python).is_file() {
        eprintln!("SKIP: no PyTorch venv at {python} (set TABCONTAM_BENCH_PYTHON)");
        return;
    }
    let models = std::env::var("TABCONTAM_BENCH_MODELS").unwrap_or_else(|_| "smollm2,toy".into());
    for model in models.split(',').map(str::trim) {
        match model {
            "smollm2" => race("SmolLM2-135M shape", &tiny_llama::SMOLLM2_135M, &python),
            "toy" => {
                let hidden = setting("HIDDEN", 256);
                let shape = LlamaShape {
                    vocab: tiny_llama::BYTE_VOCAB,
                    hidden,
                    intermediate: hidden * 3,
                    layers: setting("LAYERS", 4),
                    heads: 4,
                    kv_heads: 2,
                    tied: false,
                };
                race("toy", &shape, &python)
            }
            other => panic!("TABCONTAM_BENCH_MODELS: `{other}` is neither smollm2 nor toy"),
        }
    }
}
