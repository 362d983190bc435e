//! Synthetic datasets (SPEC §8 negatives): a fresh table with an invented name, invented
//! column names and invented categorical values, deterministic per seed, that no
//! pretraining corpus can contain. A spec names one `synthetic:<seed>` (200 rows),
//! `synthetic:<seed>:<rows>`, or `synthetic:<seed>:<rows>:<order>` with the rows written
//! `sorted` by the integer column or `grouped` by the first categorical column (the orders
//! a real file often has, for the row-order test's null); its id in the cache and reports
//! is `synthetic-<seed>[-<rows>][-<order>]`. `tabcontam datasets synth` writes the same
//! table and descriptor to files.
//!
//! Every test can run on it: it has a target with a yes/no question (tests 11–12),
//! categorical features (5–6), a near-unique completion feature (9) and enough rows and
//! varying columns for membership (10).

use crate::probe::rng::{DrawKey, TrialRng};

/// How a spec names a synthetic dataset.
pub const SPEC_PREFIX: &str = "synthetic:";
/// Prefix of a synthetic dataset's id.
pub const ID_PREFIX: &str = "synthetic-";
/// Rows when the spec gives none.
pub const DEFAULT_ROWS: usize = 200;
/// Fewer rows would leave tests without enough examples (test 7 shows 4 rows and a fifth).
pub const MIN_ROWS: usize = 10;
/// A bound that keeps a typo from generating gigabytes.
pub const MAX_ROWS: usize = 1_000_000;

/// Whether a dataset id names a synthetic dataset (a negative whose ground truth is certain).
pub fn is_synthetic(id: &str) -> bool {
    id.starts_with(ID_PREFIX)
}

/// The order a synthetic table's rows are written in. The rows themselves are the same:
/// `sorted` and `grouped` reorder the shuffled file's rows (stable, so ties keep it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowOrder {
    /// As drawn: exchangeable, the row-order test's plain null.
    #[default]
    Shuffled,
    /// Ascending by the integer column: a trend no permutation within blocks can absorb.
    Sorted,
    /// Equal values of the first categorical column together (as iris is by class).
    Grouped,
}

impl RowOrder {
    /// The order a word names (`shuffled`, `sorted`, `grouped`).
    pub fn from_word(text: &str) -> Option<Self> {
        match text {
            "shuffled" => Some(RowOrder::Shuffled),
            "sorted" => Some(RowOrder::Sorted),
            "grouped" => Some(RowOrder::Grouped),
            _ => None,
        }
    }

    /// The order's word in names and ids; `None` for the default.
    pub fn label(self) -> Option<&'static str> {
        match self {
            RowOrder::Shuffled => None,
            RowOrder::Sorted => Some("sorted"),
            RowOrder::Grouped => Some("grouped"),
        }
    }
}

/// What a synthetic dataset's name says: its seed, its number of rows and their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticName {
    pub seed: u64,
    pub rows: usize,
    pub order: RowOrder,
}

impl SyntheticName {
    /// How a spec names this dataset (`synthetic:7`, `synthetic:7:50`, `synthetic:7:50:sorted`).
    pub fn spec_name(&self) -> String {
        let SyntheticName { seed, rows, order } = *self;
        match (rows == DEFAULT_ROWS, order.label()) {
            (true, None) => format!("{SPEC_PREFIX}{seed}"),
            (false, None) => format!("{SPEC_PREFIX}{seed}:{rows}"),
            (_, Some(order)) => format!("{SPEC_PREFIX}{seed}:{rows}:{order}"),
        }
    }
}

