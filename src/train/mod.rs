//! Controlled contamination (issue 10): continue training a local model on the text of
//! known datasets and write a series of checkpoints, each a normal local model folder
//! (`model.safetensors`, `config.json`, `tokenizer.json`) with a `tabcontam-manifest.json`
//! recording exactly what it saw.
//!
//! Full fine-tuning in f32 on CPU (every weight a candle `Var`) or LoRA (`lora.rs`: the
//! base frozen, adapters trained), the forward pass in `llama.rs` (Llama 2/3, SmolLM2 and,
//! with the additions read by `gemma3_config.rs`, Gemma 3), next-token cross-entropy, AdamW
//! with optional gradient clipping, gradient accumulation, seeded data order. Checkpoints
//! are cached by their inputs (base weights digest, data digest, exposure): an existing
//! checkpoint with the same inputs digest is not trained again.

pub mod attention;
pub mod data;
pub mod embedding;
pub mod gemma3_config;
pub mod heap;
pub mod linear;
pub mod llama;
pub mod llama_config;
pub mod lora;
pub mod manifest;
pub mod ops;
pub mod optimizer;
pub mod resume;
pub mod schedule;
pub mod state_file;
pub mod streams;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};

use crate::dataset::catalog::Catalog;
use crate::infer::LocalError;
use crate::infer::files::{ModelFiles, WeightFormat, weights_digest};
use crate::infer::tokenizer::TextTokenizer;
use crate::infer::weights::Weights;
pub use data::{RowSelection, TextForm, WindowLayout};
use data::{SeededRng, Window};
use llama::LlamaTrainer;
pub use manifest::{
    BaseModelRecord, Checkpoint, Manifest, RowsRecord, checkpoint_dir, read_manifest,
};
use manifest::{rows_record, write_checkpoint};
use optimizer::{AdamW, AdamWSettings};
use resume::Position;

/// The manifest's file name inside each checkpoint folder.
pub const MANIFEST_FILE: &str = "tabcontam-manifest.json";
/// The loss of every optimizer step, in the series folder.
pub const LOSS_FILE: &str = "loss.csv";
/// A checkpoint's weights, in its folder.
pub const CHECKPOINT_WEIGHTS: &str = "model.safetensors";
/// Version of the manifest layout and of what the inputs digest covers.
pub const MANIFEST_FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] LocalError),
    #[error(
        "{path}: the trainer supports llama-family models (Llama 2/3, SmolLM2) and Gemma 3 text models, not `{found}`"
    )]
    UnsupportedArchitecture { path: PathBuf, found: String },
    #[error("{path}: {detail}")]
    BadModel { path: PathBuf, detail: String },
    #[error("{0}")]
    BadExposure(String),
    #[error("{0}")]
    Dataset(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Candle {
        context: String,
        source: candle_core::Error,
    },
    #[error(
        "{dir} holds a checkpoint trained with other inputs ({found}, wanted {wanted}); pass another --out folder or delete it"
    )]
    ForeignCheckpoint {
        dir: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("the training text of {datasets} has fewer than 2 tokens: nothing to train on")]
    NoTokens { datasets: String },
}

impl TrainError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

fn candle_err(context: impl Into<String>) -> impl FnOnce(candle_core::Error) -> TrainError {
    let context = context.into();
    move |source| TrainError::Candle { context, source }
}

/// Everything that decides a checkpoint series.
#[derive(Debug, Clone)]
pub struct ContaminationSettings {
    /// The base model: a safetensors folder or a GGUF file.
    pub model: PathBuf,
    /// Dataset ids or aliases (shipped or registered).
    pub datasets: Vec<String>,
    /// Where dataset files are looked up first (as `--data-dir`).
    pub data_dir: Option<PathBuf>,
    pub text: TextForm,
    pub rows: RowSelection,
    pub epochs: usize,
    /// A checkpoint every this many epochs (the last epoch always gets one).
    pub checkpoint_every: usize,
    /// Checkpoints after exactly these epochs instead (a calibration study's doses); empty:
    /// use `checkpoint_every`.
    pub checkpoint_epochs: Vec<usize>,
    pub learning_rate: f64,
    pub weight_decay: f64,
    /// Token windows per forward pass.
    pub batch_size: usize,
    /// Forward passes whose gradients are summed before each optimizer step.
    pub grad_accum: usize,
    /// Predicted tokens per window.
    pub seq_len: usize,
    pub windows: WindowLayout,
    pub seed: u64,
    /// The series folder: `epoch-001/`, `epoch-002/`, … and `loss.csv`.
    pub out: PathBuf,
    /// How often the resume state is saved: a killed run loses
    /// at most this much training.
    pub resume_every: Duration,
    /// Train LoRA adapters with the base frozen instead of every weight.
    pub lora: Option<lora::LoraSettings>,
    /// Clip the gradients' global L2 norm to this before each update (off: no clipping).
    pub max_grad_norm: Option<f64>,
    /// The arithmetic of the projections and the output head.
    pub precision: linear::Precision,
    /// How the learning rate moves over the series' steps.
    pub lr_schedule: schedule::LrSchedule,
}

