//! The executor: sends the requests the cache lacks, remote and local at once, with
//! per-model limits and retries, commits each response as it arrives, and stops cleanly on
//! Ctrl-C.
//!
//! Threads: the tokio runtime sends remote requests; local models generate one after
//! another on one blocking thread of that runtime (each already uses every core for its
//! matrix products, and one loaded model at a time bounds memory), so a spec's local and
//! remote models run side by side.
//!
//! Architecture Invariant: one writer thread owns the [`Store`] while the executor runs.
//! Network tasks and the local-inference thread never touch SQLite: they send each
//! response or failure over one channel to the writer, which commits it (one short
//! transaction each). So a run has a single SQLite writer, whatever mix of models it has.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinSet;

use super::local_exec::{LocalWork, run_local_models};
use super::outcome::{Outcome, OutcomeSender};
use crate::llm::client::Client;
use crate::llm::error::ErrorClass;
use crate::request::Request;
use crate::store::{RunId, Store};

/// What happened to the requests of one model.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ModelProgress {
    pub to_send: u64,
    pub sent: u64,
    pub failed: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Failure kinds and counts, for the summary.
    pub failures: BTreeMap<String, u64>,
    /// Set when the model stopped early (bad key, unknown model, local weights that do not
    /// load, a local inference error): the rest were not sent.
    pub stopped: Option<String>,
}

/// The result of sending.
#[derive(Debug, Default)]
pub struct SendOutcome {
    pub per_model: BTreeMap<String, ModelProgress>,
    pub interrupted: bool,
    pub wall: Duration,
    /// An error of the executor itself (writing the cache failed, the local-inference
    /// thread died): it stopped sending; what was stored before it stays stored.
    pub error: Option<String>,
}

/// Work for one remote model: its client and the requests to send.
pub struct ModelWork {
    pub id: String,
    pub client: Client,
    pub requests: Vec<Request>,
    /// Requests of this model answered from the cache (shown in its progress bar).
    pub cached: u64,
    /// US dollars per million (prompt, completion) tokens, when the spec gives both: the
    /// progress lines show the cost so far.
    pub price_per_mtok: Option<(f64, f64)>,
}

/// How a run shows its progress on stderr.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressMode {
    /// Nothing (`--json`).
    Off,
    /// Redrawn bars, one per model: for a terminal.
    Bars,
    /// One plain line per model every `every` (and once at the end): for a log file, where
    /// redrawn bars would print nothing useful until the run ends.
    Lines { every: Duration },
}

/// Everything one run sends: remote models (over the network) and local models (candle).
#[derive(Default)]
pub struct Work {
    pub remote: Vec<ModelWork>,
    pub local: Vec<LocalWork>,
}

impl Work {
    pub fn is_empty(&self) -> bool {
        self.remote.is_empty() && self.local.is_empty()
    }

    /// Requests to send, over every model.
    pub fn requests(&self) -> u64 {
        let remote: usize = self.remote.iter().map(|w| w.requests.len()).sum();
        let local: usize = self.local.iter().map(|w| w.requests.len()).sum();
        (remote + local) as u64
    }
}

