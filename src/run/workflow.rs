//! The run workflow, one call for any front end: local weights, plan, cache lookup,
//! preflight, recording the run, sending (remote and local at once), deciding every cell
//! whose answers are stored, and recording how the run ended and why.
//!
//! Architecture Invariant: once [`Store::begin_run`] has recorded a run, the run is always
//! finished: `finished`, `interrupted`, or `failed` with a one-line reason. An error of a
//! local model, of a remote model or of the executor itself fails the run but never skips
//! deciding the answers that are stored. Errors before `begin_run` (bad spec, missing
//! weights or key, unreachable server, foreign cache) write nothing at all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::decide::decide;
use super::execute::{ModelProgress, ModelWork, ProgressMode, SendOutcome, Work, send_all};
use super::local_exec::{LocalWork, ensure_weights, weights_path};
use super::served::{ServedBefore, ServedChange, changes_after_run, served_start};
use super::session::{Prepared, prepare};
use super::shard::Shard;
use super::spec::Spec;
use crate::decide::Dictionary;
use crate::llm::client::Client;
use crate::request::{BackendKind, RequestKey};
use crate::store::{ModelRow, RunCounts, RunId, RunStatus, Store};

/// How long a remote model may take to answer the preflight check.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The experiment spec (TOML).
    pub spec: PathBuf,
    /// Only these models of the spec (all when empty).
    pub only_models: Vec<String>,
    /// Dataset files are looked up here first.
    pub data_dir: Option<PathBuf>,
    /// The SQLite cache.
    pub cache: PathBuf,
    /// Answer from the cache only (local models still run: they need no network).
    pub offline: bool,
    /// Progress on stderr: bars on a terminal, else one line per model every interval.
    pub progress: ProgressMode,
    /// Send only this shard's share of the missing requests (`--shard I/N`).
    pub shard: Option<Shard>,
    /// `--pin-served`: ask each remote model with cached answers which version it serves
    /// now, and key its answers with a revision naming that version when it changed
    /// (see [`super::served`]).
    pub pin_served: bool,
}

/// The run as recorded, before anything is sent.
#[derive(Debug, Clone, Serialize)]
pub struct RunStart {
    pub run_id: RunId,
    pub spec: String,
    /// Requests the plan needs.
    pub requests: u64,
    /// Of those, answered from the cache.
    pub cached: u64,
    /// Of those, to send now (remote and local).
    pub to_send: u64,
    /// Of those, not sent because the run is offline.
    pub offline_missing: u64,
    /// Of those, not sent because another shard sends them (`--shard`).
    pub other_shards: u64,
    /// Requests sent by `--pin-served` to ask which version a model serves (their answers
    /// are stored like any other and counted as cached).
    pub served_probes: u64,
}

/// Hears about a run as it goes (the result itself is [`run_experiment`]'s return value).
pub trait RunObserver {
    /// The run is recorded; sending starts.
    fn started(&mut self, _start: &RunStart) {}
}

/// An observer that ignores everything.
impl RunObserver for () {}

/// How a run ended.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: RunId,
    pub spec: String,
    pub status: RunStatus,
    /// Why the run failed, in one line (`None` unless `status` is `failed`).
    pub reason: Option<String>,
    pub counts: RunCounts,
    /// Requests without a stored response after the run (offline, interrupted or failed),
    /// not counting those left to other shards.
    pub missing: u64,
    /// Requests without a stored response that other shards send (`--shard`); their cells
    /// stay undecided until the shards' caches are merged (`tabcontam cache merge`).
    pub other_shards: u64,
    pub cells_decided: usize,
    pub cells_incomplete: usize,
    pub trials_decided: usize,
    pub models: BTreeMap<String, ModelProgress>,
    /// An error of the executor itself (the cache could not be written, a thread died).
    pub executor_error: Option<String>,
    /// The likelihood tests' phase (cells written, texts scored and cached).
    pub likelihood: super::likelihood::LikelihoodOutcome,
    /// Requests sent by `--pin-served` to ask which version a model serves.
    pub served_probes: u64,
    /// Models whose server reported another version than their cached answers': pinned
    /// to a new revision (`--pin-served`) or reused and mixed (a warning).
    pub served_changes: Vec<ServedChange>,
    /// Time spent sending.
    #[serde(skip)]
    pub wall: Duration,
}

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Before the run was recorded: nothing was written.
    #[error("{0:#}")]
    Setup(anyhow::Error),
    /// The run was recorded but its end could not be stored normally (the cache failed
    /// while deciding); it was marked `failed` with `reason` if the cache allowed it.
    #[error("run {run} failed: {reason}")]
    Unfinished { run: RunId, reason: String },
}

