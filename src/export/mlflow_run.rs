//! What each MLflow run holds, as a pure function of the analysis and the cache's rows: one
//! run per series (source, model) of the report, keyed by its [`SERIES_KEY_TAG`], with its
//! params (identity and settings), metrics (scores, per-cell verdicts, p-values,
//! accuracies, likelihood AUROCs), dataset inputs (blake3 digests) and tags.
//!
//! Params are what a run *is* (MLflow never changes a logged param): the model's identity,
//! the specs and seeds that decided its cells, the templates and the scoring profile.
//! Everything that may be edited in a spec without changing the results (label, family,
//! dates) is a tag, which a later export updates.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::json;

use super::mlflow_rest::{Dataset, DatasetInput, KeyValue};
use crate::analyze::{Analysis, MeanAccuracy, SeriesScores};
use crate::store::{CellRow, DatasetRow, ModelRow, OWN_SOURCE, RunRow};

/// The tag that says which series a run holds; an export updates the run carrying its
/// series' key instead of adding one.
pub const SERIES_KEY_TAG: &str = "tabcontam.series_key";
/// The blake3 of the report files a run's artifacts hold (uploads are skipped when equal).
pub const REPORT_DIGEST_TAG: &str = "tabcontam.report_digest";
/// Where the report files go under a run's artifact root.
pub const REPORT_ARTIFACT_DIR: &str = "report";
/// MLflow stores a dataset digest of at most 36 characters: the digest is the first 32
/// hex digits (128 bits) of the file's blake3; the whole hash is in the dataset's source
/// and profile.
pub const DATASET_DIGEST_CHARS: usize = 32;

/// The rows of the cache an export reads, beside the analysis.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub analysis: &'a Analysis,
    pub models: &'a [ModelRow],
    pub datasets: &'a [DatasetRow],
    pub cells: &'a [CellRow],
    pub runs: &'a [RunRow],
}

/// One MLflow run's content.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesRun {
    /// The value of [`SERIES_KEY_TAG`]: source, model, scoring profile and primary template.
    pub key: String,
    /// The run's name (the model's label).
    pub name: String,
    pub params: Vec<KeyValue>,
    /// Tags besides [`SERIES_KEY_TAG`] and [`REPORT_DIGEST_TAG`].
    pub tags: Vec<KeyValue>,
    /// (key, value), keys unique, every value finite.
    pub metrics: Vec<(String, f64)>,
    pub datasets: Vec<DatasetInput>,
}

/// One run per series of the analysis, in Table 2's order.
pub fn series_runs(inputs: &Inputs<'_>) -> Vec<SeriesRun> {
    let models: HashMap<&str, &ModelRow> =
        inputs.models.iter().map(|m| (m.id.as_str(), m)).collect();
    let spec_of: HashMap<i64, &str> = inputs
        .runs
        .iter()
        .map(|r| (r.id.0, r.spec_name.as_str()))
        .collect();
    let dataset_rows: HashMap<&str, &DatasetRow> =
        inputs.datasets.iter().map(|d| (d.id.as_str(), d)).collect();
    inputs
        .analysis
        .series
        .iter()
        .map(|series| {
            let cells: Vec<&CellRow> = inputs
                .cells
                .iter()
                .filter(|c| c.source == series.key.source && c.model == series.key.model)
                .collect();
            let model = models.get(series.key.model.as_str()).copied();
            SeriesRun {
                key: series_key(series, inputs.analysis),
                name: series.label.clone(),
                params: params(series, inputs.analysis, model, &cells, &spec_of),
                tags: tags(series, inputs.analysis),
                metrics: metrics(series, inputs.analysis),
                datasets: dataset_inputs(&cells, &dataset_rows),
            }
        })
        .collect()
}

/// `["tabcontam","gpt-4o","paper","the-is"]`: a JSON array, so no id can make two series
/// share a key.
fn series_key(series: &SeriesScores, analysis: &Analysis) -> String {
    json!([
        series.key.source,
        series.key.model,
        analysis.scoring.id(),
        analysis.primary_serialization
    ])
    .to_string()
}

fn kv(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: value.into(),
    }
}

