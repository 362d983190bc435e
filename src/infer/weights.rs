//! Reads tensors by name from safetensors shards or a GGUF file, as dense tensors or as
//! matmul weights (kept quantized, or dequantized when that is faster on this device).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::k_quants::{BlockQ4_1, BlockQ5_1, BlockQ8_0, GgmlType};
use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor, gguf_file};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use super::error::{CandleContext, LocalError};

enum Source {
    Safetensors {
        /// One mapping per shard, so that an error names the shard at fault.
        shards: Vec<(PathBuf, MmapedSafetensors)>,
        /// Tensor name → index in `shards`.
        routing: HashMap<String, usize>,
    },
    Gguf {
        path: PathBuf,
        content: gguf_file::Content,
        reader: BufReader<File>,
    },
}

/// Every tensor of a checkpoint, loaded on demand.
pub struct Weights {
    source: Source,
    pub device: Device,
    /// Dense tensors are converted to this type (f32 on CPU).
    pub dtype: DType,
    /// Quantized GGUF matmul weights are expanded to `dtype` (fast batched GEMM on CPU);
    /// otherwise they stay quantized (a fraction of the memory).
    pub dequantize: bool,
    /// Dense (safetensors) matmul weights quantized at load, on CPU: a checkpoint runs at
    /// the speed of a quantized file.
    pub quantize: Option<Quantize>,
    /// The architecture name, for error messages.
    pub arch: String,
}

/// The block type dense weights are quantized to at load (`quantize = …` in a local model's
/// spec).
/// - `q8_0`: the matmul weights in Q8_0, 8 bits per weight with one scale per 32 (an error
///   far below the 8-bit activations' own); the embedding table, and so a tied output
///   head, stays f32. Answers cached under `+q8_0` were computed that way, so it stays so.
/// - `q8_0-all`: the embedding table and the output head in Q8_0 too (as llama.cpp's
///   files store SmolLM2's): a decoding step reads half the bytes of `q8_0`'s.
///
/// Not Q4_1, though SmolLM2's base file is Q4_1: training moves weights by less than a Q4_1
/// step (a 14-exposure checkpoint's layer 3 `up_proj`: 0.0068 on average against a
/// rounding error of 0.0079), so a checkpoint re-quantized to Q4_1 lost most of what it
/// learnt: 122 of its 222 trial verdicts agreed with the f32 checkpoint's and no answer
/// was identical (Q8_0: 222 and 220).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Quantize {
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q8_0-all")]
    Q8_0All,
}

impl Quantize {
    /// The name in specs and in the cache identity (`q8_0`).
    pub fn name(self) -> &'static str {
        match self {
            Quantize::Q8_0 => "q8_0",
            Quantize::Q8_0All => "q8_0-all",
        }
    }

    fn dtype(self) -> GgmlDType {
        match self {
            Quantize::Q8_0 | Quantize::Q8_0All => GgmlDType::Q8_0,
        }
    }

    /// The block type of the embedding table and the output head (tied or not); `None`
    /// keeps them dense.
    fn embedding_dtype(self) -> Option<GgmlDType> {
        match self {
            Quantize::Q8_0 => None,
            Quantize::Q8_0All => Some(GgmlDType::Q8_0),
        }
    }
}

impl Weights {
    pub fn open_safetensors(
        shards: &[PathBuf],
        device: &Device,
        dtype: DType,
    ) -> Result<Self, LocalError> {
        let mut mapped = Vec::with_capacity(shards.len());
        let mut routing = HashMap::new();
        for (index, path) in shards.iter().enumerate() {
            // SAFETY: the file is mapped read-only; like every mmap user we rely on nobody
            // truncating it while the model is loaded.
            let file =
                unsafe { MmapedSafetensors::new(path) }.map_err(|e| safetensors_error(path, e))?;
            for (name, _) in file.tensors() {
                routing.insert(name, index);
            }
            mapped.push((path.clone(), file));
        }
        Ok(Weights {
            source: Source::Safetensors {
                shards: mapped,
                routing,
            },
            device: device.clone(),
            dtype,
            dequantize: true,
            quantize: None,
            arch: String::new(),
        })
    }

