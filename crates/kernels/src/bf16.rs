//! f32 matrix products computed on bfloat16 operands with f32 sums: `C (+)= s · A B`, the
//! products of training's bf16 mode (`contaminate --precision bf16`), on AVX-512 BF16
//! (`vdpbf16ps`: 32 bf16 products into 16 f32 lanes per instruction, twice the f32 FMA's
//! multiply-adds) or on portable loops with the same rounding of the operands.
//!
//! Operands arrive as f32 at any strides and are rounded to bf16 (to nearest, ties to even,
//! as PyTorch's autocast casts) while they are packed: `A` in groups of [`MR`] rows, `B` in
//! panels of [`NR`] columns, both with the two values of a pair of `k` side by side because
//! `vdpbf16ps` multiplies pairs. Each thread owns whole panels of `B` (and so whole columns
//! of `C`), packs them itself, and walks `k` in blocks that keep its panel in L1 while the
//! packed `A` (shared, packed once on every core) streams from L2.

use rayon::prelude::*;

mod pack;

use pack::{pack_a, pack_b_panel};

/// Rows of `C` a tile computes (one broadcast of `A` each per pair of `k`).
pub const MR: usize = 8;
/// Columns of `C` a tile computes: two 16-lane vectors.
pub const NR: usize = 32;
/// Pairs of `k` per block: a panel's block is `KC · NR · 4` bytes = 16 KiB, half of L1.
const KC: usize = 128;

/// One operand as f32 values at `(row, column)` strides in elements.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub ptr: *const f32,
    pub row_stride: isize,
    pub col_stride: isize,
}

// SAFETY: an operand is only read, and the caller of [`gemm`] keeps it alive and unchanged
// for the call.
unsafe impl Send for Operand {}
unsafe impl Sync for Operand {}

impl Operand {
    /// The first value of row `row`.
    ///
    /// # Safety
    /// The row is inside the operand.
    unsafe fn row(&self, row: usize) -> *const f32 {
        // SAFETY: forwarded from the caller.
        unsafe { self.ptr.offset(row as isize * self.row_stride) }
    }

    /// The first value of column `col`.
    ///
    /// # Safety
    /// The column is inside the operand.
    unsafe fn column(&self, col: usize) -> *const f32 {
        // SAFETY: forwarded from the caller.
        unsafe { self.ptr.offset(col as isize * self.col_stride) }
    }

    /// # Safety
    /// `(row, col)` is inside the operand.
    #[inline(always)]
    unsafe fn at(&self, row: usize, col: usize) -> f32 {
        // SAFETY: forwarded from the caller.
        unsafe {
            *self
                .ptr
                .offset(row as isize * self.row_stride + col as isize * self.col_stride)
        }
    }
}

/// The destination of a product: row-major at `row_stride` (columns dense).
#[derive(Clone, Copy)]
struct Destination(*mut f32, isize);

// SAFETY: threads write disjoint columns of the destination ([`gemm`]).
unsafe impl Send for Destination {}
unsafe impl Sync for Destination {}

impl Destination {
    /// # Safety
    /// `(row, col)` is inside the destination.
    unsafe fn at(&self, row: usize, col: usize) -> *mut f32 {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.offset(row as isize * self.1 + col as isize) }
    }
}

/// Whether this CPU multiplies bf16 pairs natively (AVX-512 BF16 beside the AVX-512 level
/// the kernels run at; `TABCONTAM_CPU=avx2` or lower turns it off).
pub fn native() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static BF16: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *BF16.get_or_init(|| std::is_x86_feature_detected!("avx512bf16"))
            && crate::cpu::isa() >= crate::cpu::Isa::Avx512
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `x` rounded to bf16 (to nearest, ties to even; NaN stays NaN), as its 16 high bits.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounding = 0x7fff + ((bits >> 16) & 1);
    let rounded = (bits.wrapping_add(rounding) >> 16) as u16;
    // A select rather than a branch, so that packing loops vectorize.
    let nan = (bits & 0x7fff_ffff) > 0x7f80_0000;
    if nan {
        (bits >> 16) as u16 | 0x40
    } else {
        rounded
    }
}

/// The f32 value of a bf16.
#[inline(always)]
pub fn from_bf16(x: u16) -> f32 {
    f32::from_bits((x as u32) << 16)
}

/// Two bf16 as one packed pair, the first in the low half (what `vdpbf16ps` multiplies
/// with the low half of the other operand's pair).
#[inline(always)]
fn pair(first: f32, second: f32) -> u32 {
    to_bf16(first) as u32 | (to_bf16(second) as u32) << 16
}

