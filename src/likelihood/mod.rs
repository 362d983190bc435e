//! Likelihood-based membership detectors (SPEC §8): perplexity, zlib ratio, Min-K% Prob and
//! Min-K%++ computed from per-token log-probabilities, judged on the membership test's
//! original rows against their perturbed copies with AUROC, TPR at 5 % FPR and seeded
//! bootstrap intervals.
//!
//! Architecture Invariant: pure. The log-probabilities come in as plain data
//! ([`TokenLogprobs`]); fetching them (local engine, servers) and caching them live elsewhere.

pub mod blind;
pub mod dataset_inference;
mod logistic;
pub mod roc;
pub mod row_order;
pub mod seen_rows;

use std::io::Write;

use serde::Serialize;

pub use crate::request::TokenLogprobs;
pub use blind::BlindAuroc;
pub use roc::{DetectorStats, bootstrap_stats};

/// Share of the lowest-scoring tokens averaged by Min-K% and Min-K%++ (SPEC §8: k = 20 %).
pub const MIN_K_FRACTION: f64 = 0.2;

/// The four detectors. Every score is oriented so that higher = more likely seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Detector {
    Perplexity,
    Zlib,
    MinK,
    MinKPlusPlus,
}

/// Suffix of a likelihood cell's test id when it compares rows trained on with held-out
/// rows of a checkpoint instead of original with perturbed rows.
pub const GROUND_TRUTH_SUFFIX: &str = "/trained-vs-held-out";

impl Detector {
    pub const ALL: [Detector; 4] = [
        Detector::Perplexity,
        Detector::Zlib,
        Detector::MinK,
        Detector::MinKPlusPlus,
    ];

    /// The test id a spec selects it with (family `likelihood`).
    pub fn test_id(self) -> &'static str {
        match self {
            Detector::Perplexity => "likelihood-perplexity",
            Detector::Zlib => "likelihood-zlib",
            Detector::MinK => "likelihood-min-k",
            Detector::MinKPlusPlus => "likelihood-min-k-plus-plus",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Detector::Perplexity => "Perplexity",
            Detector::Zlib => "zlib ratio",
            Detector::MinK => "Min-K% Prob",
            Detector::MinKPlusPlus => "Min-K%++",
        }
    }

    /// Accepts the test id or the short name (`perplexity`, `zlib`, `min-k`, `min-k-plus-plus`).
    pub fn parse(text: &str) -> Option<Detector> {
        let text = text.trim();
        Detector::ALL
            .into_iter()
            .find(|d| d.test_id() == text || d.test_id().strip_prefix("likelihood-") == Some(text))
    }

    /// The test id of the detector judged on ground truth: a checkpoint's rows trained on
    /// (positives) against its held-out rows (negatives), SPEC §8 / issue 11 item 6.
    pub fn ground_truth_id(self) -> String {
        format!("{}{GROUND_TRUTH_SUFFIX}", self.test_id())
    }

    /// The detector of a [`Detector::ground_truth_id`].
    pub fn parse_ground_truth(text: &str) -> Option<Detector> {
        text.strip_suffix(GROUND_TRUTH_SUFFIX)
            .and_then(Detector::parse)
    }

    /// Whether the detector needs the full next-token distribution (μ, σ per position),
    /// which only the local engine gives.
    pub fn needs_distribution(self) -> bool {
        self == Detector::MinKPlusPlus
    }

    /// The detector's score of one text, or `None` when its inputs are missing (no scored
    /// token, or no μ/σ for Min-K%++).
    pub fn score(self, text: &str, scores: &TokenLogprobs) -> Option<f64> {
        match self {
            Detector::Perplexity => neg_log_perplexity(&scores.logprobs),
            Detector::Zlib => zlib_ratio(text, &scores.logprobs).map(|ratio| -ratio),
            Detector::MinK => min_k_mean(&scores.logprobs, MIN_K_FRACTION),
            Detector::MinKPlusPlus => {
                let (mu, sigma) = (scores.mu.as_ref()?, scores.sigma.as_ref()?);
                let normalized: Vec<f64> = scores
                    .logprobs
                    .iter()
                    .zip(mu.iter().zip(sigma))
                    // A one-hot distribution has σ = 0: its token is as expected as can be.
                    // A position without moments (NaN: no possible token) is left out
                    // rather than scored 0, which would pass for an ordinary token.
                    .filter(|(_, (m, s))| m.is_finite() && s.is_finite())
                    .map(|(lp, (m, s))| if *s > 0.0 { (lp - m) / s } else { 0.0 })
                    .collect();
                min_k_mean(&normalized, MIN_K_FRACTION)
            }
        }
    }
}

