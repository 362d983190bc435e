//! Property test: no input makes the library panic. Thousands of mutated experiment specs
//! (from the shipped `experiments/*.toml`) and CSV files (from the shipped `datasets/`)
//! go through the parse, validate, import and plan functions under `catch_unwind`; any
//! panic fails the test with the seed and case that reproduce it. Errors must be one line
//! naming the file.
//!
//! Seeded and bounded: `TABCONTAM_FUZZ_SEED` (default 8) and `TABCONTAM_FUZZ_CASES`
//! (default 2000 specs and 2000 CSV files) change the run; a failure prints both.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tabcontam::dataset::catalog::Catalog;
use tabcontam::dataset::csv::{self, CsvOptions, WHITESPACE};
use tabcontam::dataset::{Dataset, Serialization};
use tabcontam::probe::{self, ProbeContext, PromptPack, TestId, Variant};
use tabcontam::run::plan::{build_plan, identity};
use tabcontam::run::spec::Spec;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A panic caught in one case: what to print so that it can be replayed.
struct Failure {
    case: String,
    message: String,
    input: String,
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".into())
}

/// Runs `f` and records a panic as a failure.
fn guarded(failures: &mut Vec<Failure>, case: String, input: &[u8], f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        let mut input = String::from_utf8_lossy(input).into_owned();
        if input.len() > 2000 {
            let mut end = 2000;
            while !input.is_char_boundary(end) {
                end -= 1;
            }
            input.truncate(end);
            input.push('…');
        }
        failures.push(Failure {
            case,
            message: panic_message(payload),
            input,
        });
    }
}

fn report(kind: &str, seed: u64, failures: &[Failure]) {
    if failures.is_empty() {
        return;
    }
    let mut text = format!(
        "{} {kind} cases panicked (TABCONTAM_FUZZ_SEED={seed}); first ones:\n",
        failures.len()
    );
    for f in failures.iter().take(5) {
        text.push_str(&format!("--- {}: {}\n{}\n", f.case, f.message, f.input));
    }
    panic!("{text}");
}

// ---------------------------------------------------------------------------------------
// Specs

/// Values a key may be replaced with: wrong types, empty, zero, huge, NaN, unknown names.
fn random_value(rng: &mut StdRng) -> toml::Value {
    use toml::Value;
    let words = [
        "",
        " ",
        "all",
        "contamination",
        "the-is",
        "colon",
        "equals",
        "is-equal-to",
        "the_is",
        "iris",
        "titanic",
        "wine",
        "adult",
        "IRIS",
        "nope",
        "1",
        "12",
        "13",
        "membership",
        "openai-compatible",
        "local",
        "anthropic",
        "gemini",
        "chat",
        "completions",
        "paper",
        "hunspell",
        "http://127.0.0.1:1/v1",
        "https://u:p@h/v1?key=k",
        "not a url",
        "\u{0}",
        "é",
        "round-robin",
    ];
    match rng.random_range(0..14) {
        0 => Value::Array(Vec::new()),
        1 => Value::String(String::new()),
        2 => Value::Integer(0),
        3 => Value::Integer(-1),
        4 => Value::Integer(i64::MAX),
        5 => Value::Integer(rng.random_range(1..5)),
        6 => Value::Float(f64::NAN),
        7 => Value::Float([f64::INFINITY, -0.5, 1e300, 0.0, 0.7, 2.5][rng.random_range(0..6)]),
        8 => Value::Boolean(rng.random()),
        9 => Value::Table(toml::map::Map::new()),
        10 | 11 => Value::String(words[rng.random_range(0..words.len())].to_string()),
        _ => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| Value::String(words[rng.random_range(0..words.len())].to_string()))
                .collect(),
        ),
    }
}

const SPEC_KEYS: &[&str] = &[
    "name",
    "seed",
    "datasets",
    "tests",
    "serializations",
    "prompt_pack",
    "alg1_profile",
    "models",
    "serialization",
];
const MODEL_KEYS: &[&str] = &[
    "id",
    "label",
    "family",
    "release_date",
    "training_cutoff",
    "backend",
    "api",
    "model",
    "revision",
    "base_url",
    "api_key_env",
    "concurrency",
    "requests_per_minute",
    "tokens_per_minute",
    "timeout_s",
    "max_retries",
    "balance",
    "backoff_base_ms",
    "backoff_max_ms",
    "headers",
    "anthropic_version",
    "max_batch",
    "lanes",
    "chat_template",
    "temperature",
    "top_p",
    "samples",
    "api_seed",
    "price_input_per_mtok",
    "price_output_per_mtok",
    "datasets",
    "tests",
    "serializations",
];

