//! Where each result comes from, for the results site's reproducibility blocks: every
//! model's identity (backend, model, revision), every dataset's digest and every run's
//! spec (its text as stored, redacted, and its blake3 hash) with the tool version that ran
//! it. Read through the store API; plain structs like the rest of [`super::Analysis`].

use serde::Serialize;

use super::Result;
use crate::store::Store;

/// The identities, digests and specs behind an analysis, each list by id.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Provenance {
    pub models: Vec<ModelOrigin>,
    pub datasets: Vec<DatasetOrigin>,
    pub runs: Vec<RunOrigin>,
}

/// A model of the cache (a spec's model, or an imported one) as its answers are keyed.
#[derive(Debug, Clone, Serialize)]
pub struct ModelOrigin {
    /// The spec's (or the import's) model id.
    pub id: String,
    pub backend: &'static str,
    /// The name the backend is asked for (for local models `local-weights`).
    pub model: String,
    /// The revision that keys its answers (local models: the weights' digest).
    pub revision: String,
}

/// A dataset as the runs used it.
#[derive(Debug, Clone, Serialize)]
pub struct DatasetOrigin {
    pub id: String,
    pub name: String,
    pub variant: Option<String>,
    /// The data file's checksum as the run recorded it.
    pub checksum: String,
}

/// A run of an experiment spec.
#[derive(Debug, Clone, Serialize)]
pub struct RunOrigin {
    pub id: i64,
    pub spec_name: String,
    /// The spec's text as the run stored it (header values and URL credentials redacted).
    pub spec_toml: String,
    /// blake3 of `spec_toml`, hex.
    pub spec_blake3: String,
    /// The tabcontam version that ran it.
    pub version: String,
    pub started_at: String,
    /// `finished`, `interrupted`, `failed` or `running`.
    pub status: &'static str,
}

impl Provenance {
    pub fn model(&self, id: &str) -> Option<&ModelOrigin> {
        self.models.iter().find(|m| m.id == id)
    }

    pub fn dataset(&self, id: &str) -> Option<&DatasetOrigin> {
        self.datasets.iter().find(|d| d.id == id)
    }

    pub fn run(&self, id: i64) -> Option<&RunOrigin> {
        self.runs.iter().find(|r| r.id == id)
    }
}

/// Every model, dataset and run of `store`.
pub fn provenance(store: &Store) -> Result<Provenance> {
    let models = store
        .models()?
        .into_iter()
        .map(|m| ModelOrigin {
            id: m.id,
            backend: m.identity.backend.id(),
            model: m.identity.model,
            revision: m.identity.revision,
        })
        .collect();
    let datasets = store
        .datasets()?
        .into_iter()
        .map(|d| DatasetOrigin {
            id: d.id,
            name: d.name,
            variant: d.variant,
            checksum: d.checksum,
        })
        .collect();
    let mut runs = Vec::new();
    for run in store.runs()? {
        let spec_toml = store.run_spec(run.id)?.unwrap_or_default();
        runs.push(RunOrigin {
            id: run.id.0,
            spec_name: run.spec_name,
            spec_blake3: blake3::hash(spec_toml.as_bytes()).to_hex().to_string(),
            spec_toml,
            version: run.version,
            started_at: run.started_at,
            status: run.status.id(),
        });
    }
    Ok(Provenance {
        models,
        datasets,
        runs,
    })
}
