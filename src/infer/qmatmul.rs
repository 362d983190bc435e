//! Quantized matmul on CPU: on AVX-512 VNNI, weights laid out once for the int8 panels
//! ([`lay_out`]; any number of rows); else, for few rows (decoding), candle's block dot
//! products (AVX2, NEON, or its plain loops on the portable path), run on rayon's pool
//! instead of candle's spinning barrier pool.
//!
//! Why: candle 0.11 splits each quantized matmul between the calling thread and a
//! worker that busy-waits between calls. On a machine with as many busy threads as cores
//! (2 cores here, shared with builds, or rayon's own GEMM threads), the waiting side
//! spins through whole scheduler slices: perf showed 75 % of decoding time spinning and
//! SmolLM2-135M decoding at 7 tokens/s. rayon's workers sleep when idle and the caller
//! blocks instead of spinning, so the same dot products decode 5× faster on a loaded
//! machine and use both cores on a quiet one.

use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};

use tabcontam_kernels::vnni::{self, Blocks};

use super::error::CResult;
use super::tensor_values::with_f32_values;

/// Output columns per rayon task: enough work per task (a few hundred thousand
/// multiply-adds for a 576-wide row) to amortize the hand-off.
const COLUMNS_PER_TASK: usize = 64;

/// Whether [`matmul`] handles this weight (CPU block types with SIMD dot products).
pub fn supports(weight: &QTensor) -> bool {
    weight.device().is_cpu()
        && matches!(
            weight.dtype(),
            GgmlDType::Q8_0
                | GgmlDType::Q4_0
                | GgmlDType::Q2K
                | GgmlDType::Q3K
                | GgmlDType::Q4K
                | GgmlDType::Q5K
                | GgmlDType::Q6K
                | GgmlDType::Q4_1
        )
}

/// Whether a prefill multiplies this weight as stored, with 8-bit activations (int8 panels
/// on AVX-512 VNNI), rather than as an f32 GEMM over its expanded blocks.
pub fn int8_prefill(weight: &QTensor) -> bool {
    weight.device().is_cpu()
        && panel_blocks(weight.dtype()).is_some()
        && tabcontam_kernels::vnni::available()
}

/// The weight laid out for the int8 panels (AVX-512 VNNI), when this CPU runs them, its
/// block type is one they multiply and the layout fits the memory budget
/// (`memory::take_layout_budget`); `None` otherwise (the weight then multiplies as stored,
/// or expanded to f32 for a prefill).
pub fn lay_out(weight: &QTensor) -> Option<vnni::LaidOut> {
    let kind = panel_blocks(weight.dtype())?;
    let (n, k) = weight.shape().dims2().ok()?;
    if !int8_prefill(weight) || !kind.fits(k) {
        return None;
    }
    let bytes = vnni::LaidOut::bytes(kind, n, k);
    if !super::memory::take_layout_budget(bytes) {
        return None;
    }
    Some(vnni::LaidOut::new(kind, &weight.data().ok()?, n, k))
}

/// `xs Wᵀ` for f32 `xs` of shape `(…, k)` and a weight laid out by [`lay_out`].
pub fn matmul_laid_out(xs: &Tensor, weight: &vnni::LaidOut) -> CResult<Tensor> {
    let (n, k) = weight.shape();
    product_of_rows(xs, n, k, |lhs, rows| {
        let xs = tabcontam_kernels::int8_rows::Activations::quantize(lhs, k);
        Ok(weight.matmul(&xs, rows))
    })
}

/// The `(…, n)` tensor `product` computes from the f32 values of `xs` `(…, k)` taken as
/// rows (and their count): the shape checks and the reshaping every quantized matmul shares.
fn product_of_rows(
    xs: &Tensor,
    n: usize,
    k: usize,
    product: impl FnOnce(&[f32], usize) -> CResult<Vec<f32>>,
) -> CResult<Tensor> {
    let dims = xs.dims().to_vec();
    let (&last, lead) = dims
        .split_last()
        .ok_or_else(|| candle_core::Error::Msg("linear input has no feature dim".into()))?;
    if last != k {
        candle_core::bail!("linear input width {last} does not match the weight ({n}, {k})");
    }
    let rows: usize = lead.iter().product();
    let out = with_f32_values(xs, |lhs| product(lhs, rows))??;
    let mut out_dims = lead.to_vec();
    out_dims.push(n);
    Tensor::from_vec(out, out_dims, &Device::Cpu)?.to_dtype(xs.dtype())
}

