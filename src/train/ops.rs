//! The trainer's fused differentiable ops: candle custom ops whose forward and backward are
//! one parallel pass each over `tabcontam_kernels::train` (RMSNorm, SiLU·mul and the down
//! projection, rotary embedding, causal attention probabilities) and the output head with
//! its cross-entropy computed a chunk of tokens at a time, so that no `tokens × vocab`
//! block outlives its chunk.
//!
//! Composed from candle's elementwise ops these ran on one core and autograd kept every
//! intermediate (the head's log-softmax alone kept several `tokens × 49,152` copies); the
//! composed versions stay (module `composed`, tests only) as the reference these are
//! checked against, op by op here and as a whole network in `llama.rs`.
//!
//! Size: each op is a forward, a backward and a test against its composed reference
//! (`composed`, kept here beside what it checks); seven ops make the file long.

use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor, Var, bail,
};
use rayon::prelude::*;
use tabcontam_kernels::train as k;

use super::linear::{GradSink, Precision, slice, with_values};

fn tensor(values: Vec<f32>, shape: &Shape, like: &Tensor) -> candle_core::Result<Tensor> {
    Tensor::from_vec(values, shape.clone(), like.device())
}

/// RMSNorm over the last dimension: `x / √(mean(x²) + eps) · w`.
struct RmsNorm {
    eps: f32,
}

impl CustomOp2 for RmsNorm {
    fn name(&self) -> &'static str {
        "train-rms-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(s1, l1, self.name())?;
        let w = slice(s2, l2, self.name())?;
        if l1.dims().last() != Some(&w.len()) {
            bail!(
                "rms_norm: weight of {} for rows of {:?}",
                w.len(),
                l1.dims()
            )
        }
        let mut out = vec![0f32; x.len()];
        k::rms_norm(x, w, self.eps, &mut out);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let mut dx = vec![0f32; x.elem_count()];
        let mut dw = vec![0f32; w.elem_count()];
        with_values(x, |x| {
            with_values(w, |w| {
                with_values(grad, |g| {
                    k::rms_norm_backward(x, w, self.eps, g, &mut dx, &mut dw)
                })
            })
        })???;
        let dw = if w.track_op() {
            Some(tensor(dw, w.shape(), w)?)
        } else {
            None
        };
        Ok((Some(tensor(dx, x.shape(), x)?), dw))
    }
}

pub fn rms_norm(xs: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    xs.contiguous()?
        .apply_op2(&w.contiguous()?, RmsNorm { eps: eps as f32 })
}

/// A gated MLP's product `act(gate) · up`, forward and backward one parallel pass each:
/// SwiGLU (`silu`, llama) or GeGLU (the tanh GELU, Gemma 3). Composed, candle ran Gemma's
/// GELU and its backward pass's nine elementwise ops (powers, tanh, products) on one core,
/// each a fresh `tokens × intermediate` tensor: a sixth of a Gemma 3 step in perf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gated {
    SwiGlu,
    GeGlu,
}

impl CustomOp2 for Gated {
    fn name(&self) -> &'static str {
        match self {
            Gated::SwiGlu => "train-swiglu",
            Gated::GeGlu => "train-geglu",
        }
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if l1.shape() != l2.shape() {
            bail!("{}: gate {:?}, up {:?}", self.name(), l1.dims(), l2.dims())
        }
        let gate = slice(s1, l1, self.name())?;
        let up = slice(s2, l2, self.name())?;
        let mut out = vec![0f32; gate.len()];
        match self {
            Gated::SwiGlu => k::swiglu(gate, up, &mut out),
            Gated::GeGlu => k::geglu(gate, up, &mut out),
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let n = gate.elem_count();
        let (mut dgate, mut dup) = (vec![0f32; n], vec![0f32; n]);
        let backward = match self {
            Gated::SwiGlu => k::swiglu_backward,
            Gated::GeGlu => k::geglu_backward,
        };
        with_values(gate, |gate| {
            with_values(up, |up| {
                with_values(grad, |g| backward(gate, up, g, &mut dgate, &mut dup))
            })
        })???;
        Ok((
            Some(tensor(dgate, gate.shape(), gate)?),
            Some(tensor(dup, up.shape(), up)?),
        ))
    }
}

