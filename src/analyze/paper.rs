//! Reads the paper's published per-cell results (the authors' CSVs) as models and cells,
//! so that reports show the paper's 15 models beside the user's own.
//!
//! The folder holds, per model id (`gpt4o`, `llama3.1`, `t0`, …):
//! - `{id}.csv`: tests × datasets, 1 = contamination detected. Rows are the authors' test
//!   names; `incomplete_completion_random` is test 7 (the older `incomplete_completion` and
//!   the `membership` rows are not part of Table 2 and are ignored). Columns `Berkeley` and
//!   `MathE` are datasets outside the paper and are ignored.
//! - `{id}_membership.csv`: membership accuracy out of 100 per dataset (Table 2's row).
//! - `acc_membership_results.csv`: per model label (`GPT-4o`, …) the 0-shot and 1-shot
//!   accuracy per dataset, with the split of valid answers per class in brackets
//!   (`0.74 (29-71)`: 29 % and 71 % of answers per class; what is missing to 100 % was
//!   invalid). Its `member.` rows come from another run than Table 2 and are ignored.
//! - `serializations/{id}_seria_{0..3}.csv` (+ `_recent`): the serialization study (§5.5),
//!   templates the-is, equals, colon, is-equal-to.
//!
//! How they are stored: source `paper`; the main results under seed 0, the serialization
//! study — a separate run by the authors, whose default-template cells differ from the main
//! results — under seed 1, so that scores (lowest seed) reproduce Table 2 and the study
//! compares templates within one run. Accuracy files become cells of 100 trials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::dataset::catalog::builtin_descriptors;
use crate::probe::{CellResult, TestId};
use crate::request::{BackendKind, ModelIdentity};
use crate::store::{CellRow, ModelRow};

/// The `source` of imported paper cells.
pub const PAPER_SOURCE: &str = "paper";

/// The `revision` of imported models: marks a model row as written by this importer, so a
/// re-import may replace it but a user's own model of the same id is never overwritten.
pub const PAPER_REVISION: &str = "published-results";

/// Seeds under which the two runs of the authors are stored (see the module doc).
pub const MAIN_SEED: u64 = 0;
pub const SERIALIZATION_STUDY_SEED: u64 = 1;

/// The paper's templates in the order of its `seria_{i}` files (§3.3).
const TEMPLATES: [&str; 4] = ["the-is", "equals", "colon", "is-equal-to"];

/// Trials behind each accuracy value (the paper: 100 rows per dataset).
const ACCURACY_TRIALS: usize = 100;

/// What one import produces.
#[derive(Debug, Clone, Default)]
pub struct PaperResults {
    pub models: Vec<ModelRow>,
    pub cells: Vec<CellRow>,
    /// What was left out and why (printed by the command).
    pub notes: Vec<String>,
}

/// Facts about the paper's models that the CSVs do not carry: what was run, when it was
/// released, and the training cut-off its maker published (`None` where none is).
struct KnownModel {
    id: &'static str,
    label: &'static str,
    family: &'static str,
    backend: BackendKind,
    model: &'static str,
    release_date: &'static str,
    training_cutoff: Option<&'static str>,
}