/// Sends every request of `work`, remote and local at the same time, storing responses and
/// failures through `store` as they arrive. Returns the store (it moved to the writer
/// thread) and what happened; an error of the writer is in [`SendOutcome::error`], with the
/// store returned. `Err` only when the executor could not start or its writer died (the
/// store is then gone: reopen the cache to record the run's end).
pub fn send_all(
    store: Store,
    run: RunId,
    work: Work,
    progress_mode: &ProgressMode,
) -> anyhow::Result<(Store, SendOutcome)> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let Work { remote, local } = work;
    let model_ids: Vec<String> = remote
        .iter()
        .map(|w| w.id.clone())
        .chain(local.iter().map(|w| w.spec.id.clone()))
        .collect();
    let totals: Vec<u64> = remote
        .iter()
        .map(|w| w.requests.len() as u64)
        .chain(local.iter().map(|w| w.requests.len() as u64))
        .collect();
    let cached: Vec<u64> = remote
        .iter()
        .map(|w| w.cached)
        .chain(local.iter().map(|w| w.cached))
        .collect();
    let prices: Vec<Option<(f64, f64)>> = remote
        .iter()
        .map(|w| w.price_per_mtok)
        .chain(local.iter().map(|_| None))
        .collect();
    let first_local = remote.len();

    let progress = Progress::new(
        &model_ids,
        &totals,
        &cached,
        first_local,
        *progress_mode == ProgressMode::Bars,
    );
    let lines = match progress_mode {
        ProgressMode::Lines { every } => Some(ProgressLines::start(
            progress.clone(),
            totals.clone(),
            prices,
            *every,
        )?),
        _ => None,
    };
    // Set on Ctrl-C and when the cache cannot be written: nothing new is sent after it.
    let halt = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<(Request, Outcome)>();
    let writer_progress = progress.clone();
    let writer_halt = Arc::clone(&halt);
    let writer = std::thread::Builder::new()
        .name("tabcontam-store-writer".into())
        .spawn(move || {
            let mut store = store;
            let mut per_model: Vec<ModelProgress> = totals
                .iter()
                .map(|&to_send| ModelProgress {
                    to_send,
                    ..Default::default()
                })
                .collect();
            let mut first_error: Option<String> = None;
            let mut cache_failed = |error: crate::store::StoreError| {
                writer_halt.store(true, Ordering::SeqCst);
                first_error.get_or_insert_with(|| {
                    format!(
                        "writing to the cache failed ({error}); responses received before the error are stored"
                    )
                });
            };
            for (request, outcome) in rx {
                match outcome {
                    Outcome::Stored { model, response } => {
                        if let Err(e) = store.put_response(&request, &response) {
                            cache_failed(e);
                            continue;
                        }
                        let p = &mut per_model[model];
                        p.sent += 1;
                        p.prompt_tokens += u64::from(response.prompt_tokens.unwrap_or(0));
                        p.completion_tokens += u64::from(response.completion_tokens.unwrap_or(0));
                        writer_progress.update(model, p);
                    }
                    Outcome::Failed {
                        model,
                        kind,
                        message,
                        attempts,
                        class,
                    } => {
                        let model_id = &writer_progress.ids[model];
                        if let Err(e) =
                            store.record_failure(run, &request, model_id, &kind, &message, attempts)
                        {
                            cache_failed(e);
                        }
                        let p = &mut per_model[model];
                        p.failed += 1;
                        *p.failures.entry(kind).or_default() += 1;
                        if class == ErrorClass::FailsModel && p.stopped.is_none() {
                            p.stopped = Some(message);
                        }
                        writer_progress.update(model, p);
                    }
                }
            }
            (store, per_model, first_error)
        })?;

    let local_thread_error = runtime.block_on(async {
        let mut tasks = JoinSet::new();
        for (model_index, model) in remote.into_iter().enumerate() {
            let tx = tx.clone();
            let halt = Arc::clone(&halt);
            tasks.spawn(send_model(model_index, model, tx, halt));
        }
        let mut local_thread = (!local.is_empty()).then(|| {
            let tx = tx.clone();
            let halt = Arc::clone(&halt);
            let bars = progress.bars[first_local..].to_vec();
            tokio::task::spawn_blocking(move || {
                run_local_models(first_local, local, &tx, &halt, &bars)
            })
        });
        drop(tx);
        let mut local_thread_error = None;
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        let mut remote_done = false;
        loop {
            tokio::select! {
                next = tasks.join_next(), if !remote_done => {
                    remote_done = next.is_none();
                }
                joined = async { local_thread.as_mut().expect("guarded").await },
                    if local_thread.is_some() =>
                {
                    local_thread = None;
                    if let Err(e) = joined {
                        local_thread_error = Some(format!("the local-inference thread died: {e}"));
                    }
                }
                _ = &mut ctrl_c => {
                    interrupted.store(true, Ordering::SeqCst);
                    halt.store(true, Ordering::SeqCst);
                    // In-flight requests are abandoned: they were not stored, so a rerun
                    // sends them. A local batch in progress finishes and is stored.
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    if let Some(thread) = local_thread.take()
                        && let Err(e) = thread.await
                    {
                        local_thread_error = Some(format!("the local-inference thread died: {e}"));
                    }
                    break;
                }
            }
            if remote_done && local_thread.is_none() {
                break;
            }
        }
        local_thread_error
    });
    // Dropping the runtime drops every sender; the writer then drains and ends.
    drop(runtime);
    let (store, per_model, first_error) = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the cache writer thread panicked"))?;
    progress.finish();
    if let Some(lines) = lines {
        lines.stop();
    }
    let outcome = SendOutcome {
        per_model: progress.ids.iter().cloned().zip(per_model).collect(),
        interrupted: interrupted.load(Ordering::SeqCst),
        wall: started.elapsed(),
        error: first_error.or(local_thread_error),
    };
    Ok((store, outcome))
}

