//! `tabcontam rows`: which rows of a dataset a model has seen, with a false-discovery
//! guarantee ([`crate::likelihood::seen_rows`]), from the log-probabilities a run of the
//! likelihood tests cached. A checkpoint with held-out rows is judged against them (and
//! its selection against its manifest); any other model against the membership test's
//! perturbed copies, texts no corpus holds, with the blind baseline saying whether they
//! are a fair reference. Reads the cache only: nothing is scored here.

use std::path::Path;

use serde::Serialize;

use super::local_exec::{declared_exposure, local_revision};
use super::spec::Spec;
use crate::dataset::catalog::Catalog;
use crate::likelihood::BlindAuroc;
use crate::likelihood::Detector;
use crate::likelihood::dataset_inference::{
    DatasetInference, complete_features, dataset_inference,
};
use crate::likelihood::seen_rows::{
    RowJudgement, SelectionTruth, against_trained_rows, against_truth, judge_candidates, judge_rows,
};
use crate::probe::{ProbeContext, PromptPack, likelihood_rows, matched_rows, row_texts};
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
    /// The rows known unseen; `None`: a checkpoint's held-out rows where it has them,
    /// column-matched rows otherwise.
    pub reference: Option<Reference>,
}

/// What a row's score is compared with: rows known unseen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// A checkpoint's rows held out of training (its manifest).
    HeldOut,
    /// Synthetic rows drawn from the file's own columns ([`crate::probe::matched_rows`]).
    Matched,
    /// The membership test's perturbed copies.
    Perturbed,
}

