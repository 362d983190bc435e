//! The rotary embedding applied while queries or keys move from the projection's layout
//! `(batch, new, heads · head_dim)` to the attention's `(batch, heads, new, head_dim)`.
//!
//! Why: the copy into the head layout (candle's strided copy) and candle's rope were two
//! passes over every query and key of a prefill, each into a fresh tensor: 4 % of the
//! demo's samples. One pass here, with candle's arithmetic (`x₁·cos − x₂·sin`,
//! `x₁·sin + x₂·cos`, each product rounded before the sum), so the values are the same bits.

use candle_core::{DType, Storage, Tensor};
use rayon::prelude::*;
use tabcontam_kernels::rotary::rotate;

use super::error::CResult;
use super::layers::Rope;
use super::tensor_values::with_f32_values;

/// `xs` `(batch, new, heads · head_dim)` (a view with unit column stride, such as one part
/// of a fused projection's output) rotated by `rope` with tables `cos`, `sin` `(batch, new,
/// head_dim / 2)`, as `(batch, heads, new, head_dim)`; `None` where this path does not apply
/// (not f32 on CPU, a partial rotation, another layout), for the caller to compose
/// candle's ops.
pub fn rotate_into_heads(
    rope: &Rope,
    xs: &Tensor,
    heads: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> CResult<Option<Tensor>> {
    let (batch, new, width) = xs.dims3()?;
    let head_dim = width / heads.max(1);
    let half = head_dim / 2;
    if !xs.device().is_cpu()
        || xs.dtype() != DType::F32
        || cos.dtype() != DType::F32
        || rope.rotary_dim != head_dim
        || !head_dim.is_multiple_of(2)
        || heads * head_dim != width
        || cos.dims() != [batch, new, half]
        || sin.dims() != [batch, new, half]
    {
        return Ok(None);
    }
    let (storage, layout) = xs.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Ok(None);
    };
    let &[batch_stride, row_stride, 1] = layout.stride() else {
        return Ok(None);
    };
    let values = &cpu.as_slice::<f32>()?[layout.start_offset()..];
    // SAFETY: every head row of every token is written whole below (both rotations write
    // all `head_dim` values, an even number).
    let mut out = unsafe { tabcontam_kernels::unwritten::<f32>(batch * heads * new * head_dim) };
    let level = tabcontam_kernels::cpu::isa();
    // The tables are the same for every layer of a pass: read in place, not copied.
    with_f32_values(cos, |cos| {
        with_f32_values(sin, |sin| {
            out.par_chunks_mut(new * head_dim)
                .enumerate()
                .for_each(|(task, head_rows)| {
                    let (b, h) = (task / heads, task % heads);
                    for (t, dst) in head_rows.chunks_exact_mut(head_dim).enumerate() {
                        let from = b * batch_stride + t * row_stride + h * head_dim;
                        let src = &values[from..from + head_dim];
                        let at = (b * new + t) * half;
                        let (c, s) = (&cos[at..at + half], &sin[at..at + half]);
                        rotate(level, rope.interleaved, src, c, s, dst);
                    }
                })
        })
    })??;
    Tensor::from_vec(out, (batch, heads, new, head_dim), xs.device()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{D, Device};

    /// Against the copy into the head layout and candle's rope, bit for bit: both pair
    /// orders, a view of a wider projection output (as the fused q/k/v product gives), two
    /// sequences with their own positions.
    #[test]
    fn one_pass_gives_candles_bits() {
        for (heads, head_dim) in [(3, 8), (2, 64)] {
            one_pass_matches(heads, head_dim);
        }
    }

    fn one_pass_matches(heads: usize, head_dim: usize) {
        let device = Device::Cpu;
        let (batch, new) = (2, 5);
        let wide = Tensor::randn(0f32, 1.0, (batch, new, heads * head_dim + 7), &device).unwrap();
        let xs = wide.narrow(D::Minus1, 4, heads * head_dim).unwrap();
        let positions = vec![(3..8).collect::<Vec<u32>>(), (0..5).collect()];
        for interleaved in [true, false] {
            let rope = Rope::new(10_000.0, head_dim, interleaved);
            let (cos, sin) = rope.tables(&positions, &device, DType::F32).unwrap();
            let expected = rope
                .apply(
                    &xs.reshape((batch, new, heads, head_dim))
                        .unwrap()
                        .transpose(1, 2)
                        .unwrap()
                        .contiguous()
                        .unwrap(),
                    &cos,
                    &sin,
                )
                .unwrap();
            let got = rotate_into_heads(&rope, &xs, heads, &cos, &sin)
                .unwrap()
                .expect("f32 on CPU, whole heads rotated");
            let bits = |t: &Tensor| {
                t.flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(got.dims(), expected.dims());
            assert_eq!(bits(&got), bits(&expected), "interleaved {interleaved}");
        }
        // A partial rotation is left to the composed ops.
        let rope = Rope::new(10_000.0, head_dim / 2, false);
        let (cos, sin) = rope.tables(&positions, &device, DType::F32).unwrap();
        assert!(
            rotate_into_heads(&rope, &xs, heads, &cos, &sin)
                .unwrap()
                .is_none()
        );
    }
}
