//! The trainer's linear layers `x Wᵀ` as one custom op each whose weight gradient `dyᵀ x`
//! gemm writes straight into a buffer the weight owns ([`GradSink`]), drained into the
//! step's gradients after the backward pass ([`super::llama::LlamaTrainer::backward`]).
//!
//! Through candle's own matmul a weight's gradient cost, every step and for every
//! projection: a zeroed output for each product (candle's matmul fills its destination with
//! zeros before gemm overwrites it), the gradient of `Wᵀ` stored, then transposed and
//! added to a zeroed gradient of `W` (candle's backward starts every gradient from zeros and
//! adds), and the copies of `x` and `W` around the op. At SmolLM2's size that is about
//! 1.7 GB of memory written per backward pass besides the arithmetic. Here the three
//! products of a layer write uninitialised buffers once, through the same gemm candle
//! calls; the backward pass's two products run side by side, one per core
//! ([`weight_and_input_grads`]).

use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Storage, Tensor, Var, bail};

pub(super) mod products;

use products::{Product, gemm_f32, scaled_gemm};

/// The arithmetic of the trainer's large products (projections, output head): f32
/// throughout, or bf16 operands with f32 sums (`--precision bf16`, PyTorch's bf16
/// autocast on CPU: weights and activations rounded to bf16 for each product, master
/// weights, gradients, optimizer moments and every elementwise op in f32), on AVX-512
/// BF16 where the CPU has it ([`tabcontam_kernels::bf16`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    F32,
    Bf16,
}

impl Precision {
    /// The name `--precision` takes.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// `f32` or `bf16`, or a one-line error naming both.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Precision::F32),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(format!(
                "`{other}` is not a precision: use f32 (the default) or bf16"
            )),
        }
    }
}

/// Where a weight's gradient `(out, in)` lands during the backward pass: empty after
/// [`GradSink::take`], and summed in place when the weight takes part more than once.
///
/// One slot per stream ([`super::streams`]): the two halves of a micro-batch run their
/// backward passes at once, each depositing in its own slot, and [`GradSink::take`] adds
/// the slots in stream order, so the sum's bits do not depend on which half finished first.
#[derive(Clone, Default)]
pub struct GradSink {
    slots: Arc<[Mutex<Option<Vec<f32>>>; STREAMS]>,
    stream: usize,
}

/// Streams whose gradients a sink keeps apart ([`super::streams`]).
pub const STREAMS: usize = 2;

