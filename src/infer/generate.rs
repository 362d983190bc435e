//! The generation loop: the prompts of a call run as micro-batches, sorted by their tokens;
//! a micro-batch's prompts are prefilled together, each copying what it shares with its
//! neighbour (`shared_prefill`; the last prompt's cache is kept for the next call), left-
//! padded to the longest, then all sequences decode one token per step, leaving the batch
//! when they finish.
//!
//! Size: over 700 lines because the batching, prefix sharing and decode loop share their
//! state; splitting them would pass that state across files.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::LocalStats;
use super::arch::t5::T5Model;
use super::decoder::{DecoderModel, Masks, Step};
use super::error::CResult;
use super::error::{CandleContext, LocalError};
use super::shared_prefill::{self, PrefixCache};

/// Generated positions a micro-batch's KV cache is first allocated for.
const INITIAL_GENERATION_ROOM: usize = 64;

/// What the caller asked for, resolved for the loop.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Token budget of each prompt, in order (prompts of different tests can share a
    /// micro-batch: only their budgets differ).
    pub max_new_tokens: Vec<usize>,
    pub temperature: f64,
    pub top_p: Option<f64>,
    /// Seed of every prompt's sampler (same request seed and sample index → same draws,
    /// whatever else shares the batch).
    pub seed: u64,
    pub eos: Vec<u32>,
    pub max_batch: usize,
    pub prefix_reuse: bool,
    /// Most likely tokens recorded per step with their log-probabilities (0: none).
    pub top_logprobs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// End-of-sequence token (not part of the output) or a stop string.
    Stop,
    Length,
}

#[derive(Debug, Clone)]
pub struct Generated {
    pub prompt_tokens: usize,
    pub ids: Vec<u32>,
    pub finish: Finish,
    pub elapsed_ms: u64,
    /// Per step, the best logit minus the second best: how close each choice was (parity
    /// checks ignore divergences after a near tie).
    pub logit_gaps: Vec<f32>,
    /// Per step, when [`Settings::top_logprobs`] asks for them: the most likely tokens,
    /// best first, with their log-probabilities under the full distribution.
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
}

/// Picks next tokens: greedy (arg max, first of equals) or seeded temperature / top-p.
struct Sampler {
    rng: Option<StdRng>,
    temperature: f64,
    top_p: f64,
}

impl Sampler {
    fn new(settings: &Settings) -> Self {
        let rng = (settings.temperature > 0.0).then(|| StdRng::seed_from_u64(settings.seed));
        Sampler {
            rng,
            temperature: settings.temperature,
            top_p: settings.top_p.unwrap_or(1.0),
        }
    }

    fn next(&mut self, logits: &[f32]) -> u32 {
        let Some(rng) = self.rng.as_mut() else {
            return argmax(logits);
        };
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut probs: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .map(|(id, &l)| (id as u32, (((l - max) as f64) / self.temperature).exp()))
            .collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut kept = 0.0;
        let mut cut = probs.len();
        for (i, &(_, p)) in probs.iter().enumerate() {
            kept += p / total;
            if kept >= self.top_p {
                cut = i + 1;
                break;
            }
        }
        probs.truncate(cut);
        let mass: f64 = probs.iter().map(|p| p.1).sum();
        let mut draw = rng.random::<f64>() * mass;
        for &(id, p) in &probs {
            draw -= p;
            if draw <= 0.0 {
                return id;
            }
        }
        probs.last().map_or(0, |p| p.0)
    }
}

/// The `k` most likely tokens, best first, with their log-probabilities (`logit − log Σ
/// exp(logits)`, summed in f64 over the whole vocabulary).
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if k == 0 || !max.is_finite() {
        return Vec::new();
    }
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_normalizer = f64::from(max) + sum.ln();
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (id, &logit) in logits.iter().enumerate() {
        if best.len() == k && best.last().is_some_and(|&(_, worst)| logit <= worst) {
            continue;
        }
        let at = best.partition_point(|&(_, l)| l >= logit);
        best.insert(at, (id as u32, logit));
        best.truncate(k);
    }
    best.into_iter()
        .map(|(id, logit)| (id, (f64::from(logit) - log_normalizer) as f32))
        .collect()
}