/// `−log perplexity` = mean token log-probability.
pub fn neg_log_perplexity(logprobs: &[f64]) -> Option<f64> {
    (!logprobs.is_empty()).then(|| logprobs.iter().sum::<f64>() / logprobs.len() as f64)
}

/// Bytes of `text` compressed by zlib at level 6 (Python's `zlib.compress` default, as in
/// Carlini et al.'s code), header and checksum included.
pub fn zlib_length(text: &str) -> usize {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    // Writing to a Vec cannot fail.
    encoder.write_all(text.as_bytes()).expect("in-memory write");
    encoder.finish().expect("in-memory write").len()
}

/// Carlini et al.'s zlib ratio: log-perplexity divided by the zlib length of the text.
/// Lower = more likely seen.
pub fn zlib_ratio(text: &str, logprobs: &[f64]) -> Option<f64> {
    let log_perplexity = -neg_log_perplexity(logprobs)?;
    Some(log_perplexity / zlib_length(text) as f64)
}

/// Mean of the lowest `fraction` of `values`: `max(1, ⌊fraction·n⌋)` of them (the floor of
/// Shi et al.'s reference code, with at least one token so short texts still score).
pub fn min_k_mean(values: &[f64], fraction: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let count = ((values.len() as f64 * fraction).floor() as usize).max(1);
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(sorted[..count].iter().sum::<f64>() / count as f64)
}

