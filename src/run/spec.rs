//! Experiment specs (TOML): which models, datasets, tests and serializations to run.
//!
//! A spec is parsed and validated once; every error names the spec file and the key at
//! fault, before anything is sent or written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::Serialization;
use crate::llm::{ApiMode, BackendKind};
use crate::probe::TestId;

/// One `[[models]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Identity in the cache and the reports.
    pub id: String,
    /// Display name in reports (defaults to `id`).
    #[serde(default)]
    pub label: Option<String>,
    /// Model family, for the evolution view (`llama`, `gpt-4`).
    #[serde(default)]
    pub family: Option<String>,
    /// Release date (`2024-07-23`), orders versions within a family.
    #[serde(default)]
    pub release_date: Option<String>,
    /// Training data cut-off if known, for negative controls.
    #[serde(default)]
    pub training_cutoff: Option<String>,
    pub backend: BackendKind,
    #[serde(default)]
    pub api: ApiMode,
    /// Model name sent to the API (defaults to `id`); for `local`, the weights path.
    #[serde(default)]
    pub model: Option<String>,
    /// Snapshot name for APIs (defaults to the model name). For local weights the digest of
    /// the weight files is used whatever this says.
    #[serde(default)]
    pub revision: Option<String>,
    /// One endpoint or a list: requests are balanced across them.
    #[serde(default)]
    pub base_url: Option<BaseUrls>,
    /// Name of the environment variable holding the API key (never the key itself).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    #[serde(default)]
    pub timeout_s: Option<f64>,
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// How requests are spread over several `base_url`s (`least-in-flight` or `round-robin`).
    #[serde(default)]
    pub balance: Option<crate::llm::client::Balance>,
    /// Backoff base and ceiling in milliseconds (full jitter).
    #[serde(default)]
    pub backoff_base_ms: Option<u64>,
    #[serde(default)]
    pub backoff_max_ms: Option<u64>,
    /// Extra non-secret headers.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub anthropic_version: Option<String>,
    /// Local models: prompts decoded together (bounds memory; default 8).
    #[serde(default)]
    pub max_batch: Option<usize>,
    /// Local models: wrap prompts in the model's chat template (off: the paper's raw prompt).
    #[serde(default)]
    pub chat_template: bool,
    /// Sampling temperature (0 = greedy, SPEC §5 default).
    #[serde(default)]
    pub temperature: f64,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Samples per prompt (each its own cache entry); only meaningful with temperature > 0.
    #[serde(default = "one")]
    pub samples: u32,
    /// API seed (SPEC §5: 0 where supported). Sample `i` of a prompt sends `api_seed + i`
    /// (see [`sample_seed`]). `api_seed = false` (or `"none"`) sends no seed, for APIs that
    /// reject one.
    #[serde(
        default = "default_api_seed",
        deserialize_with = "api_seed::deserialize",
        serialize_with = "api_seed::serialize"
    )]
    pub api_seed: Option<u64>,
    /// USD per million prompt / completion tokens, for `plan` estimates.
    #[serde(default)]
    pub price_input_per_mtok: Option<f64>,
    #[serde(default)]
    pub price_output_per_mtok: Option<f64>,
    /// Overrides of the spec-level lists for this model (e.g. the serialization study).
    #[serde(default)]
    pub datasets: Option<Vec<String>>,
    #[serde(default)]
    pub tests: Option<Vec<String>>,
    #[serde(default)]
    pub serializations: Option<Vec<String>>,
}

fn default_concurrency() -> usize {
    16
}
fn one() -> u32 {
    1
}
fn default_api_seed() -> Option<u64> {
    Some(0)
}

/// The API seed sent with sample `sample` of a prompt: `api_seed + sample` (wrapping), so
/// that servers honouring seeds (vLLM, llama.cpp, OpenAI) draw each sample differently and
/// reproducibly. Sample 0 sends `api_seed` itself: greedy runs and the first sample keep
/// the request keys they always had. `None` (seed switched off) stays `None`.
pub fn sample_seed(api_seed: Option<u64>, sample: u32) -> Option<u64> {
    api_seed.map(|seed| seed.wrapping_add(u64::from(sample)))
}

