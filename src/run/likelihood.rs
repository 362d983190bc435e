//! The likelihood tests of a run (SPEC §8): per (model, dataset, serialization), score the
//! membership test's original rows and their perturbed copies, once per score key (the
//! `logprobs` cache), and judge each selected detector by AUROC, TPR at 5 % FPR and
//! bootstrap intervals; test 17, `row-order`, on the raw file's shards in file order
//! against their permutations; and the blind baseline (a model-free classifier on the same
//! two groups of texts) beside every likelihood and membership cell. Runs after the
//! generation requests are sent, before deciding.

use std::collections::HashMap;
use std::path::Path;

use super::blind::BlindBaselines;
use super::local_exec::weights_path;
use super::spec::{ModelSpec, Spec};
use crate::dataset::Dataset;
use crate::dataset::catalog::Catalog;
use crate::infer::{LocalModel, LocalOptions};
use crate::likelihood::{
    Detector, DetectorStats, bootstrap_stats, dataset_inference, roc::BOOTSTRAP_RESAMPLES,
    row_order,
};
use crate::llm::client::Client;
use crate::probe::{ProbeContext, PromptPack, TestId, likelihood_rows, matched_rows, row_texts};
use crate::request::{ApiMode, BackendKind, ModelIdentity, ScoreKey, ScoreRequest, TokenLogprobs};
use crate::store::{LikelihoodCellRow, RowOrderCellRow, RunId, Store};

/// Texts scored between two commits to the cache.
const SCORE_CHUNK: usize = 16;

/// How the local engine's log-probabilities are labelled in the cache.
pub const METHOD_LOCAL: &str = "local";

/// What the likelihood phase did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LikelihoodOutcome {
    pub cells: usize,
    /// Texts scored now / found in the cache.
    pub scored: u64,
    pub cached: u64,
    /// One line per model that could not be scored (the run fails with it).
    pub errors: Vec<String>,
}