/// The parts of `synthetic:<seed>[:<rows>[:<order>]]` or of an id
/// `synthetic-<seed>[-<rows>][-<order>]`; `None` for other names. A malformed synthetic
/// name is an error that says the form.
pub fn parse_name(name: &str) -> Option<Result<SyntheticName, String>> {
    let (rest, sep) = if let Some(rest) = name.strip_prefix(SPEC_PREFIX) {
        (rest, ':')
    } else if let Some(rest) = name.strip_prefix(ID_PREFIX) {
        (rest, '-')
    } else {
        return None;
    };
    let bad = || {
        format!(
            "dataset \"{name}\": write synthetic:<seed>, synthetic:<seed>:<rows> or synthetic:<seed>:<rows>:<order> (seed an integer, {MIN_ROWS} ≤ rows ≤ {MAX_ROWS}, order shuffled, sorted or grouped)"
        )
    };
    let parts: Vec<&str> = rest.split(sep).collect();
    // An id leaves out the default rows: `synthetic-7-sorted` is 200 rows, sorted.
    let (seed, rows, order) = match parts.as_slice() {
        [seed] => (seed, None, None),
        [seed, last] if RowOrder::from_word(last).is_some() => (seed, None, Some(*last)),
        [seed, rows] => (seed, Some(*rows), None),
        [seed, rows, order] => (seed, Some(*rows), Some(*order)),
        _ => return Some(Err(bad())),
    };
    let seed = seed.parse::<u64>().ok();
    let rows = match rows {
        None => Some(DEFAULT_ROWS),
        Some(r) => r.parse::<usize>().ok(),
    };
    let order = match order {
        None => Some(RowOrder::Shuffled),
        Some(o) => RowOrder::from_word(o),
    };
    Some(match (seed, rows, order) {
        (Some(seed), Some(rows), Some(order)) if (MIN_ROWS..=MAX_ROWS).contains(&rows) => {
            Ok(SyntheticName { seed, rows, order })
        }
        _ => Err(bad()),
    })
}

/// The canonical id of a synthetic dataset.
pub fn id(seed: u64, rows: usize) -> String {
    if rows == DEFAULT_ROWS {
        format!("{ID_PREFIX}{seed}")
    } else {
        format!("{ID_PREFIX}{seed}-{rows}")
    }
}

/// The canonical id of a named synthetic dataset (its order last, when not the default).
pub fn name_id(name: &SyntheticName) -> String {
    match name.order.label() {
        None => id(name.seed, name.rows),
        Some(order) => format!("{}-{order}", id(name.seed, name.rows)),
    }
}

/// A generated dataset: its descriptor (TOML, as `datasets/*.toml`) and its CSV file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synthetic {
    pub id: String,
    /// The file name the descriptor refers to.
    pub file_name: String,
    pub descriptor_toml: String,
    pub csv: String,
}

/// Writes the dataset of `seed` with `rows` rows to `out` and its descriptor beside it
/// (`out` with the extension `.toml`, naming `out`'s file); returns the generated dataset
/// and the descriptor's path.
pub fn write_files(
    name: &SyntheticName,
    out: &std::path::Path,
) -> anyhow::Result<(Synthetic, std::path::PathBuf)> {
    use anyhow::Context;
    let SyntheticName { seed, rows, .. } = *name;
    if !(MIN_ROWS..=MAX_ROWS).contains(&rows) {
        anyhow::bail!("--rows {rows}: give between {MIN_ROWS} and {MAX_ROWS} rows");
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
    let generated = generate_named(name);
    let descriptor = generated.descriptor_toml.replace(
        &format!("file = \"{}\"", generated.file_name),
        &format!("file = \"{file_name}\""),
    );
    let toml_path = out.with_extension("toml");
    std::fs::write(out, &generated.csv)
        .with_context(|| format!("cannot write {}", out.display()))?;
    std::fs::write(&toml_path, descriptor)
        .with_context(|| format!("cannot write {}", toml_path.display()))?;
    Ok((generated, toml_path))
}

const ONSETS: &[&str] = &[
    "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl", "st",
    "tr", "gl", "sk", "pl", "vr", "th",
];
const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ou", "ea", "y"];
const CODAS: &[&str] = &["", "", "n", "r", "l", "s", "th", "x", "m", "k"];

struct Words {
    rng: TrialRng,
    used: std::collections::HashSet<String>,
}

impl Words {
    /// An invented word of 2–3 syllables, never repeated within one dataset.
    fn word(&mut self) -> String {
        loop {
            let syllables = 2 + self.rng.below(2);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[self.rng.below(ONSETS.len())]);
                w.push_str(VOWELS[self.rng.below(VOWELS.len())]);
            }
            w.push_str(CODAS[self.rng.below(CODAS.len())]);
            if self.used.insert(w.clone()) {
                return w;
            }
        }
    }

    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }
}

/// Generates the dataset of `seed` with `rows` rows (deterministic: same seed and rows,
/// same bytes on every platform).
pub fn generate(seed: u64, rows: usize) -> Synthetic {
    generate_named(&SyntheticName {
        seed,
        rows,
        order: RowOrder::Shuffled,
    })
}

