//! The planner: spec → cells → trials → content-addressed requests. Pure apart from
//! loading the datasets it is given.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use super::spec::{ModelSpec, Spec, sample_seed};
use crate::dataset::{Dataset, Serialization};
use crate::probe::{self, ProbeContext, Prompt, PromptPack, TestId};
use crate::request::{BackendKind, GenerationParams, ModelIdentity, Request, RequestKey};

pub use crate::probe::NO_SERIALIZATION;

/// One trial: a prompt sent to one model (one sample of it).
#[derive(Debug, Clone)]
pub struct PlannedTrial {
    pub prompt: Arc<Prompt>,
    pub sample: u32,
    pub key: RequestKey,
}

/// One (model, dataset, test, serialization) cell and its trials.
#[derive(Debug, Clone)]
pub struct PlannedCell {
    pub model: usize,
    pub dataset: String,
    pub test: TestId,
    /// [`NO_SERIALIZATION`] for tests without rows.
    pub serialization: String,
    pub trials: Vec<PlannedTrial>,
    /// Why the cell has no trials.
    pub skipped: Option<String>,
    /// How likely each trial is to pass by guessing (the cell's chance level, SPEC §8).
    pub guess: Arc<probe::chance::GuessRates>,
}

/// Where to rebuild a request from: its model and one trial that needs it.
#[derive(Debug, Clone)]
pub struct RequestSource {
    pub model: usize,
    pub prompt: Arc<Prompt>,
    pub sample: u32,
}

/// Everything a run would do, before looking at the cache.
pub struct Plan {
    pub identities: Vec<ModelIdentity>,
    pub cells: Vec<PlannedCell>,
    /// Distinct requests in plan order (identical prompts of different tests or templates
    /// collapse into one).
    pub requests: IndexMap<RequestKey, RequestSource>,
}

impl Plan {
    /// Materializes a request (only done for requests that must be sent).
    pub fn request(&self, spec: &Spec, source: &RequestSource) -> Request {
        let model = &spec.models[source.model];
        Request {
            model: self.identities[source.model].clone(),
            api: model.request_api(),
            prompt: source.prompt.text_for(model.is_chat()).to_string(),
            params: params(model, &source.prompt, source.sample),
            sample: source.sample,
        }
    }

    /// Puts the requests of model `model_index` under `identity` (`--pin-served`: a
    /// revision naming the version the server serves now): every key of its trials is
    /// computed again, and the distinct requests are collected again in plan order.
    pub fn repin(&mut self, spec: &Spec, model_index: usize, identity: ModelIdentity) {
        let model = &spec.models[model_index];
        for cell in self.cells.iter_mut().filter(|c| c.model == model_index) {
            for trial in &mut cell.trials {
                trial.key = RequestKey::compute(
                    &identity,
                    model.request_api(),
                    trial.prompt.text_for(model.is_chat()),
                    &params(model, &trial.prompt, trial.sample),
                    trial.sample,
                );
            }
        }
        self.identities[model_index] = identity;
        let mut requests = IndexMap::with_capacity(self.requests.len());
        for cell in &self.cells {
            for trial in &cell.trials {
                requests.entry(trial.key).or_insert_with(|| RequestSource {
                    model: cell.model,
                    prompt: Arc::clone(&trial.prompt),
                    sample: trial.sample,
                });
            }
        }
        self.requests = requests;
    }

    pub fn trial_count(&self) -> usize {
        self.cells.iter().map(|c| c.trials.len()).sum()
    }
}

/// The generation parameters of one sample of a prompt: each sample sends its own seed
/// ([`sample_seed`]), so seeded servers do not return one answer N times. Local models
/// stop where the test's rule has read all it judges ([`Expected::stop_rule`]); servers
/// cannot stop on a rule, and are sent what they always were (see ARCHITECTURE.md,
/// `src/request/`).
///
/// [`Expected::stop_rule`]: crate::probe::Expected::stop_rule
fn params(model: &ModelSpec, prompt: &Prompt, sample: u32) -> GenerationParams {
    GenerationParams {
        max_tokens: prompt.max_tokens,
        temperature: model.temperature,
        top_p: model.top_p,
        seed: sample_seed(model.api_seed, sample),
        stop: if model.is_chat() {
            Vec::new()
        } else {
            prompt
                .test
                .raw_stop()
                .iter()
                .map(|s| s.to_string())
                .collect()
        },
        stop_rule: if model.backend == BackendKind::Local {
            prompt.expected.stop_rule()
        } else {
            None
        },
    }
}

/// The identity of a model in the cache. `local_revision` supplies the weights digest of
/// local models (computed by the caller, which may read files): a local model is its digest
/// alone, whatever path or name the spec gives it, plus the quantization it is run with
/// (`…+q8_0`), which changes its answers.
pub fn identity(model: &ModelSpec, local_revision: Option<&str>) -> ModelIdentity {
    if let Some(digest) = local_revision {
        return match model.quantize {
            Some(quantize) => ModelIdentity::local(&format!("{digest}+{}", quantize.name())),
            None => ModelIdentity::local(digest),
        };
    }
    let name = model.model.clone().unwrap_or_else(|| model.id.clone());
    ModelIdentity {
        backend: model.backend,
        revision: model.revision.clone().unwrap_or_else(|| name.clone()),
        model: name,
    }
}