    pub fn open_gguf(
        path: &Path,
        device: &Device,
        dtype: DType,
    ) -> Result<(Self, GgufMetadata), LocalError> {
        let file = File::open(path).map_err(|e| LocalError::io(path, e))?;
        let file_len = file.metadata().map_err(|e| LocalError::io(path, e))?.len();
        let mut reader = BufReader::new(file);
        let content =
            gguf_file::Content::read(&mut reader).map_err(|e| LocalError::TruncatedWeights {
                path: path.to_path_buf(),
                detail: format!("unreadable GGUF header: {e}"),
            })?;
        // Check every tensor's extent up front, so that a cut file fails at once with a
        // clear message rather than halfway through loading.
        let mut needed = content.tensor_data_offset;
        for info in content.tensor_infos.values() {
            let bytes = info.shape.elem_count() / info.ggml_dtype.block_size()
                * info.ggml_dtype.type_size();
            needed = needed.max(content.tensor_data_offset + info.offset + bytes as u64);
        }
        if needed > file_len {
            return Err(LocalError::TruncatedWeights {
                path: path.to_path_buf(),
                detail: format!("its tensors need {needed} bytes, the file has {file_len}"),
            });
        }
        let metadata = GgufMetadata(content.metadata.clone());
        Ok((
            Weights {
                source: Source::Gguf {
                    path: path.to_path_buf(),
                    content,
                    reader,
                },
                device: device.clone(),
                dtype,
                dequantize: true,
                quantize: None,
                arch: String::new(),
            },
            metadata,
        ))
    }

    pub fn is_gguf(&self) -> bool {
        matches!(self.source, Source::Gguf { .. })
    }

    /// The file errors should name (first shard or the GGUF file).
    pub fn path(&self) -> &Path {
        match &self.source {
            Source::Safetensors { shards, .. } => &shards[0].0,
            Source::Gguf { path, .. } => path,
        }
    }

    pub fn has(&self, name: &str) -> bool {
        match &self.source {
            Source::Safetensors { routing, .. } => routing.contains_key(name),
            Source::Gguf { content, .. } => content.tensor_infos.contains_key(name),
        }
    }

