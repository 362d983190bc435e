//! Experiment specs (TOML): which models, datasets, tests and serializations to run.
//!
//! A spec is parsed and validated once; every error names the spec file and the key at
//! fault, before anything is sent or written.
//!
//! Size: over 700 lines because every key's validation and its error message stay beside the
//! parser (a third of the file is their tests); the model and calibration tables already
//! live in `model_spec.rs` and `study.rs`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::Serialization;
use crate::likelihood::Detector;
use crate::likelihood::row_order::TEST_ID as ROW_ORDER;
use crate::probe::TestId;
use crate::request::BackendKind;

pub use super::model_spec::{BaseUrls, ModelSpec, sample_seed};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: String,
    #[serde(default)]
    seed: u64,
    datasets: Vec<String>,
    tests: Vec<String>,
    #[serde(default = "default_serializations")]
    serializations: Vec<String>,
    /// User-defined templates, usable by id in `serializations`.
    #[serde(default, rename = "serialization")]
    custom_serializations: Vec<Serialization>,
    /// A prompt pack file (relative to the spec) replacing the built-in wording.
    #[serde(default)]
    prompt_pack: Option<PathBuf>,
    /// Alg1 profile: `hunspell` (default, SPEC §3) or `paper` (the authors' quirks).
    #[serde(default)]
    alg1_profile: Option<String>,
    /// Which description of the method the prompts follow: `paper` (default) or
    /// `paper-code` (the authors' code: tests 4 and 9 use the first rows).
    #[serde(default)]
    variant: Option<String>,
    models: Vec<ModelSpec>,
    /// A controlled-contamination study: its checkpoints join `models`.
    #[serde(default)]
    calibration: Option<super::study::CalibrationSpec>,
}

fn default_serializations() -> Vec<String> {
    vec!["the-is".into()]
}

/// A validated experiment spec.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub path: PathBuf,
    /// The spec's text as stored with each run: exact, except that header values and
    /// credentials in URLs (`user:pass@`, query values) read `REDACTED` (see
    /// [`redact_secrets`]). Errors quote the file itself, never this.
    pub text: String,
    /// blake3 of the file's exact bytes (hex), as loaded: the calibration card cites it, so
    /// nothing reads the file a second time.
    pub digest: String,
    pub seed: u64,
    pub datasets: Vec<String>,
    pub tests: Vec<TestId>,
    /// The likelihood tests (`likelihood-…` ids in `tests`, or `likelihood` for all four).
    pub likelihood: Vec<Detector>,
    /// Test 17, `row-order`, named in `tests`.
    pub row_order: bool,
    pub serializations: Vec<Serialization>,
    pub prompt_pack: Option<PathBuf>,
    pub alg1_profile: crate::decide::Alg1Profile,
    /// `paper` (default) or `paper-code`: threaded into every probe builder.
    pub variant: crate::probe::Variant,
    /// The listed models, then the checkpoints of the `[calibration]` study if there is one.
    pub models: Vec<ModelSpec>,
    /// The `[calibration]` table (its checkpoints are already in `models`).
    pub calibration: Option<super::study::CalibrationSpec>,
    /// Built-in and spec-defined templates, for per-model overrides.
    pub available_serializations: Vec<Serialization>,
}

/// A spec error: always names the spec file and the key.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SpecError {
    pub path: String,
    pub message: String,
}

