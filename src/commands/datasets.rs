//! `tabcontam datasets list|show|import|fetch|synth|chance`: settings, one call into
//! `dataset` (or `probe::chance_cells`), printing.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::text_table::write_aligned;
use crate::cli::DatasetsCommand;
use crate::dataset::catalog::{Catalog, ChecksumStatus};
use crate::dataset::{Serialization, fetch, import, summary};
use crate::probe::chance::STRICT_CHANCE_THRESHOLD;
use crate::probe::chance_cells::chance_cells;

pub fn run(cmd: DatasetsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DatasetsCommand::List { data, json } => list(data.data_dir.as_deref(), json),
        DatasetsCommand::Show {
            name,
            data,
            head,
            json,
        } => show(&name, data.data_dir.as_deref(), head, json),
        DatasetsCommand::Import {
            file,
            name,
            target,
            force,
        } => import(&file, &name, &target, force),
        DatasetsCommand::Fetch { name, data, url } => {
            fetch(&name, data.data_dir.as_deref(), url.as_deref())
        }
        DatasetsCommand::Synth {
            seed,
            rows,
            order,
            out,
        } => synth(seed, rows, &order, &out),
        DatasetsCommand::Chance {
            names,
            data,
            serialization,
            seed,
            json,
        } => chance(&names, data.data_dir.as_deref(), &serialization, seed, json),
    }?;
    Ok(ExitCode::SUCCESS)
}

fn chance(
    names: &[String],
    data_dir: Option<&Path>,
    serialization: &str,
    seed: u64,
    json: bool,
) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    let serialization = Serialization::resolve(serialization)?;
    let entries = chance_cells(&catalog, names, &serialization, seed)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
        return Ok(());
    }
    let number = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.4}"));
    let strict = |x: Option<bool>| match x {
        Some(true) => "counts",
        Some(false) => "luck",
        None => "-",
    };
    let mut table = vec![
        [
            "DATASET",
            "TEST",
            "PER TRIAL",
            "CHANCE",
            "STRICT",
            "OWN-COLUMN",
            "STRICT (OWN-COLUMN)",
            "HOW",
        ]
        .map(String::from),
    ];
    for e in &entries {
        table.push([
            e.dataset.clone(),
            format!("{} {}", e.number, e.test),
            e.trial_rates
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
            number(e.chance),
            strict(e.strict_counts_a_pass).to_string(),
            number(e.own_column_chance),
            strict(e.own_column_strict_counts_a_pass).to_string(),
            e.method(),
        ]);
    }
    write_aligned(&mut out, &table)?;
    writeln!(
        out,
        "guesser: each column's value drawn from the file's frequencies (independent columns), the line judged by Alg2 (a value counts anywhere in it); strict counts a pass only when the chance level is below {STRICT_CHANCE_THRESHOLD}; serialization {}, seed {seed}",
        serialization.id
    )?;
    Ok(())
}

/// Writes the synthetic dataset of `seed` to `out` and its descriptor beside it.
fn synth(seed: u64, rows: usize, order: &str, out: &Path) -> anyhow::Result<()> {
    use crate::dataset::synth;
    let order = synth::RowOrder::from_word(order)
        .ok_or_else(|| anyhow::anyhow!("--order {order}: use shuffled, sorted or grouped"))?;
    let name = synth::SyntheticName { seed, rows, order };
    let (generated, toml_path) = synth::write_files(&name, out)?;
    println!(
        "wrote {} ({rows} rows) and its descriptor {} (dataset id {}); name it in a spec as {}",
        out.display(),
        toml_path.display(),
        generated.id,
        name.spec_name()
    );
    Ok(())
}

