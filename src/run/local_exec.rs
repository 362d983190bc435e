//! Running requests on local weights (candle): every pending prompt of a model tokenized
//! once, ordered by [`schedule`] into micro-batches that share prefixes, each response
//! handed to the executor's writer as soon as its batch finishes.
//!
//! Inference is CPU-bound and synchronous, so it runs on a blocking thread of the executor
//! while the remote requests go out; the executor's Ctrl-C handler sets a flag checked
//! between batches.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use indicatif::ProgressBar;

use super::lane_walk::LaneWalk;
use super::model_spec::ModelSpec;
use super::outcome::{Outcome, OutcomeSender};
use crate::infer::fetch::{
    DEFAULT_MODEL_FILE, Mirrors, SMOLLM2_135M, ensure_model_in, known_model, models_dir,
};
use crate::infer::files::{ModelFiles, WeightFormat, weights_digest};
use crate::infer::{Lane, LocalModel, LocalOptions, LocalStats};
use crate::llm::error::ErrorClass;
use crate::request::{GenerationParams, Request};

/// The `model` value that names the embedded default model (fetched when missing).
pub const DEFAULT_MODEL: &str = SMOLLM2_135M.name;

/// Where a local model's weights are, without downloading anything. A known model's name
/// (`smollm2-135m-instruct`, `gemma3-270m`: `infer::fetch`) is its file in the models
/// folder; any other relative `model` is looked up beside the spec, then in the models
/// folder (`$TABCONTAM_HOME/models`, where `scripts/fetch-*.sh` put their files), then
/// taken as given (from the working directory).
pub fn weights_path(model: &ModelSpec, spec_dir: &Path) -> PathBuf {
    weights_path_in(model, spec_dir, &models_dir())
}

fn weights_path_in(model: &ModelSpec, spec_dir: &Path, models: &Path) -> PathBuf {
    let Some(value) = model.model.as_deref() else {
        return models.join(DEFAULT_MODEL_FILE);
    };
    if let Some(known) = known_model(value).filter(|known| known.name == value) {
        return models.join(known.file);
    }
    let path = Path::new(value);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    [spec_dir.join(path), models.join(path)]
        .into_iter()
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| path.to_path_buf())
}

/// The weights digest of a local model, or `None` when its files are not there yet.
pub fn local_revision(model: &ModelSpec, spec_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = weights_path(model, spec_dir);
    if !path.exists() {
        return Ok(None);
    }
    let files = ModelFiles::locate(&path)?;
    if let (Some(quantize), WeightFormat::Gguf(file)) = (model.quantize, &files.format) {
        anyhow::bail!(
            "model {}: quantize = \"{}\" applies to safetensors weights, and {} is a GGUF file (multiplied as stored): remove the key",
            model.id,
            quantize.name(),
            file.display()
        );
    }
    Ok(Some(weights_digest(&files.identity_files())?))
}

/// What a model was trained on (SPEC §8): the `tabcontam-manifest.json` of a local model
/// folder, with the spec's `trained_on`/`dose`/`base` keys overriding its fields (a manifest
/// names no spec id, so `base` usually comes from the spec); `None` when neither says.
pub fn declared_exposure(
    model: &ModelSpec,
    spec_dir: &Path,
) -> anyhow::Result<Option<crate::exposure::Exposure>> {
    let manifest = if model.backend == crate::request::BackendKind::Local {
        crate::exposure::Exposure::from_manifest(&weights_path(model, spec_dir))?
    } else {
        None
    };
    let declared = model.trained_on.is_some() || model.dose.is_some() || model.base.is_some();
    if manifest.is_none() && !declared {
        return Ok(None);
    }
    let mut exposure = manifest.unwrap_or_default();
    if let Some(trained_on) = &model.trained_on {
        exposure.trained_on = trained_on.clone();
    }
    if let Some(dose) = model.dose {
        exposure.dose = dose;
    }
    if model.base.is_some() {
        exposure.base = model.base.clone();
    }
    // `synthetic:7` in a spec is the dataset `synthetic-7` in cells.
    for name in &mut exposure.trained_on {
        if let Some(Ok(parsed)) = crate::dataset::synth::parse_name(name) {
            *name = crate::dataset::synth::name_id(&parsed);
        }
    }
    Ok(Some(exposure))
}