impl Spec {
    pub fn load(path: &Path) -> Result<Spec, SpecError> {
        let err = |message: String| SpecError {
            path: path.display().to_string(),
            message,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| err(format!("cannot read the spec: {e}")))?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
        let err = |message: String| SpecError {
            path: path.display().to_string(),
            message,
        };
        let raw: RawSpec = toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| {
                    let before = text.get(..span.start).unwrap_or(text);
                    let line = before.matches('\n').count() + 1;
                    format!("line {line}: ")
                })
                .unwrap_or_default();
            // toml's messages may span lines; errors are one line.
            let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            err(format!("{location}{message}"))
        })?;
        if raw.name.trim().is_empty() {
            return Err(err(
                "name: empty; give the experiment a name (it labels its runs)".into(),
            ));
        }
        if raw.models.is_empty() {
            return Err(err("no [[models]] entry; add at least one model".into()));
        }
        check_datasets(&raw.datasets).map_err(|m| err(format!("datasets: {m}")))?;
        let tests = parse_tests(&raw.tests).map_err(|m| err(format!("tests: {m}")))?;
        let likelihood = parse_likelihood(&raw.tests);
        let row_order = names_row_order(&raw.tests);
        let mut known: Vec<Serialization> = Serialization::builtins();
        for custom in &raw.custom_serializations {
            custom
                .validate()
                .map_err(|m| err(format!("[[serialization]] `{}`: {m}", custom.id)))?;
            if known.iter().any(|s| s.id == custom.id) {
                if Serialization::builtin(&custom.id).is_none() {
                    return Err(err(format!(
                        "[[serialization]] `{}` is defined twice",
                        custom.id
                    )));
                }
                continue;
            }
            known.push(custom.clone());
        }
        let resolve = |ids: &[String], key: &str| -> Result<Vec<Serialization>, SpecError> {
            if ids.is_empty() {
                return Err(err(format!(
                    "{key}: empty; list at least one template id (known: {}), or remove the key to use the default `the-is`",
                    known
                        .iter()
                        .map(|s| s.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if let Some(twice) = ids
                .iter()
                .enumerate()
                .find(|&(i, id)| ids[..i].contains(id))
                .map(|(_, id)| id)
            {
                return Err(err(format!(
                    "{key}: `{twice}` is listed twice; list each template once"
                )));
            }
            ids.iter()
                .map(|id| {
                    known.iter().find(|s| &s.id == id).cloned().ok_or_else(|| {
                        err(format!(
                            "{key}: unknown serialization `{id}`; known: {} (define others with [[serialization]] tables)",
                            known.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", ")
                        ))
                    })
                })
                .collect()
        };
        let serializations = resolve(&raw.serializations, "serializations")?;
        let mut raw = raw;
        if let Some(study) = &raw.calibration {
            study.check(&raw.models, &raw.datasets).map_err(err)?;
            let base = raw
                .models
                .iter_mut()
                .find(|m| m.id == study.base)
                .expect("checked");
            // The study's base model is its untreated control: every cell a negative.
            base.trained_on.get_or_insert_with(Vec::new);
            base.dose.get_or_insert(0.0);
            let base = base.clone();
            let spec_dir = path.parent().unwrap_or(Path::new("."));
            raw.models
                .extend(study.checkpoint_models(&base, spec_dir, &raw.name));
        }
        let mut seen_ids = std::collections::HashSet::new();
        for (i, model) in raw.models.iter().enumerate() {
            let key = format!("models[{i}] (`{}`)", model.id);
            if model.id.trim().is_empty() {
                return Err(err(format!("models[{i}]: `id` is empty")));
            }
            if !seen_ids.insert(model.id.clone()) {
                return Err(err(format!("{key}: duplicate model id")));
            }
            check_model_numbers(model).map_err(|m| err(format!("{key}: {m}")))?;
            if model.samples > 1 && model.temperature == 0.0 {
                return Err(err(format!(
                    "{key}: `samples = {}` with greedy decoding gives identical samples; set `temperature`",
                    model.samples
                )));
            }
            match model.backend {
                BackendKind::Local => {}
                _ if model.base_url.is_none() && model.backend == BackendKind::OpenaiCompatible => {
                    return Err(err(format!(
                        "{key}: `base_url` is required for backend openai-compatible (e.g. \"http://127.0.0.1:8000/v1\")"
                    )));
                }
                _ => {}
            }
            if let Some(datasets) = &model.datasets {
                check_datasets(datasets).map_err(|m| err(format!("{key}.datasets: {m}")))?;
            }
            if let Some(tests) = &model.tests {
                parse_tests(tests).map_err(|m| err(format!("{key}.tests: {m}")))?;
            }
            if let Some(ids) = &model.serializations {
                resolve(ids, &format!("{key}.serializations"))?;
            }
        }
        let alg1_profile = match raw.alg1_profile.as_deref() {
            None | Some("hunspell") => crate::decide::Alg1Profile::Hunspell,
            Some("paper") => crate::decide::Alg1Profile::Paper,
            Some(other) => {
                return Err(err(format!(
                    "alg1_profile: unknown profile `{other}`; use hunspell or paper"
                )));
            }
        };
        let variant = match raw.variant.as_deref() {
            None => crate::probe::Variant::default(),
            Some(name) => crate::probe::Variant::parse(name).ok_or_else(|| {
                err(format!(
                    "variant: unknown variant `{name}`; use paper (the paper's text, default) or paper-code (the authors' code)"
                ))
            })?,
        };
        let prompt_pack = raw.prompt_pack.map(|p| {
            if p.is_relative() {
                path.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p
            }
        });
        Ok(Spec {
            name: raw.name,
            path: path.to_path_buf(),
            text: redact_secrets(text),
            digest: blake3::hash(text.as_bytes()).to_hex().to_string(),
            seed: raw.seed,
            datasets: raw.datasets,
            tests,
            likelihood,
            row_order,
            serializations,
            prompt_pack,
            alg1_profile,
            variant,
            models: raw.models,
            calibration: raw.calibration,
            available_serializations: known,
        })
    }

    /// The datasets one model runs on (its override, else the spec's list).
    /// The client settings of one model (everything about talking to it).
    pub fn client_config(&self, model: &ModelSpec) -> crate::llm::client::ClientConfig {
        let mut config = crate::llm::client::ClientConfig::new(
            model.backend,
            model.model.clone().unwrap_or_else(|| model.id.clone()),
        );
        config.id = Some(model.id.clone());
        config.api = model.api;
        if let Some(urls) = &model.base_url {
            config.base_url = urls.to_vec();
        }
        if let Some(balance) = model.balance {
            config.balance = balance;
        }
        config.api_key_env = model.api_key_env.clone();
        config.concurrency = model.concurrency;
        config.requests_per_minute = model.requests_per_minute;
        config.tokens_per_minute = model.tokens_per_minute;
        if let Some(timeout) = model.timeout_s {
            config.timeout_s = timeout;
        }
        if let Some(retries) = model.max_retries {
            config.max_retries = retries;
        }
        if let Some(ms) = model.backoff_base_ms {
            config.backoff_base_ms = ms;
        }
        if let Some(ms) = model.backoff_max_ms {
            config.backoff_max_ms = ms;
        }
        config.headers = model.headers.clone();
        config.anthropic_version = model.anthropic_version.clone();
        config
    }

    pub fn model_datasets<'a>(&'a self, model: &'a ModelSpec) -> &'a [String] {
        model.datasets.as_deref().unwrap_or(&self.datasets)
    }

    /// The tests one model runs.
    pub fn model_tests(&self, model: &ModelSpec) -> Vec<TestId> {
        match &model.tests {
            Some(names) => parse_tests(names).expect("validated on load"),
            None => self.tests.clone(),
        }
    }

    /// The likelihood tests one model runs.
    pub fn model_likelihood(&self, model: &ModelSpec) -> Vec<Detector> {
        match &model.tests {
            Some(names) => parse_likelihood(names),
            None => self.likelihood.clone(),
        }
    }

    /// Whether one model runs test 17, `row-order`.
    pub fn model_row_order(&self, model: &ModelSpec) -> bool {
        match &model.tests {
            Some(names) => names_row_order(names),
            None => self.row_order,
        }
    }

    /// The serializations one model runs.
    pub fn model_serializations(&self, model: &ModelSpec) -> Vec<Serialization> {
        match &model.serializations {
            Some(ids) => ids
                .iter()
                .map(|id| {
                    self.available_serializations
                        .iter()
                        .find(|s| &s.id == id)
                        .cloned()
                        .expect("validated on load")
                })
                .collect(),
            None => self.serializations.clone(),
        }
    }
}

/// Most samples per prompt a spec may ask for (each is one request per prompt).
pub const MAX_SAMPLES: u32 = 1000;
/// Most requests in flight per model.
pub const MAX_CONCURRENCY: usize = 10_000;
/// Most prompts a local model decodes together.
pub const MAX_BATCH: usize = 4096;
/// Lanes of a local model: each holds a micro-batch's KV cache.
pub const MAX_LANES: usize = 256;
/// Longest request timeout, in seconds (one day).
const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A dataset list: not empty, no empty or repeated names.
fn check_datasets(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Err("empty; list dataset ids (see `tabcontam datasets list`)".into());
    }
    for (i, name) in names.iter().enumerate() {
        if name.trim().is_empty() {
            return Err(format!(
                "entry {} is an empty string; list dataset ids (see `tabcontam datasets list`)",
                i + 1
            ));
        }
        if names[..i].contains(name) {
            return Err(format!("`{name}` is listed twice; list each dataset once"));
        }
    }
    Ok(())
}

/// The numbers and strings of one model entry that TOML types cannot check.
fn check_model_numbers(model: &ModelSpec) -> Result<(), String> {
    if !(1..=MAX_CONCURRENCY).contains(&model.concurrency) {
        return Err(format!(
            "`concurrency = {}` must be within 1–{MAX_CONCURRENCY}",
            model.concurrency
        ));
    }
    if !(1..=MAX_SAMPLES).contains(&model.samples) {
        return Err(format!(
            "`samples = {}` must be within 1–{MAX_SAMPLES}",
            model.samples
        ));
    }
    if !(0.0..=2.0).contains(&model.temperature) {
        return Err(format!(
            "`temperature = {}` must be within 0–2 (0 is greedy)",
            model.temperature
        ));
    }
    if let Some(top_p) = model.top_p
        && !(top_p > 0.0 && top_p <= 1.0)
    {
        return Err(format!("`top_p = {top_p}` must be within 0–1 (above 0)"));
    }
    if let Some(timeout) = model.timeout_s
        && !(timeout > 0.0 && timeout <= MAX_TIMEOUT_S)
    {
        return Err(format!(
            "`timeout_s = {timeout}` must be a number of seconds above 0 and at most {MAX_TIMEOUT_S}"
        ));
    }
    if let Some(batch) = model.max_batch
        && !(1..=MAX_BATCH).contains(&batch)
    {
        return Err(format!(
            "`max_batch = {batch}` must be within 1–{MAX_BATCH}"
        ));
    }
    if let Some(lanes) = model.lanes
        && !(1..=MAX_LANES).contains(&lanes)
    {
        return Err(format!("`lanes = {lanes}` must be within 1–{MAX_LANES}"));
    }
    for (key, price) in [
        ("price_input_per_mtok", model.price_input_per_mtok),
        ("price_output_per_mtok", model.price_output_per_mtok),
    ] {
        if let Some(price) = price
            && !(price.is_finite() && price >= 0.0)
        {
            return Err(format!("`{key} = {price}` must be a price of 0 or more"));
        }
    }
    if let (Some(base), Some(max)) = (model.backoff_base_ms, model.backoff_max_ms)
        && base > max
    {
        return Err(format!(
            "`backoff_base_ms = {base}` is above `backoff_max_ms = {max}`; the first wait cannot exceed the longest"
        ));
    }
    for (key, value) in [
        ("model", &model.model),
        ("revision", &model.revision),
        ("api_key_env", &model.api_key_env),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(format!(
                "`{key}` is an empty string; give a value or remove the key"
            ));
        }
    }
    if let Some(urls) = &model.base_url {
        let urls = urls.to_vec();
        if urls.is_empty() {
            return Err("`base_url` is an empty list; give one URL or a list of them".into());
        }
        if urls.iter().any(|u| u.trim().is_empty()) {
            return Err("`base_url` holds an empty string; give the server's URL".into());
        }
    }
    if model.headers.keys().any(|name| name.trim().is_empty()) {
        return Err("`headers` has an empty header name".into());
    }
    Ok(())
}

