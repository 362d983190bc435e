//! `tabcontam cache merge|export`: bring caches of several machines together; hand a
//! cache to dataframe tools as Parquet.

use std::io::Write;
use std::process::ExitCode;

use crate::cli::{CacheCommand, ExportFormat};
use crate::store::{Store, check_merge_inputs};

pub fn run(command: CacheCommand) -> anyhow::Result<ExitCode> {
    match command {
        CacheCommand::Merge { out, inputs, json } => merge(&out, &inputs, json),
        CacheCommand::Export {
            dir,
            format: ExportFormat::Parquet,
            cache,
            json,
        } => export(&cache.cache, &dir, json),
    }
}

fn merge(
    out: &std::path::Path,
    inputs: &[std::path::PathBuf],
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Inputs first: a bad one must not leave a new, empty OUT behind.
    check_merge_inputs(out, inputs)?;
    let mut store = Store::open(out)?;
    let report = store.merge_from(inputs)?;
    let mut stdout = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut stdout, &report)?;
        writeln!(stdout)?;
        return Ok(ExitCode::SUCCESS);
    }
    for input in &report.inputs {
        writeln!(
            stdout,
            "{}: {} responses added ({} already present, {} conflicts), {} requests, {} runs, {} failures, {} cells ({} trials) taken, {} models and {} datasets added or updated",
            input.path.display(),
            input.responses_added,
            input.responses_already_present,
            input.conflicts,
            input.requests_added,
            input.runs_added,
            input.failures_added,
            input.cells_taken,
            input.trials_taken,
            input.models_added_or_updated,
            input.datasets_added_or_updated,
        )?;
        for key in &input.conflict_keys {
            writeln!(
                stdout,
                "  conflict: request {key} has another answer there; {} keeps its own",
                out.display()
            )?;
        }
    }
    let conflicts = report.conflicts();
    writeln!(
        stdout,
        "merged {} caches into {}; {conflicts} conflicting answers (same request, different text: the first answer is kept)",
        report.inputs.len(),
        out.display()
    )?;
    writeln!(
        stdout,
        "cells whose requests were split over several caches are decided by `tabcontam run SPEC --offline --cache {}` (sends nothing)",
        out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

fn export(cache: &std::path::Path, dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    if !cache.exists() {
        anyhow::bail!(
            "no cache at {}: run an experiment first (`tabcontam run SPEC`) or pass --cache",
            cache.display()
        );
    }
    let store = Store::open_read_only(cache)?;
    let written = crate::analyze::export::export_parquet(&store, dir)?;
    let mut stdout = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut stdout, &written)?;
        writeln!(stdout)?;
        return Ok(ExitCode::SUCCESS);
    }
    for file in &written {
        writeln!(stdout, "{}: {} rows", file.path.display(), file.rows)?;
    }
    Ok(ExitCode::SUCCESS)
}
