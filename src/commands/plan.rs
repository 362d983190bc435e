//! `tabcontam plan SPEC`: what a run would send, what the cache already holds, and the cost.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use crate::cli::PlanArgs;
use crate::run::plan::estimate_prompt_tokens;
use crate::run::session::{Prepared, prepare};
use crate::run::spec::Spec;
use crate::store::Store;

/// One model's line of the plan.
#[derive(Debug, Default, Serialize)]
pub struct ModelPlan {
    pub model: String,
    pub cells: usize,
    pub trials: usize,
    /// Distinct requests (identical prompts across tests and templates count once).
    pub requests: usize,
    pub cached: usize,
    pub to_send: usize,
    pub est_prompt_tokens: u64,
    /// Upper bound: every answer uses its full token budget.
    pub max_completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub est_cost_usd: Option<f64>,
}

/// Counts the cache hits of a prepared plan, per model.
pub fn summarize(
    prepared: &Prepared,
    cached: &std::collections::HashSet<crate::request::RequestKey>,
) -> Vec<ModelPlan> {
    let spec = &prepared.spec;
    let mut per_model: BTreeMap<usize, ModelPlan> = BTreeMap::new();
    for (index, model) in spec.models.iter().enumerate() {
        per_model.insert(
            index,
            ModelPlan {
                model: model.id.clone(),
                ..Default::default()
            },
        );
    }
    for cell in &prepared.plan.cells {
        let entry = per_model
            .get_mut(&cell.model)
            .expect("every cell's model is in the spec");
        entry.cells += 1;
        entry.trials += cell.trials.len();
    }
    for (key, source) in &prepared.plan.requests {
        let entry = per_model
            .get_mut(&source.model)
            .expect("every request's model is in the spec");
        entry.requests += 1;
        if cached.contains(key) {
            entry.cached += 1;
        } else {
            entry.to_send += 1;
            entry.est_prompt_tokens += estimate_prompt_tokens(&source.prompt.text);
            entry.max_completion_tokens += u64::from(source.prompt.max_tokens);
        }
    }
    for (index, entry) in per_model.iter_mut() {
        let model = &spec.models[*index];
        if let (Some(input), Some(output)) =
            (model.price_input_per_mtok, model.price_output_per_mtok)
        {
            entry.est_cost_usd = Some(
                (entry.est_prompt_tokens as f64 * input
                    + entry.max_completion_tokens as f64 * output)
                    / 1e6,
            );
        }
    }
    per_model.into_values().collect()
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let spec = Spec::load(&args.spec)?;
    let prepared = prepare(&spec, args.data.data_dir.as_deref(), &args.models)?;
    let store = Store::open_read_only(&args.cache.cache)?;
    let keys: Vec<_> = prepared.plan.requests.keys().copied().collect();
    let cached = store.cached_keys(&keys)?;
    let models = summarize(&prepared, &cached);
    let mut out = std::io::stdout().lock();
    if args.json {
        #[derive(Serialize)]
        struct PlanJson<'a> {
            spec: &'a str,
            requests: usize,
            cached: usize,
            to_send: usize,
            models: &'a [ModelPlan],
        }
        let json = PlanJson {
            spec: &prepared.spec.name,
            requests: keys.len(),
            cached: cached.len(),
            to_send: keys.len() - cached.len(),
            models: &models,
        };
        serde_json::to_writer_pretty(&mut out, &json)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "plan for `{}` (cache {}):",
        prepared.spec.name,
        args.cache.cache.display()
    )?;
    writeln!(
        out,
        "{:<24} {:>6} {:>8} {:>9} {:>8} {:>8} {:>12} {:>12} {:>10}",
        "MODEL",
        "CELLS",
        "TRIALS",
        "REQUESTS",
        "CACHED",
        "TO SEND",
        "PROMPT TOK",
        "MAX OUT TOK",
        "COST USD"
    )?;
    for m in &models {
        writeln!(
            out,
            "{:<24} {:>6} {:>8} {:>9} {:>8} {:>8} {:>12} {:>12} {:>10}",
            m.model,
            m.cells,
            m.trials,
            m.requests,
            m.cached,
            m.to_send,
            m.est_prompt_tokens,
            m.max_completion_tokens,
            m.est_cost_usd
                .map(|c| format!("{c:.2}"))
                .unwrap_or_else(|| "-".into())
        )?;
    }
    writeln!(
        out,
        "total: {} requests, {} cached, {} to send",
        keys.len(),
        cached.len(),
        keys.len() - cached.len()
    )?;
    Ok(ExitCode::SUCCESS)
}
