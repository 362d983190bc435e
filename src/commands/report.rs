//! `tabcontam report`: analyzes the cache (DuckDB) and writes the reports (JSON, HTML,
//! LaTeX, CSV, Markdown) into the output folder.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::analyze::card::card_for_report;
use crate::analyze::{Analysis, DEFAULT_SERIALIZATION, Options as AnalyzeOptions, analyze_store};
use crate::cli::{ReportArgs, ReportFormat};
use crate::report::{self, Format};
use crate::store::Store;

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let cache = &args.cache.cache;
    let analysis = analyze_cache(
        cache,
        args.serialization.as_deref(),
        args.scoring.as_deref(),
        args.explorer_trials,
    )?;
    let formats: Vec<Format> = args
        .format
        .iter()
        .map(|f| match f {
            ReportFormat::Json => Format::Json,
            ReportFormat::Html => Format::Html,
            ReportFormat::Latex => Format::Latex,
            ReportFormat::Csv => Format::Csv,
            ReportFormat::Md => Format::Markdown,
        })
        .collect();
    let calibration = match &args.calibration {
        Some(path) => Some(report::card::CardInReport {
            card: card_for_report(path, &analysis)?,
            source: path.display().to_string(),
        }),
        None => None,
    };
    let options = report::Options {
        timestamp: args.timestamp.then(report::utc_now),
        calibration,
    };
    let files = report::render(&analysis, &formats, &options)?;
    report::write(&args.out, &files)?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} models, {} datasets from {}; wrote {} files to {}:",
        analysis.series.len(),
        analysis.datasets.len(),
        cache.display(),
        files.len(),
        args.out.display()
    )?;
    for file in &files {
        writeln!(out, "  {}", args.out.join(&file.name).display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `cache` read-only and analyzes it, as `report` and `site` do: `serialization` (the
/// primary template) must have cells; `scoring` is a profile name; `explorer_trials` trials
/// are kept per cell.
pub(crate) fn analyze_cache(
    cache: &Path,
    serialization: Option<&str>,
    scoring: Option<&str>,
    explorer_trials: usize,
) -> anyhow::Result<Analysis> {
    if !cache.exists() {
        anyhow::bail!(
            "no cache at {}: run an experiment first (`tabcontam run SPEC`) or import published results (`tabcontam import-results DIR`)",
            cache.display()
        );
    }
    let store = Store::open_read_only(cache)?;
    let analysis = analyze_store(
        &store,
        &AnalyzeOptions {
            primary_serialization: serialization.unwrap_or(DEFAULT_SERIALIZATION).to_string(),
            scoring: match scoring {
                None => crate::analyze::Scoring::Paper,
                Some(text) => crate::analyze::Scoring::parse(text).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--scoring {text}: unknown profile; use `paper` (default), `strict` or `fdr`"
                    )
                })?,
            },
            explorer_trials,
        },
    )
    .with_context(|| format!("analyzing {}", cache.display()))?;
    // An asked-for template without cells would score every model with another one.
    if let Some(asked) = serialization
        && !analysis.templates.iter().any(|t| t == asked)
    {
        anyhow::bail!(
            "--serialization {asked}: no cell of {} uses this template; templates with cells: {}",
            cache.display(),
            if analysis.templates.is_empty() {
                "none (only tests without rows were run)".to_string()
            } else {
                analysis.templates.join(", ")
            }
        );
    }
    Ok(analysis)
}
