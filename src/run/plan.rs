//! The planner: spec → cells → trials → content-addressed requests. Pure apart from
//! loading the datasets it is given.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use super::spec::{ModelSpec, Spec};
use crate::dataset::{Dataset, Serialization};
use crate::llm::{GenerationParams, ModelIdentity, Request, RequestKey};
use crate::probe::{self, ProbeContext, Prompt, PromptPack, TestId};

/// Serialization id stored for tests whose prompts contain no rows.
pub const NO_SERIALIZATION: &str = "-";

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
            api: model.api,
            prompt: source.prompt.text.clone(),
            params: params(model, &source.prompt),
            sample: source.sample,
        }
    }

    pub fn trial_count(&self) -> usize {
        self.cells.iter().map(|c| c.trials.len()).sum()
    }
}

fn params(model: &ModelSpec, prompt: &Prompt) -> GenerationParams {
    GenerationParams {
        max_tokens: prompt.max_tokens,
        temperature: model.temperature,
        top_p: model.top_p,
        seed: model.api_seed,
        stop: Vec::new(),
    }
}

/// The identity of a model in the cache. `local_revision` supplies the weights digest of
/// local models (computed by the caller, which may read files).
pub fn identity(model: &ModelSpec, local_revision: Option<&str>) -> ModelIdentity {
    let name = model.model.clone().unwrap_or_else(|| model.id.clone());
    let revision = match local_revision {
        Some(digest) => digest.to_string(),
        None => model.revision.clone().unwrap_or_else(|| name.clone()),
    };
    ModelIdentity { backend: model.backend, model: name, revision }
}

/// Builds the plan. `datasets` holds every dataset the spec names, loaded.
pub fn build_plan(
    spec: &Spec,
    identities: Vec<ModelIdentity>,
    datasets: &HashMap<String, Dataset>,
    pack: &PromptPack,
) -> anyhow::Result<Plan> {
    // Prompts depend on (dataset, test, serialization, seed) only: build each once and
    // share it across models.
    let mut built: HashMap<(String, TestId, String), (Vec<Arc<Prompt>>, Option<String>)> = HashMap::new();
    let mut cells = Vec::new();
    let mut requests: IndexMap<RequestKey, RequestSource> = IndexMap::new();
    for (model_index, model) in spec.models.iter().enumerate() {
        let serializations = spec.model_serializations(model);
        for dataset_id in spec.model_datasets(model) {
            let dataset = datasets
                .get(dataset_id)
                .ok_or_else(|| anyhow::anyhow!("dataset `{dataset_id}` was not loaded"))?;
            for test in spec.model_tests(model) {
                let templates: Vec<&Serialization> =
                    if test.serializes_rows() { serializations.iter().collect() } else { vec![&serializations[0]] };
                for serialization in templates {
                    let serialization_id =
                        if test.serializes_rows() { serialization.id.clone() } else { NO_SERIALIZATION.to_string() };
                    let cache_key = (dataset.id.clone(), test, serialization_id.clone());
                    if !built.contains_key(&cache_key) {
                        let ctx = ProbeContext { dataset, serialization, seed: spec.seed, pack };
                        let probe = probe::build(test, &ctx)?;
                        built.insert(
                            cache_key.clone(),
                            (probe.prompts.into_iter().map(Arc::new).collect(), probe.skipped),
                        );
                    }
                    let (prompts, skipped) = &built[&cache_key];
                    let mut trials = Vec::with_capacity(prompts.len() * model.samples as usize);
                    for prompt in prompts {
                        let params = params(model, prompt);
                        for sample in 0..model.samples {
                            let key = RequestKey::compute(&identities[model_index], model.api, &prompt.text, &params, sample);
                            requests.entry(key).or_insert_with(|| RequestSource {
                                model: model_index,
                                prompt: Arc::clone(prompt),
                                sample,
                            });
                            trials.push(PlannedTrial { prompt: Arc::clone(prompt), sample, key });
                        }
                    }
                    cells.push(PlannedCell {
                        model: model_index,
                        dataset: dataset.id.clone(),
                        test,
                        serialization: serialization_id,
                        trials,
                        skipped: skipped.clone(),
                    });
                }
            }
        }
    }
    Ok(Plan { identities, cells, requests })
}

/// Rough token estimate for budgeting (4 characters per token) — used only for `plan`
/// estimates and token-per-minute limits, never for decisions.
pub fn estimate_prompt_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}