impl ContaminationSettings {
    /// Defaults for everything but the model, datasets and output folder.
    pub fn new(model: PathBuf, datasets: Vec<String>, out: PathBuf) -> Self {
        ContaminationSettings {
            model,
            datasets,
            data_dir: None,
            text: TextForm::Template("the-is".into()),
            rows: RowSelection::All,
            epochs: 1,
            checkpoint_every: 1,
            checkpoint_epochs: Vec::new(),
            learning_rate: 1e-4,
            weight_decay: 0.0,
            batch_size: 4,
            grad_accum: 1,
            seq_len: 256,
            windows: WindowLayout::Packed,
            seed: 0,
            out,
            resume_every: Duration::from_secs(300),
            lora: None,
            max_grad_norm: None,
            precision: linear::Precision::F32,
            lr_schedule: schedule::LrSchedule::Constant,
        }
    }

    fn check(&self) -> Result<(), TrainError> {
        let bad = |m: &str| Err(TrainError::BadExposure(m.to_string()));
        if self.datasets.is_empty() {
            return bad("no dataset to train on: pass --dataset NAME (several allowed)");
        }
        if self.epochs == 0 {
            return bad("--epochs must be at least 1");
        }
        if self.checkpoint_every == 0 {
            return bad("--checkpoint-every must be at least 1");
        }
        if self
            .checkpoint_epochs
            .iter()
            .any(|&e| e == 0 || e > self.epochs)
        {
            return bad("checkpoint epochs must lie between 1 and --epochs");
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad("--lr must be a positive number such as 1e-4");
        }
        if self
            .max_grad_norm
            .is_some_and(|m| !(m.is_finite() && m > 0.0))
        {
            return bad("--max-grad-norm must be a positive number such as 1.0");
        }
        if self.precision == linear::Precision::Bf16 && !tabcontam_kernels::bf16::native() {
            return bad(&format!(
                "--precision bf16 needs AVX-512 BF16 (vdpbf16ps), and this CPU runs the `{}` \
                 kernels without it: use --precision f32 (the default)",
                tabcontam_kernels::cpu::isa().name()
            ));
        }
        if self.batch_size == 0 || self.grad_accum == 0 || self.seq_len < 2 {
            return bad("--batch-size and --grad-accum must be at least 1, --seq-len at least 2");
        }
        Ok(())
    }
}

