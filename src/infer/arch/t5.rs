//! T5 and T0 (`model_type = "t5"`): encoder-decoder with relative position buckets,
//! unscaled attention, RMS layer norms and a ReLU or gated-GELU feed-forward. The encoder
//! runs once per batch (right-padded, masked); the decoder steps over a KV cache.

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::infer::error::LocalError;
use crate::infer::kv_cache::LayerCache;
use crate::infer::layers::{Activation, CResult, Linear, Norm, attention};
use crate::infer::weights::Weights;

/// `config.json` of T5 checkpoints (names and defaults follow transformers).
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub d_model: usize,
    pub d_kv: usize,
    pub d_ff: usize,
    pub num_layers: usize,
    #[serde(default)]
    pub num_decoder_layers: Option<usize>,
    pub num_heads: usize,
    #[serde(default = "default_buckets")]
    pub relative_attention_num_buckets: usize,
    #[serde(default = "default_max_distance")]
    pub relative_attention_max_distance: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_epsilon: f64,
    #[serde(default = "default_feed_forward")]
    pub feed_forward_proj: String,
    #[serde(default = "default_true")]
    pub tie_word_embeddings: bool,
    /// transformers ≥ 5 states the output scaling explicitly (and always ties weights).
    #[serde(default)]
    pub scale_decoder_outputs: Option<bool>,
    #[serde(default)]
    pub decoder_start_token_id: Option<u32>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

fn default_buckets() -> usize {
    32
}
fn default_max_distance() -> usize {
    128
}
fn default_eps() -> f64 {
    1e-6
}
fn default_feed_forward() -> String {
    "relu".into()
}
fn default_true() -> bool {
    true
}

impl Config {
    /// `(gated, activation)` from `feed_forward_proj` (`relu`, `gated-gelu`, …).
    fn feed_forward(&self) -> Result<(bool, Activation), String> {
        let (gated, name) = match self.feed_forward_proj.strip_prefix("gated-") {
            Some(name) => (true, name),
            None => (false, self.feed_forward_proj.as_str()),
        };
        // transformers maps T5's "gated-gelu" to the tanh GELU (`gelu_new`).
        let name = if name == "gelu" { "gelu_new" } else { name };
        let activation = Activation::parse(name)
            .ok_or_else(|| format!("unsupported feed_forward_proj `{}`", self.feed_forward_proj))?;
        Ok((gated, activation))
    }

    pub fn decoder_start(&self) -> u32 {
        self.decoder_start_token_id
            .or(self.pad_token_id)
            .unwrap_or(0)
    }

