//! The learning rate over a series' optimizer steps: constant (the default), or a cosine
//! decay from the given rate to a tenth of it at the series' last step. At a constant rate
//! a long run can climb out of the minimum it reached (the memorization series' loss went
//! 0.045 → 0.24 over its last two epochs), so its top dose was not its most memorized
//! checkpoint; a decaying rate lets dose and memorization rise together.

/// What the cosine schedule decays to, as a fraction of the starting rate.
pub const COSINE_FLOOR: f64 = 0.1;

/// How the learning rate moves over the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LrSchedule {
    #[default]
    Constant,
    /// `lr · (f + (1 − f) · ½(1 + cos(π t / (T − 1))))` at update `t` of `T`, `f` =
    /// [`COSINE_FLOOR`]: the full rate at the first update, `f · lr` at the last.
    Cosine,
}

impl LrSchedule {
    pub fn parse(text: &str) -> Result<LrSchedule, String> {
        match text.trim() {
            "constant" => Ok(LrSchedule::Constant),
            "cosine" => Ok(LrSchedule::Cosine),
            other => Err(format!(
                "unknown learning-rate schedule `{other}`: use `constant` or `cosine`"
            )),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            LrSchedule::Constant => "constant",
            LrSchedule::Cosine => "cosine",
        }
    }

    /// The rate of update `step` (0-based) of `total`, from the starting rate `lr`.
    pub fn rate(self, lr: f64, step: usize, total: usize) -> f64 {
        match self {
            LrSchedule::Constant => lr,
            LrSchedule::Cosine if total <= 1 => lr,
            LrSchedule::Cosine => {
                let progress = step.min(total - 1) as f64 / (total - 1) as f64;
                let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                lr * (COSINE_FLOOR + (1.0 - COSINE_FLOOR) * cosine)
            }
        }
    }

    /// The schedule in words for a manifest or a card (`None` when constant).
    pub fn describe(self, epochs: usize) -> Option<String> {
        match self {
            LrSchedule::Constant => None,
            LrSchedule::Cosine => Some(format!(
                "cosine from lr to {COSINE_FLOOR} × lr over {epochs} epoch(s)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_starts_at_the_rate_and_ends_at_its_floor() {
        let lr = 1e-3;
        assert_eq!(LrSchedule::Cosine.rate(lr, 0, 101), lr);
        assert!((LrSchedule::Cosine.rate(lr, 50, 101) - lr * 0.55).abs() < 1e-15);
        assert!((LrSchedule::Cosine.rate(lr, 100, 101) - lr * COSINE_FLOOR).abs() < 1e-15);
        assert_eq!(LrSchedule::Cosine.rate(lr, 0, 1), lr);
        assert_eq!(LrSchedule::Constant.rate(lr, 70, 101), lr);
        let rates: Vec<f64> = (0..101)
            .map(|t| LrSchedule::Cosine.rate(lr, t, 101))
            .collect();
        assert!(rates.windows(2).all(|w| w[1] <= w[0]), "never rises");
        assert_eq!(LrSchedule::parse("cosine"), Ok(LrSchedule::Cosine));
        assert!(
            LrSchedule::parse("linear")
                .unwrap_err()
                .contains("`constant` or `cosine`")
        );
    }
}
