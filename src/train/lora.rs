//! LoRA (Hu et al. 2021) for the trainer: low-rank adapters `W + (α/r)·B·A` on chosen
//! projections with every base weight frozen, so a step computes no weight gradient but
//! the adapters' and the optimizer holds two small moments per adapter instead of two
//! copies of the model. A checkpoint stores the adapters (`adapter.safetensors`, the
//! names peft gives them) beside weights merged into the base, so the engine and every
//! test load it as any local model.

use candle_core::{DType, Device, Tensor, Var};
use serde::{Deserialize, Serialize};

use super::TrainError;
use super::data::SeededRng;

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
    /// candle ops (the reference `linear::adapted_linear` is checked against).
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
}