/// One structural mutation of a parsed spec: delete, retype, empty or duplicate a key.
fn mutate_table(rng: &mut StdRng, spec: &mut toml::Table) {
    let in_model = rng.random_bool(0.5);
    let models_len = spec
        .get("models")
        .and_then(|m| m.as_array())
        .map_or(0, |m| m.len());
    let target: &mut toml::Table = if in_model && models_len > 0 {
        let i = rng.random_range(0..models_len);
        match spec
            .get_mut("models")
            .and_then(|m| m.as_array_mut())
            .and_then(|m| m[i].as_table_mut())
        {
            Some(table) => table,
            None => return,
        }
    } else {
        spec
    };
    let keys = if in_model && models_len > 0 {
        MODEL_KEYS
    } else {
        SPEC_KEYS
    };
    let key = keys[rng.random_range(0..keys.len())].to_string();
    match rng.random_range(0..6) {
        0 => {
            target.remove(&key);
        }
        1 => {
            // Duplicate an element of a list (a model, a dataset, a template).
            if let Some(list) = target.get_mut(&key).and_then(|v| v.as_array_mut())
                && !list.is_empty()
            {
                let i = rng.random_range(0..list.len());
                let copy = list[i].clone();
                list.push(copy);
            }
        }
        2 => {
            // A user template with random fields.
            let mut custom = toml::Table::new();
            for field in ["id", "specifier", "value_sep", "feature_sep"] {
                if rng.random_bool(0.8) {
                    let value = if rng.random_bool(0.7) {
                        toml::Value::String(
                            ["arrow", "", " -> ", " | ", "the-is", "x y", ": "]
                                [rng.random_range(0..7)]
                            .to_string(),
                        )
                    } else {
                        random_value(rng)
                    };
                    custom.insert(field.into(), value);
                }
            }
            let list = target
                .entry("serialization")
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            if let Some(list) = list.as_array_mut() {
                list.push(toml::Value::Table(custom));
            }
        }
        _ => {
            target.insert(key, random_value(rng));
        }
    }
}

/// One textual mutation: delete, duplicate or cut a line, flip or insert bytes.
fn mutate_text(rng: &mut StdRng, text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    match rng.random_range(0..6) {
        0 if !bytes.is_empty() => {
            let at = rng.random_range(0..bytes.len());
            bytes.truncate(at);
        }
        1 => {
            let lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let i = rng.random_range(0..lines.len());
                let mut out: Vec<&str> = lines.clone();
                if rng.random_bool(0.5) {
                    out.remove(i);
                } else {
                    out.insert(i, lines[i]);
                }
                bytes = out.join("\n").into_bytes();
            }
        }
        2 if !bytes.is_empty() => {
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] = rng.random();
            }
        }
        3 => {
            let at = rng.random_range(0..=bytes.len());
            let insert = [
                b"[" as &[u8],
                b"]",
                b"\"",
                b"=",
                b"\n",
                b"[[models]]\n",
                b"'''",
                b"\xff",
                b"{",
            ][rng.random_range(0..9)];
            bytes.splice(at..at, insert.iter().copied());
        }
        4 => bytes = (0..rng.random_range(0..64)).map(|_| rng.random()).collect(),
        _ => {}
    }
    bytes
}

/// Loads each dataset name once (small shipped ones; others are errors, which is fine).
struct Datasets {
    catalog: Catalog,
    loaded: HashMap<String, Option<Dataset>>,
}

impl Datasets {
    fn get(&mut self, name: &str) -> Option<&Dataset> {
        if !self.loaded.contains_key(name) {
            // Only the small files: the property is about the spec, not the loader's speed.
            let small = ["iris", "titanic", "wine"].contains(&name);
            let dataset = if small {
                self.catalog.load(name).ok()
            } else {
                None
            };
            self.loaded.insert(name.to_string(), dataset);
        }
        self.loaded[name].as_ref()
    }
}

