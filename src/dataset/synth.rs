//! Synthetic datasets (SPEC §8 negatives): a fresh table with an invented name, invented
//! column names and invented categorical values, deterministic per seed, that no
//! pretraining corpus can contain. A spec names one `synthetic:<seed>` (200 rows) or
//! `synthetic:<seed>:<rows>`; its id in the cache and reports is `synthetic-<seed>[-<rows>]`.
//! `tabcontam datasets synth` writes the same table and descriptor to files.
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

/// `(seed, rows)` of `synthetic:<seed>[:<rows>]` or of an id `synthetic-<seed>[-<rows>]`;
/// `None` for other names. A malformed synthetic name is an error that says the form.
pub fn parse_name(name: &str) -> Option<Result<(u64, usize), String>> {
    let (rest, sep) = if let Some(rest) = name.strip_prefix(SPEC_PREFIX) {
        (rest, ':')
    } else if let Some(rest) = name.strip_prefix(ID_PREFIX) {
        (rest, '-')
    } else {
        return None;
    };
    let bad = || {
        format!(
            "dataset \"{name}\": write synthetic:<seed> or synthetic:<seed>:<rows> (seed an integer, {MIN_ROWS} ≤ rows ≤ {MAX_ROWS})"
        )
    };
    let mut parts = rest.split(sep);
    let seed = parts.next().and_then(|s| s.parse::<u64>().ok());
    let rows = match parts.next() {
        None => Some(DEFAULT_ROWS),
        Some(r) => r.parse::<usize>().ok(),
    };
    Some(match (seed, rows, parts.next()) {
        (Some(seed), Some(rows), None) if (MIN_ROWS..=MAX_ROWS).contains(&rows) => Ok((seed, rows)),
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
    seed: u64,
    rows: usize,
    out: &std::path::Path,
) -> anyhow::Result<(Synthetic, std::path::PathBuf)> {
    use anyhow::Context;
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
    let generated = generate(seed, rows);
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
    let id = id(seed, rows);
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
    let mut csv = header.join(",");
    csv.push('\n');
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
        csv.push_str(&fields.join(","));
        csv.push('\n');
    }
    let file_name = format!("{id}.csv");
    let blake3 = blake3::hash(csv.as_bytes()).to_hex().to_string();
    let categorical_list = format!("[\"{}\", \"{}\"]", categorical[0].0, categorical[1].0);
    let descriptor_toml = format!(
        r#"# Synthetic dataset generated by tabcontam (seed {seed}, {rows} rows): invented name,
# columns and values, so no pretraining corpus contains it (SPEC §8 negatives).
id = "{id}"
name = "{name}"
aliases = ["{alias}"]
target = "{target}"
categorical = {categorical_list}
completion_feature = "{unique}"
released = "2026"
source = "generated by tabcontam datasets synth --seed {seed} --rows {rows}"
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
        assert_eq!(parse_name("synthetic:7"), Some(Ok((7, DEFAULT_ROWS))));
        assert_eq!(parse_name("synthetic:7:50"), Some(Ok((7, 50))));
        assert_eq!(parse_name("synthetic-7-50"), Some(Ok((7, 50))));
        assert!(matches!(parse_name("synthetic:x"), Some(Err(_))));
        assert!(matches!(parse_name("synthetic:7:3"), Some(Err(_))));
        assert_eq!(parse_name("iris"), None);
        assert_eq!(generate(7, 50), generate(7, 50));
        assert_ne!(generate(7, 50).csv, generate(8, 50).csv);
        assert!(is_synthetic(&generate(7, 50).id));
    }
}
