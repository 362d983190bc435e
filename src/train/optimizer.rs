//! AdamW for the trainer: the moments kept as plain `f32` buffers beside the model's
//! `Var`s and updated on every core by `tabcontam_kernels::adamw` (candle's `AdamW` is a
//! chain of tensor operations on one core and keeps its state private, so a run could not
//! be resumed with it).

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};
use tabcontam_kernels::adamw::{AdamWStep, adamw_update};

/// AdamW's settings (PyTorch's defaults but the learning rate and weight decay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl AdamWSettings {
    pub fn new(lr: f64, weight_decay: f64) -> Self {
        AdamWSettings {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
        }
    }
}

/// The optimizer of a list of named weights.
pub struct AdamW {
    vars: Vec<(String, Var)>,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Updates done so far (the bias correction's `t` of the last one).
    pub steps: u64,
    settings: AdamWSettings,
}

impl AdamW {
    pub fn new(vars: Vec<(String, Var)>, settings: AdamWSettings) -> Self {
        let m = vars
            .iter()
            .map(|(_, v)| vec![0f32; v.elem_count()])
            .collect();
        let v = vars
            .iter()
            .map(|(_, v)| vec![0f32; v.elem_count()])
            .collect();
        AdamW {
            vars,
            m,
            v,
            steps: 0,
            settings,
        }
    }

    /// One update of every weight that has a gradient.
    pub fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        self.steps += 1;
        let s = self.settings;
        let step = AdamWStep {
            lr: s.lr,
            beta1: s.beta1,
            beta2: s.beta2,
            eps: s.eps,
            weight_decay: s.weight_decay,
            t: self.steps,
        };
        for (i, (_, var)) in self.vars.iter().enumerate() {
            let Some(grad) = grads.get(var.as_tensor()) else {
                continue;
            };
            let grad = grad.flatten_all()?.to_vec1::<f32>()?;
            let mut param = var.as_tensor().flatten_all()?.to_vec1::<f32>()?;
            adamw_update(&mut param, &grad, &mut self.m[i], &mut self.v[i], step);
            var.set(&Tensor::from_vec(param, var.shape(), var.device())?)?;
        }
        Ok(())
    }

    /// The moments as tensors named `m.<weight>` and `v.<weight>` (for a resume state).
    pub fn moments(&self) -> candle_core::Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for (i, (name, var)) in self.vars.iter().enumerate() {
            for (prefix, buffer) in [("m", &self.m[i]), ("v", &self.v[i])] {
                let tensor = Tensor::from_slice(buffer, var.shape(), &Device::Cpu)?;
                out.insert(format!("{prefix}.{name}"), tensor);
            }
        }
        Ok(out)
    }

    /// Restores moments saved by [`AdamW::moments`] after `steps` updates.
    pub fn restore(&mut self, tensors: &HashMap<String, Tensor>, steps: u64) -> Result<(), String> {
        for (i, (name, var)) in self.vars.iter().enumerate() {
            for (prefix, buffer) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let key = format!("{prefix}.{name}");
                let tensor = tensors
                    .get(&key)
                    .ok_or_else(|| format!("the resume state lacks `{key}`"))?;
                if tensor.shape() != var.shape() {
                    return Err(format!(
                        "`{key}` has shape {:?}, the model's weight {:?}",
                        tensor.dims(),
                        var.dims()
                    ));
                }
                *buffer = tensor
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .map_err(|e| format!("`{key}`: {e}"))?;
            }
        }
        self.steps = steps;
        Ok(())
    }
}