impl Gated {
    /// `act(gate) · up`.
    pub fn apply(self, gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
        gate.contiguous()?.apply_op2(&up.contiguous()?, self)
    }
}

/// Rotary embedding (halves layout) of `(batch, seq, heads, dim)`, tables `(seq, dim/2)`.
#[derive(Clone)]
pub struct Rope {
    pub cos: std::sync::Arc<Vec<f32>>,
    pub sin: std::sync::Arc<Vec<f32>>,
    pub seq: usize,
}

impl Rope {
    /// The tables of positions `0..seq` for heads of `dim` with base `theta`.
    pub fn new(seq: usize, dim: usize, theta: f64) -> Self {
        let half = dim / 2;
        let mut cos = Vec::with_capacity(seq * half);
        let mut sin = Vec::with_capacity(seq * half);
        for pos in 0..seq {
            for i in 0..half {
                let freq = 1.0 / (theta as f32).powf((2 * i) as f32 / dim as f32);
                let angle = pos as f32 * freq;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Rope {
            cos: cos.into(),
            sin: sin.into(),
            seq,
        }
    }

    fn run(&self, x: &[f32], dims: &[usize], inverse: bool) -> candle_core::Result<Vec<f32>> {
        let [_, seq, heads, dim] = dims else {
            bail!("rope: (batch, seq, heads, dim) expected, got {dims:?}")
        };
        if *seq != self.seq || dim / 2 * self.seq != self.cos.len() {
            bail!("rope: tables of {} positions for {dims:?}", self.seq)
        }
        let mut out = vec![0f32; x.len()];
        k::rope(x, &self.cos, &self.sin, *seq, *heads, inverse, &mut out);
        Ok(out)
    }
}

impl CustomOp1 for Rope {
    fn name(&self) -> &'static str {
        "train-rope"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        Ok((
            CpuStorage::F32(self.run(x, l.dims(), false)?),
            l.shape().clone(),
        ))
    }

    fn bwd(&self, x: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let dx = with_values(grad, |g| self.run(g, grad.dims(), true))??;
        Ok(Some(tensor(dx, x.shape(), x)?))
    }
}

pub fn rope(xs: &Tensor, rope: &Rope) -> candle_core::Result<Tensor> {
    xs.contiguous()?.apply_op1(rope.clone())
}

/// Tokens per chunk of the output head: a chunk's logits are `TOKENS × vocab` floats
/// (48 MB for 49,152 ids), enough rows for the matmuls to run at full speed.
const HEAD_CHUNK: usize = 256;

/// The head's gradients: `d hidden`, and the `(vocab, hidden)` values of `d weight` unless
/// the weight is frozen.
type HeadGrads = (Tensor, Option<Vec<f32>>);

/// The output head and its mean cross-entropy: `hidden` `(n, h)` times `weight` `(vocab, h)`
/// transposed, softmax cross-entropy against `targets`, each token's loss weighted and
/// the sum divided by `count`. The logits exist one chunk at a time; when training, each
/// chunk's gradients are taken from it before the next chunk is computed.
struct HeadCrossEntropy {
    targets: Vec<u32>,
    weights: Vec<f32>,
    count: f32,
    precision: Precision,
}

impl HeadCrossEntropy {
    /// Per chunk: the loss sum, and with `grad_scale` the gradients `(d hidden, d weight)`
    /// (`d weight` only when `weight_grad`: a frozen head, as under LoRA, needs none).
    fn run(
        &self,
        hidden: &Tensor,
        weight: &Tensor,
        grad_scale: Option<f32>,
        weight_grad: bool,
    ) -> candle_core::Result<(f64, Option<HeadGrads>)> {
        let (n, _) = hidden.dims2()?;
        let (vocab, h) = weight.dims2()?;
        let mut loss = 0f64;
        let mut d_hidden = Vec::with_capacity(if grad_scale.is_some() { n * h } else { 0 });
        let mut d_weight: Option<Vec<f32>> = None;
        // gemm straight on the values (`linear.rs`): candle's matmul zeroed each chunk's
        // logits and each chunk's `d weight` (the size of the head) before writing them, and
        // both were then copied out and the latter added up.
        with_values(hidden, |hidden| {
            with_values(weight, |weight| {
                // In bf16 the weight is packed once for every chunk (`linear.rs`).
                let packed = (self.precision == Precision::Bf16).then(|| {
                    super::linear::PackedWeight::new(weight, vocab, h, grad_scale.is_some())
                });
                // `d hidden` of a chunk's logit gradients, on `threads` cores.
                let input_grad = |values: &[f32], len: usize, threads: usize| match &packed {
                    Some(packed) => packed.input_grad(values, len, threads),
                    None => super::linear::input_grad_on(
                        values,
                        weight,
                        len,
                        vocab,
                        h,
                        threads,
                        self.precision,
                    ),
                };
                for start in (0..n).step_by(HEAD_CHUNK) {
                    let len = HEAD_CHUNK.min(n - start);
                    let x = &hidden[start * h..(start + len) * h];
                    let mut values = match &packed {
                        Some(packed) => packed.forward(x, len),
                        None => super::linear::forward(x, weight, len, vocab, h, self.precision),
                    };
                    let losses = k::cross_entropy_rows(
                        &mut values,
                        vocab,
                        &self.targets[start..start + len],
                        &self.weights[start..start + len],
                        grad_scale,
                    );
                    loss += losses.iter().map(|&l| f64::from(l)).sum::<f64>();
                    if grad_scale.is_some() && weight_grad {
                        super::linear::reserve_weight_grad(&mut d_weight, vocab, h);
                        // The two products side by side, as the projections' (`linear.rs`).
                        let ((), dx) = super::linear::weight_and_input_grads(
                            |threads| {
                                super::linear::add_weight_grad(
                                    &mut d_weight,
                                    &values,
                                    x,
                                    len,
                                    vocab,
                                    h,
                                    threads,
                                    self.precision,
                                )
                            },
                            |threads| input_grad(&values, len, threads),
                        );
                        d_hidden.extend(dx);
                    } else if grad_scale.is_some() {
                        d_hidden.extend(input_grad(&values, len, super::linear::all_threads()));
                    }
                }
            })
        })??;
        let grads = match grad_scale {
            Some(_) if n > 0 => Some((
                Tensor::from_vec(d_hidden, (n, h), hidden.device())?,
                d_weight,
            )),
            _ => None,
        };
        Ok((loss, grads))
    }
}

/// The head's loss with its gradients worked out in the same pass over the logits (the
/// training path): its backward pass only scales them by the upstream gradient, so each
/// step computes the `tokens × vocab` logits once instead of again in the backward pass
/// (a sixteenth of a SmolLM2 step's multiply-adds). Holding `d weight` from the end of the
/// forward pass costs no peak memory: the backward pass starts with this op.
struct PrecomputedHead {
    loss: f32,
    grads: std::sync::Mutex<Option<HeadGrads>>,
    /// Where `d weight` lands (the embeddings' sink when the head is tied to them), or
    /// `None` to hand it to candle.
    sink: Option<GradSink>,
}

impl CustomOp2 for PrecomputedHead {
    fn name(&self) -> &'static str {
        "train-head-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Ok((CpuStorage::F32(vec![self.loss]), Shape::from(())))
    }