fn list(data_dir: Option<&Path>, json: bool) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    let entries = summary::statuses(&catalog);

    let mut out = std::io::stdout().lock();
    if json {
        // Serialized first so that a closed pipe surfaces as an io::Error (exit 0 in main).
        writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
        return Ok(());
    }
    let mut table = vec![
        [
            "ID", "NAME", "VARIANT", "ROWS", "COLS", "STATUS", "CHECKSUM", "FILE",
        ]
        .map(String::from),
    ];
    for e in &entries {
        let rows = match (e.rows, e.expected_rows) {
            (Some(rows), Some(expected)) if rows != expected => {
                format!("{rows} (expected {expected})")
            }
            (Some(rows), _) => rows.to_string(),
            (None, _) => "-".into(),
        };
        let checksum = match e.checksum {
            Some(ChecksumStatus::Ok) => "ok",
            Some(ChecksumStatus::Mismatch) => "mismatch",
            Some(ChecksumStatus::Unknown) => "unknown",
            None => "-",
        };
        let file = match (&e.file, &e.error) {
            (Some(path), None) => path.display().to_string(),
            (Some(_), Some(error)) => error.clone(),
            (None, _) => e.hint.clone().unwrap_or_else(|| "-".into()),
        };
        table.push([
            e.name.clone(),
            e.title.clone(),
            e.variant.clone().unwrap_or_else(|| "-".into()),
            rows,
            e.columns.map_or("-".into(), |c| c.to_string()),
            e.status.into(),
            checksum.into(),
            file,
        ]);
    }
    write_aligned(&mut out, &table)?;
    if entries.iter().any(|e| e.status == "missing") {
        writeln!(
            out,
            "\nMissing files: `tabcontam datasets fetch NAME` downloads those with a public URL;"
        )?;
        writeln!(
            out,
            "for the others, download them by hand (see the FILE column) and pass --data-dir DIR."
        )?;
    }
    Ok(())
}

fn show(name: &str, data_dir: Option<&Path>, head: usize, json: bool) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    let dataset = catalog.load(name)?;
    let report = summary::summarize(&dataset, head);
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{} ({}), variant {}: {}",
        report.name,
        report.title,
        report.variant,
        report.file.display()
    )?;
    writeln!(
        out,
        "{} rows x {} columns; target {}",
        report.rows,
        report.columns.len(),
        report.target
    )?;
    if let Some(released) = report.released {
        writeln!(out, "released {released}")?;
    }
    writeln!(out, "class question: {}", report.question)?;
    let listed = |items: &[String]| {
        if items.is_empty() {
            "(none)".to_string()
        } else {
            items.join(", ")
        }
    };
    writeln!(out, "tests 5-6 probe: {}", listed(report.categorical))?;
    writeln!(
        out,
        "test 9 completes: {}",
        report.completion_feature.unwrap_or("(none)")
    )?;
    writeln!(out)?;
    let mut schema = vec![["COLUMN", "KIND", "MISSING", "DISTINCT"].map(String::from)];
    for c in &report.columns {
        let kind = serde_json::to_value(c.kind)?
            .as_str()
            .unwrap_or_default()
            .to_string();
        schema.push([
            c.name.clone(),
            kind,
            c.missing.to_string(),
            c.distinct.to_string(),
        ]);
    }
    write_aligned(&mut out, &schema)?;
    if !report.head.is_empty() {
        writeln!(out, "\nfirst {} rows:", report.head.len())?;
        writeln!(out, "{}", csv_line(dataset.table.column_names()))?;
        for row in &report.head {
            writeln!(out, "{}", csv_line(row.iter().map(String::as_str)))?;
        }
    }
    Ok(())
}

/// One CSV line, quoting cells that need it.
fn csv_line<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = cells
        .map(|cell| {
            if cell.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", cell.replace('"', "\"\""))
            } else {
                cell.to_string()
            }
        })
        .collect();
    quoted.join(",")
}

fn import(file: &Path, name: &str, target: &str, force: bool) -> anyhow::Result<()> {
    let imported = import::import_file(file, name, target, force)?;
    let dataset = &imported.dataset;
    println!(
        "imported {name}: {} rows x {} columns, target {} ({} classes)",
        dataset.table.n_rows(),
        dataset.table.n_cols(),
        dataset.target,
        dataset.classification.answers.len()
    );
    println!("descriptor: {}", imported.descriptor_path.display());
    println!("data:       {}", imported.data_path.display());
    Ok(())
}

fn fetch(name: &str, data_dir: Option<&Path>, url: Option<&str>) -> anyhow::Result<()> {
    let fetched = fetch::fetch(name, data_dir, url)?;
    let verified = if fetched.checksum_verified {
        "checksum ok"
    } else {
        "no checksum recorded"
    };
    println!(
        "fetched {} ({} variant, {} bytes, {verified}): {}",
        fetched.dataset,
        fetched.variant,
        fetched.bytes,
        fetched.path.display()
    );
    Ok(())
}
