//! `tabcontam calibrate SPEC`: the controlled-contamination study of a spec's
//! `[calibration]` table, end to end: checkpoints, run, calibration table.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::analyze::DEFAULT_SERIALIZATION;
use crate::analyze::calibration::{Calibration, Rate, calibrate, format_dose};
use crate::cli::CalibrateArgs;
use crate::run::execute::ProgressMode;
use crate::run::local_exec::ensure_weights;
use crate::run::spec::Spec;
use crate::run::workflow::{RunObserver, RunSettings, RunStart, run_experiment};
use crate::store::{RunStatus, Store};
use crate::train;

struct Announce;

impl RunObserver for Announce {
    fn started(&mut self, start: &RunStart) {
        eprintln!(
            "run {} of `{}`: {} requests, {} cached, {} to send",
            start.run_id, start.spec, start.requests, start.cached, start.to_send
        );
    }
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let spec = Spec::load(&args.spec)?;
    let Some(study) = &spec.calibration else {
        anyhow::bail!(
            "{}: no [calibration] table; add one (base, treatments, doses) or use `tabcontam run` for an ordinary experiment",
            args.spec.display()
        );
    };
    let spec_dir = args.spec.parent().unwrap_or(Path::new("."));
    let base = spec
        .models
        .iter()
        .find(|m| m.id == study.base)
        .expect("the spec checks that the base model exists");
    let base_weights = ensure_weights(base, spec_dir)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", args.spec.display()))?;

    // 1. Checkpoints: one series per treatment, each cached by its inputs.
    for treatment in &study.treatments {
        let series = study.series(treatment, spec_dir, &spec.name);
        let mut settings = study
            .settings(&base_weights, treatment, &series, spec.seed)
            .map_err(|m| anyhow::anyhow!("{}: {m}", args.spec.display()))?;
        settings.data_dir = args.data.data_dir.clone();
        let label = treatment.slug();
        let trained = Instant::now();
        let checkpoints =
            train::build_checkpoints(&settings, &mut |line| eprintln!("[{label}] {line}"))?;
        let reused = checkpoints.iter().filter(|c| c.reused).count();
        eprintln!(
            "[{label}] {} checkpoint(s) in {} ({} reused) in {:.1} s",
            checkpoints.len(),
            series.display(),
            reused,
            trained.elapsed().as_secs_f64()
        );
    }
    if args.train_only {
        return Ok(ExitCode::SUCCESS);
    }

    // 2. The tests on the base model and every checkpoint, through the cache.
    if !(args.progress_interval.is_finite() && args.progress_interval > 0.0) {
        anyhow::bail!(
            "--progress-interval {} must be a number of seconds above 0, e.g. 10",
            args.progress_interval
        );
    }
    let progress = if args.json || !std::io::stderr().is_terminal() {
        ProgressMode::Lines {
            every: Duration::from_secs_f64(args.progress_interval),
        }
    } else {
        ProgressMode::Bars
    };
    let settings = RunSettings {
        spec: args.spec.clone(),
        only_models: Vec::new(),
        data_dir: args.data.data_dir.clone(),
        cache: args.cache.cache.clone(),
        offline: false,
        progress,
        shard: None,
    };
    let report = run_experiment(&settings, &mut Announce)?;
    eprintln!(
        "run {} {}: {} requests ({} cached, {} sent, {} failed) in {:.1} s",
        report.run_id,
        report.status.id(),
        report.counts.requests,
        report.counts.cached,
        report.counts.sent,
        report.counts.failed,
        report.wall.as_secs_f64()
    );

    // 3. The calibration of every test, over this spec's models only (the cache may hold
    // other studies).
    let store = Store::open_read_only(&args.cache.cache)?;
    let ours = |id: &str| spec.models.iter().any(|m| m.id == id);
    let models: Vec<_> = store
        .models()?
        .into_iter()
        .filter(|m| ours(&m.id))
        .collect();
    let cells: Vec<_> = store
        .cells()?
        .into_iter()
        .filter(|c| ours(&c.model))
        .collect();
    let trials: Vec<_> = store
        .trials()?
        .into_iter()
        .filter(|t| ours(&t.model))
        .collect();
    let primary = spec
        .serializations
        .first()
        .map_or(DEFAULT_SERIALIZATION, |s| s.id.as_str());
    let Some(calibration) = calibrate(&models, &cells, &trials, primary) else {
        anyhow::bail!(
            "{}: the cache holds no model with a declared exposure after the run; was it interrupted?",
            args.cache.cache.display()
        );
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &calibration)?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &calibration)?;
        writeln!(
            out,
            "\n{} models, {} datasets; {:.0} s in all. `tabcontam report` adds the calibration section (matrix heatmap, dose–response plots).",
            calibration.models.len(),
            calibration.datasets.len(),
            started.elapsed().as_secs_f64()
        )?;
    }
    Ok(match report.status {
        RunStatus::Finished => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// `3/5 (0.60, 0.23–0.88)`.
fn rate(r: &Rate) -> String {
    match (r.rate, r.interval) {
        (Some(rate), Some(i)) => format!(
            "{}/{} ({rate:.2}, {:.2}–{:.2})",
            r.hits, r.total, i.low, i.high
        ),
        _ => format!("{}/{}", r.hits, r.total),
    }
}

/// Per test: sensitivity at each dose, false positives (all and synthetic); then
/// membership on rows seen vs held out.
fn write_table(out: &mut dyn Write, calibration: &Calibration) -> std::io::Result<()> {
    let mut header = vec!["test".to_string()];
    header.extend(
        calibration
            .doses
            .iter()
            .map(|d| format!("sensitivity @{} ep", format_dose(*d))),
    );
    header.push("false positives".into());
    header.push("on synthetic".into());
    let mut rows = vec![header];
    // Only the tests the study ran.
    let ran: Vec<_> = calibration
        .tests
        .iter()
        .filter(|t| {
            t.false_positives.total > 0 || t.sensitivity.iter().any(|s| s.sensitivity.total > 0)
        })
        .collect();
    for test in &ran {
        let mut row = vec![format!("{} {}", test.number, test.test)];
        for dose in &calibration.doses {
            row.push(
                test.sensitivity
                    .iter()
                    .find(|s| s.dose == *dose)
                    .map_or("-".into(), |s| rate(&s.sensitivity)),
            );
        }
        row.push(rate(&test.false_positives));
        row.push(rate(&test.synthetic_false_positives));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    if !calibration.membership_rows.is_empty() {
        writeln!(out, "\nmembership accuracy, rows trained on vs held out:")?;
        for m in &calibration.membership_rows {
            writeln!(
                out,
                "  {} on {} ({} ep): seen {}, held out {}",
                m.model,
                m.dataset,
                format_dose(m.dose),
                rate(&m.seen),
                rate(&m.held_out)
            )?;
        }
    }
    writeln!(out)?;
    for test in &ran {
        writeln!(out, "{}", test.sentence)?;
    }
    Ok(())
}
