//! The resume state of a series being trained: weights, AdamW moments and where in the
//! seeded data order the run stood, saved in `<series>/resume/` every `--resume-every`
//! seconds and at the end of the series. A `contaminate` killed mid-run continues from it
//! and writes the same checkpoints an uninterrupted run writes (the data order is a
//! function of the seed and the epoch, so the steps left are the same steps); a finished
//! series asked for more epochs of the same inputs continues from its final state.
//!
//! The final state of a full fine-tuning holds the optimizer's moments only: its weights
//! are the last checkpoint's, read from there (checked against the checkpoint's revision)
//! rather than written twice (Gemma 3 270M: 1 GB of its 3.2 GB state, per series).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::TrainError;
use super::llama::LlamaTrainer;
use super::manifest::Checkpoint;
use super::optimizer::AdamW;
use super::state_file::{self, Entry};
use crate::infer::files::{ModelFiles, weights_digest};

/// The folder of the resume state inside a series folder.
pub const RESUME_DIR: &str = "resume";
const STATE_FILE: &str = "state.json";
const TENSORS_FILE: &str = "state.safetensors";

/// Where a run stood when its state was saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Position {
    /// The inputs digest of the series (a state of other inputs is never resumed).
    pub inputs_digest: String,
    /// The epoch in progress (1-based) and how many of its optimizer steps are done.
    pub epoch: usize,
    pub steps_in_epoch: usize,
    /// Optimizer steps and target tokens since the start of the series.
    pub step: usize,
    pub tokens_trained: u64,
    /// The epoch's summed loss and targets so far (its mean loss goes in the manifest).
    pub epoch_loss: f64,
    pub epoch_targets: f64,
    /// Training seconds before the save (tokens/s and the ETA count from the first start).
    pub seconds: f64,
    /// Where the weights are when the state does not hold them: a checkpoint of the series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_in: Option<WeightsIn>,
}

/// A checkpoint folder of the series (by its name) whose weights are the state's, with the
/// revision they had when the state was saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WeightsIn {
    pub checkpoint: String,
    pub revision: String,
}

pub fn resume_dir(series: &Path) -> PathBuf {
    series.join(RESUME_DIR)
}

/// Saves the state: written into a fresh folder, then renamed over the previous one, so a
/// kill during the save leaves the previous state whole.
pub fn save(
    series: &Path,
    position: &Position,
    model: &LlamaTrainer,
    optimizer: &AdamW,
) -> Result<(), TrainError> {
    let dir = resume_dir(series);
    let partial = series.join(format!("{RESUME_DIR}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| TrainError::io(&partial, e))?;
    }
    std::fs::create_dir_all(&partial).map_err(|e| TrainError::io(&partial, e))?;
    let vars = match position.weights_in {
        Some(_) => Vec::new(),
        None => model.trainable_vars(),
    };
    let tensors: Vec<&Tensor> = vars.iter().map(|(_, var)| var.as_tensor()).collect();
    let tensors_path = partial.join(TENSORS_FILE);
    state_file::with_values(&tensors, |values| {
        let mut entries = optimizer.moments();
        entries.extend(vars.iter().zip(values).map(|((name, var), values)| Entry {
            name: format!("param.{name}"),
            shape: var.dims().to_vec(),
            values,
        }));
        state_file::write(&tensors_path, &entries)
    })
    .map_err(|e| TrainError::io(&tensors_path, e))?;
    let state_path = partial.join(STATE_FILE);
    std::fs::write(
        &state_path,
        serde_json::to_string_pretty(position).expect("json"),
    )
    .map_err(|e| TrainError::io(&state_path, e))?;
    let old = series.join(format!("{RESUME_DIR}.old"));
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
        }
        std::fs::rename(&dir, &old).map_err(|e| TrainError::io(&dir, e))?;
    }
    std::fs::rename(&partial, &dir).map_err(|e| TrainError::io(&dir, e))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
    }
    Ok(())
}

/// The state at the end of a series (`position`, after its last epoch): kept when the
/// learning rate is constant and this run trained, so that a larger dose of the same inputs
/// (more epochs) continues from it rather than training from the start, and writes what an
/// uninterrupted run would (the data order depends on the seed and the epoch only); removed
/// under a decaying rate, whose series cannot be continued (its epochs are inputs). Under
/// full fine-tuning the weights are `last`'s, the checkpoint this run just wrote: the state
/// names it instead of holding a second copy. Returns the line to report.
pub(super) fn keep_final(
    series: &Path,
    (constant_rate, trained): (bool, bool),
    mut position: Position,
    last: Option<&Checkpoint>,
    model: &LlamaTrainer,
    optimizer: &AdamW,
) -> Result<Option<String>, TrainError> {
    let dir = resume_dir(series);
    if !constant_rate {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
        }
        return Ok(None);
    }
    if !trained {
        return Ok(None);
    }
    position.weights_in = last
        .filter(|c| !c.reused && c.manifest.epoch == position.epoch && model.lora().is_none())
        .and_then(|c| {
            Some(WeightsIn {
                checkpoint: c.dir.file_name()?.to_str()?.to_string(),
                revision: c.manifest.revision.clone(),
            })
        });
    super::heap::outside_the_kept_heap(|| save(series, &position, model, optimizer))?;
    let weights = match &position.weights_in {
        Some(place) => format!(
            " (the optimizer's moments; the weights are {}'s)",
            place.checkpoint
        ),
        None => String::new(),
    };
    Ok(Some(format!(
        "kept the state after epoch {} in {}{weights}: more epochs of these inputs continue from it (delete it to free the space)",
        position.epoch,
        dir.display(),
    )))
}