const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        id: "gpt3",
        label: "GPT-3.5",
        family: "gpt",
        backend: BackendKind::OpenaiCompatible,
        model: "gpt-3.5-turbo-0125",
        release_date: "2024-01-25",
        training_cutoff: Some("2021-09"),
    },
    KnownModel {
        id: "gpt4",
        label: "GPT-4",
        family: "gpt",
        backend: BackendKind::OpenaiCompatible,
        model: "gpt-4-0125-preview",
        release_date: "2024-01-25",
        training_cutoff: Some("2023-12"),
    },
    KnownModel {
        id: "gpt4o",
        label: "GPT-4o",
        family: "gpt",
        backend: BackendKind::OpenaiCompatible,
        model: "gpt-4o-2024-08-06",
        release_date: "2024-08-06",
        training_cutoff: Some("2023-10"),
    },
    KnownModel {
        id: "gemini1.0",
        label: "Gemini 1.0",
        family: "gemini",
        backend: BackendKind::Gemini,
        model: "gemini-1.0-pro",
        release_date: "2023-12-13",
        training_cutoff: None,
    },
    KnownModel {
        id: "gemini1.5",
        label: "Gemini 1.5",
        family: "gemini",
        backend: BackendKind::Gemini,
        model: "gemini-1.5-pro",
        release_date: "2024-02-15",
        training_cutoff: Some("2023-11"),
    },
    KnownModel {
        id: "llama2",
        label: "Llama 2",
        family: "llama",
        backend: BackendKind::Local,
        model: "meta-llama/Llama-2-7b-hf",
        release_date: "2023-07-18",
        training_cutoff: Some("2022-09"),
    },
    KnownModel {
        id: "llama3",
        label: "Llama 3",
        family: "llama",
        backend: BackendKind::Local,
        model: "meta-llama/Meta-Llama-3-8B",
        release_date: "2024-04-18",
        training_cutoff: Some("2023-03"),
    },
    KnownModel {
        id: "llama3.1",
        label: "Llama 3.1",
        family: "llama",
        backend: BackendKind::Local,
        model: "meta-llama/Meta-Llama-3.1-8B",
        release_date: "2024-07-23",
        training_cutoff: Some("2023-12"),
    },
    KnownModel {
        id: "llama3.2",
        label: "Llama 3.2",
        family: "llama",
        backend: BackendKind::Local,
        model: "meta-llama/Llama-3.2",
        release_date: "2024-09-25",
        training_cutoff: Some("2023-12"),
    },
    KnownModel {
        id: "gemma",
        label: "Gemma",
        family: "gemma",
        backend: BackendKind::Local,
        model: "google/gemma-7b",
        release_date: "2024-02-21",
        training_cutoff: None,
    },
    KnownModel {
        id: "gemma2",
        label: "Gemma 2",
        family: "gemma",
        backend: BackendKind::Local,
        model: "google/gemma-2-9b",
        release_date: "2024-06-27",
        training_cutoff: None,
    },
    KnownModel {
        id: "phi2",
        label: "Phi 2",
        family: "phi",
        backend: BackendKind::Local,
        model: "microsoft/phi-2",
        release_date: "2023-12-12",
        training_cutoff: None,
    },
    KnownModel {
        id: "phi3",
        label: "Phi 3",
        family: "phi",
        backend: BackendKind::Local,
        model: "microsoft/Phi-3-mini-4k-instruct",
        release_date: "2024-04-23",
        training_cutoff: Some("2023-10"),
    },
    KnownModel {
        id: "mistral",
        label: "Mistral",
        family: "mistral",
        backend: BackendKind::Local,
        model: "mistralai/Mistral-7B-v0.1",
        release_date: "2023-09-27",
        training_cutoff: None,
    },
    KnownModel {
        id: "t0",
        label: "T0",
        family: "t0",
        backend: BackendKind::Local,
        model: "bigscience/T0",
        release_date: "2021-10-15",
        training_cutoff: None,
    },
    KnownModel {
        id: "gptj",
        label: "GPT-J",
        family: "gpt-j",
        backend: BackendKind::Local,
        model: "EleutherAI/gpt-j-6b",
        release_date: "2021-06-09",
        training_cutoff: Some("2020-12"),
    },
];

/// The authors' row names of tests 1–9. `incomplete_completion` is test 7 only in the
/// serialization files (the main files have both rows, and Table 2 uses `_random`).
fn test_of_row(row: &str, in_serialization_study: bool) -> Option<Option<TestId>> {
    Some(Some(match row {
        "features_list_inf" => TestId::FeatureListInformed,
        "features_list_uninf" => TestId::FeatureListUninformed,
        "recognition_feat" => TestId::RecognitionFeatures,
        "recognition_ex" => TestId::RecognitionExamples,
        "feature_values_inf" => TestId::FeatureValuesInformed,
        "feature_values_uninf" => TestId::FeatureValuesUninformed,
        "incomplete_completion_random" => TestId::IncompleteCompletion,
        "incomplete_completion" if in_serialization_study => TestId::IncompleteCompletion,
        "full_completion" => TestId::FullCompletion,
        "feature_completion" => TestId::FeatureCompletion,
        "incomplete_completion" | "membership" => return Some(None),
        _ => return None,
    }))
}