/// Prompts of one (test, serialization id) cell of a dataset, shared by every model.
#[derive(Debug, Clone)]
pub struct BuiltCell {
    pub prompts: Vec<Arc<Prompt>>,
    pub skipped: Option<String>,
    /// Per-trial guess rates, computed while the table is loaded.
    pub guess: Arc<probe::chance::GuessRates>,
}

/// Everything the plan needs from one dataset once its prompts exist (the table itself
/// can then be dropped).
#[derive(Debug, Clone)]
pub struct DatasetPrompts {
    /// Canonical dataset id (the spec may name it by an alias).
    pub id: String,
    pub cells: HashMap<(TestId, String), BuiltCell>,
}

/// Builds every prompt set of one dataset that any model of the spec needs. `name` is the
/// dataset as the spec names it.
pub fn build_dataset_prompts(
    spec: &Spec,
    name: &str,
    dataset: &Dataset,
    pack: &PromptPack,
) -> anyhow::Result<DatasetPrompts> {
    let mut cells = HashMap::new();
    for model in spec
        .models
        .iter()
        .filter(|m| spec.model_datasets(m).iter().any(|d| d == name))
    {
        let serializations = spec.model_serializations(model);
        for test in spec.model_tests(model) {
            let templates: &[Serialization] = if test.serializes_rows() {
                &serializations
            } else {
                &serializations[..1]
            };
            for serialization in templates {
                let serialization_id = if test.serializes_rows() {
                    serialization.id.clone()
                } else {
                    NO_SERIALIZATION.to_string()
                };
                if cells.contains_key(&(test, serialization_id.clone())) {
                    continue;
                }
                let ctx = ProbeContext {
                    dataset,
                    serialization,
                    seed: spec.seed,
                    pack,
                    variant: spec.variant,
                };
                let probe = probe::build(test, &ctx)?;
                let guess =
                    probe::chance::guess_rates(test, &dataset.table, serialization, &probe.prompts);
                cells.insert(
                    (test, serialization_id),
                    BuiltCell {
                        prompts: probe.prompts.into_iter().map(Arc::new).collect(),
                        skipped: probe.skipped,
                        guess: Arc::new(guess),
                    },
                );
            }
        }
    }
    Ok(DatasetPrompts {
        id: dataset.id.clone(),
        cells,
    })
}

/// Assembles cells, trials and distinct requests, model by model, from the prompts built
/// for each dataset (keyed by the spec's dataset names).
pub fn assemble_plan(
    spec: &Spec,
    identities: Vec<ModelIdentity>,
    built: &HashMap<String, DatasetPrompts>,
) -> anyhow::Result<Plan> {
    let mut cells = Vec::new();
    let mut requests: IndexMap<RequestKey, RequestSource> = IndexMap::new();
    for (model_index, model) in spec.models.iter().enumerate() {
        let serializations = spec.model_serializations(model);
        for name in spec.model_datasets(model) {
            let dataset = built
                .get(name)
                .ok_or_else(|| anyhow::anyhow!("dataset `{name}` was not loaded"))?;
            for test in spec.model_tests(model) {
                let templates: &[Serialization] = if test.serializes_rows() {
                    &serializations
                } else {
                    &serializations[..1]
                };
                for serialization in templates {
                    let serialization_id = if test.serializes_rows() {
                        serialization.id.clone()
                    } else {
                        NO_SERIALIZATION.to_string()
                    };
                    let cell = &dataset.cells[&(test, serialization_id.clone())];
                    let mut trials =
                        Vec::with_capacity(cell.prompts.len() * model.samples as usize);
                    for prompt in &cell.prompts {
                        for sample in 0..model.samples {
                            let params = params(model, prompt, sample);
                            let key = RequestKey::compute(
                                &identities[model_index],
                                model.request_api(),
                                prompt.text_for(model.is_chat()),
                                &params,
                                sample,
                            );
                            requests.entry(key).or_insert_with(|| RequestSource {
                                model: model_index,
                                prompt: Arc::clone(prompt),
                                sample,
                            });
                            trials.push(PlannedTrial {
                                prompt: Arc::clone(prompt),
                                sample,
                                key,
                            });
                        }
                    }
                    cells.push(PlannedCell {
                        model: model_index,
                        dataset: dataset.id.clone(),
                        test,
                        serialization: serialization_id,
                        trials,
                        skipped: cell.skipped.clone(),
                        guess: Arc::clone(&cell.guess),
                    });
                }
            }
        }
    }
    Ok(Plan {
        identities,
        cells,
        requests,
    })
}

/// Builds the plan from loaded datasets (keyed by the spec's dataset names).
pub fn build_plan(
    spec: &Spec,
    identities: Vec<ModelIdentity>,
    datasets: &HashMap<String, Dataset>,
    pack: &PromptPack,
) -> anyhow::Result<Plan> {
    let built = datasets
        .iter()
        .map(|(name, dataset)| {
            Ok((
                name.clone(),
                build_dataset_prompts(spec, name, dataset, pack)?,
            ))
        })
        .collect::<anyhow::Result<HashMap<_, _>>>()?;
    assemble_plan(spec, identities, &built)
}

/// Rough token estimate for budgeting (4 characters per token) — used only for `plan`
/// estimates and token-per-minute limits, never for decisions.
pub fn estimate_prompt_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}
