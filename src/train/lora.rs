//! LoRA (Hu et al. 2021) for the trainer: low-rank adapters `W + (α/r)·B·A` on chosen
//! projections with every base weight frozen, so a step computes no weight gradient but
//! the adapters' and the optimizer holds two small moments per adapter instead of two
//! copies of the model. A checkpoint stores the adapters (`adapter.safetensors`, the
//! names peft gives them) beside weights merged into the base, so the engine and every
//! test load it as any local model. An adapted projection is one op ([`adapted_linear`]).

use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Shape, Tensor, Var};
use serde::{Deserialize, Serialize};

use super::TrainError;
use super::data::SeededRng;
use super::linear::{Precision, forward, input_grad, slice, small_product, with_values};

/// The adapters' file inside a checkpoint folder.
pub const ADAPTER_FILE: &str = "adapter.safetensors";

/// A projection of a decoder layer that can carry an adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoraTarget {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 7] = [
        LoraTarget::Q,
        LoraTarget::K,
        LoraTarget::V,
        LoraTarget::O,
        LoraTarget::Gate,
        LoraTarget::Up,
        LoraTarget::Down,
    ];
    /// The default: the attention projections (as the LoRA paper and peft's llama preset).
    pub const ATTENTION: [LoraTarget; 4] =
        [LoraTarget::Q, LoraTarget::K, LoraTarget::V, LoraTarget::O];

    pub fn id(self) -> &'static str {
        match self {
            LoraTarget::Q => "q",
            LoraTarget::K => "k",
            LoraTarget::V => "v",
            LoraTarget::O => "o",
            LoraTarget::Gate => "gate",
            LoraTarget::Up => "up",
            LoraTarget::Down => "down",
        }
    }

    /// The module's Hugging Face name inside `model.layers.N` (peft's target names).
    pub fn module(self) -> &'static str {
        match self {
            LoraTarget::Q => "self_attn.q_proj",
            LoraTarget::K => "self_attn.k_proj",
            LoraTarget::V => "self_attn.v_proj",
            LoraTarget::O => "self_attn.o_proj",
            LoraTarget::Gate => "mlp.gate_proj",
            LoraTarget::Up => "mlp.up_proj",
            LoraTarget::Down => "mlp.down_proj",
        }
    }

    pub(super) fn index(self) -> usize {
        LoraTarget::ALL
            .iter()
            .position(|&t| t == self)
            .expect("listed")
    }

    /// `attention` (q, k, v, o), `mlp` (gate, up, down), `all`, or ids joined by commas
    /// (`q,v`); the message names the flag and the choices.
    pub fn parse_list(text: &str) -> Result<Vec<LoraTarget>, TrainError> {
        let mut targets = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "attention" => targets.extend(LoraTarget::ATTENTION),
                "mlp" => targets.extend([LoraTarget::Gate, LoraTarget::Up, LoraTarget::Down]),
                "all" => targets.extend(LoraTarget::ALL),
                _ => match LoraTarget::ALL.iter().find(|t| t.id() == word) {
                    Some(&t) => targets.push(t),
                    None => {
                        return Err(TrainError::BadExposure(format!(
                            "--lora-targets `{word}`: use attention, mlp, all, or projections among q, k, v, o, gate, up, down joined by commas"
                        )));
                    }
                },
            }
        }
        targets.sort();
        targets.dedup();
        if targets.is_empty() {
            return Err(TrainError::BadExposure(
                "--lora-targets is empty: name the projections to adapt, e.g. attention or q,v"
                    .into(),
            ));
        }
        Ok(targets)
    }
}

/// What a LoRA run trains.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSettings {
    pub rank: usize,
    /// The adapters' output is scaled by `alpha / rank`.
    pub alpha: f64,
    pub targets: Vec<LoraTarget>,
}

