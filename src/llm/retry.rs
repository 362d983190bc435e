//! Retries with exponential backoff and full jitter, honouring the server's `Retry-After`.
//!
//! The jitter is derived from the request key and the retry number, not from a global RNG:
//! different requests spread out (their keys differ), and a rerun waits the same way.

use std::future::Future;
use std::time::Duration;

use super::error::LlmError;
use super::{RequestKey, Response};

/// How often and how long to wait between attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Backoff before retry `n` is drawn uniformly from `[0, min(max_delay, base_delay · 2^(n-1))]`.
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// A server's `Retry-After` is obeyed up to this long (a misconfigured proxy saying
    /// "retry in a day" should not stall a run).
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// Full-jitter exponential backoff before retry number `retry` (1 = the first retry).
    pub fn backoff(&self, key: &RequestKey, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1).min(30);
        let ceiling = self
            .base_delay
            .saturating_mul(1 << exponent)
            .min(self.max_delay);
        ceiling.mul_f64(unit_interval(key, retry))
    }

    /// The wait before retry `retry` after `error`: the server's `Retry-After` when it sent
    /// one (capped), else the backoff.
    pub fn delay(&self, error: &LlmError, key: &RequestKey, retry: u32) -> Duration {
        match error.retry_after() {
            Some(asked) => asked.min(self.max_retry_after),
            None => self.backoff(key, retry),
        }
    }

    /// Runs `attempt(n)` for n = 1, 2, … until it succeeds, fails with an error that is not
    /// retryable (returned as is), or the retries run out (`LlmError::RetriesExhausted`
    /// with the attempt count and the last error).
    pub async fn run<F, Fut>(&self, key: &RequestKey, mut attempt: F) -> Result<Response, LlmError>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<Response, LlmError>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let error = match attempt(attempts).await {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            if !error.is_retryable() {
                return Err(error);
            }
            if attempts > self.max_retries {
                return Err(LlmError::RetriesExhausted {
                    attempts,
                    last: Box::new(error),
                });
            }
            tokio::time::sleep(self.delay(&error, key, attempts)).await;
        }
    }
}

/// A uniform draw in [0, 1) from the key and the retry number (splitmix64).
fn unit_interval(key: &RequestKey, retry: u32) -> f64 {
    let mut seed_bytes = [0u8; 8];
    seed_bytes.copy_from_slice(&key.0[..8]);
    let mut x =
        u64::from_le_bytes(seed_bytes) ^ u64::from(retry).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn key(byte: u8) -> RequestKey {
        RequestKey([byte; 32])
    }

    fn transient() -> LlmError {
        LlmError::Connection {
            model: "m".into(),
            url: "http://x".into(),
            message: "reset".into(),
        }
    }

    #[test]
    fn backoff_grows_is_capped_and_deterministic() {
        let policy = RetryPolicy::default();
        for retry in 1..12 {
            let ceiling = Duration::from_millis(500)
                .saturating_mul(1 << (retry - 1))
                .min(Duration::from_secs(30));
            let delay = policy.backoff(&key(7), retry);
            assert!(delay <= ceiling, "{retry}: {delay:?} > {ceiling:?}");
            assert_eq!(delay, policy.backoff(&key(7), retry));
        }
        let spread: std::collections::BTreeSet<_> =
            (0..20).map(|b| policy.backoff(&key(b), 3)).collect();
        assert!(spread.len() > 15, "jitter should differ between requests");
    }

    #[test]
    fn retry_after_wins_but_is_capped() {
        let policy = RetryPolicy {
            max_retry_after: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let http = |after| LlmError::Http {
            model: "m".into(),
            status: 429,
            url: "u".into(),
            message: "slow down".into(),
            hint: String::new(),
            retry_after: Some(Duration::from_secs(after)),
        };
        assert_eq!(policy.delay(&http(2), &key(1), 1), Duration::from_secs(2));
        assert_eq!(policy.delay(&http(600), &key(1), 1), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_with_the_attempt_count() {
        let policy = RetryPolicy {
            max_retries: 3,
            ..RetryPolicy::default()
        };
        let calls = AtomicU32::new(0);
        let error = policy
            .run(&key(1), |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(transient())
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(error.attempts(), Some(4));
        assert!(
            error.to_string().ends_with("(gave up after 4 attempts)"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_are_not_retried() {
        let policy = RetryPolicy::default();
        let calls = AtomicU32::new(0);
        let error = policy
            .run(&key(1), |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(LlmError::Config {
                    model: "m".into(),
                    message: "bad".into(),
                })
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(error, LlmError::Config { .. }));
    }
}