/// The saved position of `series` (`None` when nothing was saved). A state of other inputs
/// is an error: resuming it would mix two trainings.
pub fn position(series: &Path, inputs_digest: &str) -> Result<Option<Position>, TrainError> {
    // A kill between the two renames of `save` leaves only the `.old` folder.
    let dir = resume_dir(series);
    let old = series.join(format!("{RESUME_DIR}.old"));
    if !dir.exists() && old.exists() {
        std::fs::rename(&old, &dir).map_err(|e| TrainError::io(&old, e))?;
    }
    let path = dir.join(STATE_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io(&path, e)),
    };
    let position: Position = serde_json::from_str(&text).map_err(|e| TrainError::BadModel {
        path: path.clone(),
        detail: format!(
            "unreadable resume state ({e}); delete {} to start over",
            dir.display()
        ),
    })?;
    if position.inputs_digest != inputs_digest {
        return Err(TrainError::BadModel {
            path,
            detail: format!(
                "a resume state of other inputs ({}, these are {inputs_digest}): delete {} to train these inputs from the start, or write them to another --out",
                position.inputs_digest,
                dir.display()
            ),
        });
    }
    Ok(Some(position))
}

/// Loads the saved weights into `model` and the moments into `optimizer`.
pub fn restore(
    series: &Path,
    position: &Position,
    model: &LlamaTrainer,
    optimizer: &mut AdamW,
) -> Result<(), TrainError> {
    let path = resume_dir(series).join(TENSORS_FILE);
    let bad = |detail: String| TrainError::BadModel {
        path: path.clone(),
        detail: format!(
            "{detail}; delete {} to start over",
            resume_dir(series).display()
        ),
    };
    let tensors: HashMap<String, Tensor> = candle_core::safetensors::load(&path, &Device::Cpu)
        .map_err(|e| bad(format!("unreadable resume state ({e})")))?;
    // The weights from the checkpoint the state names, else from the state itself.
    let from_checkpoint = position
        .weights_in
        .as_ref()
        .map(|place| checkpoint_weights(series, place).map_err(bad))
        .transpose()?;
    let (weights, prefix) = match &from_checkpoint {
        Some(weights) => (weights, ""),
        None => (&tensors, "param."),
    };
    for (name, var) in model.trainable_vars() {
        let key = format!("{prefix}{name}");
        let saved = weights
            .get(&key)
            .ok_or_else(|| bad(format!("the resume state's weights lack `{key}`")))?;
        var.set(saved)
            .map_err(|e| bad(format!("`{key}` does not fit the model ({e})")))?;
    }
    optimizer
        .restore(&tensors, position.step as u64)
        .map_err(bad)
}

/// The weights of the checkpoint `place` names, after checking that its files still have
/// the revision the state was saved with (a checkpoint changed since would resume other
/// weights than the ones trained).
fn checkpoint_weights(series: &Path, place: &WeightsIn) -> Result<HashMap<String, Tensor>, String> {
    let dir = series.join(&place.checkpoint);
    let changed = |detail: String| {
        format!(
            "its weights are those of checkpoint {} (revision {}), which {detail}",
            dir.display(),
            place.revision
        )
    };
    let files = ModelFiles::locate(&dir).map_err(|e| changed(format!("is unreadable ({e})")))?;
    let revision = weights_digest(&files.identity_files())
        .map_err(|e| changed(format!("is unreadable ({e})")))?;
    if revision != place.revision {
        return Err(changed(format!(
            "has changed since (revision {revision} now)"
        )));
    }
    let path = dir.join(super::CHECKPOINT_WEIGHTS);
    candle_core::safetensors::load(&path, &Device::Cpu)
        .map_err(|e| changed(format!("cannot be read ({e})")))
}

/// `loss.csv`, keeping the lines of the first `keep_steps` steps (those a resumed run does
/// not train again) and the header.
pub(super) fn loss_log(path: &Path, keep_steps: usize) -> Result<std::fs::File, TrainError> {
    let mut kept = String::from("step,epoch,loss,tokens,seconds\n");
    if keep_steps > 0 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().skip(1) {
            let step: Option<usize> = line.split(',').next().and_then(|s| s.parse().ok());
            if step.is_some_and(|s| s <= keep_steps) {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    std::fs::write(path, kept).map_err(|e| TrainError::io(path, e))?;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| TrainError::io(path, e))
}

/// `1h02m`, `3m05s`, `12s`.
pub(super) fn eta(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec:02}s"),
        (h, min, _) => format!("{h}h{min:02}m"),
    }
}
