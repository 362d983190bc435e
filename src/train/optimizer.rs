//! AdamW for the trainer: the moments kept as plain `f32` buffers beside the model's
//! `Var`s and updated on every core by `tabcontam_kernels::adamw` (candle's `AdamW` is a
//! chain of tensor operations on one core and keeps its state private, so a run could not
//! be resumed with it).

use std::collections::HashMap;

use std::cell::RefCell;

use super::state_file::Entry;
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, InplaceOp2, Layout, Tensor, Var, bail};
use tabcontam_kernels::adamw::{AdamWStep, adamw_update, sum_of_squares};

/// AdamW's settings (PyTorch's defaults but the learning rate and weight decay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWSettings {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Gradients whose global L2 norm exceeds this are scaled down to it before the update
    /// (PyTorch's `clip_grad_norm_`): a step on an unlucky window cannot throw the weights
    /// far, which at a constant learning rate shows as loss spikes.
    pub max_grad_norm: Option<f64>,
}

impl AdamWSettings {
    pub fn new(lr: f64, weight_decay: f64) -> Self {
        AdamWSettings {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            max_grad_norm: None,
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

/// One weight's AdamW update applied in the weight's own storage (candle's in-place op):
/// copying the weights and the gradient out and the result back in was three
/// single-threaded passes over every weight (540 MB at SmolLM2's size) per step.
struct Update<'a> {
    m: RefCell<&'a mut [f32]>,
    v: RefCell<&'a mut [f32]>,
    step: AdamWStep,
}

impl InplaceOp2 for Update<'_> {
    fn name(&self) -> &'static str {
        "adamw-update"
    }

    fn cpu_fwd(
        &self,
        param: &mut CpuStorage,
        param_layout: &Layout,
        grad: &CpuStorage,
        grad_layout: &Layout,
    ) -> candle_core::Result<()> {
        let (CpuStorage::F32(param), CpuStorage::F32(grad)) = (param, grad) else {
            bail!("adamw: f32 weights and gradients only")
        };
        let (Some((p0, p1)), Some((g0, g1))) = (
            param_layout.contiguous_offsets(),
            grad_layout.contiguous_offsets(),
        ) else {
            bail!("adamw: contiguous weights and gradients only")
        };
        adamw_update(
            &mut param[p0..p1],
            &grad[g0..g1],
            &mut self.m.borrow_mut(),
            &mut self.v.borrow_mut(),
            self.step,
        );
        Ok(())
    }
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

    /// The learning rate of the next updates (a schedule sets it before each step).
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.settings.lr = lr;
    }

    /// One update of every weight that has a gradient.
    pub fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        self.steps += 1;
        let s = self.settings;
        let grad_scale = match s.max_grad_norm {
            Some(max) => {
                let norm = self.grad_norm(grads)?;
                if norm > max { (max / norm) as f32 } else { 1.0 }
            }
            None => 1.0,
        };
        let step = AdamWStep {
            lr: s.lr,
            beta1: s.beta1,
            beta2: s.beta2,
            eps: s.eps,
            weight_decay: s.weight_decay,
            t: self.steps,
            grad_scale,
        };
        for (i, (_, var)) in self.vars.iter().enumerate() {
            let Some(grad) = grads.get(var.as_tensor()) else {
                continue;
            };
            let grad = grad.contiguous()?;
            let update = Update {
                m: RefCell::new(&mut self.m[i]),
                v: RefCell::new(&mut self.v[i]),
                step,
            };
            var.as_tensor().inplace_op2(&grad, &update)?;
        }
        Ok(())
    }

    /// The global L2 norm of the gradients of this optimizer's weights, read in place.
    pub fn grad_norm(&self, grads: &GradStore) -> candle_core::Result<f64> {
        let mut sum = 0f64;
        for (_, var) in &self.vars {
            if let Some(grad) = grads.get(var.as_tensor()) {
                let grad = grad.contiguous()?;
                let (storage, layout) = grad.storage_and_layout();
                let (candle_core::Storage::Cpu(CpuStorage::F32(values)), Some((start, end))) =
                    (&*storage, layout.contiguous_offsets())
                else {
                    bail!("grad_norm: f32 gradients on the CPU only")
                };
                sum += sum_of_squares(&values[start..end]);
            }
        }
        Ok(sum.sqrt())
    }

    /// The moments named `m.<weight>` and `v.<weight>`, as they lie (for a resume state).
    pub fn moments(&self) -> Vec<Entry<'_>> {
        let mut out = Vec::with_capacity(2 * self.vars.len());
        for (i, (name, var)) in self.vars.iter().enumerate() {
            for (prefix, buffer) in [("m", &self.m[i]), ("v", &self.v[i])] {
                out.push(Entry {
                    name: format!("{prefix}.{name}"),
                    shape: var.dims().to_vec(),
                    values: buffer,
                });
            }
        }
        out
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use candle_core::backprop::GradStore;

    fn grads_of(vars: &[Var], scale: f64) -> GradStore {
        // loss = scale · Σ_i (i + 1) · Σ x_i  →  d loss / d x_i = scale · (i + 1)
        let mut loss = Tensor::new(0f32, &Device::Cpu).unwrap();
        for (i, v) in vars.iter().enumerate() {
            let term = (v.as_tensor().sum_all().unwrap() * (scale * (i + 1) as f64)).unwrap();
            loss = (loss + term).unwrap();
        }
        loss.backward().unwrap()
    }

    /// Clipping to a norm is the update of the gradient scaled to that norm: a spike (a
    /// step whose gradient is 10 times the last) moves the weights no more than the steps
    /// before it; below the threshold nothing changes. (Adam divides by the gradients' own
    /// scale, so only a change of scale between steps shows.)
    #[test]
    fn clipping_scales_the_gradient_to_the_given_norm() {
        let run = |max: Option<f64>, scales: [f64; 2]| {
            let vars = vec![
                Var::new(&[1f32, 2.0, 3.0], &Device::Cpu).unwrap(),
                Var::new(&[0.5f32, -1.0], &Device::Cpu).unwrap(),
            ];
            let named = vars
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("w{i}"), v.clone()))
                .collect();
            let mut settings = AdamWSettings::new(0.1, 0.0);
            settings.max_grad_norm = max;
            let mut opt = AdamW::new(named, settings);
            let mut norms = Vec::new();
            for scale in scales {
                let grads = grads_of(&vars, scale);
                norms.push(opt.grad_norm(&grads).unwrap());
                opt.step(&grads).unwrap();
            }
            let values: Vec<Vec<f32>> = vars
                .iter()
                .map(|v| v.as_tensor().to_vec1::<f32>().unwrap())
                .collect();
            (norms, values)
        };
        let norm = (3.0f64 + 8.0).sqrt();
        let (norms, spiked) = run(None, [1.0, 10.0]);
        assert!((norms[0] - norm).abs() < 1e-5 && (norms[1] - 10.0 * norm).abs() < 1e-4);
        let (_, clipped) = run(Some(0.5), [1.0, 10.0]);
        let (_, even) = run(None, [0.5 / norm, 0.5 / norm]);
        for (a, b) in clipped.iter().flatten().zip(even.iter().flatten()) {
            assert!((a - b).abs() < 1e-6, "{clipped:?} vs {even:?}");
        }
        assert_ne!(clipped, spiked);
        assert_eq!(run(Some(1e3), [1.0, 10.0]).1, spiked);
    }
}