impl LoraSettings {
    /// Rank `rank`, `alpha = rank` (scale 1), the attention projections.
    pub fn new(rank: usize) -> Self {
        LoraSettings {
            rank,
            alpha: rank as f64,
            targets: LoraTarget::ATTENTION.to_vec(),
        }
    }

    /// What a front end's options give: rank, targets (`attention` when none are named, see
    /// [`LoraTarget::parse_list`]) and alpha (the rank when none is given).
    pub fn from_options(
        rank: usize,
        targets: Option<&str>,
        alpha: Option<f64>,
    ) -> Result<Self, TrainError> {
        let mut lora = LoraSettings::new(rank);
        if let Some(targets) = targets {
            lora.targets = LoraTarget::parse_list(targets)?;
        }
        if let Some(alpha) = alpha {
            lora.alpha = alpha;
        }
        Ok(lora)
    }

    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Checks the rank against the model; the message names the flag and the fix.
    pub fn check(&self, hidden_size: usize) -> Result<(), TrainError> {
        if self.rank == 0 || self.rank > hidden_size {
            return Err(TrainError::BadExposure(format!(
                "--lora {}: the rank must lie between 1 and the model's hidden size {hidden_size} (8 to 64 is usual)",
                self.rank
            )));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(TrainError::BadExposure(
                "--lora-alpha must be a positive number (the adapters are scaled by alpha / rank)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The manifest's record of it.
    pub fn record(&self) -> LoraRecord {
        LoraRecord {
            rank: self.rank,
            alpha: self.alpha,
            targets: self.targets.iter().map(|t| t.id().to_string()).collect(),
            adapter: ADAPTER_FILE.to_string(),
        }
    }
}

/// The manifest's `lora` object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LoraRecord {
    pub rank: usize,
    pub alpha: f64,
    pub targets: Vec<String>,
    /// The adapters' file in the checkpoint folder (the folder's `model.safetensors` holds
    /// them merged into the base).
    pub adapter: String,
}

/// One adapter: `A` `(rank, in)`, seeded uniform in ±1/√in as peft's Kaiming init, and `B`
/// `(out, rank)` zero, so training starts from the base model exactly.
pub struct Adapter {
    pub a: Var,
    pub b: Var,
}

/// The adapters of every layer, by target.
pub struct Adapters {
    pub settings: LoraSettings,
    layers: Vec<[Option<Adapter>; 7]>,
}

impl Adapters {
    /// Fresh adapters for `layers` layers; `shape(layer, target)` gives the projection's
    /// `(out, in)`.
    pub fn new(
        settings: LoraSettings,
        layers: usize,
        seed: u64,
        shape: impl Fn(usize, LoraTarget) -> (usize, usize),
    ) -> Result<Self, TrainError> {
        let candle = |source| TrainError::Candle {
            context: "making the LoRA adapters".into(),
            source,
        };
        let mut all = Vec::with_capacity(layers);
        for layer in 0..layers {
            let mut slots: [Option<Adapter>; 7] = Default::default();
            for &target in &settings.targets {
                let (out, inp) = shape(layer, target);
                let mut rng = SeededRng::new(&format!("lora/{seed}/{layer}/{}", target.id()));
                let bound = 1.0 / (inp as f64).sqrt();
                let a: Vec<f32> = (0..settings.rank * inp)
                    .map(|_| {
                        ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound
                    })
                    .map(|v| v as f32)
                    .collect();
                let a = Tensor::from_vec(a, (settings.rank, inp), &Device::Cpu).map_err(candle)?;
                let b = Tensor::zeros((out, settings.rank), DType::F32, &Device::Cpu)
                    .map_err(candle)?;
                slots[target.index()] = Some(Adapter {
                    a: Var::from_tensor(&a).map_err(candle)?,
                    b: Var::from_tensor(&b).map_err(candle)?,
                });
            }
            all.push(slots);
        }
        Ok(Adapters {
            settings,
            layers: all,
        })
    }

    pub fn get(&self, layer: usize, target: LoraTarget) -> Option<&Adapter> {
        self.layers[layer][target.index()].as_ref()
    }

    /// Every adapter matrix under peft's name
    /// (`model.layers.N.self_attn.q_proj.lora_A.weight`).
    pub fn named_vars(&self) -> Vec<(String, &Var)> {
        let mut vars = Vec::new();
        for (i, slots) in self.layers.iter().enumerate() {
            for target in LoraTarget::ALL {
                if let Some(adapter) = &slots[target.index()] {
                    let p = format!("model.layers.{i}.{}", target.module());
                    vars.push((format!("{p}.lora_A.weight"), &adapter.a));
                    vars.push((format!("{p}.lora_B.weight"), &adapter.b));
                }
            }
        }
        vars
    }

    /// `h Aᵀ Bᵀ · scale`: the adapter's share of a projection of `h` `(n, in)`, composed of
    /// candle ops (the reference [`adapted_linear`] is checked against).
    pub fn delta(&self, adapter: &Adapter, h: &Tensor) -> candle_core::Result<Tensor> {
        h.matmul(&adapter.a.as_tensor().t()?)?
            .matmul(&adapter.b.as_tensor().t()?)?
            .affine(self.settings.scale(), 0.0)
    }

    /// `W + scale · B A`: a base weight with its adapter merged in (for the checkpoint).
    pub fn merged(&self, adapter: &Adapter, weight: &Tensor) -> candle_core::Result<Tensor> {
        let product = adapter
            .b
            .as_tensor()
            .matmul(adapter.a.as_tensor())?
            .affine(self.settings.scale(), 0.0)?;
        weight.add(&product)
    }
}

/// `x Wᵀ + scale · (x Aᵀ) Bᵀ` for a frozen `W` `(out, in)` and a LoRA adapter `A`
/// `(rank, in)`, `B` `(out, rank)`: the adapter's product is added into the base's output
/// by gemm itself, and the backward pass adds `(dy B) A` into `dy W` the same way.
///
/// Why: composed of candle ops (two matmuls, a scale and an add in the forward pass; the
/// same again, transposes and gradient sums in the backward pass) every adapted
/// projection wrote five `(rows, out)` or `(rows, in)` buffers more per step, each zeroed
/// first; at batch 4 × 256 that elementwise work was a tenth of a LoRA step.
struct AdaptedLinear {
    weight: Tensor,
    scale: f32,
    precision: Precision,
}

impl CustomOp3 for AdaptedLinear {
    fn name(&self) -> &'static str {
        "train-adapted-linear"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        x_layout: &Layout,
        a_storage: &CpuStorage,
        a_layout: &Layout,
        b_storage: &CpuStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (rows, inputs) = x_layout.shape().dims2()?;
        let (out, _) = self.weight.dims2()?;
        let (rank, _) = a_layout.shape().dims2()?;
        let x = slice(xs, x_layout, self.name())?;
        let a = slice(a_storage, a_layout, self.name())?;
        let b = slice(b_storage, b_layout, self.name())?;
        let mut y = with_values(&self.weight, |w| {
            forward(x, w, rows, out, inputs, self.precision)
        })?;
        // The adapter's own products are small: f32 in either precision.
        let low = forward(x, a, rows, rank, inputs, Precision::F32);
        small_product(
            &mut y,
            true,
            self.scale,
            (&low, false),
            (b, true),
            rows,
            out,
            rank,
        );
        Ok((CpuStorage::F32(y), Shape::from((rows, out))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (rows, inputs) = x.dims2()?;
        let (rank, _) = a.dims2()?;
        let (out, _) = b.dims2()?;
        let grad = grad.detach();
        let mut dx = with_values(&grad, |dy| {
            with_values(&self.weight, |w| {
                input_grad(dy, w, rows, out, inputs, self.precision)
            })
        })??;
        let (da, db) = with_values(&grad, |dy| {
            with_values(x, |x| {
                with_values(a, |a| {
                    with_values(b, |b| {
                        // `scale · dy B` `(rows, rank)`: what reaches the adapter's
                        // low-rank activations.
                        let mut low_grad = Vec::new();
                        let dy_b = (dy, false);
                        small_product(
                            &mut low_grad,
                            false,
                            self.scale,
                            dy_b,
                            (b, false),
                            rows,
                            rank,
                            out,
                        );
                        small_product(
                            &mut dx,
                            true,
                            1.0,
                            (&low_grad, false),
                            (a, false),
                            rows,
                            inputs,
                            rank,
                        );
                        let mut da = Vec::new();
                        small_product(
                            &mut da,
                            false,
                            1.0,
                            (&low_grad, true),
                            (x, false),
                            rank,
                            inputs,
                            rows,
                        );
                        let low = forward(x, a, rows, rank, inputs, Precision::F32);
                        let mut db = Vec::new();
                        small_product(
                            &mut db,
                            false,
                            self.scale,
                            (dy, true),
                            (&low, false),
                            out,
                            rank,
                            rows,
                        );
                        (da, db)
                    })
                })
            })
        })????;
        let device = x.device();
        Ok((
            Some(Tensor::from_vec(dx, (rows, inputs), device)?),
            Some(Tensor::from_vec(da, (rank, inputs), device)?),
            Some(Tensor::from_vec(db, (out, rank), device)?),
        ))
    }
}

/// `x Wᵀ + scale · (x Aᵀ) Bᵀ` over rows `x` `(n, in)` for a frozen weight `(out, in)` and
/// a LoRA adapter `a` `(rank, in)`, `b` `(out, rank)`: `x`, `a` and `b` get their gradients
/// through candle.
pub fn adapted_linear(
    x: &Tensor,
    weight: &Tensor,
    a: &Tensor,
    b: &Tensor,
    scale: f64,
    precision: Precision,
) -> candle_core::Result<Tensor> {
    x.contiguous()?.apply_op3(
        &a.contiguous()?,
        &b.contiguous()?,
        AdaptedLinear {
            weight: weight.detach(),
            scale: scale as f32,
            precision,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_from_groups_and_ids() {
        assert_eq!(
            LoraTarget::parse_list("attention").unwrap(),
            LoraTarget::ATTENTION.to_vec()
        );
        assert_eq!(
            LoraTarget::parse_list("v, q,mlp").unwrap(),
            vec![
                LoraTarget::Q,
                LoraTarget::V,
                LoraTarget::Gate,
                LoraTarget::Up,
                LoraTarget::Down
            ]
        );
        assert_eq!(LoraTarget::parse_list("all").unwrap().len(), 7);
        for bad in ["qk", "", "attention,lm_head"] {
            let err = LoraTarget::parse_list(bad).unwrap_err().to_string();
            assert!(err.contains("--lora-targets"), "{err}");
        }
    }

    #[test]
    fn ranks_outside_one_to_hidden_are_refused() {
        assert!(LoraSettings::new(8).check(576).is_ok());
        for rank in [0, 577] {
            let err = LoraSettings::new(rank).check(576).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--lora {rank}:")), "{err}");
            assert!(err.contains("576"), "{err}");
        }
    }

    /// B starts at zero, so a fresh adapter changes nothing; merged weights equal the base
    /// plus the scaled product.
    #[test]
    fn fresh_adapters_start_from_the_base_and_merge_exactly() {
        let adapters = Adapters::new(LoraSettings::new(4), 2, 7, |_, _| (6, 10)).unwrap();
        let adapter = adapters.get(1, LoraTarget::V).unwrap();
        assert!(adapters.get(1, LoraTarget::Gate).is_none());
        let h = Tensor::randn(0f32, 1.0, (3, 10), &Device::Cpu).unwrap();
        let delta = adapters.delta(adapter, &h).unwrap();
        assert_eq!(
            delta
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap(),
            0.0
        );
        adapter
            .b
            .set(&Tensor::randn(0f32, 1.0, (6, 4), &Device::Cpu).unwrap())
            .unwrap();
        let w = Tensor::randn(0f32, 1.0, (6, 10), &Device::Cpu).unwrap();
        let merged = adapters.merged(adapter, &w).unwrap();
        let through_merged = h.matmul(&merged.t().unwrap()).unwrap();
        let through_adapter =
            (h.matmul(&w.t().unwrap()).unwrap() + adapters.delta(adapter, &h).unwrap()).unwrap();
        let diff = crate::train::linear::max_abs_diff(&through_merged, &through_adapter);
        assert!(diff < 1e-4, "{diff}");
        // Seeded: the same seed gives the same A, another seed another.
        let again = Adapters::new(LoraSettings::new(4), 2, 7, |_, _| (6, 10)).unwrap();
        let other = Adapters::new(LoraSettings::new(4), 2, 8, |_, _| (6, 10)).unwrap();
        let a = |x: &Adapters| {
            x.get(1, LoraTarget::V)
                .unwrap()
                .a
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(a(&adapters), a(&again));
        assert_ne!(a(&adapters), a(&other));
    }

    use crate::train::linear::tests::seeded;

    /// The fused LoRA projection gives the value and the gradients of `x`, `A` and `B` of
    /// the same projection composed of candle ops (`x Wᵀ + scale · (x Aᵀ) Bᵀ`), to float
    /// rounding (gemm adds the adapter into the base's sums in another order), and none of
    /// the frozen `W`; partial gemm tiles and a scale other than one included.
    #[test]
    fn adapted_linear_matches_the_composed_projection_and_its_gradients() {
        for (rows, inputs, out, rank, scale) in [
            (7, 5, 3, 2, 1.0),
            (37, 64, 96, 8, 2.0),
            (130, 576, 192, 16, 0.5),
        ] {
            let x = Var::from_tensor(&seeded((rows, inputs), 1)).unwrap();
            let w = seeded((out, inputs), 2);
            let a = Var::from_tensor(&seeded((rank, inputs), 3)).unwrap();
            let b = Var::from_tensor(&seeded((out, rank), 4)).unwrap();
            let dy = seeded((rows, out), 5);
            let ours = adapted_linear(
                x.as_tensor(),
                &w,
                a.as_tensor(),
                b.as_tensor(),
                scale,
                Precision::F32,
            )
            .unwrap();
            let t = |v: &Var| v.as_tensor().t().unwrap();
            let low_rank = x
                .as_tensor()
                .matmul(&t(&a))
                .unwrap()
                .matmul(&t(&b))
                .unwrap();
            let theirs = (x.as_tensor().matmul(&w.t().unwrap()).unwrap()
                + low_rank.affine(scale, 0.0).unwrap())
            .unwrap();
            let tolerance = |reference: &Tensor| {
                let largest = reference.abs().unwrap().max_all().unwrap();
                1e-5 * (1.0 + largest.to_scalar::<f32>().unwrap())
            };
            let shape = format!("{rows}x{inputs}x{out} rank {rank}");
            assert!(
                crate::train::linear::max_abs_diff(&ours, &theirs) <= tolerance(&theirs),
                "{shape}"
            );
            let grads = (ours * &dy).unwrap().sum_all().unwrap().backward().unwrap();
            let reference = (theirs * &dy)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            assert!(grads.get(&w).is_none(), "the base weight stays frozen");
            for (name, var) in [("x", &x), ("A", &a), ("B", &b)] {
                let expected = reference.get(var.as_tensor()).unwrap();
                let got = grads.get(var.as_tensor()).unwrap();
                let diff = crate::train::linear::max_abs_diff(got, expected);
                assert!(diff <= tolerance(expected), "d{name} {shape}: {diff}");
            }
        }
    }
}
