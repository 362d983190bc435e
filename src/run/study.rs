//! The `[calibration]` table of a spec (SPEC §8, controlled contamination): a base model,
//! the datasets to train it on and the doses. Each (treatment, dose) becomes a checkpoint
//! model of the spec, so `plan`, `run`, `report` and `diff` see the whole study; the
//! checkpoints themselves are built by `tabcontam calibrate`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::model_spec::ModelSpec;
use crate::request::BackendKind;
use crate::train::{ContaminationSettings, RowSelection, TextForm, WindowLayout};

/// Where the card goes when neither `--card` nor the `[calibration]` table's `card` says.
pub const DEFAULT_CARD: &str = "docs/calibration.md";

/// The `[calibration]` table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CalibrationSpec {
    /// The `[[models]]` id of the local model every checkpoint is trained from.
    pub base: String,
    /// One checkpoint series per entry: a dataset, or a list of datasets trained together.
    pub treatments: Vec<Treatment>,
    /// Epochs after which a checkpoint is taken. The dose–response curves count each in
    /// exposures, the manifest's times each trained row was a target (= epochs for `packed`).
    pub doses: Vec<usize>,
    /// `raw` or a serialization template id (as `contaminate --text`).
    #[serde(default = "default_text")]
    pub text: String,
    /// `all`, a fraction such as `0.5`, `holdout:0.2` or `tail:0.2` (as `contaminate --rows`).
    #[serde(default = "default_rows")]
    pub rows: String,
    /// `packed`, `rows` or `mixed` (as `contaminate --windows`).
    #[serde(default = "default_windows")]
    pub windows: String,
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    #[serde(default = "default_grad_accum")]
    pub grad_accum: usize,
    #[serde(default = "default_seq_len")]
    pub seq_len: usize,
    /// Seeds the row selection and the data order (default: the spec's `seed`).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Folder of the checkpoint series, one subfolder per treatment (relative to the spec;
    /// default `checkpoints/<spec name>`).
    #[serde(default)]
    pub out: Option<PathBuf>,
    /// Where `tabcontam calibrate` writes the calibration card (relative to the spec;
    /// default `docs/calibration.md` under the current folder; `--card` overrides both).
    #[serde(default)]
    pub card: Option<PathBuf>,
    /// How the checkpoints are run: `"q8_0"` quantizes their f32 weights at load (as fast
    /// as a quantized base; see `docs/guide/calibration.md` for the agreement measured).
    #[serde(default)]
    pub quantize: Option<crate::infer::weights::Quantize>,
    /// Train LoRA adapters of this rank with the base frozen (as `contaminate --lora`).
    #[serde(default)]
    pub lora: Option<usize>,
    /// The projections adapted (as `contaminate --lora-targets`; default `attention`).
    #[serde(default)]
    pub lora_targets: Option<String>,
    /// The adapters' scale numerator (default: the rank).
    #[serde(default)]
    pub lora_alpha: Option<f64>,
    /// Clip the gradients' global norm to this (as `contaminate --max-grad-norm`).
    #[serde(default)]
    pub max_grad_norm: Option<f64>,
    /// The learning-rate schedule (as `contaminate --lr-schedule`; default `constant`).
    #[serde(default)]
    pub lr_schedule: Option<String>,
    /// The products' arithmetic (as `contaminate --precision`; default `f32`).
    #[serde(default)]
    pub precision: Option<String>,
}

fn default_text() -> String {
    "the-is".into()
}
fn default_rows() -> String {
    "all".into()
}
fn default_windows() -> String {
    "packed".into()
}
fn default_lr() -> f64 {
    1e-4
}
fn default_batch_size() -> usize {
    4
}
fn default_grad_accum() -> usize {
    1
}
fn default_seq_len() -> usize {
    256
}

/// `"iris"` or `["iris", "wine"]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Treatment {
    One(String),
    Together(Vec<String>),
}

impl Treatment {
    pub fn datasets(&self) -> Vec<String> {
        match self {
            Treatment::One(name) => vec![name.clone()],
            Treatment::Together(names) => names.clone(),
        }
    }

