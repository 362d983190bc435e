//! What a checkpoint is trained on: the text of each dataset (the raw CSV file as it
//! appears on the web, or its rows serialized with a template), restricted to a seeded
//! selection of rows, and cut into token windows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::TrainError;
use crate::dataset::Serialization;
use crate::dataset::catalog::Catalog;

/// How a dataset is written out for training.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TextForm {
    /// The CSV file's own lines (header and the selected rows), as published.
    Raw,
    /// One serialized row per line (`the-is`, `colon`, …: SPEC §1).
    Template(String),
}

impl TextForm {
    pub fn parse(text: &str) -> Result<TextForm, TrainError> {
        if text == "raw" {
            return Ok(TextForm::Raw);
        }
        match Serialization::builtin(text) {
            Some(_) => Ok(TextForm::Template(text.to_string())),
            None => Err(TrainError::BadExposure(format!(
                "unknown text form `{text}`: use raw or a serialization template ({})",
                Serialization::builtins()
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    pub fn label(&self) -> &str {
        match self {
            TextForm::Raw => "raw",
            TextForm::Template(id) => id,
        }
    }
}

/// How the training text is cut into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowLayout {
    /// Consecutive windows over the token stream: every token is a target once per epoch.
    Packed,
    /// One window starting at each line (each row, and the raw file's header), running on
    /// over the following lines: every row is seen at the start of a context and after each
    /// of the rows before it. Costs about `seq / row length` times more tokens per epoch;
    /// makes a small model continue rows whatever precedes them (a prompt's instructions).
    Rows,
    /// Each epoch, the [`WindowLayout::Rows`] windows of the file order and those of a fresh
    /// seeded order of the rows (a raw file's header stays first): the model learns which
    /// row follows which (full completion) and each row for itself, whatever rows precede
    /// it (incomplete and feature completion, whose prompts show rows out of file order).
    /// Twice the tokens of `rows` per epoch.
    Mixed,
}

impl WindowLayout {
    pub fn parse(text: &str) -> Result<WindowLayout, TrainError> {
        match text {
            "packed" => Ok(WindowLayout::Packed),
            "rows" => Ok(WindowLayout::Rows),
            "mixed" => Ok(WindowLayout::Mixed),
            other => Err(TrainError::BadExposure(format!(
                "--windows `{other}`: use packed, rows or mixed"
            ))),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            WindowLayout::Packed => "packed",
            WindowLayout::Rows => "rows",
            WindowLayout::Mixed => "mixed",
        }
    }
}

/// Which rows of each dataset are trained on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RowSelection {
    All,
    /// A seeded random fraction of the rows (the others are not trained on).
    Fraction(f64),
    /// A seeded held-out share: these rows are never seen, the rest is trained on.
    Holdout(f64),
    /// The file's last share held out, its first rows trained on. A web copy of a file is
    /// seen whole, so the tests that show a file's first rows (full completion, row
    /// completion) must find every row before their target trained; for rows drawn alike
    /// (synthetic tables) the tail is as fair a held-out set as a random one.
    Tail(f64),
}

impl RowSelection {
    pub fn parse(text: &str) -> Result<RowSelection, TrainError> {
        let bad = || {
            TrainError::BadExposure(format!(
                "--rows `{text}`: use all, a fraction in (0, 1] such as 0.5, holdout:F or tail:F with F in (0, 1) such as holdout:0.2"
            ))
        };
        if text == "all" {
            return Ok(RowSelection::All);
        }
        for (prefix, selection) in [
            ("holdout:", RowSelection::Holdout as fn(f64) -> RowSelection),
            ("tail:", RowSelection::Tail),
        ] {
            if let Some(share) = text.strip_prefix(prefix) {
                let share: f64 = share.parse().map_err(|_| bad())?;
                return if share > 0.0 && share < 1.0 {
                    Ok(selection(share))
                } else {
                    Err(bad())
                };
            }
        }
        let fraction: f64 = text.parse().map_err(|_| bad())?;
        if fraction > 0.0 && fraction <= 1.0 {
            Ok(RowSelection::Fraction(fraction))
        } else {
            Err(bad())
        }
    }

    pub fn label(&self) -> String {
        match self {
            RowSelection::All => "all".into(),
            RowSelection::Fraction(f) => format!("{f}"),
            RowSelection::Holdout(f) => format!("holdout:{f}"),
            RowSelection::Tail(f) => format!("tail:{f}"),
        }
    }

    /// The trained row indexes (file order) of a table of `rows` rows.
    pub fn pick(&self, rows: usize, seed: u64, dataset: &str) -> Vec<usize> {
        let keep = match self {
            RowSelection::All => return (0..rows).collect(),
            RowSelection::Fraction(f) => ((rows as f64) * f).round() as usize,
            RowSelection::Holdout(f) => rows - ((rows as f64) * f).round() as usize,
            RowSelection::Tail(f) => {
                return (0..rows - ((rows as f64) * f).round() as usize).collect();
            }
        };
        let mut order: Vec<usize> = (0..rows).collect();
        SeededRng::new(&format!("train-rows/{dataset}/{seed}")).shuffle(&mut order);
        let mut picked = order[..keep.min(rows)].to_vec();
        picked.sort_unstable();
        picked
    }
}

/// splitmix64 seeded from a blake3 of a key: the same draws on every platform and version.
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(key: &str) -> Self {
        let hash = blake3::hash(key.as_bytes());
        SeededRng(u64::from_le_bytes(
            hash.as_bytes()[..8].try_into().expect("8 bytes"),
        ))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}

/// The text of every dataset and the rows it holds.
#[derive(Debug, Clone)]
pub struct TrainingText {
    /// One document per dataset, in the order given.
    pub documents: Vec<(String, String)>,
    /// Dataset id → trained row indexes (from 0, file order, header excluded).
    pub trained_rows: BTreeMap<String, Vec<usize>>,
    /// Dataset id → its number of rows.
    pub total_rows: BTreeMap<String, usize>,
    /// blake3 of the documents (each bound to its dataset id).
    pub digest: String,
}

/// Loads each dataset and writes its selected rows in the text form.
pub fn training_text(
    catalog: &Catalog,
    datasets: &[String],
    form: &TextForm,
    rows: RowSelection,
    seed: u64,
) -> Result<TrainingText, TrainError> {
    let mut documents = Vec::new();
    let mut trained_rows = BTreeMap::new();
    let mut total_rows = BTreeMap::new();
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"tabcontam-training-text-v1\0");
    for name in datasets {
        let dataset = catalog
            .load(name)
            .map_err(|e| TrainError::Dataset(format!("{e:#}")))?;
        let table = &dataset.table;
        let picked = rows.pick(table.n_rows(), seed, &dataset.id);
        let text = match form {
            TextForm::Template(id) => {
                let template = Serialization::builtin(id).expect("checked at parse");
                let mut text = String::new();
                for &row in &picked {
                    text.push_str(&template.row(table, row));
                    text.push('\n');
                }
                text
            }
            TextForm::Raw => raw_lines(catalog, &dataset.id, table.n_rows(), &picked)?,
        };
        hasher.update(dataset.id.as_bytes());
        hasher.update(b"\0");
        hasher.update(&(text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
        total_rows.insert(dataset.id.clone(), table.n_rows());
        trained_rows.insert(dataset.id.clone(), picked);
        documents.push((dataset.id.clone(), text));
    }
    Ok(TrainingText {
        documents,
        trained_rows,
        total_rows,
        digest: format!("blake3:{}", hasher.finalize().to_hex()),
    })
}

/// The file's header line and the lines of the picked rows, byte for byte.
fn raw_lines(
    catalog: &Catalog,
    id: &str,
    n_rows: usize,
    picked: &[usize],
) -> Result<String, TrainError> {
    let descriptor = catalog
        .find(id)
        .map_err(|e| TrainError::Dataset(format!("{e:#}")))?;
    let (_, location) = catalog
        .locate(descriptor)
        .ok_or_else(|| TrainError::Dataset(format!("{:#}", catalog.not_found(descriptor))))?;
    let bytes = location
        .read()
        .map_err(|e| TrainError::Dataset(format!("{e:#}")))?;
    let text = String::from_utf8_lossy(&bytes);
    if picked.len() == n_rows {
        return Ok(text.into_owned());
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // A header plus one line per row; anything else (quoted line breaks, no header) cannot
    // be cut by row index.
    if lines.len() != n_rows + 1 {
        return Err(TrainError::BadExposure(format!(
            "dataset {id}: its file has {} non-empty lines for {n_rows} rows, so rows cannot be selected in the raw form; use --rows all or a template such as --text the-is",
            lines.len()
        )));
    }
    let mut out = String::from(lines[0]);
    out.push('\n');
    for &row in picked {
        out.push_str(lines[row + 1]);
        out.push('\n');
    }
    Ok(out)
}

/// A window of at most `seq + 1` ids: the inputs and, shifted by one, their targets.
#[derive(Debug, Clone)]
pub struct Window {
    pub ids: Vec<u32>,
}

/// Cuts one token stream into windows of `seq` predicted tokens (consecutive windows share
/// one token, so every token but the first is a target exactly once).
pub fn windows(tokens: &[u32], seq: usize) -> Vec<Window> {
    let mut out = Vec::new();
    let mut start = 0;
    while start + 1 < tokens.len() {
        let end = (start + seq + 1).min(tokens.len());
        out.push(Window {
            ids: tokens[start..end].to_vec(),
        });
        start += seq;
    }
    out
}

/// Windows of [`WindowLayout::Rows`]: for each line of `document`, that line and the next
/// ones, cut at `seq + 1` tokens (`encode` gives a text's ids, special tokens included).
pub fn row_windows(
    document: &str,
    seq: usize,
    encode: &dyn Fn(&str) -> Result<Vec<u32>, TrainError>,
) -> Result<Vec<Window>, TrainError> {
    let lines: Vec<&str> = document.lines().collect();
    let mut out = Vec::new();
    for start in 0..lines.len() {
        let mut text = String::new();
        let mut ids = Vec::new();
        for line in &lines[start..] {
            text.push_str(line);
            text.push('\n');
            ids = encode(&text)?;
            if ids.len() > seq {
                break;
            }
        }
        ids.truncate(seq + 1);
        if ids.len() >= 2 {
            out.push(Window { ids });
        }
    }
    Ok(out)
}

/// `document` with its rows in a seeded order: the lines after the first `keep` (a raw
/// file's header) are shuffled.
pub fn reorder_rows(document: &str, keep: usize, rng: &mut SeededRng) -> String {
    let mut lines: Vec<&str> = document.lines().collect();
    let keep = keep.min(lines.len());
    rng.shuffle(&mut lines[keep..]);
    let mut out = String::with_capacity(document.len() + 1);
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_parse_and_pick_seeded_rows() {
        assert_eq!(RowSelection::parse("all").unwrap(), RowSelection::All);
        let half = RowSelection::parse("0.5").unwrap();
        let picked = half.pick(150, 7, "iris");
        assert_eq!(picked.len(), 75);
        assert_eq!(picked, half.pick(150, 7, "iris"));
        assert_ne!(picked, half.pick(150, 8, "iris"));
        assert!(picked.windows(2).all(|w| w[0] < w[1]));
        let held = RowSelection::parse("holdout:0.2")
            .unwrap()
            .pick(150, 7, "iris");
        assert_eq!(held.len(), 120);
        let tail = RowSelection::parse("tail:0.2").unwrap();
        assert_eq!(tail.label(), "tail:0.2");
        assert_eq!(tail.pick(20, 7, "iris"), (0..16).collect::<Vec<_>>());
        for bad in [
            "0",
            "1.5",
            "holdout:1",
            "holdout:x",
            "tail:0",
            "tail:1",
            "most",
        ] {
            let err = RowSelection::parse(bad).unwrap_err().to_string();
            assert!(err.contains("--rows"), "{err}");
        }
        assert!(TextForm::parse("the-is").is_ok());
        assert!(
            TextForm::parse("prose")
                .unwrap_err()
                .to_string()
                .contains("raw")
        );
    }

    #[test]
    fn windows_cover_every_target_once() {
        let tokens: Vec<u32> = (0..10).collect();
        let ws = windows(&tokens, 4);
        assert_eq!(ws.len(), 3);
        assert_eq!(ws[0].ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(ws[2].ids, vec![8, 9]);
        let targets: usize = ws.iter().map(|w| w.ids.len() - 1).sum();
        assert_eq!(targets, 9);
    }

    #[test]
    fn reordering_keeps_the_header_and_every_row() {
        let document = "a,b\n1,2\n3,4\n5,6\n7,8\n";
        let mut rng = SeededRng::new("reorder");
        let once = reorder_rows(document, 1, &mut rng);
        assert!(once.starts_with("a,b\n"));
        let mut rows: Vec<&str> = once.lines().skip(1).collect();
        rows.sort_unstable();
        assert_eq!(rows, ["1,2", "3,4", "5,6", "7,8"]);
        // A fresh order each call (some draw in ten differs from the file order).
        assert!((0..10).any(|_| reorder_rows(document, 1, &mut rng) != document));
        assert_eq!(WindowLayout::parse("mixed").unwrap().label(), "mixed");
    }
}
