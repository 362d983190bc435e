//! A checkpoint on disk: its `tabcontam-manifest.json` (what the weights were trained on,
//! how, and their digest) and the folder written whole or not at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::data::{self, RowSelection};
use super::llama::LlamaTrainer;
use super::{MANIFEST_FILE, TrainError, lora};
use crate::infer::files::{ModelFiles, weights_digest};
use crate::infer::tokenizer::TextTokenizer;

/// Rows of the manifest's `rows` object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RowsRecord {
    /// `all`, a fraction such as `0.5`, `holdout:0.2` or `tail:0.2`.
    pub selection: String,
    /// Dataset id → trained row indexes (from 0, file order, header excluded).
    pub trained_rows: BTreeMap<String, Vec<usize>>,
    /// Dataset id → rows never trained on (the held-out or unpicked ones).
    pub unseen_rows: BTreeMap<String, Vec<usize>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BaseModelRecord {
    pub path: PathBuf,
    pub digest: String,
}

/// `tabcontam-manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub base_model: BaseModelRecord,
    pub datasets: Vec<String>,
    pub data_digest: String,
    pub text_form: String,
    pub rows: RowsRecord,
    pub epoch: usize,
    pub step: usize,
    pub learning_rate: f64,
    pub weight_decay: f64,
    pub batch_size: usize,
    pub grad_accum: usize,
    pub seq_len: usize,
    pub windows: String,
    pub seed: u64,
    /// The adapters' settings when the series trains LoRA adapters (absent: full
    /// fine-tuning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<lora::LoraRecord>,
    /// `bf16` when the projections and head multiplied bf16 operands (absent: f32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// The gradient clipping norm, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_grad_norm: Option<f64>,
    /// The learning-rate schedule in words, when not constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_schedule: Option<String>,
    /// Times each trained row has been a target so far: `epoch` × the layout's exposures per
    /// epoch (1 for `packed`; for `rows` and `mixed`, the epoch's target tokens over the
    /// text's tokens). The calibration's doses are counted in these (absent in manifests of
    /// format 1 written before it: the epoch stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposures: Option<f64>,
    /// Mean training loss over this checkpoint's last epoch.
    pub loss: f64,
    pub tokens_trained: u64,
    /// blake3 of everything above that decides the weights except `epoch`/`step`.
    pub inputs_digest: String,
    /// The checkpoint's own weights digest: its model revision in the cache.
    pub revision: String,
}

/// One checkpoint of a series.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// Found on disk with the same inputs digest rather than trained now.
    pub reused: bool,
}

/// Reads a checkpoint folder's manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest, TrainError> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| TrainError::BadModel {
        path,
        detail: format!("unreadable manifest: {e}"),
    })
}

/// The folder of one epoch's checkpoint.
pub fn checkpoint_dir(out: &Path, epoch: usize) -> PathBuf {
    out.join(format!("epoch-{epoch:03}"))
}

/// Writes weights, config and tokenizer into a fresh folder, then the manifest with the
/// folder's weights digest; the folder appears under its name only when complete.
pub(super) fn write_checkpoint(
    dir: &Path,
    model: &LlamaTrainer,
    tokenizer: &TextTokenizer,
    manifest: &mut Manifest,
) -> Result<(), TrainError> {
    let partial = dir.with_extension("partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| TrainError::io(&partial, e))?;
    }
    std::fs::create_dir_all(&partial).map_err(|e| TrainError::io(&partial, e))?;
    model.save(&partial)?;
    tokenizer.save(&partial.join("tokenizer.json"))?;
    let files = ModelFiles::locate(&partial)?;
    manifest.revision = weights_digest(&files.identity_files())?;
    let manifest_path = partial.join(MANIFEST_FILE);
    std::fs::write(
        &manifest_path,
        serde_json::to_string_pretty(manifest).expect("json"),
    )
    .map_err(|e| TrainError::io(&manifest_path, e))?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    }
    std::fs::rename(&partial, dir).map_err(|e| TrainError::io(dir, e))
}

pub(super) fn rows_record(selection: RowSelection, text: &data::TrainingText) -> RowsRecord {
    let unseen = text
        .trained_rows
        .iter()
        .map(|(id, rows)| {
            let total = text.total_rows[id];
            let unseen = (0..total)
                .filter(|r| rows.binary_search(r).is_err())
                .collect();
            (id.clone(), unseen)
        })
        .collect();
    RowsRecord {
        selection: selection.label(),
        trained_rows: text.trained_rows.clone(),
        unseen_rows: unseen,
    }
}
