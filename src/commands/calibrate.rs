//! `tabcontam calibrate SPEC`: the controlled-contamination study of a spec's
//! `[calibration]` table, end to end: checkpoints, run, calibration table.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::text_table::write_aligned;
use crate::analyze::calibration::{Calibration, Rate, format_dose};
use crate::cli::CalibrateArgs;
use crate::run::calibration_study::run_study;
use crate::run::execute::ProgressMode;
use crate::run::spec::Spec;
use crate::run::workflow::{RunObserver, RunSettings, RunStart};
use crate::store::RunStatus;

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
        pin_served: false,
    };
    let spec = Spec::load(&args.spec)?;
    let spec_dir = spec.path.parent().unwrap_or(std::path::Path::new("."));
    let card = spec
        .calibration
        .as_ref()
        .map(|c| c.card_path(args.card.as_deref(), spec_dir))
        .unwrap_or_default();
    let study = run_study(
        &spec,
        &settings,
        args.train_only,
        &card,
        &mut Announce,
        &mut |line| eprintln!("{line}"),
    )?;
    let (Some(report), Some(calibration)) = (study.run, study.calibration) else {
        return Ok(ExitCode::SUCCESS);
    };
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
    if let Some((card, path)) = &study.card {
        eprintln!(
            "wrote the calibration card {} ({} tests)",
            path.display(),
            card.tests.len()
        );
    }
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
            .map(|d| format!("sensitivity @{}", format_dose(*d))),
    );
    header.push("false positives".into());
    header.push("on synthetic".into());
    header.push("min. dose".into());
    header.push("strict".into());
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
        for dose in [
            test.minimum_detectable_dose,
            test.minimum_detectable_dose_strict,
        ] {
            row.push(dose.map_or_else(|| "not reached".into(), format_dose));
        }
        rows.push(row);
    }
    write_aligned(out, &rows)?;
    if !calibration.membership_rows.is_empty() {
        writeln!(out, "\nmembership accuracy, rows trained on vs held out:")?;
        for m in &calibration.membership_rows {
            writeln!(
                out,
                "  {} on {} (dose {}): seen {}, held out {}",
                m.model,
                m.dataset,
                format_dose(m.dose),
                rate(&m.seen),
                rate(&m.held_out)
            )?;
        }
    }
    writeln!(
        out,
        "\nmin. dose: the smallest dose whose sensitivity's Wilson lower bound exceeds the false-positive rate's upper bound (strict: echoes and guessable passes dropped)."
    )?;
    for test in &ran {
        writeln!(out, "{}", test.sentence)?;
    }
    Ok(())
}
