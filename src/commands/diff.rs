//! `tabcontam diff A B`: cells gained and lost and accuracy changes between two models, or
//! (`--runs`) between two runs.

use std::io::Write;
use std::process::ExitCode;

use crate::analyze::diff::{AccuracySide, DiffCell, ModelDiff, diff_models, diff_runs};
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
    let mut out = std::io::stdout().lock();
    if args.runs {
        let run_id = |text: &str| {
            text.trim_start_matches('#').parse::<i64>().map_err(|_| {
                anyhow::anyhow!(
                    "with --runs, A and B are run ids (numbers, see `tabcontam status`), got `{text}`"
                )
            })
        };
        let (a, b) = (run_id(&args.a)?, run_id(&args.b)?);
        let runs = store.runs()?;
        let diff = diff_runs(&store.cells()?, &runs, a, b)?;
        if args.json {
            serde_json::to_writer_pretty(&mut out, &diff)?;
            writeln!(out)?;
            return Ok(ExitCode::SUCCESS);
        }
        for side in [&diff.run_a, &diff.run_b] {
            writeln!(
                out,
                "run {} ({}, started {}): holds {} cells of {}",
                side.run,
                side.spec_name,
                side.started_at,
                side.cells,
                if side.models.is_empty() {
                    "no model".to_string()
                } else {
                    side.models.join(", ")
                }
            )?;
        }
        if diff.matched_by == "cell-across-models" {
            writeln!(
                out,
                "one model each: cells matched by dataset, test, template and seed"
            )?;
        }
        writeln!(
            out,
            "note: {}
",
            diff.limitation
        )?;
        print_diff(&mut out, &diff.diff)?;
        return Ok(ExitCode::SUCCESS);
    }
    let diff = diff_models(&store.cells()?, &args.a, &args.b)?;
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diff)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_diff(&mut out, &diff)?;
    Ok(ExitCode::SUCCESS)
}

fn print_diff(out: &mut impl Write, diff: &ModelDiff) -> std::io::Result<()> {
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
    Ok(())
}

fn cell_name(cell: &DiffCell) -> String {
    let mut name = match &cell.model {
        Some(model) => format!("{model}: {} {}", cell.dataset, cell.test),
        None => format!("{} {}", cell.dataset, cell.test),
    };
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
