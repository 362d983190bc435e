//! Preparing a run: load the spec's datasets and prompt pack, resolve model identities and
//! build the plan. Shared by `plan`, `run` and the benchmarks.

use std::collections::HashMap;
use std::path::Path;

use super::plan::{Plan, build_plan, identity};
use super::spec::Spec;
use crate::dataset::Dataset;
use crate::dataset::catalog::Catalog;
use crate::probe::PromptPack;

/// Everything a command needs before it looks at the cache.
pub struct Prepared {
    pub spec: Spec,
    pub datasets: HashMap<String, Dataset>,
    pub plan: Plan,
}

/// Loads the spec (keeping only `only_models` when given), its datasets and builds the plan.
pub fn prepare(spec_path: &Path, data_dir: Option<&Path>, only_models: &[String]) -> anyhow::Result<Prepared> {
    let mut spec = Spec::load(spec_path)?;
    if !only_models.is_empty() {
        for id in only_models {
            if !spec.models.iter().any(|m| &m.id == id) {
                anyhow::bail!(
                    "{}: --model {id} is not in the spec; its models are: {}",
                    spec_path.display(),
                    spec.models.iter().map(|m| m.id.as_str()).collect::<Vec<_>>().join(", ")
                );
            }
        }
        spec.models.retain(|m| only_models.contains(&m.id));
    }
    let catalog = Catalog::open(data_dir)?;
    let mut datasets = HashMap::new();
    for model in &spec.models {
        for name in spec.model_datasets(model) {
            if datasets.contains_key(name) {
                continue;
            }
            let dataset = catalog
                .load(name)
                .map_err(|e| anyhow::anyhow!("{}: datasets: {e:#}", spec_path.display()))?;
            datasets.insert(name.clone(), dataset);
        }
    }
    let pack = match &spec.prompt_pack {
        Some(path) => PromptPack::load(path)?,
        None => PromptPack::builtin(),
    };
    let identities = spec.models.iter().map(|m| local_identity(m)).collect::<anyhow::Result<Vec<_>>>()?;
    let plan = build_plan(&spec, identities, &datasets, &pack)?;
    Ok(Prepared { spec, datasets, plan })
}

/// The cache identity of a model; local weights are identified by their digest.
fn local_identity(model: &super::spec::ModelSpec) -> anyhow::Result<crate::llm::ModelIdentity> {
    Ok(identity(model, None))
}
