//! Training throughput against PyTorch, side by side in one run (issue 10, "Must show" 4):
//! tokens/s of forward + backward + AdamW step for our trainer (`src/train`, candle, f32
//! CPU) and for transformers' `LlamaForCausalLM` on the same model folder, the same token
//! windows, batch size, sequence length and thread count.
//!
//! `cargo bench --bench train_vs_torch` (add `--profile dev` to skip the release build of
//! the dependencies: they are optimized in the dev profile too). Needs the PyTorch venv
//! (`~/.cache/tabcontam-test-assets/py-local`, or `TABCONTAM_BENCH_PYTHON`). Sizes:
//! `TABCONTAM_BENCH_HIDDEN` (256), `_LAYERS` (4), `_BATCH` (4), `_SEQ` (128), `_STEPS` (5),
//! `_THREADS` (2).

#[path = "../tests/support/tiny_llama.rs"]
mod tiny_llama;

use std::process::Command;
use std::time::Instant;

use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use tabcontam::infer::files::ModelFiles;
use tabcontam::train::llama::LlamaTrainer;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(format!("TABCONTAM_BENCH_{name}"))
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let hidden = setting("HIDDEN", 256);
    let layers = setting("LAYERS", 4);
    let batch = setting("BATCH", 4);
    let seq = setting("SEQ", 128);
    let steps = setting("STEPS", 5);
    let threads = setting("THREADS", 2);
    let lr = 1e-4;
    // Both sides on the same number of threads (candle's CPU kernels read this).
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    let python = std::env::var("TABCONTAM_BENCH_PYTHON").unwrap_or_else(|_| {
        format!(
            "{}/.cache/tabcontam-test-assets/py-local/bin/python",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    if !std::path::Path::new(&python).is_file() {
        eprintln!("SKIP: no PyTorch venv at {python} (set TABCONTAM_BENCH_PYTHON)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    tiny_llama::write_byte_llama(&model_dir, hidden, layers);

    // The shipped iris file as bytes (the byte-level tokenizer's ids), cut into windows.
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/datasets/iris.csv")).unwrap();
    let ids: Vec<u32> = {
        let tokenizer = tokenizers::Tokenizer::from_file(model_dir.join("tokenizer.json")).unwrap();
        let text = String::from_utf8_lossy(&text).into_owned();
        tokenizer.encode(text, false).unwrap().get_ids().to_vec()
    };
    let window = seq + 1;
    let per_step = batch * window;
    let mut batches: Vec<Vec<Vec<u32>>> = Vec::new();
    for s in 0..=steps {
        let b: Vec<Vec<u32>> = (0..batch)
            .map(|i| {
                let start = ((s * batch + i) * seq) % (ids.len() - window);
                ids[start..start + window].to_vec()
            })
            .collect();
        batches.push(b);
    }
    assert!(ids.len() > per_step, "not enough text");
    let windows_path = dir.path().join("windows.json");
    std::fs::write(&windows_path, serde_json::to_string(&batches).unwrap()).unwrap();

    // Ours.
    let files = ModelFiles::locate(&model_dir).unwrap();
    let model = LlamaTrainer::load(&files).unwrap();
    let mut optimizer = AdamW::new(
        model.vars(),
        ParamsAdamW {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    )
    .unwrap();
    let run_step = |b: &Vec<Vec<u32>>, optimizer: &mut AdamW| -> f32 {
        let flat: Vec<u32> = b.iter().flatten().copied().collect();
        let ids = Tensor::from_vec(flat, (batch, window), &Device::Cpu).unwrap();
        let weights = Tensor::ones((batch, seq), candle_core::DType::F32, &Device::Cpu).unwrap();
        let loss = model.loss(&ids, &weights).unwrap();
        let grads = loss.backward().unwrap();
        optimizer.step(&grads).unwrap();
        loss.to_scalar::<f32>().unwrap()
    };
    run_step(&batches[0], &mut optimizer);
    let started = Instant::now();
    let mut losses = Vec::new();
    for b in &batches[1..] {
        losses.push(run_step(b, &mut optimizer));
    }
    let ours_seconds = started.elapsed().as_secs_f64();
    let tokens = (steps * batch * seq) as f64;
    let ours = tokens / ours_seconds;

    // PyTorch, same folder and windows.
    let output = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/bench_train_torch.py"
        ))
        .arg(&model_dir)
        .arg(&windows_path)
        .arg(steps.to_string())
        .arg(threads.to_string())
        .arg(lr.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let torch: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    let theirs = torch["tokens_per_s"].as_f64().unwrap();
    println!(
        "training throughput, llama hidden {hidden} × {layers} layers ({} parameters), batch {batch} × seq {seq}, {steps} steps, {threads} threads",
        model.parameter_count()
    );
    println!("  tabcontam (candle) {ours:>9.1} tokens/s  losses {losses:?}");
    println!(
        "  PyTorch            {theirs:>9.1} tokens/s  losses {}",
        torch["losses"]
    );
    println!("  ratio tabcontam / PyTorch: {:.2}x", ours / theirs);
}