/// Everything needed once the run is recorded.
struct Ready {
    prepared: Prepared,
    store: Store,
    work: Work,
    keys: Vec<RequestKey>,
    cached: u64,
    offline_missing: u64,
    other_shards: u64,
    dictionary: Dictionary,
    /// Per model, the served versions of its cached answers before the run.
    served_before: ServedBefore,
    /// The changes found before sending (`--pin-served`, an earlier pin undone).
    served_changes: Vec<ServedChange>,
    served_probes: u64,
}

/// Runs the experiment of `settings`: sends what the cache lacks and decides every trial.
/// A failure of a model or of the executor does not make this an `Err`: the report says
/// `failed` with the reason, and every answered cell is decided.
pub fn run_experiment(
    settings: &RunSettings,
    observer: &mut dyn RunObserver,
) -> Result<RunReport, RunError> {
    let spec = Spec::load(&settings.spec).map_err(|e| RunError::Setup(e.into()))?;
    run_loaded_experiment(&spec, settings, observer)
}

/// [`run_experiment`] for a spec its caller has loaded already (`settings.spec` is its path).
pub fn run_loaded_experiment(
    spec: &Spec,
    settings: &RunSettings,
    observer: &mut dyn RunObserver,
) -> Result<RunReport, RunError> {
    run_keeping_store(spec, settings, observer).map(|(report, _)| report)
}

/// [`run_loaded_experiment`] that hands back the cache it opened, for a caller that reads
/// the results next (the calibration study): a command opens its cache once.
pub fn run_keeping_store(
    spec: &Spec,
    settings: &RunSettings,
    observer: &mut dyn RunObserver,
) -> Result<(RunReport, Store), RunError> {
    let Ready {
        prepared,
        mut store,
        work,
        keys,
        cached,
        offline_missing,
        other_shards,
        dictionary,
        served_before,
        mut served_changes,
        served_probes,
    } = get_ready(spec, settings).map_err(RunError::Setup)?;
    let spec = &prepared.spec;
    let run_id = store
        .begin_run(&spec.name, &spec.text)
        .map_err(|e| RunError::Setup(e.into()))?;
    observer.started(&RunStart {
        run_id,
        spec: spec.name.clone(),
        requests: keys.len() as u64,
        cached,
        to_send: work.requests(),
        offline_missing,
        other_shards,
        served_probes,
    });

    // From here on every path ends in `finish_run`.
    let (store, outcome) = if work.is_empty() {
        (store, SendOutcome::default())
    } else {
        match send_all(store, run_id, work, &settings.progress) {
            Ok(sent) => sent,
            Err(error) => {
                // The store went down with the executor: reopen the cache (WAL allows a
                // second connection) to decide what was stored and record the failure.
                let reason = format!("the executor failed: {error:#}");
                match Store::open(&settings.cache) {
                    Ok(store) => (
                        store,
                        SendOutcome {
                            error: Some(reason),
                            ..Default::default()
                        },
                    ),
                    Err(e) => {
                        return Err(RunError::Unfinished {
                            run: run_id,
                            reason: format!(
                                "{reason}; reopening the cache to record it failed too: {e}"
                            ),
                        });
                    }
                }
            }
        }
    };
    // The likelihood tests score texts rather than generate: their own phase, after the
    // generation requests, with their own cache table. A model that cannot be scored
    // fails the run (with the reason) like a model that stopped.
    let mut store = store;
    let mut outcome = outcome;
    let spec_dir = settings.spec.parent().unwrap_or(Path::new("."));
    let likelihood = if outcome.interrupted {
        super::likelihood::LikelihoodOutcome::default()
    } else {
        match super::likelihood::run_likelihood(
            spec,
            &prepared.plan.identities,
            spec_dir,
            settings.data_dir.as_deref(),
            settings.offline,
            &mut store,
            run_id,
        ) {
            Ok(done) => done,
            Err(error) => super::likelihood::LikelihoodOutcome {
                errors: vec![format!("the likelihood tests failed: {error:#}")],
                ..Default::default()
            },
        }
    };
    if !likelihood.errors.is_empty() {
        let joined = likelihood.errors.join("; ");
        outcome.error = Some(match outcome.error.take() {
            Some(earlier) => format!("{earlier}; {joined}"),
            None => joined,
        });
    }
    // What the servers reported in this run against what the cache held before: a model
    // whose new answers come from another version warns (its old answers were reused).
    let served_after: Vec<_> = prepared
        .plan
        .identities
        .iter()
        .zip(&served_before)
        .map(|(identity, before)| {
            before
                .as_ref()
                .and_then(|_| store.served_versions(identity).ok())
        })
        .collect();
    served_changes.extend(changes_after_run(
        spec,
        &prepared.plan,
        &served_before,
        &served_after,
    ));
    let (mut report, store) = decide_and_finish(
        store,
        run_id,
        &prepared,
        &keys,
        cached,
        &dictionary,
        outcome,
        settings.offline,
        settings.shard,
    )?;
    report.likelihood = likelihood;
    report.served_probes = served_probes;
    report.served_changes = served_changes;
    Ok((report, store))
}