/// Makes sure a local model's weights are present, downloading a known model (by name or
/// file name) if needed.
pub fn ensure_weights(model: &ModelSpec, spec_dir: &Path) -> anyhow::Result<PathBuf> {
    let path = weights_path(model, spec_dir);
    if path.exists() {
        return Ok(path);
    }
    let known = match model.model.as_deref() {
        None => known_model(DEFAULT_MODEL),
        Some(value) => known_model(value),
    };
    match known {
        Some(known) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(runtime.block_on(ensure_model_in(known, &models_dir(), &Mirrors::from_env()))?)
        }
        None => anyhow::bail!(
            "model `{}`: weights not found at {} (nor beside the spec, nor in {}); set `model` to a GGUF file, a folder with config.json and safetensors, or a known model ({})",
            model.id,
            path.display(),
            models_dir().display(),
            crate::infer::fetch::KNOWN_MODELS
                .map(|known| known.name)
                .join(", ")
        ),
    }
}

/// Work for one local model: its spec, where its weights are and the requests to generate.
pub struct LocalWork {
    pub spec: ModelSpec,
    pub weights: PathBuf,
    pub requests: Vec<Request>,
    /// Requests of this model answered from the cache (for the progress bar).
    pub cached: u64,
}

/// Failure kinds of local models, as recorded in the `failures` table.
pub const LOAD_FAILED: &str = "local-load";
pub const INFERENCE_FAILED: &str = "local-inference";
pub const INFERENCE_PANICKED: &str = "local-panic";

/// Generates the requests of each local model in turn (one loaded model at a time), handing
/// every response to the writer through `tx`. Called on the executor's blocking thread;
/// `halt` (Ctrl-C, a cache error) is checked between batches, so a batch in progress
/// finishes and is stored first. A model that fails (its weights do not load, inference
/// errs or panics) is recorded as failed and stopped; the next model still runs.
/// `first_model` is the executor's index of `work[0]`; `bars[i]` is `work[i]`'s bar.
pub(super) fn run_local_models(
    first_model: usize,
    work: Vec<LocalWork>,
    tx: &OutcomeSender,
    halt: &AtomicBool,
    bars: &[ProgressBar],
) {
    for (offset, (work, bar)) in work.into_iter().zip(bars).enumerate() {
        if halt.load(Ordering::SeqCst) {
            break;
        }
        let model = first_model + offset;
        let current = AtomicUsize::new(0);
        // A panic in inference code (a shape it did not expect) fails this model, not the
        // run: the answers of the other models are still stored and decided.
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            generate_model(model, &work, tx, halt, bar, &current)
        }));
        // The model is dropped: its memory is the next one's.
        crate::infer::memory::return_freed_memory();
        let (kind, message, failed) = match run {
            Ok(Ok(())) => continue,
            Ok(Err(LocalFailure {
                kind,
                message,
                batch,
            })) => (kind, message, batch),
            Err(panic) => {
                let what = panic_message(&*panic);
                let at = current.load(Ordering::SeqCst);
                (
                    INFERENCE_PANICKED,
                    format!("local inference panicked: {what}"),
                    vec![at]
                        .into_iter()
                        .filter(|&i| i < work.requests.len())
                        .collect(),
                )
            }
        };
        bar.set_message(format!("failed: {kind}"));
        for request in failed.iter().map(|&i| &work.requests[i]) {
            let outcome = Outcome::Failed {
                model,
                kind: kind.to_string(),
                message: message.clone(),
                attempts: 1,
                // Every later request of this model would fail alike: stop it.
                class: ErrorClass::FailsModel,
            };
            if tx.send((request.clone(), outcome)).is_err() {
                return;
            }
        }
    }
}

/// Why a local model stopped, and which of its requests failed with it.
#[derive(Debug)]
pub struct LocalFailure {
    pub kind: &'static str,
    /// The [`LocalError`](crate::infer::LocalError)'s message (it names the file at fault
    /// and the fix).
    pub message: String,
    /// Indices into the model's requests.
    pub batch: Vec<usize>,
}