/// `dst (m × n, row stride dst_row_stride) = scale · A B (+ dst when read)` for `A`
/// `(m × k)` and `B` `(k × n)`, on `threads` cores of the current rayon pool, the
/// operands rounded to bf16 and the sums kept in f32.
///
/// # Safety
/// `dst` has room for `m × n` values at its row stride (and holds initialised ones when
/// `read`); the operands hold `m × k` and `k × n` values at their strides; nothing else
/// writes `dst` or the operands during the call.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_row_stride: isize,
    read: bool,
    scale: f32,
    a: Operand,
    b: Operand,
    threads: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        product(
            m,
            Destination(dst, dst_row_stride),
            read,
            scale,
            a,
            Right::Unpacked { b, k, n },
            threads,
        )
    }
}

/// A `(k × n)` right operand packed once for several products (the output head's weight,
/// multiplied by every chunk of rows of a step): the panels [`gemm`] packs per call.
pub struct PackedB {
    panels: Vec<u32>,
    k: usize,
    n: usize,
}

// SAFETY: plain owned values.
unsafe impl Sync for PackedB {}

impl PackedB {
    /// Packs `b` `(k × n)` on `threads` cores.
    ///
    /// # Safety
    /// `b` holds `k × n` values at its strides.
    pub unsafe fn new(b: Operand, k: usize, n: usize, threads: usize) -> Self {
        let panel = k.div_ceil(2) * NR;
        let mut panels = vec![0u32; n.div_ceil(NR) * panel];
        let fill = |(index, out): (usize, &mut [u32])| {
            let first = index * NR;
            // SAFETY: the panel's columns are inside `B` (the caller's promise).
            unsafe { pack_b_panel(b, k, first, NR.min(n - first), out) };
        };
        if threads > 1 {
            panels
                .par_chunks_mut(panel.max(1))
                .enumerate()
                .for_each(fill);
        } else {
            panels.chunks_mut(panel.max(1)).enumerate().for_each(fill);
        }
        PackedB { panels, k, n }
    }

    /// `dst (m × n) = scale · A B (+ dst when read)`, as [`gemm`] with this `B`.
    ///
    /// # Safety
    /// As [`gemm`], for `A` `(m × k)` of this operand's `k`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn multiply(
        &self,
        m: usize,
        dst: *mut f32,
        dst_row_stride: isize,
        read: bool,
        scale: f32,
        a: Operand,
        threads: usize,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            product(
                m,
                Destination(dst, dst_row_stride),
                read,
                scale,
                a,
                Right::Packed(self),
                threads,
            )
        }
    }
}

/// The right operand of a product: packed per panel by the thread that owns it, or ahead.
#[derive(Clone, Copy)]
enum Right<'a> {
    Unpacked { b: Operand, k: usize, n: usize },
    Packed(&'a PackedB),
}

impl Right<'_> {
    fn dims(&self) -> (usize, usize) {
        match *self {
            Right::Unpacked { k, n, .. } => (k, n),
            Right::Packed(packed) => (packed.k, packed.n),
        }
    }
}

/// [`gemm`] with either kind of right operand.
///
/// # Safety
/// As [`gemm`].
unsafe fn product(
    m: usize,
    dst: Destination,
    read: bool,
    scale: f32,
    a: Operand,
    right: Right,
    threads: usize,
) {
    let (k, n) = right.dims();
    if m == 0 || n == 0 {
        return;
    }
    let pairs = k.div_ceil(2);
    let groups = m.div_ceil(MR);
    let packed_a = pack_a(a, m, k, groups, pairs, threads);
    let panels = n.div_ceil(NR);
    let native = native();
    let run = |range: std::ops::Range<usize>| {
        let mut own = Vec::new();
        for panel in range {
            let first = panel * NR;
            let cols = NR.min(n - first);
            let packed_b: &[u32] = match right {
                Right::Unpacked { b, .. } => {
                    own.resize(pairs * NR, 0);
                    // SAFETY: the panel's columns are inside `B` (`first + cols ≤ n`).
                    unsafe { pack_b_panel(b, k, first, cols, &mut own) };
                    &own
                }
                Right::Packed(packed) => &packed.panels[panel * pairs * NR..][..pairs * NR],
            };
            let mut start = 0;
            while start < pairs {
                let block = KC.min(pairs - start);
                for group in 0..groups {
                    let row = group * MR;
                    let tile = Tile {
                        a: &packed_a[(group * pairs + start) * MR..][..block * MR],
                        b: &packed_b[start * NR..][..block * NR],
                        rows: MR.min(m - row),
                        cols,
                        // SAFETY: the tile's top-left corner is inside `dst`.
                        dst: unsafe { dst.at(row, first) },
                        dst_row_stride: dst.1,
                        add: read || start > 0,
                        scale,
                    };
                    // SAFETY: the tile's rows and columns are inside `dst`, which only this
                    // thread writes in these columns.
                    unsafe { tile.compute(native) };
                }
                start += block;
            }
        }
    };
    let threads = threads.clamp(1, panels);
    if threads == 1 {
        run(0..panels);
        return;
    }
    let per = panels.div_ceil(threads);
    (0..threads).into_par_iter().for_each(|t| {
        run(t * per..((t + 1) * per).min(panels));
    });
}

