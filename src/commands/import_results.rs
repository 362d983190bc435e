//! `tabcontam import-results`: stores published per-cell results (the paper's CSVs) as
//! models and cells of their own source, beside the user's results.

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;

use crate::analyze::paper::{PAPER_REVISION, PAPER_SOURCE, read_paper_results};
use crate::cli::{ImportResultsArgs, ResultsFormat};
use crate::store::Store;

pub fn run(args: ImportResultsArgs) -> anyhow::Result<ExitCode> {
    let results = match args.format {
        ResultsFormat::Paper => read_paper_results(&args.dir, &args.id_prefix)?,
    };
    let cache = &args.cache.cache;
    let mut store = Store::open(cache)?;
    let existing = store.models()?;
    for model in &results.models {
        if let Some(own) = existing
            .iter()
            .find(|m| m.id == model.id && m.identity.revision != PAPER_REVISION)
        {
            bail!(
                "model `{}` in {} is one of your own ({} `{}`); importing would relabel it. Re-run with --id-prefix paper- to import the paper's results beside it",
                model.id,
                cache.display(),
                own.identity.backend.id(),
                own.identity.model
            );
        }
    }
    for model in &results.models {
        store.upsert_model(model)?;
    }
    store.import_cells(&results.cells)?;

    let mut out = std::io::stdout().lock();
    if args.json {
        let summary = serde_json::json!({
            "source": PAPER_SOURCE,
            "models": results.models.iter().map(|m| &m.id).collect::<Vec<_>>(),
            "cells": results.cells.len(),
            "notes": results.notes,
        });
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "imported {} models and {} cells (source `{PAPER_SOURCE}`) from {} into {}",
            results.models.len(),
            results.cells.len(),
            args.dir.display(),
            cache.display()
        )?;
        writeln!(
            out,
            "models: {}",
            results
                .models
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        for note in &results.notes {
            writeln!(out, "note: {note}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