    fn bwd(
        &self,
        _hidden: &Tensor,
        weight: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let Some((dh, dw)) = self
            .grads
            .lock()
            .map_err(|_| candle_core::Error::Msg("head gradients: lock poisoned".into()))?
            .take()
        else {
            bail!(
                "head cross-entropy: one backward pass per forward pass (its gradients were handed over)"
            )
        };
        let scale = grad.to_dtype(DType::F32)?.to_scalar::<f32>()?;
        let scaled = |t: Tensor| {
            if scale == 1.0 {
                Ok(t)
            } else {
                t.affine(f64::from(scale), 0.0)
            }
        };
        let dw = match (dw, &self.sink) {
            (None, _) => None,
            (Some(mut dw), Some(sink)) => {
                if scale != 1.0 {
                    dw.par_iter_mut().for_each(|v| *v *= scale);
                }
                sink.deposit(dw);
                None
            }
            (Some(dw), None) => Some(scaled(Tensor::from_vec(
                dw,
                weight.shape(),
                weight.device(),
            )?)?),
        };
        Ok((Some(scaled(dh)?), dw))
    }
}

/// Mean cross-entropy of the next-token logits `hidden · weightᵀ` against `targets`, over
/// the positions whose `weights` entry is 1 (`count` of them; 0-weighted positions add
/// nothing), without ever holding more than one chunk of logits. When `hidden` is part of
/// a graph (training), the gradients are computed with the loss, in the same chunks; a
/// trained weight's gradient lands in `sink` when one is given.
pub fn head_cross_entropy(
    hidden: &Tensor,
    weight: &Tensor,
    targets: Vec<u32>,
    weights: Vec<f32>,
    count: f32,
    precision: Precision,
    sink: Option<&GradSink>,
) -> candle_core::Result<Tensor> {
    let op = HeadCrossEntropy {
        targets,
        weights,
        count: count.max(1.0),
        precision,
    };
    let (hidden, weight) = (hidden.contiguous()?, weight.contiguous()?);
    let training = hidden.track_op() || weight.track_op();
    let (loss, grads) = op.run(
        &hidden.detach(),
        &weight.detach(),
        training.then_some(1.0 / op.count),
        weight.track_op(),
    )?;
    let loss = (loss / f64::from(op.count)) as f32;
    if !training {
        return Tensor::new(loss, hidden.device());
    }
    let precomputed = PrecomputedHead {
        loss,
        grads: std::sync::Mutex::new(grads),
        sink: sink.cloned(),
    };
    hidden.apply_op2(&weight, precomputed)
}