/// `api_seed = 7`, or `api_seed = false` / `api_seed = "none"` for no seed (TOML has no
/// null).
mod api_seed {
    use serde::{Deserializer, Serializer, de};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Option<u64>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "`api_seed`: a non-negative integer, or false (or \"none\") to send no seed",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v).map(Some).map_err(|_| {
                    E::custom("`api_seed` must be a non-negative integer, or false to send no seed")
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Some(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                if v {
                    Err(E::custom(
                        "`api_seed = true` is ambiguous; give the seed (e.g. 0), or false to send none",
                    ))
                } else {
                    Ok(None)
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                if v.eq_ignore_ascii_case("none") {
                    Ok(None)
                } else {
                    Err(E::custom(format!(
                        "`api_seed = \"{v}\"`: use an integer, or false (or \"none\") to send no seed"
                    )))
                }
            }
        }
        d.deserialize_any(Visitor)
    }

    pub fn serialize<S: Serializer>(seed: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match seed {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_bool(false),
        }
    }
}

/// `base_url = "…"` or `base_url = ["…", "…"]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum BaseUrls {
    One(String),
    Many(Vec<String>),
}

impl BaseUrls {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            BaseUrls::One(url) => vec![url.clone()],
            BaseUrls::Many(urls) => urls.clone(),
        }
    }
}

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
    /// Alg1 dictionary profile: `hunspell` (default) or `paper`.
    #[serde(default)]
    alg1_profile: Option<String>,
    models: Vec<ModelSpec>,
}

fn default_serializations() -> Vec<String> {
    vec!["the-is".into()]
}

/// A validated experiment spec.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub path: PathBuf,
    /// The spec's exact text (stored with each run).
    pub text: String,
    pub seed: u64,
    pub datasets: Vec<String>,
    pub tests: Vec<TestId>,
    pub serializations: Vec<Serialization>,
    pub prompt_pack: Option<PathBuf>,
    pub alg1_profile: crate::decide::Alg1Profile,
    pub models: Vec<ModelSpec>,
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
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!("line {line}: ")
                })
                .unwrap_or_default();
            err(format!("{location}{}", e.message().trim()))
        })?;
        if raw.models.is_empty() {
            return Err(err("no [[models]] entry; add at least one model".into()));
        }
        if raw.datasets.is_empty() {
            return Err(err(
                "`datasets` is empty; list dataset ids (see `tabcontam datasets list`)".into(),
            ));
        }
        let tests = parse_tests(&raw.tests).map_err(|m| err(format!("tests: {m}")))?;
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
        let mut seen_ids = std::collections::HashSet::new();
        for (i, model) in raw.models.iter().enumerate() {
            let key = format!("models[{i}] (`{}`)", model.id);
            if model.id.trim().is_empty() {
                return Err(err(format!("models[{i}]: `id` is empty")));
            }
            if !seen_ids.insert(model.id.clone()) {
                return Err(err(format!("{key}: duplicate model id")));
            }
            if model.concurrency == 0 {
                return Err(err(format!("{key}: `concurrency` must be at least 1")));
            }
            if model.samples == 0 {
                return Err(err(format!("{key}: `samples` must be at least 1")));
            }
            if model.samples > 1 && model.temperature == 0.0 {
                return Err(err(format!(
                    "{key}: `samples = {}` with greedy decoding gives identical samples; set `temperature`",
                    model.samples
                )));
            }
            if !(0.0..=2.0).contains(&model.temperature) {
                return Err(err(format!("{key}: `temperature` must be within 0–2")));
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
            text: text.to_string(),
            seed: raw.seed,
            datasets: raw.datasets,
            tests,
            serializations,
            prompt_pack,
            alg1_profile,
            models: raw.models,
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

/// `["all"]`, ids or numbers; duplicates removed, paper order kept.
pub fn parse_tests(names: &[String]) -> Result<Vec<TestId>, String> {
    if names.is_empty() {
        return Err("empty; list test ids or [\"all\"]".into());
    }
    let mut tests = Vec::new();
    for name in names {
        if name == "all" {
            tests.extend(TestId::ALL);
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
