//! `tabcontam export mlflow`: the report of a cache as MLflow runs, one per series (source,
//! model), on a tracking server over its REST API, in one call ([`export`]).
//!
//! An export is a sync, not an append: each run carries its series' key
//! ([`SERIES_KEY_TAG`]); a second export finds it and logs only what changed (metrics
//! whose value moved, datasets not yet among its inputs, tags, the report files when their
//! digest differs). MLflow never changes a logged param, so when what a run *is* changed
//! (another revision, spec or seed set), its run goes to MLflow's trash (restorable) and
//! a new one takes its key: one active run per series, always describing the cache.
//!
//! Nothing is written before everything that can be checked is: the cache has cells, the
//! URI is usable, the server answers, the analysis and the report files are made, and the
//! experiment's artifacts go through the server's proxy (`mlflow server --serve-artifacts`).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

use super::mlflow_rest::{self, Auth, Client, KeyValue, Metric, Run};
use super::mlflow_run::{
    self, Inputs, REPORT_ARTIFACT_DIR, REPORT_DIGEST_TAG, SERIES_KEY_TAG, SeriesRun,
};
use crate::analyze::{Options as AnalyzeOptions, analyze_store};
use crate::report::{self, Format};
use crate::store::Store;

/// The experiment runs go to when none is named (MLflow's `MLFLOW_EXPERIMENT_NAME`).
pub const DEFAULT_EXPERIMENT: &str = "tabcontam";

/// Settings of one export.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cache: PathBuf,
    /// `http://` or `https://` address of the tracking server.
    pub tracking_uri: String,
    pub experiment: String,
    pub auth: Auth,
    pub analysis: AnalyzeOptions,
    /// Whether `analysis.primary_serialization` was asked for (it must then have cells).
    pub serialization_asked: bool,
}

/// What one export did.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    pub server: String,
    pub experiment: String,
    pub experiment_id: String,
    pub experiment_created: bool,
    pub runs: Vec<RunExported>,
    /// Report files uploaded to each run whose report changed.
    pub report_files: usize,
}

