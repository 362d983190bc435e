//! Reading a tensor's f32 values without copying them when they already lie in memory.

use candle_core::{DType, Tensor};

use super::error::CResult;

/// `f` on the f32 values of `t` in row-major order: borrowed from a contiguous f32 CPU
/// tensor (a prefill's activations are megabytes per layer, and copying each matmul's input
/// and the MLP's product cost a tenth of prefill time), copied otherwise.
pub fn with_f32_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> CResult<R> {
    if t.dtype() == DType::F32 {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(cpu), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&cpu.as_slice::<f32>()?[start..end]));
        }
    }
    let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(f(&values))
}