/// Builds (or finds) the checkpoint series of `settings`; `progress` gets one line per
/// event (loading, each optimizer step, each checkpoint written).
pub fn build_checkpoints(
    settings: &ContaminationSettings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Checkpoint>, TrainError> {
    settings.check()?;
    let catalog = Catalog::open(settings.data_dir.as_deref())
        .map_err(|e| TrainError::Dataset(format!("{e:#}")))?;
    let text = data::training_text(
        &catalog,
        &settings.datasets,
        &settings.text,
        settings.rows,
        settings.seed,
    )?;
    let files = ModelFiles::locate(&settings.model)?;
    let base_digest = weights_digest(&files.identity_files())?;
    let inputs_digest = inputs_digest(settings, &base_digest, &text.digest);
    let wanted: Vec<usize> = if settings.checkpoint_epochs.is_empty() {
        (1..=settings.epochs)
            .filter(|e| e % settings.checkpoint_every == 0 || *e == settings.epochs)
            .collect()
    } else {
        settings.checkpoint_epochs.clone()
    };
    let mut existing = BTreeMap::new();
    for &epoch in &wanted {
        let dir = checkpoint_dir(&settings.out, epoch);
        if !dir.join(MANIFEST_FILE).is_file() {
            continue;
        }
        let manifest = read_manifest(&dir)?;
        if manifest.inputs_digest != inputs_digest {
            return Err(TrainError::ForeignCheckpoint {
                dir,
                found: manifest.inputs_digest,
                wanted: inputs_digest,
            });
        }
        existing.insert(epoch, manifest);
    }
    if existing.len() == wanted.len() {
        progress(&format!(
            "{} checkpoint(s) in {} already hold these inputs ({}); nothing to train",
            wanted.len(),
            settings.out.display(),
            short(&inputs_digest)
        ));
        return Ok(wanted
            .iter()
            .map(|e| Checkpoint {
                dir: checkpoint_dir(&settings.out, *e),
                manifest: existing[e].clone(),
                reused: true,
            })
            .collect());
    }

    // Every step frees and allocates its large buffers again (heap.rs).
    heap::keep_freed_memory();
    progress(&format!("loading {}", files.weights_path().display()));
    let model = LlamaTrainer::load(&files)?;
    let model = match &settings.lora {
        Some(lora) => model.with_lora(lora.clone(), settings.seed)?,
        None => model,
    }
    .with_precision(settings.precision);
    let tokenizer = load_tokenizer(&files)?;
    // The windows of one epoch: the same every epoch, except for `mixed`, whose second half
    // follows a fresh seeded row order each epoch.
    let header_lines = usize::from(matches!(settings.text, TextForm::Raw));
    let epoch_windows = |epoch: usize| -> Result<Vec<Window>, TrainError> {
        let encode = |t: &str| tokenizer.encode(t).map_err(TrainError::from);
        let mut windows = Vec::new();
        // Packed: one token stream over every document, cut into consecutive windows.
        let mut stream = Vec::new();
        for (dataset, document) in &text.documents {
            match settings.windows {
                WindowLayout::Packed => stream.extend(encode(document)?),
                WindowLayout::Rows => {
                    windows.extend(data::row_windows(document, settings.seq_len, &encode)?)
                }
                WindowLayout::Mixed => {
                    windows.extend(data::row_windows(document, settings.seq_len, &encode)?);
                    let mut rng =
                        SeededRng::new(&format!("train-rows/{}/{dataset}/{epoch}", settings.seed));
                    let reordered = data::reorder_rows(document, header_lines, &mut rng);
                    windows.extend(data::row_windows(&reordered, settings.seq_len, &encode)?);
                }
            }
        }
        if settings.windows == WindowLayout::Packed {
            windows = data::windows(&stream, settings.seq_len);
        }
        Ok(windows)
    };
    let mut windows = epoch_windows(1)?;
    let tokens: usize = windows.iter().map(|w| w.ids.len() - 1).sum();
    if windows.is_empty() {
        return Err(TrainError::NoTokens {
            datasets: settings.datasets.join(", "),
        });
    }
    let exposures_per_epoch = match settings.windows {
        WindowLayout::Packed => 1.0,
        WindowLayout::Rows | WindowLayout::Mixed => {
            let mut text_tokens = 0usize;
            for (_, document) in &text.documents {
                text_tokens += tokenizer.encode(document)?.len();
            }
            // One decimal: what a reader compares across layouts.
            ((tokens as f64 / text_tokens.max(1) as f64) * 10.0).round() / 10.0
        }
    };
    let per_step = settings.batch_size * settings.grad_accum;
    let steps_per_epoch = windows.len().div_ceil(per_step);
    progress(&format!(
        "{}; {} target tokens of {} ({} rows, text {}) in {} {} windows of ≤{} tokens per epoch; {} epochs × {} steps (batch {} × accumulation {})",
        match model.lora() {
            None => format!("{} parameters", model.parameter_count()),
            Some(lora) => format!(
                "LoRA rank {} on {} ({} trainable of {} parameters, base frozen)",
                lora.settings.rank,
                lora.settings
                    .targets
                    .iter()
                    .map(|t| t.id())
                    .collect::<Vec<_>>()
                    .join(","),
                model.trainable_count(),
                model.parameter_count()
            ),
        },
        tokens,
        settings.datasets.join(", "),
        text.trained_rows.values().map(Vec::len).sum::<usize>(),
        settings.text.label(),
        windows.len(),
        settings.windows.label(),
        settings.seq_len,
        settings.epochs,
        steps_per_epoch,
        settings.batch_size,
        settings.grad_accum
    ));

    std::fs::create_dir_all(&settings.out).map_err(|e| TrainError::io(&settings.out, e))?;
    let vars = model.vars();
    let named: Vec<(String, candle_core::Var)> = model
        .trainable_vars()
        .into_iter()
        .map(|(name, var)| (name, var.clone()))
        .collect();
    let mut adamw = AdamWSettings::new(settings.learning_rate, settings.weight_decay);
    adamw.max_grad_norm = settings.max_grad_norm;
    let mut optimizer = AdamW::new(named, adamw);
    let resumed = resume::position(&settings.out, &inputs_digest)?;
    if let Some(position) = &resumed {
        resume::restore(&settings.out, position, &model, &mut optimizer)?;
        progress(&format!(
            "resuming from epoch {} step {} ({} of its {steps_per_epoch} steps done, {:.0} s trained)",
            position.epoch, position.step, position.steps_in_epoch, position.seconds
        ));
    }
    let loss_path = settings.out.join(LOSS_FILE);
    let mut loss_file = resume::loss_log(&loss_path, resumed.as_ref().map_or(0, |p| p.step))?;

    let started = Instant::now();
    let earlier_seconds = resumed.as_ref().map_or(0.0, |p| p.seconds);
    let mut last_save = Instant::now();
    let mut step = resumed.as_ref().map_or(0, |p| p.step);
    let steps_at_start = step;
    let total_steps = steps_per_epoch * settings.epochs;
    let mut tokens_trained = resumed.as_ref().map_or(0, |p| p.tokens_trained);
    let mut checkpoints = Vec::new();
    let first_epoch = resumed.as_ref().map_or(1, |p| p.epoch);
    // The last epoch's summed loss and targets, for the final state.
    let mut last_epoch_loss = (0.0, 0.0);
    for epoch in 1..=settings.epochs {
        if epoch > 1 && settings.windows == WindowLayout::Mixed {
            windows = epoch_windows(epoch)?;
        }
        if epoch < first_epoch {
            // Trained before the resume: only its checkpoint (already on disk) is needed.
            if wanted.contains(&epoch) {
                let dir = checkpoint_dir(&settings.out, epoch);
                let manifest = existing.get(&epoch).cloned().ok_or_else(|| TrainError::BadModel {
                    path: dir.clone(),
                    detail: format!(
                        "the resume state is past epoch {epoch} but its checkpoint is missing; delete {} to train from the start",
                        resume::resume_dir(&settings.out).display()
                    ),
                })?;
                checkpoints.push(Checkpoint {
                    dir,
                    manifest,
                    reused: true,
                });
            }
            continue;
        }
        let mut order: Vec<usize> = (0..windows.len()).collect();
        SeededRng::new(&format!("train-order/{}/{epoch}", settings.seed)).shuffle(&mut order);
        let (mut epoch_loss, mut epoch_targets, done_in_epoch) = match &resumed {
            Some(p) if p.epoch == epoch => (p.epoch_loss, p.epoch_targets, p.steps_in_epoch),
            _ => (0.0, 0.0, 0),
        };
        for (in_epoch, step_windows) in order.chunks(per_step).enumerate() {
            if in_epoch < done_in_epoch {
                continue;
            }
            let targets: usize = step_windows.iter().map(|&w| windows[w].ids.len() - 1).sum();
            let mut accumulated: Option<GradStore> = None;
            let mut step_loss = 0.0;
            for micro in step_windows.chunks(settings.batch_size) {
                let batch: Vec<&Window> = micro.iter().map(|&w| &windows[w]).collect();
                let (ids, weights) = batch_tensors(&batch, tokenizer_pad(&tokenizer))?;
                // Each micro-batch weighs by its share of the step's targets, so the summed
                // gradient is that of the step's mean loss.
                let (grads, summed) =
                    streams::gradients(&model, &vars, &ids, &weights, targets as f64)
                        .map_err(candle_err("forward and backward pass"))?;
                step_loss += summed;
                match &mut accumulated {
                    None => accumulated = Some(grads),
                    Some(sum) => streams::accumulate(sum, &grads, &vars)
                        .map_err(candle_err("accumulating"))?,
                }
            }
            let grads = accumulated.expect("a step has at least one micro-batch");
            optimizer.set_learning_rate(settings.lr_schedule.rate(
                settings.learning_rate,
                step,
                total_steps,
            ));
            optimizer
                .step(&grads)
                .map_err(candle_err("optimizer step"))?;
            step += 1;
            tokens_trained += targets as u64;
            let mean = step_loss / targets as f64;
            epoch_loss += step_loss;
            epoch_targets += targets as f64;
            let session = started.elapsed().as_secs_f64();
            let seconds = earlier_seconds + session;
            writeln!(loss_file, "{step},{epoch},{mean:.6},{targets},{seconds:.3}")
                .map_err(|e| TrainError::io(&loss_path, e))?;
            let per_step_seconds = session / (step - steps_at_start) as f64;
            progress(&format!(
                "epoch {epoch}/{} step {step}/{total_steps} loss {mean:.4} ({:.0} tokens/s, ETA {})",
                settings.epochs,
                tokens_trained as f64 / seconds.max(1e-9),
                resume::eta((total_steps - step) as f64 * per_step_seconds)
            ));
            // On the timer only: a state is weights and two moments (1.6 GB for SmolLM2), and
            // a small table's epoch lasts seconds, so saving at every epoch's end spent more
            // time writing than training.
            if last_save.elapsed() >= settings.resume_every && step < total_steps {
                let position = Position {
                    inputs_digest: inputs_digest.clone(),
                    epoch,
                    steps_in_epoch: in_epoch + 1,
                    step,
                    tokens_trained,
                    epoch_loss,
                    epoch_targets,
                    seconds,
                    weights_in: None,
                };
                heap::outside_the_kept_heap(|| {
                    resume::save(&settings.out, &position, &model, &optimizer)
                })?;
                last_save = Instant::now();
            }
        }
        last_epoch_loss = (epoch_loss, epoch_targets);
        if !wanted.contains(&epoch) {
            continue;
        }
        let dir = checkpoint_dir(&settings.out, epoch);
        if let Some(manifest) = existing.get(&epoch) {
            // Same inputs: the folder on disk is this checkpoint; rewriting it could change
            // its bytes (and so its revision) for nothing.
            checkpoints.push(Checkpoint {
                dir,
                manifest: manifest.clone(),
                reused: true,
            });
            continue;
        }
        let mut manifest = Manifest {
            format: MANIFEST_FORMAT,
            base_model: BaseModelRecord {
                path: settings.model.clone(),
                digest: base_digest.clone(),
            },
            datasets: text.trained_rows.keys().cloned().collect(),
            data_digest: text.digest.clone(),
            text_form: settings.text.label().to_string(),
            rows: rows_record(settings.rows, &text),
            epoch,
            step,
            learning_rate: settings.learning_rate,
            weight_decay: settings.weight_decay,
            batch_size: settings.batch_size,
            grad_accum: settings.grad_accum,
            seq_len: settings.seq_len,
            windows: settings.windows.label().to_string(),
            seed: settings.seed,
            lora: settings.lora.as_ref().map(lora::LoraSettings::record),
            max_grad_norm: settings.max_grad_norm,
            precision: (settings.precision != linear::Precision::F32)
                .then(|| settings.precision.name().to_string()),
            lr_schedule: settings.lr_schedule.describe(settings.epochs),
            exposures: Some(epoch as f64 * exposures_per_epoch),
            loss: epoch_loss / epoch_targets.max(1.0),
            tokens_trained,
            inputs_digest: inputs_digest.clone(),
            revision: String::new(),
        };
        // Keep the datasets in the order given (not sorted) in the manifest.
        manifest.datasets = text.documents.iter().map(|(id, _)| id.clone()).collect();
        heap::outside_the_kept_heap(|| write_checkpoint(&dir, &model, &tokenizer, &mut manifest))?;
        progress(&format!(
            "checkpoint {} (epoch {epoch}, step {step}, loss {:.4}, revision {})",
            dir.display(),
            manifest.loss,
            short(&manifest.revision)
        ));
        checkpoints.push(Checkpoint {
            dir,
            manifest,
            reused: false,
        });
    }
    let position = Position {
        inputs_digest: inputs_digest.clone(),
        epoch: settings.epochs,
        steps_in_epoch: steps_per_epoch,
        step,
        tokens_trained,
        epoch_loss: last_epoch_loss.0,
        epoch_targets: last_epoch_loss.1,
        seconds: earlier_seconds + started.elapsed().as_secs_f64(),
        weights_in: None,
    };
    let trained = resumed.as_ref().map(|p| p.step) != Some(step);
    let constant_rate = settings.lr_schedule == schedule::LrSchedule::Constant;
    let last = checkpoints.last();
    let kept = resume::keep_final(
        &settings.out,
        (constant_rate, trained),
        position,
        last,
        &model,
        &optimizer,
    )?;
    if let Some(line) = kept {
        progress(&line);
    }
    Ok(checkpoints)
}

/// The digest of everything that decides a checkpoint's weights at a given epoch.
pub fn inputs_digest(settings: &ContaminationSettings, base: &str, data: &str) -> String {
    let mut record = serde_json::json!({
        "format": MANIFEST_FORMAT,
        "base": base,
        "data": data,
        "datasets": settings.datasets,
        "text": settings.text.label(),
        "rows": settings.rows.label(),
        "seed": settings.seed,
        "lr": settings.learning_rate,
        "weight_decay": settings.weight_decay,
        "batch": settings.batch_size,
        "accum": settings.grad_accum,
        "seq": settings.seq_len,
        "windows": settings.windows.label(),
    });
    // Added only when set, so full fine-tuning keeps the digests its series were made with.
    if let Some(lora) = &settings.lora {
        record["lora"] = serde_json::json!({
            "rank": lora.rank,
            "alpha": lora.alpha,
            "targets": lora.targets.iter().map(|t| t.id()).collect::<Vec<_>>(),
        });
    }
    if let Some(max) = settings.max_grad_norm {
        record["max_grad_norm"] = serde_json::json!(max);
    }
    if settings.precision != linear::Precision::F32 {
        record["precision"] = serde_json::json!(settings.precision.name());
    }
    // A decaying rate makes every checkpoint depend on the series' length: its epochs are
    // inputs (a longer series of the same settings is another series, not a continuation).
    if settings.lr_schedule != schedule::LrSchedule::Constant {
        record["lr_schedule"] = serde_json::json!({
            "kind": settings.lr_schedule.label(),
            "floor": schedule::COSINE_FLOOR,
            "epochs": settings.epochs,
        });
    }
    format!(
        "blake3:{}",
        blake3::hash(record.to_string().as_bytes()).to_hex()
    )
}

fn short(digest: &str) -> &str {
    let end = digest.len().min("blake3:".len() + 12);
    &digest[..end]
}

/// The model's tokenizer: its tokenizer.json, or the one a GGUF file carries.
pub fn load_tokenizer(files: &ModelFiles) -> Result<TextTokenizer, TrainError> {
    if let Some(path) = &files.tokenizer {
        return Ok(TextTokenizer::from_file(path)?);
    }
    match &files.format {
        WeightFormat::Gguf(path) => {
            let (_, meta) = Weights::open_gguf(path, &Device::Cpu, candle_core::DType::F32)?;
            Ok(TextTokenizer::from_gguf(path, &meta)?)
        }
        WeightFormat::Safetensors { .. } => Err(LocalError::MissingTokenizer {
            path: files.dir.clone(),
        }
        .into()),
    }
}

/// Padding id: any valid id works (padded positions are neither attended to by real
/// tokens, thanks to the causal mask, nor counted in the loss).
fn tokenizer_pad(_tokenizer: &TextTokenizer) -> u32 {
    0
}

/// `(ids, weights)` of a micro-batch, padded to its longest window (weight 0 on padding).
fn batch_tensors(batch: &[&Window], pad: u32) -> Result<(Tensor, Tensor), TrainError> {
    let len = batch.iter().map(|w| w.ids.len()).max().unwrap_or(2);
    let mut ids = Vec::with_capacity(batch.len() * len);
    let mut weights = Vec::with_capacity(batch.len() * (len - 1));
    for window in batch {
        let real = window.ids.len();
        ids.extend_from_slice(&window.ids);
        ids.extend(std::iter::repeat_n(pad, len - real));
        weights.extend(std::iter::repeat_n(1f32, real - 1));
        weights.extend(std::iter::repeat_n(0f32, len - real));
    }
    let device = Device::Cpu;
    let ids = Tensor::from_vec(ids, (batch.len(), len), &device).map_err(candle_err("batch"))?;
    let weights =
        Tensor::from_vec(weights, (batch.len(), len - 1), &device).map_err(candle_err("batch"))?;
    Ok((ids, weights))
}
