//! CSV loading for any user file: delimiter sniffing, quoting, BOM, CRLF, missing values,
//! typed columns, and one-line errors naming file, row and column.

use std::path::Path;

use super::Table;

/// How to read one file.
#[derive(Debug, Clone, Default)]
pub struct CsvOptions {
    /// Field delimiter; sniffed from the first lines when `None`.
    pub delimiter: Option<u8>,
    /// Column names when the file has no header row.
    pub header: Option<Vec<String>>,
    /// Trim spaces around unquoted cells.
    pub trim: bool,
    /// Extra missing-value tokens.
    pub missing: Vec<String>,
}

/// Reads a delimited text file into a [`Table`].
pub fn read_table(path: &Path, options: &CsvOptions) -> anyhow::Result<Table> {
    let _ = (path, options);
    todo!("dataset helper")
}
