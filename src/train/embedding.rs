//! The token embedding lookup as a differentiable op whose weight gradient lands in the
//! embedding's [`GradSink`]: the backward pass adds each position's gradient to its token's
//! row, in the buffer the (tied) output head's gradient already filled.
//!
//! Why: candle's `index_select` backward made a zeroed copy of the whole table, added the
//! rows into it, and its gradient store zero-filled another and added both to the head's
//! (49,152 × 576 floats for SmolLM2: about 1 GB of memory traffic per step, on the main
//! thread while the other cores waited). Here a step touches the table once, where the head's
//! gradient product writes it, and then only the rows of its tokens.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor, bail};
use rayon::prelude::*;

use super::linear::{GradSink, slice, with_values};

/// Rows `ids` of the embedding table, times `scale` (Gemma 3 scales its embeddings by
/// `sqrt(hidden)`).
struct Lookup {
    ids: Vec<u32>,
    scale: f32,
    sink: Option<GradSink>,
}

impl CustomOp1 for Lookup {
    fn name(&self) -> &'static str {
        "train-embedding"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (vocab, hidden) = l.shape().dims2()?;
        let table = slice(s, l, self.name())?;
        let mut rows = vec![0f32; self.ids.len() * hidden];
        for (row, &id) in rows.chunks_exact_mut(hidden).zip(&self.ids) {
            let id = id as usize;
            if id >= vocab {
                bail!("token id {id} is outside the embedding table ({vocab} rows)")
            }
            for (value, &weight) in row.iter_mut().zip(&table[id * hidden..(id + 1) * hidden]) {
                *value = weight * self.scale;
            }
        }
        Ok((CpuStorage::F32(rows), Shape::from((self.ids.len(), hidden))))
    }

    fn bwd(
        &self,
        table: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let Some(sink) = &self.sink else {
            bail!("embedding lookup: a trained table needs a gradient sink")
        };
        let (vocab, hidden) = table.dims2()?;
        with_values(&grad.detach(), |grad| {
            sink.add_rows(vocab, hidden, |buffer| {
                add_rows(buffer, hidden, &self.ids, grad, self.scale)
            })
        })?;
        Ok(None)
    }
}

/// `buffer[id] += scale · grad[position]` for each position's token `id`, tokens split over
/// the cores by row. A repeated token's gradients meet its row one at a time in position
/// order, as candle's `index_add` added them: the checkpoints keep their bytes.
fn add_rows(buffer: &mut [f32], hidden: usize, ids: &[u32], grad: &[f32], scale: f32) {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    // Stable: a token's positions stay in order.
    order.sort_by_key(|&p| ids[p]);
    // Runs of one token, each handed out whole.
    let runs: Vec<&[usize]> = order.chunk_by(|&a, &b| ids[a] == ids[b]).collect();
    let target = buffer.as_mut_ptr() as usize;
    runs.par_iter().for_each(|run| {
        let id = ids[run[0]] as usize;
        // SAFETY: each run owns its token's row (ids are below the table's rows, checked in
        // the forward pass), and no two runs share a token.
        let row = unsafe {
            std::slice::from_raw_parts_mut((target as *mut f32).add(id * hidden), hidden)
        };
        for &position in *run {
            let from = &grad[position * hidden..(position + 1) * hidden];
            for (value, &g) in row.iter_mut().zip(from) {
                *value += g * scale;
            }
        }
    });
}

/// Rows `ids` of `table` `(vocab, hidden)` times `scale`, `(ids.len(), hidden)`; when `sink`
/// is given (a trained table), the backward pass adds the rows' gradients to it.
pub fn lookup(
    table: &Tensor,
    ids: Vec<u32>,
    scale: f32,
    sink: Option<&GradSink>,
) -> candle_core::Result<Tensor> {
    table.contiguous()?.apply_op1(Lookup {
        ids,
        scale,
        sink: sink.cloned(),
    })
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};

    use super::*;

    /// The lookup and its gradient equal candle's `index_select` (and its backward), with a
    /// token repeated, a scale, and a gradient already in the sink (the tied head's).
    #[test]
    fn lookup_matches_index_select() {
        let device = Device::Cpu;
        let (vocab, hidden) = (11, 6);
        let values: Vec<f32> = (0..vocab * hidden)
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        let table = Var::from_vec(values, (vocab, hidden), &device).unwrap();
        let ids = vec![3u32, 7, 3, 0, 10, 3];
        let upstream: Vec<f32> = (0..ids.len() * hidden)
            .map(|i| (i as f32 * 0.11).cos())
            .collect();
        let upstream = Tensor::from_vec(upstream, (ids.len(), hidden), &device).unwrap();
        let earlier: Vec<f32> = (0..vocab * hidden).map(|i| i as f32 * 0.01).collect();
        let scale = 1.5f32;

        let index = Tensor::new(ids.as_slice(), &device).unwrap();
        let reference =
            (table.as_tensor().index_select(&index, 0).unwrap() * f64::from(scale)).unwrap();
        let reference_grad = (reference.clone() * &upstream)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let reference_grad = reference_grad.get(table.as_tensor()).unwrap();
        let reference_grad = (reference_grad
            + Tensor::from_vec(earlier.clone(), (vocab, hidden), &device).unwrap())
        .unwrap();

        let sink = GradSink::default();
        sink.add_rows(vocab, hidden, |buffer| buffer.copy_from_slice(&earlier));
        let looked_up = lookup(table.as_tensor(), ids, scale, Some(&sink)).unwrap();
        assert_eq!(
            looked_up.to_vec2::<f32>().unwrap(),
            reference.to_vec2::<f32>().unwrap()
        );
        let grads = (looked_up * &upstream)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert!(
            grads.get(table.as_tensor()).is_none(),
            "the table's gradient goes to the sink"
        );
        let ours = sink.take(&Shape::from((vocab, hidden))).unwrap().unwrap();
        assert!(super::super::linear::max_abs_diff(&ours, &reference_grad) < 1e-6);
    }

    /// A token id past the table is an error naming it, not a read out of bounds.
    #[test]
    fn an_id_outside_the_table_is_an_error() {
        let table = Tensor::zeros((4, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        let error = lookup(&table, vec![1, 4], 1.0, None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("token id 4"), "{error}");
    }
}
