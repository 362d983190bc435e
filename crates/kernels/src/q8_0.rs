//! Q8_0 weights expanded to f32 on both cores, for prefills that multiply them as one dense
//! GEMM. candle expands them in a scalar loop on the calling thread, which a checkpoint run
//! quantized to Q8_0 paid at every prefill of every layer.

use std::mem::MaybeUninit;

/// Values per block.
pub const BLOCK: usize = 32;
/// Bytes per stored block: an f16 scale `d`, then 32 signed 8-bit codes (value `d·q`).
const BLOCK_BYTES: usize = 34;

/// The `(n, k)` weight of Q8_0 blocks `data` as f32 values, row-major: each value `d·q`
/// computed as candle and ggml compute it (f16 scale widened to f32, times the code), so
/// the GEMM that follows sees the same numbers bit for bit.
pub fn dequantize(data: &[u8], n: usize, k: usize) -> Vec<f32> {
    crate::expand_blocks::<BLOCK_BYTES>(data, n, k, |block, values| {
        let d = half::f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32();
        for (code, value) in block[2..].iter().zip(values.iter_mut()) {
            *value = MaybeUninit::new(d * f32::from(*code as i8));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    /// The same f32 values as candle's own expansion, bit for bit, over many blocks and
    /// a ragged last parallel chunk.
    #[test]
    fn dequantize_matches_candle_bit_for_bit() {
        let (n, k) = (37, 32 * 70);
        let values = crate::q4_1::tests::random(n, k, 7);
        let weight = Tensor::from_vec(values, (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&weight, GgmlDType::Q8_0).unwrap();
        let ours = dequantize(&q.data().unwrap(), n, k);
        let theirs = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(ours.len(), theirs.len());
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "value {i}: {a} vs {b}");
        }
    }
}