/// What happened to one series' run.
#[derive(Debug, Clone, Serialize)]
pub struct RunExported {
    pub key: String,
    pub name: String,
    pub run_id: String,
    pub action: Action,
    /// Params, metrics and tags of the run; of these, the metrics logged now.
    pub params: usize,
    pub metrics: usize,
    pub metrics_logged: usize,
    pub inputs_logged: usize,
    pub artifacts_uploaded: usize,
    /// Other active runs with the same key (a concurrent export), moved to the trash.
    pub duplicates_removed: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Action {
    Created,
    Updated,
    Unchanged,
    /// The old run's params differ (`why`); it was moved to MLflow's trash.
    Replaced {
        previous: String,
        why: String,
    },
}

/// Exports the cache's report to the tracking server: see the module docs.
pub fn export(settings: &Settings) -> anyhow::Result<Exported> {
    let cache = &settings.cache;
    if !cache.exists() {
        anyhow::bail!(
            "no cache at {}: run an experiment first (`tabcontam run SPEC`) or import published results (`tabcontam import-results DIR`), or pass --cache",
            cache.display()
        );
    }
    let store = Store::open_read_only(cache)?;
    let cells = store.cells()?;
    if cells.is_empty() {
        anyhow::bail!(
            "{}: the cache has no decided cells, so there is nothing to export; run an experiment (`tabcontam run SPEC`) or import published results (`tabcontam import-results DIR`) first",
            cache.display()
        );
    }
    if settings.experiment.trim().is_empty() {
        anyhow::bail!(
            "--experiment: the experiment name is empty; name one, e.g. --experiment tabcontam"
        );
    }
    let client = Client::new(&settings.tracking_uri, settings.auth.clone())?;
    // The first call: an unreachable server or refused credentials stop here.
    let found = client.experiment_by_name(&settings.experiment)?;

    let analysis = analyze_store(&store, &settings.analysis)
        .with_context(|| format!("analyzing {}", cache.display()))?;
    let asked = &settings.analysis.primary_serialization;
    if settings.serialization_asked && !analysis.templates.contains(asked) {
        anyhow::bail!(
            "--serialization {asked}: no cell of {} uses this template; templates with cells: {}",
            cache.display(),
            if analysis.templates.is_empty() {
                "none (only tests without rows were run)".to_string()
            } else {
                analysis.templates.join(", ")
            }
        );
    }
    let (models, datasets, runs) = (store.models()?, store.datasets()?, store.runs()?);
    let wanted = mlflow_run::series_runs(&Inputs {
        analysis: &analysis,
        models: &models,
        datasets: &datasets,
        cells: &cells,
        runs: &runs,
    });
    let files = report::render(
        &analysis,
        &[
            Format::Json,
            Format::Html,
            Format::Latex,
            Format::Csv,
            Format::Markdown,
        ],
        &report::Options::default(),
    )?;
    let digest = mlflow_run::report_digest(&files);

    let (experiment, experiment_created) = match found {
        Some(experiment) => (experiment, false),
        None => (client.create_experiment(&settings.experiment)?, true),
    };
    if mlflow_rest::proxied_artifact_root(&experiment.artifact_location).is_none() {
        anyhow::bail!(
            "{}: experiment {:?} stores artifacts at {:?}, which the server does not proxy, so tabcontam cannot upload the report; restart the server with `mlflow server --serve-artifacts` and use a new --experiment (an experiment keeps the artifact location it was created with)",
            client.server(),
            experiment.name,
            experiment.artifact_location
        );
    }

    let mut by_key: HashMap<String, Vec<Run>> = HashMap::new();
    for run in client.runs_with_tag(&experiment.experiment_id, SERIES_KEY_TAG)? {
        if let Some(key) = run.tag(SERIES_KEY_TAG) {
            by_key.entry(key.to_string()).or_default().push(run);
        }
    }
    let sync = Sync {
        client: &client,
        experiment: &experiment.experiment_id,
        files: &files,
        digest: &digest,
    };
    let mut exported = Vec::new();
    for series in &wanted {
        let existing = by_key.remove(&series.key).unwrap_or_default();
        exported.push(sync.run(series, existing)?);
    }
    Ok(Exported {
        server: client.server().to_string(),
        experiment: experiment.name,
        experiment_id: experiment.experiment_id,
        experiment_created,
        runs: exported,
        report_files: files.len(),
    })
}

struct Sync<'a> {
    client: &'a Client,
    experiment: &'a str,
    files: &'a [report::File],
    digest: &'a str,
}