/// The authors' column names; `None` for their datasets outside the paper.
fn dataset_of_column(column: &str) -> Option<Option<&'static str>> {
    Some(Some(match column {
        "Adult" => "adult",
        "Bank" => "bank",
        "German" => "german",
        "Housing" => "housing",
        "Iris" => "iris",
        "Wine" => "wine",
        "Titanic" => "titanic",
        "Sp. Titanic" => "spaceship-titanic",
        "Thyroid_Diff" => "thyroid",
        "Berkeley" | "MathE" => return Some(None),
        _ => return None,
    }))
}

/// Reads every result file of `dir`. Model ids are the file names, prefixed by `id_prefix`.
pub fn read_paper_results(dir: &Path, id_prefix: &str) -> anyhow::Result<PaperResults> {
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the results folder {}", dir.display()))?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".csv").map(str::to_string))
        .filter(|stem| !stem.ends_with("_membership") && stem != "acc_membership_results")
        .collect();
    ids.sort();
    if ids.is_empty() {
        bail!(
            "no per-model result files ({{model}}.csv) in {}; expected the paper's results folder (e.g. ../shared/parity/paper-results)",
            dir.display()
        );
    }
    let mut results = PaperResults::default();
    let labels = read_labels(dir, &ids)?;
    let dataset_by_name = dataset_names()?;
    for stem in &ids {
        let id = format!("{id_prefix}{stem}");
        results
            .models
            .push(model_row(&id, stem, labels.get(stem.as_str())));
        let grid = dir.join(format!("{stem}.csv"));
        results
            .cells
            .extend(read_grid(&grid, &id, MAIN_SEED, None)?);
        let membership = dir.join(format!("{stem}_membership.csv"));
        if membership.is_file() {
            results
                .cells
                .extend(read_membership(&membership, &id, &dataset_by_name)?);
        } else {
            results.notes.push(format!(
                "{stem}: no {stem}_membership.csv, so no membership score"
            ));
        }
        for (index, template) in TEMPLATES.iter().enumerate() {
            for suffix in ["", "_recent"] {
                let file = dir
                    .join("serializations")
                    .join(format!("{stem}_seria_{index}{suffix}.csv"));
                if file.is_file() {
                    results.cells.extend(read_grid(
                        &file,
                        &id,
                        SERIALIZATION_STUDY_SEED,
                        Some(template),
                    )?);
                }
            }
        }
    }
    let accuracy = dir.join("acc_membership_results.csv");
    if accuracy.is_file() {
        let label_to_stem: BTreeMap<&str, &str> = labels
            .iter()
            .map(|(stem, label)| (label.as_str(), *stem))
            .collect();
        results.cells.extend(read_accuracy(
            &accuracy,
            id_prefix,
            &label_to_stem,
            &mut results.notes,
        )?);
    } else {
        results
            .notes
            .push("no acc_membership_results.csv, so no 0-shot / 1-shot accuracy".to_string());
    }
    Ok(results)
}

fn model_row(id: &str, stem: &str, label: Option<&String>) -> ModelRow {
    let known = KNOWN_MODELS.iter().find(|k| k.id == stem);
    ModelRow {
        id: id.to_string(),
        label: label
            .cloned()
            .or_else(|| known.map(|k| k.label.to_string()))
            .unwrap_or_else(|| stem.to_string()),
        family: known.map(|k| k.family.to_string()),
        identity: ModelIdentity {
            backend: known.map_or(BackendKind::Local, |k| k.backend),
            model: known.map_or(stem, |k| k.model).to_string(),
            revision: PAPER_REVISION.to_string(),
        },
        release_date: known.map(|k| k.release_date.to_string()),
        training_cutoff: known.and_then(|k| k.training_cutoff.map(str::to_string)),
        exposure: None,
        step: None,
        updated_at: None,
    }
}

