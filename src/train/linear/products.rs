//! The trainer's f32 and bf16 matrix products on raw strided operands: gemm's, split over
//! the cores by slices of the destination ([`split_gemm`]), or the bf16 kernel's.

use rayon::prelude::*;

use super::Precision;

/// `dst (m × n) = lhs (m × k) · rhs (k × n)`, each operand as (pointer or strides) with
/// `(row stride, column stride)` in elements.
#[derive(Clone, Copy)]
pub(in crate::train) struct Product {
    pub(in crate::train) m: usize,
    pub(in crate::train) n: usize,
    pub(in crate::train) k: usize,
    pub(in crate::train) dst: (isize, isize),
    pub(in crate::train) lhs: (*const f32, isize, isize),
    pub(in crate::train) rhs: (*const f32, isize, isize),
}

/// gemm on `threads` cores, as candle's own matmul calls it; `read` adds to what `dst`
/// holds instead of overwriting it.
///
/// # Safety
/// `dst` must have room for the product at its strides, and hold initialised values when
/// `read`; the operands must be valid at theirs.
pub(in crate::train) unsafe fn gemm_f32(
    p: Product,
    dst: *mut f32,
    read: bool,
    threads: usize,
    precision: Precision,
) {
    // SAFETY: forwarded from the caller.
    unsafe { scaled_gemm(p, dst, read, 1.0, threads, precision) }
}

/// [`gemm_f32`] with the product multiplied by `scale` before it is written or added.
///
/// # Safety
/// As [`gemm_f32`].
pub(super) unsafe fn scaled_gemm(
    p: Product,
    dst: *mut f32,
    read: bool,
    scale: f32,
    threads: usize,
    precision: Precision,
) {
    if precision == Precision::Bf16 {
        // SAFETY: forwarded from the caller.
        return unsafe { bf16_gemm(p, dst, read, scale, threads) };
    }
    if threads >= 2 {
        // SAFETY: forwarded from the caller.
        if unsafe { split_gemm(p, dst, read, scale, threads) } {
            return;
        }
    }
    let parallelism = match threads {
        0 | 1 => gemm::Parallelism::None,
        n => gemm::Parallelism::Rayon(n),
    };
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            p.m,
            p.n,
            p.k,
            dst,
            p.dst.1,
            p.dst.0,
            read,
            p.lhs.0,
            p.lhs.2,
            p.lhs.1,
            p.rhs.0,
            p.rhs.2,
            p.rhs.1,
            1.0,
            scale,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// Rows of one AVX-512 register of f32: the split's slices start on a register boundary.
/// Each value is the same sum whichever tile computes it (gemm's tiles add along `k` in
/// the same order; `linear::tests::split_products_are_one_gemms_values` checks it bit for
/// bit on the trainer's shapes; a 33-row product with `k` = 1100 split in 64-row slices
/// differed in the last bits, as it did before this split, where gemm takes another path
/// for so few rows). A split on gemm's 64-row tiles halved 576 outputs (SmolLM2's q, o and down
/// projections) as 320 + 256 and 192 (k, v) as 128 + 64: the projections ran at 150-180 %
/// of 2 cores; split on 16 rows, a step at batch 1 × 128 took 10 % less time.
const GEMM_SPLIT_ALIGN: usize = 16;

/// [`scaled_gemm`] on `threads` cores as that many single-threaded gemms, each on its own
/// slice of the destination along gemm's row dimension; false (nothing written) when that
/// dimension is too short to give each thread a tile.
///
/// Why: gemm turns a row-major destination into its transpose, so a projection `x Wᵀ`
/// becomes `W xᵀ` with the weight as its left operand stored by rows, and gemm packs such
/// a left operand on the calling thread before its threads start: perf showed a third of
/// `contaminate`'s main thread in that packing, the other core idle. Split here, each
/// thread packs only its own rows of the weight. The sums do not change: gemm's blocking
/// of `k` depends on `k` alone, and each slice starts on a tile boundary.
///
/// # Safety
/// As [`gemm_f32`].
unsafe fn split_gemm(p: Product, dst: *mut f32, read: bool, scale: f32, threads: usize) -> bool {
    // gemm transposes the problem when the destination's columns are closer than its
    // rows; its row dimension is then our `n`.
    let along_columns = p.dst.1.unsigned_abs() < p.dst.0.unsigned_abs();
    let rows = if along_columns { p.n } else { p.m };
    if rows < threads * GEMM_SPLIT_ALIGN {
        return false;
    }
    let slice = rows.div_ceil(threads).div_ceil(GEMM_SPLIT_ALIGN) * GEMM_SPLIT_ALIGN;
    let shared = Shared((p, dst));
    (0..rows.div_ceil(slice)).into_par_iter().for_each(|index| {
        let (p, dst) = shared.get();
        let start = index * slice;
        let len = slice.min(rows - start);
        let part = if along_columns {
            Product {
                n: len,
                rhs: (
                    p.rhs.0.wrapping_offset(start as isize * p.rhs.2),
                    p.rhs.1,
                    p.rhs.2,
                ),
                ..p
            }
        } else {
            Product {
                m: len,
                lhs: (
                    p.lhs.0.wrapping_offset(start as isize * p.lhs.1),
                    p.lhs.1,
                    p.lhs.2,
                ),
                ..p
            }
        };
        let offset = start as isize * if along_columns { p.dst.1 } else { p.dst.0 };
        // SAFETY: the slices cover disjoint parts of the caller's destination, each a
        // product of the caller's operands at their strides.
        unsafe {
            scaled_gemm(
                part,
                dst.wrapping_offset(offset),
                read,
                scale,
                1,
                Precision::F32,
            )
        }
    });
    true
}

/// A product and its destination handed to the threads of [`split_gemm`], which read the
/// operands and write disjoint parts of the destination.
#[derive(Clone, Copy)]
struct Shared((Product, *mut f32));

// SAFETY: see [`split_gemm`]: the operands are only read, and each thread writes its own
// slice of the destination.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn get(self) -> (Product, *mut f32) {
        self.0
    }
}

/// [`scaled_gemm`] on bf16 operands: the kernel writes rows with dense columns, so a
/// destination stored column by column (a weight gradient's `xᵀ dy`) is computed as the
/// transposed product `(B A)ᵀ`, the same numbers.
///
/// # Safety
/// As [`gemm_f32`]; the destination is dense along its rows or its columns.
unsafe fn bf16_gemm(p: Product, dst: *mut f32, read: bool, scale: f32, threads: usize) {
    use tabcontam_kernels::bf16::{Operand, gemm};
    let operand = |(ptr, row_stride, col_stride): (*const f32, isize, isize)| Operand {
        ptr,
        row_stride,
        col_stride,
    };
    let swapped = |(ptr, row_stride, col_stride)| operand((ptr, col_stride, row_stride));
    let (m, n, a, b, row_stride) = if p.dst.1 == 1 {
        (p.m, p.n, operand(p.lhs), operand(p.rhs), p.dst.0)
    } else {
        assert_eq!(p.dst.0, 1, "a destination dense along rows or columns");
        (p.n, p.m, swapped(p.rhs), swapped(p.lhs), p.dst.1)
    };
    // SAFETY: forwarded from the caller (the transposed destination covers the same
    // values).
    unsafe { gemm(m, n, p.k, dst, row_stride, read, scale, a, b, threads) }
}