impl GradSink {
    /// This sink as stream `stream`'s ops see it: what they deposit lands in its slot.
    pub fn on(&self, stream: usize) -> GradSink {
        assert!(stream < STREAMS, "stream {stream} of {STREAMS}");
        GradSink {
            slots: Arc::clone(&self.slots),
            stream,
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Vec<f32>>> {
        self.slots[self.stream]
            .lock()
            .expect("a gradient sink is never poisoned")
    }

    /// The summed gradient as a tensor of `shape` (every stream's, added in stream order),
    /// leaving the sink empty.
    pub fn take(&self, shape: &Shape) -> candle_core::Result<Option<Tensor>> {
        let mut total: Option<Vec<f32>> = None;
        for slot in self.slots.iter() {
            let taken = slot
                .lock()
                .expect("a gradient sink is never poisoned")
                .take();
            match (&mut total, taken) {
                (_, None) => {}
                (None, Some(values)) => total = Some(values),
                (Some(sum), Some(values)) => add_gradient(sum, &values),
            }
        }
        total
            .map(|values| Tensor::from_vec(values, shape.clone(), &candle_core::Device::Cpu))
            .transpose()
    }

    /// Adds the streams' gradients into one slot once both are there, freeing the other:
    /// for a weight that takes part once per pass (a projection), so the two streams'
    /// whole gradients do not all wait for [`GradSink::take`] at once (SmolLM2: 425 MB).
    /// Two addends give the same bits in either order; a weight taking part twice a pass
    /// (the tied embeddings: the head's and the lookup's) keeps its slots apart.
    ///
    /// Never waits: a slot locked by the other stream (its product still running) is left
    /// to that stream, which folds when it deposits; should both miss, `take` adds them.
    fn fold_streams(&self) {
        let mut slots = self.slots.iter().map(|slot| slot.try_lock().ok());
        let (Some(Some(mut first)), Some(Some(mut second))) = (slots.next(), slots.next()) else {
            return;
        };
        if let (Some(sum), Some(values)) = (first.as_mut(), second.as_ref()) {
            add_gradient(sum, values);
            *second = None;
        }
    }

    /// Forgets a gradient left in this stream's slot by a backward pass nobody drained.
    pub fn clear(&self) {
        *self.slot() = None;
    }

    /// Adds `values` (a whole gradient) to the sum, or makes them the sum when there is none
    /// yet (moved in, not copied).
    pub fn deposit(&self, values: Vec<f32>) {
        let mut slot = self.slot();
        match slot.as_mut() {
            Some(sum) if !sum.is_empty() => add_gradient(sum, &values),
            _ => *slot = Some(values),
        }
    }

    /// Runs `add` on the `(rows, columns)` sum, zeroed first when there is none yet: for a
    /// gradient that touches a few rows (the embeddings').
    pub fn add_rows(&self, rows: usize, columns: usize, add: impl FnOnce(&mut [f32])) {
        let mut slot = self.slot();
        let sum = match slot.as_mut() {
            Some(sum) if !sum.is_empty() => sum,
            _ => slot.insert(vec![0.0; rows * columns]),
        };
        assert_eq!(sum.len(), rows * columns, "one weight's gradients");
        add(sum);
    }
}

/// `sum += values` for two gradients of one weight, on the calling pool's threads (one in a
/// stream's).
fn add_gradient(sum: &mut [f32], values: &[f32]) {
    assert_eq!(sum.len(), values.len(), "one weight's gradients");
    sum.par_iter_mut()
        .zip(values.par_iter())
        .for_each(|(s, v)| *s += v);
}

/// Adds `dyᵀ x` (`dy` `(rows, out)`, `x` `(rows, in)`, both row-major) to the `(out, in)`
/// gradient in `slot` on `threads` cores; gemm writes it whole the first time (no zeroed
/// buffer, no add).
#[allow(clippy::too_many_arguments)]
pub(super) fn add_weight_grad(
    slot: &mut Option<Vec<f32>>,
    dy: &[f32],
    x: &[f32],
    rows: usize,
    out: usize,
    inputs: usize,
    threads: usize,
    precision: Precision,
) {
    assert_eq!((dy.len(), x.len()), (rows * out, rows * inputs));
    // An empty buffer is one allocated ahead ([`reserve_weight_grad`]), not a sum yet.
    let read = slot.as_ref().is_some_and(|buffer| !buffer.is_empty());
    let buffer = slot.get_or_insert_with(|| Vec::with_capacity(out * inputs));
    // The `(in, out)` product `xᵀ dy` written column-major is `(out, in)` row-major:
    // the orientation candle's backward gives gemm, so the sums match its own.
    // SAFETY: the buffer holds `out · in` floats of capacity; gemm writes every one of
    // them (and reads them only when `read`, after they were written).
    unsafe {
        gemm_f32(
            Product {
                m: inputs,
                n: out,
                k: rows,
                dst: (1, inputs as isize),
                lhs: (x.as_ptr(), 1, inputs as isize),
                rhs: (dy.as_ptr(), out as isize, 1),
            },
            buffer.as_mut_ptr(),
            read,
            threads,
            precision,
        );
        buffer.set_len(out * inputs);
    }
}

/// The cores candle trains on (`candle_core::utils::get_num_threads`): what one product
/// runs on when it runs alone. Read once: unless `RAYON_NUM_THREADS` is set, candle counts
/// physical cores by parsing `/proc/cpuinfo` on every call (perf: 3-5 % of a training
/// step's main thread, in the kernel's formatting of that file).
///
/// Inside a stream ([`super::streams`]) the stream's own share: its pool's threads.
pub(super) fn all_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *THREADS.get_or_init(|| candle_core::utils::get_num_threads().max(1));
    cores.min(rayon::current_num_threads())
}

/// Allocates an `(out, in)` gradient in `slot` on the calling thread when it has none, for
/// a product that runs on a pool thread ([`weight_and_input_grads`]).
///
/// Why: memory a pool thread allocates comes from that thread's glibc arena, which grows
/// in heaps of at most 64 MB and keeps what is freed apart from the main heap that
/// `heap::keep_freed_memory` tunes: the head's 113 MB gradient came from a fresh `mmap`
/// every step (one epoch at batch 1: peak RSS 2.97 -> 3.65 GB, system time 9.5 -> 17.3 s).
pub(super) fn reserve_weight_grad(slot: &mut Option<Vec<f32>>, out: usize, inputs: usize) {
    slot.get_or_insert_with(|| Vec::with_capacity(out * inputs));
}

/// Runs a backward pass's two independent products at once, `weight_grad` and
/// `input_grad`, each gemm on its share of the cores (given to each closure).
///
/// Why: one gemm split over both cores waits at the end of every block for the slower
/// half and packs its operands for each thread; two gemms side by side on one core each
/// keep both busy without either. The results do not change: gemm splits its output, not
/// the sums, so every value is the same whatever the thread count.
pub(super) fn weight_and_input_grads<A: Send, B: Send>(
    weight_grad: impl FnOnce(usize) -> A + Send,
    input_grad: impl FnOnce(usize) -> B + Send,
) -> (A, B) {
    let threads = all_threads();
    if threads < 2 {
        return (weight_grad(1), input_grad(1));
    }
    let half = threads / 2;
    rayon::join(|| weight_grad(half), || input_grad(threads - half))
}

/// A fresh row-major `(m, n)` product of `p`, on `threads` cores.
fn product(p: Product, threads: usize, precision: Precision) -> Vec<f32> {
    let len = p.m * p.n;
    let mut out = Vec::with_capacity(len);
    // SAFETY: `out` has room for the `m × n` product at row stride `n`, which gemm writes
    // whole without reading it (`read` false); the callers' operands are slices of the
    // sizes their strides walk.
    unsafe {
        gemm_f32(
            Product {
                dst: (p.n as isize, 1),
                ..p
            },
            out.as_mut_ptr(),
            false,
            threads,
            precision,
        );
        out.set_len(len);
    }
    out
}

/// A weight `(out, in)` packed once in bf16 for many products of one step (the output
/// head's, multiplied by every chunk of rows): as `Wᵀ` for `x Wᵀ` and, when asked, as `W`
/// for `dy W`. Packing the head (49,152 × 576 for SmolLM2) costs about a third of one
/// chunk's product: once per step instead of twice per chunk.
pub(super) struct PackedWeight {
    transposed: tabcontam_kernels::bf16::PackedB,
    plain: Option<tabcontam_kernels::bf16::PackedB>,
    out: usize,
    inputs: usize,
}

impl PackedWeight {
    pub(super) fn new(w: &[f32], out: usize, inputs: usize, input_grads: bool) -> Self {
        use tabcontam_kernels::bf16::{Operand, PackedB};
        assert_eq!(w.len(), out * inputs);
        let threads = all_threads();
        let operand = |row_stride, col_stride| Operand {
            ptr: w.as_ptr(),
            row_stride,
            col_stride,
        };
        // SAFETY: `w` holds `out × in` values, walked as `Wᵀ` `(in × out)` or `W`.
        unsafe {
            PackedWeight {
                transposed: PackedB::new(operand(1, inputs as isize), inputs, out, threads),
                plain: input_grads
                    .then(|| PackedB::new(operand(inputs as isize, 1), out, inputs, threads)),
                out,
                inputs,
            }
        }
    }

