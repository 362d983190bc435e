//! `tabcontam rows`: which rows of a dataset a checkpoint has seen, with a false-discovery
//! guarantee ([`crate::likelihood::seen_rows`]), from the log-probabilities a run of the
//! likelihood tests cached for every row. Reads the cache only: nothing is scored here.

use std::path::Path;

use serde::Serialize;

use super::local_exec::{declared_exposure, local_revision};
use super::spec::Spec;
use crate::dataset::catalog::Catalog;
use crate::likelihood::Detector;
use crate::likelihood::dataset_inference::{DatasetInference, dataset_inference};
use crate::likelihood::seen_rows::{RowJudgement, SelectionTruth, against_truth, judge_rows};
use crate::probe::{ProbeContext, PromptPack, row_texts};
use crate::request::ScoreRequest;
use crate::store::Store;

/// What `tabcontam rows` asks.
pub struct RowsQuery<'a> {
    pub model: &'a str,
    pub dataset: &'a str,
    pub detector: Detector,
    /// Target false-identification rate (BH's q).
    pub fdr: f64,
    /// The template the rows are serialized with; the model's first when `None`.
    pub serialization: Option<&'a str>,
    pub data_dir: Option<&'a Path>,
}

/// The answer: every row of the dataset judged, and the selection against the truth.
#[derive(Debug, Clone, Serialize)]
pub struct SeenRows {
    pub model: String,
    pub dataset: String,
    pub detector: String,
    pub serialization: String,
    pub fdr: f64,
    /// What the references (rows known unseen) are.
    pub references: String,
    pub rows: Vec<RowJudgement>,
    /// The selection scored against the checkpoint's manifest: trained rows found, held-out
    /// rows wrongly selected.
    pub truth: SelectionTruth,
    /// Dataset inference over the same split: the four detectors' scores of the trained
    /// rows against the held-out rows combined into one p-value (`None` when a set is too
    /// small or a detector cannot score every row).
    pub dataset_inference: Option<DatasetInference>,
}

/// Judges every row of `query.dataset` under `query.model` of `spec`: the rows the model
/// was trained on are the candidates, its held-out rows the references (each judged
/// leave-one-out). Errors name what is missing and the command that supplies it.
pub fn seen_rows(spec: &Spec, store: &Store, query: &RowsQuery) -> anyhow::Result<SeenRows> {
    let spec_path = spec.path.display();
    let model = spec
        .models
        .iter()
        .find(|m| m.id == query.model)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{spec_path}: no model `{}`; its models are: {}",
                query.model,
                spec.models
                    .iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    let spec_dir = spec.path.parent().unwrap_or(Path::new("."));
    let dataset = Catalog::open(query.data_dir)?.load(query.dataset)?;
    let exposure = declared_exposure(model, spec_dir)?;
    let trained = exposure
        .as_ref()
        .and_then(|e| e.rows_trained(&dataset.id))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "model `{}` has no rows of `{}` known as trained on and held out (a checkpoint of `tabcontam contaminate` trained on it, with its tabcontam-manifest.json); `rows` needs rows known unseen as references",
                model.id,
                dataset.id
            )
        })?;
    let serializations = spec.model_serializations(model);
    let serialization = match query.serialization {
        None => serializations.first(),
        Some(id) => serializations.iter().find(|s| s.id == id),
    }
    .ok_or_else(|| {
        anyhow::anyhow!(
            "model `{}` has no template `{}` in {spec_path}; its templates are: {}",
            model.id,
            query.serialization.unwrap_or("-"),
            serializations
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let pack = PromptPack::builtin();
    let ctx = ProbeContext {
        dataset: &dataset,
        serialization,
        seed: spec.seed,
        pack: &pack,
        variant: spec.variant,
    };
    let texts = row_texts(&ctx);
    let revision = local_revision(model, spec_dir)?;
    let identity = super::plan::identity(model, revision.as_deref());
    let keys: Vec<_> = texts
        .iter()
        .map(|text| {
            ScoreRequest {
                model: identity.clone(),
                text: text.clone(),
            }
            .key()
        })
        .collect();
    let found = store.logprobs(&keys)?;
    let missing = keys.iter().filter(|k| !found.contains_key(k)).count();
    if missing > 0 {
        anyhow::bail!(
            "{missing} of {} rows of `{}` have no cached log-probabilities under `{}`: run `tabcontam run {spec_path} --model {}` with \"likelihood\" among the spec's tests first",
            texts.len(),
            dataset.id,
            model.id,
            model.id
        );
    }
    let seen: std::collections::HashSet<usize> = trained.iter().copied().collect();
    let (mut candidates, mut references) = (Vec::new(), Vec::new());
    // Dataset inference's features: every detector's score of the row (rows a detector
    // cannot score leave that detector out of the combination).
    let (mut suspect_features, mut held_out_features) = (Vec::new(), Vec::new());
    let chosen = Detector::ALL
        .iter()
        .position(|&d| d == query.detector)
        .expect("every detector is in ALL");
    for (row, (text, key)) in texts.iter().zip(&keys).enumerate() {
        let logprobs = &found[key].1;
        let features: Vec<Option<f64>> = Detector::ALL
            .iter()
            .map(|d| d.score(text, logprobs))
            .collect();
        let Some(score) = features[chosen] else {
            anyhow::bail!(
                "{} cannot score row {row} from the cached log-probabilities ({}); choose another --detector",
                query.detector.test_id(),
                found[key].0
            );
        };
        match seen.contains(&row) {
            true => {
                candidates.push((row, score));
                suspect_features.push(features);
            }
            false => {
                references.push((row, score));
                held_out_features.push(features);
            }
        }
    }
    let usable: Vec<usize> = (0..Detector::ALL.len())
        .filter(|&d| {
            suspect_features
                .iter()
                .chain(&held_out_features)
                .all(|f| f[d].is_some())
        })
        .collect();
    let complete = |rows: &[Vec<Option<f64>>]| -> Vec<Vec<f64>> {
        rows.iter()
            .map(|f| usable.iter().map(|&d| f[d].expect("usable")).collect())
            .collect()
    };
    let inference = dataset_inference(
        &complete(&suspect_features),
        &complete(&held_out_features),
        spec.seed,
    );
    let rows = judge_rows(&candidates, &references, query.fdr);
    Ok(SeenRows {
        model: model.id.clone(),
        dataset: dataset.id.clone(),
        detector: query.detector.test_id().to_string(),
        serialization: serialization.id.clone(),
        fdr: query.fdr,
        references: format!(
            "the {} rows held out of training (manifest), each judged against the others",
            references.len()
        ),
        truth: against_truth(&rows),
        rows,
        dataset_inference: inference,
    })
}