fn params(
    series: &SeriesScores,
    analysis: &Analysis,
    model: Option<&ModelRow>,
    cells: &[&CellRow],
    spec_of: &HashMap<i64, &str>,
) -> Vec<KeyValue> {
    let mut params = vec![
        kv("model_id", &series.key.model),
        kv("source", &series.key.source),
    ];
    if let Some(model) = model {
        params.push(kv("model", &model.identity.model));
        params.push(kv("revision", &model.identity.revision));
        params.push(kv("backend", model.identity.backend.id()));
    }
    let specs: BTreeSet<&str> = cells
        .iter()
        .filter_map(|c| c.run_id.and_then(|r| spec_of.get(&r.0).copied()))
        .collect();
    if !specs.is_empty() {
        params.push(kv("spec", specs.into_iter().collect::<Vec<_>>().join(", ")));
    }
    let seeds: BTreeSet<u64> = cells.iter().map(|c| c.seed).collect();
    if !seeds.is_empty() {
        let seeds: Vec<String> = seeds.iter().map(u64::to_string).collect();
        params.push(kv("seed", seeds.join(", ")));
    }
    params.push(kv(
        "template",
        series.serialization.as_deref().unwrap_or("none"),
    ));
    params.push(kv("primary_template", &analysis.primary_serialization));
    params.push(kv("scoring", analysis.scoring.id()));
    params
}

fn tags(series: &SeriesScores, analysis: &Analysis) -> Vec<KeyValue> {
    let mut tags = vec![
        kv("mlflow.runName", &series.label),
        kv("tabcontam.source", &series.key.source),
        kv("tabcontam.label", &series.label),
        kv("tabcontam.version", env!("CARGO_PKG_VERSION")),
    ];
    let optional = [
        ("tabcontam.family", series.family.as_deref()),
        ("tabcontam.release_date", series.release_date.as_deref()),
        (
            "tabcontam.training_cutoff",
            series.training_cutoff.as_deref(),
        ),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            tags.push(kv(key, value));
        }
    }
    if let Some(step) = series.step {
        tags.push(kv("tabcontam.step", step.to_string()));
    }
    let origin = if series.key.source == OWN_SOURCE {
        "results of tabcontam runs".to_string()
    } else {
        format!("results imported from `{}`", series.key.source)
    };
    tags.push(kv(
        "mlflow.note.content",
        format!(
            "tabcontam: contamination of **{}** with tabular data ({origin}). Scores use template `{}` and the scoring profile {}. Metrics `pass/DATASET/TEST` are the verdicts of tests 1–9, `p_value/…` the p-values against chance (`p_holm/…` Holm-adjusted, `q_value/…` Benjamini–Hochberg), `accuracy/…` tests 10–12, `auroc/…` the likelihood detectors (and dataset inference), `blind_auroc/…` the model-free classifier on the same texts; the whole report is under `{REPORT_ARTIFACT_DIR}/`.",
            series.label,
            series.serialization.as_deref().unwrap_or("none"),
            analysis.scoring_rule,
        ),
    ));
    tags
}

fn metrics(series: &SeriesScores, analysis: &Analysis) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    let mut push = |key: &str, value: Option<f64>| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push((key.to_string(), value));
        }
    };
    push("contamination", series.contamination);
    push("knowledge", series.knowledge);
    push("memorization", series.memorization);
    push("contamination_passed", Some(series.passed as f64));
    push("contamination_cells", Some(series.cells as f64));
    push("rank", Some(series.rank as f64));
    push("sample_contamination", series.sample_contamination);
    let mean = |m: &Option<MeanAccuracy>| m.as_ref().map(|m| m.mean);
    push("membership", mean(&series.membership));
    push(
        "membership_p_value",
        series.membership.as_ref().and_then(|m| m.p_value),
    );
    push("zero_shot", mean(&series.zero_shot));
    push("one_shot", mean(&series.one_shot));

    // Per cell: (base key, seed, value); a seed suffix only where a series has several.
    let mut cells: Vec<(String, u64, f64)> = Vec::new();
    for cell in analysis.grid.iter().filter(|c| c.key == series.key) {
        let value = if cell.passed { 1.0 } else { 0.0 };
        cells.push((
            metric_key(&["pass", &cell.dataset, &cell.test]),
            cell.seed,
            value,
        ));
    }
    for cell in analysis.accuracy.iter().filter(|c| c.key == series.key) {
        cells.push((
            metric_key(&["accuracy", &cell.dataset, &cell.test]),
            0,
            cell.accuracy,
        ));
    }
    if series.key.source == OWN_SOURCE {
        for cell in analysis
            .significance
            .iter()
            .filter(|c| c.model == series.key.model)
        {
            let template = cell.serialization.as_deref().unwrap_or("none");
            for (name, value) in [
                ("p_value", cell.p_value),
                ("p_holm", cell.p_holm),
                ("q_value", cell.q_value),
            ] {
                cells.push((
                    metric_key(&[name, &cell.dataset, &cell.test, template]),
                    cell.seed,
                    value,
                ));
            }
        }
        for cell in analysis
            .likelihood
            .iter()
            .filter(|c| c.model == series.key.model)
        {
            let Some(stats) = &cell.stats else { continue };
            // The blind baseline beside the AUROC: a detector is only worth its AUROC where
            // it beats the model-free classifier on the same two groups of texts.
            let blind = cell.blind.map(|b| ("blind_auroc", b.auroc));
            for (name, value) in [
                ("auroc", stats.auroc),
                ("auroc_p_value", stats.p_value),
                ("tpr_at_5_fpr", stats.tpr_at_5_fpr),
            ]
            .into_iter()
            .chain(blind)
            {
                let key = metric_key(&[name, &cell.dataset, &cell.test, &cell.serialization]);
                cells.push((key, cell.seed, value));
            }
        }
    }
    let mut seeds: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (key, seed, _) in &cells {
        seeds.entry(key).or_default().insert(*seed);
    }
    let mut seen = BTreeSet::new();
    let mut per_cell = Vec::new();
    for (key, seed, value) in &cells {
        let key = if seeds[key.as_str()].len() > 1 {
            format!("{key}/seed-{seed}")
        } else {
            key.clone()
        };
        if value.is_finite() && seen.insert(key.clone()) {
            per_cell.push((key, *value));
        }
    }
    out.extend(per_cell);
    out
}