/// The MLP's down projection of its gated product: `(act(gate) · up) Wᵀ`, with the product
/// recomputed in the backward pass instead of kept (`tokens × intermediate` per layer).
/// With a sink, the weight's gradient goes there (`linear.rs`) rather than to candle.
struct GatedDown {
    gated: Gated,
    sink: Option<GradSink>,
    precision: Precision,
}

impl CustomOp3 for GatedDown {
    fn name(&self) -> &'static str {
        match self.gated {
            Gated::SwiGlu => "train-swiglu-down",
            Gated::GeGlu => "train-geglu-down",
        }
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (gated, shape) = self.gated.cpu_fwd(s1, l1, s2, l2)?;
        let CpuStorage::F32(gated) = gated else {
            bail!("{}: f32 only", self.name())
        };
        let (rows, inputs) = shape.dims2()?;
        let (out, _) = l3.shape().dims2()?;
        let w = slice(s3, l3, self.name())?;
        let down = super::linear::forward(&gated, w, rows, out, inputs, self.precision);
        Ok((CpuStorage::F32(down), Shape::from((rows, out))))
    }

    fn bwd(
        &self,
        gate: &Tensor,
        up: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let weight_grad = w.track_op();
        let (gate, up, w) = (gate.detach(), up.detach(), w.detach());
        let grad = grad.detach();
        // A frozen down projection (LoRA) needs no weight gradient, nor the product for it.
        let (dw, d_gated) = match (&self.sink, weight_grad) {
            (Some(sink), _) => {
                let gated = gate.apply_op2_no_bwd(&up, &self.gated)?;
                (
                    None,
                    super::linear::sink_and_input_grads(sink, &grad, &gated, &w, self.precision)?,
                )
            }
            (None, _) => {
                let dw = match weight_grad {
                    true => Some(
                        grad.t()?
                            .matmul(&gate.apply_op2_no_bwd(&up, &self.gated)?)?,
                    ),
                    false => None,
                };
                let threads = super::linear::all_threads();
                let dx = super::linear::input_grad_tensor(&grad, &w, threads, self.precision)?;
                (dw, dx)
            }
        };
        let (dgate, dup) = self.gated.bwd(&gate, &up, &gate, &d_gated)?;
        Ok((dgate, dup, dw))
    }
}

/// `(act(gate) · up) Wᵀ` ([`GatedDown`]), `W`'s gradient through candle (when tracked).
pub fn gated_down(
    gated: Gated,
    gate: &Tensor,
    up: &Tensor,
    w: &Tensor,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    gate.contiguous()?.apply_op3(
        &up.contiguous()?,
        &w.contiguous()?,
        GatedDown {
            gated,
            sink: None,
            precision,
        },
    )
}

/// [`gated_down`] of a trained weight whose gradient lands in `sink`.
pub fn gated_down_into(
    gated: Gated,
    gate: &Tensor,
    up: &Tensor,
    w: &Var,
    sink: &GradSink,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    gate.contiguous()?.apply_op3(
        &up.contiguous()?,
        &w.as_tensor().detach(),
        GatedDown {
            gated,
            sink: Some(sink.clone()),
            precision,
        },
    )
}

