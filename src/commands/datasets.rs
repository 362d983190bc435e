//! `tabcontam datasets list|show|import|fetch|synth|chance`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;

use crate::cli::DatasetsCommand;
use crate::dataset::catalog::{self, Catalog, ChecksumStatus};
use crate::dataset::csv::{self, CsvOptions};
use crate::dataset::descriptor::{self, ClassAnswer, Classification, DataFile, Descriptor};
use crate::dataset::{ColumnKind, Dataset, Table};

/// Imported targets with more values than this are not classes (tests 11–12 need classes).
const MAX_TARGET_CLASSES: usize = 10;
/// Imported text columns with at most this many values are probed by tests 5–6.
const MAX_CATEGORICAL_VALUES: usize = 20;
/// How many categorical features an import probes besides the target.
const MAX_EXTRA_CATEGORICAL: usize = 2;
/// Downloads larger than this are refused (the paper's largest file is 4 MB).
const MAX_DOWNLOAD_BYTES: u64 = 1 << 30;

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
        DatasetsCommand::Synth { seed, rows, out } => synth(seed, rows, &out),
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

// ---------------------------------------------------------------------------------------
// chance

/// The chance level of one (dataset, test) cell of tests 7–9.
#[derive(Debug, Serialize)]
struct ChanceEntry {
    dataset: String,
    test: &'static str,
    number: u8,
    serialization: String,
    /// Per trial: the guesser's pass probability as Alg2 judges it.
    trial_rates: Vec<f64>,
    /// Per trial: its Monte Carlo standard error (0 when exact).
    trial_errors: Vec<f64>,
    /// Per trial: guessed lines drawn (`None`: every joint guess enumerated, exact).
    trial_draws: Vec<Option<usize>>,
    /// The cell's chance level under its rule (any of n, at least 3 of 5).
    chance: Option<f64>,
    basis: String,
    /// The same rule over the own-column products (the chance level before issue 21).
    own_column_chance: Option<f64>,
    /// Whether `--scoring strict` lets a pass of this cell count (chance below the threshold).
    strict_counts_a_pass: Option<bool>,
    own_column_strict_counts_a_pass: Option<bool>,
    skipped: Option<String>,
}