/// The block types the int8 panels multiply.
fn panel_blocks(dtype: GgmlDType) -> Option<Blocks> {
    match dtype {
        GgmlDType::Q4_1 => Some(Blocks::Q4_1),
        GgmlDType::Q5_0 => Some(Blocks::Q5_0),
        GgmlDType::Q8_0 => Some(Blocks::Q8_0),
        GgmlDType::Q4K => Some(Blocks::Q4K),
        GgmlDType::Q6K => Some(Blocks::Q6K),
        _ => None,
    }
}

/// The weight expanded to a dense `(n, k)` tensor of `dtype` for a prefill GEMM: Q4_1 and
/// Q8_0 on both cores (candle expands them in a scalar loop on the calling thread), other
/// types by candle.
pub fn dequantize(weight: &QTensor, dtype: DType) -> CResult<Tensor> {
    let cpu = weight.device().is_cpu();
    let expand = match weight.dtype() {
        GgmlDType::Q4_1 if cpu => tabcontam_kernels::q4_1::dequantize,
        GgmlDType::Q8_0 if cpu => tabcontam_kernels::q8_0::dequantize,
        _ => return weight.dequantize(&weight.device())?.to_dtype(dtype),
    };
    let (n, k) = weight.shape().dims2()?;
    let values = expand(&weight.data()?, n, k);
    Tensor::from_vec(values, (n, k), &Device::Cpu)?.to_dtype(dtype)
}

/// `xs Wᵀ` for a quantized `W` of shape `(n, k)` and f32 `xs` of shape `(…, k)`.
pub fn matmul(xs: &Tensor, weight: &QTensor) -> CResult<Tensor> {
    let (n, k) = weight.shape().dims2()?;
    let data = weight.data()?;
    // The portable path (`TABCONTAM_CPU=portable`) takes candle's plain loops too, so a
    // machine with AVX2 also runs what a machine without it computes.
    let portable = tabcontam_kernels::cpu::isa() == tabcontam_kernels::cpu::Isa::Portable;
    product_of_rows(xs, n, k, |lhs, rows| {
        if let Some(kind) = panel_blocks(weight.dtype())
            && rows >= vnni::PANEL_ROWS
            && vnni::available()
            && kind.fits(k)
        {
            // Many rows on AVX-512 VNNI: int8 panels (Q4_1 takes them inside its own kernel).
            let xs = tabcontam_kernels::int8_rows::Activations::quantize(lhs, k);
            return Ok(vnni::matmul(kind, &data, n, k, &xs, rows));
        }
        Ok(match weight.dtype() {
            GgmlDType::Q8_0 => run::<BlockQ8_0>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q4_0 => run::<BlockQ4_0>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q4_1 => tabcontam_kernels::q4_1::matmul(&data, n, k, lhs, rows),
            GgmlDType::Q2K => run::<BlockQ2K>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q3K => run::<BlockQ3K>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q4K => run::<BlockQ4K>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q5K => run::<BlockQ5K>(&data, n, k, lhs, rows, portable)?,
            GgmlDType::Q6K => run::<BlockQ6K>(&data, n, k, lhs, rows, portable)?,
            other => candle_core::bail!("no block matmul for {other:?}"),
        })
    })
}

/// The stored blocks of a weight as a slice of `T`.
fn blocks<T: GgmlType>(data: &[u8], count: usize) -> CResult<&[T]> {
    let size = std::mem::size_of::<T>();
    if data.len() != count * size || !(data.as_ptr() as usize).is_multiple_of(align_of::<T>()) {
        candle_core::bail!(
            "quantized weight of {} bytes is not {count} aligned {:?} blocks",
            data.len(),
            T::DTYPE
        );
    }
    // SAFETY: the bytes are candle's own storage of `count` blocks of `T` (checked size
    // and alignment above); the block types are plain `repr(C)` data.
    Ok(unsafe { std::slice::from_raw_parts(data.as_ptr() as *const T, count) })
}