impl Sync<'_> {
    /// Brings one series' run up to date (creating or replacing it when needed).
    fn run(&self, series: &SeriesRun, existing: Vec<Run>) -> anyhow::Result<RunExported> {
        let now = now_ms();
        let mut existing = existing.into_iter();
        let kept = existing.next();
        let mut duplicates_removed = 0;
        for extra in existing {
            self.client.delete_run(&extra.info.run_id)?;
            duplicates_removed += 1;
        }
        let mut key_tags = vec![KeyValue {
            key: SERIES_KEY_TAG.to_string(),
            value: series.key.clone(),
        }];
        key_tags.extend(series.tags.iter().cloned());
        let (run, action) = match kept {
            Some(run) => match param_change(&run, &series.params) {
                None => (run, Action::Updated),
                Some(why) => {
                    self.client.delete_run(&run.info.run_id)?;
                    let new =
                        self.client
                            .create_run(self.experiment, &series.name, now, &key_tags)?;
                    let previous = run.info.run_id;
                    (new, Action::Replaced { previous, why })
                }
            },
            None => {
                let new = self
                    .client
                    .create_run(self.experiment, &series.name, now, &key_tags)?;
                (new, Action::Created)
            }
        };
        let run_id = run.info.run_id.clone();
        let artifact_root = mlflow_rest::proxied_artifact_root(&run.info.artifact_uri)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{}: run {run_id} stores artifacts at {:?}, which the server does not proxy; restart it with `mlflow server --serve-artifacts`",
                    self.client.server(),
                    run.info.artifact_uri
                )
            })?;

        let logged: HashMap<&str, &str> = run
            .data
            .params
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect();
        let params: Vec<KeyValue> = series
            .params
            .iter()
            .filter(|p| !logged.contains_key(p.key.as_str()))
            .cloned()
            .collect();
        let tags: Vec<KeyValue> = key_tags
            .into_iter()
            .filter(|t| run.tag(&t.key) != Some(t.value.as_str()))
            .collect();
        let latest: HashMap<&str, f64> = run
            .data
            .metrics
            .iter()
            .map(|m| (m.key.as_str(), m.value))
            .collect();
        let metrics: Vec<Metric> = series
            .metrics
            .iter()
            .filter(|(key, value)| {
                !latest
                    .get(key.as_str())
                    .is_some_and(|had| same_value(*had, *value))
            })
            .map(|(key, value)| Metric {
                key: key.clone(),
                value: *value,
                timestamp: now,
                step: 0,
            })
            .collect();
        self.client.log_batch(&run_id, &params, &tags, &metrics)?;
        let inputs: Vec<_> = series
            .datasets
            .iter()
            .filter(|wanted| {
                !run.inputs.dataset_inputs.iter().any(|had| {
                    had.dataset.name == wanted.dataset.name
                        && had.dataset.digest == wanted.dataset.digest
                })
            })
            .cloned()
            .collect();
        self.client.log_inputs(&run_id, &inputs)?;

        let mut artifacts_uploaded = 0;
        if run.tag(REPORT_DIGEST_TAG) != Some(self.digest) {
            for file in self.files {
                let path = format!("{REPORT_ARTIFACT_DIR}/{}", file.name);
                self.client.upload_artifact(
                    &artifact_root,
                    &path,
                    file.contents.as_bytes().to_vec(),
                )?;
                artifacts_uploaded += 1;
            }
            // Last: a failed upload leaves the old digest, so the next export uploads again.
            let digest = [KeyValue {
                key: REPORT_DIGEST_TAG.to_string(),
                value: self.digest.to_string(),
            }];
            self.client.log_batch(&run_id, &[], &digest, &[])?;
        }
        let changed = !(params.is_empty()
            && tags.is_empty()
            && metrics.is_empty()
            && inputs.is_empty()
            && artifacts_uploaded == 0);
        if changed || run.info.status != "FINISHED" {
            self.client.finish_run(&run_id, now_ms())?;
        }
        let action = match action {
            Action::Updated if !changed => Action::Unchanged,
            other => other,
        };
        Ok(RunExported {
            key: series.key.clone(),
            name: series.name.clone(),
            run_id,
            action,
            params: series.params.len(),
            metrics: series.metrics.len(),
            metrics_logged: metrics.len(),
            inputs_logged: inputs.len(),
            artifacts_uploaded,
            duplicates_removed,
        })
    }
}

/// The first param whose logged value differs from the wanted one, as `key: old → new`.
fn param_change(run: &Run, wanted: &[KeyValue]) -> Option<String> {
    wanted.iter().find_map(|p| {
        run.data
            .params
            .iter()
            .find(|had| had.key == p.key && had.value != p.value)
            .map(|had| format!("{}: {} → {}", p.key, had.value, p.value))
    })
}

/// Whether a metric value read back equals the one to log: MLflow returns doubles with
/// about 16 significant digits (5/54 comes back as 0.0925925925925926), so equal means
/// within a relative 1e-14.
fn same_value(had: f64, value: f64) -> bool {
    had == value || (had - value).abs() <= 1e-14 * had.abs().max(value.abs())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_with_16_digits_are_the_same() {
        assert!(same_value(5.0 / 54.0, 0.0925925925925926));
        assert!(same_value(1.4857031378977378e-34, 1.4857031378977376e-34));
        assert!(same_value(0.0, 0.0));
        assert!(!same_value(0.5, 0.5000001));
        assert!(!same_value(0.0, 1e-300));
    }
}