/// Model labels from the `LLM` column of acc_membership_results.csv, matched to file ids:
/// `Llama 3.1` → `llama3.1`, `GPT-4o` → `gpt4o` (lowercase, no spaces or dashes); failing
/// that, a unique id that is the label's prefix up to a dot (`GPT-3.5` → `gpt3`).
fn read_labels<'a>(dir: &Path, ids: &'a [String]) -> anyhow::Result<BTreeMap<&'a str, String>> {
    let file = dir.join("acc_membership_results.csv");
    let mut labels = BTreeMap::new();
    if !file.is_file() {
        return Ok(labels);
    }
    for record in read_csv(&file)?.records {
        let Some(label) = record.first().filter(|l| !l.is_empty()) else {
            continue;
        };
        if let Some(stem) = stem_of_label(label, ids) {
            labels.entry(stem).or_insert_with(|| label.clone());
        }
    }
    Ok(labels)
}

fn stem_of_label<'a>(label: &str, ids: &'a [String]) -> Option<&'a str> {
    let normalized: String = label
        .to_lowercase()
        .chars()
        .filter(|c| !matches!(c, ' ' | '-'))
        .collect();
    if let Some(id) = ids.iter().find(|id| **id == normalized) {
        return Some(id);
    }
    let mut prefixes = ids
        .iter()
        .filter(|id| normalized.starts_with(&format!("{id}.")));
    match (prefixes.next(), prefixes.next()) {
        (Some(id), None) => Some(id),
        _ => None,
    }
}

/// Membership files name datasets as in prompts (`adult income`, `spaceship_titanic`).
fn dataset_names() -> anyhow::Result<BTreeMap<String, String>> {
    let mut names = BTreeMap::new();
    for d in builtin_descriptors()? {
        names.insert(normalize_name(&d.name), d.id.clone());
        names.insert(normalize_name(&d.id), d.id.clone());
        for alias in &d.aliases {
            names.insert(normalize_name(alias), d.id.clone());
        }
    }
    Ok(names)
}

fn normalize_name(name: &str) -> String {
    name.trim().to_lowercase().replace(['_', '-'], " ")
}

struct Csv {
    header: Vec<String>,
    records: Vec<Vec<String>>,
}

/// The authors' files are plain comma-separated values without quoting.
fn read_csv(path: &Path) -> anyhow::Result<Csv> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        bail!("{} is empty", path.display())
    };
    let split = |line: &str| {
        line.split(',')
            .map(|f| f.trim().to_string())
            .collect::<Vec<_>>()
    };
    let header = split(header.trim_start_matches('\u{feff}'));
    let mut records = Vec::new();
    for (index, line) in lines {
        if line.contains('"') {
            bail!(
                "{}:{}: quoted fields are not expected in the paper's result files",
                path.display(),
                index + 1
            );
        }
        let record = split(line);
        if record.len() != header.len() {
            bail!(
                "{}:{}: {} fields where the header has {}",
                path.display(),
                index + 1,
                record.len(),
                header.len()
            );
        }
        records.push(record);
    }
    Ok(Csv { header, records })
}

fn columns(path: &Path, header: &[String]) -> anyhow::Result<Vec<Option<&'static str>>> {
    header
        .iter()
        .skip(1)
        .map(|column| {
            dataset_of_column(column).with_context(|| {
                format!(
                    "{}: unknown dataset column `{column}` (known: Adult, Bank, German, Housing, Iris, Wine, Titanic, Sp. Titanic, Thyroid_Diff; ignored: Berkeley, MathE)",
                    path.display()
                )
            })
        })
        .collect()
}

