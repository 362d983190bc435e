//! Local inference benchmark (issue "Local inference with candle"), on SmolLM2-135M
//! (Q4_1 GGUF) and membership-like prompts (long shared instructions, one row each):
//!
//! 1. generated tokens per second: tabcontam (batched, prefix reuse) against transformers
//!    on the same weights and prompts, in the same run (transformers from the
//!    `py-local` environment of `scripts/ci-install-local-models.sh`; skipped when absent);
//! 2. prompt tokens run through the model with and without prefix reuse.
//!
//! `cargo bench --bench local` (env: `TABCONTAM_TEST_ASSETS`, `BENCH_PROMPTS` (16),
//! `BENCH_MAX_TOKENS` (32), `BENCH_BATCH` (16)).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use tabcontam::infer::fetch::DEFAULT_MODEL_FILE;
use tabcontam::infer::{LocalModel, LocalOptions};
use tabcontam::llm::GenerationParams;

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

/// Membership-test-shaped prompts: the same instructions and labelled example, then one
/// row to judge.
fn membership_prompts(count: usize) -> Vec<String> {
    let instructions = "You will see rows of the adult income dataset, written as sentences. \
Some rows are copied exactly from the dataset; in others, several values were replaced by \
values drawn from the same column, so the row no longer appears in the dataset. Decide \
whether the last row is an original row of the dataset or a modified one. Answer Yes if it \
is original and No if it was modified, with a single word.\n\
Example: The age is 39, The workclass is State-gov, The fnlwgt is 77516, The education is \
Bachelors, The marital.status is Never-married, The occupation is Adm-clerical, The sex is \
Male, The hours.per.week is 40, The native.country is United-States\nOriginal: Yes\n\
Example: The age is 50, The workclass is Private, The fnlwgt is 83311, The education is \
HS-grad, The marital.status is Divorced, The occupation is Exec-managerial, The sex is \
Female, The hours.per.week is 13, The native.country is Cuba\nOriginal: No\n";
    let workclass = [
        "Private",
        "Self-emp-not-inc",
        "Local-gov",
        "State-gov",
        "Federal-gov",
    ];
    let education = [
        "Bachelors",
        "HS-grad",
        "Masters",
        "Some-college",
        "Doctorate",
        "11th",
    ];
    let occupation = [
        "Tech-support",
        "Craft-repair",
        "Sales",
        "Exec-managerial",
        "Prof-specialty",
    ];
    (0..count)
        .map(|i| {
            format!(
                "{instructions}Row: The age is {}, The workclass is {}, The fnlwgt is {}, The education is {}, \
The marital.status is Married-civ-spouse, The occupation is {}, The sex is {}, The hours.per.week is {}, \
The native.country is United-States\nOriginal:",
                20 + (i * 7) % 50,
                workclass[i % workclass.len()],
                100_000 + i * 7919,
                education[i % education.len()],
                occupation[(i * 3) % occupation.len()],
                if i % 2 == 0 { "Male" } else { "Female" },
                30 + (i * 5) % 30,
            )
        })
        .collect()
}

const TRANSFORMERS_SCRIPT: &str = r#"
import json, sys, time, os
import torch, transformers
torch.set_num_threads(os.cpu_count() or 1)
gguf, prompts_path, max_new, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
prompts = json.load(open(prompts_path))
folder, name = os.path.split(gguf)
tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
tok.padding_side = "left"
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
generated = 0
start = time.time()
with torch.inference_mode():
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i:i + batch], return_tensors="pt", padding=True)
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            n = 0
            for t in row:
                n += 1
                if t == tok.eos_token_id:
                    break
            generated += n
print(json.dumps({"generated": generated, "seconds": time.time() - start}))
"#;