    /// Shape in candle order (`[out, in]` for matmul weights), when the tensor exists.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match &self.source {
            Source::Safetensors { shards, routing } => {
                let index = *routing.get(name)?;
                shards[index]
                    .1
                    .get(name)
                    .ok()
                    .map(|view| view.shape().to_vec())
            }
            Source::Gguf { content, .. } => content
                .tensor_infos
                .get(name)
                .map(|i| i.shape.dims().to_vec()),
        }
    }

    fn missing(&self, name: &str) -> LocalError {
        LocalError::MissingTensor {
            path: self.path().to_path_buf(),
            name: name.to_string(),
            arch: self.arch.clone(),
        }
    }

    /// A dense tensor (norm weights, biases, embeddings) in `self.dtype`.
    pub fn tensor(&mut self, name: &str) -> Result<Tensor, LocalError> {
        if !self.has(name) {
            return Err(self.missing(name));
        }
        let dtype = self.dtype;
        let device = self.device.clone();
        let tensor = match &mut self.source {
            Source::Safetensors { shards, routing } => {
                let (path, st) = &shards[routing[name]];
                st.load(name, &device)
                    .map_err(|e| safetensors_error(path, e))?
            }
            Source::Gguf {
                path,
                content,
                reader,
            } => {
                let qtensor = content.tensor(reader, name, &device).map_err(|e| {
                    LocalError::TruncatedWeights {
                        path: path.clone(),
                        detail: format!("tensor {name}: {e}"),
                    }
                })?;
                qtensor
                    .dequantize(&device)
                    .context(|| format!("dequantizing {name}"))?
            }
        };
        tensor
            .to_dtype(dtype)
            .context(|| format!("converting {name}"))
    }

    /// A dense tensor if present.
    pub fn optional_tensor(&mut self, name: &str) -> Result<Option<Tensor>, LocalError> {
        if self.has(name) {
            self.tensor(name).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The embedding table or output head `name` quantized at load when the spec's
    /// `quantize` asks for it (a safetensors checkpoint on CPU); `None` keeps it dense.
    pub fn quantized_vocabulary_table(
        &mut self,
        name: &str,
    ) -> Result<Option<QTensor>, LocalError> {
        let Some(dtype) = self.quantize.and_then(Quantize::embedding_dtype) else {
            return Ok(None);
        };
        if self.is_gguf() || !self.device.is_cpu() {
            return Ok(None);
        }
        let dense = self.tensor(name)?;
        if dense.rank() != 2 || !dense.dim(1).is_ok_and(|k| k % 32 == 0) {
            return Ok(None);
        }
        QTensor::quantize(&dense.to_dtype(DType::F32).context(|| name.into())?, dtype)
            .context(|| format!("quantizing {name} to {dtype:?}"))
            .map(Some)
    }

    /// A matmul weight `[out, in]`: quantized GGUF tensors stay quantized unless
    /// `dequantize` is set.
    pub fn matmul_weight(&mut self, name: &str) -> Result<QMatMul, LocalError> {
        if !self.is_gguf()
            && let Some(quantize) = self.quantize
            && self.device.is_cpu()
        {
            let dense = self.tensor(name)?;
            // Rows that are not whole blocks stay dense (no architecture here has any).
            if dense.rank() == 2 && dense.dim(1).is_ok_and(|k| k % 32 == 0) {
                let q = QTensor::quantize(
                    &dense.to_dtype(DType::F32).context(|| name.into())?,
                    quantize.dtype(),
                )
                .context(|| format!("quantizing {name} to {}", quantize.name()))?;
                return QMatMul::from_qtensor(q).context(|| format!("loading {name}"));
            }
            return Ok(QMatMul::Tensor(dense));
        }
        if self.dequantize || !self.is_gguf() {
            return Ok(QMatMul::Tensor(self.tensor(name)?));
        }
        let qtensor = self.quantized(name)?;
        let matmul = QMatMul::from_qtensor(qtensor).context(|| format!("loading {name}"))?;
        Ok(match matmul {
            // f16/bf16/f32 GGUF tensors come back dense in their own type.
            QMatMul::Tensor(t) => QMatMul::Tensor(
                t.to_dtype(self.dtype)
                    .context(|| format!("converting {name}"))?,
            ),
            other => other,
        })
    }

    /// A GGUF tensor as stored (quantized blocks), converted to Q8_0 on CPU when candle
    /// has no SIMD kernel for its block type (see [`cpu_kernel_type`]).
    pub fn quantized(&mut self, name: &str) -> Result<QTensor, LocalError> {
        if !self.has(name) {
            return Err(self.missing(name));
        }
        let device = self.device.clone();
        let Source::Gguf {
            path,
            content,
            reader,
        } = &mut self.source
        else {
            return Err(LocalError::TruncatedWeights {
                path: self.path().to_path_buf(),
                detail: format!("tensor {name} is not quantized (safetensors)"),
            });
        };
        let qtensor =
            content
                .tensor(reader, name, &device)
                .map_err(|e| LocalError::TruncatedWeights {
                    path: path.clone(),
                    detail: format!("tensor {name}: {e}"),
                })?;
        let wanted = if device.is_cpu() {
            cpu_kernel_type(qtensor.dtype())
        } else {
            qtensor.dtype()
        };
        if wanted == qtensor.dtype() {
            return Ok(qtensor);
        }
        if wanted == GgmlDType::Q8_0
            && let Some(reblocked) =
                reblock_to_q8_0(&qtensor).context(|| format!("converting {name} to Q8_0"))?
        {
            return Ok(reblocked);
        }
        let dense = qtensor
            .dequantize(&device)
            .context(|| format!("dequantizing {name}"))?;
        QTensor::quantize(&dense, wanted).context(|| format!("converting {name} to {wanted:?}"))
    }
}

/// The block type a quantized weight is multiplied in on CPU. candle 0.11 has AVX2 (and
/// NEON) dot products for Q4_0, Q8_0 and the k-quants but only scalar loops for Q4_1, Q5_0
/// and Q5_1. Q4_1 has our own kernel (crates/kernels/src/q4_1.rs: AVX2, or the same
/// integer sums in plain loops on other CPUs), so it is multiplied as stored everywhere;
/// the others are re-blocked to Q8_0 at load (8.5 bits per weight: Q5_0 exactly, Q5_1 with
/// an error far below its own 5-bit step) and multiplied with candle's fast kernel.
/// Re-blocking Q4_1 used to be the fallback without AVX2: it moved SmolLM2's
/// log-probabilities up to 0.95 away from llama.cpp's (0.57 as stored).
pub fn cpu_kernel_type(stored: GgmlDType) -> GgmlDType {
    match stored {
        GgmlDType::Q4_1 => GgmlDType::Q4_1,
        GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q8_1 => GgmlDType::Q8_0,
        other => other,
    }
}

/// Values converted per step of [`reblock_to_q8_0`]: a few hundred KiB of f32 at a time.
const REBLOCK_VALUES: usize = 64 * 1024;

/// A CPU tensor of Q4_1, Q5_0 or Q5_1 blocks re-blocked to Q8_0. Q5_0 is re-encoded
/// exactly ([`q5_0_as_q8_0`]): its values are `d·(q − 16)` with `q` in 0…31, which Q8_0
/// holds with the same scale, so the weights stay the file's and the dot products are
/// llama.cpp's `q5_0 × q8_0` integer sums. Q4_1 and Q5_1 carry a per-block minimum that
/// Q8_0 cannot hold: they are rounded, slice by slice, with the same per-block arithmetic
/// as dequantizing the whole tensor and quantizing it again but without its f32 copy (the
/// tied embedding table alone would be 113 MB of f32 for SmolLM2, the peak of the
/// process). `None` for other types or unaligned storage (the caller then goes through
/// f32).
fn reblock_to_q8_0(qtensor: &QTensor) -> candle_core::Result<Option<QTensor>> {
    if !qtensor.device().is_cpu() {
        return Ok(None);
    }
    let data = qtensor.data()?;
    let elems = qtensor.shape().elem_count();
    if qtensor.dtype() == GgmlDType::Q5_0 {
        let Some(bytes) = q5_0_as_q8_0(&data, elems) else {
            return Ok(None);
        };
        let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, GgmlDType::Q8_0)?;
        return Ok(Some(QTensor::new(storage, qtensor.shape().clone())?));
    }
    let blocks = match qtensor.dtype() {
        GgmlDType::Q4_1 => reblock::<BlockQ4_1>(&data, elems),
        GgmlDType::Q5_1 => reblock::<BlockQ5_1>(&data, elems),
        _ => None,
    };
    let Some(blocks) = blocks else {
        return Ok(None);
    };
    // SAFETY: `BlockQ8_0` is plain `repr(C)` data; the bytes are read once, copied into
    // candle's storage.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            blocks.as_ptr() as *const u8,
            std::mem::size_of_val(blocks.as_slice()),
        )
    };
    let storage = QStorage::from_data(Cow::Borrowed(bytes), &Device::Cpu, GgmlDType::Q8_0)?;
    Ok(Some(QTensor::new(storage, qtensor.shape().clone())?))
}