    /// `x Wᵀ`, `(rows, out)`.
    pub(super) fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.multiply(
            &self.transposed,
            x,
            rows,
            self.inputs,
            self.out,
            all_threads(),
        )
    }

    /// `dy W`, `(rows, in)`, on `threads` cores.
    pub(super) fn input_grad(&self, dy: &[f32], rows: usize, threads: usize) -> Vec<f32> {
        let plain = self
            .plain
            .as_ref()
            .expect("a head packed for its input gradients");
        self.multiply(plain, dy, rows, self.out, self.inputs, threads)
    }

    fn multiply(
        &self,
        packed: &tabcontam_kernels::bf16::PackedB,
        lhs: &[f32],
        rows: usize,
        k: usize,
        n: usize,
        threads: usize,
    ) -> Vec<f32> {
        assert_eq!(lhs.len(), rows * k);
        let mut out = Vec::with_capacity(rows * n);
        let a = tabcontam_kernels::bf16::Operand {
            ptr: lhs.as_ptr(),
            row_stride: k as isize,
            col_stride: 1,
        };
        // SAFETY: `out` has room for `rows × n` values, all written (`read` false); `lhs`
        // holds `rows × k` (asserted), the packed operand's `k`.
        unsafe {
            packed.multiply(rows, out.as_mut_ptr(), n as isize, false, 1.0, a, threads);
            out.set_len(rows * n);
        }
        out
    }
}

