//! Dataset descriptors: the TOML metadata that tells the tests how to talk about a table.

use serde::{Deserialize, Serialize};

/// One dataset as described by `datasets/<id>.toml` (or a user's generated descriptor).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    /// Stable id used on the command line and in the cache (`adult`, `spaceship-titanic`).
    pub id: String,
    /// Name used in prompts (`adult income`).
    pub name: String,
    /// Other names a model may use for it (`census income`, `adult`); tests 3–4 accept any.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Target column (label for tests 11–12).
    pub target: String,
    /// Identifier column, left out of the expected words of tests 1–2.
    #[serde(default)]
    pub id_column: Option<String>,
    /// Categorical features probed by tests 5–6 (empty: the tests are skipped).
    #[serde(default)]
    pub categorical: Vec<String>,
    /// Near-unique feature completed by test 9.
    #[serde(default)]
    pub completion_feature: Option<String>,
    /// Release year (or date) of the dataset, for negative controls.
    #[serde(default)]
    pub released: Option<String>,
    /// Where the data comes from.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub licence: Option<String>,
    /// How tests 11–12 ask for the class.
    pub classification: Classification,
    /// Files that hold this dataset, in order of preference (the paper's exact file first).
    #[serde(default)]
    pub files: Vec<DataFile>,
}

/// The class question of tests 11–12.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Classification {
    /// The question put to the model (`Does this person earn more than 50K a year?`).
    pub question: String,
    /// How a target value maps to the answer the model must give.
    pub answers: Vec<ClassAnswer>,
    /// For numeric targets asked as a threshold question (housing): values strictly above
    /// this threshold answer the first entry of `answers`, others the second.
    #[serde(default)]
    pub threshold: Option<f64>,
}

/// One admissible answer and the target values it stands for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassAnswer {
    /// What the model should say (`Yes`, `No`, `setosa`).
    pub answer: String,
    /// Raw target values (as spelled in the file) that mean this answer. Ignored when the
    /// question uses a threshold.
    #[serde(default)]
    pub values: Vec<String>,
}

/// One concrete file variant of a dataset.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataFile {
    /// Variant name (`paper`, `uci`, `registry`).
    pub variant: String,
    /// File name, looked up in the data directories.
    pub file: String,
    /// Where `tabcontam datasets fetch` downloads it from (HTTPS).
    #[serde(default)]
    pub url: Option<String>,
    /// blake3 of the expected bytes (hex).
    #[serde(default)]
    pub blake3: Option<String>,
    /// Column names to use when the file has no header row.
    #[serde(default)]
    pub header: Option<Vec<String>>,
    /// Columns to drop after loading (row indices such as `orig_index` or an unnamed first column).
    #[serde(default)]
    pub drop: Vec<String>,
    /// Extra tokens that mean "missing" in this file (besides the empty string and `NA`).
    #[serde(default)]
    pub missing: Vec<String>,
    /// Trim spaces around every unquoted cell (the UCI adult files put one after each comma).
    #[serde(default)]
    pub trim: bool,
    /// Per-variant overrides where column names differ from the paper's file.
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub id_column: Option<String>,
    #[serde(default)]
    pub categorical: Option<Vec<String>>,
    #[serde(default)]
    pub completion_feature: Option<String>,
    #[serde(default)]
    pub classification: Option<Classification>,
    /// Expected number of data rows (checked by `datasets list`).
    #[serde(default)]
    pub rows: Option<usize>,
}

/// A dataset ready for the tests: descriptor fields resolved for the variant that was
/// found, and its table loaded.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub id: String,
    pub name: String,
    pub aliases: Vec<String>,
    pub target: String,
    pub id_column: Option<String>,
    pub categorical: Vec<String>,
    pub completion_feature: Option<String>,
    pub released: Option<String>,
    pub classification: Classification,
    /// The variant that was loaded (`paper`, `uci`, …).
    pub variant: String,
    pub table: crate::dataset::table::Table,
}
