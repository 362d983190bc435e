//! Serialization templates: how one row becomes text (SPEC §1).

use serde::{Deserialize, Serialize};

use super::Table;

/// `[specifier][name][value_sep][value][feature_sep]`, last separator dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serialization {
    pub id: String,
    #[serde(default)]
    pub specifier: String,
    pub value_sep: String,
    pub feature_sep: String,
}

impl Serialization {
    /// The four built-in templates, default first.
    pub fn builtins() -> Vec<Serialization> {
        let make = |id: &str, specifier: &str, value_sep: &str, feature_sep: &str| Serialization {
            id: id.into(),
            specifier: specifier.into(),
            value_sep: value_sep.into(),
            feature_sep: feature_sep.into(),
        };
        vec![
            make("the-is", "The ", " is ", ", "),
            make("equals", "", " = ", ", "),
            make("colon", "", ": ", ", "),
            make("is-equal-to", "The ", " is equal to ", "; "),
        ]
    }

    /// A built-in template by id.
    pub fn builtin(id: &str) -> Option<Serialization> {
        Self::builtins().into_iter().find(|s| s.id == id)
    }

    /// One (name, value) pair.
    pub fn pair(&self, name: &str, value: &str) -> String {
        format!("{}{}{}{}", self.specifier, name, self.value_sep, value)
    }

    /// Serializes the given columns of one row, in the given order.
    pub fn row_columns(&self, table: &Table, row: usize, columns: &[usize]) -> String {
        let mut out = String::new();
        for (i, &c) in columns.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.feature_sep);
            }
            out.push_str(&self.pair(&table.columns[c].name, &table.rows[row][c]));
        }
        out
    }

    /// Serializes every column of one row.
    pub fn row(&self, table: &Table, row: usize) -> String {
        let all: Vec<usize> = (0..table.n_cols()).collect();
        self.row_columns(table, row, &all)
    }
}
