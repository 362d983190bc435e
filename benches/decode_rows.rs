//! Decoding where the calibration studies spend it: a batch of 8 prompts that continue a
//! dataset's rows (the spec's row-writing tests, those judged at a line: tests 7–9), each
//! decoding a fixed number of tokens with no stop rule, so that both engines write the
//! same number of rows' worth of tokens. tabcontam runs the 8 as one micro-batch (as `run`
//! does with `max_batch = 8`); llama-server runs them on 8 slots, all 8 requests at once
//! (continuous batching decodes them together), greedy, same GGUF.
//!
//! Decoding alone is timed the same way on both sides: each round runs the batch twice,
//! with 1 new token and with `BENCH_DECODE_TOKENS` (128), on a cold engine each time (our
//! prefix cache cleared, a fresh llama-server), and the decode rate is the extra tokens
//! over the extra wall time, `8 × (N − 1) / (wall(N) − wall(1))`. Each engine's own
//! decode counter is printed beside it (ours: the decode loop's time; llama-server's: the
//! longest `predicted_ms` of the 8 answers, which overlap).
//!
//! `cargo bench --bench decode_rows` (env: `BENCH_MODEL`, `BENCH_QUANTIZE`, `BENCH_LLAMA_MODEL`,
//! `BENCH_SPEC` (another spec, e.g.
//! `experiments/gemma3.toml` with the Gemma 3 GGUF), `BENCH_DECODE_TOKENS` (128),
//! `BENCH_ROWS` (8), `BENCH_ROUNDS` (3), `BENCH_LLAMA_THREADS`, `BENCH_LLAMA_ARGS`,
//! `TABCONTAM_CPU` (our kernel path)).

#[path = "support/race.rs"]
mod race;

use std::time::{Duration, Instant};

use serde_json::json;
use tabcontam::infer::LocalModel;
use tabcontam::llm::Request;
use tabcontam::request::GenerationParams;

/// One run of the batch on one engine.
struct Run {
    wall: Duration,
    generated: u64,
    /// The engine's own count of its decoding time.
    decode_seconds: f64,
    texts: Vec<String>,
}

/// The first `rows` distinct prompts of the spec's requests judged at a line (a stop
/// rule: the tests that write rows), in plan order.
fn row_prompts(requests: &[Request], rows: usize) -> Vec<String> {
    let mut prompts: Vec<String> = Vec::new();
    for request in requests {
        if request.params.stop_rule.is_some() && !prompts.contains(&request.prompt) {
            prompts.push(request.prompt.clone());
        }
    }
    assert!(
        prompts.len() >= rows,
        "the spec has {} row-writing prompts, fewer than the {rows} asked (BENCH_ROWS)",
        prompts.len()
    );
    prompts.truncate(rows);
    prompts
}

/// Greedy, `tokens` new tokens, nothing that stops earlier but the end-of-sequence token.
fn params(tokens: u32) -> GenerationParams {
    GenerationParams {
        max_tokens: tokens,
        temperature: 0.0,
        top_p: None,
        seed: Some(0),
        stop: Vec::new(),
        stop_rule: None,
    }
}

fn run_tabcontam(model: &mut LocalModel, tokenized: &[Vec<u32>], tokens: u32) -> Run {
    model.clear_prefix_cache();
    model.reset_stats();
    let started = Instant::now();
    let responses = model
        .respond_from_ids(
            tokenized,
            &vec![tokens; tokenized.len()],
            &params(tokens),
            0,
        )
        .expect("generate");
    let wall = started.elapsed();
    let stats = model.stats();
    Run {
        wall,
        generated: stats.tokens_generated,
        decode_seconds: stats.decode_nanos as f64 / 1e9,
        texts: responses.into_iter().map(|r| r.text).collect(),
    }
}

fn run_llama(port: u16, prompts: &[String], tokens: u32) -> Run {
    let bodies = prompts
        .iter()
        .map(|prompt| {
            json!({
                "prompt": prompt,
                "n_predict": tokens,
                "temperature": 0.0,
                "top_k": 1,
                "seed": 0,
                "cache_prompt": true,
            })
        })
        .collect();
    let (answers, wall) = race::complete_all(port, bodies, prompts.len());
    let timing = |a: &serde_json::Value, key: &str| a["timings"][key].as_f64().unwrap_or(0.0);
    Run {
        wall,
        generated: answers
            .iter()
            .map(|a| timing(a, "predicted_n") as u64)
            .sum(),
        decode_seconds: answers
            .iter()
            .map(|a| timing(a, "predicted_ms"))
            .fold(0.0, f64::max)
            / 1e3,
        texts: answers
            .iter()
            .map(|a| a["content"].as_str().unwrap_or_default().to_string())
            .collect(),
    }
}

/// Per round: the batch with one new token, then with `tokens`.
struct Round {
    first: Run,
    whole: Run,
}

impl Round {
    /// The decoding rate from the two wall times: tokens beyond each row's first, over
    /// the time beyond the one-token run.
    fn decode_rate(&self) -> f64 {
        let extra = self.whole.generated.saturating_sub(self.first.generated) as f64;
        extra / (self.whole.wall.as_secs_f64() - self.first.wall.as_secs_f64()).max(1e-9)
    }

