//! `tabcontam diff A B`: cells gained and lost and accuracy changes between two models.

use std::io::Write;
use std::process::ExitCode;

use crate::analyze::diff::{AccuracySide, DiffCell, diff_models};
use crate::cli::DiffArgs;
use crate::store::Store;

pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let cache = &args.cache.cache;
    if !cache.exists() {
        anyhow::bail!(
            "no cache at {}: run an experiment first (`tabcontam run SPEC`) or import published results (`tabcontam import-results DIR`)",
            cache.display()
        );
    }
    let store = Store::open_read_only(cache)?;
    let diff = diff_models(&store.cells()?, &args.a, &args.b)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diff)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{} → {}: {} cells of tests 1–9 in both; passed {} → {} ({} gained, {} lost)",
        diff.a,
        diff.b,
        diff.compared,
        diff.passed_a,
        diff.passed_b,
        diff.gained.len(),
        diff.lost.len()
    )?;
    for (title, cells) in [
        (
            format!("gained (passed by {}, not by {})", diff.b, diff.a),
            &diff.gained,
        ),
        (
            format!("lost (passed by {}, not by {})", diff.a, diff.b),
            &diff.lost,
        ),
    ] {
        if !cells.is_empty() {
            writeln!(out, "\n{title}:")?;
            for cell in cells {
                writeln!(out, "  {}", cell_name(cell))?;
            }
        }
    }
    if !diff.accuracy.is_empty() {
        writeln!(
            out,
            "\naccuracy, {} → {} (95 % Wilson intervals; * = intervals apart):",
            diff.a, diff.b
        )?;
        for change in &diff.accuracy {
            writeln!(
                out,
                "  {:<48} {} → {}  {:+.3}{}",
                cell_name(&change.cell),
                side(&change.a),
                side(&change.b),
                change.delta,
                if change.separated { " *" } else { "" }
            )?;
        }
    }
    for (model, cells) in [(&diff.a, &diff.only_in_a), (&diff.b, &diff.only_in_b)] {
        if !cells.is_empty() {
            writeln!(
                out,
                "\nonly {model} has {} cells (not compared)",
                cells.len()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn cell_name(cell: &DiffCell) -> String {
    let mut name = format!("{} {}", cell.dataset, cell.test);
    if let Some(serialization) = &cell.serialization {
        name.push_str(&format!(" [{serialization}]"));
    }
    if cell.seed != 0 {
        name.push_str(&format!(" seed {}", cell.seed));
    }
    name
}

fn side(side: &AccuracySide) -> String {
    match side.interval {
        Some(i) => format!(
            "{:.3} [{:.3}, {:.3}] n={}",
            side.accuracy, i.low, i.high, side.trials
        ),
        None => format!("{:.3} n={}", side.accuracy, side.trials),
    }
}