/// `x Wᵀ` for rows `x` `(rows, in)` and a weight `w` `(out, in)`, row-major.
pub fn forward(
    x: &[f32],
    w: &[f32],
    rows: usize,
    out: usize,
    inputs: usize,
    precision: Precision,
) -> Vec<f32> {
    assert_eq!((x.len(), w.len()), (rows * inputs, out * inputs));
    product(
        Product {
            m: rows,
            n: out,
            k: inputs,
            dst: (0, 0),
            lhs: (x.as_ptr(), inputs as isize, 1),
            rhs: (w.as_ptr(), 1, inputs as isize),
        },
        all_threads(),
        precision,
    )
}

/// `dy W`: the input's gradient, `(rows, in)`.
pub fn input_grad(
    dy: &[f32],
    w: &[f32],
    rows: usize,
    out: usize,
    inputs: usize,
    precision: Precision,
) -> Vec<f32> {
    input_grad_on(dy, w, rows, out, inputs, all_threads(), precision)
}

/// [`input_grad`] on `threads` cores.
pub fn input_grad_on(
    dy: &[f32],
    w: &[f32],
    rows: usize,
    out: usize,
    inputs: usize,
    threads: usize,
    precision: Precision,
) -> Vec<f32> {
    assert_eq!((dy.len(), w.len()), (rows * out, out * inputs));
    product(
        Product {
            m: rows,
            n: inputs,
            k: out,
            dst: (0, 0),
            lhs: (dy.as_ptr(), out as isize, 1),
            rhs: (w.as_ptr(), inputs as isize, 1),
        },
        threads,
        precision,
    )
}

/// `dy W` from tensors `dy` `(rows, out)` and `w` `(out, in)` on `threads` cores, as a
/// `(rows, in)` tensor.
pub fn input_grad_tensor(
    dy: &Tensor,
    w: &Tensor,
    threads: usize,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    let (rows, out) = dy.dims2()?;
    let (_, inputs) = w.dims2()?;
    let dx = with_values(dy, |dy| {
        with_values(w, |w| {
            input_grad_on(dy, w, rows, out, inputs, threads, precision)
        })
    })??;
    Tensor::from_vec(dx, (rows, inputs), dy.device())
}

/// The backward pass of `x Wᵀ` for a trained `W`: adds `dyᵀ x` to `sink` and returns
/// `dy W`, the two products side by side ([`weight_and_input_grads`]), the gradient
/// allocated on the calling thread ([`reserve_weight_grad`]). `dy` `(rows, out)`, `x`
/// `(rows, in)`, `w` `(out, in)`.
pub(super) fn sink_and_input_grads(
    sink: &GradSink,
    dy: &Tensor,
    x: &Tensor,
    w: &Tensor,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    let (rows, out) = dy.dims2()?;
    let (_, inputs) = x.dims2()?;
    let mut guard = sink.slot();
    // The gradient itself goes to the pool thread; the lock stays on this one.
    let slot: &mut Option<Vec<f32>> = &mut guard;
    reserve_weight_grad(slot, out, inputs);
    let (weight_grad, dx) = weight_and_input_grads(
        |threads| {
            with_values(dy, |dy| {
                with_values(x, |x| {
                    add_weight_grad(slot, dy, x, rows, out, inputs, threads, precision)
                })
            })
        },
        |threads| input_grad_tensor(dy, w, threads, precision),
    );
    weight_grad??;
    drop(guard);
    sink.fold_streams();
    dx
}

