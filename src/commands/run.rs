//! `tabcontam run SPEC`: send what the cache lacks, then decide every trial.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::RunArgs;
use crate::decide::Dictionary;
use crate::llm::client::Client;
use crate::llm::{BackendKind, Request, RequestKey};
use crate::run::decide::decide;
use crate::run::execute::{ModelProgress, ModelWork, send_all};
use crate::run::local_exec::{ensure_weights, send_local, weights_path};
use crate::run::session::prepare;
use crate::run::spec::Spec;
use crate::store::{ModelRow, RunCounts, RunStatus, Store};

/// Exit code after Ctrl-C (128 + SIGINT), as shells expect.
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Serialize)]
struct RunSummary {
    run_id: i64,
    spec: String,
    status: &'static str,
    counts: RunCounts,
    /// Requests not in the cache that were not sent (offline, interrupted or failed).
    missing: u64,
    cells_decided: usize,
    cells_incomplete: usize,
    trials_decided: usize,
    models: HashMap<String, ModelProgress>,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // Local weights first: their digest is part of every request key.
    let spec_dir = args
        .spec
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf();
    let mut local_weights: HashMap<String, std::path::PathBuf> = HashMap::new();
    for model in &Spec::load(&args.spec)?.models {
        if model.backend != BackendKind::Local
            || (!args.models.is_empty() && !args.models.contains(&model.id))
        {
            continue;
        }
        let path = weights_path(model, &spec_dir);
        let path = if path.exists() {
            path
        } else if args.offline {
            anyhow::bail!(
                "{}: model `{}`: weights not found at {} and --offline forbids downloading them; run once without --offline",
                args.spec.display(),
                model.id,
                path.display()
            );
        } else {
            ensure_weights(model, &spec_dir)?
        };
        local_weights.insert(model.id.clone(), path);
    }
    let prepared = prepare(&args.spec, args.data.data_dir.as_deref(), &args.models)?;
    let spec = &prepared.spec;
    let plan = &prepared.plan;
    let keys: Vec<RequestKey> = plan.requests.keys().copied().collect();