/// One block of `k` for one [`MR`] × [`NR`] tile of `C`.
struct Tile<'a> {
    a: &'a [u32],
    b: &'a [u32],
    rows: usize,
    cols: usize,
    dst: *mut f32,
    dst_row_stride: isize,
    /// Add to what `dst` holds (a later block, or the caller's `read`).
    add: bool,
    scale: f32,
}

impl Tile<'_> {
    /// # Safety
    /// `rows × cols` values at `dst` (row stride `dst_row_stride`) are writable, and
    /// readable when `add`.
    unsafe fn compute(&self, native: bool) {
        #[cfg(target_arch = "x86_64")]
        if native {
            // SAFETY: the CPU has AVX-512 BF16 ([`native`]); the rest is forwarded.
            return unsafe { self.avx512() };
        }
        let _ = native;
        let mut sums = [[0f32; NR]; MR];
        for (a, b) in self.a.chunks_exact(MR).zip(self.b.chunks_exact(NR)) {
            for (sums, &a) in sums.iter_mut().zip(a) {
                let (a0, a1) = (from_bf16(a as u16), from_bf16((a >> 16) as u16));
                for (sum, &b) in sums.iter_mut().zip(b) {
                    // Each product of two bf16 is exact in f32.
                    *sum += a0 * from_bf16(b as u16);
                    *sum += a1 * from_bf16((b >> 16) as u16);
                }
            }
        }
        for (r, sums) in sums.iter().enumerate().take(self.rows) {
            for (c, &sum) in sums.iter().enumerate().take(self.cols) {
                // SAFETY: inside the tile (the caller's promise).
                unsafe {
                    let out = self
                        .dst
                        .offset(r as isize * self.dst_row_stride + c as isize);
                    *out = if self.add { *out } else { 0.0 } + self.scale * sum;
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
    unsafe fn avx512(&self) {
        use std::arch::x86_64::*;
        let mut low = [_mm512_setzero_ps(); MR];
        let mut high = [_mm512_setzero_ps(); MR];
        let pairs = self.b.len() / NR;
        let (a, b) = (self.a.as_ptr(), self.b.as_ptr());
        for p in 0..pairs {
            // SAFETY: `p < pairs`: the block holds `pairs · NR` values of `B` and
            // `pairs · MR` of `A`.
            unsafe {
                let b0: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    b.add(p * NR).cast(),
                ));
                let b1: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    b.add(p * NR + 16).cast(),
                ));
                for r in 0..MR {
                    let a: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                        *a.add(p * MR + r) as i32,
                    ));
                    low[r] = _mm512_dpbf16_ps(low[r], a, b0);
                    high[r] = _mm512_dpbf16_ps(high[r], a, b1);
                }
            }
        }
        let scale = _mm512_set1_ps(self.scale);
        let mask_low: __mmask16 = if self.cols >= 16 {
            0xffff
        } else {
            (1u32 << self.cols) as u16 - 1
        };
        let mask_high: __mmask16 = if self.cols >= NR {
            0xffff
        } else if self.cols > 16 {
            (1u32 << (self.cols - 16)) as u16 - 1
        } else {
            0
        };
        for r in 0..self.rows {
            // SAFETY: the masks keep the loads and stores inside the tile's columns.
            unsafe {
                let out = self.dst.offset(r as isize * self.dst_row_stride);
                let (mut lo, mut hi) =
                    (_mm512_mul_ps(low[r], scale), _mm512_mul_ps(high[r], scale));
                if self.add {
                    lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(mask_low, out));
                    hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(mask_high, out.add(16)));
                }
                _mm512_mask_storeu_ps(out, mask_low, lo);
                _mm512_mask_storeu_ps(out.add(16), mask_high, hi);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// The product of the bf16-rounded operands in f64, row-major `(m, n)`.
    fn reference(
        a: &[f32],
        b: &[f32],
        m: usize,
        n: usize,
        k: usize,
        a_t: bool,
        b_t: bool,
    ) -> Vec<f64> {
        let round = |x: f32| from_bf16(to_bf16(x)) as f64;
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|l| {
                        let x = if a_t { a[l * m + i] } else { a[i * k + l] };
                        let y = if b_t { b[j * k + l] } else { b[l * n + j] };
                        round(x) * round(y)
                    })
                    .sum();
            }
        }
        out
    }

    #[test]
    fn rounding_to_bf16_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one, 1.
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(from_bf16(to_bf16(f32::INFINITY)), f32::INFINITY);
    }

    /// Every orientation, partial tiles in every direction, odd `k`, several `k` blocks,
    /// `read` and `scale`, on one and two threads, `B` packed per call or ahead: within f32 summation error of the
    /// rounded operands' exact product, on the path this CPU takes and the portable one.
    #[test]
    fn products_match_the_rounded_operands_exact_product() {
        let shapes = [
            (1, 1, 1),
            (7, 5, 3),
            (9, 33, 17),
            (16, 64, 300),
            (37, 70, 513),
        ];
        for (m, n, k) in shapes {
            for (a_t, b_t) in [(false, false), (false, true), (true, false), (true, true)] {
                let a = seeded(m * k, 1 + m as u64);
                let b = seeded(k * n, 2 + n as u64);
                let operand =
                    |values: &[f32], rows: usize, cols: usize, transposed: bool| Operand {
                        ptr: values.as_ptr(),
                        row_stride: if transposed { 1 } else { cols as isize },
                        col_stride: if transposed { rows as isize } else { 1 },
                    };
                let expected = reference(&a, &b, m, n, k, a_t, b_t);
                for (threads, packed) in [(1, false), (2, false), (1, true), (2, true)] {
                    for read in [false, true] {
                        let start = seeded(m * (n + 3), 9);
                        let mut dst = start.clone();
                        // SAFETY: `dst` is `m × (n + 3)` (a row stride wider than `n`), the
                        // operands hold their values at the strides given.
                        unsafe {
                            let (a, b) = (operand(&a, m, k, a_t), operand(&b, k, n, b_t));
                            let stride = (n + 3) as isize;
                            if packed {
                                PackedB::new(b, k, n, threads).multiply(
                                    m,
                                    dst.as_mut_ptr(),
                                    stride,
                                    read,
                                    0.5,
                                    a,
                                    threads,
                                )
                            } else {
                                gemm(m, n, k, dst.as_mut_ptr(), stride, read, 0.5, a, b, threads)
                            }
                        };
                        for i in 0..m {
                            for j in 0..n + 3 {
                                let got = dst[i * (n + 3) + j] as f64;
                                let before = start[i * (n + 3) + j] as f64;
                                if j >= n {
                                    assert_eq!(got, before, "column {j} past n written");
                                    continue;
                                }
                                let want =
                                    0.5 * expected[i * n + j] + if read { before } else { 0.0 };
                                let tolerance = 1e-6 * (k as f64) + 1e-6;
                                assert!(
                                    (got - want).abs() <= tolerance,
                                    "{m}x{n}x{k} a_t={a_t} b_t={b_t} threads={threads} packed={packed} read={read} \
                                     ({i},{j}): {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The portable tile and the one this CPU takes agree (the same tile where the CPU
    /// has no AVX-512 BF16).
    #[test]
    fn portable_and_native_tiles_agree() {
        let (pairs, rows, cols) = (KC + 3, 5, 21);
        let a: Vec<u32> = seeded(pairs * MR * 2, 3)
            .chunks(2)
            .map(|p| pair(p[0], p[1]))
            .collect();
        let b: Vec<u32> = seeded(pairs * NR * 2, 4)
            .chunks(2)
            .map(|p| pair(p[0], p[1]))
            .collect();
        let mut outputs = [vec![1f32; MR * NR], vec![1f32; MR * NR]];
        for (native, out) in [false, native()].into_iter().zip(outputs.iter_mut()) {
            let tile = Tile {
                a: &a,
                b: &b,
                rows,
                cols,
                dst: out.as_mut_ptr(),
                dst_row_stride: NR as isize,
                add: true,
                scale: 2.0,
            };
            // SAFETY: `out` is a whole `MR × NR` tile.
            unsafe { tile.compute(native) };
        }
        for (x, y) in outputs[0].iter().zip(&outputs[1]) {
            assert!((x - y).abs() <= 1e-4, "{x} vs {y}");
        }
        assert_eq!(outputs[0][rows * NR], 1.0, "rows past the tile's untouched");
    }
}
