//! A micro-batch's rows trained as two streams side by side: each half of the rows its own
//! forward and backward pass on its own share of the cores, the weight gradients kept apart
//! in the sinks ([`GradSink`](super::linear::GradSink)'s slots) and added in stream order.
//!
//! Why: one pass split op by op over both cores joins the cores about a thousand times a
//! step (every product, norm and the head's chunks), and each join waits for the slower
//! core and wakes the other; between joins the main thread alone adds candle's gradients.
//! That held `contaminate`'s steps at 171–178 % of 2 cores (docs/benchmarks.md, "Where the
//! last tenth of the cores goes"). Two streams meet once per micro-batch. The sum is the
//! same whichever stream finishes first, so a run's checkpoint keeps its bytes from run to
//! run; it differs in the last bits from one pass over all the rows (each half's products
//! sum their own rows first).

use std::sync::OnceLock;

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};
use rayon::ThreadPool;

use super::linear::{STREAMS, all_threads};
use super::llama::LlamaTrainer;

/// The gradients of rows `ids` (`rows × (seq + 1)`) and `weights` (`rows × seq`) in a step
/// of `targets` predicted tokens (each row's loss weighed by its share of them, so the
/// step's gradients are those of its mean loss), and the rows' summed loss (mean times
/// their targets). The sinks are drained into the store. Two or more rows on two or more
/// cores run as two streams.
pub fn gradients(
    model: &LlamaTrainer,
    vars: &[Var],
    ids: &Tensor,
    weights: &Tensor,
    targets: f64,
) -> candle_core::Result<(GradStore, f64)> {
    if ids.dim(0)? < STREAMS || all_threads() < STREAMS {
        let (mut grads, summed) = one_stream(model, 0, ids, weights, targets)?;
        model.drain_sinks(&mut grads)?;
        return Ok((grads, summed));
    }
    two_streams(model, vars, ids, weights, targets)
}

/// [`gradients`] of the rows' two halves (the first the larger), one on each stream, on
/// however many cores.
pub(super) fn two_streams(
    model: &LlamaTrainer,
    vars: &[Var],
    ids: &Tensor,
    weights: &Tensor,
    targets: f64,
) -> candle_core::Result<(GradStore, f64)> {
    let rows = ids.dim(0)?;
    let first = rows.div_ceil(2);
    let halves = |t: &Tensor| -> candle_core::Result<(Tensor, Tensor)> {
        Ok((t.narrow(0, 0, first)?, t.narrow(0, first, rows - first)?))
    };
    let ((ids_a, ids_b), (weights_a, weights_b)) = (halves(ids)?, halves(weights)?);
    let (a, b) = side_by_side(
        || one_stream(model, 0, &ids_a, &weights_a, targets),
        || one_stream(model, 1, &ids_b, &weights_b, targets),
    );
    let ((mut grads, summed_a), (second, summed_b)) = (a?, b?);
    accumulate(&mut grads, &second, vars)?;
    model.drain_sinks(&mut grads)?;
    Ok((grads, summed_a + summed_b))
}

/// One stream's forward and backward pass: candle's gradients (the sinks hold the rest) and
/// the rows' summed loss.
fn one_stream(
    model: &LlamaTrainer,
    stream: usize,
    ids: &Tensor,
    weights: &Tensor,
    targets: f64,
) -> candle_core::Result<(GradStore, f64)> {
    let loss = model.loss_on(stream, ids, weights)?;
    let count = f64::from(
        weights
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?,
    );
    let summed = f64::from(loss.to_scalar::<f32>()?) * count;
    let grads = (loss * (count / targets))?.backward()?;
    Ok((grads, summed))
}

/// Adds each of `vars`' gradients in `grads` to its sum in `sum` (`sum + grads`).
pub fn accumulate(sum: &mut GradStore, grads: &GradStore, vars: &[Var]) -> candle_core::Result<()> {
    for var in vars {
        if let Some(g) = grads.get(var.as_tensor()) {
            let total = match sum.get(var.as_tensor()) {
                Some(s) => (s + g)?,
                None => g.clone(),
            };
            sum.insert(var.as_tensor(), total);
        }
    }
    Ok(())
}

/// The streams' thread pools, the cores shared between them (a thread each at least).
fn pools() -> &'static [ThreadPool; STREAMS] {
    static POOLS: OnceLock<[ThreadPool; STREAMS]> = OnceLock::new();
    POOLS.get_or_init(|| {
        let cores = all_threads();
        std::array::from_fn(|stream| {
            rayon::ThreadPoolBuilder::new()
                .num_threads((cores / STREAMS + usize::from(stream < cores % STREAMS)).max(1))
                .thread_name(move |i| format!("train-stream-{stream}-{i}"))
                .build()
                .expect("a thread pool for a training stream")
        })
    })
}

/// Runs `a` on stream 0's pool and `b` on stream 1's at once; a panic in either resumes on
/// the caller.
fn side_by_side<A: Send, B: Send>(
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    let pools = pools();
    std::thread::scope(|scope| {
        let second = scope.spawn(|| pools[1].install(b));
        let first = pools[0].install(a);
        match second.join() {
            Ok(second) => (first, second),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
