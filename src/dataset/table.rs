//! An in-memory table: header, raw cell text and inferred column types.

use std::path::PathBuf;

/// What a column holds, inferred from every non-missing cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnKind {
    /// Every non-missing cell parses as an integer (`39`, `-1`).
    Integer,
    /// Every non-missing cell parses as a number, some not as integers (`7.25`, `41.0`).
    Float,
    /// Every non-missing cell is `True`/`False` (any case).
    Boolean,
    /// Anything else.
    Text,
    /// Every cell is missing.
    Empty,
}

/// One column of a [`Table`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Column {
    pub name: String,
    pub kind: ColumnKind,
    /// Number of missing cells.
    pub missing: usize,
}

/// A cell value as the decision code and prompts see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Missing,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(&'a str),
}

/// A loaded table. Cells keep the file's exact spelling (`41.0` stays `41.0`, a missing
/// value keeps its token, e.g. `NA` or the empty string), because serialized rows must
/// read exactly like the file the model may have seen.
#[derive(Debug, Clone)]
pub struct Table {
    /// File the table was read from (for error messages and provenance).
    pub source: PathBuf,
    pub columns: Vec<Column>,
    /// `rows[r][c]` is the unquoted text of row `r`, column `c`.
    pub rows: Vec<Vec<String>>,
    /// Tokens that mean "missing" in this table (the empty string is always one).
    pub missing_tokens: Vec<String>,
}

impl Table {
    pub fn n_rows(&self) -> usize {
        self.rows.len()
    }

    pub fn n_cols(&self) -> usize {
        self.columns.len()
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|c| c.name.as_str())
    }

    pub fn is_missing(&self, text: &str) -> bool {
        text.is_empty() || self.missing_tokens.iter().any(|t| t == text)
    }

    /// The typed value of one cell, read through its column's kind.
    pub fn value(&self, row: usize, col: usize) -> Value<'_> {
        let text = self.rows[row][col].as_str();
        if self.is_missing(text) {
            return Value::Missing;
        }
        match self.columns[col].kind {
            ColumnKind::Integer => text.parse().map(Value::Int).unwrap_or(Value::Text(text)),
            ColumnKind::Float => text.parse().map(Value::Float).unwrap_or(Value::Text(text)),
            ColumnKind::Boolean => Value::Bool(text.eq_ignore_ascii_case("true")),
            ColumnKind::Text | ColumnKind::Empty => Value::Text(text),
        }
    }

    /// The column names as `a, b, c`, for messages that list what exists.
    pub fn column_list(&self) -> String {
        self.column_names().collect::<Vec<_>>().join(", ")
    }

    /// The index of a column the caller relies on (`role`: "target", "categorical", …); the
    /// error names the role, the column and the file, and lists the columns that exist.
    pub fn require_column(&self, name: &str, role: &str) -> anyhow::Result<usize> {
        self.column_index(name).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: {role} column \"{name}\" does not exist; available columns: {}",
                self.source.display(),
                self.column_list()
            )
        })
    }

    /// Removes the named columns (row indices such as `orig_index`); each must exist.
    pub fn drop_columns(&mut self, names: &[String]) -> anyhow::Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let mut keep = vec![true; self.n_cols()];
        for name in names {
            keep[self.require_column(name, "dropped")?] = false;
        }
        let mut flags = keep.iter();
        self.columns.retain(|_| *flags.next().unwrap_or(&true));
        for row in &mut self.rows {
            let mut flags = keep.iter();
            row.retain(|_| *flags.next().unwrap_or(&true));
        }
        Ok(())
    }

    /// Number of distinct non-missing raw values of a column.
    pub fn distinct_count(&self, col: usize) -> usize {
        let mut seen = std::collections::HashSet::new();
        for row in &self.rows {
            let v = row[col].as_str();
            if !self.is_missing(v) {
                seen.insert(v);
            }
        }
        seen.len()
    }

    /// Whether a column holds at least `k` distinct non-missing values (stops as soon as
    /// it has seen them: near-unique columns of large tables are not hashed in full).
    pub fn has_distinct(&self, col: usize, k: usize) -> bool {
        let mut seen = std::collections::HashSet::new();
        for row in &self.rows {
            let v = row[col].as_str();
            if !self.is_missing(v) && seen.insert(v) && seen.len() >= k {
                return true;
            }
        }
        k == 0
    }

    /// Distinct non-missing raw values of a column, in order of first appearance.
    pub fn distinct(&self, col: usize) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for row in &self.rows {
            let v = row[col].as_str();
            if !self.is_missing(v) && seen.insert(v) {
                out.push(v);
            }
        }
        out
    }
}