/// `x Wᵀ` with `W` frozen (a LoRA base weight): the backward pass gives `x` its gradient
/// and skips `W`'s, a third of a linear layer's training arithmetic, which candle's own
/// matmul would compute for a weight no optimizer reads (`linear.rs`'s op without a sink).
pub fn frozen_linear(
    x: &Tensor,
    weight: &Tensor,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    super::linear::linear_op(x, weight, None, precision)
}

/// The same ops composed of plain candle ops with candle's own backward (the trainer's
/// forward pass before the fused ops), the reference of the tests.
#[cfg(test)]
pub mod composed {
    use candle_core::{D, Device, Tensor};

    /// `x / sqrt(mean(x²) + eps) * w` over the last dimension.
    pub fn rms_norm(xs: &Tensor, w: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
        let mean_square = xs.sqr()?.mean_keepdim(D::Minus1)?;
        let inv = (mean_square + eps)?.sqrt()?.recip()?;
        xs.broadcast_mul(&inv)?.broadcast_mul(w)
    }

    /// `x · sigmoid(x)` from exp, so that it has a gradient.
    pub fn silu(xs: &Tensor) -> candle_core::Result<Tensor> {
        let sigmoid = (xs.neg()?.exp()? + 1.0)?.recip()?;
        xs * sigmoid
    }

    /// Softmax over the last dimension; the max is a constant shift (detached).
    pub fn softmax(xs: &Tensor) -> candle_core::Result<Tensor> {
        let max = xs.max_keepdim(D::Minus1)?.detach();
        let exp = xs.broadcast_sub(&max)?.exp()?;
        exp.broadcast_div(&exp.sum_keepdim(D::Minus1)?)
    }

    pub fn log_softmax(xs: &Tensor) -> candle_core::Result<Tensor> {
        let max = xs.max_keepdim(D::Minus1)?.detach();
        let shifted = xs.broadcast_sub(&max)?;
        let log_sum = shifted.exp()?.sum_keepdim(D::Minus1)?.log()?;
        shifted.broadcast_sub(&log_sum)
    }

    /// Rotary embedding, halves layout: `x·cos + rotate_half(x)·sin` (tables `(seq, dim)`).
    pub fn rotate(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        let dim = xs.dim(D::Minus1)?;
        let half = dim / 2;
        let first = xs.narrow(D::Minus1, 0, half)?;
        let second = xs.narrow(D::Minus1, half, half)?;
        let rotated = Tensor::cat(&[&second.neg()?, &first], D::Minus1)?;
        xs.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
    }

    /// `cos`/`sin` of shape `(seq, head_dim)` (each frequency twice, halves layout).
    pub fn rope_tables(
        seq: usize,
        dim: usize,
        theta: f64,
        device: &Device,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let rope = super::Rope::new(seq, dim, theta);
        let twice = |t: &[f32]| -> candle_core::Result<Tensor> {
            let t = Tensor::from_slice(t, (seq, dim / 2), device)?;
            Tensor::cat(&[&t, &t], 1)
        };
        Ok((twice(&rope.cos)?, twice(&rope.sin)?))
    }