/// The seed of one cell's bootstrap: the spec's seed with the cell's coordinates, so every
/// cell has its own resamples and the same cache gives the same intervals.
fn bootstrap_seed(seed: u64, model: &str, dataset: &str, test: &str, serialization: &str) -> u64 {
    let text = format!("{seed}\0{model}\0{dataset}\0{test}\0{serialization}");
    let hash = blake3::hash(text.as_bytes());
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Where a model's log-probabilities come from, or why it has none.
enum Scorer {
    Local(Box<LocalModel>),
    /// Loaded on first use: a run whose texts are all cached never loads the weights.
    LocalPending(std::path::PathBuf, LocalOptions),
    /// The client, its runtime, and how many texts to score at once (`None` until asked).
    Remote(Client, tokio::runtime::Runtime, Option<usize>, usize),
    None(String),
}

impl Scorer {
    fn for_model(spec: &Spec, model: &ModelSpec, spec_dir: &Path, offline: bool) -> Scorer {
        match model.backend {
            BackendKind::Local => Scorer::LocalPending(
                weights_path(model, spec_dir),
                LocalOptions {
                    chat_template: false,
                    quantize: model.quantize,
                    ..LocalOptions::default()
                },
            ),
            BackendKind::OpenaiCompatible if offline => {
                Scorer::None("not in the cache, and --offline sends nothing".into())
            }
            BackendKind::OpenaiCompatible if model.api == ApiMode::Chat => Scorer::None(
                "chat-only model: scoring needs `/completions` with prompt log-probabilities (echo) or llama.cpp's server; set api = \"completions\"".into(),
            ),
            BackendKind::OpenaiCompatible => {
                let client = Client::new(spec.client_config(model));
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match (client, runtime) {
                    (Ok(client), Ok(runtime)) => {
                        Scorer::Remote(client, runtime, None, model.concurrency)
                    }
                    (Err(e), _) => Scorer::None(e.to_string()),
                    (_, Err(e)) => Scorer::None(format!("cannot start a runtime: {e}")),
                }
            }
            BackendKind::Anthropic => Scorer::None(
                "the Anthropic Messages API gives no token log-probabilities".into(),
            ),
            BackendKind::Gemini => Scorer::None(
                "the Gemini API gives no log-probabilities of a given text".into(),
            ),
        }
    }

    /// Scores `texts` (in order), or says why it cannot; stops at the first failure.
    fn score(&mut self, texts: &[String]) -> Vec<Result<(&'static str, TokenLogprobs), String>> {
        if let Scorer::LocalPending(path, options) = self {
            match LocalModel::load(path, options) {
                Ok(model) => *self = Scorer::Local(Box::new(model)),
                Err(e) => return vec![Err(e.to_string())],
            }
        }
        match self {
            Scorer::Local(model) => {
                let mut results = Vec::with_capacity(texts.len());
                for text in texts {
                    let result = model
                        .score_text(text)
                        .map(|s| (METHOD_LOCAL, s))
                        .map_err(|e| e.to_string());
                    let failed = result.is_err();
                    results.push(result);
                    if failed {
                        break;
                    }
                }
                results
            }
            Scorer::Remote(client, runtime, parallel, limit) => {
                let parallel = *parallel.get_or_insert_with(|| {
                    runtime.block_on(crate::llm::logprobs::parallel_texts(client, *limit))
                });
                runtime
                    .block_on(crate::llm::logprobs::score_texts(client, texts, parallel))
                    .into_iter()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect()
            }
            Scorer::None(reason) => vec![Err(reason.clone())],
            Scorer::LocalPending(..) => unreachable!("loaded above"),
        }
    }
}

/// Runs the likelihood tests of every model of `spec` that selects any, writing their
/// cells for `run`. Errors of one model skip its cells with the reason and are returned in
/// `errors`; only a cache error is an `Err`.
pub fn run_likelihood(
    spec: &Spec,
    identities: &[ModelIdentity],
    spec_dir: &Path,
    data_dir: Option<&Path>,
    offline: bool,
    store: &mut Store,
    run: RunId,
) -> anyhow::Result<LikelihoodOutcome> {
    let mut outcome = LikelihoodOutcome::default();
    let has_membership = |m: &ModelSpec| spec.model_tests(m).contains(&TestId::Membership);
    if spec.models.iter().all(|m| {
        spec.model_likelihood(m).is_empty() && !spec.model_row_order(m) && !has_membership(m)
    }) {
        return Ok(outcome);
    }
    let catalog = Catalog::open(data_dir)?;
    let pack = PromptPack::builtin();
    let mut datasets: HashMap<String, Dataset> = HashMap::new();
    let mut cells = Vec::new();
    let mut row_order_cells = Vec::new();
    let mut blind = BlindBaselines::new(spec.seed);
    // Every membership cell's blind baseline, whether or not its model scores texts.
    for model in spec.models.iter().filter(|m| has_membership(m)) {
        for name in spec.model_datasets(model) {
            if !datasets.contains_key(name) {
                datasets.insert(name.clone(), catalog.load(name)?);
            }
            for serialization in spec.model_serializations(model) {
                let ctx = ProbeContext {
                    dataset: &datasets[name],
                    serialization: &serialization,
                    seed: spec.seed,
                    pack: &pack,
                    variant: spec.variant,
                };
                // Where test 10 does not apply (a reason instead of rows) there is no
                // membership cell to stand beside.
                if let Ok(rows) = likelihood_rows(&ctx)? {
                    blind.original_vs_perturbed(&ctx, &rows);
                }
            }
        }
    }
    for (model, identity) in spec.models.iter().zip(identities) {
        let detectors = spec.model_likelihood(model);
        let row_order = spec.model_row_order(model);
        if detectors.is_empty() && !row_order {
            continue;
        }
        let mut scorer = Scorer::for_model(spec, model, spec_dir, offline);
        // What the model was trained on, when it is a checkpoint of a study (the rows it
        // saw give the detectors a ground truth).
        let exposure = super::local_exec::declared_exposure(model, spec_dir)?;
        let mut model_error: Option<String> = None;
        for name in spec.model_datasets(model) {
            if !datasets.contains_key(name) {
                datasets.insert(name.clone(), catalog.load(name)?);
            }
            let dataset = &datasets[name];
            if row_order {
                let live = model_error.is_none().then_some(&mut scorer);
                let (cell, failed) =
                    row_order_cell(spec, model, identity, dataset, live, store, &mut outcome)?;
                if let Some(reason) = failed.filter(|_| model_error.is_none()) {
                    // A model without log-probabilities is a skipped cell, not a failure.
                    if !matches!(scorer, Scorer::None(_)) {
                        outcome.errors.push(format!(
                            "model `{}`: row-order scoring failed: {reason}",
                            model.id
                        ));
                    }
                    model_error = Some(reason);
                }
                row_order_cells.push(cell);
            }
            let serializations = match detectors.is_empty() {
                true => Vec::new(),
                false => spec.model_serializations(model),
            };
            for serialization in serializations {
                let ctx = ProbeContext {
                    dataset,
                    serialization: &serialization,
                    seed: spec.seed,
                    pack: &pack,
                    variant: spec.variant,
                };
                let cell = |test: Detector, method: &str, stats, skipped: Option<String>| {
                    LikelihoodCellRow {
                        model: model.id.clone(),
                        dataset: dataset.id.clone(),
                        test: test.test_id().to_string(),
                        serialization: serialization.id.clone(),
                        seed: spec.seed,
                        method: method.to_string(),
                        stats,
                        skipped,
                        blind: None,
                        run_id: None,
                    }
                };
                let rows = match likelihood_rows(&ctx)? {
                    Ok(rows) => rows,
                    Err(reason) => {
                        cells.extend(
                            detectors
                                .iter()
                                .map(|&d| cell(d, "-", None, Some(reason.clone()))),
                        );
                        continue;
                    }
                };
                let original_vs_perturbed = blind.original_vs_perturbed(&ctx, &rows);
                let texts: Vec<String> = rows.iter().map(|row| row.text.clone()).collect();
                // After a model's first failure its other cells are only looked up.
                let live = model_error.is_none().then_some(&mut scorer);
                let (scores, failed) = score_texts(&texts, identity, live, store, &mut outcome)?;
                if let Some(reason) = model_error.clone().or(failed) {
                    if !matches!(scorer, Scorer::None(_)) && model_error.is_none() {
                        outcome.errors.push(format!(
                            "model `{}`: likelihood scoring failed: {reason}",
                            model.id
                        ));
                    }
                    model_error = Some(reason.clone());
                    cells.extend(detectors.iter().map(|&d| LikelihoodCellRow {
                        blind: original_vs_perturbed,
                        ..cell(d, "-", None, Some(reason.clone()))
                    }));
                    continue;
                }
                let method = scores.method(0);
                // The column-matched reference of `tabcontam rows` (a model without held-out
                // rows): as many synthetic rows as distinct originals, scored into the cache
                // beside them, with the blind baseline that says whether the match is fair.
                let originals: Vec<(usize, &str)> =
                    distinct(&texts, rows.iter().map(|r| r.original))
                        .into_iter()
                        .filter(|&(_, original)| original)
                        .map(|(i, _)| (rows[i].row, texts[i].as_str()))
                        .collect();
                if let Ok(matched) = matched_rows(&ctx, originals.len())? {
                    blind.original_vs_matched(&ctx, &originals, &matched);
                    let live = Some(&mut scorer);
                    if let (_, Some(reason)) =
                        score_texts(&matched, identity, live, store, &mut outcome)?
                    {
                        outcome.errors.push(format!(
                            "model `{}`: likelihood scoring of the column-matched rows of {} failed: {reason}",
                            model.id, dataset.id
                        ));
                    }
                }
                // Ground truth (a checkpoint with held-out rows of this dataset): every row
                // scored, rows trained on against rows never seen.
                let trained = exposure.as_ref().and_then(|e| e.rows_trained(&dataset.id));
                let truth: Option<(Vec<String>, Vec<bool>)> = trained.and_then(|trained| {
                    let seen: std::collections::HashSet<usize> = trained.iter().copied().collect();
                    let texts = row_texts(&ctx);
                    let labels: Vec<bool> = (0..texts.len()).map(|i| seen.contains(&i)).collect();
                    let both = labels.iter().any(|&l| l) && labels.iter().any(|&l| !l);
                    both.then_some((texts, labels))
                });
                let truth_blind = truth.as_ref().and_then(|(texts, labels)| {
                    blind.trained_vs_held_out(&ctx, &model.id, texts, labels)
                });
                let mut truth_scores: Option<Scored> = None;
                if let Some((texts, _)) = &truth {
                    let live = Some(&mut scorer);
                    match score_texts(texts, identity, live, store, &mut outcome)? {
                        (_, Some(reason)) => outcome.errors.push(format!(
                            "model `{}`: likelihood scoring of {} rows failed: {reason}",
                            model.id, dataset.id
                        )),
                        (scored, None) => truth_scores = Some(scored),
                    }
                }
                // Each cell's bootstrap (and dataset inference's split) seeded by its test.
                let seed_of = |test: &str| {
                    bootstrap_seed(spec.seed, &model.id, &dataset.id, test, &serialization.id)
                };
                for &detector in &detectors {
                    let seed = seed_of(detector.test_id());
                    let members = rows.iter().map(|row| row.original);
                    let stats = judge(detector, &texts, members, &scores, seed);
                    let skipped = match &stats {
                        Some(_) => None,
                        None if detector.needs_distribution() => Some(format!(
                            "needs the full next-token distribution (μ, σ), which `{method}` does not give; local models only"
                        )),
                        None => Some("no row had a scored token".into()),
                    };
                    cells.push(LikelihoodCellRow {
                        blind: original_vs_perturbed,
                        ..cell(detector, &method, stats, skipped)
                    });
                    if let (Some((texts, labels)), Some(scores)) = (&truth, &truth_scores) {
                        let id = detector.ground_truth_id();
                        let seed = seed_of(&id);
                        let trained = labels.iter().copied();
                        let stats = judge(detector, texts, trained, scores, seed);
                        let skipped = stats
                            .is_none()
                            .then(|| "no AUROC: a side had no scored row".to_string());
                        let mut row = cell(detector, &method, stats, skipped);
                        row.test = id;
                        row.blind = truth_blind;
                        cells.push(row);
                    }
                }
                // Dataset inference (Maini et al.) combines the detectors: one cell for
                // originals vs perturbed copies and, on a checkpoint, one for its trained vs
                // held-out rows. A combination needs at least two detectors.
                if detectors.len() >= 2 {
                    let mut inference_cell = |id: String,
                                              texts: &[String],
                                              labels: Vec<bool>,
                                              scores: &Scored,
                                              blind| {
                        let seed = seed_of(&id);
                        let judged = judge_dataset_inference(
                            &detectors,
                            texts,
                            labels.into_iter(),
                            scores,
                            seed,
                        );
                        let (stats, skipped) = match judged {
                            Ok(stats) => (Some(stats), None),
                            Err(reason) => (None, Some(reason)),
                        };
                        cells.push(LikelihoodCellRow {
                            test: id,
                            blind,
                            ..cell(detectors[0], &method, stats, skipped)
                        });
                    };
                    let members = rows.iter().map(|row| row.original).collect();
                    let id = dataset_inference::TEST_ID.to_string();
                    inference_cell(id, &texts, members, &scores, original_vs_perturbed);
                    if let (Some((texts, labels)), Some(scores)) = (&truth, &truth_scores) {
                        let id = dataset_inference::ground_truth_id();
                        inference_cell(id, texts, labels.clone(), scores, truth_blind);
                    }
                }
            }
        }
    }
    outcome.cells = cells.len() + row_order_cells.len();
    store.put_likelihood_cells(run, &cells)?;
    store.put_row_order_cells(run, &row_order_cells)?;
    store.put_blind_baselines(run, &blind.rows())?;
    Ok(outcome)
}

/// Test 17 on one (model, dataset): plans the shards (or records why the file's order
/// cannot be tested), scores every shard in file order and its permutations (cached like
/// the detectors' texts) and judges the rank sum. Returns the cell and the scoring
/// failure, if any (the cell then says it was skipped).
fn row_order_cell(
    spec: &Spec,
    model: &ModelSpec,
    identity: &ModelIdentity,
    dataset: &Dataset,
    scorer: Option<&mut Scorer>,
    store: &mut Store,
    outcome: &mut LikelihoodOutcome,
) -> anyhow::Result<(RowOrderCellRow, Option<String>)> {
    let mut cell = RowOrderCellRow {
        model: model.id.clone(),
        dataset: dataset.id.clone(),
        seed: spec.seed,
        method: "-".into(),
        blocked_by: Vec::new(),
        stats: None,
        skipped: None,
        run_id: None,
    };
    let table = &dataset.table;
    let plan = match row_order::plan(table, &dataset.id, spec.seed) {
        Ok(plan) => plan,
        Err(reason) => {
            cell.skipped = Some(reason);
            return Ok((cell, None));
        }
    };
    cell.blocked_by = plan.blocked_by.clone();
    // Per shard: the file order, then its permutations.
    let per_shard = 1 + row_order::PERMUTATIONS;
    let texts: Vec<String> = plan
        .shards
        .iter()
        .flat_map(|shard| {
            std::iter::once(&shard.rows)
                .chain(&shard.permutations)
                .map(|rows| row_order::shard_text(table, rows))
        })
        .collect();
    let (scored, failed) = score_texts(&texts, identity, scorer, store, outcome)?;
    if let Some(reason) = failed {
        cell.skipped = Some(reason.clone());
        return Ok((cell, Some(reason)));
    }
    let total = |i: usize| -> Option<f64> {
        scored
            .found
            .get(&scored.keys[i])
            .map(|(_, s)| s.logprobs.iter().sum())
    };
    let mut canonical = Vec::new();
    let mut permuted = Vec::new();
    for shard in 0..plan.shards.len() {
        let base = shard * per_shard;
        let (Some(file_order), Some(others)) = (
            total(base),
            (1..per_shard)
                .map(|j| total(base + j))
                .collect::<Option<Vec<f64>>>(),
        ) else {
            // Not in the cache and nothing may score it (`--offline`, another model failed).
            cell.skipped = Some("not every shard is scored (offline or an earlier failure)".into());
            return Ok((cell, None));
        };
        canonical.push(file_order);
        permuted.push(others);
    }
    cell.method = scored.method(0);
    cell.stats = row_order::judge(&canonical, &permuted);
    if cell.stats.is_none() {
        cell.skipped = Some("fewer than two shards".into());
    }
    Ok((cell, None))
}

/// Log-probabilities of texts under one model, by the texts' positions.
struct Scored {
    keys: Vec<ScoreKey>,
    found: HashMap<ScoreKey, (String, TokenLogprobs)>,
}

impl Scored {
    /// The `i`-th text's log-probabilities (present once scoring succeeded).
    fn scores(&self, i: usize) -> &TokenLogprobs {
        &self.found[&self.keys[i]].1
    }

    /// How the `i`-th text was scored, `-` when it was not.
    fn method(&self, i: usize) -> String {
        self.found
            .get(&self.keys[i])
            .map_or("-".to_string(), |(m, _)| m.clone())
    }
}

/// The membership rows and the ground-truth rows alike: reads the cached log-probabilities
/// of `texts` under `identity` and, given a `scorer`, scores the missing ones, each
/// distinct text once (the membership draws repeat rows), in chunks stored before the
/// next (an interrupted run keeps what it scored). Stops at the first failure and returns
/// it beside what was found. Counts per text (a text drawn twice counts twice) into
/// `outcome`; only a cache error is an `Err`.
fn score_texts(
    texts: &[String],
    identity: &ModelIdentity,
    scorer: Option<&mut Scorer>,
    store: &mut Store,
    outcome: &mut LikelihoodOutcome,
) -> anyhow::Result<(Scored, Option<String>)> {
    let requests: Vec<ScoreRequest> = texts
        .iter()
        .map(|text| ScoreRequest {
            model: identity.clone(),
            text: text.clone(),
        })
        .collect();
    let keys: Vec<_> = requests.iter().map(ScoreRequest::key).collect();
    let mut found = store.logprobs(&keys)?;
    outcome.cached += keys.iter().filter(|k| found.contains_key(k)).count() as u64;
    let mut failure = None;
    if let Some(scorer) = scorer {
        let mut seen = std::collections::HashSet::new();
        let missing: Vec<usize> = (0..keys.len())
            .filter(|&i| !found.contains_key(&keys[i]) && seen.insert(keys[i]))
            .collect();
        for indices in missing.chunks(SCORE_CHUNK) {
            let chunk: Vec<String> = indices.iter().map(|&i| texts[i].clone()).collect();
            for (&i, result) in indices.iter().zip(scorer.score(&chunk)) {
                match result {
                    Ok((method, scores)) => {
                        store.put_logprobs(&requests[i], method, &scores)?;
                        outcome.scored += 1;
                        found.insert(keys[i], (method.to_string(), scores));
                    }
                    Err(reason) => {
                        failure.get_or_insert(reason);
                    }
                }
            }
            if failure.is_some() {
                break;
            }
        }
    }
    Ok((Scored { keys, found }, failure))
}

/// One detector over labelled texts: the texts marked `true` (members, rows trained on)
/// against the others, each scored from its log-probabilities; a text the detector cannot
/// score is left out. `None` when a side is empty.
/// The first occurrence of each distinct (label, text), as (index, label): the membership
/// test draws rows with replacement, and a text counted five times is one observation, not
/// five (counted as five, the permutation p-value and the bootstrap treat it as independent
/// evidence and come out too small on a small table).
pub(super) fn distinct(texts: &[String], labels: impl Iterator<Item = bool>) -> Vec<(usize, bool)> {
    let mut seen = std::collections::HashSet::new();
    texts
        .iter()
        .zip(labels)
        .enumerate()
        .filter(|(_, (text, label))| seen.insert((*label, text.as_str())))
        .map(|(i, (_, label))| (i, label))
        .collect()
}

/// Dataset inference over the detectors that score every text (distinct texts only: a
/// row drawn twice must not sit in both the learning and the testing half): its Welch
/// p-value, beside the AUROC, TPR and ROC of its combined scores on the test halves. The
/// reason when it cannot be computed.
fn judge_dataset_inference(
    detectors: &[Detector],
    texts: &[String],
    labels: impl Iterator<Item = bool>,
    scored: &Scored,
    seed: u64,
) -> Result<DetectorStats, String> {
    let (mut suspect, mut held_out) = (Vec::new(), Vec::new());
    for (i, label) in distinct(texts, labels) {
        let features: Vec<Option<f64>> = detectors
            .iter()
            .map(|d| d.score(&texts[i], scored.scores(i)))
            .collect();
        match label {
            true => suspect.push(features),
            false => held_out.push(features),
        }
    }
    let (suspect, held_out) = dataset_inference::complete_features(&suspect, &held_out);
    if suspect
        .iter()
        .chain(&held_out)
        .next()
        .is_some_and(Vec::is_empty)
    {
        return Err("no detector scored every row".into());
    }
    let Some(inference) = dataset_inference::dataset_inference(&suspect, &held_out, seed) else {
        return Err(format!(
            "{} and {} distinct rows: dataset inference needs {} a side and scores that vary",
            suspect.len(),
            held_out.len(),
            dataset_inference::MIN_ROWS_PER_SET
        ));
    };
    let (positives, negatives) = &inference.test_scores;
    let mut stats = bootstrap_stats(positives, negatives, BOOTSTRAP_RESAMPLES, seed)
        .ok_or("the test halves have no AUROC")?;
    stats.p_value = inference.p_value;
    Ok(stats)
}

fn judge(
    detector: Detector,
    texts: &[String],
    labels: impl Iterator<Item = bool>,
    scored: &Scored,
    seed: u64,
) -> Option<DetectorStats> {
    let (mut positives, mut negatives) = (Vec::new(), Vec::new());
    for (i, label) in distinct(texts, labels) {
        let Some(score) = detector.score(&texts[i], scored.scores(i)) else {
            continue;
        };
        if label {
            positives.push(score);
        } else {
            negatives.push(score);
        }
    }
    bootstrap_stats(&positives, &negatives, BOOTSTRAP_RESAMPLES, seed)
}
