//! Scoring a given text (no generation): the log-probability of each token given the
//! ones before it, with the mean and standard deviation of `log p(z)` under the full
//! next-token distribution at each position (Min-K%++ needs them; servers do not give them).

use candle_core::{Result as CResult, Tensor};

use super::decoder::DecoderModel;
use super::generate::{Layout, build_masks, token_tensor};
use crate::likelihood::distribution_moments;
use crate::request::TokenLogprobs;

/// Tokens fed per forward step: bounds the `(tokens, vocab)` f32 logits held at once.
const SCORE_CHUNK: usize = 256;

/// Log-probabilities of `ids[1..]`, each given the tokens before it, in one sequence with
/// a fresh KV cache.
pub fn score_decoder(model: &DecoderModel, ids: &[u32]) -> CResult<TokenLogprobs> {
    let n = ids.len();
    let mut logprobs = Vec::with_capacity(n.saturating_sub(1));
    let mut mu = Vec::with_capacity(n.saturating_sub(1));
    let mut sigma = Vec::with_capacity(n.saturating_sub(1));
    if n >= 2 {
        let mut cache = model.new_cache(1, n)?;
        let layout = [Layout { prefix: n, pad: 0 }];
        // The last token predicts nothing we score: feed ids[..n − 1].
        let fed = n - 1;
        let mut done = 0;
        while done < fed {
            let len = SCORE_CHUNK.min(fed - done);
            let slots = done..done + len;
            let positions = vec![slots.clone().map(|s| s as u32).collect::<Vec<u32>>()];
            let masks = build_masks(
                &layout,
                slots.clone(),
                slots.end,
                model.sliding_window(),
                model.device(),
                model.dtype(),
            )?;
            let tokens = token_tensor(&[ids[slots.clone()].to_vec()], model.device())?;
            let logits: Tensor = model.forward_all_logits(
                &super::decoder::Step {
                    tokens: &tokens,
                    positions: &positions,
                    masks: &masks,
                    offset: slots.start,
                    want_logits: true,
                },
                &mut cache,
            )?;
            let rows = logits.squeeze(0)?.to_vec2::<f32>()?;
            for (offset, row) in rows.iter().enumerate() {
                let next = ids[done + offset + 1] as usize;
                let (all, mean, std) = distribution_moments(row);
                logprobs.push(all.get(next).copied().unwrap_or(f64::NEG_INFINITY));
                mu.push(mean);
                sigma.push(std);
            }
            done += len;
        }
    }
    Ok(TokenLogprobs {
        tokens: ids.to_vec(),
        logprobs,
        mu: Some(mu),
        sigma: Some(sigma),
    })
}