/// `(μ, σ)` of `log p(z)` under the distribution given by `logits`: the expected
/// log-probability and its standard deviation (Min-K%++'s normalizers), plus the
/// log-probability of every token. Computed in f64 from f32 logits.
///
/// A token whose logit is −∞ (masked out by the model: impossible) has probability 0 and
/// takes no part in μ and σ; its own log-probability stays −∞. Summing it in would compute
/// 0 · −∞ = NaN and poison both moments.
pub fn distribution_moments(logits: &[f32]) -> (Vec<f64>, f64, f64) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        // No possible token (every logit −∞, or a NaN model output): no distribution.
        return (vec![f64::NEG_INFINITY; logits.len()], f64::NAN, f64::NAN);
    }
    let sum_exp: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let log_z = max + sum_exp.ln();
    let logprobs: Vec<f64> = logits.iter().map(|&l| l as f64 - log_z).collect();
    let (mut mean, mut second) = (0.0, 0.0);
    for &lp in logprobs.iter().filter(|lp| lp.is_finite()) {
        let p = lp.exp();
        mean += p * lp;
        second += p * lp * lp;
    }
    let variance = (second - mean * mean).max(0.0);
    (logprobs, mean, variance.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scores(logprobs: &[f64]) -> TokenLogprobs {
        TokenLogprobs {
            tokens: (0..=logprobs.len() as u32).collect(),
            logprobs: logprobs.to_vec(),
            mu: None,
            sigma: None,
        }
    }

    #[test]
    fn perplexity_is_the_mean_log_probability() {
        let s = scores(&[-1.0, -2.0, -3.0]);
        assert_eq!(Detector::Perplexity.score("x", &s), Some(-2.0));
        assert_eq!(Detector::Perplexity.score("x", &scores(&[])), None);
    }

    #[test]
    fn min_k_averages_the_lowest_fifth_with_floor_and_at_least_one() {
        // 10 tokens: ⌊0.2·10⌋ = 2 lowest: −9 and −7 → −8.
        let values = [-1.0, -9.0, -2.0, -3.0, -7.0, -0.5, -1.5, -2.5, -0.1, -4.0];
        assert_eq!(min_k_mean(&values, 0.2), Some(-8.0));
        // 4 tokens: ⌊0.8⌋ = 0, so the single lowest.
        assert_eq!(min_k_mean(&[-1.0, -5.0, -2.0, -3.0], 0.2), Some(-5.0));
        assert_eq!(Detector::MinK.score("x", &scores(&values)), Some(-8.0));
    }

    #[test]
    fn min_k_plus_plus_normalizes_by_mu_and_sigma() {
        let mut s = scores(&[-1.0, -3.0, -2.0, -2.0, -4.0]);
        s.mu = Some(vec![-2.0; 5]);
        s.sigma = Some(vec![1.0, 0.5, 2.0, 0.0, 1.0]);
        // (lp − μ)/σ = [1, −2, 0, 0 (σ = 0), −2]; ⌊0.2·5⌋ = 1 lowest → −2.
        assert_eq!(Detector::MinKPlusPlus.score("x", &s), Some(-2.0));
        assert_eq!(Detector::MinKPlusPlus.score("x", &scores(&[-1.0])), None);
    }

    #[test]
    fn zlib_matches_python() {
        // python3 -c "import zlib; print(len(zlib.compress(b'sepal_length is 5.1, species is Iris-setosa')))" → 48
        assert_eq!(
            zlib_length("sepal_length is 5.1, species is Iris-setosa"),
            48
        );
        assert_eq!(zlib_length(""), 8);
        // log-ppl 2 over 8 bytes.
        let s = scores(&[-2.0, -2.0]);
        assert_eq!(Detector::Zlib.score("", &s), Some(-0.25));
    }

    #[test]
    fn moments_of_a_uniform_and_a_two_point_distribution() {
        let (lps, mu, sigma) = distribution_moments(&[0.0; 4]);
        assert!((lps[0] + 4f64.ln()).abs() < 1e-12);
        assert!((mu + 4f64.ln()).abs() < 1e-12);
        assert!(sigma.abs() < 1e-6);
        // p = (0.75, 0.25): logits ln 3 and 0.
        let (_, mu, sigma) = distribution_moments(&[3f32.ln(), 0.0]);
        let (a, b) = (0.75f64.ln(), 0.25f64.ln());
        let expected_mu = 0.75 * a + 0.25 * b;
        let expected_sigma =
            (0.75 * (a - expected_mu).powi(2) + 0.25 * (b - expected_mu).powi(2)).sqrt();
        assert!((mu - expected_mu).abs() < 1e-6, "{mu} vs {expected_mu}");
        assert!((sigma - expected_sigma).abs() < 1e-6);
    }

    /// Issue 21: an impossible token (logit −∞, e.g. masked by the model) used to make μ and
    /// σ NaN (0 · −∞), and the position then scored 0. Reference (scripts/reference_stats.py,
    /// numpy over the finite logits ln 3, 0): μ = -0.5623351446188083,
    /// σ = 0.47571307544817304, and token 0's (log p − μ)/σ = 0.5773502691896258.
    #[test]
    fn min_k_plus_plus_masks_impossible_tokens() {
        let (lps, mu, sigma) = distribution_moments(&[3f32.ln(), 0.0, f32::NEG_INFINITY]);
        assert!((mu - -0.562_335_144_618_808_3).abs() < 1e-6, "{mu}");
        assert!((sigma - 0.475_713_075_448_173).abs() < 1e-6, "{sigma}");
        assert_eq!(lps[2], f64::NEG_INFINITY);
        let mut s = scores(&[lps[0]]);
        s.mu = Some(vec![mu]);
        s.sigma = Some(vec![sigma]);
        let score = Detector::MinKPlusPlus.score("x", &s).unwrap();
        assert!((score - 0.577_350_269_189_625_8).abs() < 1e-6, "{score}");
        // No possible token at all: no moments, and the position is left out, not scored 0.
        let (_, mu, sigma) = distribution_moments(&[f32::NEG_INFINITY; 3]);
        assert!(mu.is_nan() && sigma.is_nan());
        let mut s = scores(&[-1.0, -2.0]);
        s.mu = Some(vec![mu, -1.0]);
        s.sigma = Some(vec![sigma, 2.0]);
        assert_eq!(Detector::MinKPlusPlus.score("x", &s), Some(-0.5));
    }

    #[test]
    fn detector_ids_parse() {
        for d in Detector::ALL {
            assert_eq!(Detector::parse(d.test_id()), Some(d));
        }
        assert_eq!(Detector::parse("zlib"), Some(Detector::Zlib));
        assert_eq!(Detector::parse("membership"), None);
    }
}