/// transformers' generated tokens per second, or why it could not run.
fn transformers_tokens_per_second(
    gguf: &std::path::Path,
    prompts: &[String],
    max_new: usize,
    batch: usize,
) -> Result<f64, String> {
    let python = assets_dir().join("py-local/bin/python");
    if !python.is_file() {
        return Err(format!(
            "{} missing (scripts/ci-install-local-models.sh)",
            python.display()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let prompts_path = dir.path().join("prompts.json");
    std::fs::write(&prompts_path, serde_json::to_string(prompts).unwrap())
        .map_err(|e| e.to_string())?;
    let output = Command::new(python)
        .arg("-c")
        .arg(TRANSFORMERS_SCRIPT)
        .arg(gguf)
        .arg(&prompts_path)
        .arg(max_new.to_string())
        .arg(batch.to_string())
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let result: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    Ok(result["generated"].as_f64().unwrap_or(0.0)
        / result["seconds"].as_f64().unwrap_or(f64::INFINITY))
}

fn main() {
    let gguf = assets_dir().join("models").join(DEFAULT_MODEL_FILE);
    if !gguf.is_file() {
        eprintln!(
            "SKIP: {} missing (scripts/ci-install-local-models.sh)",
            gguf.display()
        );
        return;
    }
    let count = env_number("BENCH_PROMPTS", 16);
    let max_new = env_number("BENCH_MAX_TOKENS", 32);
    let batch = env_number("BENCH_BATCH", 16);
    let prompts = membership_prompts(count);
    let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
    let params = GenerationParams {
        max_tokens: max_new as u32,
        temperature: 0.0,
        top_p: None,
        seed: Some(0),
        stop: Vec::new(),
        stop_rule: None,
    };
    println!("model: {}", gguf.display());
    println!("prompts: {count} membership-like prompts, max {max_new} new tokens, greedy");
    println!(
        "threads: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let mut model = LocalModel::load(&gguf, &LocalOptions::default()).expect("load");
    let prompt_tokens: usize = refs.iter().map(|p| model.tokenize(p).unwrap().len()).sum();
    println!(
        "prompt tokens: {prompt_tokens} in all ({} per prompt)",
        prompt_tokens / count.max(1)
    );

    // Prefix reuse off vs on, same batches.
    model.set_batching(batch, false);
    model.reset_stats();
    let started = Instant::now();
    let without = model.generate_batch(&refs, &params, 0).expect("generate");
    let seconds_without = started.elapsed().as_secs_f64();
    let stats_without = model.stats();

    model.set_batching(batch, true);
    model.clear_prefix_cache();
    model.reset_stats();
    let started = Instant::now();
    let with = model.generate_batch(&refs, &params, 0).expect("generate");
    let seconds_with = started.elapsed().as_secs_f64();
    let stats_with = model.stats();
    let same = without
        .iter()
        .zip(&with)
        .filter(|(a, b)| a.text == b.text)
        .count();

    println!();
    println!("prefix reuse (batch {batch})  prompt tokens run   generated   seconds   tokens/s");
    for (name, stats, seconds) in [
        ("off", stats_without, seconds_without),
        ("on", stats_with, seconds_with),
    ] {
        println!(
            "{name:<22} {:>17}   {:>9}   {:>7.2}   {:>8.1}",
            stats.prompt_tokens_processed,
            stats.tokens_generated,
            seconds,
            stats.tokens_generated as f64 / seconds
        );
    }
    println!(
        "prompt tokens ratio (off / on): {:.2}x; identical outputs: {same}/{count}",
        stats_without.prompt_tokens_processed as f64
            / stats_with.prompt_tokens_processed.max(1) as f64
    );

    // One prompt at a time, no reuse: the plain decoding speed, prompt included and
    // without it (the same prompts' prefill timed alone with one new token).
    model.set_batching(1, false);
    let single_prompts = &refs[..2.min(count)];
    let first_token = GenerationParams {
        max_tokens: 1,
        ..params.clone()
    };
    let started = Instant::now();
    model
        .generate_batch(single_prompts, &first_token, 0)
        .expect("generate");
    let prefill_seconds = started.elapsed().as_secs_f64();
    model.reset_stats();
    let started = Instant::now();
    model
        .generate_batch(single_prompts, &params, 0)
        .expect("generate");
    let single_seconds = started.elapsed().as_secs_f64();
    let single = model.stats();
    println!(
        "single prompt, no reuse: {:.1} tokens/s with its {}-token prompt, {:.1} tokens/s decoding alone",
        single.tokens_generated as f64 / single_seconds,
        single.prompt_tokens_processed / single_prompts.len() as u64,
        (single.tokens_generated - single_prompts.len() as u64) as f64
            / (single_seconds - prefill_seconds).max(1e-9)
    );

    let ours = stats_with.tokens_generated as f64 / seconds_with;
    println!();
    println!("tabcontam (batch {batch}, prefix reuse): {ours:.1} tokens/s");
    for their_batch in [1, 8, batch] {
        match transformers_tokens_per_second(&gguf, &prompts, max_new, their_batch) {
            Ok(theirs) => println!(
                "transformers (f32, batch {their_batch}): {theirs:.1} tokens/s -> tabcontam is {:.2}x faster",
                ours / theirs
            ),
            Err(why) => println!("transformers (batch {their_batch}): not measured: {why}"),
        }
    }
}