fn run<T: GgmlType>(
    data: &[u8],
    n: usize,
    k: usize,
    lhs: &[f32],
    rows: usize,
    portable: bool,
) -> CResult<Vec<f32>> {
    let per_row = k / T::BLCK_SIZE;
    if !k.is_multiple_of(T::BLCK_SIZE) || !k.is_multiple_of(T::VecDotType::BLCK_SIZE) {
        candle_core::bail!("width {k} is not a whole number of {:?} blocks", T::DTYPE);
    }
    let weight = blocks::<T>(data, n * per_row)?;
    // Activations quantized once per row to the kernel's partner type (as llama.cpp does).
    let lhs_per_row = k / T::VecDotType::BLCK_SIZE;
    let mut quantized: Vec<T::VecDotType> = (0..rows * lhs_per_row)
        .map(|_| T::VecDotType::zeros())
        .collect();
    for (row, out) in lhs
        .chunks_exact(k)
        .zip(quantized.chunks_exact_mut(lhs_per_row))
    {
        T::VecDotType::from_float(row, out);
    }
    Ok(tabcontam_kernels::by_column_tasks(
        n,
        rows,
        COLUMNS_PER_TASK,
        |first, out| {
            let columns = out.len() / rows;
            let column = |c: usize| &weight[(first + c) * per_row..(first + c + 1) * per_row];
            if portable {
                for c in 0..columns {
                    for (r, x) in quantized.chunks_exact(lhs_per_row).enumerate() {
                        out[c * rows + r] = T::vec_dot_unopt(k, column(c), x);
                    }
                }
                return;
            }
            let mut c = 0;
            while c + 4 <= columns {
                for (r, x) in quantized.chunks_exact(lhs_per_row).enumerate() {
                    let (d0, d1, d2, d3) =
                        T::vec_dot_4(k, column(c), column(c + 1), column(c + 2), column(c + 3), x);
                    out[c * rows + r] = d0;
                    out[(c + 1) * rows + r] = d1;
                    out[(c + 2) * rows + r] = d2;
                    out[(c + 3) * rows + r] = d3;
                }
                c += 4;
            }
            for c in c..columns {
                for (r, x) in quantized.chunks_exact(lhs_per_row).enumerate() {
                    out[c * rows + r] = T::vec_dot(k, column(c), x);
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Module;

    /// Same result as candle's own quantized matmul (same kernels, other threads).
    #[test]
    fn matches_candle_quantized_matmul() {
        let device = Device::Cpu;
        let weight = Tensor::randn(0f32, 1.0, (70, 512), &device).unwrap();
        let xs = Tensor::randn(0f32, 1.0, (3, 512), &device).unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K] {
            let q = QTensor::quantize(&weight, dtype).unwrap();
            assert!(supports(&q));
            let ours = matmul(&xs, &q).unwrap().to_vec2::<f32>().unwrap();
            let theirs = candle_core::quantized::QMatMul::from_qtensor(q)
                .unwrap()
                .forward(&xs)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            for (a, b) in ours.iter().flatten().zip(theirs.iter().flatten()) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{dtype:?}: {a} vs {b}"
                );
            }
        }
    }

    /// The portable path (candle's plain loops) computes the same products as the SIMD
    /// path: integer block sums, so only the float accumulation order differs.
    #[test]
    fn portable_loops_match_the_simd_kernels() {
        let device = Device::Cpu;
        let (n, k, rows) = (37, 768, 3);
        let weight = Tensor::randn(0f32, 1.0, (n, k), &device).unwrap();
        let xs = Tensor::randn(0f32, 1.0, (rows, k), &device)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K] {
            let q = QTensor::quantize(&weight, dtype).unwrap();
            let data = q.data().unwrap();
            let both = [false, true].map(|portable| match dtype {
                GgmlDType::Q8_0 => run::<BlockQ8_0>(&data, n, k, &xs, rows, portable),
                GgmlDType::Q4K => run::<BlockQ4K>(&data, n, k, &xs, rows, portable),
                _ => run::<BlockQ6K>(&data, n, k, &xs, rows, portable),
            });
            let [simd, portable] = both.map(Result::unwrap);
            assert_eq!(simd.len(), n * rows);
            for (a, b) in simd.iter().zip(&portable) {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                    "{dtype:?}: {a} vs {b}"
                );
            }
        }
    }

    /// A weight quantized to Q4_1 here (not read from a file) multiplies as its own
    /// dequantized values do, one block per row (hidden 32) and many.
    #[test]
    fn weights_quantized_to_q4_1_multiply_as_their_values() {
        let device = Device::Cpu;
        for (n, k) in [(48, 32), (70, 512)] {
            let weight = Tensor::randn(0f32, 0.5, (n, k), &device).unwrap();
            let xs = Tensor::randn(0f32, 1.0, (3, k), &device).unwrap();
            let q = QTensor::quantize(&weight, GgmlDType::Q4_1).unwrap();
            let values = q.dequantize(&device).unwrap();
            let step = (&values - &weight)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap();
            assert!(
                step.to_scalar::<f32>().unwrap() < 0.5,
                "Q4_1 codes stray far"
            );
            let ours = matmul(&xs, &q).unwrap().to_vec2::<f32>().unwrap();
            let exact = xs
                .matmul(&values.t().unwrap())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            for (a, b) in ours.iter().flatten().zip(exact.iter().flatten()) {
                // The activations are quantized to 8 bits: an error of a few per mille.
                assert!(
                    (a - b).abs() <= 0.02 * (k as f32).sqrt(),
                    "{n}x{k}: {a} vs {b}"
                );
            }
        }
    }
}