fn chance(
    names: &[String],
    data_dir: Option<&Path>,
    serialization: &str,
    seed: u64,
    json: bool,
) -> anyhow::Result<()> {
    use crate::dataset::Serialization;
    use crate::probe::chance::{
        GuessRates, STRICT_CHANCE_THRESHOLD, at_least, chance_level, guess_rates, own_column_rates,
        passes_needed, unseen_bound,
    };
    use crate::probe::{ProbeContext, PromptPack, TestId, Variant};

    let catalog = Catalog::open(data_dir)?;
    let serialization = Serialization::resolve(serialization)?;
    let pack = PromptPack::builtin();
    let names: Vec<String> = if names.is_empty() {
        catalog
            .descriptors
            .iter()
            .filter(|d| catalog.locate(d).is_some())
            .map(|d| d.id.clone())
            .collect()
    } else {
        names.to_vec()
    };
    let mut entries = Vec::new();
    for name in &names {
        let dataset = catalog.load(name)?;
        let ctx = ProbeContext {
            dataset: &dataset,
            serialization: &serialization,
            seed,
            pack: &pack,
            variant: Variant::Paper,
        };
        for test in [
            TestId::IncompleteCompletion,
            TestId::FullCompletion,
            TestId::FeatureCompletion,
        ] {
            let probe = crate::probe::build(test, &ctx)?;
            let rates = guess_rates(test, &dataset.table, &serialization, &probe.prompts);
            let level = chance_level(test, &rates, &[], 1);
            let (trial_rates, trial_errors, trial_draws) = match &rates {
                GuessRates::PerTrial(r) => (
                    r.iter().map(|g| g.rate).collect(),
                    r.iter().map(|g| g.standard_error).collect(),
                    r.iter().map(|g| g.draws).collect(),
                ),
                _ => (Vec::new(), Vec::new(), Vec::new()),
            };
            let own = own_column_rates(&dataset.table, &probe.prompts);
            let own_column_chance = (!own.is_empty()).then(|| at_least(&own, passes_needed(test)));
            let counts = |c: Option<f64>| c.map(|c| c < STRICT_CHANCE_THRESHOLD);
            entries.push(ChanceEntry {
                dataset: dataset.id.clone(),
                test: test.id(),
                number: test.number(),
                serialization: serialization.id.clone(),
                trial_rates,
                trial_errors,
                trial_draws,
                chance: level.level,
                basis: level.basis,
                own_column_chance,
                strict_counts_a_pass: counts(level.level),
                own_column_strict_counts_a_pass: counts(own_column_chance),
                skipped: probe.skipped,
            });
        }
    }
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
        let how = match (&e.skipped, e.trial_draws.iter().flatten().max()) {
            (Some(reason), _) => format!("skipped: {reason}"),
            (None, Some(draws)) => {
                let worst = e.trial_errors.iter().copied().fold(0.0, f64::max);
                match unseen_bound(e.trial_rates.iter().copied().zip(e.trial_draws.clone())) {
                    Some(bound) => format!(
                        "Monte Carlo, {draws} lines per trial, no line passed: rate < {bound:.1e} per trial (95 %)"
                    ),
                    None => {
                        format!("Monte Carlo, {draws} lines per trial, standard error ≤ {worst:.4}")
                    }
                }
            }
            (None, None) => "exact".to_string(),
        };
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
            how,
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

// ---------------------------------------------------------------------------------------
// synth

/// Writes the synthetic dataset of `seed` to `out` and its descriptor beside it.
fn synth(seed: u64, rows: usize, out: &Path) -> anyhow::Result<()> {
    use crate::dataset::synth;
    if !(synth::MIN_ROWS..=synth::MAX_ROWS).contains(&rows) {
        anyhow::bail!(
            "--rows {rows}: give between {} and {} rows",
            synth::MIN_ROWS,
            synth::MAX_ROWS
        );
    }
    let file_name = out
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.contains('"'))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--out {}: give a file name (e.g. synthetic-{seed}.csv)",
                out.display()
            )
        })?;
    let generated = synth::generate(seed, rows);
    let descriptor = generated.descriptor_toml.replace(
        &format!("file = \"{}\"", generated.file_name),
        &format!("file = \"{file_name}\""),
    );
    let toml_path = out.with_extension("toml");
    std::fs::write(out, &generated.csv)
        .with_context(|| format!("cannot write {}", out.display()))?;
    std::fs::write(&toml_path, descriptor)
        .with_context(|| format!("cannot write {}", toml_path.display()))?;
    println!(
        "wrote {} ({rows} rows) and its descriptor {} (dataset id {}); name it in a spec as synthetic:{seed}{}",
        out.display(),
        toml_path.display(),
        generated.id,
        if rows == synth::DEFAULT_ROWS {
            String::new()
        } else {
            format!(":{rows}")
        }
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// list

/// One line of `datasets list`.
#[derive(Debug, Serialize)]
struct ListEntry {
    /// The dataset id (`adult`).
    name: String,
    /// The name used in prompts (`adult income`).
    title: String,
    builtin: bool,
    /// `present`, `missing` or `error` (the file exists but does not load).
    status: &'static str,
    variant: Option<String>,
    file: Option<PathBuf>,
    rows: Option<usize>,
    columns: Option<usize>,
    expected_rows: Option<usize>,
    checksum: Option<ChecksumStatus>,
    error: Option<String>,
    /// The short "not found; how to get it" of the text table.
    #[serde(skip)]
    hint: Option<String>,
}

fn list(data_dir: Option<&Path>, json: bool) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    // Each dataset is read and checksummed on its own thread: ten files, ~10 MB in all.
    let entries: Vec<ListEntry> = std::thread::scope(|scope| {
        let handles: Vec<_> = catalog
            .descriptors
            .iter()
            .map(|descriptor| {
                let catalog = &catalog;
                scope.spawn(move || list_entry(catalog, descriptor))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a dataset status thread panicked"))
            .collect()
    });

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

fn list_entry(catalog: &Catalog, descriptor: &Descriptor) -> ListEntry {
    let mut entry = ListEntry {
        name: descriptor.id.clone(),
        title: descriptor.name.clone(),
        builtin: catalog::is_builtin_name(&descriptor.id),
        status: "missing",
        variant: None,
        file: None,
        rows: None,
        columns: None,
        expected_rows: None,
        checksum: None,
        error: None,
        hint: None,
    };
    let Some((file, location)) = catalog.locate(descriptor) else {
        entry.error = Some(catalog.not_found(descriptor).to_string());
        entry.hint = Some(format!(
            "not found ({}); {}",
            catalog::file_names(descriptor),
            catalog::how_to_obtain(descriptor)
        ));
        return entry;
    };
    entry.variant = Some(file.variant.clone());
    entry.expected_rows = file.rows;
    let path = location.display_path();
    entry.file = Some(path.clone());
    let loaded = location.read().and_then(|bytes| {
        entry.checksum = Some(ChecksumStatus::of(file, &bytes));
        let table = csv::parse_table(&bytes, &path, &file.csv_options())?;
        descriptor.resolve(file, table)
    });
    match loaded {
        Ok(dataset) => {
            entry.status = "present";
            entry.rows = Some(dataset.table.n_rows());
            entry.columns = Some(dataset.table.n_cols());
        }
        Err(err) => {
            entry.status = "error";
            entry.error = Some(format!("{err:#}"));
        }
    }
    entry
}

/// Writes rows as space-aligned columns (the last column is not padded).
fn write_aligned<const N: usize>(
    out: &mut impl Write,
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(
                    ' ',
                    widths[i] - cell.chars().count() + 2,
                ));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// show

#[derive(Debug, Serialize)]
struct ColumnSummary {
    name: String,
    kind: ColumnKind,
    missing: usize,
    distinct: usize,
}

#[derive(Debug, Serialize)]
struct ShowReport<'a> {
    name: &'a str,
    title: &'a str,
    aliases: &'a [String],
    variant: &'a str,
    file: &'a Path,
    rows: usize,
    target: &'a str,
    id_column: Option<&'a str>,
    categorical: &'a [String],
    completion_feature: Option<&'a str>,
    released: Option<&'a str>,
    question: &'a str,
    columns: Vec<ColumnSummary>,
    head: Vec<&'a [String]>,
}

fn show(name: &str, data_dir: Option<&Path>, head: usize, json: bool) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    let dataset = catalog.load(name)?;
    let report = show_report(&dataset, head);
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

fn show_report(dataset: &Dataset, head: usize) -> ShowReport<'_> {
    let table = &dataset.table;
    let columns = table
        .columns
        .iter()
        .enumerate()
        .map(|(c, column)| ColumnSummary {
            name: column.name.clone(),
            kind: column.kind,
            missing: column.missing,
            distinct: table.distinct_count(c),
        })
        .collect();
    ShowReport {
        name: &dataset.id,
        title: &dataset.name,
        aliases: &dataset.aliases,
        variant: &dataset.variant,
        file: &table.source,
        rows: table.n_rows(),
        target: &dataset.target,
        id_column: dataset.id_column.as_deref(),
        categorical: &dataset.categorical,
        completion_feature: dataset.completion_feature.as_deref(),
        released: dataset.released.as_deref(),
        question: &dataset.classification.question,
        columns,
        head: table.rows.iter().take(head).map(Vec::as_slice).collect(),
    }
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

// ---------------------------------------------------------------------------------------
// import

fn import(file: &Path, name: &str, target: &str, force: bool) -> anyhow::Result<()> {
    if !descriptor::is_valid_id(name) {
        anyhow::bail!(
            "--name \"{name}\": use lowercase letters, digits, `-` or `_` (at most 64, starting with a letter or digit)"
        );
    }
    if catalog::is_builtin_name(name) {
        anyhow::bail!(
            "--name \"{name}\" is a built-in dataset (or one of its aliases); choose another name"
        );
    }
    let user_dir = catalog::user_datasets_dir().ok_or_else(|| {
        anyhow::anyhow!("no user data directory: set TABCONTAM_HOME (or HOME) to where imported datasets should go")
    })?;
    // Opening the catalog also checks that the existing user descriptors are sound.
    let catalog = Catalog::open(None)?;
    if catalog.descriptors.iter().any(|d| d.id == name) && !force {
        anyhow::bail!(
            "dataset \"{name}\" was already imported ({}); pass --force to replace it",
            user_dir.join(format!("{name}.toml")).display()
        );
    }

    let bytes = std::fs::read(file).map_err(|source| csv::CsvError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let (descriptor, dataset) = describe_import(file, &bytes, name, target)?;

    let data_path = user_dir.join(&descriptor.files[0].file);
    let descriptor_path = user_dir.join(format!("{name}.toml"));
    let toml_text = format!(
        "# Generated by `tabcontam datasets import` from {}.\n\
         # Edit the name used in prompts, the aliases, the class question and the probed features.\n{}",
        file.display(),
        toml::to_string(&descriptor).context("cannot write the generated descriptor")?
    );
    write_atomically(&data_path, &bytes)?;
    if let Err(err) = write_atomically(&descriptor_path, toml_text.as_bytes()) {
        let _ = std::fs::remove_file(&data_path);
        return Err(err);
    }
    println!(
        "imported {name}: {} rows x {} columns, target {} ({} classes)",
        dataset.table.n_rows(),
        dataset.table.n_cols(),
        dataset.target,
        dataset.classification.answers.len()
    );
    println!("descriptor: {}", descriptor_path.display());
    println!("data:       {}", data_path.display());
    Ok(())
}

/// Reads the bytes of a file to import and generates its descriptor; the returned dataset
/// is the table exactly as later commands will load it. Pure apart from resolving the
/// source path for the descriptor's provenance note.
pub fn describe_import(
    file: &Path,
    bytes: &[u8],
    name: &str,
    target: &str,
) -> anyhow::Result<(Descriptor, Dataset)> {
    let table = csv::parse_table(bytes, file, &CsvOptions::default())?;
    let extension = file
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| descriptor::is_valid_id(e))
        .unwrap_or("csv");
    let data_file = DataFile {
        variant: "imported".into(),
        file: format!("{name}.{extension}"),
        url: None,
        blake3: Some(catalog::blake3_hex(bytes)),
        header: None,
        drop: if has_row_index(&table) {
            vec!["Unnamed: 0".into()]
        } else {
            Vec::new()
        },
        missing: Vec::new(),
        trim: false,
        delimiter: None,
        page: None,
        target: None,
        id_column: None,
        categorical: None,
        completion_feature: None,
        classification: None,
        rows: Some(table.n_rows()),
    };
    let mut columns_table = table.clone();
    columns_table.drop_columns(&data_file.drop)?;
    let descriptor = generate_descriptor(name, target, file, &columns_table, data_file)?;
    // The generated descriptor must load the copy exactly as later commands will.
    let dataset = descriptor.resolve(&descriptor.files[0], table)?;

    Ok((descriptor, dataset))
}

/// An unnamed first column of consecutive integers from 0 or 1 is the row index pandas
/// writes; it carries nothing a model could have memorized.
fn has_row_index(table: &Table) -> bool {
    let Some(first) = table.columns.first() else {
        return false;
    };
    if first.name != "Unnamed: 0" || first.kind != ColumnKind::Integer || first.missing > 0 {
        return false;
    }
    let start: i64 = table.rows[0][0].parse().unwrap_or(-1);
    (start == 0 || start == 1)
        && table
            .rows
            .iter()
            .enumerate()
            .all(|(i, row)| row[0].parse::<i64>().ok() == Some(start + i as i64))
}

/// A first descriptor for an imported table: tests 5–6 probe the target and up to two
/// low-cardinality text columns, test 9 completes the most unique column, tests 11–12 ask
/// for the target's value.
fn generate_descriptor(
    name: &str,
    target: &str,
    source: &Path,
    table: &Table,
    data_file: DataFile,
) -> anyhow::Result<Descriptor> {
    let target_index = table.require_column(target, "target")?;
    let classes = table.distinct(target_index);
    if classes.is_empty() {
        anyhow::bail!(
            "{}: target column \"{target}\" has only missing values; choose another target",
            source.display()
        );
    }
    if classes.len() > MAX_TARGET_CLASSES {
        anyhow::bail!(
            "{}: target column \"{target}\" has {} distinct values; tests 11-12 ask for a class, so choose a categorical target (at most {MAX_TARGET_CLASSES} values)",
            source.display(),
            classes.len()
        );
    }
    let distinct: Vec<usize> = (0..table.n_cols())
        .map(|c| table.distinct_count(c))
        .collect();
    let is_categorical = |c: usize| {
        matches!(
            table.columns[c].kind,
            ColumnKind::Text | ColumnKind::Boolean
        ) && (2..=MAX_CATEGORICAL_VALUES).contains(&distinct[c])
    };
    let mut categorical = Vec::new();
    if distinct[target_index] >= 2 {
        categorical.push(target.to_string());
    }
    categorical.extend(
        (0..table.n_cols())
            .filter(|&c| c != target_index && is_categorical(c))
            .take(MAX_EXTRA_CATEGORICAL)
            .map(|c| table.columns[c].name.clone()),
    );
    // The most unique column; on a tie the first, as the file orders them.
    let completion_feature = (0..table.n_cols())
        .filter(|&c| c != target_index)
        .fold(None, |best: Option<usize>, c| match best {
            Some(b) if distinct[b] >= distinct[c] => Some(b),
            _ => Some(c),
        })
        .map(|c| table.columns[c].name.clone());
    let prompt_name = name.replace(['-', '_'], " ");
    let source_path = std::fs::canonicalize(source).unwrap_or_else(|_| source.to_path_buf());
    Ok(Descriptor {
        id: name.to_string(),
        aliases: if prompt_name != name {
            vec![name.to_string()]
        } else {
            Vec::new()
        },
        name: prompt_name,
        target: target.to_string(),
        id_column: None,
        categorical,
        completion_feature,
        released: None,
        source: Some(format!("imported from {}", source_path.display())),
        licence: None,
        classification: Classification {
            question: format!("What is the value of {target}?"),
            answers: classes
                .iter()
                .map(|value| ClassAnswer {
                    answer: value.to_string(),
                    values: vec![value.to_string()],
                })
                .collect(),
            threshold: None,
        },
        files: vec![data_file],
    })
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so
/// that the path holds either nothing (or its old content) or the complete new content.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create the folder", dir.display()))?;
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("download");
    let temp = dir.join(format!(".{file_name}.partial-{}", std::process::id()));
    let written = std::fs::File::create(&temp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temp);
        anyhow::bail!("{}: cannot write: {err}", path.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// fetch

fn fetch(name: &str, data_dir: Option<&Path>, url: Option<&str>) -> anyhow::Result<()> {
    let catalog = Catalog::open(data_dir)?;
    let descriptor = catalog.find(name)?;
    let dest_dir = match data_dir {
        Some(dir) => dir.to_path_buf(),
        None => catalog::user_datasets_dir().ok_or_else(|| {
            anyhow::anyhow!(
                "no user data directory: set TABCONTAM_HOME (or HOME), or pass --data-dir DIR"
            )
        })?,
    };
    let (url, planned) = match url {
        Some(url) => (url.to_string(), None),
        None => {
            let Some(file) = descriptor.files.iter().find(|f| f.url.is_some()) else {
                anyhow::bail!("{}", manual_download_hint(descriptor, &dest_dir));
            };
            (file.url.clone().unwrap_or_default(), Some(file))
        }
    };
    let parsed = check_url(&url)?;
    let bytes = download(&parsed)?;
    let digest = catalog::blake3_hex(&bytes);

    // Which variant did we get? The planned one must match its checksum; with --url, the
    // variant whose checksum matches, else one without a checksum named like the URL's file.
    let by_digest = |f: &&DataFile| {
        f.blake3
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case(&digest))
    };
    let url_file_name = parsed
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("")
        .to_string();
    let chosen: Option<&DataFile> = match planned {
        Some(f) => (f.blake3.is_none() || by_digest(&f)).then_some(f),
        None => descriptor.files.iter().find(by_digest).or_else(|| {
            descriptor
                .files
                .iter()
                .find(|f| f.blake3.is_none() && f.file == url_file_name)
        }),
    };
    let Some(file) = chosen else {
        let expected: Vec<String> = descriptor
            .files
            .iter()
            .filter(|f| planned.is_none_or(|p| std::ptr::eq(p, *f)))
            .filter_map(|f| f.blake3.as_ref().map(|d| format!("{} {d}", f.file)))
            .collect();
        if expected.is_empty() {
            anyhow::bail!(
                "{url}: dataset \"{}\" records no checksum for a file named {url_file_name:?}; nothing was stored (its files are {})",
                descriptor.id,
                catalog::file_names(descriptor)
            );
        }
        anyhow::bail!(
            "{url}: checksum mismatch: the download has blake3 {digest}, dataset \"{}\" expects {}; nothing was stored (the server may hold another version of the file)",
            descriptor.id,
            expected.join(" or ")
        );
    };
    // A file without a recorded checksum must at least load as this dataset.
    if file.blake3.is_none() {
        let table = csv::parse_table(&bytes, Path::new(&url), &file.csv_options())?;
        descriptor.resolve(file, table)?;
    }
    let path = dest_dir.join(&file.file);
    write_atomically(&path, &bytes)?;
    let verified = if file.blake3.is_some() {
        "checksum ok"
    } else {
        "no checksum recorded"
    };
    println!(
        "fetched {} ({} variant, {} bytes, {verified}): {}",
        descriptor.id,
        file.variant,
        bytes.len(),
        path.display()
    );
    Ok(())
}

/// What to do for datasets that cannot be downloaded automatically (Kaggle needs a login).
fn manual_download_hint(descriptor: &Descriptor, dest_dir: &Path) -> String {
    let options: Vec<String> = descriptor
        .files
        .iter()
        .map(|f| match &f.page {
            Some(page) => format!("{} from {page}", f.file),
            None => f.file.clone(),
        })
        .collect();
    format!(
        "dataset \"{}\" has no public download URL; download it yourself ({}) and save it in {} under that name, or pass --data-dir DIR to the folder that holds it",
        descriptor.id,
        options.join("; or "),
        dest_dir.display()
    )
}

/// HTTPS only, except plain HTTP to this machine (test servers).
fn check_url(url: &str) -> anyhow::Result<reqwest::Url> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|err| anyhow::anyhow!("{url}: not a valid URL ({err})"))?;
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        "http" => anyhow::bail!(
            "{url}: plain http:// is refused (only loopback test servers may use it); use https://"
        ),
        other => anyhow::bail!("{url}: unsupported scheme `{other}`; use https://"),
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// GETs the URL into memory (datasets are a few MB) on a current-thread runtime.
fn download(url: &reqwest::Url) -> anyhow::Result<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the download runtime")?;
    runtime.block_on(async {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .timeout(std::time::Duration::from_secs(600))
            .user_agent(concat!("tabcontam/", env!("CARGO_PKG_VERSION")));
        if is_loopback(url) {
            // A proxy from the environment must not intercept a local test server.
            builder = builder.no_proxy();
        }
        let client = builder.build().context("cannot build the HTTP client")?;
        let mut response = client.get(url.clone()).send().await.map_err(|err| network_error(url, &err))?;
        let status = response.status();
        if !status.is_success() {
            anyhow::bail!("{url}: the server answered HTTP {status}; check the URL");
        }
        if response.content_length().is_some_and(|n| n > MAX_DOWNLOAD_BYTES) {
            anyhow::bail!("{url}: the file is larger than {MAX_DOWNLOAD_BYTES} bytes; refusing to download it");
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| network_error(url, &err))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_DOWNLOAD_BYTES {
                anyhow::bail!("{url}: the file is larger than {MAX_DOWNLOAD_BYTES} bytes; refusing to download it");
            }
        }
        Ok(bytes)
    })
}

/// One line naming the URL and the innermost cause (`Connection refused`, a DNS failure…).
fn network_error(url: &reqwest::Url, err: &reqwest::Error) -> anyhow::Error {
    let mut cause: &dyn std::error::Error = err;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let what = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "download failed"
    };
    anyhow::anyhow!("{url}: {what} ({cause}); check the URL and your network connection")
}
