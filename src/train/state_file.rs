//! The resume state's tensor file written straight from the buffers that hold the values
//! (the optimizer's moments, the weights' storage): a safetensors file of f32 tensors that
//! candle's loader reads back.
//!
//! Why: through candle's writer each moment was first copied into a tensor, then into a
//! byte buffer, before the write: Gemma 3 270M's final state (2 GB) took 14 s on a disk
//! that writes 300 MB/s. Here each buffer's bytes go to the file as they lie.

use std::io::Write;
use std::path::Path;

use candle_core::{Storage, Tensor};

/// One tensor of the file: its name, shape and values (row-major).
pub struct Entry<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: &'a [f32],
}

/// Writes `entries` as a safetensors file at `path`, in the order given.
pub fn write(path: &Path, entries: &[Entry<'_>]) -> std::io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for entry in entries {
        let bytes = std::mem::size_of_val(entry.values);
        if entry.shape.iter().product::<usize>() != entry.values.len() {
            return Err(std::io::Error::other(format!(
                "`{}`: shape {:?} does not hold {} values",
                entry.name,
                entry.shape,
                entry.values.len()
            )));
        }
        header.insert(
            entry.name.clone(),
            serde_json::json!({
                "dtype": "F32",
                "shape": entry.shape,
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut header = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    // Padded with spaces to 8 bytes, as safetensors' own writer does (the data aligned).
    header.resize(header.len().next_multiple_of(8), b' ');
    let file = std::fs::File::create(path)?;
    let mut out = std::io::BufWriter::with_capacity(8 << 20, file);
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(&header)?;
    for entry in entries {
        write_f32(&mut out, entry.values)?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// The values as little-endian bytes: as they lie in memory on a little-endian machine.
fn write_f32(out: &mut impl Write, values: &[f32]) -> std::io::Result<()> {
    if cfg!(target_endian = "little") {
        // SAFETY: f32 has no padding and any byte is a valid u8; the slice covers exactly
        // the values' memory.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values))
        };
        return out.write_all(bytes);
    }
    for chunk in values.chunks(1 << 16) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
        out.write_all(&bytes)?;
    }
    Ok(())
}

/// `f` on the f32 values of each of `tensors` as they lie in their CPU storage (dense
/// tensors only: a var's storage always is).
pub fn with_values<R>(
    tensors: &[&Tensor],
    f: impl FnOnce(&[&[f32]]) -> std::io::Result<R>,
) -> std::io::Result<R> {
    let guards: Vec<_> = tensors.iter().map(|t| t.storage_and_layout()).collect();
    let mut slices = Vec::with_capacity(guards.len());
    for (storage, layout) in &guards {
        let values = match &**storage {
            Storage::Cpu(cpu) => cpu.as_slice::<f32>().map_err(std::io::Error::other)?,
            _ => {
                return Err(std::io::Error::other(
                    "a resume state is written from CPU tensors",
                ));
            }
        };
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| std::io::Error::other("a resume state is written from dense tensors"))?;
        slices.push(&values[start..end]);
    }
    f(&slices)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::Device;

    use super::*;

    /// candle's loader reads back every tensor with its name, shape and values, an empty
    /// one and one whose bytes leave the header unaligned included.
    #[test]
    fn candle_reads_back_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.safetensors");
        let a: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b = vec![f32::MIN_POSITIVE, -0.0, 1e30];
        let entries = [
            Entry {
                name: "m.weight".into(),
                shape: vec![3, 4],
                values: &a,
            },
            Entry {
                name: "v.bias".into(),
                shape: vec![3],
                values: &b,
            },
            Entry {
                name: "empty".into(),
                shape: vec![0, 5],
                values: &[],
            },
        ];
        write(&path, &entries).unwrap();
        let read: HashMap<String, Tensor> =
            candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read["m.weight"].dims(), &[3, 4]);
        assert_eq!(
            read["m.weight"]
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            a
        );
        let bias = read["v.bias"].to_vec1::<f32>().unwrap();
        assert_eq!(
            bias.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(read["empty"].dims(), &[0, 5]);
    }

    /// A shape that does not hold the values is an error naming the tensor.
    #[test]
    fn a_shape_that_does_not_fit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let entries = [Entry {
            name: "m.x".into(),
            shape: vec![2, 2],
            values: &[1.0; 3],
        }];
        let error = write(&dir.path().join("s"), &entries)
            .unwrap_err()
            .to_string();
        assert!(error.contains("`m.x`"), "{error}");
    }
}