fn top_two_gap(logits: &[f32]) -> f32 {
    let (mut first, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits {
        if l > first {
            second = first;
            first = l;
        } else if l > second {
            second = l;
        }
    }
    first - second
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Where each sequence's tokens sit in a micro-batch's cache:
/// `[shared prefix | padding | own prompt suffix | generated]`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub(super) prefix: usize,
    pub(super) pad: usize,
}

impl Layout {
    /// A finished sequence's row, kept in the batch: every slot counts as padding, so its
    /// dummy queries attend to themselves only.
    const RETIRED: Layout = Layout {
        prefix: 0,
        pad: usize::MAX,
    };

    fn valid(self, slot: usize) -> bool {
        slot < self.prefix || slot >= self.prefix + self.pad
    }

    fn position(self, slot: usize) -> u32 {
        if slot < self.prefix {
            slot as u32
        } else {
            slot.saturating_sub(self.pad) as u32
        }
    }
}

/// Additive masks for query slots `queries` against key slots `0..keys`. A padding query
/// attends to itself only, so that no softmax row is empty (which would produce NaN).
pub(super) fn build_masks(
    layouts: &[Layout],
    queries: std::ops::Range<usize>,
    keys: usize,
    window: Option<usize>,
    device: &Device,
    dtype: DType,
) -> CResult<Masks> {
    let no_padding = layouts.iter().all(|l| l.pad == 0);
    let build = |window: Option<usize>| -> CResult<Option<Tensor>> {
        let within_window = window.is_none_or(|w| keys <= w);
        if queries.len() == 1 && no_padding && within_window {
            return Ok(None);
        }
        let mut mask = Vec::with_capacity(layouts.len() * queries.len() * keys);
        for layout in layouts {
            for q in queries.clone() {
                let q_real = layout.valid(q);
                let q_pos = layout.position(q);
                for k in 0..keys {
                    let allowed = if !q_real {
                        k == q
                    } else {
                        k <= q
                            && layout.valid(k)
                            && window.is_none_or(|w| (q_pos - layout.position(k)) < w as u32)
                    };
                    mask.push(if allowed { 0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        let mask = Tensor::from_vec(mask, (layouts.len(), 1, queries.len(), keys), device)?;
        Ok(Some(mask.to_dtype(dtype)?))
    };
    Ok(Masks {
        full: build(None)?,
        sliding: match window {
            Some(w) => build(Some(w))?,
            None => None,
        },
    })
}

pub(super) fn token_tensor(rows: &[Vec<u32>], device: &Device) -> CResult<Tensor> {
    let width = rows.first().map_or(0, Vec::len);
    let flat: Vec<u32> = rows.iter().flatten().copied().collect();
    Tensor::from_vec(flat, (rows.len(), width), device)
}

/// One sequence being generated: its sampler, budget, the tokens so far and the logit gaps.
struct Sequence {
    sampler: Sampler,
    budget: usize,
    ids: Vec<u32>,
    gaps: Vec<f32>,
    top: Vec<Vec<(u32, f32)>>,
}

/// What one decoding step did to a sequence.
enum Advance {
    /// Not finished: feed this token next.
    Continue(u32),
    /// Finished (end of sequence, stop string or token budget).
    Done(Generated),
}

impl Sequence {
    fn new(settings: &Settings, budget: usize) -> Self {
        Sequence {
            sampler: Sampler::new(settings),
            budget,
            ids: Vec::new(),
            gaps: Vec::new(),
            top: Vec::new(),
        }
    }

    /// Samples the next token from `logits`; a finished sequence hands back its output.
    fn step(
        &mut self,
        logits: &[f32],
        settings: &Settings,
        stats: &mut LocalStats,
        stop_check: &dyn Fn(&[u32]) -> bool,
        started: Instant,
    ) -> Advance {
        let token = self.sampler.next(logits);
        self.gaps.push(top_two_gap(logits));
        if settings.top_logprobs > 0 {
            self.top.push(top_logprobs(logits, settings.top_logprobs));
        }
        let finish = if settings.eos.contains(&token) {
            Some(Finish::Stop)
        } else {
            self.ids.push(token);
            stats.tokens_generated += 1;
            if stop_check(&self.ids) {
                Some(Finish::Stop)
            } else if self.ids.len() >= self.budget {
                Some(Finish::Length)
            } else {
                None
            }
        };
        match finish {
            Some(finish) => Advance::Done(Generated {
                prompt_tokens: 0,
                ids: std::mem::take(&mut self.ids),
                finish,
                elapsed_ms: started.elapsed().as_millis() as u64,
                logit_gaps: std::mem::take(&mut self.gaps),
                top_logprobs: std::mem::take(&mut self.top),
            }),
            None => Advance::Continue(token),
        }
    }
}

/// Generates for every prompt (token ids) with a decoder-only model.
pub fn generate_decoder(
    model: &DecoderModel,
    prompts: &[Vec<u32>],
    settings: &Settings,
    kept: &mut Option<PrefixCache>,
    stats: &mut LocalStats,
    stop_check: &dyn Fn(&[u32]) -> bool,
) -> Result<Vec<Generated>, LocalError> {
    let context = || "generating with the local model".to_string();
    let mut results: Vec<Option<Generated>> = vec![None; prompts.len()];
    if prompts.is_empty() {
        return Ok(Vec::new());
    }
    // A prompt is kept for the next micro-batch only where a copied token equals a computed
    // one (on AVX2, a quantized model's prefill takes another path for a pass of few rows,
    // and a prompt copying another pass's tokens would answer otherwise than alone); within
    // a micro-batch sharing is kept on every path (checked against prompts run alone).
    if !settings.prefix_reuse || !model.prefill_rows_independent() {
        *kept = None;
    }
    // Sorted by their tokens, each prompt shares the most with the one before it (see
    // `shared_prefill`); the prefill computes no padding, so lengths may mix.
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by(|&a, &b| prompts[a].cmp(&prompts[b]).then(a.cmp(&b)));
    for group in order.chunks(settings.max_batch.max(1)) {
        let started = Instant::now();
        let members: Vec<&[u32]> = group.iter().map(|&i| prompts[i].as_slice()).collect();
        let budgets: Vec<usize> = group.iter().map(|&i| settings.max_new_tokens[i]).collect();
        let generated = decode_group(
            model, &members, &budgets, settings, kept, stats, stop_check, started,
        )
        .context(context)?;
        for (&i, mut result) in group.iter().zip(generated) {
            result.prompt_tokens = prompts[i].len();
            results[i] = Some(result);
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every prompt generated"))
        .collect())
}

#[allow(clippy::too_many_arguments)]
fn decode_group(
    model: &DecoderModel,
    prompts: &[&[u32]],
    budgets: &[usize],
    settings: &Settings,
    kept: &mut Option<PrefixCache>,
    stats: &mut LocalStats,
    stop_check: &dyn Fn(&[u32]) -> bool,
    started: Instant,
) -> CResult<Vec<Generated>> {
    let batch = prompts.len();
    let width = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
    // Room for the first generated tokens; the cache grows if the answers run longer
    // (most stop well before their budget, and the budget × batch × layers is the bulk
    // of the memory otherwise).
    let most = budgets.iter().copied().max().unwrap_or(0);
    let mut cache = model.new_cache(batch, width + most.min(INITIAL_GENERATION_ROOM))?;
    // Left padding: every prompt ends at slot `width`, where decoding starts.
    let mut layouts: Vec<Layout> = prompts
        .iter()
        .map(|p| Layout {
            prefix: 0,
            pad: width - p.len(),
        })
        .collect();
    let encoding = Instant::now();
    let (mut logits, inherited) = shared_prefill::prefill(
        model,
        prompts,
        kept.as_ref(),
        settings.prefix_reuse,
        &mut cache,
    )?;
    let reused = inherited.iter().sum::<usize>() as u64;
    stats.prompt_tokens_reused += reused;
    stats.prompt_tokens_processed += prompts.iter().map(|p| p.len() as u64).sum::<u64>() - reused;
    if settings.prefix_reuse && model.prefill_rows_independent() {
        // The last prompt is the one the next micro-batch (sorted after it) shares most with.
        let last = batch - 1;
        *kept = Some(PrefixCache::of_row(
            &cache,
            last,
            layouts[last].pad,
            prompts[last],
        )?);
    }
    stats.prefill_nanos += encoding.elapsed().as_nanos() as u64;
    let decoding = Instant::now();

    let mut outputs: Vec<Option<Generated>> = vec![None; batch];
    let mut sequences: Vec<Sequence> = budgets
        .iter()
        .map(|&budget| Sequence::new(settings, budget))
        .collect();
    // Per row of the cache, the sequence it holds; `None` once that one finished. A
    // finished row stays (fed a dummy token, attending to itself only) until dropping it
    // pays ([`worth_compacting`]): copying the whole cache at every finish was 7 % of the
    // demo.
    let mut members: Vec<Option<usize>> = (0..batch).map(Some).collect();
    let mut slot = width;
    loop {
        let rows = logits.to_vec2::<f32>()?;
        let mut next_tokens = Vec::with_capacity(members.len());
        for (row, member) in members.iter_mut().enumerate() {
            let token = match *member {
                Some(seq) => {
                    match sequences[seq].step(&rows[row], settings, stats, stop_check, started) {
                        Advance::Done(output) => {
                            outputs[seq] = Some(output);
                            *member = None;
                            layouts[row] = Layout::RETIRED;
                            0
                        }
                        Advance::Continue(token) => token,
                    }
                }
                None => 0,
            };
            next_tokens.push(vec![token]);
        }
        let live: Vec<u32> = (0..members.len() as u32)
            .filter(|&row| members[row as usize].is_some())
            .collect();
        if live.is_empty() {
            break;
        }
        let remaining = live
            .iter()
            .filter_map(|&row| members[row as usize])
            .map(|seq| {
                sequences[seq]
                    .budget
                    .saturating_sub(sequences[seq].ids.len())
            })
            .max()
            .unwrap_or(0);
        if worth_compacting(live.len(), members.len(), remaining) {
            let rows = Tensor::new(live.as_slice(), model.device())?;
            // Layer by layer: one layer's rows are held twice at a time, not the whole
            // cache (the demo's peak held a long batch's cache and its compacted copy).
            for layer in &mut cache {
                *layer = layer.select(&rows)?;
            }
            members = live.iter().map(|&r| members[r as usize]).collect();
            layouts = live.iter().map(|&r| layouts[r as usize]).collect();
            next_tokens = live
                .iter()
                .map(|&r| std::mem::take(&mut next_tokens[r as usize]))
                .collect();
        }
        let positions: Vec<Vec<u32>> = layouts.iter().map(|l| vec![l.position(slot)]).collect();
        let masks = build_masks(
            &layouts,
            slot..slot + 1,
            slot + 1,
            model.sliding_window(),
            model.device(),
            model.dtype(),
        )?;
        let tokens = token_tensor(&next_tokens, model.device())?;
        logits = model
            .forward(
                &Step {
                    tokens: &tokens,
                    positions: &positions,
                    masks: &masks,
                    offset: slot,
                    want_logits: true,
                },
                &mut cache,
            )?
            .expect("decode logits");
        slot += 1;
    }
    stats.decode_nanos += decoding.elapsed().as_nanos() as u64;
    Ok(outputs
        .into_iter()
        .map(|o| o.expect("every sequence finished"))
        .collect())
}

/// Whether a batch of `rows` cache rows, `live` of them still generating for at most
/// `remaining` more steps, should drop its finished rows now. A finished row costs a whole
/// row of every later step's products; dropping copies each live row's cache once, which
/// costs about one step of that row (SmolLM2-135M: ~19 MB of keys and values at 400 slots
/// against ~2 ms of products). So: when at most half the rows are live, or when the
/// finished rows' steps still to come outnumber the live rows. On the demo the rows its
/// steps computed went 2,877 → 2,602 (its batch of four 256-token answers had carried two
/// finished rows for 110 steps), with the same 318 answers.
fn worth_compacting(live: usize, rows: usize, remaining: usize) -> bool {
    let finished = rows - live;
    finished > 0 && (live * 2 <= rows || finished * remaining > live)
}

/// Generates for every prompt with T5: the encoder runs once per micro-batch
/// (right-padded), the decoder starts from `decoder_start_token_id`.
pub fn generate_t5(
    model: &T5Model,
    prompts: &[Vec<u32>],
    settings: &Settings,
    stats: &mut LocalStats,
    stop_check: &dyn Fn(&[u32]) -> bool,
) -> Result<Vec<Generated>, LocalError> {
    let context = || "generating with the local T5 model".to_string();
    let mut results: Vec<Option<Generated>> = vec![None; prompts.len()];
    let mut order: Vec<usize> = (0..prompts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(prompts[i].len()));
    for group in order.chunks(settings.max_batch.max(1)) {
        let started = Instant::now();
        let inputs: Vec<&[u32]> = group.iter().map(|&i| prompts[i].as_slice()).collect();
        let budgets: Vec<usize> = group.iter().map(|&i| settings.max_new_tokens[i]).collect();
        let generated = t5_group(
            model, &inputs, &budgets, settings, stats, stop_check, started,
        )
        .context(context)?;
        for (&i, mut result) in group.iter().zip(generated) {
            result.prompt_tokens = prompts[i].len();
            results[i] = Some(result);
        }
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every prompt generated"))
        .collect())
}

fn t5_group(
    model: &T5Model,
    inputs: &[&[u32]],
    budgets: &[usize],
    settings: &Settings,
    stats: &mut LocalStats,
    stop_check: &dyn Fn(&[u32]) -> bool,
    started: Instant,
) -> CResult<Vec<Generated>> {
    let batch = inputs.len();
    let width = inputs.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
    let pad = model.config.pad();
    let rows: Vec<Vec<u32>> = inputs
        .iter()
        .map(|s| {
            s.iter()
                .copied()
                .chain(std::iter::repeat_n(pad, width - s.len()))
                .collect()
        })
        .collect();
    let lengths: Vec<usize> = inputs.iter().map(|s| s.len()).collect();
    stats.prompt_tokens_processed += lengths.iter().sum::<usize>() as u64;
    let mut encoded = model.encode(&token_tensor(&rows, model.device())?, &lengths)?;
    let most = budgets.iter().copied().max().unwrap_or(0);
    let mut cache = model.new_cache(batch, most + 1)?;
    let mut sequences: Vec<Sequence> = budgets
        .iter()
        .map(|&budget| Sequence::new(settings, budget))
        .collect();
    let mut outputs: Vec<Option<Generated>> = vec![None; batch];
    let mut active: Vec<usize> = (0..batch).collect();
    let mut next: Vec<Vec<u32>> = vec![vec![model.config.decoder_start()]; batch];
    for step in 0..=most {
        let tokens = token_tensor(&next, model.device())?;
        let logits = model
            .decode_step(&tokens, step, &encoded, &mut cache)?
            .to_vec2::<f32>()?;
        let mut keep = Vec::new();
        next.clear();
        for (row, &seq) in active.iter().enumerate() {
            match sequences[seq].step(&logits[row], settings, stats, stop_check, started) {
                Advance::Done(output) => outputs[seq] = Some(output),
                Advance::Continue(token) => {
                    keep.push(row as u32);
                    next.push(vec![token]);
                }
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            let rows = Tensor::new(keep.as_slice(), model.device())?;
            cache = cache
                .iter()
                .map(|l| l.select(&rows))
                .collect::<CResult<Vec<_>>>()?;
            encoded = model.select_encoded(&encoded, &rows)?;
            active = keep.iter().map(|&r| active[r as usize]).collect();
        }
    }
    Ok(outputs
        .into_iter()
        .map(|o| o.expect("every sequence finished"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_rows_are_dropped_when_their_steps_outweigh_the_copy() {
        // Nothing finished: nothing to drop.
        assert!(!worth_compacting(8, 8, 250));
        // Half the rows finished: dropped whatever the steps left.
        assert!(worth_compacting(4, 8, 1));
        // One finished row of eight with 250 steps to go: dropped; with 3 to go: kept.
        assert!(worth_compacting(7, 8, 250));
        assert!(!worth_compacting(7, 8, 3));
        // Two finished rows, two steps left, six rows to copy: kept.
        assert!(!worth_compacting(6, 8, 2));
        assert!(worth_compacting(6, 8, 4));
    }

    #[test]
    fn padding_and_prefix_layout() {
        let layout = Layout { prefix: 3, pad: 2 };
        let valid: Vec<bool> = (0..7).map(|s| layout.valid(s)).collect();
        assert_eq!(valid, vec![true, true, true, false, false, true, true]);
        assert_eq!(layout.position(5), 3);
        assert_eq!(layout.position(6), 4);
    }

    #[test]
    fn padded_queries_never_produce_empty_rows() {
        let layouts = [Layout { prefix: 0, pad: 2 }, Layout { prefix: 0, pad: 0 }];
        let masks = build_masks(&layouts, 0..3, 3, None, &Device::Cpu, DType::F32).unwrap();
        let mask = masks
            .full
            .unwrap()
            .flatten_to(2)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(mask.len(), 6);
        for row in &mask {
            assert!(
                row.iter().any(|v| v.is_finite()),
                "a softmax row is fully masked: {row:?}"
            );
        }
        // The first sequence's real token sees only itself, never the padding.
        assert_eq!(mask[2], vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0]);
    }

    #[test]
    fn seeded_sampling_repeats_and_greedy_takes_first_max() {
        let settings = Settings {
            max_new_tokens: vec![1],
            temperature: 0.8,
            top_p: Some(0.9),
            seed: 7,
            eos: vec![],
            max_batch: 1,
            prefix_reuse: true,
            top_logprobs: 0,
        };
        let logits = [0.1f32, 2.0, 1.9, -1.0, 0.5];
        let draws = |settings: &Settings| {
            let mut sampler = Sampler::new(settings);
            (0..20).map(|_| sampler.next(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draws(&settings), draws(&settings));
        assert!(draws(&settings).iter().all(|&t| t == 1 || t == 2 || t == 4));
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
    }

    /// Log-probabilities under the full softmax, best first; ties keep the lower id first.
    #[test]
    fn top_logprobs_are_the_log_softmax_of_the_best_tokens() {
        // log-softmax of [1, 3, 3, 0] by hand: log Σ exp = 3 + ln(2 + e^-2 + e^-3).
        let normalizer = 3.0 + (2.0 + (-2.0f64).exp() + (-3.0f64).exp()).ln();
        let top = top_logprobs(&[1.0, 3.0, 3.0, 0.0], 3);
        let ids: Vec<u32> = top.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, vec![1, 2, 0]);
        for (&(_, got), logit) in top.iter().zip([3.0, 3.0, 1.0]) {
            assert!(
                (f64::from(got) - (logit - normalizer)).abs() < 1e-6,
                "{top:?}"
            );
        }
        assert!(top_logprobs(&[1.0, 2.0], 0).is_empty());
        assert_eq!(top_logprobs(&[1.0, 2.0], 5).len(), 2);
    }
}