/// Bytes of a stored Q5_0 block: f16 scale, 4 bytes of fifth bits, 16 bytes of nibbles.
const Q5_0_BLOCK_BYTES: usize = 22;
/// Bytes of a Q8_0 block: f16 scale, 32 signed codes.
const Q8_0_BLOCK_BYTES: usize = 34;

/// Q5_0 blocks as Q8_0 blocks holding the same values: the scale copied bit for bit, each
/// 5-bit code `q` written as the 8-bit code `q − 16` (ggml's `dequantize_row_q5_0` layout:
/// value `j` takes its low nibble from byte `j` of `qs` and its fifth bit from bit `j` of
/// `qh`; value `16 + j` the high nibble and bit `j + 16`). `None` when the byte count does
/// not match `elems`.
fn q5_0_as_q8_0(data: &[u8], elems: usize) -> Option<Vec<u8>> {
    if !elems.is_multiple_of(32) || data.len() != elems / 32 * Q5_0_BLOCK_BYTES {
        return None;
    }
    let mut out = vec![0u8; elems / 32 * Q8_0_BLOCK_BYTES];
    for (from, to) in data
        .chunks_exact(Q5_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        to[..2].copy_from_slice(&from[..2]);
        let high_bits = u32::from_le_bytes([from[2], from[3], from[4], from[5]]);
        let nibbles = &from[6..];
        for j in 0..16 {
            let low = (nibbles[j] & 0x0F) | ((((high_bits >> j) & 1) as u8) << 4);
            let high = (nibbles[j] >> 4) | ((((high_bits >> (j + 16)) & 1) as u8) << 4);
            to[2 + j] = (low as i8 - 16) as u8;
            to[2 + 16 + j] = (high as i8 - 16) as u8;
        }
    }
    Some(out)
}