/// A tests × datasets file of 0/1 verdicts.
fn read_grid(
    path: &Path,
    model: &str,
    seed: u64,
    template: Option<&str>,
) -> anyhow::Result<Vec<CellRow>> {
    let csv = read_csv(path)?;
    let in_study = template.is_some();
    let datasets = columns(path, &csv.header)?;
    let mut cells = Vec::new();
    for record in &csv.records {
        let row = record[0].as_str();
        let test = test_of_row(row, in_study).with_context(|| {
            format!(
                "{}: unknown test row `{row}` (expected the authors' names: features_list_inf, features_list_uninf, recognition_feat, recognition_ex, feature_values_inf, feature_values_uninf, incomplete_completion_random, full_completion, feature_completion)",
                path.display()
            )
        })?;
        let Some(test) = test else { continue };
        for (value, dataset) in record.iter().skip(1).zip(&datasets) {
            let Some(dataset) = dataset else { continue };
            let passed = match value.parse::<f64>() {
                Ok(0.0) => false,
                Ok(1.0) => true,
                _ => bail!(
                    "{}: row `{row}`, dataset `{dataset}`: expected 0 or 1, found `{value}`",
                    path.display()
                ),
            };
            let serialization = test
                .serializes_rows()
                .then(|| template.unwrap_or(TEMPLATES[0]).to_string());
            // Tests without rows are the same under every template: the study files repeat
            // none of them, and the main files' cells stand for all templates.
            cells.push(CellRow {
                source: PAPER_SOURCE.to_string(),
                model: model.to_string(),
                dataset: dataset.to_string(),
                test,
                serialization,
                seed,
                result: CellResult {
                    passed,
                    score: f64::from(u8::from(passed)),
                    trials: 0,
                    passed_trials: 0,
                    invalid_trials: 0,
                    trial_chance: None,
                },
                samples: Vec::new(),
                skipped: None,
                echo_trials: None,
                chance: None,
                run_id: None,
            });
        }
    }
    Ok(cells)
}

/// `{model}_membership.csv`: accuracy out of 100 per dataset name.
fn read_membership(
    path: &Path,
    model: &str,
    dataset_by_name: &BTreeMap<String, String>,
) -> anyhow::Result<Vec<CellRow>> {
    let csv = read_csv(path)?;
    let mut cells = Vec::new();
    for record in &csv.records {
        let name = record[0].as_str();
        let dataset = dataset_by_name
            .get(&normalize_name(name))
            .with_context(|| format!("{}: unknown dataset `{name}`", path.display()))?;
        let value = record.get(1).map(String::as_str).unwrap_or("");
        let percent: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| (0.0..=100.0).contains(v))
            .with_context(|| {
                format!(
                    "{}: dataset `{name}`: expected an accuracy out of 100, found `{value}`",
                    path.display()
                )
            })?;
        cells.push(accuracy_cell(
            model,
            dataset,
            TestId::Membership,
            percent / 100.0,
            0,
        ));
    }
    Ok(cells)
}