/// Loads one model and generates its requests in the micro-batches of [`schedule`].
/// `current` tracks the first request of the running batch, for the panic handler.
fn generate_model(
    model: usize,
    work: &LocalWork,
    tx: &OutcomeSender,
    halt: &AtomicBool,
    bar: &ProgressBar,
    current: &AtomicUsize,
) -> Result<(), LocalFailure> {
    let requests = &work.requests;
    if requests.is_empty() {
        return Ok(());
    }
    let options = LocalOptions {
        max_batch: work
            .spec
            .max_batch
            .unwrap_or(LocalOptions::default().max_batch),
        chat_template: work.spec.chat_template,
        quantize: work.spec.quantize,
        ..LocalOptions::default()
    };
    bar.set_message("loading");
    let loading = Instant::now();
    // A load failure is recorded against the model's first request: no request of it ran.
    let local = LocalModel::load(&work.weights, &options).map_err(|error| LocalFailure {
        kind: LOAD_FAILED,
        message: error.to_string(),
        batch: vec![0],
    })?;
    bar.set_message(format!("loaded in {:.1}s", loading.elapsed().as_secs_f64()));
    let started = Instant::now();
    let max_batch = options.max_batch.max(1);
    let tokenized = tokenize_all(&local, requests).map_err(|(error, at)| LocalFailure {
        kind: INFERENCE_FAILED,
        message: error.to_string(),
        batch: vec![at],
    })?;
    let batches = schedule(requests, &tokenized, max_batch);
    let lanes = work.spec.lanes.unwrap_or_else(|| {
        let longest = tokenized.iter().map(Vec::len).max().unwrap_or(0);
        // Room for the answers: the cache grows past this only for long generations.
        let per_lane = local.kv_bytes_per_position() * max_batch * (longest + 256);
        lanes_within_memory(
            lane_count(),
            per_lane,
            crate::infer::memory::available_memory(),
        )
    });
    run_in_lanes(
        &local,
        requests,
        &tokenized,
        &batches,
        lanes,
        halt,
        current,
        &|batch, responses, total| {
            for (&i, response) in batch.iter().zip(responses) {
                let outcome = Outcome::Stored { model, response };
                if tx.send((requests[i].clone(), outcome)).is_err() {
                    // The writer is gone: nothing more can be stored.
                    return false;
                }
            }
            bar.set_message(format!(
                "{:.1} tok/s, {} prompt tokens reused",
                total.tokens_generated as f64 / started.elapsed().as_secs_f64().max(1e-9),
                total.prompt_tokens_reused
            ));
            true
        },
    )
    .map(|_| ())
}

/// What a lane hands back for each micro-batch it ran: the batch (indices into the
/// requests), its responses in the batch's order, and the counters of every lane so far.
/// Returning `false` stops every lane after its batch in progress.
pub type BatchDone<'a> =
    dyn Fn(&[usize], Vec<crate::request::Response>, LocalStats) -> bool + Sync + 'a;

