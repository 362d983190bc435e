//! Per-model request limits: a concurrency cap and optional requests- and tokens-per-minute pacing.
//!
//! One `Limits` is shared by every task that talks to one model (the `Client` owns it).
//! Pacing uses a reservation clock (GCRA) rather than a refilling bucket: each acquisition
//! books the next free slot under a short lock and sleeps outside it, so waiters are served
//! in arrival order, the first request goes at once and later ones follow at a steady rate
//! (no burst that would trip the provider's own limiter), and a request larger than a
//! minute's token budget still goes through (it just books a longer slot).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::Request;

/// Held while one attempt is in flight; dropping it frees the concurrency slot.
#[derive(Debug)]
pub struct LimitPermit {
    _slot: OwnedSemaphorePermit,
}

#[derive(Debug)]
pub struct Limits {
    concurrency: usize,
    slots: Arc<Semaphore>,
    requests: Option<Pacer>,
    tokens: Option<Pacer>,
    /// Set after a 429 with `Retry-After`: nobody sends to this model before then.
    paused_until: Mutex<Option<Instant>>,
}

impl Limits {
    /// `concurrency` 0 is treated as 1. Per-minute limits of 0 mean "no limit".
    pub fn new(
        concurrency: usize,
        requests_per_minute: Option<u32>,
        tokens_per_minute: Option<u32>,
    ) -> Self {
        let concurrency = concurrency.max(1);
        Self {
            concurrency,
            slots: Arc::new(Semaphore::new(concurrency)),
            requests: requests_per_minute
                .filter(|&r| r > 0)
                .map(Pacer::per_minute),
            tokens: tokens_per_minute.filter(|&t| t > 0).map(Pacer::per_minute),
            paused_until: Mutex::new(None),
        }
    }

    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// Slots not taken right now.
    pub fn available(&self) -> usize {
        self.slots.available_permits()
    }

    /// Waits for a concurrency slot, then for any pause, then for the request and token
    /// pacers. The slot is taken first so that only requests ready to go book pacing time.
    pub async fn acquire(&self, estimated_tokens: u32) -> LimitPermit {
        // `Limits` owns the semaphore and never closes it.
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the concurrency semaphore is never closed");
        loop {
            let pause = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
            match pause {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => break,
            }
        }
        let mut ready_at = Instant::now();
        if let Some(requests) = &self.requests {
            ready_at = ready_at.max(requests.reserve(1));
        }
        if let Some(tokens) = &self.tokens {
            ready_at = ready_at.max(tokens.reserve(estimated_tokens.max(1)));
        }
        tokio::time::sleep_until(ready_at).await;
        LimitPermit { _slot: slot }
    }

    /// Holds every later `acquire` of this model until `until` (a provider asked us to back off).
    pub fn pause_until(&self, until: Instant) {
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if paused.is_none_or(|current| current < until) {
            *paused = Some(until);
        }
    }

    /// What a request will cost against a tokens-per-minute limit before we know: prompt
    /// characters / 4 (the usual English estimate) plus the whole output budget.
    pub fn estimate_tokens(request: &Request) -> u32 {
        let prompt = u32::try_from(request.prompt.chars().count() / 4).unwrap_or(u32::MAX);
        prompt.saturating_add(request.params.max_tokens)
    }
}

/// Generic cell rate algorithm: `next_free` is when the next unit may be sent.
#[derive(Debug)]
struct Pacer {
    per_unit: Duration,
    next_free: Mutex<Option<Instant>>,
}

impl Pacer {
    fn per_minute(units: u32) -> Self {
        Self {
            per_unit: Duration::from_secs(60) / units,
            next_free: Mutex::new(None),
        }
    }

    /// Books `units` and returns when the caller may send.
    fn reserve(&self, units: u32) -> Instant {
        let now = Instant::now();
        let mut next_free = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let start = next_free.map_or(now, |t| t.max(now));
        *next_free = Some(start + self.per_unit * units);
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_per_minute_paces_after_the_first() {
        let limits = Limits::new(8, Some(120), None);
        let start = Instant::now();
        let mut sent = Vec::new();
        for _ in 0..5 {
            let _permit = limits.acquire(10).await;
            sent.push(start.elapsed());
        }
        assert_eq!(sent[0], Duration::ZERO);
        assert_eq!(sent[4], Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_per_minute_books_by_size() {
        let limits = Limits::new(8, None, Some(6000));
        let start = Instant::now();
        drop(limits.acquire(1000).await); // 10 s of budget
        drop(limits.acquire(100).await);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrency_caps_permits_and_pause_holds_everyone() {
        let limits = Limits::new(2, None, None);
        let a = limits.acquire(1).await;
        let _b = limits.acquire(1).await;
        assert_eq!(limits.available(), 0);
        drop(a);
        assert_eq!(limits.available(), 1);
        let start = Instant::now();
        limits.pause_until(start + Duration::from_secs(3));
        limits.pause_until(start + Duration::from_secs(1)); // an earlier pause never shortens
        let _c = limits.acquire(1).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }
}
