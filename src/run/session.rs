//! Preparing a run: load the spec's datasets and prompt pack, resolve model identities and
//! build the plan. Shared by `plan`, `run` and the benchmarks.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use super::plan::{DatasetPrompts, Plan, assemble_plan, build_dataset_prompts, identity};
use super::spec::Spec;
use crate::dataset::catalog::Catalog;
use crate::probe::PromptPack;
use crate::store::DatasetRow;
use crate::train::heap::release_freed_memory;

/// One dataset's prompts and cache record, or why it could not be prepared.
type PreparedDataset = anyhow::Result<(DatasetPrompts, DatasetRow)>;

/// Revision prefix of local models whose weights are not on disk yet.
pub const NOT_DOWNLOADED: &str = "not-downloaded:";

/// Everything a command needs before it looks at the cache.
pub struct Prepared {
    pub spec: Spec,
    /// The datasets used, as recorded in the cache (the tables themselves are dropped once
    /// their prompts exist: they are the bulk of a large run's memory).
    pub datasets: Vec<DatasetRow>,
    pub plan: Plan,
}

/// Takes the loaded spec (keeping only `only_models` when given), loads its datasets and
/// builds the plan.
pub fn prepare(
    spec: &Spec,
    data_dir: Option<&Path>,
    only_models: &[String],
) -> anyhow::Result<Prepared> {
    let spec_path = spec.path.as_path();
    let mut spec = spec.clone();
    if !only_models.is_empty() {
        for id in only_models {
            if !spec.models.iter().any(|m| &m.id == id) {
                anyhow::bail!(
                    "{}: --model {id} is not in the spec; its models are: {}",
                    spec_path.display(),
                    spec.models
                        .iter()
                        .map(|m| m.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        spec.models.retain(|m| only_models.contains(&m.id));
    }
    let pack = match &spec.prompt_pack {
        Some(path) => PromptPack::load(path)
            .map_err(|e| anyhow::anyhow!("{}: prompt_pack: {e}", spec_path.display()))?,
        None => PromptPack::builtin(),
    };
    let catalog = Catalog::open(data_dir)?;
    let mut names: Vec<String> = spec
        .models
        .iter()
        .flat_map(|m| spec.model_datasets(m).iter().cloned())
        .collect();
    names.sort();
    names.dedup();

    // Two workers (the machines this runs on have few cores) each load one table at a
    // time, build its prompts and drop it, so at most two tables are in memory at once.
    let queue = Mutex::new(names.clone());
    let results: Mutex<Vec<(String, PreparedDataset)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 2);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let Some(name) = queue.lock().expect("queue lock").pop() else {
                        break;
                    };
                    let outcome = prepare_dataset(&spec, &catalog, &name, &pack);
                    results.lock().expect("results lock").push((name, outcome));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("results lock");
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut built = HashMap::new();
    let mut datasets = Vec::new();
    for (name, outcome) in results {
        let (prompts, row) =
            outcome.map_err(|e| anyhow::anyhow!("{}: datasets: {e:#}", spec_path.display()))?;
        built.insert(name, prompts);
        if !datasets.iter().any(|d: &DatasetRow| d.id == row.id) {
            datasets.push(row);
        }
    }
    // Two names of one dataset (an id and its alias) would plan every cell twice.
    for (i, model) in spec.models.iter().enumerate() {
        let names = spec.model_datasets(model);
        for (k, name) in names.iter().enumerate() {
            if let Some(other) = names[..k].iter().find(|o| built[*o].id == built[name].id) {
                let key = if model.datasets.is_some() {
                    format!("models[{i}] (`{}`).datasets", model.id)
                } else {
                    "datasets".to_string()
                };
                anyhow::bail!(
                    "{}: {key}: `{other}` and `{name}` are the same dataset (`{}`); list it once",
                    spec_path.display(),
                    built[name].id
                );
            }
        }
    }
    release_freed_memory();
    let spec_dir = spec_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let identities = spec
        .models
        .iter()
        .map(|m| {
            if m.backend != crate::request::BackendKind::Local {
                return Ok(identity(m, None));
            }
            // Local weights are identified by their digest; weights not downloaded yet get
            // a placeholder that matches nothing in the cache.
            let revision = super::local_exec::local_revision(m, &spec_dir)?
                .unwrap_or_else(|| format!("{}{}", NOT_DOWNLOADED, m.id));
            Ok(identity(m, Some(&revision)))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let plan = assemble_plan(&spec, identities, &built)?;
    Ok(Prepared {
        spec,
        datasets,
        plan,
    })
}

fn prepare_dataset(
    spec: &Spec,
    catalog: &Catalog,
    name: &str,
    pack: &PromptPack,
) -> PreparedDataset {
    let (dataset, checksum) = catalog.load_with_checksum(name)?;
    let row = DatasetRow {
        id: dataset.id.clone(),
        name: dataset.name.clone(),
        variant: Some(dataset.variant.clone()),
        checksum,
        updated_at: None,
    };
    let prompts = build_dataset_prompts(spec, name, &dataset, pack)?;
    Ok((prompts, row))
}