pub use crate::llm::error::{REDACTED, redact_url};

/// Where a spec's secrets are written: header values and base URLs, with their spans.
#[derive(Deserialize)]
struct SecretSpans {
    #[serde(default)]
    models: Vec<ModelSecretSpans>,
}

#[derive(Deserialize)]
struct ModelSecretSpans {
    #[serde(default)]
    base_url: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, toml::Spanned<toml::Value>>,
}

/// The redacted form of one secret-bearing value: header values entirely, URLs their
/// credentials.
fn redacted_value(value: &toml::Value, is_header: bool) -> toml::Value {
    match value {
        toml::Value::String(_) if is_header => toml::Value::String(REDACTED.into()),
        toml::Value::String(url) => toml::Value::String(redact_url(url)),
        toml::Value::Array(items) => toml::Value::Array(
            items
                .iter()
                .map(|item| redacted_value(item, is_header))
                .collect(),
        ),
        _ if is_header => toml::Value::String(REDACTED.into()),
        other => other.clone(),
    }
}

/// The spec text to store with a run: the file as written, except that every header value
/// and the credentials of every `base_url` (`user:pass@`, query values) read `REDACTED`.
/// Only those values change, so the stored text keeps its comments and layout; should a
/// value be spelled so that it cannot be replaced in place (escapes), the spec is stored
/// re-serialized instead. Secrets written in comments cannot be found and are not removed.
pub fn redact_secrets(text: &str) -> String {
    let Ok(spans) = toml::from_str::<SecretSpans>(text) else {
        return text.to_string();
    };
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for model in &spans.models {
        let values = model
            .base_url
            .iter()
            .map(|v| (v, false))
            .chain(model.headers.values().map(|v| (v, true)));
        for (spanned, is_header) in values {
            let redacted = redacted_value(spanned.get_ref(), is_header);
            if &redacted != spanned.get_ref() {
                edits.push((spanned.span(), redacted.to_string()));
            }
        }
    }
    if edits.is_empty() {
        return text.to_string();
    }
    edits.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
    let mut out = text.to_string();
    for (span, replacement) in &edits {
        if out.get(span.clone()).is_some() {
            out.replace_range(span.clone(), replacement);
        }
    }
    if is_redacted(&out) {
        return out;
    }
    // In-place replacement failed (an escaped spelling): store the redacted values
    // re-serialized, which loses comments but never a secret.
    let Ok(mut value) = toml::from_str::<toml::Value>(text) else {
        return String::new();
    };
    if let Some(models) = value.get_mut("models").and_then(|m| m.as_array_mut()) {
        for model in models.iter_mut().filter_map(|m| m.as_table_mut()) {
            if let Some(url) = model.get_mut("base_url") {
                *url = redacted_value(url, false);
            }
            if let Some(headers) = model.get_mut("headers").and_then(|h| h.as_table_mut()) {
                for (_, header) in headers.iter_mut() {
                    *header = redacted_value(header, true);
                }
            }
        }
    }
    toml::to_string(&value).unwrap_or_default()
}

