//! `tabcontam diff A B`: cells gained and lost and accuracy changes between two models, or
//! (`--runs`) between two runs; as text, JSON or a Markdown table (`--md`), all cells or
//! (`--only-changed`) only those whose verdict or accuracy changed.

use std::io::Write;
use std::process::ExitCode;

use crate::analyze::diff::{AccuracySide, DiffCell, ModelDiff, diff_models, diff_runs};
use crate::cli::DiffArgs;
use crate::report::markdown::{Align, Cell, escape, table};
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
        let mut diff = diff_runs(&store.cells()?, &runs, a, b)?;
        if args.only_changed {
            diff.diff = diff.diff.only_changed();
        }
        if args.json {
            serde_json::to_writer_pretty(&mut out, &diff)?;
            writeln!(out)?;
            return Ok(ExitCode::SUCCESS);
        }
        // Markdown: each line a paragraph of its own (an empty line after it).
        let (md, end) = if args.md {
            (escape as fn(&str) -> String, "\n")
        } else {
            (str::to_string as fn(&str) -> String, "")
        };
        for side in [&diff.run_a, &diff.run_b] {
            let models = if side.models.is_empty() {
                "no model".to_string()
            } else {
                side.models.join(", ")
            };
            writeln!(
                out,
                "run {} ({}, started {}): holds {} cells of {}{end}",
                side.run,
                md(&side.spec_name),
                md(&side.started_at),
                side.cells,
                md(&models)
            )?;
        }
        if diff.matched_by == "cell-across-models" {
            writeln!(
                out,
                "one model each: cells matched by dataset, test, template and seed{end}"
            )?;
        }
        writeln!(out, "note: {}\n", diff.limitation)?;
        return match args.md {
            true => print_markdown(&mut out, &diff.diff),
            false => print_diff(&mut out, &diff.diff),
        }
        .map(|()| ExitCode::SUCCESS)
        .map_err(Into::into);
    }
    let mut diff = diff_models(&store.cells()?, &args.a, &args.b)?;
    if args.only_changed {
        diff = diff.only_changed();
    }
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diff)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    match args.md {
        true => print_markdown(&mut out, &diff)?,
        false => print_diff(&mut out, &diff)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The diff as Markdown: the summary line, one table of the listed cells (gained and lost
/// cells with their verdicts, accuracy cells with A's and B's share and interval) and the
/// counts of cells only one side has. Every id and name is escaped (untrusted text).
fn print_markdown(out: &mut impl Write, diff: &ModelDiff) -> std::io::Result<()> {
    writeln!(
        out,
        "**{} → {}**: {} cells of tests 1–9 in both; passed {} → {} ({} gained, {} lost)\n",
        escape(&diff.a),
        escape(&diff.b),
        diff.compared,
        diff.passed_a,
        diff.passed_b,
        diff.gained.len(),
        diff.lost.len()
    )?;
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for (cells, a, b, change) in [
        (&diff.gained, "fail", "pass", "gained"),
        (&diff.lost, "pass", "fail", "lost"),
    ] {
        for cell in cells {
            rows.push(vec![
                Cell::markdown(cell_name_md(cell)),
                a.into(),
                b.into(),
                change.into(),
            ]);
        }
    }
    // Numbers and intervals are ours: written as they are (`[0.40, 0.60]`, not `\[…\]`).
    for change in &diff.accuracy {
        rows.push(vec![
            Cell::markdown(cell_name_md(&change.cell)),
            Cell::markdown(side(&change.a)),
            Cell::markdown(side(&change.b)),
            Cell::markdown(format!(
                "{:+.3}{}",
                change.delta,
                if change.separated { " *" } else { "" }
            )),
        ]);
    }
    if rows.is_empty() {
        writeln!(out, "No cell changed.")?;
    } else {
        let columns = [
            ("Cell", Align::Left),
            (diff.a.as_str(), Align::Right),
            (diff.b.as_str(), Align::Right),
            ("Change", Align::Right),
        ];
        write!(out, "{}", table(&columns, &rows))?;
        if !diff.accuracy.is_empty() {
            writeln!(
                out,
                "\nAccuracy: share of correct answers with its 95 % Wilson interval and trials; change = B − A; * = intervals apart."
            )?;
        }
    }
    for (model, cells) in [(&diff.a, &diff.only_in_a), (&diff.b, &diff.only_in_b)] {
        if !cells.is_empty() {
            writeln!(
                out,
                "\nOnly {} has {} cells (not compared).",
                escape(model),
                cells.len()
            )?;
        }
    }
    Ok(())
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

/// [`cell_name`] in Markdown: the ids and names escaped, the punctuation ours.
fn cell_name_md(cell: &DiffCell) -> String {
    let mut name = match &cell.model {
        Some(model) => format!("{}: {} {}", escape(model), escape(&cell.dataset), cell.test),
        None => format!("{} {}", escape(&cell.dataset), cell.test),
    };
    if let Some(serialization) = &cell.serialization {
        name.push_str(&format!(" [{}]", escape(serialization)));
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