    pub fn pad(&self) -> u32 {
        self.pad_token_id.unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
struct SelfAttention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

impl SelfAttention {
    fn load(weights: &mut Weights, prefix: &str) -> Result<Self, LocalError> {
        Ok(SelfAttention {
            q: Linear::load(weights, &format!("{prefix}.q"))?,
            k: Linear::load(weights, &format!("{prefix}.k"))?,
            v: Linear::load(weights, &format!("{prefix}.v"))?,
            o: Linear::load(weights, &format!("{prefix}.o"))?,
        })
    }
}

#[derive(Debug, Clone)]
struct FeedForward {
    wi: Vec<Linear>,
    wo: Linear,
    norm: Norm,
}

#[derive(Debug, Clone)]
struct EncoderBlock {
    attn_norm: Norm,
    attn: SelfAttention,
    ff: FeedForward,
}

#[derive(Debug, Clone)]
struct DecoderBlock {
    self_norm: Norm,
    self_attn: SelfAttention,
    cross_norm: Norm,
    cross_attn: SelfAttention,
    ff: FeedForward,
}

/// The encoder's output for a batch, ready for cross-attention.
pub struct Encoded {
    /// Per decoder layer: cross-attention keys and values `(batch, heads, src, d_kv)`.
    cross: Vec<(Tensor, Tensor)>,
    /// Additive mask over source positions `(batch, 1, 1, src)` (padding).
    mask: Tensor,
}

#[derive(Debug, Clone)]
pub struct T5Model {
    pub config: Config,
    shared: Tensor,
    encoder: Vec<EncoderBlock>,
    encoder_bias: Tensor,
    encoder_norm: Norm,
    decoder: Vec<DecoderBlock>,
    decoder_bias: Tensor,
    decoder_norm: Norm,
    lm_head: Option<Linear>,
    gated: bool,
    activation: Activation,
    device: Device,
    dtype: DType,
}

impl T5Model {
    pub fn load(weights: &mut Weights, config: Config) -> Result<Self, LocalError> {
        weights.arch = "t5".into();
        let (gated, activation) =
            config
                .feed_forward()
                .map_err(|detail| LocalError::BadConfig {
                    path: weights.path().with_file_name("config.json"),
                    detail,
                })?;
        let eps = config.layer_norm_epsilon as f32;
        let norm = |weights: &mut Weights, name: &str| -> Result<Norm, LocalError> {
            Ok(Norm::Rms {
                weight: weights.tensor(&format!("{name}.weight"))?,
                eps,
            })
        };
        let feed_forward =
            |weights: &mut Weights, prefix: &str| -> Result<FeedForward, LocalError> {
                let wi = if gated {
                    vec![
                        Linear::load(weights, &format!("{prefix}.DenseReluDense.wi_0"))?,
                        Linear::load(weights, &format!("{prefix}.DenseReluDense.wi_1"))?,
                    ]
                } else {
                    vec![Linear::load(
                        weights,
                        &format!("{prefix}.DenseReluDense.wi"),
                    )?]
                };
                Ok(FeedForward {
                    wi,
                    wo: Linear::load(weights, &format!("{prefix}.DenseReluDense.wo"))?,
                    norm: norm(weights, &format!("{prefix}.layer_norm"))?,
                })
            };
        let mut encoder = Vec::with_capacity(config.num_layers);
        for i in 0..config.num_layers {
            let block = format!("encoder.block.{i}.layer");
            encoder.push(EncoderBlock {
                attn_norm: norm(weights, &format!("{block}.0.layer_norm"))?,
                attn: SelfAttention::load(weights, &format!("{block}.0.SelfAttention"))?,
                ff: feed_forward(weights, &format!("{block}.1"))?,
            });
        }
        let mut decoder = Vec::new();
        for i in 0..config.num_decoder_layers.unwrap_or(config.num_layers) {
            let block = format!("decoder.block.{i}.layer");
            decoder.push(DecoderBlock {
                self_norm: norm(weights, &format!("{block}.0.layer_norm"))?,
                self_attn: SelfAttention::load(weights, &format!("{block}.0.SelfAttention"))?,
                cross_norm: norm(weights, &format!("{block}.1.layer_norm"))?,
                cross_attn: SelfAttention::load(weights, &format!("{block}.1.EncDecAttention"))?,
                ff: feed_forward(weights, &format!("{block}.2"))?,
            });
        }
        // T0 and T5 v1.1 have their own output projection; original T5 reuses the
        // embeddings (and checkpoints saved by transformers ≥ 5 always do).
        let lm_head = if weights.has("lm_head.weight") {
            Some(Linear::load(weights, "lm_head")?)
        } else {
            None
        };
        let shared = if weights.has("shared.weight") {
            weights.tensor("shared.weight")?
        } else {
            weights.tensor("encoder.embed_tokens.weight")?
        };
        Ok(T5Model {
            encoder_bias: weights
                .tensor("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")?,
            encoder_norm: norm(weights, "encoder.final_layer_norm")?,
            decoder_bias: weights
                .tensor("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")?,
            decoder_norm: norm(weights, "decoder.final_layer_norm")?,
            shared,
            encoder,
            decoder,
            lm_head,
            gated,
            activation,
            device: weights.device.clone(),
            dtype: weights.dtype,
            config,
        })
    }

    pub fn embedding_rows(&self) -> usize {
        self.shared.dim(0).unwrap_or(0)
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn heads(&self, xs: &Tensor) -> CResult<Tensor> {
        let (batch, len, _) = xs.dims3()?;
        xs.reshape((batch, len, self.config.num_heads, self.config.d_kv))?
            .transpose(1, 2)?
            .contiguous()
    }

    fn merge_heads(&self, xs: &Tensor) -> CResult<Tensor> {
        let (batch, _, len, _) = xs.dims4()?;
        xs.transpose(1, 2)?
            .reshape((batch, len, self.config.num_heads * self.config.d_kv))
    }

    fn feed_forward(&self, ff: &FeedForward, xs: &Tensor) -> CResult<Tensor> {
        let normed = ff.norm.forward(xs)?;
        let hidden = self.activation.apply(&ff.wi[0].forward(&normed)?)?;
        let hidden = if self.gated {
            (hidden * ff.wi[1].forward(&normed)?)?
        } else {
            hidden
        };
        xs + ff.wo.forward(&hidden)?
    }

    /// Relative position bias `(1, heads, queries, keys)` for queries at
    /// `query_start..query_start + queries` against keys `0..keys`.
    fn position_bias(
        &self,
        table: &Tensor,
        query_start: usize,
        queries: usize,
        keys: usize,
        bidirectional: bool,
    ) -> CResult<Tensor> {
        let mut buckets = Vec::with_capacity(queries * keys);
        for q in query_start..query_start + queries {
            for k in 0..keys {
                buckets.push(relative_position_bucket(
                    k as i64 - q as i64,
                    bidirectional,
                    self.config.relative_attention_num_buckets,
                    self.config.relative_attention_max_distance,
                ));
            }
        }
        let buckets = Tensor::from_vec(buckets, queries * keys, &self.device)?;
        table
            .index_select(&buckets, 0)?
            .reshape((queries, keys, self.config.num_heads))?
            .permute((2, 0, 1))?
            .unsqueeze(0)?
            .contiguous()
    }

    /// Encodes right-padded `tokens` `(batch, src)` whose real lengths are `lengths`.
    pub fn encode(&self, tokens: &Tensor, lengths: &[usize]) -> CResult<Encoded> {
        let (batch, src) = tokens.dims2()?;
        let mut mask = Vec::with_capacity(batch * src);
        for &len in lengths {
            mask.extend((0..src).map(|k| if k < len { 0f32 } else { f32::NEG_INFINITY }));
        }
        let mask =
            Tensor::from_vec(mask, (batch, 1, 1, src), &self.device)?.to_dtype(self.dtype)?;
        let bias = self.position_bias(&self.encoder_bias, 0, src, src, true)?;
        let mut xs = self
            .shared
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((batch, src, self.config.d_model))?;
        for block in &self.encoder {
            let normed = block.attn_norm.forward(&xs)?;
            let q = self.heads(&block.attn.q.forward(&normed)?)?;
            let k = self.heads(&block.attn.k.forward(&normed)?)?;
            let v = self.heads(&block.attn.v.forward(&normed)?)?;
            let attn = attention(&q, &k, &v, Some(&mask), 1.0, None, Some(&bias))?;
            xs = (xs + block.attn.o.forward(&self.merge_heads(&attn)?)?)?;
            xs = self.feed_forward(&block.ff, &xs)?;
        }
        let encoded = self.encoder_norm.forward(&xs)?;
        let cross = self
            .decoder
            .iter()
            .map(|block| {
                let k = self.heads(&block.cross_attn.k.forward(&encoded)?)?;
                let v = self.heads(&block.cross_attn.v.forward(&encoded)?)?;
                Ok((k, v))
            })
            .collect::<CResult<Vec<_>>>()?;
        Ok(Encoded { cross, mask })
    }

    pub fn new_cache(&self, batch: usize, capacity: usize) -> CResult<Vec<LayerCache>> {
        (0..self.decoder.len())
            .map(|_| {
                LayerCache::empty(
                    batch,
                    self.config.num_heads,
                    capacity,
                    self.config.d_kv,
                    self.dtype,
                    &self.device,
                )
            })
            .collect()
    }

    /// One decoder step: `tokens` `(batch, 1)` at position `step`; returns logits
    /// `(batch, vocab)`.
    pub fn decode_step(
        &self,
        tokens: &Tensor,
        step: usize,
        encoded: &Encoded,
        cache: &mut [LayerCache],
    ) -> CResult<Tensor> {
        let (batch, new) = tokens.dims2()?;
        let bias = self.position_bias(&self.decoder_bias, step, new, step + new, false)?;
        let mut xs = self
            .shared
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((batch, new, self.config.d_model))?;
        for ((block, layer_cache), (cross_k, cross_v)) in self
            .decoder
            .iter()
            .zip(cache.iter_mut())
            .zip(&encoded.cross)
        {
            let normed = block.self_norm.forward(&xs)?;
            let q = self.heads(&block.self_attn.q.forward(&normed)?)?;
            let k = self.heads(&block.self_attn.k.forward(&normed)?)?;
            let v = self.heads(&block.self_attn.v.forward(&normed)?)?;
            let (k, v) = layer_cache.append(step, &k, &v)?;
            let attn = attention(&q, &k, &v, None, 1.0, None, Some(&bias))?;
            xs = (xs + block.self_attn.o.forward(&self.merge_heads(&attn)?)?)?;
            let normed = block.cross_norm.forward(&xs)?;
            let q = self.heads(&block.cross_attn.q.forward(&normed)?)?;
            let attn = attention(&q, cross_k, cross_v, Some(&encoded.mask), 1.0, None, None)?;
            xs = (xs + block.cross_attn.o.forward(&self.merge_heads(&attn)?)?)?;
            xs = self.feed_forward(&block.ff, &xs)?;
        }
        let last = self
            .decoder_norm
            .forward(&xs.narrow(1, new - 1, 1)?.squeeze(1)?)?;
        // Original T5 (tied embeddings) rescales by d_model^-0.5 before projecting.
        let scale = self
            .config
            .scale_decoder_outputs
            .unwrap_or(self.config.tie_word_embeddings);
        let last = if scale {
            (last * (self.config.d_model as f64).powf(-0.5))?
        } else {
            last
        };
        let logits = match &self.lm_head {
            Some(head) => head.forward(&last)?,
            None => last.matmul(&self.shared.t()?)?,
        };
        logits.to_dtype(DType::F32)
    }

    /// Keeps only the sequences at `rows` of an encoded batch.
    pub fn select_encoded(&self, encoded: &Encoded, rows: &Tensor) -> CResult<Encoded> {
        Ok(Encoded {
            cross: encoded
                .cross
                .iter()
                .map(|(k, v)| Ok((k.index_select(rows, 0)?, v.index_select(rows, 0)?)))
                .collect::<CResult<Vec<_>>>()?,
            mask: encoded.mask.index_select(rows, 0)?,
        })
    }
}

/// transformers' `T5Attention._relative_position_bucket`, with its f32 logarithm.
fn relative_position_bucket(
    relative: i64,
    bidirectional: bool,
    num_buckets: usize,
    max_distance: usize,
) -> u32 {
    let mut buckets = num_buckets as i64;
    let mut bucket = 0i64;
    let distance = if bidirectional {
        buckets /= 2;
        if relative > 0 {
            bucket += buckets;
        }
        relative.abs()
    } else {
        (-relative).max(0)
    };
    let max_exact = buckets / 2;
    if distance < max_exact {
        bucket += distance;
    } else {
        let log_ratio = (distance as f32 / max_exact as f32).ln();
        let scale = (max_distance as f64 / max_exact as f64).ln() as f32;
        let large = max_exact + (log_ratio / scale * (buckets - max_exact) as f32) as i64;
        bucket += large.min(buckets - 1);
    }
    bucket as u32
}

#[cfg(test)]
mod tests {
    use super::relative_position_bucket;

    #[test]
    fn buckets_match_transformers() {
        // Values from transformers' _relative_position_bucket (32 buckets, 128 max).
        let bidirectional: Vec<u32> = [-200, -20, -8, -1, 0, 1, 8, 20, 200]
            .iter()
            .map(|&r| relative_position_bucket(r, true, 32, 128))
            .collect();
        assert_eq!(bidirectional, vec![15, 10, 8, 1, 0, 17, 24, 26, 31]);
        let causal: Vec<u32> = [-200, -20, -8, -1, 0, 3]
            .iter()
            .map(|&r| relative_position_bucket(r, false, 32, 128))
            .collect();
        assert_eq!(causal, vec![31, 17, 8, 1, 0, 0]);
    }
}
