//! Errors of the local backend: each names the file at fault and what to do about it.

use std::path::PathBuf;

/// candle's result: the tensor code below `LocalModel` (layers, matmuls, attention) speaks
/// it, and `LocalError` wraps it at the model's edge. Defined here, at the bottom of the
/// backend, so that those files need not import each other for it.
pub type CResult<T> = candle_core::Result<T>;

/// Architectures the local backend runs (`model_type` in config.json).
pub const SUPPORTED_MODEL_TYPES: &str =
    "llama, mistral, gemma, gemma2, gemma3_text, phi, phi3, qwen2, qwen3, olmo2, t5";
/// Architectures the local backend runs from GGUF files (`general.architecture`).
pub const SUPPORTED_GGUF_ARCHITECTURES: &str =
    "llama (also Mistral and SmolLM2), gemma, gemma2, gemma3, phi2, phi3, qwen2, qwen3, olmo2";

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(
        "model path {0} does not exist: pass a directory with config.json, tokenizer.json and *.safetensors, a Hugging Face cache folder (models--org--name), or a .gguf file"
    )]
    NotFound(PathBuf),
    #[error(
        "{dir} holds no model weights: expected *.safetensors (with config.json and tokenizer.json) or one .gguf file"
    )]
    NoWeights { dir: PathBuf },
    #[error(
        "{dir} holds several GGUF files ({names}): pass the path of the one to load instead of the directory"
    )]
    SeveralGguf { dir: PathBuf, names: String },
    #[error(
        "{path} is missing: safetensors weights need the model's config.json beside them; download it from the model's repository"
    )]
    MissingConfig { path: PathBuf },
    #[error(
        "{path} is not a valid model config: {detail}; download it again from the model's repository"
    )]
    BadConfig { path: PathBuf, detail: String },
    #[error("weight file {path} is missing ({detail}); download the complete checkpoint again")]
    MissingWeightFile { path: PathBuf, detail: String },
    #[error(
        "weight file {path} is truncated or corrupt ({detail}); delete it and download it again"
    )]
    TruncatedWeights { path: PathBuf, detail: String },
    #[error(
        "weight file {path} lacks tensor `{name}`; it does not match its config ({arch}), download the checkpoint again"
    )]
    MissingTensor {
        path: PathBuf,
        name: String,
        arch: String,
    },
    #[error(
        "{path}: unsupported architecture `{found}`; the local backend runs {supported} (GPT-J and other models: serve them with vLLM or TGI and use backend = \"openai-compatible\")"
    )]
    UnsupportedArchitecture {
        path: PathBuf,
        found: String,
        supported: &'static str,
    },
    #[error(
        "no tokenizer for {path}: put the model's tokenizer.json beside the weights (GGUF files may carry their own in tokenizer.ggml.* metadata)"
    )]
    MissingTokenizer { path: PathBuf },
    #[error("tokenizer {path} cannot be used: {detail}; download the model's tokenizer.json again")]
    BadTokenizer { path: PathBuf, detail: String },
    #[error(
        "tokenizer {tokenizer} does not match the model: it has {tokenizer_vocab} tokens but the embedding matrix in {weights} has {embedding_rows} rows; use the tokenizer.json of the same model"
    )]
    TokenizerMismatch {
        tokenizer: PathBuf,
        tokenizer_vocab: usize,
        weights: PathBuf,
        embedding_rows: usize,
    },
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("local inference failed ({context}): {source}")]
    Candle {
        context: String,
        source: candle_core::Error,
    },
    #[error("tokenizing a prompt failed: {0}")]
    Encode(String),
    #[error("{0}")]
    Fetch(String),
    /// `TABCONTAM_CPU` names no kernel path, or one this CPU cannot run.
    #[error("{0}")]
    CpuPath(String),
}

impl LocalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LocalError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Adds what was being done to a candle error (candle's own messages name no file).
pub(crate) trait CandleContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, LocalError>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, LocalError> {
        self.map_err(|source| LocalError::Candle {
            context: context(),
            source,
        })
    }
}
