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
//! `models/`, `llama-server` under `bin/`), `BENCH_MODEL` (another GGUF, or a checkpoint folder with
//! `BENCH_QUANTIZE` and the same weights as GGUF in `BENCH_LLAMA_MODEL` for the server), `BENCH_SPEC`
//! (another spec), `BENCH_LLAMA_SLOTS` (`1,2,4`), `BENCH_LLAMA_THREADS` (all cores),
//! `BENCH_ROUNDS` (3), `BENCH_LIMIT` (the first N requests only), `BENCH_LLAMA_ARGS`,
//! `TABCONTAM_CPU` (our kernel path)).

#[path = "support/race.rs"]
mod race;

use std::time::{Duration, Instant};

use serde_json::json;
use tabcontam::infer::LocalModel;
use tabcontam::llm::Request;
use tabcontam::run::local_exec;

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

/// Every request to llama-server's `/completion`, `slots` at a time, in plan order.
fn run_llama(port: u16, requests: &[Request], slots: usize) -> Measured {
    let bodies = requests
        .iter()
        .map(|request| {
            json!({
                "prompt": request.prompt,
                "n_predict": request.params.max_tokens,
                "temperature": 0.0,
                "top_k": 1,
                "seed": 0,
                "cache_prompt": true,
            })
        })
        .collect();
    let (answers, wall) = race::complete_all(port, bodies, slots);
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
    let slot_counts: Vec<usize> = std::env::var("BENCH_LLAMA_SLOTS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let rounds = race::env_number("BENCH_ROUNDS", 3).max(1);
    let (mut requests, max_batch) = race::spec_requests(&spec);
    requests.truncate(race::env_number("BENCH_LIMIT", requests.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("spec: {} ({} requests)", spec.display(), requests.len());
    println!("model: {}", model_path.display());
    println!(
        "greedy, max tokens per request as planned ({} in all); {threads} cores; {rounds} rounds, engines interleaved",
        requests.iter().map(|r| r.params.max_tokens).sum::<u32>()
    );
    let load_before = race::load_average();
    let speed_before = race::core_speed();

    let loading = Instant::now();
    let mut model = LocalModel::load(&model_path, &race::local_options()).expect("load model");
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
            race::load_average()
        );
        ours.push(measured);
        for (slots, runs) in configurations.iter().zip(&mut theirs) {
            let log = logs
                .path()
                .join(format!("llama-server-{slots}-{round}.log"));
            // A fresh server: nothing of the previous round in its prompt cache.
            let server = race::start_server(&server_binary, &llama_model, *slots, &log, &[]);
            let measured = run_llama(server.port, &requests, *slots);
            drop(server);
            eprintln!(
                "round {}: llama-server -np {slots} {:.2} s (load {})",
                round + 1,
                measured.wall.as_secs_f64(),
                race::load_average()
            );
            runs.push(measured);
        }
    }
    let our_rss = race::peak_rss_mib();
    drop(model);
    let load_after = race::load_average();
    let speed_after = race::core_speed();

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
    println!("core speed: {speed_before} before, {speed_after} after");
    println!("peak RSS of this process after the in-process runs: {our_rss:.0} MiB");
    let their_path = if theirs.is_empty() {
        "not measured".to_string()
    } else {
        race::cpu_features(
            &server_binary,
            &llama_model,
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
