//! The hot CPU loops of tabcontam's local engine, on plain slices: Q4_1 weights multiplied
//! as stored ([`q4_1`]), Q8_0 weights expanded for prefill ([`q8_0`]), quantized weights
//! times many rows as int8 panels on AVX-512 VNNI ([`vnni`], on AMX tiles where present:
//! [`amx`]), the gated MLP's activation
//! ([`activation`]), RMSNorm ([`norm`]), the rotary embedding ([`rotary`]) and attention
//! for decoding steps read from a KV cache ([`attention`]),
//! on the instruction set [`cpu`] selects at run time, and the loops of full fine-tuning
//! ([`train`], [`adamw`]) with its bf16 products ([`bf16`]); [`peak`] measures each path's arithmetic peak for the
//! benchmarks' rooflines.
//!
//! They live apart from `src/infer` (which adapts candle tensors to them) for one reason:
//! this crate is built with `opt-level = 3` even in test builds, where the main crate is
//! not, so `cargo test` runs real models at release speed without optimizing everything.

use rayon::prelude::*;

pub mod activation;
pub mod adamw;
pub mod amx;
pub mod attention;
pub mod bf16;
pub mod cpu;
mod decode_products;
pub mod int8_rows;
pub mod norm;
pub mod peak;
pub mod q4_1;
pub mod q8_0;
pub mod rotary;
pub mod tile;
pub mod train;
pub mod vnni;

/// A vector of `len` values left as the allocator hands them over, for outputs that the
/// caller writes whole before anything reads them: no zeroing pass first (zeroing the
/// outputs of the activation, the norms and the quantized activations was 1.5 % of the
/// demo's samples, and it pulls every line into the cache once more).
///
/// # Safety
/// Every value must be written before any is read (as `vnni::matmul` writes its output
/// through the spare capacity before `set_len`, only the order differs).
// The lint guards against reading such values; the contract above forbids it.
#[allow(clippy::uninit_vec)]
pub unsafe fn unwritten<T: Copy>(len: usize) -> Vec<T> {
    let mut values = Vec::with_capacity(len);
    // SAFETY: the capacity holds `len` values; the caller writes them before reading.
    unsafe { values.set_len(len) };
    values
}

/// The `rows × n` (row-major) result of a block matmul computed on the pool a task of
/// `columns_per_task` output columns at a time: `columns(first, out)` fills `out` with
/// columns `first..` column-major (`rows` values each), so that a task reads each weight
/// row once for every activation row.
pub fn by_column_tasks(
    n: usize,
    rows: usize,
    columns_per_task: usize,
    columns: impl Fn(usize, &mut [f32]) + Sync + Send,
) -> Vec<f32> {
    let mut transposed = vec![0f32; n * rows];
    transposed
        .par_chunks_mut(columns_per_task * rows)
        .enumerate()
        .for_each(|(task, out)| columns(task * columns_per_task, out));
    columns_to_rows(transposed, rows, n)
}

/// The `(n, k)` values of a weight stored as blocks of 32 values in `BYTES` bytes each,
/// expanded on every core: `expand(block, values)` writes one block's 32 values. The
/// block comes as a fixed-size array, so the caller's loop has no bounds checks and
/// vectorizes.
pub(crate) fn expand_blocks<const BYTES: usize>(
    data: &[u8],
    n: usize,
    k: usize,
    expand: impl Fn(&[u8; BYTES], &mut [std::mem::MaybeUninit<f32>]) + Sync,
) -> Vec<f32> {
    const VALUES: usize = 32;
    assert_eq!(data.len(), n * k / VALUES * BYTES, "block storage size");
    let mut out: Vec<f32> = Vec::with_capacity(n * k);
    out.spare_capacity_mut()
        .par_chunks_mut(VALUES * 64)
        .zip(data.par_chunks(BYTES * 64))
        .for_each(|(values, blocks)| {
            for (values, block) in values
                .chunks_exact_mut(VALUES)
                .zip(blocks.chunks_exact(BYTES))
            {
                expand(block.try_into().expect("whole block"), values);
            }
        });
    // SAFETY: the chunks above cover all `n * k` values (whole blocks, sizes asserted).
    unsafe { out.set_len(n * k) };
    out
}

/// A column-major `n × rows` result as row-major `rows × n`.
fn columns_to_rows(transposed: Vec<f32>, rows: usize, n: usize) -> Vec<f32> {
    if rows == 1 {
        return transposed;
    }
    let mut out = vec![0f32; rows * n];
    for (c, column) in transposed.chunks_exact(rows).enumerate() {
        for (r, &value) in column.iter().enumerate() {
            out[r * n + c] = value;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_become_rows() {
        // Two rows, three columns, stored column by column.
        let by_column = vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        assert_eq!(
            super::columns_to_rows(by_column, 2, 3),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert_eq!(super::columns_to_rows(vec![7.0, 8.0], 1, 2), vec![7.0, 8.0]);
    }
}