/// Everything a command does with a parsed spec before it touches the cache.
fn use_spec(spec: &Spec, datasets: &mut Datasets, plan: bool) {
    for model in &spec.models {
        let _ = spec.model_datasets(model);
        let _ = spec.model_tests(model);
        let _ = spec.model_serializations(model);
        let config = spec.client_config(model);
        let _ = config.endpoints();
        let _ = config.retry_policy();
        if model.backend != tabcontam::llm::BackendKind::Local {
            let _ = tabcontam::llm::client::Client::new(config);
        }
    }
    if !plan {
        return;
    }
    let mut names: Vec<String> = spec
        .models
        .iter()
        .flat_map(|m| spec.model_datasets(m).to_vec())
        .collect();
    names.sort();
    names.dedup();
    let mut tables = HashMap::new();
    for name in names {
        match datasets.get(&name) {
            Some(dataset) => {
                tables.insert(name, dataset.clone());
            }
            None => return,
        }
    }
    let identities = spec.models.iter().map(|m| identity(m, None)).collect();
    let _ = build_plan(spec, identities, &tables, &PromptPack::builtin());
}

#[test]
fn no_spec_panics_the_parser_validator_or_planner() {
    let seed = env_number("TABCONTAM_FUZZ_SEED", 8);
    let cases = env_number("TABCONTAM_FUZZ_CASES", 2000);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut seeds: Vec<(String, String)> = std::fs::read_dir(root().join("experiments"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    seeds.sort();
    assert!(
        seeds.len() >= 2,
        "the shipped experiments/*.toml are the seeds"
    );
    // A small spec over the shipped datasets, so that mutations reach the planner.
    seeds.push((
        "small.toml".into(),
        "name = \"small\"\ndatasets = [\"iris\", \"wine\"]\ntests = [\"all\"]\n\
         serializations = [\"the-is\", \"colon\"]\n\n[[serialization]]\nid = \"arrow\"\n\
         value_sep = \" -> \"\nfeature_sep = \" | \"\n\n[[models]]\nid = \"a\"\n\
         backend = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
         headers = { X-Org = \"o\" }\nserializations = [\"arrow\"]\n\n[[models]]\nid = \"b\"\n\
         backend = \"gemini\"\ntemperature = 0.7\nsamples = 2\ndatasets = [\"iris\"]\n"
            .into(),
    ));
    let mut datasets = Datasets {
        catalog: Catalog::open(None).unwrap(),
        loaded: HashMap::new(),
    };
    let path = Path::new("fuzz.toml");
    let mut failures = Vec::new();
    let (mut valid, mut planned, mut errors) = (0, 0, 0);
    for case in 0..cases {
        let (seed_name, seed_text) = &seeds[rng.random_range(0..seeds.len())];
        let mut value: toml::Table = toml::from_str(seed_text).unwrap();
        for _ in 0..rng.random_range(1..4) {
            mutate_table(&mut rng, &mut value);
        }
        let structured = toml::to_string(&value).unwrap_or_default();
        let bytes = if rng.random_bool(0.25) {
            mutate_text(&mut rng, &structured)
        } else {
            structured.into_bytes()
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        // Planning builds prompts: only a bounded number of cases go that far.
        let plan = planned < 150 && rng.random_bool(0.3);
        let label = format!("spec case {case} (from {seed_name})");
        let mut outcome = None;
        guarded(&mut failures, label.clone(), text.as_bytes(), || {
            outcome = Some(match Spec::parse(&text, path) {
                Ok(spec) => {
                    use_spec(&spec, &mut datasets, plan);
                    Ok(())
                }
                Err(err) => Err(err.to_string()),
            });
        });
        match outcome {
            Some(Ok(())) => {
                valid += 1;
                planned += usize::from(plan);
            }
            Some(Err(message)) => {
                errors += 1;
                assert!(
                    message.starts_with("fuzz.toml: ") && !message.contains('\n'),
                    "{label}: not a one-line error naming the file: {message:?}\n{text}"
                );
            }
            None => {}
        }
    }
    // Invalid UTF-8 on disk: `Spec::load` reports it, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bytes.toml");
    std::fs::write(&file, b"name = \"\xff\"\n").unwrap();
    let err = Spec::load(&file).unwrap_err().to_string();
    assert!(err.contains("bytes.toml") && !err.contains('\n'), "{err}");
    eprintln!(
        "spec fuzz: {cases} cases, {valid} valid ({planned} planned), {errors} errors, {} panics",
        failures.len()
    );
    assert!(
        valid > 0 && errors > 0,
        "the mutations must reach both outcomes"
    );
    report("spec", seed, &failures);
}

// ---------------------------------------------------------------------------------------
// CSV files

/// The first `max` bytes of a file, cut at a line end.
fn head(bytes: &[u8], max: usize) -> Vec<u8> {
    if bytes.len() <= max {
        return bytes.to_vec();
    }
    let cut = bytes[..max]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(max, |i| i + 1);
    bytes[..cut].to_vec()
}

/// One mutation of a delimited file: the faults real files have, and random bytes.
fn mutate_csv(rng: &mut StdRng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    let first_line_end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .map_or(bytes.len(), |i| i + 1);
    match rng.random_range(0..16) {
        0 => bytes.clear(),
        1 => bytes.truncate(first_line_end),
        2 if !bytes.is_empty() => {
            let at = rng.random_range(0..bytes.len());
            bytes.truncate(at);
        }
        3 => {
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..=bytes.len());
                bytes.insert(at, b'"');
            }
        }
        4 => {
            let to = [b';', b'\t', b'|', b' '][rng.random_range(0..4)];
            for b in bytes.iter_mut().filter(|b| **b == b',') {
                if rng.random_bool(0.9) {
                    *b = to;
                }
            }
        }
        5 => {
            bytes.splice(0..0, *b"\xEF\xBB\xBF");
        }
        6 => {
            let mut out = Vec::with_capacity(bytes.len() * 2);
            let cr_only = rng.random_bool(0.3);
            for &b in &bytes {
                if b == b'\n' {
                    out.push(b'\r');
                    if !cr_only {
                        out.push(b'\n');
                    }
                } else {
                    out.push(b);
                }
            }
            bytes = out;
        }
        7 if !bytes.is_empty() => {
            let at = rng.random_range(0..bytes.len());
            bytes.insert(at, [0xff, 0xc3, 0x80, 0x00][rng.random_range(0..4)]);
        }
        8 => {
            // Ragged: a delimiter removed or added somewhere.
            let commas: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] == b',').collect();
            if !commas.is_empty() && rng.random_bool(0.5) {
                bytes.remove(commas[rng.random_range(0..commas.len())]);
            } else {
                let at = rng.random_range(0..=bytes.len());
                bytes.insert(at, b',');
            }
        }
        9 => {
            // Empty cells and missing tokens.
            let token: &[u8] = [b"" as &[u8], b"NA", b"?", b"nan", b"  "][rng.random_range(0..5)];
            let mut out = Vec::new();
            for field in bytes.split(|&b| b == b',') {
                if !out.is_empty() {
                    out.push(b',');
                }
                if rng.random_bool(0.2) {
                    out.extend_from_slice(token);
                } else {
                    out.extend_from_slice(field);
                }
            }
            bytes = out;
        }
        10 => {
            // A duplicated or emptied header name.
            let header = &bytes[..first_line_end];
            let names: Vec<&[u8]> = header.split(|&b| b == b',').collect();
            if names.len() > 1 {
                let mut new_names: Vec<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
                let i = rng.random_range(0..names.len());
                new_names[i] = if rng.random_bool(0.5) {
                    Vec::new()
                } else {
                    names[0].to_vec()
                };
                let mut out = new_names.join(&b","[..]);
                if !out.ends_with(b"\n") {
                    out.push(b'\n');
                }
                out.extend_from_slice(&bytes[first_line_end..]);
                bytes = out;
            }
        }
        11 => {
            bytes = (0..rng.random_range(0..200))
                .map(|_| rng.random())
                .collect()
        }
        12 => {
            // Random bytes from the file's own alphabet and the special characters.
            let alphabet = b",;\"\n\r\t a1.-";
            bytes = (0..rng.random_range(0..300))
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
        }
        13 => {
            let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
            let keep = rng.random_range(1..=lines.len().clamp(1, 4));
            bytes = lines[..keep.min(lines.len())].join(&b'\n');
        }
        14 => bytes.extend_from_slice(b"\n\n   \n\t\n"),
        _ => {}
    }
    bytes
}

