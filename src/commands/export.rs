//! `tabcontam export mlflow`: settings in, one call to [`crate::export::mlflow::export`],
//! a line per run out.

use std::io::Write;
use std::process::ExitCode;

use crate::analyze::{DEFAULT_SERIALIZATION, Options as AnalyzeOptions, Scoring};
use crate::cli::{ExportCommand, MlflowArgs};
use crate::export::mlflow::{self, Action, Settings};
use crate::export::mlflow_rest::Auth;

pub fn run(command: ExportCommand) -> anyhow::Result<ExitCode> {
    match command {
        ExportCommand::Mlflow(args) => export_mlflow(args),
    }
}

fn export_mlflow(args: MlflowArgs) -> anyhow::Result<ExitCode> {
    let Some(tracking_uri) = args.tracking_uri.filter(|u| !u.trim().is_empty()) else {
        anyhow::bail!(
            "no tracking server: pass --tracking-uri http://HOST:PORT or set MLFLOW_TRACKING_URI (start a server with `mlflow server --serve-artifacts`)"
        );
    };
    let scoring = match args.scoring.as_deref() {
        None => Scoring::Paper,
        Some(text) => Scoring::parse(text).ok_or_else(|| {
            anyhow::anyhow!(
                "--scoring {text}: unknown profile; use `paper` (default), `strict` or `fdr`"
            )
        })?,
    };
    let settings = Settings {
        cache: args.cache.cache,
        tracking_uri,
        experiment: args.experiment,
        // Secrets come from the environment only, never from a flag.
        auth: Auth::from_env()?,
        serialization_asked: args.serialization.is_some(),
        analysis: AnalyzeOptions {
            primary_serialization: args
                .serialization
                .unwrap_or_else(|| DEFAULT_SERIALIZATION.to_string()),
            scoring,
            explorer_trials: args.explorer_trials,
        },
    };
    let exported = mlflow::export(&settings)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &exported)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    for run in &exported.runs {
        let what = match &run.action {
            Action::Created => "created".to_string(),
            Action::Updated => "updated".to_string(),
            Action::Unchanged => "unchanged".to_string(),
            Action::Replaced { previous, why } => {
                format!("replaced {previous} ({why}; the old run is in MLflow's trash)")
            }
        };
        writeln!(
            out,
            "{}: run {} {what}: {} params, {} metrics ({} logged now), {} dataset inputs and {} report files logged now{}",
            run.name,
            run.run_id,
            run.params,
            run.metrics,
            run.metrics_logged,
            run.inputs_logged,
            run.artifacts_uploaded,
            if run.duplicates_removed > 0 {
                format!(
                    "; {} duplicate runs moved to the trash",
                    run.duplicates_removed
                )
            } else {
                String::new()
            }
        )?;
    }
    let count =
        |action: fn(&Action) -> bool| exported.runs.iter().filter(|r| action(&r.action)).count();
    writeln!(
        out,
        "{} runs in experiment {:?} (id {}{}) on {}: {} created, {} updated, {} replaced, {} unchanged",
        exported.runs.len(),
        exported.experiment,
        exported.experiment_id,
        if exported.experiment_created {
            ", created"
        } else {
            ""
        },
        exported.server,
        count(|a| *a == Action::Created),
        count(|a| *a == Action::Updated),
        count(|a| matches!(a, Action::Replaced { .. })),
        count(|a| *a == Action::Unchanged),
    )?;
    Ok(ExitCode::SUCCESS)
}