/// Whether every header value and URL credential of `text` is redacted.
fn is_redacted(text: &str) -> bool {
    let Ok(spans) = toml::from_str::<SecretSpans>(text) else {
        return false;
    };
    spans.models.iter().all(|model| {
        let url_ok = model
            .base_url
            .as_ref()
            .is_none_or(|v| redacted_value(v.get_ref(), false) == *v.get_ref());
        url_ok
            && model
                .headers
                .values()
                .all(|v| v.get_ref().as_str() == Some(REDACTED))
    })
}

/// Whether a `tests` entry names likelihood tests (`likelihood` or a `likelihood-…` id)
/// or test 17, `row-order`: tests that score texts instead of generating.
fn is_likelihood_name(name: &str) -> bool {
    name == "likelihood"
        || name == ROW_ORDER
        || (name.starts_with("likelihood-") && Detector::parse(name).is_some())
}

/// Whether a `tests` list names test 17, `row-order` (not part of `all`).
fn names_row_order(names: &[String]) -> bool {
    names.iter().any(|name| name == ROW_ORDER)
}

/// The likelihood tests named in a `tests` list (`likelihood` = all four); not part of
/// `all`, which stays the paper's twelve.
pub fn parse_likelihood(names: &[String]) -> Vec<Detector> {
    let mut detectors: Vec<Detector> = names
        .iter()
        .flat_map(|name| match name.as_str() {
            "likelihood" => Detector::ALL.to_vec(),
            _ if is_likelihood_name(name) => Detector::parse(name).into_iter().collect(),
            _ => Vec::new(),
        })
        .collect();
    detectors.sort();
    detectors.dedup();
    detectors
}

