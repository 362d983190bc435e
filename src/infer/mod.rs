//! In-process inference with candle (`backend = "local"`).
//!
//! Loads a model from a directory of `config.json` + `tokenizer.json` + `*.safetensors`
//! (also the Hugging Face cache layout `models--org--name/snapshots/<rev>/`) or from one
//! GGUF file (quantized; its tokenizer is rebuilt from `tokenizer.ggml.*` when no
//! `tokenizer.json` lies beside it), and generates the way the paper ran open-weight models:
//! greedy by default, the test's max tokens, raw prompt, only the new text returned.
//!
//! Architectures: llama (Llama 2, 3, 3.1, SmolLM2), mistral, gemma, gemma2, gemma3 (GGUF),
//! phi (phi-2), phi3, qwen2 (Qwen2, Qwen2.5), qwen3, olmo2 and T5 (T0). They are our own
//! small files (`arch/`) over one decoder
//! (`decoder.rs`) rather than candle-transformers' models, because those keep their KV
//! cache inside the model and have no padding mask: we need both a cache that can be
//! copied per prompt (shared-prefix reuse) and batches of prompts of different lengths.
//! GPT-J has no implementation here (nor in candle): serve it with vLLM or TGI and use the
//! OpenAI-compatible backend.
//!
//! Throughput: the prompts of one call run as micro-batches of `max_batch`, sorted by their
//! tokens; each prompt copies the KV cache of what it shares with the prompt before it
//! (a test's instructions, then a row) instead of computing it, and the last prompt's
//! cache is kept for the next call (`shared_prefill`). [`LocalStats`] counts the prompt
//! tokens actually run through the model, so that a benchmark can compare with and
//! without reuse.
//!
//! Identity: [`LocalModel::revision`] is a blake3 digest of the weight, config and
//! tokenizer files' bytes, recomputed at every load (nothing is cached on disk), so a
//! changed checkpoint never reuses old answers.
//!
//! Weights: GGUF blocks stay quantized (Q4_1 multiplied as stored by our own AVX2 kernel in
//! the `tabcontam-kernels` crate; Q5_0, Q5_1, and Q4_1 on CPUs without AVX2, re-blocked to
//! Q8_0, for which candle has SIMD kernels), the embedding table included; decoding
//! multiplies them block by block ([`qmatmul`]) and prefill expands one matrix at a time to
//! f32 for a GEMM (`layers::Linear`). Safetensors are memory-mapped and used dense (f32 on CPU).
//! The KV cache grows with the sequences rather than being sized for the token budget.
//!
//! Devices: CPU by default; CUDA with the cargo feature `cuda`.
//! Everything here is synchronous: the async runner calls it from a blocking thread.

pub mod arch;
pub mod decode_attention;
pub mod decoder;
pub mod decoder_spec;
pub mod error;
pub mod fetch;
pub mod files;
pub mod generate;
pub mod kv_cache;
pub mod layers;
pub mod memory;
pub mod prefill_attention;
pub mod qmatmul;
pub mod rotary_heads;
pub mod score;
pub mod shared_prefill;
pub mod tensor_values;
pub mod tokenizer;
pub mod weights;

use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device};

pub use error::LocalError;
pub use files::{ModelFiles, WeightFormat, weights_digest};

use crate::request::{GenerationParams, Response};
use arch::Architecture;
use arch::t5::T5Model;
use decoder::DecoderModel;
use generate::Settings;
pub use generate::{Finish, Generated};
use shared_prefill::PrefixCache;
use tokenizer::TextTokenizer;
use weights::Weights;

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalDevice {
    #[default]
    Cpu,
    /// A CUDA GPU by ordinal (needs the `cuda` cargo feature).
    Cuda(usize),
}

