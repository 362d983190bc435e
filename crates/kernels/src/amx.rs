//! The int8 panels on AMX tiles (Intel Xeon since Sapphire Rapids): one `tdpbsud` multiplies
//! 16 activation rows by the 32 codes of a block of 16 weight columns (8,192 multiply-adds),
//! where AVX-512 VNNI needs 128 `vpdpbusd`. The weight tile keeps [`crate::vnni`]'s layout
//! (per block, 8 groups of 4 codes × 16 columns: exactly the B operand AMX wants), the
//! activations are loaded straight from their rows, and the block's scales are applied in
//! AVX-512 registers as on the VNNI path, so both paths sum the same integers. Q6_K's tiles
//! (a scale per half block) run on the VNNI kernel instead (`vnni::amx_for`).
//!
//! Linux hands out the tile registers only to a process that asks
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`): [`crate::cpu::amx_usable`] asks once, and a
//! refusal (an old kernel, a sandbox) leaves the CPU on the VNNI path.

use crate::int8_rows::{Activations, BLOCK};
use crate::tile::{GROUPS, TILE, Tile};

/// Activation rows per tile pass (the tile registers' 16 rows).
pub(crate) const ROWS_PER_PASS: usize = 16;

/// Rows `first..first + count` (≤ 16) against one tile: `panel[r][j] = w_j · x_r`.
///
/// # Safety
/// [`crate::cpu::amx_usable`] must be true; the rows must exist in `xs`, the tile must hold
/// `xs.blocks_per_row` blocks of whole code bytes (not packed), and `code_sums` must be one
/// of `xs`'s sums.
pub(crate) unsafe fn pass(
    tile: &Tile,
    xs: &Activations,
    code_sums: &[f32],
    first: usize,
    count: usize,
    panel: &mut [[f32; TILE]; ROWS_PER_PASS],
) {
    assert!(
        !tile.packed,
        "AMX reads whole code bytes, not packed nibbles"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from the caller.
    unsafe {
        x86::pass(tile, xs, code_sums, first, count, panel)
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!(
        "AMX on a CPU without it: {tile:p} {xs:p} {code_sums:p} {first} {count} {panel:p}"
    );
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{Activations, BLOCK, GROUPS, ROWS_PER_PASS, TILE, Tile};

    /// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
    #[repr(C, align(64))]
    struct TileConfig {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        bytes_per_row: [u16; 16],
        rows: [u8; 16],
    }

    /// # Safety
    /// See [`super::pass`].
    pub unsafe fn pass(
        tile: &Tile,
        xs: &Activations,
        code_sums: &[f32],
        first: usize,
        count: usize,
        panel: &mut [[f32; TILE]; ROWS_PER_PASS],
    ) {
        // A constant row count keeps the 16 accumulators in registers.
        macro_rules! dispatch {
            ($($rows:literal)*) => {
                match count {
                    $($rows => unsafe { rows::<$rows>(tile, xs, code_sums, first, panel) },)*
                    _ => unreachable!("{count} rows in an AMX pass"),
                }
            };
        }
        dispatch!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn rows<const R: usize>(
        tile: &Tile,
        xs: &Activations,
        code_sums: &[f32],
        first: usize,
        panel: &mut [[f32; TILE]; ROWS_PER_PASS],
    ) {
        let count = R;
        let per_row = xs.blocks_per_row;
        let k = per_row * BLOCK;
        let mut config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        // Two sets of tiles, used by alternate blocks so that the tile unit multiplies one
        // block while the vector unit scales the previous one: tmm0 and tmm3 the sums
        // (`count` rows × 16 int32), tmm1 and tmm4 the activations (`count` rows × 32
        // bytes: one block), tmm2 and tmm5 the weights (8 groups × 16 columns × 4 bytes).
        for set in [0, 3] {
            config.bytes_per_row[set..set + 3].copy_from_slice(&[64, BLOCK as u16, 64]);
            config.rows[set..set + 3].copy_from_slice(&[count as u8, count as u8, GROUPS as u8]);
        }
        #[repr(C, align(64))]
        struct Dots([[i32; TILE]; ROWS_PER_PASS]);
        let mut dots = Dots([[0; TILE]; ROWS_PER_PASS]);
        let mut sums = [_mm512_setzero_ps(); R];
        let activations = |b: usize| xs.q.as_ptr().wrapping_add(first * k + b * BLOCK);
        let weights = |b: usize| tile.codes.as_ptr().wrapping_add(b * GROUPS * 64);
        // SAFETY: the tile loads read `count` rows of 32 bytes at stride `k` from row
        // `first` of the activations (within `xs.q`) and 8 rows of 64 bytes of block `b` of
        // the tile; the stores write `count` rows of 64 bytes into `dots`.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly));
            for b in 0..=per_row {
                // Start block `b` on the set of its parity...
                if b < per_row {
                    if b % 2 == 0 {
                        asm!(
                            "tilezero tmm0",
                            "tileloadd tmm1, [{a} + {a_stride} * 1]",
                            "tileloadd tmm2, [{w} + {w_stride} * 1]",
                            "tdpbsud tmm0, tmm1, tmm2",
                            a = in(reg) activations(b),
                            a_stride = in(reg) k,
                            w = in(reg) weights(b),
                            w_stride = in(reg) 64usize,
                            options(nostack, readonly),
                        );
                    } else {
                        asm!(
                            "tilezero tmm3",
                            "tileloadd tmm4, [{a} + {a_stride} * 1]",
                            "tileloadd tmm5, [{w} + {w_stride} * 1]",
                            "tdpbsud tmm3, tmm4, tmm5",
                            a = in(reg) activations(b),
                            a_stride = in(reg) k,
                            w = in(reg) weights(b),
                            w_stride = in(reg) 64usize,
                            options(nostack, readonly),
                        );
                    }
                }
                // ...then scale the previous one while it runs.
                if b == 0 {
                    continue;
                }
                let previous = b - 1;
                if previous % 2 == 0 {
                    asm!(
                        "tilestored [{d} + {d_stride} * 1], tmm0",
                        d = in(reg) dots.0.as_mut_ptr(),
                        d_stride = in(reg) 64usize,
                        options(nostack),
                    );
                } else {
                    asm!(
                        "tilestored [{d} + {d_stride} * 1], tmm3",
                        d = in(reg) dots.0.as_mut_ptr(),
                        d_stride = in(reg) 64usize,
                        options(nostack),
                    );
                }
                let scales = _mm512_loadu_ps(tile.scales.as_ptr().add(previous * TILE));
                let minimums = _mm512_loadu_ps(tile.minimums.as_ptr().add(previous * TILE));
                for (r, (sum, dot)) in sums.iter_mut().zip(&dots.0).enumerate() {
                    let index = (first + r) * per_row + previous;
                    let scale = _mm512_mul_ps(scales, _mm512_set1_ps(*xs.d.get_unchecked(index)));
                    let dot = _mm512_cvtepi32_ps(_mm512_loadu_si512(dot.as_ptr() as *const _));
                    *sum = _mm512_fmadd_ps(dot, scale, *sum);
                    *sum = _mm512_fmadd_ps(
                        minimums,
                        _mm512_set1_ps(*code_sums.get_unchecked(index)),
                        *sum,
                    );
                }
            }
            asm!("tilerelease", options(nostack, nomem));
            for (values, sum) in panel.iter_mut().zip(sums) {
                _mm512_storeu_ps(values.as_mut_ptr(), sum);
            }
        }
    }
}
