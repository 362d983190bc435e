//! `tabcontam parity DIR`: agreement of our decisions with the authors' logged verdicts
//! (`decide::parity` judges; this prints).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::ParityArgs;
use crate::decide::Alg1Profile;
use crate::decide::parity::{ParityReport, judge_dir};

/// Outputs longer than this are cut in the disagreement listing.
const SHOWN_OUTPUT_CHARS: usize = 160;

pub fn run(args: ParityArgs) -> anyhow::Result<ExitCode> {
    let profile = Alg1Profile::from_name(&args.profile).with_context(|| {
        format!(
            "unknown --profile {:?}: use `hunspell` (default) or `paper`",
            args.profile
        )
    })?;
    let report = judge_dir(&args.dir, profile)?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        write_text(&mut stdout, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_text(out: &mut impl Write, report: &ParityReport) -> std::io::Result<()> {
    for (name, agreement) in [
        ("algorithm1", &report.algorithm1),
        ("algorithm2", &report.algorithm2),
    ] {
        writeln!(
            out,
            "{name}: {}/{} agree with the logged verdicts ({:.2}%); {}/{} with the reference replay",
            agreement.agree,
            agreement.total,
            agreement.percent(),
            agreement.reference_replay_agree,
            agreement.total,
        )?;
    }
    if report.disagreements.is_empty() {
        return Ok(());
    }
    writeln!(out, "\n{} disagreements:", report.disagreements.len())?;
    for d in &report.disagreements {
        writeln!(
            out,
            "{}:{} {} | {} | {}\n  expected: {}\n  output:   {}\n  logged {}, ours {} (reference replay {})",
            d.file,
            d.line,
            d.model,
            d.test,
            d.dataset,
            d.expected,
            shorten(&d.output),
            d.logged,
            d.ours,
            d.reference_replay,
        )?;
    }
    Ok(())
}

/// The output on one line, cut to [`SHOWN_OUTPUT_CHARS`] characters.
fn shorten(output: &str) -> String {
    let escaped = format!("{output:?}");
    if escaped.chars().count() <= SHOWN_OUTPUT_CHARS {
        return escaped;
    }
    let cut: String = escaped.chars().take(SHOWN_OUTPUT_CHARS).collect();
    format!("{cut}…")
}