/// Every test's prompts for a dataset under two templates.
fn build_probes(dataset: &Dataset, pack: &PromptPack) {
    for serialization in [
        Serialization::builtin("the-is").unwrap(),
        Serialization::builtin("colon").unwrap(),
    ] {
        for (test, variant) in TestId::ALL
            .into_iter()
            .flat_map(|test| Variant::ALL.map(|variant| (test, variant)))
        {
            let ctx = ProbeContext {
                dataset,
                serialization: &serialization,
                seed: 0,
                pack,
                variant,
            };
            let _ = probe::build(test, &ctx);
        }
    }
}

#[test]
fn no_csv_file_panics_the_loader_importer_or_probes() {
    let seed = env_number("TABCONTAM_FUZZ_SEED", 8);
    let cases = env_number("TABCONTAM_FUZZ_CASES", 2000);
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1));
    let catalog = Catalog::open(None).unwrap();
    let pack = PromptPack::builtin();
    // (descriptor id, file, first bytes of the file)
    let mut seeds: Vec<(&str, &str, Vec<u8>)> = Vec::new();
    for (id, file) in [
        ("iris", "iris.csv"),
        ("titanic", "titanic.csv"),
        ("wine", "wine.csv"),
        ("german", "german_credit.csv"),
        ("housing", "california_housing.csv"),
        ("adult", "adult.data"),
    ] {
        let bytes = std::fs::read(root().join("datasets").join(file)).unwrap();
        seeds.push((id, file, head(&bytes, 6 * 1024)));
    }
    let mut failures = Vec::new();
    let (mut parsed, mut imported, mut probed) = (0usize, 0usize, 0usize);
    for case in 0..cases {
        let (id, file, original) = &seeds[rng.random_range(0..seeds.len())];
        let mut bytes = original.clone();
        // Mostly one mutation (most files still load, so the importer and the probes see
        // odd tables), sometimes two.
        for _ in 0..1 + usize::from(rng.random_bool(0.25)) {
            bytes = mutate_csv(&mut rng, &bytes);
        }
        let options = match rng.random_range(0..5) {
            0 => CsvOptions {
                delimiter: Some(WHITESPACE),
                header: Some(
                    (0..rng.random_range(0..4))
                        .map(|i| format!("c{i}"))
                        .collect(),
                ),
                ..CsvOptions::default()
            },
            1 => CsvOptions {
                trim: true,
                missing: vec!["?".into()],
                ..CsvOptions::default()
            },
            _ => CsvOptions::default(),
        };
        let source = PathBuf::from(format!("fuzz-{file}"));
        // Probes build prompts for all twelve tests: a bounded number of cases go that far.
        let build = probed < 300 && rng.random_bool(0.4);
        let label = format!("csv case {case} (from {file})");
        let mut counts = (false, false, false);
        guarded(&mut failures, label.clone(), &bytes, || {
            let table = match csv::parse(&bytes, &source, &options) {
                Ok(table) => table,
                Err(err) => {
                    let message = err.to_string();
                    assert!(
                        message.starts_with(&format!("{}: ", source.display()))
                            && !message.contains('\n'),
                        "{message:?}"
                    );
                    return;
                }
            };
            counts.0 = true;
            // As the dataset it came from, with its shipped descriptor.
            if let Ok(descriptor) = catalog.find(id)
                && let Some(variant) = descriptor.files.first()
                && let Ok(dataset) = descriptor.resolve(variant, table.clone())
                && build
            {
                build_probes(&dataset, &pack);
                counts.2 = true;
            }
            // As `datasets import FILE --name fuzzed --target COL` would take it.
            let names: Vec<String> = table.column_names().map(String::from).collect();
            let target = if names.is_empty() || rng.random_bool(0.1) {
                "no-such-column".to_string()
            } else {
                names[rng.random_range(0..names.len())].clone()
            };
            if let Ok((_, dataset)) =
                tabcontam::dataset::import::describe_import(&source, &bytes, "fuzzed", &target)
            {
                counts.1 = true;
                if build {
                    build_probes(&dataset, &pack);
                    counts.2 = true;
                }
            }
        });
        parsed += usize::from(counts.0);
        imported += usize::from(counts.1);
        probed += usize::from(counts.2);
    }
    eprintln!(
        "csv fuzz: {cases} cases, {parsed} parsed, {imported} imported, {probed} probed, {} panics",
        failures.len()
    );
    assert!(
        parsed > 0 && imported > 0,
        "the mutations must reach the importer"
    );
    report("csv", seed, &failures);
}