    // Look first, write later: a bad spec, a missing key or a foreign cache file must fail
    // before anything is written.
    let cached: HashSet<RequestKey> =
        Store::open_read_only(&args.cache.cache)?.cached_keys(&keys)?;
    let mut missing_per_model: Vec<Vec<&RequestKey>> = vec![Vec::new(); spec.models.len()];
    for (key, source) in &plan.requests {
        if !cached.contains(key) {
            missing_per_model[source.model].push(key);
        }
    }
    let mut work = Vec::new();
    let mut local_work: Vec<(usize, Vec<Request>)> = Vec::new();
    let mut cached_per_model = Vec::new();
    let mut offline_missing = 0u64;
    for (index, model) in spec.models.iter().enumerate() {
        let missing = &missing_per_model[index];
        if missing.is_empty() {
            continue;
        }
        let remote = model.backend != BackendKind::Local;
        if args.offline && remote {
            offline_missing += missing.len() as u64;
            continue;
        }
        if !remote {
            // Local inference needs no network: it runs offline too.
            let requests = missing
                .iter()
                .map(|key| plan.request(spec, &plan.requests[*key]))
                .collect();
            local_work.push((index, requests));
            continue;
        }
        let client = Client::new(spec.client_config(model))
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.spec.display()))?;
        let requests: Vec<Request> = missing
            .iter()
            .map(|key| plan.request(spec, &plan.requests[*key]))
            .collect();
        let cached_count =
            plan.requests.values().filter(|s| s.model == index).count() - requests.len();
        cached_per_model.push(cached_count as u64);
        work.push(ModelWork {
            id: model.id.clone(),
            client,
            requests,
        });
    }

    if !work.is_empty() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            for model in &work {
                model
                    .client
                    .preflight(std::time::Duration::from_secs(5))
                    .await
                    .map_err(|e| anyhow::anyhow!("{}: {e}", args.spec.display()))?;
            }
            anyhow::Ok(())
        })?;
    }
    let dictionary = Dictionary::shipped()?;
    let mut store = Store::open(&args.cache.cache)?;
    for (index, model) in spec.models.iter().enumerate() {
        store.upsert_model(&ModelRow {
            id: model.id.clone(),
            label: model.label.clone().unwrap_or_else(|| model.id.clone()),
            family: model.family.clone(),
            identity: plan.identities[index].clone(),
            release_date: model.release_date.clone(),
            training_cutoff: model.training_cutoff.clone(),
            updated_at: None,
        })?;
    }
    for row in &prepared.datasets {
        store.upsert_dataset(row)?;
    }
    let run_id = store.begin_run(&spec.name, &spec.text)?;
    let to_send: u64 = work.iter().map(|w| w.requests.len() as u64).sum::<u64>()
        + local_work.iter().map(|(_, r)| r.len() as u64).sum::<u64>();
    let show_progress = !args.quiet && !args.json && std::io::stderr().is_terminal();
    if !args.json {
        eprintln!(
            "run {run_id} of `{}`: {} requests, {} cached, {} to send{}",
            spec.name,
            keys.len(),
            cached.len(),
            to_send,
            if offline_missing > 0 {
                format!(", {offline_missing} missing (offline)")
            } else {
                String::new()
            }
        );
    }
    let (mut store, mut outcome) = if work.is_empty() {
        (store, Default::default())
    } else {
        send_all(store, run_id, work, &cached_per_model, show_progress)?
    };
    for (index, requests) in local_work {
        if outcome.interrupted {
            break;
        }
        let model = &spec.models[index];
        let started = std::time::Instant::now();
        let (progress, interrupted) = send_local(
            &mut store,
            run_id,
            model,
            &local_weights[&model.id],
            requests,
            show_progress,
        )?;
        outcome.wall += started.elapsed();
        outcome.interrupted |= interrupted;
        outcome.per_model.insert(model.id.clone(), progress);
    }

    let mut counts = RunCounts {
        requests: keys.len() as u64,
        cached: cached.len() as u64,
        ..Default::default()
    };
    for p in outcome.per_model.values() {
        counts.sent += p.sent;
        counts.failed += p.failed;
        counts.prompt_tokens += p.prompt_tokens;
        counts.completion_tokens += p.completion_tokens;
    }
    let responses = store.responses(&keys)?;
    let decisions = decide(spec, plan, &responses, &dictionary, spec.alg1_profile);
    store.put_trials(run_id, &decisions.trials)?;
    store.put_cells(run_id, &decisions.cells)?;
    let missing = keys.len() as u64 - responses.len() as u64;
    let status = if outcome.interrupted {
        RunStatus::Interrupted
    } else if counts.failed > 0 || missing > 0 {
        RunStatus::Failed
    } else {
        RunStatus::Finished
    };
    store.finish_run(run_id, status, &counts)?;

    let summary = RunSummary {
        run_id: run_id.0,
        spec: spec.name.clone(),
        status: status.id(),
        counts,
        missing,
        cells_decided: decisions.cells.len(),
        cells_incomplete: decisions.incomplete_cells,
        trials_decided: decisions.trials.len(),
        models: outcome.per_model.clone().into_iter().collect(),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "run {} {}: {} requests ({} cached, {} sent, {} failed, {} missing) in {:.1}s; {} cells decided, {} incomplete",
            summary.run_id,
            summary.status,
            counts.requests,
            counts.cached,
            counts.sent,
            counts.failed,
            missing,
            outcome.wall.as_secs_f64(),
            summary.cells_decided,
            summary.cells_incomplete
        )?;
        for (model, p) in &outcome.per_model {
            if p.failed > 0 {
                let kinds: Vec<String> = p
                    .failures
                    .iter()
                    .map(|(k, n)| format!("{k} ×{n}"))
                    .collect();
                writeln!(
                    out,
                    "  {model}: {} failed after retries ({})",
                    p.failed,
                    kinds.join(", ")
                )?;
            }
            if let Some(reason) = &p.stopped {
                writeln!(out, "  {model}: stopped sending: {reason}")?;
            }
        }
        if missing > 0 && !outcome.interrupted {
            writeln!(
                out,
                "  rerun the same command to send the {missing} missing requests (nothing received is sent again)"
            )?;
        }
    }
    if outcome.interrupted {
        eprintln!("interrupted: every response received so far is stored; rerun to continue");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    if counts.failed > 0 || (missing > 0 && !args.offline) {
        return Ok(ExitCode::FAILURE);
    }
    if missing > 0 {
        // Offline with gaps: the results are incomplete, which scripts must be able to see.
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