/// A metric key from parts, each reduced to what MLflow accepts in a name on every system
/// (ASCII letters, digits, `_ - . ` and space; `/` separates the parts) and at most
/// 250 characters in all.
pub fn metric_key(parts: &[&str]) -> String {
    let clean: Vec<String> = parts
        .iter()
        .map(|part| {
            let part: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let part = part.trim().to_string();
            // "", "." and ".." would make the name resolve to another path.
            if part.is_empty() || part.chars().all(|c| c == '.') {
                "_".to_string()
            } else {
                part
            }
        })
        .collect();
    let mut key = clean.join("/");
    if key.len() > 250 {
        key.truncate(250);
    }
    key
}

/// The datasets a series has cells on, with their blake3 digests (imported results have
/// no dataset rows in the cache, so no inputs).
fn dataset_inputs(cells: &[&CellRow], rows: &HashMap<&str, &DatasetRow>) -> Vec<DatasetInput> {
    let ids: BTreeSet<&str> = cells.iter().map(|c| c.dataset.as_str()).collect();
    ids.into_iter()
        .filter_map(|id| rows.get(id))
        .map(|row| {
            let digest: String = row.checksum.chars().take(DATASET_DIGEST_CHARS).collect();
            let about = json!({
                "dataset": row.id,
                "name": row.name,
                "variant": row.variant,
                "blake3": row.checksum,
            })
            .to_string();
            DatasetInput {
                tags: vec![kv("mlflow.data.context", "evaluation")],
                dataset: Dataset {
                    name: row.id.clone(),
                    digest,
                    source_type: "tabcontam".to_string(),
                    source: about.clone(),
                    profile: Some(about),
                },
            }
        })
        .collect()
}

/// The blake3 of the report files (names and contents), for [`REPORT_DIGEST_TAG`].
pub fn report_digest(files: &[crate::report::File]) -> String {
    let mut hasher = blake3::Hasher::new();
    for file in files {
        for part in [file.name.as_bytes(), file.contents.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_keys_are_names_mlflow_accepts() {
        assert_eq!(
            metric_key(&["pass", "iris", "feature-list-uninformed"]),
            "pass/iris/feature-list-uninformed"
        );
        assert_eq!(metric_key(&["pass", "a/b:c", ".."]), "pass/a_b_c/_");
        assert_eq!(metric_key(&["p", "adult income", "é"]), "p/adult income/_");
        assert_eq!(metric_key(&["x", &"y".repeat(300)]).len(), 250);
    }

    #[test]
    fn the_report_digest_follows_names_and_contents() {
        let file = |name: &str, contents: &str| crate::report::File {
            name: name.into(),
            contents: contents.into(),
        };
        let a = report_digest(&[file("a", "bc")]);
        assert_eq!(a, report_digest(&[file("a", "bc")]));
        assert_ne!(a, report_digest(&[file("ab", "c")]));
        assert_ne!(a, report_digest(&[file("a", "bd")]));
    }
}
