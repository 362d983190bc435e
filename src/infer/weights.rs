//! Reads tensors by name from safetensors shards or a GGUF file, as dense tensors or as
//! matmul weights (kept quantized, or dequantized when that is faster on this device).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
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
    /// The architecture name, for error messages.
    pub arch: String,
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

    /// A matmul weight `[out, in]`: quantized GGUF tensors stay quantized unless
    /// `dequantize` is set.
    pub fn matmul_weight(&mut self, name: &str) -> Result<QMatMul, LocalError> {
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
        let dense = qtensor
            .dequantize(&device)
            .context(|| format!("dequantizing {name}"))?;
        QTensor::quantize(&dense, wanted).context(|| format!("converting {name} to {wanted:?}"))
    }
}

/// The block type a quantized weight is multiplied in on CPU. candle 0.11 has AVX2 (and
/// NEON) dot products for Q4_0, Q8_0 and the k-quants but only scalar loops for Q4_1, Q5_0
/// and Q5_1: those are re-blocked to Q8_0 at load (8.5 bits per weight, an error far below
/// their own 4–5-bit step) and multiplied with the fast kernel. Measured on SmolLM2-135M
/// Q4_1 (2 cores, AVX2): scalar Q4_1 is several times slower than Q8_0.
pub fn cpu_kernel_type(stored: GgmlDType) -> GgmlDType {
    match stored {
        GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q8_1 => GgmlDType::Q8_0,
        other => other,
    }
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
