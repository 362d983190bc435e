//! `tabcontam run SPEC`: settings in, summary and exit code out; the workflow itself is
//! [`run_experiment`].

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::RunArgs;
use crate::run::execute::ProgressMode;
use crate::run::workflow::{RunObserver, RunSettings, RunStart, run_experiment};
use crate::store::RunStatus;

/// Exit code after Ctrl-C (128 + SIGINT), as shells expect.
const EXIT_INTERRUPTED: u8 = 130;
/// Exit code of an offline run that left requests unanswered: the results are incomplete,
/// which scripts must be able to see.
const EXIT_OFFLINE_GAPS: u8 = 2;

/// Announces the run on stderr (not with `--json`, whose stdout is the summary alone).
struct Announce {
    quiet_stderr: bool,
}

impl RunObserver for Announce {
    fn started(&mut self, start: &RunStart) {
        if self.quiet_stderr {
            return;
        }
        eprintln!(
            "run {} of `{}`: {} requests, {} cached, {} to send{}{}",
            start.run_id,
            start.spec,
            start.requests,
            start.cached,
            start.to_send,
            if start.offline_missing > 0 {
                format!(", {} missing (offline)", start.offline_missing)
            } else {
                String::new()
            },
            if start.other_shards > 0 {
                format!(", {} left to other shards", start.other_shards)
            } else {
                String::new()
            }
        );
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if !(args.progress_interval.is_finite() && args.progress_interval > 0.0) {
        anyhow::bail!(
            "--progress-interval {} (or TABCONTAM_PROGRESS_INTERVAL) must be a number of seconds above 0, e.g. 10",
            args.progress_interval
        );
    }
    let progress = if args.json {
        ProgressMode::Off
    } else if !args.quiet && std::io::stderr().is_terminal() {
        ProgressMode::Bars
    } else {
        ProgressMode::Lines {
            every: Duration::from_secs_f64(args.progress_interval),
        }
    };
    let settings = RunSettings {
        spec: args.spec.clone(),
        only_models: args.models.clone(),
        data_dir: args.data.data_dir.clone(),
        cache: args.cache.cache.clone(),
        offline: args.offline,
        progress,
        shard: args.shard,
        pin_served: args.pin_served,
    };
    let report = run_experiment(
        &settings,
        &mut Announce {
            quiet_stderr: args.json,
        },
    )?;
    let counts = &report.counts;
    let missing = report.missing;
    let interrupted = report.status == RunStatus::Interrupted;

    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "run {} {}: {} requests ({} cached, {} sent, {} failed, {} missing) in {:.1}s; {} cells decided, {} incomplete",
            report.run_id,
            report.status.id(),
            counts.requests,
            counts.cached,
            counts.sent,
            counts.failed,
            missing,
            report.wall.as_secs_f64(),
            report.cells_decided,
            report.cells_incomplete
        )?;
        if report.other_shards > 0 {
            writeln!(
                out,
                "  {} requests are left to other shards: merge their caches (`tabcontam cache merge`), then `tabcontam run --offline` decides the remaining cells",
                report.other_shards
            )?;
        }
        for (model, p) in &report.models {
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
        if missing > 0 && !interrupted {
            writeln!(
                out,
                "  rerun the same command to send the {missing} missing requests (nothing received is sent again)"
            )?;
        }
    }
    drop(out);
    // On stderr (with --json too, whose `served_changes` holds the same): a change of the
    // served version is never silent.
    for change in &report.served_changes {
        eprintln!("{}", change.message());
    }
    if interrupted {
        eprintln!("interrupted: every response received so far is stored; rerun to continue");
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    if report.status == RunStatus::Failed {
        if args.offline && counts.failed == 0 && report.executor_error.is_none() {
            return Ok(ExitCode::from(EXIT_OFFLINE_GAPS));
        }
        // The reason is also in `tabcontam status`; here it is the command's one error line.
        eprintln!(
            "error: run {} failed: {}",
            report.run_id,
            report.reason.as_deref().unwrap_or("unknown reason")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