impl Reference {
    pub const IDS: [&'static str; 3] = ["held-out", "matched", "perturbed"];

    pub fn parse(id: &str) -> Option<Self> {
        match id {
            "held-out" => Some(Self::HeldOut),
            "matched" => Some(Self::Matched),
            "perturbed" => Some(Self::Perturbed),
            _ => None,
        }
    }
}

/// The answer: every row of the dataset judged, and the selection against the truth.
#[derive(Debug, Clone, Serialize)]
pub struct SeenRows {
    pub model: String,
    pub dataset: String,
    pub detector: String,
    pub serialization: String,
    pub fdr: f64,
    /// Which references were used: `held-out`, `matched` or `perturbed`.
    pub reference: String,
    /// What the references (rows known unseen) are.
    pub references: String,
    pub rows: Vec<RowJudgement>,
    /// The selection scored against the checkpoint's manifest: trained rows found, held-out
    /// rows wrongly selected (`None` for a model without held-out rows: no truth known).
    pub truth: Option<SelectionTruth>,
    /// For references that are not rows of the dataset (perturbed copies): the model-free
    /// classifier's AUROC of the rows against them, and whether they are a fair reference
    /// (its interval reaches 0.5: without a model the two cannot be told apart).
    pub reference_blind: Option<BlindAuroc>,
    pub fair_references: Option<bool>,
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
    let trained = exposure.as_ref().and_then(|e| e.rows_trained(&dataset.id));
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
    let revision = local_revision(model, spec_dir)?;
    let identity = super::plan::identity(model, revision.as_deref());
    let reference = match (query.reference, trained) {
        (None | Some(Reference::HeldOut), Some(_)) => Reference::HeldOut,
        (None, None) => Reference::Matched,
        (Some(Reference::HeldOut), None) => anyhow::bail!(
            "model `{}` has no held-out rows of `{}` (it is not a checkpoint trained on part of it): use --reference matched or --reference perturbed",
            model.id,
            dataset.id
        ),
        (Some(other), _) => other,
    };
    let trained = match (reference, trained) {
        (Reference::Perturbed, _) => {
            return against_perturbed_copies(spec, store, query, model, &ctx, &identity);
        }
        (Reference::Matched, trained) => {
            return against_matched_rows(spec, store, query, model, &ctx, &identity, trained);
        }
        (Reference::HeldOut, trained) => trained.expect("held-out rows are a checkpoint's"),
    };
    let texts = row_texts(&ctx);
    let keys = score_keys(&identity, texts.iter());
    let found = cached_logprobs(
        store,
        &keys,
        &format!("rows of `{}`", dataset.id),
        "",
        spec,
        &model.id,
    )?;
    let seen: std::collections::HashSet<usize> = trained.iter().copied().collect();
    let (mut candidates, mut references) = (Vec::new(), Vec::new());
    // Dataset inference's features: every detector's score of the row (rows a detector
    // cannot score leave that detector out of the combination).
    let (mut suspect_features, mut held_out_features) = (Vec::new(), Vec::new());
    for (row, (text, key)) in texts.iter().zip(&keys).enumerate() {
        let (score, features) = detector_scores(query.detector, text, &found[key], row)?;
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
    let (suspect, held_out) = complete_features(&suspect_features, &held_out_features);
    let inference = dataset_inference(&suspect, &held_out, spec.seed);
    let mut rows = judge_rows(&candidates, &references, query.fdr);
    for row in &mut rows {
        row.trained = Some(!row.reference);
    }
    Ok(SeenRows {
        model: model.id.clone(),
        dataset: dataset.id.clone(),
        detector: query.detector.test_id().to_string(),
        serialization: serialization.id.clone(),
        fdr: query.fdr,
        reference: "held-out".into(),
        references: with_selection_floor(
            format!(
                "the {} rows held out of training (manifest), each judged against the others",
                references.len()
            ),
            candidates.len(),
            references.len(),
            true,
            query.fdr,
        ),
        truth: Some(against_truth(&rows)),
        rows,
        reference_blind: None,
        fair_references: None,
        dataset_inference: inference,
    })
}

/// A model without held-out rows of the dataset: each distinct row the membership test
/// drew is judged against the distinct perturbed copies (values altered, so in no corpus),
/// which the likelihood phase scored beside them; dataset inference over the same two
/// groups. The copies are a fair reference only where a model-free classifier cannot tell
/// them from the rows (the cell's blind baseline), which the answer states.
fn against_perturbed_copies(
    spec: &Spec,
    store: &Store,
    query: &RowsQuery,
    model: &super::spec::ModelSpec,
    ctx: &ProbeContext,
    identity: &crate::request::ModelIdentity,
) -> anyhow::Result<SeenRows> {
    let drawn = likelihood_rows(ctx)?.map_err(|reason| {
        anyhow::anyhow!(
            "`{}` has no membership rows to judge ({reason}), and model `{}` no held-out rows of it",
            ctx.dataset.id,
            model.id
        )
    })?;
    // Each distinct text once: the membership test draws rows with replacement.
    let texts: Vec<String> = drawn.iter().map(|r| r.text.clone()).collect();
    let drawn: Vec<_> = super::likelihood::distinct(&texts, drawn.iter().map(|r| r.original))
        .into_iter()
        .map(|(i, _)| &drawn[i])
        .collect();
    let keys = score_keys(identity, drawn.iter().map(|r| &r.text));
    let found = cached_logprobs(
        store,
        &keys,
        &format!(
            "membership texts of `{}` (rows and perturbed copies)",
            ctx.dataset.id
        ),
        ", which has no held-out rows of it",
        spec,
        &model.id,
    )?;
    let (mut candidates, mut references) = (Vec::new(), Vec::new());
    let (mut suspect_features, mut copy_features) = (Vec::new(), Vec::new());
    for (r, key) in drawn.iter().zip(&keys) {
        let (score, features) = detector_scores(query.detector, &r.text, &found[key], r.row)?;
        if r.original {
            candidates.push((r.row, score));
            suspect_features.push(features);
        } else {
            references.push((r.row, score));
            copy_features.push(features);
        }
    }
    let (suspect, held_out) = complete_features(&suspect_features, &copy_features);
    let inference = dataset_inference(&suspect, &held_out, spec.seed);
    let pair = crate::likelihood::blind::group_pair_of_cell(&model.id, query.detector.test_id());
    let (blind, fair, verdict) = fairness(spec, store, ctx, &pair)?;
    let rows = judge_candidates(&candidates, &references, query.fdr);
    Ok(SeenRows {
        model: model.id.clone(),
        dataset: ctx.dataset.id.clone(),
        detector: query.detector.test_id().to_string(),
        serialization: ctx.serialization.id.clone(),
        fdr: query.fdr,
        reference: "perturbed".into(),
        references: with_selection_floor(
            format!(
                "the {} perturbed copies of the membership test (values altered, so in no corpus); {verdict}",
                references.len()
            ),
            candidates.len(),
            references.len(),
            false,
            query.fdr,
        ),
        truth: None,
        rows,
        reference_blind: blind,
        fair_references: fair,
        dataset_inference: inference,
    })
}

/// The blind baseline of `group_pair` on the cell's dataset and template, whether it makes
/// the references fair (the texts alone do not tell the groups apart: the interval holds
/// 0.5; one below it also means the texts differ, the folds' lesson reversing), and the
/// sentence that says so.
fn fairness(
    spec: &Spec,
    store: &Store,
    ctx: &ProbeContext,
    group_pair: &str,
) -> anyhow::Result<(Option<BlindAuroc>, Option<bool>, String)> {
    let blind = store
        .blind_baselines()?
        .into_iter()
        .find(|b| {
            b.dataset == ctx.dataset.id
                && b.serialization == ctx.serialization.id
                && b.seed == spec.seed
                && b.group_pair == group_pair
        })
        .map(|b| b.stats);
    let fair = blind.map(|b| b.auroc_low <= 0.5 && 0.5 <= b.auroc_high);
    let verdict = match (blind, fair) {
        (Some(b), Some(true)) => format!(
            "a model-free classifier's AUROC of the rows against them is {:.3} [{:.3}, {:.3}], chance: a fair reference",
            b.auroc, b.auroc_low, b.auroc_high
        ),
        (Some(b), _) => format!(
            "but a model-free classifier's AUROC of the rows against them is {:.3} [{:.3}, {:.3}], away from 0.5: the texts alone differ, NOT a fair reference, and the selection carries no guarantee",
            b.auroc, b.auroc_low, b.auroc_high
        ),
        (None, _) => {
            "no blind baseline in the cache to say whether they are a fair reference".into()
        }
    };
    Ok((blind, fair, verdict))
}

/// Judges against column-matched synthetic rows (as many as the membership test's distinct
/// original rows, scored by the run's likelihood phase): the candidates are every row of
/// the file on a checkpoint whose trained rows are known (the selection then scored
/// against them), the membership test's distinct rows otherwise; dataset inference over
/// the same two groups, and the blind baseline on whether the match is fair.
fn against_matched_rows(
    spec: &Spec,
    store: &Store,
    query: &RowsQuery,
    model: &super::spec::ModelSpec,
    ctx: &ProbeContext,
    identity: &crate::request::ModelIdentity,
    trained: Option<&[usize]>,
) -> anyhow::Result<SeenRows> {
    let drawn = likelihood_rows(ctx)?.map_err(|reason| {
        anyhow::anyhow!(
            "`{}` has no membership rows to match ({reason}): use --reference held-out on a checkpoint trained on part of it",
            ctx.dataset.id
        )
    })?;
    let texts: Vec<String> = drawn.iter().map(|r| r.text.clone()).collect();
    let originals: Vec<(usize, String)> =
        super::likelihood::distinct(&texts, drawn.iter().map(|r| r.original))
            .into_iter()
            .filter(|&(_, original)| original)
            .map(|(i, _)| (drawn[i].row, texts[i].clone()))
            .collect();
    let matched = matched_rows(ctx, originals.len())?.map_err(|reason| {
        anyhow::anyhow!(
            "`{}` has no column-matched rows ({reason}): use --reference perturbed",
            ctx.dataset.id
        )
    })?;
    let candidates: Vec<(usize, String)> = match trained {
        Some(_) => row_texts(ctx).into_iter().enumerate().collect(),
        None => originals,
    };
    let candidate_keys = score_keys(identity, candidates.iter().map(|(_, t)| t));
    let matched_keys = score_keys(identity, matched.iter());
    let all_keys: Vec<_> = candidate_keys
        .iter()
        .chain(&matched_keys)
        .copied()
        .collect();
    let found = cached_logprobs(
        store,
        &all_keys,
        &format!(
            "texts of `{}` (rows and column-matched rows)",
            ctx.dataset.id
        ),
        "",
        spec,
        &model.id,
    )?;
    let (mut scored, mut references) = (Vec::new(), Vec::new());
    let (mut suspect_features, mut matched_features) = (Vec::new(), Vec::new());
    for ((row, text), key) in candidates.iter().zip(&candidate_keys) {
        let (s, features) = detector_scores(query.detector, text, &found[key], *row)?;
        scored.push((*row, s));
        suspect_features.push(features);
    }
    for (i, (text, key)) in matched.iter().zip(&matched_keys).enumerate() {
        let (s, features) = detector_scores(query.detector, text, &found[key], i)?;
        references.push((i, s));
        matched_features.push(features);
    }
    let (suspect, held_out) = complete_features(&suspect_features, &matched_features);
    let inference = dataset_inference(&suspect, &held_out, spec.seed);
    let (blind, fair, verdict) = fairness(
        spec,
        store,
        ctx,
        crate::likelihood::blind::ORIGINAL_VS_MATCHED,
    )?;
    let mut rows = judge_candidates(&scored, &references, query.fdr);
    let truth = trained.map(|trained| {
        let trained: std::collections::HashSet<usize> = trained.iter().copied().collect();
        for row in &mut rows {
            row.trained = Some(trained.contains(&row.row));
        }
        against_trained_rows(&rows)
    });
    Ok(SeenRows {
        model: model.id.clone(),
        dataset: ctx.dataset.id.clone(),
        detector: query.detector.test_id().to_string(),
        serialization: ctx.serialization.id.clone(),
        fdr: query.fdr,
        reference: "matched".into(),
        references: with_selection_floor(
            format!(
                "{} column-matched synthetic rows (each value drawn from its own column of the file, no row of it); {verdict}",
                references.len()
            ),
            scored.len(),
            references.len(),
            false,
            query.fdr,
        ),
        truth,
        rows,
        reference_blind: blind,
        fair_references: fair,
        dataset_inference: inference,
    })
}

/// A text's score under `detector` and its features for dataset inference (every
/// detector's score; one that cannot score the text leaves itself out of the combination),
/// from its cached (method, log-probabilities); an error naming the row when `detector`
/// cannot score it.
fn detector_scores(
    detector: Detector,
    text: &str,
    (method, logprobs): &(String, crate::request::TokenLogprobs),
    row: usize,
) -> anyhow::Result<(f64, Vec<Option<f64>>)> {
    let features: Vec<Option<f64>> = Detector::ALL
        .iter()
        .map(|d| d.score(text, logprobs))
        .collect();
    let chosen = Detector::ALL.iter().position(|&d| d == detector);
    match chosen.and_then(|i| features[i]) {
        Some(score) => Ok((score, features)),
        None => anyhow::bail!(
            "{} cannot score the text of row {row} from the cached log-probabilities ({method}); choose another --detector",
            detector.test_id()
        ),
    }
}

/// The cache keys of `texts` scored by `identity` (as the likelihood phase stored them).
/// The cached log-probabilities of every key, or one error saying how many of `what` lack
/// them (`note` follows the model's name) and the run that scores them.
fn cached_logprobs(
    store: &Store,
    keys: &[crate::request::ScoreKey],
    what: &str,
    note: &str,
    spec: &Spec,
    model: &str,
) -> anyhow::Result<
    std::collections::HashMap<crate::request::ScoreKey, (String, crate::request::TokenLogprobs)>,
> {
    let found = store.logprobs(keys)?;
    let missing = keys.iter().filter(|k| !found.contains_key(k)).count();
    if missing > 0 {
        anyhow::bail!(
            "{missing} of {} {what} have no cached log-probabilities under `{model}`{note}: run `tabcontam run {} --model {model}` with \"likelihood\" among the spec's tests first",
            keys.len(),
            spec.path.display()
        );
    }
    Ok(found)
}

fn score_keys<'a>(
    identity: &crate::request::ModelIdentity,
    texts: impl Iterator<Item = &'a String>,
) -> Vec<crate::request::ScoreKey> {
    texts
        .map(|text| {
            ScoreRequest {
                model: identity.clone(),
                text: text.clone(),
            }
            .key()
        })
        .collect()
}

/// The references' description, followed by why nothing can be selected when there are
/// too few of them for the rate (`likelihood::seen_rows::selection_floor`).
fn with_selection_floor(
    description: String,
    candidates: usize,
    references: usize,
    references_judged: bool,
    fdr: f64,
) -> String {
    let note = crate::likelihood::seen_rows::selection_floor(
        candidates,
        references,
        references_judged,
        fdr,
    );
    match note {
        Some(note) => format!("{description}; {note}"),
        None => description,
    }
}