/// Everything before the run is recorded. Fails without writing anything: weights are
/// fetched, the spec planned, the cache read, servers checked, and only then is the cache
/// opened for writing.
fn get_ready(spec: &Spec, settings: &RunSettings) -> anyhow::Result<Ready> {
    // Local weights first: their digest is part of every request key.
    let local_weights = local_weights(spec, settings)?;
    let mut prepared = prepare(spec, settings.data_dir.as_deref(), &settings.only_models)?;

    // Look first, write later: a bad spec, a missing key or a foreign cache file must fail
    // before anything is written. One connection serves the look and the writes; a missing
    // cache is created only once the checks below have passed.
    let mut store = Store::open_for_run(&settings.cache)?;
    let served = served_start(
        &mut prepared,
        &store,
        settings.pin_served && !settings.offline,
        &settings.spec,
    )?;
    let spec = &prepared.spec;
    let plan = &prepared.plan;
    let keys: Vec<RequestKey> = plan.requests.keys().copied().collect();
    let mut cached: HashSet<RequestKey> = store.cached_keys(&keys)?;
    // A probe's answer is the answer to its request: stored below, never sent again.
    let probe_answers: Vec<_> = served
        .probe_answers
        .into_iter()
        .filter(|(request, _)| cached.insert(request.key()))
        .collect();
    let mut missing_per_model: Vec<Vec<&RequestKey>> = vec![Vec::new(); spec.models.len()];
    let mut planned_per_model = vec![0u64; spec.models.len()];
    let mut other_shards = 0u64;
    for (key, source) in &plan.requests {
        planned_per_model[source.model] += 1;
        if cached.contains(key) {
            continue;
        }
        if settings.shard.is_some_and(|shard| !shard.owns(key)) {
            other_shards += 1;
        } else {
            missing_per_model[source.model].push(key);
        }
    }
    let mut work = Work::default();
    let mut offline_missing = 0u64;
    for (index, model) in spec.models.iter().enumerate() {
        let missing = &missing_per_model[index];
        if missing.is_empty() {
            continue;
        }
        let remote = model.backend != BackendKind::Local;
        if settings.offline && remote {
            offline_missing += missing.len() as u64;
            continue;
        }
        let requests: Vec<_> = missing
            .iter()
            .map(|key| plan.request(spec, &plan.requests[*key]))
            .collect();
        // What this model does not send now counts as done in its progress (cached, or
        // another shard's).
        let cached = planned_per_model[index] - requests.len() as u64;
        if remote {
            let client = Client::new(spec.client_config(model))
                .map_err(|e| anyhow::anyhow!("{}: {e}", settings.spec.display()))?;
            work.remote.push(ModelWork {
                id: model.id.clone(),
                client,
                requests,
                cached,
                price_per_mtok: model.price_input_per_mtok.zip(model.price_output_per_mtok),
            });
        } else {
            // Local inference needs no network: it runs offline too.
            work.local.push(LocalWork {
                spec: model.clone(),
                weights: local_weights[&model.id].clone(),
                requests,
                cached,
            });
        }
    }

    if !work.remote.is_empty() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            for model in &work.remote {
                model
                    .client
                    .preflight(PREFLIGHT_TIMEOUT)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}: {e}", settings.spec.display()))?;
            }
            anyhow::Ok(())
        })?;
    }
    let dictionary = Dictionary::shipped()?;
    store.create_if_missing()?;
    let spec_dir = settings.spec.parent().unwrap_or(Path::new("."));
    for (index, model) in spec.models.iter().enumerate() {
        let exposure = super::local_exec::declared_exposure(model, spec_dir)?;
        store.upsert_model(&ModelRow {
            id: model.id.clone(),
            label: model.label.clone().unwrap_or_else(|| model.id.clone()),
            family: model.family.clone(),
            identity: plan.identities[index].clone(),
            release_date: model.release_date.clone(),
            training_cutoff: model.training_cutoff.clone(),
            exposure: exposure.clone(),
            // A checkpoint's manifest gives its step when the spec does not.
            step: model.step.or(exposure.and_then(|e| e.step)),
            updated_at: None,
        })?;
    }
    for row in &prepared.datasets {
        store.upsert_dataset(row)?;
    }
    store.put_responses(probe_answers.iter().map(|(q, r)| (q, r)))?;
    Ok(Ready {
        served_before: served.before,
        served_changes: served.changes,
        served_probes: served.probes,
        cached: cached.len() as u64,
        prepared,
        store,
        work,
        keys,
        offline_missing,
        other_shards,
        dictionary,
    })
}