/// `["all"]` (the paper's 12), `"contamination"` (1–9), `"verbatim"` (13–16), ids or
/// numbers; duplicates removed, test order kept. Likelihood names are left to
/// [`parse_likelihood`].
pub fn parse_tests(names: &[String]) -> Result<Vec<TestId>, String> {
    if names.is_empty() {
        return Err("empty; list test ids or [\"all\"]".into());
    }
    let mut tests = Vec::new();
    for name in names {
        if is_likelihood_name(name) {
            continue;
        }
        // `all` keeps meaning the paper's twelve, so existing specs plan (and cache) what
        // they always did; later families are named on their own.
        if name == "all" {
            tests.extend(TestId::PAPER);
            continue;
        }
        if name == "verbatim" {
            tests.extend(TestId::VERBATIM);
            continue;
        }
        if name == "contamination" {
            tests.extend(TestId::CONTAMINATION);
            continue;
        }
        tests.push(TestId::parse_or_explain(name).map_err(|e| e.to_string())?);
    }
    tests.sort();
    tests.dedup();
    Ok(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "name = \"t\"\ndatasets = [\"iris\"]\ntests = [\"all\"]\n";

    fn model(extra: &str) -> String {
        format!(
            "{BASE}\n[[models]]\nid = \"m\"\nbackend = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1/v1\"\n{extra}\n"
        )
    }

    fn error(text: &str) -> String {
        Spec::parse(text, Path::new("exp.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn empty_and_repeated_lists_are_errors_naming_the_key() {
        let cases = [
            (
                format!("{BASE}serializations = []\n{}", &model("")[BASE.len()..]),
                "exp.toml: serializations: empty",
            ),
            (
                model("serializations = []"),
                "exp.toml: models[0] (`m`).serializations: empty",
            ),
            (
                model("datasets = []"),
                "exp.toml: models[0] (`m`).datasets: empty",
            ),
            (
                model("tests = []"),
                "exp.toml: models[0] (`m`).tests: empty",
            ),
            (
                model("serializations = [\"colon\", \"colon\"]"),
                "`colon` is listed twice",
            ),
            (
                model("").replace("[\"iris\"]", "[\"iris\", \"iris\"]"),
                "exp.toml: datasets: `iris` is listed twice",
            ),
            (
                model("").replace("[\"iris\"]", "[\"\"]"),
                "exp.toml: datasets: entry 1 is an empty string",
            ),
            (
                model("").replace("name = \"t\"", "name = \"\""),
                "exp.toml: name: empty",
            ),
        ];
        for (text, expected) in cases {
            let message = error(&text);
            assert!(
                message.contains(expected),
                "{expected:?} not in {message:?}"
            );
            assert_eq!(message.lines().count(), 1, "{message}");
        }
    }

    #[test]
    fn numbers_out_of_range_are_errors_naming_the_key() {
        let cases = [
            ("samples = 0", "`samples = 0`"),
            ("samples = 5000\ntemperature = 1.0", "`samples = 5000`"),
            ("concurrency = 0", "`concurrency = 0`"),
            (
                "concurrency = 9223372036854775807",
                "`concurrency = 9223372036854775807`",
            ),
            ("temperature = -0.5", "`temperature = -0.5`"),
            ("temperature = nan", "`temperature = NaN`"),
            ("temperature = inf", "`temperature = inf`"),
            ("top_p = 0.0", "`top_p = 0`"),
            ("top_p = nan", "`top_p = NaN`"),
            ("timeout_s = -1.0", "`timeout_s = -1`"),
            ("timeout_s = 1e300", "`timeout_s = 10000000000"),
            ("max_batch = 0", "`max_batch = 0`"),
            ("lanes = 0", "`lanes = 0`"),
            ("lanes = 100000", "`lanes = 100000` must be within 1–256"),
            ("price_input_per_mtok = -1.0", "`price_input_per_mtok = -1`"),
            (
                "backoff_base_ms = 10\nbackoff_max_ms = 1",
                "`backoff_base_ms = 10`",
            ),
            ("model = \"\"", "`model` is an empty string"),
            ("api_key_env = \" \"", "`api_key_env` is an empty string"),
        ];
        for (extra, expected) in cases {
            let message = error(&model(extra));
            assert!(
                message.starts_with("exp.toml: models[0] (`m`): ") && message.contains(expected),
                "{expected:?} not in {message:?}"
            );
        }
        let empty_urls = model("").replace("\"http://127.0.0.1:1/v1\"", "[]");
        assert!(error(&empty_urls).contains("`base_url` is an empty list"));
    }

    #[test]
    fn stored_text_redacts_header_values_and_url_credentials() {
        let text = format!(
            "{BASE}\n[[models]]\nid = \"a\"  # keep this comment\nbackend = \"openai-compatible\"\n\
             base_url = \"https://alice:hunter2@api.example.com/v1?api_key=sk-live-123&x=1\"\n\
             headers = {{ \"X-Org\" = \"org-secret-9\", Authorization = 'Bearer tok-777' }}\n\
             \n[[models]]\nid = \"b\"\nbackend = \"openai-compatible\"\n\
             base_url = [\"http://127.0.0.1:8000/v1\", \"http://bob:pw-555@127.0.0.1:8001/v1?key=k-42\"]\n\
             [models.headers]\nX-Route = \"route-secret-3\"\n"
        );
        let stored = redact_secrets(&text);
        for secret in [
            "hunter2",
            "alice",
            "sk-live-123",
            "org-secret-9",
            "tok-777",
            "pw-555",
            "k-42",
            "route-secret-3",
        ] {
            assert!(!stored.contains(secret), "{secret} in {stored}");
        }
        assert!(stored.contains("# keep this comment"), "{stored}");
        assert!(stored.contains("https://REDACTED@api.example.com/v1?api_key=REDACTED&x=REDACTED"));
        assert!(stored.contains("\"http://127.0.0.1:8000/v1\""), "{stored}");
        // Still a valid spec, with the same models.
        let reparsed: toml::Value = toml::from_str(&stored).unwrap();
        assert_eq!(reparsed["models"].as_array().unwrap().len(), 2);
        // An escaped spelling cannot be replaced in place: stored re-serialized, redacted.
        let escaped = model("headers = { X-Org = \"\\u0073ecret-escaped\" }");
        let stored = redact_secrets(&escaped);
        assert!(!stored.contains("ecret-escaped"), "{stored}");
        assert!(stored.contains(REDACTED), "{stored}");
        // Parsing keeps the redacted text.
        let spec = Spec::parse(
            &text.replace("Authorization = 'Bearer tok-777'", "X-B = \"v\""),
            Path::new("exp.toml"),
        )
        .unwrap();
        assert!(!spec.text.contains("org-secret-9") && !spec.text.contains("hunter2"));
        // Nothing to redact: the text is stored exactly.
        let plain = model("");
        assert_eq!(redact_secrets(&plain), plain);
    }

    #[test]
    fn url_redaction() {
        assert_eq!(
            redact_url("http://127.0.0.1:8000/v1"),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(redact_url("https://u:p@h/v1"), "https://REDACTED@h/v1");
        assert_eq!(
            redact_url("https://h/v1?key=abc#frag"),
            "https://h/v1?key=REDACTED#frag"
        );
        assert_eq!(redact_url("h?secret"), "h?REDACTED");
        assert_eq!(redact_url("no url at all"), "no url at all");
    }

    fn spec_with(model_keys: &str) -> Result<Spec, SpecError> {
        let text = format!(
            "name = \"t\"\ndatasets = [\"iris\"]\ntests = [\"all\"]\n\
             [[models]]\nid = \"m\"\nbackend = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1/v1\"\n{model_keys}\n"
        );
        Spec::parse(&text, Path::new("exp.toml"))
    }

    #[test]
    fn api_seed_defaults_to_zero_and_can_be_switched_off() {
        assert_eq!(spec_with("").unwrap().models[0].api_seed, Some(0));
        assert_eq!(
            spec_with("api_seed = 42").unwrap().models[0].api_seed,
            Some(42)
        );
        assert_eq!(
            spec_with("api_seed = false").unwrap().models[0].api_seed,
            None
        );
        assert_eq!(
            spec_with("api_seed = \"none\"").unwrap().models[0].api_seed,
            None
        );
        for bad in [
            "api_seed = -1",
            "api_seed = true",
            "api_seed = \"random\"",
            "api_seed = 1.5",
        ] {
            let error = spec_with(bad).unwrap_err().to_string();
            assert!(
                error.starts_with("exp.toml: line ") && error.contains("api_seed"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn each_sample_gets_its_own_seed_and_sample_zero_keeps_the_spec_seed() {
        assert_eq!(sample_seed(Some(7), 0), Some(7));
        assert_eq!(sample_seed(Some(7), 3), Some(10));
        assert_eq!(sample_seed(Some(u64::MAX), 1), Some(0));
        assert_eq!(sample_seed(None, 3), None);
    }
}