/// The f32 values of a contiguous CPU storage, or an error naming the op.
pub(super) fn slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(values) = storage else {
        bail!("{op}: f32 tensors only")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        bail!("{op}: contiguous tensors only")
    };
    Ok(&values[start..end])
}

/// Runs `f` on the f32 values of `t` (made contiguous first when it is not). Here for
/// `ops.rs` too, which builds on this file.
pub(super) fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        bail!("the trainer's ops run on CPU only")
    };
    Ok(f(slice(cpu, layout, "with_values")?))
}

/// `x Wᵀ`: the backward pass returns `x`'s gradient to candle and, for a trained weight,
/// leaves `W`'s in the weight's [`GradSink`] (none for a frozen one).
struct Linear {
    weight: Tensor,
    sink: Option<GradSink>,
    precision: Precision,
}

impl CustomOp1 for Linear {
    fn name(&self) -> &'static str {
        match self.sink {
            Some(_) => "train-linear",
            None => "train-frozen-linear",
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, inputs) = l.shape().dims2()?;
        let (out, _) = self.weight.dims2()?;
        let x = slice(s, l, self.name())?;
        let y = with_values(&self.weight, |w| {
            forward(x, w, rows, out, inputs, self.precision)
        })?;
        Ok((CpuStorage::F32(y), Shape::from((rows, out))))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let grad = grad.detach();
        let Some(sink) = &self.sink else {
            return input_grad_tensor(&grad, &self.weight, all_threads(), self.precision).map(Some);
        };
        sink_and_input_grads(sink, &grad, &x.detach(), &self.weight, self.precision).map(Some)
    }
}

/// `x Wᵀ` over rows `x` `(n, in)` for a weight `(out, in)`, its gradient into `sink` when
/// it has one.
pub(super) fn linear_op(
    x: &Tensor,
    weight: &Tensor,
    sink: Option<&GradSink>,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op1(Linear {
        weight: weight.detach(),
        sink: sink.cloned(),
        precision,
    })
}

/// `x Wᵀ` over rows `x` `(n, in)` for a trained weight `w` `(out, in)`: `x` gets its
/// gradient through candle, `w` in `sink`.
pub fn trained_linear(
    x: &Tensor,
    w: &Var,
    sink: &GradSink,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    linear_op(x, w.as_tensor(), Some(sink), precision)
}

/// `dst (m × n) (+)= scale · lhs · rhs` for row-major `lhs (m × k)` (or its transpose when
/// `lhs_transposed`: stored `(k × m)`) and `rhs` stored `(n × k)` (`rhs_transposed`) or
/// `(k × n)`: the small products around an adapter, on all cores.
#[allow(clippy::too_many_arguments)]
pub(super) fn small_product(
    dst: &mut Vec<f32>,
    read: bool,
    scale: f32,
    (lhs, lhs_transposed): (&[f32], bool),
    (rhs, rhs_transposed): (&[f32], bool),
    m: usize,
    n: usize,
    k: usize,
) {
    assert_eq!((lhs.len(), rhs.len()), (m * k, k * n));
    assert!(
        !read || dst.len() == m * n,
        "a product added to a buffer of its size"
    );
    if !read {
        dst.clear();
        dst.reserve(m * n);
    }
    let lhs_strides = if lhs_transposed {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let rhs_strides = if rhs_transposed {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    // SAFETY: `dst` has room for `m × n` values (reserved, or of that length when `read`),
    // written whole by gemm; the operands hold the `m × k` and `k × n` values their
    // strides walk (asserted).
    unsafe {
        scaled_gemm(
            Product {
                m,
                n,
                k,
                dst: (n as isize, 1),
                lhs: (lhs.as_ptr(), lhs_strides.0, lhs_strides.1),
                rhs: (rhs.as_ptr(), rhs_strides.0, rhs_strides.1),
            },
            dst.as_mut_ptr(),
            read,
            scale,
            all_threads(),
            Precision::F32,
        );
        dst.set_len(m * n);
    }
}

#[cfg(test)]
pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs()?.max_all()?.to_scalar::<f32>())
        .expect("tensors of one shape")
}

#[cfg(test)]
pub(crate) mod tests;