/// Generates a named synthetic dataset: the rows of [`generate`], in the name's order.
pub fn generate_named(name: &SyntheticName) -> Synthetic {
    let SyntheticName { seed, rows, order } = *name;
    let id = name_id(name);
    let mut words = Words {
        rng: TrialRng::new(DrawKey {
            seed,
            dataset: "synthetic",
            test: "generate",
            trial: 0,
            serialization: None,
        }),
        used: Default::default(),
    };
    let capitalized = |w: String| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
            .unwrap_or_default()
    };
    let name = format!("{} {}", capitalized(words.word()), words.word());
    let alias = name.to_lowercase().replace(' ', "_");
    // Three categorical features with 3–5 invented values each, an integer feature, a
    // decimal feature, a near-unique integer (the completion feature) and a yes/no target.
    let categorical: Vec<(String, Vec<String>)> = (0..3)
        .map(|_| {
            let column = words.word();
            let n = 3 + words.below(3);
            (column, (0..n).map(|_| words.word()).collect())
        })
        .collect();
    let integer = words.word();
    let decimal = words.word();
    let unique = format!("{}_{}", words.word(), words.word());
    let target = words.word();
    let mut header: Vec<String> = categorical.iter().map(|(c, _)| c.clone()).collect();
    header.extend([
        integer.clone(),
        decimal.clone(),
        unique.clone(),
        target.clone(),
    ]);
    let mut lines: Vec<Vec<String>> = Vec::with_capacity(rows);
    for _ in 0..rows {
        let mut fields: Vec<String> = Vec::with_capacity(header.len());
        let mut score = 0usize;
        for (i, (_, values)) in categorical.iter().enumerate() {
            // Skewed draws so columns have a majority value, like real data.
            let pick = words.below(values.len()).min(words.below(values.len()));
            score += pick * (i + 1);
            fields.push(values[pick].clone());
        }
        let int_value = 18 + words.below(63);
        let dec_value = words.below(1000);
        fields.push(int_value.to_string());
        fields.push(format!("{}.{}", dec_value / 10, dec_value % 10));
        fields.push((100_000 + words.below(900_000)).to_string());
        // The target depends on the features (a classifier can learn it) plus noise.
        let yes = (score + int_value / 20 + words.below(4)).is_multiple_of(2);
        fields.push(if yes { "yes" } else { "no" }.to_string());
        lines.push(fields);
    }
    // Reordered after every draw, so the three orders hold the same rows.
    match order {
        RowOrder::Shuffled => {}
        RowOrder::Sorted => lines.sort_by_key(|fields| fields[3].parse::<u64>().unwrap_or(0)),
        RowOrder::Grouped => lines.sort_by(|a, b| a[0].cmp(&b[0])),
    }
    let mut csv = header.join(",");
    csv.push('\n');
    for fields in &lines {
        csv.push_str(&fields.join(","));
        csv.push('\n');
    }
    let order_flag = order
        .label()
        .map(|o| format!(" --order {o}"))
        .unwrap_or_default();
    let file_name = format!("{id}.csv");
    let blake3 = blake3::hash(csv.as_bytes()).to_hex().to_string();
    let categorical_list = format!("[\"{}\", \"{}\"]", categorical[0].0, categorical[1].0);
    let order_note = order.label().map(|o| format!(", {o}")).unwrap_or_default();
    let descriptor_toml = format!(
        r#"# Synthetic dataset generated by tabcontam (seed {seed}, {rows} rows{order_note}): invented name,
# columns and values, so no pretraining corpus contains it (SPEC §8 negatives).
id = "{id}"
name = "{name}"
aliases = ["{alias}"]
target = "{target}"
categorical = {categorical_list}
completion_feature = "{unique}"
released = "2026"
source = "generated by tabcontam datasets synth --seed {seed} --rows {rows}{order_flag}"
licence = "CC0-1.0"

[classification]
question = "Is the {target} of this record yes?"
answers = [
    {{ answer = "Yes", values = ["yes"] }},
    {{ answer = "No", values = ["no"] }},
]

[[files]]
variant = "synthetic"
file = "{file_name}"
page = "generated"
blake3 = "{blake3}"
rows = {rows}
"#
    );
    Synthetic {
        id,
        file_name,
        descriptor_toml,
        csv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_the_same_seed_gives_the_same_bytes() {
        let named = |seed, rows, order| Some(Ok(SyntheticName { seed, rows, order }));
        assert_eq!(
            parse_name("synthetic:7"),
            named(7, DEFAULT_ROWS, RowOrder::Shuffled)
        );
        assert_eq!(
            parse_name("synthetic:7:50"),
            named(7, 50, RowOrder::Shuffled)
        );
        assert_eq!(
            parse_name("synthetic-7-50"),
            named(7, 50, RowOrder::Shuffled)
        );
        assert_eq!(
            parse_name("synthetic:7:50:sorted"),
            named(7, 50, RowOrder::Sorted)
        );
        assert_eq!(
            parse_name("synthetic-7-50-grouped"),
            named(7, 50, RowOrder::Grouped)
        );
        assert_eq!(
            parse_name("synthetic-7-sorted"),
            named(7, DEFAULT_ROWS, RowOrder::Sorted)
        );
        assert!(matches!(parse_name("synthetic:x"), Some(Err(_))));
        assert!(matches!(parse_name("synthetic:7:3"), Some(Err(_))));
        assert!(matches!(
            parse_name("synthetic:7:50:backwards"),
            Some(Err(_))
        ));
        for name in ["synthetic:7", "synthetic:7:50", "synthetic:7:50:sorted"] {
            assert_eq!(parse_name(name).unwrap().unwrap().spec_name(), name);
        }
        assert!(matches!(
            parse_name("synthetic:7:50:sorted:x"),
            Some(Err(_))
        ));
        assert_eq!(parse_name("iris"), None);
        assert_eq!(generate(7, 50), generate(7, 50));
        assert_ne!(generate(7, 50).csv, generate(8, 50).csv);
        assert!(is_synthetic(&generate(7, 50).id));
    }

    /// The data lines of a generated file, and the values of one column in file order.
    fn data_lines(csv: &str) -> Vec<&str> {
        csv.lines().skip(1).collect()
    }

    fn column(csv: &str, index: usize) -> Vec<String> {
        data_lines(csv)
            .iter()
            .map(|line| line.split(',').nth(index).unwrap().to_string())
            .collect()
    }

    #[test]
    fn sorted_and_grouped_tables_hold_the_shuffled_rows_in_their_order() {
        let shuffled = generate(11, 40);
        let name = |order| SyntheticName {
            seed: 11,
            rows: 40,
            order,
        };
        let sorted = generate_named(&name(RowOrder::Sorted));
        let grouped = generate_named(&name(RowOrder::Grouped));
        assert_eq!(sorted.id, "synthetic-11-40-sorted");
        assert_eq!(grouped.id, "synthetic-11-40-grouped");
        assert_eq!(parse_name(&sorted.id), Some(Ok(name(RowOrder::Sorted))));
        // The same rows in each (as multisets) and the same header.
        let rows = |csv: &str| {
            let mut lines: Vec<String> = data_lines(csv).iter().map(|l| l.to_string()).collect();
            lines.sort();
            lines
        };
        assert_eq!(rows(&sorted.csv), rows(&shuffled.csv));
        assert_eq!(rows(&grouped.csv), rows(&shuffled.csv));
        assert_eq!(sorted.csv.lines().next(), shuffled.csv.lines().next());
        // Sorted: the integer column ascends; grouped: each category value in one run.
        let integers: Vec<u64> = column(&sorted.csv, 3)
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(integers.windows(2).all(|w| w[0] <= w[1]), "{integers:?}");
        let categories = column(&grouped.csv, 0);
        let runs = 1 + categories.windows(2).filter(|w| w[0] != w[1]).count();
        let distinct: std::collections::HashSet<_> = categories.iter().collect();
        assert_eq!(runs, distinct.len(), "{categories:?}");
        // The shuffled file is not already in either order (or the test would prove nothing).
        assert_ne!(column(&shuffled.csv, 3), column(&sorted.csv, 3));
        assert_ne!(column(&shuffled.csv, 0), categories);
        // Each file's descriptor names its own id and checksum.
        assert!(
            sorted
                .descriptor_toml
                .contains("id = \"synthetic-11-40-sorted\"")
        );
        assert!(sorted.descriptor_toml.contains("--order sorted"));
        assert!(
            sorted
                .descriptor_toml
                .contains(&blake3::hash(sorted.csv.as_bytes()).to_hex().to_string())
        );
    }
}
