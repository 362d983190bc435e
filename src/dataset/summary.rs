//! What `datasets list` and `datasets show` report: each known dataset's status (present,
//! missing, failing to load; checksum) and one dataset's schema summary.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::catalog::{self, Catalog, ChecksumStatus};
use super::csv;
use super::descriptor::Descriptor;
use super::{ColumnKind, Dataset};

/// One line of `datasets list`.
#[derive(Debug, Serialize)]
pub struct DatasetStatus {
    /// The dataset id (`adult`).
    pub name: String,
    /// The name used in prompts (`adult income`).
    pub title: String,
    pub builtin: bool,
    /// `present`, `missing` or `error` (the file exists but does not load).
    pub status: &'static str,
    pub variant: Option<String>,
    pub file: Option<PathBuf>,
    pub rows: Option<usize>,
    pub columns: Option<usize>,
    pub expected_rows: Option<usize>,
    pub checksum: Option<ChecksumStatus>,
    pub error: Option<String>,
    /// The short "not found; how to get it" of the text table.
    #[serde(skip)]
    pub hint: Option<String>,
}

/// The status of every dataset the catalog knows, in catalog order. Each dataset is read and
/// checksummed on its own thread: ten files, ~10 MB in all.
pub fn statuses(catalog: &Catalog) -> Vec<DatasetStatus> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = catalog
            .descriptors
            .iter()
            .map(|descriptor| scope.spawn(move || status_of(catalog, descriptor)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a dataset status thread panicked"))
            .collect()
    })
}

fn status_of(catalog: &Catalog, descriptor: &Descriptor) -> DatasetStatus {
    let mut entry = DatasetStatus {
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

#[derive(Debug, Serialize)]
pub struct ColumnSummary {
    pub name: String,
    pub kind: ColumnKind,
    pub missing: usize,
    pub distinct: usize,
}

#[derive(Debug, Serialize)]
pub struct DatasetSummary<'a> {
    pub name: &'a str,
    pub title: &'a str,
    pub aliases: &'a [String],
    pub variant: &'a str,
    pub file: &'a Path,
    pub rows: usize,
    pub target: &'a str,
    pub id_column: Option<&'a str>,
    pub categorical: &'a [String],
    pub completion_feature: Option<&'a str>,
    pub released: Option<&'a str>,
    pub question: &'a str,
    pub columns: Vec<ColumnSummary>,
    pub head: Vec<&'a [String]>,
}

/// The summary `datasets show` prints: descriptor fields, each column's kind, missing and
/// distinct counts, and the first `head` rows.
pub fn summarize(dataset: &Dataset, head: usize) -> DatasetSummary<'_> {
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
    DatasetSummary {
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
