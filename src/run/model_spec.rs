//! One `[[models]]` entry of a spec: the model's identity, backend, endpoint, limits and
//! generation settings, apart from the spec that lists it so that what builds models (the
//! calibration study's checkpoints, the executors) need not import the whole spec.

use serde::{Deserialize, Serialize};

use crate::request::{ApiMode, BackendKind};

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
    /// Training step of a checkpoint: the report's timeline orders a family by it (when
    /// every member has one) instead of by release date.
    #[serde(default)]
    pub step: Option<u64>,
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
    /// Local models: micro-batches generated at once, each on one core with the weights
    /// shared (default: `TABCONTAM_LANES`, else one per core).
    #[serde(default)]
    pub lanes: Option<usize>,
    /// Local models: wrap prompts in the model's chat template (off: the paper's raw prompt).
    #[serde(default)]
    pub chat_template: bool,
    /// Local safetensors models (fine-tuned checkpoints): quantize the matmul weights at
    /// load (`"q8_0"`, or `"q8_0-all"`: the embeddings and head too), so that a checkpoint runs
    /// as fast as a quantized file. Part of the
    /// model's cache identity: its answers are never taken for the f32 weights'.
    #[serde(default)]
    pub quantize: Option<crate::infer::weights::Quantize>,
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
    /// Controlled contamination (SPEC §8): dataset ids this checkpoint was trained on
    /// (`[]` for the base model). Overrides the model folder's `tabcontam-manifest.json`.
    #[serde(default)]
    pub trained_on: Option<Vec<String>>,
    /// Exposures of that training: times each trained row was seen (epochs of `packed`
    /// training; 0 for the base model).
    #[serde(default)]
    pub dose: Option<f64>,
    /// The spec id of the model this checkpoint was trained from.
    #[serde(default)]
    pub base: Option<String>,
}

fn default_concurrency() -> usize {
    16
}
fn one() -> u32 {
    1
}
impl ModelSpec {
    /// Whether the model answers chat messages rather than continuing raw text: chat APIs,
    /// Anthropic and Gemini, and local models run with their chat template. Verbatim
    /// prompts wrap the raw file text in an instruction for them.
    pub fn is_chat(&self) -> bool {
        match self.backend {
            BackendKind::Anthropic | BackendKind::Gemini => true,
            BackendKind::Local => self.chat_template,
            BackendKind::OpenaiCompatible => self.api == ApiMode::Chat,
        }
    }

    /// The API mode of this model's requests, and so part of their cache keys: a local
    /// model run through its chat template answers a different input than the raw prompt,
    /// so its answers must never be shared with (or taken for) the raw ones.
    pub fn request_api(&self) -> ApiMode {
        match self.backend {
            BackendKind::Local if self.chat_template => ApiMode::Chat,
            _ => self.api,
        }
    }
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