    /// The engine's own counter: generated tokens over its decoding time.
    fn counted_rate(&self) -> f64 {
        self.whole.generated as f64 / self.whole.decode_seconds.max(1e-9)
    }
}

/// The round with the median decode rate (the lower middle one for an even count).
fn median(mut rounds: Vec<Round>) -> Round {
    rounds.sort_by(|a, b| a.decode_rate().total_cmp(&b.decode_rate()));
    let middle = (rounds.len() - 1) / 2;
    rounds.swap_remove(middle)
}

fn main() {
    let Some(race::Setup {
        model_path,
        spec,
        server_binary,
        llama_model,
        have_server,
    }) = race::setup()
    else {
        return;
    };
    let tokens = race::env_number("BENCH_DECODE_TOKENS", 128).max(2) as u32;
    let rows = race::env_number("BENCH_ROWS", 8).max(1);
    let rounds = race::env_number("BENCH_ROUNDS", 3).max(1);
    let (requests, _) = race::spec_requests(&spec);
    let prompts = row_prompts(&requests, rows);
    println!(
        "spec: {} ({rows} row-writing prompts); model: {}",
        spec.display(),
        model_path.display()
    );
    println!(
        "greedy, {tokens} new tokens per prompt, no stop rule; {} cores; {rounds} rounds, engines interleaved",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let load_before = race::load_average();
    let speed_before = race::core_speed();
    let mut model = LocalModel::load(&model_path, &race::local_options()).expect("load model");
    model.set_batching(rows, true);
    let tokenized: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| model.tokenize(p).expect("tokenize"))
        .collect();
    println!(
        "prompt tokens: {} ({}–{} per prompt)",
        tokenized.iter().map(Vec::len).sum::<usize>(),
        tokenized.iter().map(Vec::len).min().unwrap_or(0),
        tokenized.iter().map(Vec::len).max().unwrap_or(0)
    );
    let logs = tempfile::tempdir().expect("temp dir");
    let mut ours = Vec::with_capacity(rounds);
    let mut theirs = Vec::with_capacity(rounds);
    for round in 0..rounds {
        ours.push(Round {
            first: run_tabcontam(&mut model, &tokenized, 1),
            whole: run_tabcontam(&mut model, &tokenized, tokens),
        });
        if have_server {
            // A fresh server for each run: its prompt cache would answer the second's
            // prompts from the first's.
            let llama = |tokens: u32, name: &str| {
                let log = logs.path().join(format!("llama-server-{round}-{name}.log"));
                let server = race::start_server(&server_binary, &llama_model, rows, &log, &[]);
                run_llama(server.port, &prompts, tokens)
            };
            theirs.push(Round {
                first: llama(1, "first"),
                whole: llama(tokens, "whole"),
            });
        }
        eprintln!(
            "round {}: tabcontam {:.2} s{} (load {})",
            round + 1,
            ours[round].whole.wall.as_secs_f64(),
            theirs.get(round).map_or(String::new(), |r: &Round| format!(
                ", llama-server -np {rows} {:.2} s",
                r.whole.wall.as_secs_f64()
            )),
            race::load_average()
        );
    }
    let load_after = race::load_average();
    let speed_after = race::core_speed();
    let ours = median(ours);
    println!();
    println!(
        "{:<34} {:>10} {:>10} {:>10} {:>16} {:>14}",
        "engine (round of median rate)",
        "wall(1) s",
        "wall(N) s",
        "generated",
        "decode t/s (wall)",
        "own counter t/s"
    );
    let line = |name: String, round: &Round| {
        println!(
            "{name:<34} {:>10.2} {:>10.2} {:>10} {:>16.1} {:>14.1}",
            round.first.wall.as_secs_f64(),
            round.whole.wall.as_secs_f64(),
            round.whole.generated,
            round.decode_rate(),
            round.counted_rate()
        );
    };
    line(format!("tabcontam, one micro-batch of {rows}"), &ours);
    let theirs = (!theirs.is_empty()).then(|| median(theirs));
    if let Some(theirs) = &theirs {
        line(format!("llama-server -np {rows}, {rows} at once"), theirs);
    }
    println!();
    println!("load average (1, 5, 15 min): {load_before} before, {load_after} after");
    println!("core speed: {speed_before} before, {speed_after} after");
    println!("peak RSS of this process: {:.0} MiB", race::peak_rss_mib());
    let their_path = if theirs.is_some() {
        race::cpu_features(
            &server_binary,
            &llama_model,
            &logs.path().join("llama-server-system-info.log"),
        )
    } else {
        "not measured".into()
    };
    println!(
        "CPU paths: tabcontam {} (TABCONTAM_CPU forces another); {} {their_path}",
        tabcontam_kernels::cpu::isa().name(),
        server_binary.display()
    );
    let Some(theirs) = theirs else {
        println!("llama-server: not measured");
        return;
    };
    println!(
        "decode-rate ratio (tabcontam / llama-server, from wall times): {:.2}x",
        ours.decode_rate() / theirs.decode_rate()
    );
    let same = ours
        .whole
        .texts
        .iter()
        .zip(&theirs.whole.texts)
        .filter(|(a, b)| a == b)
        .count();
    println!("outputs identical to llama-server's: {same}/{rows}");
}