    /// A name usable in model ids and folder names: `iris`, `iris+wine`,
    /// `synthetic-101-60`.
    pub fn slug(&self) -> String {
        self.datasets()
            .iter()
            .map(|d| {
                d.chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("+")
    }
}

/// One checkpoint of the study: a treatment at a dose.
#[derive(Debug, Clone, PartialEq)]
pub struct StudyCheckpoint {
    pub treatment: Treatment,
    pub dose: usize,
    /// The model id the spec gets for it.
    pub model_id: String,
    /// Its folder (where `contaminate` writes `epoch-NNN/`), as resolved against the spec.
    pub dir: PathBuf,
}

impl CalibrationSpec {
    /// Checks the table against the spec's models and datasets; the message names the key.
    pub fn check(&self, models: &[ModelSpec], datasets: &[String]) -> Result<(), String> {
        let Some(base) = models.iter().find(|m| m.id == self.base) else {
            return Err(format!(
                "calibration.base: `{}` is not a [[models]] id; name the local model the checkpoints are trained from",
                self.base
            ));
        };
        if base.backend != BackendKind::Local {
            return Err(format!(
                "calibration.base: `{}` has backend `{}`; only a local model (backend = \"local\") can be fine-tuned",
                self.base,
                base.backend.id()
            ));
        }
        if self.treatments.is_empty() {
            return Err("calibration.treatments: empty; list the datasets to train on, e.g. [\"iris\", \"wine\"]".into());
        }
        for treatment in &self.treatments {
            let names = treatment.datasets();
            if names.is_empty() {
                return Err("calibration.treatments: an empty list; give at least one dataset per treatment".into());
            }
            for name in names {
                if !datasets.contains(&name) {
                    return Err(format!(
                        "calibration.treatments: `{name}` is not in `datasets`; add it there, or its sensitivity cannot be measured"
                    ));
                }
            }
        }
        if self.doses.is_empty() || self.doses.contains(&0) {
            return Err(
                "calibration.doses: list the epochs to take checkpoints at, each at least 1 (e.g. [1, 2, 4])".into(),
            );
        }
        if self.doses.windows(2).any(|w| w[0] >= w[1]) {
            return Err("calibration.doses: list the epochs in increasing order, each once".into());
        }
        self.settings(Path::new("base"), &self.treatments[0], Path::new("."), 0)
            .map(|_| ())
    }

    /// The series folder of one treatment.
    fn series_dir(&self, treatment: &Treatment, spec_dir: &Path, spec_name: &str) -> PathBuf {
        let root = match &self.out {
            Some(out) if out.is_absolute() => out.clone(),
            Some(out) => spec_dir.join(out),
            None => spec_dir.join("checkpoints").join(slug_of(spec_name)),
        };
        root.join(treatment.slug())
    }

    /// Every checkpoint of the study, treatment by treatment, dose by dose.
    pub fn checkpoints(&self, spec_dir: &Path, spec_name: &str) -> Vec<StudyCheckpoint> {
        let mut out = Vec::new();
        for treatment in &self.treatments {
            let dir = self.series_dir(treatment, spec_dir, spec_name);
            for &dose in &self.doses {
                out.push(StudyCheckpoint {
                    treatment: treatment.clone(),
                    dose,
                    model_id: format!("{}-{}-e{dose}", self.base, treatment.slug()),
                    dir: dir.clone(),
                });
            }
        }
        out
    }

    /// The spec models of the checkpoints: copies of the base model's entry pointing at the
    /// checkpoint folders, one family per treatment (the timeline shows each series).
    pub fn checkpoint_models(
        &self,
        base: &ModelSpec,
        spec_dir: &Path,
        spec_name: &str,
    ) -> Vec<ModelSpec> {
        self.checkpoints(spec_dir, spec_name)
            .into_iter()
            .map(|c| {
                let folder = crate::train::checkpoint_dir(&c.dir, c.dose);
                let mut model = base.clone();
                model.id = c.model_id;
                model.label = Some(format!(
                    "{} + {} ({} ep)",
                    base.label.as_deref().unwrap_or(&base.id),
                    c.treatment.datasets().join(" + "),
                    c.dose
                ));
                model.family = Some(format!("{}+{}", base.id, c.treatment.slug()));
                model.model = Some(folder.display().to_string());
                model.revision = None;
                model.quantize = self.quantize;
                model.base = Some(base.id.clone());
                model.trained_on = None;
                model.dose = None;
                model.step = None;
                model
            })
            .collect()
    }

    /// What `contaminate` gets for one treatment: train to the highest dose, keep a
    /// checkpoint at each dose.
    pub fn settings(
        &self,
        base_weights: &Path,
        treatment: &Treatment,
        series: &Path,
        spec_seed: u64,
    ) -> Result<ContaminationSettings, String> {
        let err = |key: &str, e: crate::train::TrainError| format!("calibration.{key}: {e}");
        let mut settings = ContaminationSettings::new(
            base_weights.to_path_buf(),
            treatment.datasets(),
            series.to_path_buf(),
        );
        settings.text = TextForm::parse(&self.text).map_err(|e| err("text", e))?;
        settings.rows = RowSelection::parse(&self.rows).map_err(|e| err("rows", e))?;
        settings.windows = WindowLayout::parse(&self.windows).map_err(|e| err("windows", e))?;
        settings.epochs = self.doses.last().copied().unwrap_or(1);
        settings.checkpoint_epochs = self.doses.clone();
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err("calibration.lr: must be a positive number such as 1e-4".into());
        }
        settings.learning_rate = self.lr;
        settings.weight_decay = self.weight_decay;
        settings.batch_size = self.batch_size;
        settings.grad_accum = self.grad_accum;
        settings.seq_len = self.seq_len;
        settings.seed = self.seed.unwrap_or(spec_seed);
        if let Some(max) = self.max_grad_norm {
            if !(max.is_finite() && max > 0.0) {
                return Err(
                    "calibration.max_grad_norm: must be a positive number such as 1.0".into(),
                );
            }
            settings.max_grad_norm = Some(max);
        }
        if let Some(schedule) = &self.lr_schedule {
            settings.lr_schedule = crate::train::schedule::LrSchedule::parse(schedule)
                .map_err(|e| format!("calibration.lr_schedule: {e}"))?;
        }
        if let Some(precision) = &self.precision {
            settings.precision = crate::train::linear::Precision::parse(precision)
                .map_err(|e| format!("calibration.precision: {e}"))?;
        }
        if let Some(rank) = self.lora {
            let lora = crate::train::lora::LoraSettings::from_options(
                rank,
                self.lora_targets.as_deref(),
                self.lora_alpha,
            )
            .map_err(|e| err("lora_targets", e))?;
            if rank == 0 {
                return Err(
                    "calibration.lora: 0; give the adapters' rank, at least 1 (8 to 64 is usual)"
                        .into(),
                );
            }
            settings.lora = Some(lora);
        } else if self.lora_targets.is_some() || self.lora_alpha.is_some() {
            return Err(
                "calibration.lora_targets/lora_alpha: set `lora = RANK` too, or remove them".into(),
            );
        }
        Ok(settings)
    }

    /// Where the card goes: `flag` (`--card`, as given), else the table's `card` (relative
    /// to the spec's folder), else [`DEFAULT_CARD`].
    pub fn card_path(&self, flag: Option<&Path>, spec_dir: &Path) -> PathBuf {
        match (flag, &self.card) {
            (Some(flag), _) => flag.to_path_buf(),
            (None, Some(card)) if card.is_absolute() => card.clone(),
            (None, Some(card)) => spec_dir.join(card),
            (None, None) => PathBuf::from(DEFAULT_CARD),
        }
    }

    /// The training settings in words, for the card.
    pub fn training_summary(&self, spec_seed: u64) -> String {
        let method = match self.lora {
            None => "full fine-tuning".to_string(),
            Some(rank) => format!(
                "LoRA rank {rank} on {} (alpha {}), base frozen",
                self.lora_targets.as_deref().unwrap_or("attention"),
                self.lora_alpha.unwrap_or(rank as f64)
            ),
        };
        let method = match self.max_grad_norm {
            Some(max) => format!("{method}, gradients clipped to norm {max}"),
            None => method,
        };
        let method = match self.lr_schedule.as_deref() {
            Some(schedule) if schedule != "constant" => {
                format!("{method}, learning rate {schedule} to a tenth")
            }
            _ => method,
        };
        let method = match self.precision.as_deref() {
            Some(precision) if precision != "f32" => format!("{method}, {precision} products"),
            _ => method,
        };
        format!(
            "{method}, text {}, rows {}, windows {}, lr {}, weight decay {}, batch {} × {} accumulated, {} tokens per window, seed {}",
            self.text,
            self.rows,
            self.windows,
            self.lr,
            self.weight_decay,
            self.batch_size,
            self.grad_accum,
            self.seq_len,
            self.seed.unwrap_or(spec_seed)
        )
    }

    /// The series folder of `treatment`, as [`CalibrationSpec::checkpoints`] resolves it.
    pub fn series(&self, treatment: &Treatment, spec_dir: &Path, spec_name: &str) -> PathBuf {
        self.series_dir(treatment, spec_dir, spec_name)
    }
}

fn slug_of(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> CalibrationSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn treatments_expand_into_one_model_per_dose() {
        let study = table(
            "base = \"m\"\ntreatments = [\"iris\", [\"wine\", \"synthetic:3:40\"]]\ndoses = [1, 3]\nout = \"/ck\"",
        );
        let ids: Vec<String> = study
            .checkpoints(Path::new("/spec"), "s")
            .into_iter()
            .map(|c| format!("{} {}", c.model_id, c.dir.display()))
            .collect();
        assert_eq!(
            ids,
            [
                "m-iris-e1 /ck/iris",
                "m-iris-e3 /ck/iris",
                "m-wine+synthetic-3-40-e1 /ck/wine+synthetic-3-40",
                "m-wine+synthetic-3-40-e3 /ck/wine+synthetic-3-40",
            ]
        );
        let settings = study
            .settings(Path::new("w"), &study.treatments[1], Path::new("/ck/x"), 9)
            .unwrap();
        assert_eq!(settings.epochs, 3);
        assert_eq!(settings.checkpoint_epochs, [1, 3]);
        assert_eq!(settings.seed, 9);
        assert_eq!(settings.datasets, ["wine", "synthetic:3:40"]);
    }

    #[test]
    fn bad_tables_name_the_key() {
        let base: ModelSpec = toml::from_str("id = \"m\"\nbackend = \"local\"").unwrap();
        let remote: ModelSpec =
            toml::from_str("id = \"r\"\nbackend = \"anthropic\"\nmodel = \"claude\"").unwrap();
        let datasets = ["iris".to_string()];
        let check = |text: &str| {
            table(text)
                .check(&[base.clone(), remote.clone()], &datasets)
                .unwrap_err()
        };
        assert!(
            check("base = \"x\"\ntreatments = [\"iris\"]\ndoses = [1]")
                .contains("calibration.base")
        );
        assert!(
            check("base = \"r\"\ntreatments = [\"iris\"]\ndoses = [1]")
                .contains("only a local model")
        );
        assert!(
            check("base = \"m\"\ntreatments = [\"wine\"]\ndoses = [1]")
                .contains("not in `datasets`")
        );
        assert!(
            check("base = \"m\"\ntreatments = [\"iris\"]\ndoses = [2, 1]").contains("increasing")
        );
        assert!(
            check("base = \"m\"\ntreatments = [\"iris\"]\ndoses = [1]\nrows = \"most\"")
                .contains("calibration.rows")
        );
        assert!(
            check("base = \"m\"\ntreatments = [\"iris\"]\ndoses = [1]\nlr_schedule = \"step\"")
                .contains("calibration.lr_schedule: unknown learning-rate schedule `step`")
        );
        let cosine = table(
            "base = \"m\"\ntreatments = [\"iris\"]\ndoses = [1, 4]\nlr_schedule = \"cosine\"",
        );
        let settings = cosine
            .settings(Path::new("w"), &cosine.treatments[0], Path::new("/ck"), 0)
            .unwrap();
        assert_eq!(
            settings.lr_schedule,
            crate::train::schedule::LrSchedule::Cosine
        );
        assert!(
            cosine
                .training_summary(0)
                .contains("learning rate cosine to a tenth")
        );
        table("base = \"m\"\ntreatments = [\"iris\"]\ndoses = [1]")
            .check(&[base], &datasets)
            .unwrap();
    }
}