    /// `0` on and below the diagonal, `-inf` above: `(seq, seq)`.
    pub fn causal_mask(seq: usize, device: &Device) -> candle_core::Result<Tensor> {
        let values: Vec<f32> = (0..seq)
            .flat_map(|i| (0..seq).map(move |j| if j <= i { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        Tensor::from_vec(values, (seq, seq), device)
    }
}

#[cfg(test)]
mod tests {
    use super::composed;
    use super::*;
    use candle_core::{Device, Var};

    fn close(a: &Tensor, b: &Tensor) -> f32 {
        let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap();
        diff.to_scalar::<f32>().unwrap()
    }

    fn randn(shape: &[usize]) -> Var {
        Var::from_tensor(&Tensor::randn(0f32, 1.0, shape, &Device::Cpu).unwrap()).unwrap()
    }

    /// `Σ r · f(inputs)` for a fixed random `r`, differentiated both ways: the fused op and
    /// the composed one agree on the output and on every input's gradient.
    fn agree(
        inputs: &[&Var],
        fused: impl Fn(&[Tensor]) -> candle_core::Result<Tensor>,
        reference: impl Fn(&[Tensor]) -> candle_core::Result<Tensor>,
        tolerance: f32,
    ) {
        let tensors: Vec<Tensor> = inputs.iter().map(|v| v.as_tensor().clone()).collect();
        let a = fused(&tensors).unwrap();
        let b = reference(&tensors).unwrap();
        assert_eq!(a.dims(), b.dims());
        assert!(
            close(&a, &b) < tolerance,
            "forward differs by {}",
            close(&a, &b)
        );
        let r = Tensor::randn(0f32, 1.0, a.dims(), &Device::Cpu).unwrap();
        let ga = (&a * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (&b * &r).unwrap().sum_all().unwrap().backward().unwrap();
        for (i, v) in inputs.iter().enumerate() {
            let (x, y) = (
                ga.get(v.as_tensor()).unwrap(),
                gb.get(v.as_tensor()).unwrap(),
            );
            assert!(
                close(x, y) < tolerance,
                "input {i}: gradients differ by {}",
                close(x, y)
            );
        }
    }

    #[test]
    fn rms_norm_matches_the_composed_ops() {
        let (x, w) = (randn(&[2, 5, 24]), randn(&[24]));
        agree(
            &[&x, &w],
            |t| rms_norm(&t[0], &t[1], 1e-5),
            |t| composed::rms_norm(&t[0], &t[1], 1e-5),
            1e-4,
        );
    }

    #[test]
    fn swiglu_matches_the_composed_ops() {
        let (gate, up) = (randn(&[6, 40]), randn(&[6, 40]));
        agree(
            &[&gate, &up],
            |t| Gated::SwiGlu.apply(&t[0], &t[1]),
            |t| composed::silu(&t[0])? * &t[1],
            1e-4,
        );
    }

    /// Against candle's own `gelu` and its backward pass, on values spread over the
    /// GELU's curved part and both tails (randn × 3).
    #[test]
    fn geglu_matches_the_composed_ops() {
        let spread = (randn(&[6, 40]).as_tensor() * 3.0).unwrap();
        let (gate, up) = (Var::from_tensor(&spread).unwrap(), randn(&[6, 40]));
        agree(
            &[&gate, &up],
            |t| Gated::GeGlu.apply(&t[0], &t[1]),
            |t| t[0].gelu()? * &t[1],
            1e-4,
        );
    }

    #[test]
    fn rope_matches_the_composed_ops() {
        let (batch, seq, heads, dim) = (2, 7, 3, 8);
        let x = randn(&[batch, seq, heads, dim]);
        let rope_op = Rope::new(seq, dim, 10_000.0);
        let (cos, sin) = composed::rope_tables(seq, dim, 10_000.0, &Device::Cpu).unwrap();
        agree(
            &[&x],
            |t| rope(&t[0], &rope_op),
            // The composed rotation works on `(batch, heads, seq, dim)`.
            |t| composed::rotate(&t[0].transpose(1, 2)?, &cos, &sin)?.transpose(1, 2),
            1e-5,
        );
    }

    #[test]
    fn head_cross_entropy_matches_the_composed_ops() {
        // More tokens than a chunk, so that chunks' gradients are accumulated.
        let (n, h, vocab) = (HEAD_CHUNK + 37, 16, 50);
        let (hidden, weight) = (randn(&[n, h]), randn(&[vocab, h]));
        let targets: Vec<u32> = (0..n).map(|i| (i * 7 % vocab) as u32).collect();
        let weights: Vec<f32> = (0..n).map(|i| if i % 5 == 0 { 0.0 } else { 1.0 }).collect();
        let count: f32 = weights.iter().sum();
        let targets_t = Tensor::new(targets.as_slice(), &Device::Cpu).unwrap();
        let weights_t = Tensor::new(weights.as_slice(), &Device::Cpu).unwrap();
        let (t2, w2) = (targets.clone(), weights.clone());
        agree(
            &[&hidden, &weight],
            move |t| {
                head_cross_entropy(
                    &t[0],
                    &t[1],
                    t2.clone(),
                    w2.clone(),
                    count,
                    Precision::F32,
                    None,
                )
            },
            |t| {
                let logits = t[0].matmul(&t[1].t()?)?;
                let picked = composed::log_softmax(&logits)?
                    .gather(&targets_t.unsqueeze(1)?, 1)?
                    .squeeze(1)?;
                (picked * &weights_t)?
                    .sum_all()?
                    .affine(-1.0 / f64::from(count), 0.0)
            },
            1e-4,
        );
    }

    #[test]
    fn swiglu_down_matches_the_composed_ops() {
        let (gate, up, w) = (randn(&[6, 40]), randn(&[6, 40]), randn(&[12, 40]));
        agree(
            &[&gate, &up, &w],
            |t| gated_down(Gated::SwiGlu, &t[0], &t[1], &t[2], Precision::F32),
            |t| (composed::silu(&t[0])? * &t[1])?.matmul(&t[2].t()?),
            1e-4,
        );
    }

    /// The down projection with its weight's gradient in a sink gives the product and the
    /// gradients of the one that hands it to candle.
    #[test]
    fn swiglu_down_into_a_sink_matches_candles_weight_gradient() {
        let (gate, up, w) = (randn(&[9, 40]), randn(&[9, 40]), randn(&[12, 40]));
        let r = Tensor::randn(0f32, 1.0, (9, 12), &Device::Cpu).unwrap();
        let sink = GradSink::default();
        let ours = gated_down_into(
            Gated::SwiGlu,
            gate.as_tensor(),
            up.as_tensor(),
            &w,
            &sink,
            Precision::F32,
        )
        .unwrap();
        let theirs = gated_down(
            Gated::SwiGlu,
            gate.as_tensor(),
            up.as_tensor(),
            w.as_tensor(),
            Precision::F32,
        )
        .unwrap();
        let diff = crate::train::linear::max_abs_diff;
        assert_eq!(diff(&ours, &theirs), 0.0);
        let ga = (ours * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let gb = (theirs * &r)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(ga.get(w.as_tensor()).is_none());
        let dw = sink.take(w.shape()).unwrap().unwrap();
        assert!(diff(&dw, gb.get(w.as_tensor()).unwrap()) < 1e-5);
        let (a, b) = (
            ga.get(gate.as_tensor()).unwrap(),
            gb.get(gate.as_tensor()).unwrap(),
        );
        assert_eq!(diff(a, b), 0.0);
    }

    /// Frozen weights (LoRA's base) get no gradient from any op that takes one, and the
    /// inputs' gradients are those of the ops with the weight trainable.
    #[test]
    fn frozen_weights_get_no_gradient_and_inputs_the_same_one() {
        let (x, w) = (randn(&[7, 24]), randn(&[12, 24]));
        agree(
            &[&x],
            |t| frozen_linear(&t[0], w.as_tensor(), Precision::F32),
            |t| t[0].matmul(&w.as_tensor().t()?),
            1e-4,
        );
        let frozen = w.as_tensor().detach();
        let weighted = |out: Tensor| {
            let r = Tensor::randn(0f32, 1.0, out.dims(), &Device::Cpu).unwrap();
            (out * r).unwrap().sum_all().unwrap().backward().unwrap()
        };
        let grads = weighted(frozen_linear(x.as_tensor(), &frozen, Precision::F32).unwrap());
        assert!(grads.get(&frozen).is_none());
        let (gate, up, down) = (randn(&[7, 24]), randn(&[7, 24]), randn(&[12, 24]));
        let down = down.as_tensor().detach();
        let grads = weighted(
            gated_down(
                Gated::SwiGlu,
                gate.as_tensor(),
                up.as_tensor(),
                &down,
                Precision::F32,
            )
            .unwrap(),
        );
        assert!(grads.get(&down).is_none() && grads.get(gate.as_tensor()).is_some());
        let norm = randn(&[24]).as_tensor().detach();
        let grads = weighted(rms_norm(x.as_tensor(), &norm, 1e-5).unwrap());
        assert!(grads.get(&norm).is_none() && grads.get(x.as_tensor()).is_some());
        let head = randn(&[50, 24]).as_tensor().detach();
        let targets: Vec<u32> = (0..7).map(|i| i * 3).collect();
        let loss = head_cross_entropy(
            x.as_tensor(),
            &head,
            targets,
            vec![1.0; 7],
            7.0,
            Precision::F32,
            None,
        )
        .unwrap();
        let grads = loss.backward().unwrap();
        assert!(grads.get(&head).is_none() && grads.get(x.as_tensor()).is_some());
    }
}