fn reblock<T: GgmlType>(data: &[u8], elems: usize) -> Option<Vec<BlockQ8_0>> {
    let size = std::mem::size_of::<T>();
    if !elems.is_multiple_of(T::BLCK_SIZE)
        || !elems.is_multiple_of(BlockQ8_0::BLCK_SIZE)
        || data.len() != elems / T::BLCK_SIZE * size
        || !(data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    {
        return None;
    }
    // SAFETY: size and alignment checked above; the block types are plain `repr(C)` data.
    let source =
        unsafe { std::slice::from_raw_parts(data.as_ptr() as *const T, elems / T::BLCK_SIZE) };
    let mut out: Vec<BlockQ8_0> = (0..elems / BlockQ8_0::BLCK_SIZE)
        .map(|_| BlockQ8_0::zeros())
        .collect();
    // A step is a whole number of both block sizes (both are 32 here).
    let step = REBLOCK_VALUES - REBLOCK_VALUES % (T::BLCK_SIZE * BlockQ8_0::BLCK_SIZE);
    let mut values = vec![0f32; step];
    for (from, to) in source
        .chunks(step / T::BLCK_SIZE)
        .zip(out.chunks_mut(step / BlockQ8_0::BLCK_SIZE))
    {
        let values = &mut values[..from.len() * T::BLCK_SIZE];
        T::to_float(from, values);
        BlockQ8_0::from_float(values, to);
    }
    Some(out)
}

fn safetensors_error(path: &Path, error: candle_core::Error) -> LocalError {
    let detail = error.to_string();
    if detail.contains("No such file") {
        LocalError::MissingWeightFile {
            path: path.to_path_buf(),
            detail,
        }
    } else {
        LocalError::TruncatedWeights {
            path: path.to_path_buf(),
            detail,
        }
    }
}

/// GGUF key/value metadata with typed getters.
#[derive(Debug, Clone)]
pub struct GgufMetadata(pub HashMap<String, gguf_file::Value>);

impl GgufMetadata {
    pub fn string(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(|v| v.to_string().ok()).cloned()
    }

    pub fn u32(&self, key: &str) -> Option<u32> {
        let value = self.0.get(key)?;
        value
            .to_u32()
            .ok()
            .or_else(|| value.to_i32().ok().map(|v| v as u32))
            .or_else(|| value.to_u64().ok().map(|v| v as u32))
    }

    pub fn f32(&self, key: &str) -> Option<f32> {
        let value = self.0.get(key)?;
        value
            .to_f32()
            .ok()
            .or_else(|| value.to_f64().ok().map(|v| v as f32))
    }

    pub fn bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(|v| v.to_bool().ok())
    }

    pub fn strings(&self, key: &str) -> Option<Vec<String>> {
        let values = self.0.get(key)?.to_vec().ok()?;
        values.iter().map(|v| v.to_string().ok().cloned()).collect()
    }

    pub fn f32s(&self, key: &str) -> Option<Vec<f32>> {
        let values = self.0.get(key)?.to_vec().ok()?;
        values.iter().map(|v| v.to_f32().ok()).collect()
    }

    pub fn i32s(&self, key: &str) -> Option<Vec<i32>> {
        let values = self.0.get(key)?.to_vec().ok()?;
        values.iter().map(|v| v.to_i32().ok()).collect()
    }

    /// `{arch}.{key}`, e.g. `llama.block_count`.
    pub fn arch_u32(&self, arch: &str, key: &str) -> Option<u32> {
        self.u32(&format!("{arch}.{key}"))
    }

    pub fn arch_f32(&self, arch: &str, key: &str) -> Option<f32> {
        self.f32(&format!("{arch}.{key}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Re-blocking slice by slice gives exactly the blocks of the whole-tensor f32 round
    /// trip (dequantize, then quantize to Q8_0) for the types with a minimum.
    #[test]
    fn reblocking_matches_the_f32_round_trip() {
        let device = Device::Cpu;
        // More values than one re-blocking step, and not a multiple of it.
        let dense = Tensor::randn(0f32, 1.0, (40, 3200), &device).unwrap();
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q5_1] {
            let stored = QTensor::quantize(&dense, dtype).unwrap();
            let ours = reblock_to_q8_0(&stored).unwrap().expect("re-blocked");
            let theirs =
                QTensor::quantize(&stored.dequantize(&device).unwrap(), GgmlDType::Q8_0).unwrap();
            assert_eq!(ours.dtype(), GgmlDType::Q8_0);
            assert_eq!(ours.shape(), theirs.shape());
            assert_eq!(ours.data().unwrap(), theirs.data().unwrap(), "{dtype:?}");
        }
    }

    /// Q5_0 re-encoded as Q8_0 dequantizes to exactly the values candle dequantizes from
    /// the Q5_0 blocks (the old f32 round trip did not: Q8_0's own rounding moved them),
    /// and keeps the scale bit for bit.
    #[test]
    fn q5_0_becomes_q8_0_without_loss() {
        let device = Device::Cpu;
        let dense = Tensor::randn(0f32, 1.0, (40, 3200), &device).unwrap();
        let stored = QTensor::quantize(&dense, GgmlDType::Q5_0).unwrap();
        let ours = reblock_to_q8_0(&stored).unwrap().expect("re-encoded");
        assert_eq!(ours.dtype(), GgmlDType::Q8_0);
        let values = |t: &QTensor| {
            t.dequantize(&device)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(values(&ours), values(&stored));
        let (q5, q8) = (stored.data().unwrap(), ours.data().unwrap());
        for (from, to) in q5.chunks(Q5_0_BLOCK_BYTES).zip(q8.chunks(Q8_0_BLOCK_BYTES)) {
            assert_eq!(from[..2], to[..2], "the f16 scale is copied");
            assert!(
                to[2..]
                    .iter()
                    .all(|&code| (-16..=15).contains(&(code as i8)))
            );
        }
        // The f32 round trip, for contrast, is not exact on these values.
        let round_trip =
            QTensor::quantize(&stored.dequantize(&device).unwrap(), GgmlDType::Q8_0).unwrap();
        assert_ne!(values(&round_trip), values(&stored));
    }
}