/// The weights of every local model of the run, fetching the default model if needed.
fn local_weights(spec: &Spec, settings: &RunSettings) -> anyhow::Result<HashMap<String, PathBuf>> {
    let spec_dir = settings
        .spec
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut weights = HashMap::new();
    for model in &spec.models {
        if model.backend != BackendKind::Local
            || (!settings.only_models.is_empty() && !settings.only_models.contains(&model.id))
        {
            continue;
        }
        let path = weights_path(model, &spec_dir);
        let is_checkpoint = model.base.is_some()
            && spec.calibration.as_ref().is_some_and(|study| {
                study
                    .checkpoints(&spec_dir, &spec.name)
                    .iter()
                    .any(|c| c.model_id == model.id)
            });
        let path = if path.exists() {
            path
        } else if is_checkpoint {
            anyhow::bail!(
                "{}: model `{}`: the calibration checkpoint {} is not built yet; `tabcontam calibrate {}` builds it, then runs the study",
                settings.spec.display(),
                model.id,
                path.display(),
                settings.spec.display()
            );
        } else if settings.offline {
            anyhow::bail!(
                "{}: model `{}`: weights not found at {} and --offline forbids downloading them; run once without --offline",
                settings.spec.display(),
                model.id,
                path.display()
            );
        } else {
            ensure_weights(model, &spec_dir)
                .map_err(|e| anyhow::anyhow!("{}: {e:#}", settings.spec.display()))?
        };
        weights.insert(model.id.clone(), path);
    }
    Ok(weights)
}

