//! `tabcontam rows`: which rows a checkpoint has seen at a false-identification rate
//! (`run::seen_rows` judges from the cache; this prints and exports).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::RowsArgs;
use crate::likelihood::Detector;
use crate::run::seen_rows::{Reference, RowsQuery, SeenRows, seen_rows};
use crate::run::spec::Spec;
use crate::store::Store;

pub fn run(args: RowsArgs) -> anyhow::Result<ExitCode> {
    if !(args.fdr > 0.0 && args.fdr < 1.0) {
        anyhow::bail!(
            "--fdr {} must be a rate between 0 and 1, e.g. 0.1",
            args.fdr
        );
    }
    let detector = Detector::parse(&args.detector).with_context(|| {
        format!(
            "unknown --detector {:?}: use one of {}",
            args.detector,
            Detector::ALL.map(|d| d.test_id()).join(", ")
        )
    })?;
    let reference = match args.reference.as_deref() {
        None => None,
        Some(id) => Some(Reference::parse(id).with_context(|| {
            format!(
                "unknown --reference {id:?}: use one of {}",
                Reference::IDS.join(", ")
            )
        })?),
    };
    let spec = Spec::load(&args.spec)?;
    let store = Store::open_read_only(&args.cache.cache)?;
    let judged = seen_rows(
        &spec,
        &store,
        &RowsQuery {
            model: &args.model,
            dataset: &args.dataset,
            detector,
            fdr: args.fdr,
            serialization: args.serialization.as_deref(),
            data_dir: args.data.data_dir.as_deref(),
            reference,
        },
    )?;
    if let Some(path) = &args.out {
        export(&judged, path)?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &judged)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let selected = judged.rows.iter().filter(|r| r.selected).count();
    writeln!(
        out,
        "{} on {} ({}, {}): {} of {} rows called seen at FDR {}; references: {}.",
        judged.model,
        judged.dataset,
        judged.detector,
        judged.serialization,
        selected,
        judged.rows.len(),
        args.fdr,
        judged.references
    )?;
    if let Some(t) = &judged.truth {
        writeln!(
            out,
            "against the manifest: {} of {} trained rows found (power {:.2}); of the rows selected, {} not trained on (false-identification rate {:.3})",
            t.trained_found,
            t.trained,
            t.power,
            t.false_identifications,
            t.false_identification_rate
        )?;
    }
    if let Some(di) = &judged.dataset_inference {
        let split = match judged.reference.as_str() {
            "matched" => "rows vs column-matched rows",
            "perturbed" => "rows vs perturbed copies",
            _ => "trained vs held-out rows",
        };
        writeln!(
            out,
            "dataset inference (the detectors combined, {split}): t = {:.2}, df = {:.1}, p = {:.3e}",
            di.t, di.df, di.p_value
        )?;
    }
    if selected > 0 {
        let last = match judged.truth {
            Some(_) => "trained",
            None => "",
        };
        writeln!(
            out,
            "\n{:>6} {:>10} {:>8} {:>8}  {last}",
            "row", "score", "p", "q"
        )?;
        for r in judged.rows.iter().filter(|r| r.selected) {
            let trained = match r.trained {
                Some(false) => "no",
                Some(true) => "yes",
                None => "",
            };
            writeln!(
                out,
                "{:>6} {:>10.4} {:>8.4} {:>8.4}  {trained}",
                r.row, r.score, r.p_value, r.q_value
            )?;
        }
    }
    if let Some(path) = &args.out {
        writeln!(out, "\nevery row judged: {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Every judged row as CSV, or Parquet for a `.parquet` path; written beside and renamed,
/// so a failed export leaves no half-written file.
fn export(judged: &SeenRows, path: &Path) -> anyhow::Result<()> {
    let parquet = path.extension().is_some_and(|e| e == "parquet");
    let partial = path.with_extension("partial.csv");
    let mut csv = String::from("row,score,p_value,q_value,selected,trained\n");
    for r in &judged.rows {
        // `trained` is known from a checkpoint's manifest only; empty otherwise.
        let trained = r.trained.map(|t| t.to_string()).unwrap_or_default();
        csv.push_str(&format!(
            "{},{},{},{},{},{trained}\n",
            r.row, r.score, r.p_value, r.q_value, r.selected
        ));
    }
    std::fs::write(&partial, csv).with_context(|| {
        format!(
            "cannot write {}: pass an --out path in a writable folder",
            partial.display()
        )
    })?;
    let result: anyhow::Result<()> = if parquet {
        let written = path.with_extension("partial.parquet");
        crate::analyze::export::csv_to_parquet(&partial, &written)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(std::fs::rename(&written, path)?))
    } else {
        std::fs::rename(&partial, path).map_err(Into::into)
    };
    let _ = std::fs::remove_file(&partial);
    result.with_context(|| format!("cannot write {}", path.display()))
}
