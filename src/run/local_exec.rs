//! Running requests on local weights (candle): batches of consecutive prompts with the same
//! generation parameters, each response committed as soon as its batch finishes.
//!
//! Inference is CPU-bound and synchronous, so this runs on the calling thread; a small
//! signal thread turns Ctrl-C into a flag checked between batches.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::execute::ModelProgress;
use super::spec::ModelSpec;
use crate::llm::Request;
use crate::llm::local::fetch::{DEFAULT_MODEL_FILE, ensure_default_model, models_dir};
use crate::llm::local::files::{ModelFiles, weights_digest};
use crate::llm::local::{LocalModel, LocalOptions};
use crate::store::{RunId, Store};

/// The `model` value that names the embedded default model (fetched when missing).
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// Where a local model's weights are, without downloading anything.
pub fn weights_path(model: &ModelSpec, spec_dir: &Path) -> PathBuf {
    match model.model.as_deref() {
        None | Some(DEFAULT_MODEL) => models_dir().join(DEFAULT_MODEL_FILE),
        Some(path) => {
            let path = Path::new(path);
            if path.is_relative() && spec_dir.join(path).exists() {
                spec_dir.join(path)
            } else {
                path.to_path_buf()
            }
        }
    }
}

/// The weights digest of a local model, or `None` when its files are not there yet.
pub fn local_revision(model: &ModelSpec, spec_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = weights_path(model, spec_dir);
    if !path.exists() {
        return Ok(None);
    }
    let files = ModelFiles::locate(&path)?;
    Ok(Some(weights_digest(&files.identity_files())?))
}

/// Makes sure a local model's weights are present, downloading the default model if needed.
pub fn ensure_weights(model: &ModelSpec, spec_dir: &Path) -> anyhow::Result<PathBuf> {
    let path = weights_path(model, spec_dir);
    if path.exists() {
        return Ok(path);
    }
    match model.model.as_deref() {
        None | Some(DEFAULT_MODEL) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(runtime.block_on(ensure_default_model())?)
        }
        Some(_) => anyhow::bail!(
            "model `{}`: weights not found at {}; set `model` to a GGUF file or a folder with config.json and safetensors",
            model.id,
            path.display()
        ),
    }
}

/// Generates every request on `model`, storing each response through `store`.
pub fn send_local(
    store: &mut Store,
    run: RunId,
    spec: &ModelSpec,
    weights: &Path,
    requests: Vec<Request>,
    show_progress: bool,
) -> anyhow::Result<(ModelProgress, bool)> {
    let options = LocalOptions {
        max_batch: spec.max_batch.unwrap_or(LocalOptions::default().max_batch),
        chat_template: spec.chat_template,
        ..LocalOptions::default()
    };
    let loading = Instant::now();
    let mut model = LocalModel::load(weights, &options)?;
    let mut progress = ModelProgress {
        to_send: requests.len() as u64,
        ..Default::default()
    };
    let bar = if show_progress {
        ProgressBar::with_draw_target(
            Some(requests.len() as u64),
            ProgressDrawTarget::stderr_with_hz(5),
        )
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(spec.id.clone());
    bar.set_message(format!("loaded in {:.1}s", loading.elapsed().as_secs_f64()));

    let interrupted = Arc::new(AtomicBool::new(false));
    let _signal = watch_ctrl_c(Arc::clone(&interrupted));
    let started = Instant::now();
    let max_batch = options.max_batch.max(1);
    let mut index = 0;
    while index < requests.len() {
        if interrupted.load(Ordering::SeqCst) {
            break;
        }
        // Consecutive requests come from one test: same parameters, shared instructions.
        let first = &requests[index];
        let mut end = index + 1;
        while end < requests.len()
            && end - index < max_batch
            && requests[end].params == first.params
            && requests[end].sample == first.sample
        {
            end += 1;
        }
        let batch = &requests[index..end];
        let prompts: Vec<&str> = batch.iter().map(|r| r.prompt.as_str()).collect();
        let responses = model.generate_batch(&prompts, &first.params, first.sample)?;
        for (request, response) in batch.iter().zip(&responses) {
            store.put_response(request, response)?;
            progress.sent += 1;
            progress.prompt_tokens += u64::from(response.prompt_tokens.unwrap_or(0));
            progress.completion_tokens += u64::from(response.completion_tokens.unwrap_or(0));
        }
        index = end;
        bar.set_position(index as u64);
        let stats = model.stats();
        bar.set_message(format!(
            "{:.1} tok/s, {} prompt tokens reused",
            stats.tokens_generated as f64 / started.elapsed().as_secs_f64().max(1e-9),
            stats.prompt_tokens_reused
        ));
    }
    bar.finish();
    let _ = run;
    Ok((progress, interrupted.load(Ordering::SeqCst)))
}

/// Sets `flag` on Ctrl-C (checked between batches; a batch in progress finishes first).
fn watch_ctrl_c(flag: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tabcontam-ctrl-c".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    flag.store(true, Ordering::SeqCst);
                }
            });
        })
        .ok()
}
