//! `tabcontam status`: runs, cache size and hit statistics, failures.

use std::io::Write;
use std::process::ExitCode;

use crate::cli::StatusArgs;
use crate::store::Store;

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let store = Store::open_read_only(&args.cache.cache)?;
    let report = store.status()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "cache {} ({:.1} MB, schema v{})",
        report.path,
        report.file_bytes as f64 / 1e6,
        report.schema_version
    )?;
    writeln!(
        out,
        "{} responses over {} distinct prompts; {} models, {} datasets, {} runs, {} trials, {} cells, {} failures",
        report.responses,
        report.prompts,
        report.models,
        report.datasets,
        report.runs,
        report.trials,
        report.cells,
        report.failures
    )?;
    if !report.per_model.is_empty() {
        writeln!(
            out,
            "\n{:<28} {:<18} {:>9} {:>12} {:>12}",
            "MODEL", "BACKEND", "RESPONSES", "PROMPT TOK", "OUTPUT TOK"
        )?;
        for m in &report.per_model {
            let name = if m.model_ids.is_empty() {
                m.model.clone()
            } else {
                m.model_ids.join(",")
            };
            writeln!(
                out,
                "{:<28} {:<18} {:>9} {:>12} {:>12}",
                name,
                m.backend.id(),
                m.responses,
                m.prompt_tokens,
                m.completion_tokens
            )?;
        }
    }
    if !report.last_runs.is_empty() {
        writeln!(
            out,
            "\n{:>4} {:<20} {:<12} {:>9} {:>8} {:>6} {:>7}  STARTED",
            "RUN", "SPEC", "STATUS", "REQUESTS", "CACHED", "SENT", "FAILED"
        )?;
        for r in &report.last_runs {
            let hit = if r.counts.requests > 0 {
                100.0 * r.counts.cached as f64 / r.counts.requests as f64
            } else {
                0.0
            };
            writeln!(
                out,
                "{:>4} {:<20} {:<12} {:>9} {:>8} {:>6} {:>7}  {} ({hit:.0}% cached)",
                r.id,
                r.spec_name,
                r.status.id(),
                r.counts.requests,
                r.counts.cached,
                r.counts.sent,
                r.counts.failed,
                r.started_at
            )?;
            if let Some(reason) = &r.reason {
                writeln!(out, "     {}: {reason}", r.status.id())?;
            }
        }
    }
    if !report.recent_failures.is_empty() {
        writeln!(out, "\nrecent failures:")?;
        for f in &report.recent_failures {
            writeln!(
                out,
                "  run {} {} {} after {} attempts: {}",
                f.run_id, f.model, f.kind, f.attempts, f.message
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