/// How a local model is loaded and run.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    pub device: LocalDevice,
    /// Prompts decoded together; bounds the KV cache memory (`batch × prompt length`).
    pub max_batch: usize,
    /// Encode the prompts' common prefix once and reuse its KV cache.
    pub prefix_reuse: bool,
    /// Expand quantized GGUF weights to f32 (`Some(true)`: the exact weights transformers
    /// dequantizes, for parity checks; 4–8× the memory). By default they stay quantized
    /// and are multiplied block by block (see [`weights::cpu_kernel_type`]).
    pub dequantize: Option<bool>,
    /// Quantize dense (safetensors) matmul weights at load ([`weights::Quantize`]); GGUF
    /// weights are multiplied as stored whatever this says.
    pub quantize: Option<weights::Quantize>,
    /// Wrap each prompt in a simple chat template for instruct models (ChatML, Llama 3,
    /// Gemma, Phi-3 or Mistral, chosen by the tokenizer's special tokens). Off by default:
    /// the paper sends raw prompts.
    pub chat_template: bool,
    /// Record, at every generated step, the `top_logprobs` most likely tokens with their
    /// log-probabilities under the full next-token distribution ([`Generated::top_logprobs`]);
    /// 0 (the default) records none. Parity checks compare them with another engine's.
    pub top_logprobs: usize,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            device: LocalDevice::Cpu,
            max_batch: 8,
            prefix_reuse: true,
            dequantize: None,
            quantize: None,
            chat_template: false,
            top_logprobs: 0,
        }
    }
}

/// Work done by a model since it was loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalStats {
    /// Prompt tokens run through the model (shared prefixes counted once).
    pub prompt_tokens_processed: u64,
    /// Prompt tokens whose KV cache was copied from a shared prefix instead.
    pub prompt_tokens_reused: u64,
    pub tokens_generated: u64,
    pub prompts: u64,
    /// Time spent encoding prompts (shared prefixes and each micro-batch's suffixes).
    pub prefill_nanos: u64,
    /// Time spent generating (sampling included), after each micro-batch's prefill.
    pub decode_nanos: u64,
}

enum Network {
    Decoder(Box<DecoderModel>),
    T5(Box<T5Model>),
}

/// Hands the heap that loading freed back to the OS. Loading builds large transient
/// structures (a GGUF tokenizer as JSON, blocks re-blocked or stacked); glibc keeps their
/// freed pages, so without this a loaded Gemma 3 270M stayed at 744 MB resident instead of
/// 373 MB (SmolLM2: 140 → 113 MB), measured after `LocalModel::load` on the 2-core machine.
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A loaded model, ready to generate.
pub struct LocalModel {
    network: Network,
    tokenizer: TextTokenizer,
    eos: Vec<u32>,
    revision: String,
    files: ModelFiles,
    options: LocalOptions,
    /// The lane of the `&mut self` calls; [`respond_on`](LocalModel::respond_on) takes others.
    lane: Lane,
}

/// What one caller of a shared [`LocalModel`] keeps between its calls: the prefix kept from
/// its previous call and its counters. The weights are read-only, so lanes on different
/// threads (each in a rayon pool of its own) generate at once from one loaded model:
/// on 2 cores that keeps both busy through the serial parts of a micro-batch (sampling, the
/// stop rules, masks, small ops) that a batch split across both cores leaves one core idle
/// for.
#[derive(Default)]
pub struct Lane {
    kept_prefix: Option<PrefixCache>,
    stats: LocalStats,
}

impl Lane {
    pub fn stats(&self) -> LocalStats {
        self.stats
    }
}

impl LocalStats {
    /// The counters of two lanes together.
    pub fn plus(self, other: LocalStats) -> LocalStats {
        LocalStats {
            prompt_tokens_processed: self.prompt_tokens_processed + other.prompt_tokens_processed,
            prompt_tokens_reused: self.prompt_tokens_reused + other.prompt_tokens_reused,
            tokens_generated: self.tokens_generated + other.tokens_generated,
            prompts: self.prompts + other.prompts,
            prefill_nanos: self.prefill_nanos + other.prefill_nanos,
            decode_nanos: self.decode_nanos + other.decode_nanos,
        }
    }
}

