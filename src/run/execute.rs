//! The executor: sends the requests the cache lacks, with per-model limits and retries,
//! commits each response as it arrives, and stops cleanly on Ctrl-C.
//!
//! Responses flow from the network tasks to one writer thread that owns the [`Store`]
//! (the store is the only SQLite owner, and SQLite wants one writer per connection).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinSet;

use crate::llm::client::Client;
use crate::llm::error::ErrorClass;
use crate::llm::{Request, Response};
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
    /// Set when the model stopped early (bad key, unknown model): the rest were not sent.
    pub stopped: Option<String>,
}

/// The result of sending.
#[derive(Debug, Default)]
pub struct SendOutcome {
    pub per_model: BTreeMap<String, ModelProgress>,
    pub interrupted: bool,
    pub wall: Duration,
}

/// Work for one model: its client and the requests to send.
pub struct ModelWork {
    pub id: String,
    pub client: Client,
    pub requests: Vec<Request>,
}

enum Outcome {
    Stored {
        model: usize,
        response: Response,
    },
    Failed {
        model: usize,
        request: Box<Request>,
        kind: String,
        message: String,
        attempts: u32,
        class: ErrorClass,
    },
}

/// Sends every request, storing responses and failures through `store` as they arrive.
/// Returns the store (it moved to the writer thread) and what happened.
pub fn send_all(
    store: Store,
    run: RunId,
    work: Vec<ModelWork>,
    cached: &[u64],
    show_progress: bool,
) -> anyhow::Result<(Store, SendOutcome)> {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<(Request, Outcome)>();
    let model_ids: Vec<String> = work.iter().map(|w| w.id.clone()).collect();
    let totals: Vec<u64> = work.iter().map(|w| w.requests.len() as u64).collect();

    let progress = Progress::new(&model_ids, &totals, cached, show_progress);
    let writer_progress = progress.clone();
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
            let mut first_error: Option<anyhow::Error> = None;
            for (request, outcome) in rx {
                match outcome {
                    Outcome::Stored { model, response } => {
                        if let Err(e) = store.put_response(&request, &response) {
                            first_error.get_or_insert(e.into());
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
                        request: failed,
                        kind,
                        message,
                        attempts,
                        class,
                    } => {
                        let model_id = &writer_progress.ids[model];
                        if let Err(e) =
                            store.record_failure(run, &failed, model_id, &kind, &message, attempts)
                        {
                            first_error.get_or_insert(e.into());
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

    let interrupted = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut tasks = JoinSet::new();
        for (model_index, model) in work.into_iter().enumerate() {
            let tx = tx.clone();
            let interrupted = Arc::clone(&interrupted);
            tasks.spawn(send_model(model_index, model, tx, interrupted));
        }
        drop(tx);
        let ctrl_c = tokio::signal::ctrl_c();
        tokio::pin!(ctrl_c);
        loop {
            tokio::select! {
                next = tasks.join_next() => if next.is_none() { break },
                _ = &mut ctrl_c => {
                    interrupted.store(true, Ordering::SeqCst);
                    // In-flight requests are abandoned: they were not stored, so a rerun sends them.
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
    });
    // Dropping the runtime drops every sender; the writer then drains and ends.
    drop(runtime);
    let (store, per_model, first_error) = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the cache writer thread panicked"))?;
    progress.finish();
    if let Some(error) = first_error {
        return Err(error.context(
            "writing to the cache failed; responses received before the error are stored",
        ));
    }
    let outcome = SendOutcome {
        per_model: progress.ids.iter().cloned().zip(per_model).collect(),
        interrupted: interrupted.load(Ordering::SeqCst),
        wall: started.elapsed(),
    };
    Ok((store, outcome))
}

/// Sends one model's requests. The client enforces concurrency and rate limits; this loop
/// only keeps a bounded number of tasks alive so memory stays flat on huge plans.
async fn send_model(
    model_index: usize,
    model: ModelWork,
    tx: std::sync::mpsc::Sender<(Request, Outcome)>,
    interrupted: Arc<AtomicBool>,
) {
    let window = model.client.config().concurrency.max(1) * 2;
    let stop = Arc::new(AtomicBool::new(false));
    let mut in_flight = JoinSet::new();
    for request in model.requests {
        if interrupted.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
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
                        request: Box::new(request.clone()),
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

/// Progress bars, one per model (hidden when stderr is not a terminal or when quiet).
#[derive(Clone)]
struct Progress {
    ids: Vec<String>,
    cached: Vec<u64>,
    bars: Vec<ProgressBar>,
    _multi: Option<MultiProgress>,
}

impl Progress {
    fn new(ids: &[String], totals: &[u64], cached: &[u64], show: bool) -> Self {
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
            _multi: multi,
        };
        for (model, _) in ids.iter().enumerate() {
            this.update(model, &ModelProgress::default());
        }
        this
    }

    fn update(&self, model: usize, p: &ModelProgress) {
        let bar = &self.bars[model];
        bar.set_position(p.sent + p.failed);
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
