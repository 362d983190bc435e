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

/// Errors resolving a serialization.
#[derive(Debug, thiserror::Error)]
pub enum SerializationError {
    #[error(
        "unknown serialization `{0}`; built-in templates: the-is, equals, colon, is-equal-to (or give a .toml file with id, specifier, value_sep, feature_sep)"
    )]
    Unknown(String),
    #[error("{path}: invalid serialization TOML: {message}")]
    Invalid { path: String, message: String },
}

impl Serialization {
    /// A built-in id, or a TOML file defining `id`, `specifier`, `value_sep`, `feature_sep`.
    pub fn resolve(id_or_path: &str) -> Result<Serialization, SerializationError> {
        if let Some(builtin) = Self::builtin(id_or_path) {
            return Ok(builtin);
        }
        let path = std::path::Path::new(id_or_path);
        if path.extension().is_some_and(|e| e == "toml") && path.is_file() {
            let invalid = |message: String| SerializationError::Invalid {
                path: id_or_path.into(),
                message,
            };
            let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
            let parsed: Serialization =
                toml::from_str(&text).map_err(|e| invalid(e.message().to_string()))?;
            parsed.validate().map_err(invalid)?;
            return Ok(parsed);
        }
        Err(SerializationError::Unknown(id_or_path.into()))
    }

    /// A user template must be identifiable and must separate names from values.
    pub fn validate(&self) -> Result<(), String> {
        if self.id.trim().is_empty() || self.id.contains(char::is_whitespace) {
            return Err(format!("`id` must be a non-empty word, got {:?}", self.id));
        }
        if Self::builtin(&self.id).is_some_and(|b| b != *self) {
            return Err(format!(
                "`id` {:?} is a built-in template; choose another id",
                self.id
            ));
        }
        if self.value_sep.is_empty() || self.feature_sep.is_empty() {
            return Err("`value_sep` and `feature_sep` must not be empty".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{Column, ColumnKind};

    fn table() -> Table {
        Table {
            source: "t.csv".into(),
            columns: ["age", "sex"]
                .iter()
                .map(|n| Column {
                    name: n.to_string(),
                    kind: ColumnKind::Text,
                    missing: 0,
                })
                .collect(),
            rows: vec![vec!["39".into(), "Male".into()]],
            missing_tokens: vec![],
        }
    }

    #[test]
    fn builtins_match_the_spec_examples() {
        let t = table();
        let expect = [
            ("the-is", "The age is 39, The sex is Male"),
            ("equals", "age = 39, sex = Male"),
            ("colon", "age: 39, sex: Male"),
            (
                "is-equal-to",
                "The age is equal to 39; The sex is equal to Male",
            ),
        ];
        for (id, text) in expect {
            assert_eq!(Serialization::builtin(id).unwrap().row(&t, 0), text, "{id}");
        }
    }

    #[test]
    fn user_template_from_toml() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("arrow.toml");
        std::fs::write(
            &path,
            "id = \"arrow\"\nvalue_sep = \" -> \"\nfeature_sep = \" | \"\n",
        )
        .unwrap();
        let s = Serialization::resolve(path.to_str().unwrap()).unwrap();
        assert_eq!(s.row(&table(), 0), "age -> 39 | sex -> Male");
        let err = Serialization::resolve("arow").unwrap_err().to_string();
        assert!(err.contains("unknown serialization `arow`"), "{err}");
        std::fs::write(
            &path,
            "id = \"colon\"\nvalue_sep = \"=\"\nfeature_sep = \",\"\n",
        )
        .unwrap();
        let err = Serialization::resolve(path.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("built-in"), "{err}");
    }
}