/// Sends one model's requests. The client enforces concurrency and rate limits; this loop
/// only keeps a bounded number of tasks alive so memory stays flat on huge plans.
async fn send_model(
    model_index: usize,
    model: ModelWork,
    tx: OutcomeSender,
    halt: Arc<AtomicBool>,
) {
    let window = model.client.config().concurrency.max(1) * 2;
    let stop = Arc::new(AtomicBool::new(false));
    let mut in_flight = JoinSet::new();
    for request in model.requests {
        if halt.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
            break;
        }
        while in_flight.len() >= window {
            in_flight.join_next().await;
        }
        let client = model.client.clone();
        let tx = tx.clone();
        let stop = Arc::clone(&stop);
        in_flight.spawn(async move {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let outcome = match client.complete(&request).await {
                Ok(response) => Outcome::Stored {
                    model: model_index,
                    response,
                },
                Err(error) => {
                    let class = error.class();
                    if class == ErrorClass::FailsModel {
                        // A bad key or unknown model fails every request alike: stop sending.
                        stop.store(true, Ordering::SeqCst);
                    }
                    Outcome::Failed {
                        model: model_index,
                        kind: error_kind(&error),
                        message: error.to_string(),
                        attempts: error.attempts().unwrap_or(1),
                        class,
                    }
                }
            };
            let _ = tx.send((request, outcome));
        });
    }
    while in_flight.join_next().await.is_some() {}
}

fn error_kind(error: &crate::llm::error::LlmError) -> String {
    match error.status() {
        Some(status) => format!("http-{status}"),
        None => {
            let text = format!("{error:?}");
            text.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap_or("error")
                .to_lowercase()
        }
    }
}

/// Progress bars, one per model (hidden when stderr is not a terminal or when quiet), in
/// one block so that remote and local bars running at once do not overwrite each other.
#[derive(Clone)]
struct Progress {
    ids: Vec<String>,
    cached: Vec<u64>,
    bars: Vec<ProgressBar>,
    /// Models from this index on are local: their thread writes their bar's message
    /// (load time, tokens per second); the writer only moves the bar.
    first_local: usize,
    /// Each model's latest counts, for the periodic lines.
    latest: Arc<Mutex<Vec<ModelProgress>>>,
    _multi: Option<MultiProgress>,
}

impl Progress {
    fn new(ids: &[String], totals: &[u64], cached: &[u64], first_local: usize, show: bool) -> Self {
        let multi =
            show.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5)));
        let width = ids.iter().map(String::len).max().unwrap_or(5);
        let style = ProgressStyle::with_template(&format!(
            "{{prefix:>{width}}} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ETA {{eta}}"
        ))
        .expect("valid template")
        .progress_chars("=> ");
        let bars = ids
            .iter()
            .zip(totals)
            .map(|(id, &total)| {
                let bar = match &multi {
                    Some(m) => m.add(ProgressBar::new(total)),
                    None => ProgressBar::hidden(),
                };
                bar.set_style(style.clone());
                bar.set_prefix(id.clone());
                bar
            })
            .collect();
        let this = Self {
            ids: ids.to_vec(),
            cached: cached.to_vec(),
            bars,
            first_local,
            latest: Arc::new(Mutex::new(vec![ModelProgress::default(); ids.len()])),
            _multi: multi,
        };
        for (model, _) in ids.iter().enumerate() {
            this.update(model, &ModelProgress::default());
        }
        this
    }

    fn update(&self, model: usize, p: &ModelProgress) {
        if let Ok(mut latest) = self.latest.lock() {
            latest[model].clone_from(p);
        }
        let bar = &self.bars[model];
        bar.set_position(p.sent + p.failed);
        if model >= self.first_local {
            return;
        }
        bar.set_message(format!(
            "sent {} cached {} failed {} tokens {}",
            p.sent,
            self.cached.get(model).copied().unwrap_or(0),
            p.failed,
            p.prompt_tokens + p.completion_tokens
        ));
    }

    fn finish(&self) {
        for bar in &self.bars {
            bar.finish();
        }
    }
}