impl LocalModel {
    /// Loads the model at `path` (see the module docs for the layouts understood).
    pub fn load(path: &Path, options: &LocalOptions) -> Result<LocalModel, LocalError> {
        // A forced kernel path the CPU lacks is an error here, not a silent fallback later.
        tabcontam_kernels::cpu::forced().map_err(LocalError::CpuPath)?;
        let files = ModelFiles::locate(path)?;
        let device = match options.device {
            LocalDevice::Cpu => Device::Cpu,
            LocalDevice::Cuda(ordinal) => {
                Device::new_cuda(ordinal).map_err(|source| LocalError::Candle {
                    context: format!(
                        "opening CUDA device {ordinal} (build with `--features cuda`)"
                    ),
                    source,
                })?
            }
        };
        let dtype = if device.is_cpu() {
            DType::F32
        } else {
            DType::BF16
        };
        let (network, tokenizer, mut eos) = match &files.format {
            WeightFormat::Safetensors { config, shards } => {
                let (architecture, eos) = arch::from_config_file(config)?;
                let tokenizer_path =
                    files
                        .tokenizer
                        .clone()
                        .ok_or_else(|| LocalError::MissingTokenizer {
                            path: files.dir.clone(),
                        })?;
                let tokenizer = TextTokenizer::from_file(&tokenizer_path)?;
                let mut weights = Weights::open_safetensors(shards, &device, dtype)?;
                weights.quantize = options.quantize;
                let network = match architecture {
                    Architecture::Decoder(spec) => {
                        Network::Decoder(Box::new(DecoderModel::load(&mut weights, *spec)?))
                    }
                    Architecture::T5(config) => {
                        Network::T5(Box::new(T5Model::load(&mut weights, config)?))
                    }
                };
                (network, tokenizer, eos)
            }
            WeightFormat::Gguf(gguf) => {
                let (mut weights, meta) = Weights::open_gguf(gguf, &device, dtype)?;
                weights.dequantize = options.dequantize.unwrap_or(false);
                let embedding_rows = weights.shape("token_embd.weight").map_or(0, |s| s[0]);
                let spec = arch::from_gguf(gguf, &meta, embedding_rows)?;
                let mut spec = spec;
                if let Some(factors) = weights.optional_tensor("rope_freqs.weight")? {
                    let factors = factors
                        .to_dtype(DType::F32)
                        .and_then(|f| f.to_vec1::<f32>());
                    spec.rope
                        .divide(&factors.map_err(|source| LocalError::Candle {
                            context: "reading rope_freqs.weight".into(),
                            source,
                        })?);
                }
                let tokenizer = match &files.tokenizer {
                    Some(path) => TextTokenizer::from_file(path)?,
                    None => TextTokenizer::from_gguf(gguf, &meta)?,
                };
                let mut eos: Vec<u32> = [
                    "tokenizer.ggml.eos_token_id",
                    "tokenizer.ggml.eot_token_id",
                    "tokenizer.ggml.eom_token_id",
                ]
                .iter()
                .filter_map(|key| meta.u32(key))
                .collect();
                // llama.cpp also ends generation at Gemma's end-of-turn token, which GGUF
                // files name only by its text.
                eos.extend(tokenizer.token_id("<end_of_turn>"));
                eos.dedup();
                (
                    Network::Decoder(Box::new(DecoderModel::load(&mut weights, spec)?)),
                    tokenizer,
                    eos,
                )
            }
        };
        if let Some(path) = &files.generation_config
            && let Ok(text) = std::fs::read_to_string(path)
            && let Ok(json) = serde_json::from_str::<serde_json::Value>(&text)
        {
            eos.extend(arch::eos_ids(&json));
        }
        if eos.is_empty() {
            eos.extend(
                ["</s>", "<|endoftext|>", "<eos>"]
                    .iter()
                    .find_map(|t| tokenizer.token_id(t)),
            );
        }
        eos.sort_unstable();
        eos.dedup();
        let embedding_rows = match &network {
            Network::Decoder(model) => model.embedding_rows(),
            Network::T5(model) => model.embedding_rows(),
        };
        check_tokenizer_matches(&tokenizer, embedding_rows, files.weights_path())?;
        let revision = weights_digest(&files.identity_files())?;
        return_freed_memory();
        Ok(LocalModel {
            network,
            tokenizer,
            eos,
            revision,
            files,
            options: options.clone(),
            lane: Lane::default(),
        })
    }

