//! Dataset descriptors: the TOML metadata that tells the tests how to talk about a table.

use serde::{Deserialize, Serialize};

use super::csv::CsvOptions;
use super::table::{ColumnKind, Table};

/// One dataset as described by `datasets/<id>.toml` (or a user's generated descriptor).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    /// Stable id used on the command line and in the cache (`adult`, `spaceship-titanic`).
    pub id: String,
    /// Name used in prompts (`adult income`).
    pub name: String,
    /// Short names a model may use for it (`adult`); tests 3–4 accept any (SPEC §3: Alg1 on
    /// the long name, then on each alias), so list only names the method should count.
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
    /// Extra tokens that mean "missing" in this file, besides the empty cell and
    /// [`crate::dataset::csv::DEFAULT_MISSING`] (`NA`, `NaN`, `null`, …). `?` is not a default.
    #[serde(default)]
    pub missing: Vec<String>,
    /// Trim spaces around every unquoted cell (the UCI adult files put one after each comma).
    #[serde(default)]
    pub trim: bool,
    /// Field delimiter (`,` `;` `|`, a tab, or `whitespace` for blank-separated UCI `.data`
    /// files); sniffed from the first lines when absent.
    #[serde(default)]
    pub delimiter: Option<String>,
    /// Web page where a person can download the file by hand (Kaggle sets have no direct
    /// download URL); `datasets fetch` points there when `url` is absent.
    #[serde(default)]
    pub page: Option<String>,
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
    pub table: Table,
}

impl Descriptor {
    /// Parses and checks one descriptor; `origin` (a file name) prefixes every error, which
    /// names the line and key at fault.
    pub fn from_toml(text: &str, origin: &str) -> anyhow::Result<Descriptor> {
        let descriptor: Descriptor = toml::from_str(text).map_err(|err| {
            let message = err.message().trim_end().replace('\n', " ");
            match err.span() {
                Some(span) => {
                    let line = 1 + text[..span.start.min(text.len())].matches('\n').count();
                    let line_text = text.lines().nth(line - 1).unwrap_or("").trim();
                    anyhow::anyhow!(
                        "{origin}: line {line} (`{line_text}`): {message}; fix the descriptor"
                    )
                }
                None => anyhow::anyhow!("{origin}: {message}; fix the descriptor"),
            }
        })?;
        descriptor.check(origin)?;
        Ok(descriptor)
    }

    /// Checks what TOML types cannot: a usable id, at least one file, a sound class question.
    pub fn check(&self, origin: &str) -> anyhow::Result<()> {
        if !is_valid_id(&self.id) {
            anyhow::bail!(
                "{origin}: id \"{}\" must be lowercase letters, digits, `-` or `_` (at most 64, starting with a letter or digit)",
                self.id
            );
        }
        if self.files.is_empty() {
            anyhow::bail!(
                "{origin}: `files` is empty; list at least one [[files]] entry with its `file` name"
            );
        }
        let classifications = std::iter::once(&self.classification)
            .chain(self.files.iter().filter_map(|f| f.classification.as_ref()));
        for classification in classifications {
            if classification.answers.is_empty() {
                anyhow::bail!(
                    "{origin}: `classification.answers` is empty; give one entry per answer"
                );
            }
            if classification.threshold.is_some() && classification.answers.len() != 2 {
                anyhow::bail!(
                    "{origin}: `classification.threshold` needs exactly two answers (above, then not above); found {}",
                    classification.answers.len()
                );
            }
        }
        for file in &self.files {
            if let Some(digest) = &file.blake3
                && (digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                anyhow::bail!(
                    "{origin}: files.blake3 of {} is not 64 hex digits",
                    file.file
                );
            }
            if let Some(delimiter) = &file.delimiter
                && crate::dataset::csv::parse_delimiter(delimiter).is_none()
            {
                anyhow::bail!(
                    "{origin}: files.delimiter \"{}\" of {} is not one of \",\" \";\" \"|\" \"\\t\" \"whitespace\"",
                    delimiter.escape_default(),
                    file.file
                );
            }
            if file.file.contains(['/', '\\']) || file.file.starts_with('.') {
                anyhow::bail!(
                    "{origin}: files.file \"{}\" must be a plain file name (no folders)",
                    file.file
                );
            }
        }
        Ok(())
    }

    /// Reads one file variant of this dataset and resolves it into a [`Dataset`].
    pub fn load_variant(&self, file: &DataFile, path: &std::path::Path) -> anyhow::Result<Dataset> {
        let table = crate::dataset::csv::read_table(path, &file.csv_options())?;
        self.resolve(file, table)
    }

    /// Applies a variant's overrides and dropped columns to a loaded table, and checks that
    /// every column the tests rely on exists and that every target value has an answer.
    pub fn resolve(&self, file: &DataFile, mut table: Table) -> anyhow::Result<Dataset> {
        table.drop_columns(&file.drop)?;
        let target = file.target.clone().unwrap_or_else(|| self.target.clone());
        let id_column = file.id_column.clone().or_else(|| self.id_column.clone());
        let categorical = file
            .categorical
            .clone()
            .unwrap_or_else(|| self.categorical.clone());
        let completion_feature = file
            .completion_feature
            .clone()
            .or_else(|| self.completion_feature.clone());
        let classification = file
            .classification
            .clone()
            .unwrap_or_else(|| self.classification.clone());

        let target_index = table.require_column(&target, "target")?;
        if let Some(column) = &id_column {
            table.require_column(column, "identifier")?;
        }
        for column in &categorical {
            table.require_column(column, "categorical")?;
        }
        if let Some(column) = &completion_feature {
            table.require_column(column, "completion")?;
        }
        check_answers(&table, target_index, &classification)?;

        Ok(Dataset {
            id: self.id.clone(),
            name: self.name.clone(),
            aliases: self.aliases.clone(),
            target,
            id_column,
            categorical,
            completion_feature,
            released: self.released.clone(),
            classification,
            variant: file.variant.clone(),
            table,
        })
    }
}

/// Every target value must map to an answer (or, with a threshold, be a number), or tests
/// 11–12 would have no expected answer for some rows.
fn check_answers(
    table: &Table,
    target: usize,
    classification: &Classification,
) -> anyhow::Result<()> {
    let column = &table.columns[target];
    if classification.threshold.is_some() {
        if !matches!(column.kind, ColumnKind::Integer | ColumnKind::Float) {
            anyhow::bail!(
                "{}: target column \"{}\" holds {:?} values, but the class question uses a numeric threshold",
                table.source.display(),
                column.name,
                column.kind
            );
        }
        return Ok(());
    }
    for value in table.distinct(target) {
        if !classification
            .answers
            .iter()
            .any(|a| a.values.iter().any(|v| v == value))
        {
            anyhow::bail!(
                "{}: target value \"{value}\" of column \"{}\" has no answer in the descriptor's classification; add it to the `values` of one answer",
                table.source.display(),
                column.name
            );
        }
    }
    Ok(())
}

impl DataFile {
    /// How the CSV loader must read this file.
    pub fn csv_options(&self) -> CsvOptions {
        CsvOptions {
            delimiter: self
                .delimiter
                .as_deref()
                .and_then(crate::dataset::csv::parse_delimiter),
            header: self.header.clone(),
            trim: self.trim,
            missing: self.missing.clone(),
        }
    }
}

/// Dataset ids are used as file names and on the command line.
pub fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}