/// acc_membership_results.csv: 0-shot and 1-shot rows per model label.
fn read_accuracy(
    path: &Path,
    id_prefix: &str,
    label_to_stem: &BTreeMap<&str, &str>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<CellRow>> {
    let csv = read_csv(path)?;
    if csv.header.get(1).map(String::as_str) != Some("type") {
        bail!(
            "{}: expected the columns `LLM,type,<datasets>…`",
            path.display()
        );
    }
    let datasets = columns(path, &csv.header[1..])?;
    let mut cells = Vec::new();
    for record in &csv.records {
        let (label, kind) = (record[0].as_str(), record[1].as_str());
        let test = match kind {
            "0-shot" => TestId::Classify0Shot,
            "1-shot" => TestId::Classify1Shot,
            "member." => continue,
            other => bail!(
                "{}: unknown row type `{other}` (expected 0-shot, 1-shot or member.)",
                path.display()
            ),
        };
        let Some(stem) = label_to_stem.get(label) else {
            notes.push(format!(
                "{}: no results file matches the model label `{label}`; its accuracy is skipped",
                path.display()
            ));
            continue;
        };
        let model = format!("{id_prefix}{stem}");
        for (value, dataset) in record.iter().skip(2).zip(&datasets) {
            let Some(dataset) = dataset else { continue };
            let (accuracy, answered) = parse_accuracy(value)
                .with_context(|| format!("{}: `{label}` {kind} `{dataset}`: cannot read `{value}` (expected e.g. `0.74 (29-71)`)", path.display()))?;
            let invalid =
                ACCURACY_TRIALS.saturating_sub(answered.unwrap_or(ACCURACY_TRIALS as u64) as usize);
            cells.push(accuracy_cell(&model, dataset, test, accuracy, invalid));
        }
    }
    Ok(cells)
}

/// `0.74 (29-71)` → (0.74, Some(100)): the accuracy and the percentage of valid answers.
fn parse_accuracy(value: &str) -> Option<(f64, Option<u64>)> {
    let (accuracy, split) = match value.split_once('(') {
        Some((a, rest)) => (a.trim(), Some(rest.trim_end_matches(')'))),
        None => (value.trim(), None),
    };
    let accuracy: f64 = accuracy.parse().ok().filter(|a| (0.0..=1.0).contains(a))?;
    let answered = match split {
        Some(split) => Some(
            split
                .split('-')
                .map(|p| p.trim().parse::<u64>().ok())
                .sum::<Option<u64>>()?,
        ),
        None => None,
    };
    Some((accuracy, answered))
}

fn accuracy_cell(
    model: &str,
    dataset: &str,
    test: TestId,
    accuracy: f64,
    invalid: usize,
) -> CellRow {
    let correct = (accuracy * ACCURACY_TRIALS as f64).round() as usize;
    CellRow {
        source: PAPER_SOURCE.to_string(),
        model: model.to_string(),
        dataset: dataset.to_string(),
        test,
        serialization: Some(TEMPLATES[0].to_string()),
        seed: MAIN_SEED,
        result: CellResult {
            passed: false,
            score: accuracy,
            trials: ACCURACY_TRIALS,
            passed_trials: correct,
            invalid_trials: invalid.min(ACCURACY_TRIALS - correct),
            trial_chance: None,
        },
        samples: Vec::new(),
        skipped: None,
        echo_trials: None,
        chance: None,
        run_id: None,
    }
}

/// Where the tests find the paper's results: `../shared/parity/paper-results` beside the
/// checkout (never committed).
pub fn default_results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/parity/paper-results")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_values_parse() {
        assert_eq!(parse_accuracy("0.74 (29-71)"), Some((0.74, Some(100))));
        assert_eq!(parse_accuracy("0.07 (0-55-0)"), Some((0.07, Some(55))));
        assert_eq!(parse_accuracy("1"), Some((1.0, None)));
        assert_eq!(parse_accuracy("x (1-2)"), None);
    }

    #[test]
    fn labels_match_file_ids() {
        let ids: Vec<String> = [
            "gpt3",
            "gpt4",
            "gpt4o",
            "llama3",
            "llama3.1",
            "gemini1.0",
            "gptj",
            "t0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(stem_of_label("GPT-3.5", &ids), Some("gpt3"));
        assert_eq!(stem_of_label("GPT-4o", &ids), Some("gpt4o"));
        assert_eq!(stem_of_label("GPT-4", &ids), Some("gpt4"));
        assert_eq!(stem_of_label("Llama 3.1", &ids), Some("llama3.1"));
        assert_eq!(stem_of_label("Llama 3", &ids), Some("llama3"));
        assert_eq!(stem_of_label("Gemini 1.0", &ids), Some("gemini1.0"));
        assert_eq!(stem_of_label("GPT-J", &ids), Some("gptj"));
        assert_eq!(stem_of_label("Phi 2", &ids), None);
    }
}