/// Decides every trial whose answer is stored and records how the run ended. Even when
/// deciding fails, the run is marked `failed` (if the cache still takes writes).
#[allow(clippy::too_many_arguments)]
fn decide_and_finish(
    mut store: Store,
    run_id: RunId,
    prepared: &Prepared,
    keys: &[RequestKey],
    cached: u64,
    dictionary: &Dictionary,
    outcome: SendOutcome,
    offline: bool,
    shard: Option<Shard>,
) -> Result<(RunReport, Store), RunError> {
    let spec = &prepared.spec;
    let plan = &prepared.plan;
    let mut counts = RunCounts {
        requests: keys.len() as u64,
        cached,
        ..Default::default()
    };
    for p in outcome.per_model.values() {
        counts.sent += p.sent;
        counts.failed += p.failed;
        counts.prompt_tokens += p.prompt_tokens;
        counts.completion_tokens += p.completion_tokens;
    }
    let decided = (|| -> crate::store::Result<_> {
        let responses = store.responses(keys)?;
        let decisions = decide(spec, plan, &responses, dictionary, spec.alg1_profile);
        store.put_decisions(run_id, &decisions.trials, &decisions.cells)?;
        let answered: HashSet<RequestKey> = responses.into_keys().collect();
        Ok((answered, decisions))
    })();
    let (responses, decisions) = match decided {
        Ok(decided) => decided,
        Err(error) => {
            let reason = [
                failure_reason(&outcome, 0, offline),
                Some(format!("deciding the stored answers failed: {error}")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ");
            let recorded =
                store.finish_run_with_reason(run_id, RunStatus::Failed, &counts, Some(&reason));
            let reason = match recorded {
                Ok(()) => reason,
                Err(e) => format!("{reason}; recording the failure failed too: {e}"),
            };
            return Err(RunError::Unfinished {
                run: run_id,
                reason,
            });
        }
    };
    let (mut missing, mut other_shards) = (0u64, 0u64);
    for key in keys.iter().filter(|key| !responses.contains(key)) {
        if shard.is_some_and(|shard| !shard.owns(key)) {
            other_shards += 1;
        } else {
            missing += 1;
        }
    }
    let (status, reason) = if outcome.interrupted {
        (RunStatus::Interrupted, None)
    } else {
        match failure_reason(&outcome, missing, offline) {
            Some(reason) => (RunStatus::Failed, Some(reason)),
            None => (RunStatus::Finished, None),
        }
    };
    store
        .finish_run_with_reason(run_id, status, &counts, reason.as_deref())
        .map_err(|e| RunError::Unfinished {
            run: run_id,
            reason: format!("recording the end of the run failed: {e}"),
        })?;
    let report = RunReport {
        run_id,
        spec: spec.name.clone(),
        status,
        reason,
        counts,
        missing,
        other_shards,
        cells_decided: decisions.cells.len(),
        cells_incomplete: decisions.incomplete_cells,
        trials_decided: decisions.trials.len(),
        models: outcome.per_model,
        executor_error: outcome.error,
        likelihood: Default::default(),
        served_probes: 0,
        served_changes: Vec::new(),
        wall: outcome.wall,
    };
    Ok((report, store))
}

/// Why a run that was not interrupted failed, in one line; `None` when it did not fail.
/// The executor's own error first, then each model that stopped or had failed requests,
/// then requests left unanswered without any error (offline).
fn failure_reason(outcome: &SendOutcome, missing: u64, offline: bool) -> Option<String> {
    let mut parts: Vec<String> = outcome.error.iter().cloned().collect();
    for (id, p) in &outcome.per_model {
        if let Some(stopped) = &p.stopped {
            parts.push(format!("model `{id}`: {stopped}"));
        } else if p.failed > 0 {
            let kinds: Vec<String> = p
                .failures
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect();
            parts.push(format!(
                "model `{id}`: {} requests failed after retries ({})",
                p.failed,
                kinds.join(", ")
            ));
        }
    }
    if parts.is_empty() && missing > 0 {
        parts.push(if offline {
            format!("{missing} requests are not in the cache and --offline sends nothing")
        } else {
            format!("{missing} requests were not answered")
        });
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