/// The periodic progress lines: a thread that prints one line per model every interval
/// until the executor stops it, then a last line per model.
struct ProgressLines {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ProgressLines {
    fn start(
        progress: Progress,
        totals: Vec<u64>,
        prices: Vec<Option<(f64, f64)>>,
        every: Duration,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("tabcontam-progress".into())
            .spawn(move || {
                let print = || {
                    let latest = match progress.latest.lock() {
                        Ok(latest) => latest.clone(),
                        Err(_) => return,
                    };
                    let elapsed = started.elapsed();
                    let mut err = std::io::stderr().lock();
                    for (model, p) in latest.iter().enumerate() {
                        let line = progress_line(
                            &progress.ids[model],
                            p,
                            totals[model],
                            progress.cached[model],
                            prices[model],
                            elapsed,
                        );
                        // A closed stderr must not stop the run.
                        let _ = writeln!(err, "{line}");
                    }
                };
                // Until the executor says stop (or goes away).
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    print();
                }
                print();
            })?;
        Ok(Self { stop, thread })
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// One model's progress as one log line, e.g. `progress 1m05s gpt: 120/424 (28.3%),
/// 1.8/s, ETA 2m49s, 12 failed, 30 cached, tokens 45210, cost $0.0312`.
fn progress_line(
    id: &str,
    p: &ModelProgress,
    total: u64,
    cached: u64,
    price_per_mtok: Option<(f64, f64)>,
    elapsed: Duration,
) -> String {
    let done = p.sent + p.failed;
    let seconds = elapsed.as_secs_f64().max(1e-3);
    let rate = done as f64 / seconds;
    let percent = if total == 0 {
        100.0
    } else {
        100.0 * done as f64 / total as f64
    };
    let eta = if done >= total {
        "done".to_string()
    } else if rate > 0.0 {
        format!(
            "ETA {}",
            human_duration(Duration::from_secs_f64((total - done) as f64 / rate))
        )
    } else {
        "ETA ?".to_string()
    };
    let mut line = format!(
        "progress {} {id}: {done}/{total} ({percent:.1}%), {rate:.1}/s, {eta}",
        human_duration(elapsed)
    );
    if p.failed > 0 {
        line.push_str(&format!(", {} failed", p.failed));
    }
    if cached > 0 {
        line.push_str(&format!(", {cached} cached"));
    }
    line.push_str(&format!(
        ", tokens {} in + {} out",
        p.prompt_tokens, p.completion_tokens
    ));
    if let Some((input, output)) = price_per_mtok {
        let cost = (p.prompt_tokens as f64 * input + p.completion_tokens as f64 * output) / 1e6;
        line.push_str(&format!(", cost ${cost:.4}"));
    }
    line
}

/// `45s`, `3m07s`, `2h05m`.
fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 {
        format!("{seconds}s")
    } else if seconds < 3600 {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    } else {
        format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_has_counts_rate_eta_tokens_and_cost() {
        let p = ModelProgress {
            to_send: 400,
            sent: 95,
            failed: 5,
            prompt_tokens: 20_000,
            completion_tokens: 1_000,
            ..Default::default()
        };
        let line = progress_line(
            "gpt",
            &p,
            400,
            24,
            Some((2.5, 10.0)),
            Duration::from_secs(50),
        );
        assert_eq!(
            line,
            "progress 50s gpt: 100/400 (25.0%), 2.0/s, ETA 2m30s, 5 failed, 24 cached, \
             tokens 20000 in + 1000 out, cost $0.0600"
        );
        let done = ModelProgress {
            sent: 3,
            ..Default::default()
        };
        let line = progress_line("local", &done, 3, 0, None, Duration::from_secs(7300));
        assert_eq!(
            line,
            "progress 2h01m local: 3/3 (100.0%), 0.0/s, done, tokens 0 in + 0 out"
        );
    }
}