    /// Bytes of KV cache one sequence holds per position; 0 for T5 (its lanes hold only
    /// encoder outputs and a short decoder cache).
    pub fn kv_bytes_per_position(&self) -> usize {
        match &self.network {
            Network::Decoder(model) => model.kv_bytes_per_position(),
            Network::T5(_) => 0,
        }
    }

    /// The weights digest (`blake3:…`): the model's revision in request keys.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    pub fn stats(&self) -> LocalStats {
        self.lane.stats
    }

    pub fn reset_stats(&mut self) {
        self.lane.stats = LocalStats::default();
    }

    /// Batch size and prefix reuse can change between calls (device and weights cannot).
    pub fn set_batching(&mut self, max_batch: usize, prefix_reuse: bool) {
        self.options.max_batch = max_batch.max(1);
        self.options.prefix_reuse = prefix_reuse;
        if !prefix_reuse {
            self.lane.kept_prefix = None;
        }
    }

    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// End-of-sequence ids (config, generation_config and GGUF metadata together).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    /// Token ids of a prompt as the model sees it (template applied when configured).
    pub fn tokenize(&self, prompt: &str) -> Result<Vec<u32>, LocalError> {
        let prompt = if self.options.chat_template {
            self.apply_chat_template(prompt)
        } else {
            prompt.to_string()
        };
        self.tokenizer.encode(&prompt)
    }

    /// Generates one completion per prompt, in order. `sample` is the request's sample
    /// index: with sampling it seeds the draws together with `params.seed`.
    pub fn generate_batch(
        &mut self,
        prompts: &[&str],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Response>, LocalError> {
        let budgets = vec![params.max_tokens; prompts.len()];
        self.generate_batch_budgets(prompts, &budgets, params, sample)
    }

    /// Like [`generate_batch`](Self::generate_batch), each prompt with its own token
    /// budget (`params.max_tokens` is not used): prompts of tests that differ only in
    /// their max tokens decode in one micro-batch.
    pub fn generate_batch_budgets(
        &mut self,
        prompts: &[&str],
        budgets: &[u32],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Response>, LocalError> {
        let tokenized = prompts
            .iter()
            .map(|p| self.tokenize(p))
            .collect::<Result<Vec<_>, _>>()?;
        self.respond_from_ids(&tokenized, budgets, params, sample)
    }

    /// Responses to prompts already tokenized (by [`tokenize`](Self::tokenize)), each with
    /// its own token budget: a scheduler that tokenized every prompt to order them does
    /// not run the tokenizer a second time.
    pub fn respond_from_ids(
        &mut self,
        tokenized: &[Vec<u32>],
        budgets: &[u32],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Response>, LocalError> {
        let mut lane = std::mem::take(&mut self.lane);
        let responses = self.respond_on(&mut lane, tokenized, budgets, params, sample);
        self.lane = lane;
        responses
    }

    /// [`respond_from_ids`](Self::respond_from_ids) on a caller's own [`Lane`]: several
    /// threads share the model, each with its lane.
    pub fn respond_on(
        &self,
        lane: &mut Lane,
        tokenized: &[Vec<u32>],
        budgets: &[u32],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Response>, LocalError> {
        let results = self.generate_on(lane, tokenized, budgets, params, sample)?;
        results
            .into_iter()
            .map(|generated| {
                let mut text = self.tokenizer.decode(&generated.ids)?;
                let mut finish = generated.finish;
                if let Some(cut) = params
                    .stop
                    .iter()
                    .filter_map(|s| text.find(s.as_str()))
                    .min()
                {
                    text.truncate(cut);
                    finish = Finish::Stop;
                }
                // The generation loop stopped at the token that completed the judged
                // line; that token may carry more text (`\n\n`, `.\nThe`), which is
                // cut too, so the stored answer is the same whatever the tokenization.
                if params.stop_rule.is_some_and(|rule| rule.cut(&mut text)) {
                    finish = Finish::Stop;
                }
                Ok(Response {
                    text,
                    finish_reason: Some(
                        match finish {
                            Finish::Stop => "stop",
                            Finish::Length => "length",
                        }
                        .to_string(),
                    ),
                    prompt_tokens: Some(generated.prompt_tokens as u32),
                    completion_tokens: Some(generated.ids.len() as u32),
                    latency_ms: generated.elapsed_ms,
                    // Local weights are their digest (the identity's revision): no alias.
                    served_model: None,
                    served_fingerprint: None,
                })
            })
            .collect()
    }

    /// Like [`generate_batch`](Self::generate_batch) but returns token ids (parity tests).
    pub fn generate_ids(
        &mut self,
        prompts: &[&str],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Generated>, LocalError> {
        let tokenized = prompts
            .iter()
            .map(|p| self.tokenize(p))
            .collect::<Result<Vec<_>, _>>()?;
        self.generate_from_ids(&tokenized, params, sample)
    }

    /// Generates from prompts given as token ids (exactly as another implementation
    /// tokenized them, for parity checks).
    pub fn generate_from_ids(
        &mut self,
        prompts: &[Vec<u32>],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Generated>, LocalError> {
        let budgets = vec![params.max_tokens; prompts.len()];
        self.generate_from_ids_budgets(prompts, &budgets, params, sample)
    }

    /// [`generate_from_ids`](Self::generate_from_ids) with a token budget per prompt.
    pub fn generate_from_ids_budgets(
        &mut self,
        prompts: &[Vec<u32>],
        budgets: &[u32],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Generated>, LocalError> {
        let mut lane = std::mem::take(&mut self.lane);
        let generated = self.generate_on(&mut lane, prompts, budgets, params, sample);
        self.lane = lane;
        generated
    }

    fn generate_on(
        &self,
        lane: &mut Lane,
        prompts: &[Vec<u32>],
        budgets: &[u32],
        params: &GenerationParams,
        sample: u32,
    ) -> Result<Vec<Generated>, LocalError> {
        if budgets.len() != prompts.len() {
            return Err(LocalError::Encode(format!(
                "{} token budgets for {} prompts",
                budgets.len(),
                prompts.len()
            )));
        }
        let started = Instant::now();
        // Prompts with no budget are answered at once; the others run.
        let running: Vec<usize> = (0..prompts.len()).filter(|&i| budgets[i] > 0).collect();
        let settings = Settings {
            max_new_tokens: running.iter().map(|&i| budgets[i] as usize).collect(),
            temperature: params.temperature,
            top_p: params.top_p,
            seed: sampling_seed(params.seed.unwrap_or(0), sample),
            eos: self.eos.clone(),
            max_batch: self.options.max_batch,
            prefix_reuse: self.options.prefix_reuse,
            top_logprobs: self.options.top_logprobs,
        };
        lane.stats.prompts += prompts.len() as u64;
        let mut results: Vec<Generated> = prompts
            .iter()
            .map(|t| Generated {
                prompt_tokens: t.len(),
                ids: Vec::new(),
                finish: Finish::Length,
                elapsed_ms: started.elapsed().as_millis() as u64,
                logit_gaps: Vec::new(),
                top_logprobs: Vec::new(),
            })
            .collect();
        if running.is_empty() {
            return Ok(results);
        }
        let prompts: Vec<Vec<u32>> = running.iter().map(|&i| prompts[i].clone()).collect();
        let prompts = prompts.as_slice();
        let vocab = match &self.network {
            Network::Decoder(model) => model.embedding_rows(),
            Network::T5(model) => model.embedding_rows(),
        };
        if let Some(&bad) = prompts.iter().flatten().find(|&&id| id as usize >= vocab) {
            return Err(LocalError::Encode(format!(
                "token id {bad} is outside the vocabulary ({vocab})"
            )));
        }
        let tokenizer = &self.tokenizer;
        let stops = &params.stop;
        let rule = params.stop_rule;
        let stop_check = |ids: &[u32]| -> bool {
            (!stops.is_empty() || rule.is_some())
                && tokenizer.decode(ids).is_ok_and(|text| {
                    stops.iter().any(|s| text.contains(s.as_str()))
                        || rule.is_some_and(|rule| rule.decided_at(&text).is_some())
                })
        };
        let generated = match &self.network {
            Network::Decoder(model) => generate::generate_decoder(
                model,
                prompts,
                &settings,
                &mut lane.kept_prefix,
                &mut lane.stats,
                &stop_check,
            )?,
            Network::T5(model) => {
                generate::generate_t5(model, prompts, &settings, &mut lane.stats, &stop_check)?
            }
        };
        for (&i, output) in running.iter().zip(generated) {
            results[i] = output;
        }
        Ok(results)
    }

    /// Per-token log-probabilities of `text` as the model reads it raw (no chat template:
    /// the likelihood detectors score the row text itself), with μ and σ of the next-token
    /// distribution at each position.
    pub fn score_text(&mut self, text: &str) -> Result<crate::request::TokenLogprobs, LocalError> {
        let ids = self.tokenizer.encode(text)?;
        self.score_ids(&ids)
    }

    /// [`score_text`](Self::score_text) from token ids (as another implementation
    /// tokenized them, for parity checks).
    pub fn score_ids(&mut self, ids: &[u32]) -> Result<crate::request::TokenLogprobs, LocalError> {
        use error::CandleContext;
        let started = Instant::now();
        let model = match &self.network {
            Network::Decoder(model) => model,
            Network::T5(_) => {
                return Err(LocalError::Encode(
                    "scoring a text needs a decoder-only model; T5 reads its input with an encoder and gives it no log-probabilities".into(),
                ));
            }
        };
        let vocab = model.embedding_rows();
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(LocalError::Encode(format!(
                "token id {bad} is outside the vocabulary ({vocab})"
            )));
        }
        let scored = score::score_decoder(model, ids)
            .context(|| format!("scoring a text of {} tokens", ids.len()))?;
        self.lane.stats.prompts += 1;
        self.lane.stats.prompt_tokens_processed += ids.len().saturating_sub(1) as u64;
        self.lane.stats.prefill_nanos += started.elapsed().as_nanos() as u64;
        Ok(scored)
    }

    /// Decodes generated ids (special tokens left out).
    pub fn decode(&self, ids: &[u32]) -> Result<String, LocalError> {
        self.tokenizer.decode(ids)
    }

    /// Forgets the shared prefix kept from the previous call.
    pub fn clear_prefix_cache(&mut self) {
        self.lane.kept_prefix = None;
    }

    fn apply_chat_template(&self, prompt: &str) -> String {
        let has = |token: &str| self.tokenizer.token_id(token).is_some();
        if has("<|im_start|>") {
            format!("<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
        } else if has("<|start_header_id|>") {
            format!(
                "<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            )
        } else if has("<start_of_turn>") {
            format!("<start_of_turn>user\n{prompt}<end_of_turn>\n<start_of_turn>model\n")
        } else if has("<|user|>") && has("<|assistant|>") {
            format!("<|user|>\n{prompt}<|end|>\n<|assistant|>\n")
        } else if has("[INST]") {
            format!("[INST] {prompt} [/INST]")
        } else {
            prompt.to_string()
        }
    }
}

/// One seed per (request seed, sample index): each sample draws differently, reruns
/// draw the same. The planner already gives each sample its own request seed
/// (`api_seed + sample`); the index is mixed in too so that samples still differ when the
/// spec switches the seed off (`api_seed = false`).
fn sampling_seed(seed: u64, sample: u32) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&seed.to_le_bytes());
    hasher.update(&sample.to_le_bytes());
    let bytes = hasher.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// A tokenizer whose ids run past the embedding matrix, or that is far smaller than it
/// (embeddings are padded a little, never by a tenth), belongs to another model.
fn check_tokenizer_matches(
    tokenizer: &TextTokenizer,
    embedding_rows: usize,
    weights: &Path,
) -> Result<(), LocalError> {
    let vocab = tokenizer.vocab_size();
    if vocab > embedding_rows || vocab * 10 < embedding_rows * 9 {
        return Err(LocalError::TokenizerMismatch {
            tokenizer: tokenizer.source.clone(),
            tokenizer_vocab: vocab,
            weights: weights.to_path_buf(),
            embedding_rows,
        });
    }
    Ok(())
}