/// Runs `batches` (from [`schedule`]) on `lanes` lanes sharing `local` (see [`Lane`]):
/// lanes take batches in the order [`LaneWalk`] gives (the schedule's head in turn, a
/// short schedule wholly in turn, else pairs of lanes walk stretches of its tail from both
/// ends), so a walked batch follows the lane's previous one in token order and the lane's
/// kept prefix serves it. `halt` is checked between batches; `current` holds the first
/// request of a running batch. The first lane to fail stops the others after their batch
/// in progress; returns every lane's counters.
#[allow(clippy::too_many_arguments)]
pub fn run_in_lanes(
    local: &LocalModel,
    requests: &[Request],
    tokenized: &[Vec<u32>],
    batches: &[Vec<usize>],
    lanes: usize,
    halt: &AtomicBool,
    current: &AtomicUsize,
    done: &BatchDone<'_>,
) -> Result<LocalStats, LocalFailure> {
    let lanes = lanes.min(batches.len()).max(1);
    let budgets: Vec<u32> = batches.iter().map(|b| budget(requests, b)).collect();
    let walk = LaneWalk::new(&budgets, lanes);
    let stopped = AtomicBool::new(false);
    let lane_stats = Mutex::new(vec![LocalStats::default(); lanes]);
    let total = || {
        lane_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .fold(LocalStats::default(), |sum, s| sum.plus(*s))
    };
    let run_lane = |index: usize| -> Result<(), LocalFailure> {
        let mut lane = Lane::default();
        loop {
            if halt.load(Ordering::SeqCst) || stopped.load(Ordering::SeqCst) {
                return Ok(());
            }
            let Some(step) = walk.next(index) else {
                return Ok(());
            };
            // Walking backward, the batch's prompts run in reverse too: its first then
            // follows the lane's kept prompt in token order (its answers do not depend
            // on their row in the batch).
            let batch: Vec<usize> = if step.backward {
                batches[step.batch].iter().rev().copied().collect()
            } else {
                batches[step.batch].clone()
            };
            current.store(batch[0], Ordering::SeqCst);
            let answered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                respond(local, &mut lane, requests, tokenized, &batch)
            }));
            let failure = |kind, message| {
                stopped.store(true, Ordering::SeqCst);
                Err(LocalFailure {
                    kind,
                    message,
                    batch: batch.clone(),
                })
            };
            let responses = match answered {
                Ok(Ok(responses)) => responses,
                Ok(Err(error)) => return failure(INFERENCE_FAILED, error.to_string()),
                Err(panic) => {
                    let what = panic_message(&*panic);
                    return failure(
                        INFERENCE_PANICKED,
                        format!("local inference panicked: {what}"),
                    );
                }
            };
            lane_stats.lock().unwrap_or_else(|e| e.into_inner())[index] = lane.stats();
            if !done(&batch, responses, total()) {
                stopped.store(true, Ordering::SeqCst);
                return Ok(());
            }
        }
    };
    if lanes == 1 {
        return run_lane(0).map(|()| total());
    }
    // Each lane runs in a rayon pool of its own share of the cores (one thread when there
    // is a lane per core), so the kernels' parallel loops (and candle's) stay on its cores
    // instead of waking the other lanes'.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / lanes).max(1);
    let outcomes: Vec<Result<(), LocalFailure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..lanes)
            .map(|index| {
                let run_lane = &run_lane;
                scope.spawn(move || {
                    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
                        Ok(pool) => pool.install(|| run_lane(index)),
                        Err(_) => run_lane(index),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a lane catches its panics"))
            .collect()
    });
    outcomes.into_iter().collect::<Result<(), _>>()?;
    Ok(total())
}

/// How many lanes generate at once when the spec does not say (`lanes`): `TABCONTAM_LANES`
/// when set, else one per core (then fewer if their caches would not fit: see
/// [`lanes_within_memory`]). Each lane runs whole micro-batches on one core; the
/// weights are shared. Measured on the demo (2 cores, SmolLM2-135M Q4_1): one lane whose
/// kernels split every op over both cores took 160.7 s at 138 % CPU, two lanes 69.6 s at
/// 194 %, with the same 318 answers.
pub fn lane_count() -> usize {
    std::env::var("TABCONTAM_LANES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `wanted` lanes, fewer where their KV caches (`per_lane` bytes each) would take more than
/// a quarter of the memory available: one lane per core suits a small model, while 64
/// lanes of an 8B model's caches would not fit.
pub fn lanes_within_memory(wanted: usize, per_lane: usize, available: Option<usize>) -> usize {
    let budget = available.map_or(2 << 30, |bytes| bytes / 4);
    wanted.min((budget / per_lane.max(1)).max(1)).max(1)
}

/// The text of a caught panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Every prompt's token ids, tokenized once (the schedule orders by them and generation
/// starts from them); on failure, the error and the index of the request at fault.
pub fn tokenize_all(
    local: &LocalModel,
    requests: &[Request],
) -> Result<Vec<Vec<u32>>, (Box<crate::infer::LocalError>, usize)> {
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| local.tokenize(&r.prompt).map_err(|e| (Box::new(e), i)))
        .collect()
}

/// The micro-batches (indices into `requests`) in which a model's pending requests run.
///
/// Requests that differ at most in their token budget (same sampling, seed, stops and
/// sample index) may share a micro-batch: each sequence stops at its own budget, and the
/// sampler's draws depend on the request only. Within such a group the prompts are sorted
/// by budget, largest first (long answers decode together), then by their token ids, so
/// that each shares the most with its neighbour: a test's
/// instructions, then a row (a 0-shot prompt sits just before the 1-shot ones that start
/// with its row), which `shared_prefill` copies instead of computing. Lengths may mix: the
/// prefill packs prompts and computes no padding (padding only costs cache slots, which
/// decoding skips). Measured on the demo's 318 prompts, lanes taking batches in turn: 74 %
/// of the prompt text is computed sorted this way, 83 % sorted by length then ids; lanes
/// walking the schedule ([`LaneWalk`]): 72.9 %, against 72.4 % for the whole prefix tree.
pub fn schedule(requests: &[Request], tokenized: &[Vec<u32>], max_batch: usize) -> Vec<Vec<usize>> {
    let max_batch = max_batch.max(1);
    // Groups by first appearance (params compare by value; f64 fields rule out hashing).
    let mut groups: Vec<(GenerationParams, u32, Vec<usize>)> = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let key = GenerationParams {
            max_tokens: 0,
            ..request.params.clone()
        };
        match groups
            .iter_mut()
            .find(|(params, sample, _)| *params == key && *sample == request.sample)
        {
            Some((_, _, members)) => members.push(i),
            None => groups.push((key, request.sample, vec![i])),
        }
    }
    let mut batches = Vec::new();
    for (_, _, mut members) in groups {
        // Largest budget first, then by tokens: the requests that may decode for hundreds
        // of steps share micro-batches, so a decoding step (which reads every weight)
        // serves as many of them as it can; on the demo its eight long answers (budgets
        // 256, 128 and 16) were spread over five micro-batches beside 4-token answers.
        let key = |i: usize| {
            (
                std::cmp::Reverse(requests[i].params.max_tokens),
                &tokenized[i],
                i,
            )
        };
        members.sort_by(|&a, &b| key(a).cmp(&key(b)));
        batches.extend(members.chunks(max_batch).map(<[usize]>::to_vec));
    }
    // Largest token budget first (a stable sort: equal budgets keep their order): a batch
    // that may decode for hundreds of steps then runs while other lanes have work, and the
    // run ends on short answers. On the demo its 46-step batch came last, one lane idle
    // for its 5 s.
    batches.sort_by_key(|batch| std::cmp::Reverse(budget(requests, batch)));
    batches
}

/// A micro-batch's token budget: the largest of its requests'.
fn budget(requests: &[Request], batch: &[usize]) -> u32 {
    batch
        .iter()
        .map(|&i| requests[i].params.max_tokens)
        .max()
        .unwrap_or(0)
}

/// Runs one micro-batch of [`schedule`] on a lane (see [`Lane`]): its prompts' responses,
/// in its order.
pub fn respond(
    local: &LocalModel,
    lane: &mut Lane,
    requests: &[Request],
    tokenized: &[Vec<u32>],
    batch: &[usize],
) -> Result<Vec<crate::request::Response>, crate::infer::LocalError> {
    let first = &requests[batch[0]];
    let ids: Vec<Vec<u32>> = batch.iter().map(|&i| tokenized[i].clone()).collect();
    let budgets: Vec<u32> = batch
        .iter()
        .map(|&i| requests[i].params.max_tokens)
        .collect();
    local.respond_on(lane, &ids, &budgets, &first.params, first.sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_model(path: &str) -> ModelSpec {
        toml::from_str(&format!(
            "id = \"m\"\nbackend = \"local\"\nmodel = \"{path}\""
        ))
        .unwrap()
    }

    fn request(prompt: &str, max_tokens: u32, temperature: f64) -> Request {
        Request {
            model: crate::request::ModelIdentity {
                backend: crate::request::BackendKind::Local,
                model: "m".into(),
                revision: "r".into(),
            },
            api: crate::request::ApiMode::Completions,
            prompt: prompt.into(),
            params: GenerationParams {
                max_tokens,
                temperature,
                top_p: None,
                seed: Some(0),
                stop: Vec::new(),
                stop_rule: None,
            },
            sample: 0,
        }
    }

    #[test]
    fn lanes_shrink_to_what_memory_holds() {
        // SmolLM2-135M: 30 layers × 2 × 3 KV heads × 64 × 4 bytes = 46 KB per position,
        // batch 8 of 600 positions: 221 MB per lane.
        let per_lane = 30 * 2 * 3 * 64 * 4 * 8 * 600;
        assert_eq!(lanes_within_memory(2, per_lane, Some(20 << 30)), 2);
        assert_eq!(lanes_within_memory(64, per_lane, Some(20 << 30)), 24);
        // An 8B model (32 layers, 8 KV heads of 128) at batch 8 of 1,300 positions: 2.7 GB.
        let per_lane = 32 * 2 * 8 * 128 * 4 * 8 * 1300;
        assert_eq!(lanes_within_memory(64, per_lane, Some(64 << 30)), 6);
        assert_eq!(lanes_within_memory(64, per_lane, Some(1 << 30)), 1);
        assert_eq!(lanes_within_memory(4, 0, None), 4);
    }

    #[test]
    fn schedule_sorts_by_budget_then_tokens_and_keeps_sampling_apart() {
        // Three tests' prompts interleaved in plan order, with different budgets; a long
        // prompt that starts like a short one; one sampled request that must not join
        // the greedy ones.
        let requests = vec![
            request("b long answer", 256, 0.0),
            request("a short", 4, 0.0),
            request("b other", 256, 0.0),
            request("sampled", 4, 0.7),
            request("a again", 4, 0.0),
            request("a again, with many rows", 4, 0.0),
            request("c medium", 16, 0.0),
        ];
        let tokenized: Vec<Vec<u32>> = vec![
            vec![2, 9],
            vec![1, 5],
            vec![2, 3],
            vec![0],
            vec![1, 4],
            vec![1, 4, 7, 7, 7, 7],
            vec![3],
        ];
        let batches = schedule(&requests, &tokenized, 2);
        // The greedy group by budget, then token ids: both 256s together ([2,3] [2,9]),
        // the 16 beside the first 4 (budgets join), the long prompt right after the short
        // one it extends ([1,4] [1,4,7,…]), then [1,5]; then the sampled one. Batches run
        // largest budget first.
        assert_eq!(batches, vec![vec![2, 0], vec![6, 4], vec![5, 1], vec![3]]);
        // Every request exactly once.
        let mut all: Vec<usize> = batches.concat();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn relative_weights_are_found_beside_the_spec_then_in_the_models_folder() {
        let spec_dir = tempfile::tempdir().unwrap();
        let models = tempfile::tempdir().unwrap();
        let model = local_model("gemma-3-270m-q4_k_m.gguf");
        // Nowhere yet: the path as given, for the error message.
        assert_eq!(
            weights_path_in(&model, spec_dir.path(), models.path()),
            Path::new("gemma-3-270m-q4_k_m.gguf")
        );
        std::fs::write(models.path().join("gemma-3-270m-q4_k_m.gguf"), b"x").unwrap();
        assert_eq!(
            weights_path_in(&model, spec_dir.path(), models.path()),
            models.path().join("gemma-3-270m-q4_k_m.gguf")
        );
        std::fs::write(spec_dir.path().join("gemma-3-270m-q4_k_m.gguf"), b"x").unwrap();
        assert_eq!(
            weights_path_in(&model, spec_dir.path(), models.path()),
            spec_dir.path().join("gemma-3-270m-q4_k_m.gguf")
        );
    }

    #[test]
    fn a_known_model_name_is_its_file_in_the_models_folder() {
        let spec_dir = tempfile::tempdir().unwrap();
        let models = tempfile::tempdir().unwrap();
        for (name, file) in [
            ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf"),
            ("smollm2-135m-instruct", DEFAULT_MODEL_FILE),
        ] {
            // Before any download too: that is where `ensure_weights` puts it.
            assert_eq!(
                weights_path_in(&local_model(name), spec_dir.path(), models.path()),
                models.path().join(file)
            );
        }
    }
}
