//! Quantized matmuls of many activation rows (a prompt's prefill) as int8 panels on AVX-512
//! VNNI: the weights of 16 output columns are laid out once per call so that one
//! `vpdpbusd` multiplies 4 consecutive weights of each of the 16 columns by the same 4
//! activation bytes (broadcast), and every activation row of a pass reuses the loaded
//! weights from a register.
//!
//! Four stored block types share the layout, since each is, per run of 32 weights, a
//! scale, an offset and unsigned codes: Q4_1 (`d·q + m`, q < 16), Q5_0 (`d·q − 16·d`, q <
//! 32), Q8_0 (`d·(q + 128) − 128·d`: the signed codes shifted into the unsigned operand of
//! `vpdpbusd`) and Q4_K (`d·sc·q − dmin·m` per 32-value sub-block of its 256-value super
//! block). The offset meets the activations through their scaled code sum (`d·Σq`), so one
//! kernel serves all four: Q4_1 with the sum rounded to f16 as llama.cpp's q8_1 stores it,
//! the others with the exact sum (a large offset would magnify the rounding). Q6_K
//! (`d·sc·(q − 32)`, q < 64, a scale per 16 values) has a scale per half of each run of 32:
//! the kernel's two integer sums per block are its halves, each less 32 × its activation
//! code sum (exact integers) before its scale (see [`crate::tile::Tile`]).
//!
//! Why: on AVX2 a prefill expands the blocks to f32 and runs an f32 GEMM (8 multiply-adds
//! per FMA lane group, 4 bytes read per weight). Here a block of 32 weights × 16 columns ×
//! one row is 8 `vpdpbusd` (512 multiply-adds) plus 5 vector operations for the block's
//! scales, on the same 8-bit activations and integer sums as the decoding kernel and
//! llama.cpp's q4_1 × q8_1. The integer sum of a block is exact, so the only difference
//! from [`crate::q4_1`]'s scalar reference is the order of the float additions.
//!
//! Of those 5, the multiply and the two FMAs share the two ports `vpdpbusd` runs on (on Zen
//! 4: 12 `vpdpbusd` take 3.35 ns alone, 4.19 ns with 3 FMAs beside them, and unchanged with a
//! conversion or 8 integer adds), so the kernel can reach at most 8 / 11 of the `vpdpbusd`
//! peak; the nibble splitting of packed tiles ([`crate::tile`]) runs on the free ports.
//!
//! A weight is laid out either per call ([`matmul`], for `PANEL_ROWS` rows or more) or once
//! for every later call ([`LaidOut`], for any number of rows: a decoding step's few rows
//! too, where laying out each call's tiles cost more than the products).

use std::borrow::Cow;

use rayon::prelude::*;

use crate::int8_rows::{Activations, BLOCK};
pub use crate::tile::Blocks;
use crate::tile::{GROUPS, TILE, Tile};

/// Activation rows multiplied per pass over a tile (8 integer and 8 float accumulators
/// stay in registers, out of 32).
const ROWS_PER_PASS: usize = 8;

/// Rows from which a product runs as panels: below, the column-wise kernels (which read
/// each weight block once per row pass without laying it out) are as fast.
pub const PANEL_ROWS: usize = 8;

/// Whether the selected path multiplies the panels on AMX tiles.
fn on_amx() -> bool {
    crate::cpu::isa() >= crate::cpu::Isa::Amx
}

/// Whether `kind`'s codes are laid out two to a byte: 4-bit codes multiplied on VNNI (AMX
/// reads whole bytes).
fn packs(kind: Blocks, amx: bool) -> bool {
    kind.nibbles() && !amx
}

/// Whether this CPU runs the panels (on the path [`crate::cpu::isa`] selected).
pub fn available() -> bool {
    crate::cpu::isa() >= crate::cpu::Isa::Avx512
}

/// `xs Wᵀ` for weights `W` (`n` rows of `k`) stored as `kind` blocks and activations
/// quantized per block of 32; row-major `(rows, n)`, on AMX tiles where the selected path
/// is `amx`. Callers check [`available`].
pub fn matmul(
    kind: Blocks,
    data: &[u8],
    n: usize,
    k: usize,
    xs: &Activations,
    rows: usize,
) -> Vec<f32> {
    let amx = on_amx();
    matmul_with(amx, kind, data, n, k, xs, rows)
}

/// [`matmul`] with the choice of AMX made by the caller (tests and benches run both
/// paths on a CPU that has AMX).
pub fn matmul_with(
    amx: bool,
    kind: Blocks,
    data: &[u8],
    n: usize,
    k: usize,
    xs: &Activations,
    rows: usize,
) -> Vec<f32> {
    assert!(available(), "the int8 panels need AVX-512 VNNI");
    assert!(
        !amx || crate::cpu::amx_usable(),
        "AMX tiles are not usable here"
    );
    assert!(kind.fits(k), "width {k} is not whole {kind:?} blocks");
    assert_eq!(data.len(), n * kind.row_bytes(k), "{kind:?} storage size");
    assert_eq!(xs.q.len(), rows * k, "activation size");
    let code_sums = code_sums(kind, xs);
    let amx = amx_for(amx, kind);
    multiply_tiles(amx, n, rows, |t, multiply| {
        TILE_BUFFER.with_borrow_mut(|tile| {
            tile.resize(k / BLOCK, packs(kind, amx));
            let first = t * TILE;
            tile.fill(kind, data, k, first, TILE.min(n - first));
            multiply(tile, None, xs, &code_sums);
        })
    })
}

/// The activations' per-block code sums the offset term of `kind` meets: rounded to f16 for
/// Q4_1 (as llama.cpp's q8_1 stores them), exact for the others; for Q6_K, whose halves
/// have scales of their own, 32 × the integer code sum of each half (two per block).
fn code_sums(kind: Blocks, xs: &Activations) -> Cow<'_, [f32]> {
    match kind {
        Blocks::Q4_1 => Cow::Borrowed(&xs.s),
        Blocks::Q6K => Cow::Owned(
            xs.q.chunks_exact(BLOCK / 2)
                .map(|half| 32.0 * half.iter().map(|&q| i32::from(q)).sum::<i32>() as f32)
                .collect(),
        ),
        Blocks::Q5_0 | Blocks::Q8_0 | Blocks::Q4K => Cow::Borrowed(&xs.sums),
    }
}

/// Whether the panels of `kind` run on AMX tiles where the selected path is `amx`: the AMX
/// kernel has one scale per block, so Q6_K's halves run on the VNNI kernel (which every
/// AMX CPU has).
fn amx_for(amx: bool, kind: Blocks) -> bool {
    amx && !kind.halves()
}

/// The `(rows, n)` output of every 16-column tile, on the pool: `with_tile(t, multiply)`
/// hands tile `t` (with the activations and their code sums) to `multiply`, which runs
/// every row pass of it and writes the tile's columns.
fn multiply_tiles<F>(amx: bool, n: usize, rows: usize, with_tile: F) -> Vec<f32>
where
    F: Fn(usize, &mut dyn FnMut(&Tile, Option<&Tile>, &Activations, &[f32])) + Sync,
{
    // Every value is written below (each tile's columns for every row): no zeroing.
    let mut out: Vec<f32> = Vec::with_capacity(rows * n);
    let target = SharedOut(out.as_mut_ptr());
    (0..n.div_ceil(TILE)).into_par_iter().for_each(|t| {
        let first = t * TILE;
        let columns = TILE.min(n - first);
        with_tile(t, &mut |tile, ahead, xs, code_sums| {
            let passes = if amx {
                crate::amx::ROWS_PER_PASS
            } else {
                ROWS_PER_PASS
            };
            let mut panel = [[0f32; TILE]; crate::amx::ROWS_PER_PASS];
            let mut row = 0;
            while row < rows {
                let count = passes.min(rows - row);
                // SAFETY: the callers asserted `available()` (and for AMX
                // `cpu::amx_usable()`); rows `row..row + count` exist in `xs` and the tile
                // holds `k / 32` blocks.
                unsafe {
                    if amx {
                        crate::amx::pass(tile, xs, code_sums, row, count, &mut panel);
                    } else {
                        // The first pass streams the tile from memory and asks for the
                        // next one's as it goes; later passes find the tile in cache.
                        let ahead = if row == 0 { ahead } else { None };
                        avx512::panel(tile, ahead, xs, code_sums, row, count, &mut panel);
                    }
                }
                for (r, values) in panel.iter().take(count).enumerate() {
                    // SAFETY: this task alone writes columns `first..first + columns`.
                    unsafe {
                        let at = target.at((row + r) * n + first);
                        if columns == TILE {
                            // One 64-byte store, not a call to memmove per row (3 % of
                            // the demo's samples went to those calls).
                            at.cast::<[f32; TILE]>().write_unaligned(*values);
                        } else {
                            std::ptr::copy_nonoverlapping(values.as_ptr(), at, columns);
                        }
                    }
                }
                row += count;
            }
        })
    });
    // SAFETY: the tiles cover columns 0..n and each wrote them for rows 0..rows.
    unsafe { out.set_len(rows * n) };
    out
}

/// A weight laid out once in the panel layout, tile after tile, for every later product:
/// no layout per call, so the panels also pay for a decoding step's few rows, where
/// laying out each call's tiles cost more than the products.
///
/// Costs memory: half a byte per 4-bit code (a byte where AMX reads them, and for Q8_0) and
/// two f32 per block of 32 per column: 0.75 bytes per Q4_1 weight against the stored
/// blocks' 0.625 (which the engine then drops), all of it read by each decoding step.
pub struct LaidOut {
    kind: Blocks,
    n: usize,
    k: usize,
    packed: bool,
    tiles: Vec<Tile>,
}

impl std::fmt::Debug for LaidOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaidOut({:?}, {} × {})", self.kind, self.n, self.k)
    }
}

impl LaidOut {
    /// Weights `W` (`n` rows of `k`) stored as `kind` blocks, laid out on the pool: 4-bit
    /// codes packed two to a byte unless this CPU multiplies on AMX tiles (which read
    /// whole bytes). Callers check [`available`].
    pub fn new(kind: Blocks, data: &[u8], n: usize, k: usize) -> Self {
        let amx = on_amx();
        Self::with_packing(kind, data, n, k, packs(kind, amx))
    }

    /// Bytes a laid-out weight of `n × k` `kind` values takes (what [`LaidOut::new`]
    /// allocates on this CPU).
    pub fn bytes(kind: Blocks, n: usize, k: usize) -> usize {
        let amx = on_amx();
        let code_bytes = if packs(kind, amx) { k / 2 } else { k };
        n.div_ceil(TILE) * TILE * (code_bytes + k / BLOCK * 8)
    }

    /// [`LaidOut::new`] with the packing chosen by the caller (tests and benches run both
    /// layouts).
    pub fn with_packing(kind: Blocks, data: &[u8], n: usize, k: usize, packed: bool) -> Self {
        assert!(available(), "the int8 panels need AVX-512 VNNI");
        assert!(!packed || kind.nibbles(), "{kind:?} codes do not pack");
        assert!(kind.fits(k), "width {k} is not whole {kind:?} blocks");
        assert_eq!(data.len(), n * kind.row_bytes(k), "{kind:?} storage size");
        let tiles = (0..n.div_ceil(TILE))
            .into_par_iter()
            .map(|t| {
                let mut tile = Tile::new(k / BLOCK, packed);
                let first = t * TILE;
                tile.fill(kind, data, k, first, TILE.min(n - first));
                tile
            })
            .collect();
        LaidOut {
            kind,
            n,
            k,
            packed,
            tiles,
        }
    }

    /// `(n, k)`: output columns and input width.
    pub fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// `xs Wᵀ`, row-major `(rows, n)`, for any number of rows (on AMX tiles where the
    /// selected path is `amx`).
    pub fn matmul(&self, xs: &Activations, rows: usize) -> Vec<f32> {
        let amx = on_amx();
        self.matmul_with(amx, xs, rows)
    }

    /// [`LaidOut::matmul`] with the choice of AMX made by the caller.
    pub fn matmul_with(&self, amx: bool, xs: &Activations, rows: usize) -> Vec<f32> {
        self.product(amx, true, xs, rows)
    }

    /// [`LaidOut::matmul_with`] without asking for the next tile's bytes while a tile is
    /// multiplied (the `panels` bench's baseline).
    pub fn matmul_unprefetched(&self, amx: bool, xs: &Activations, rows: usize) -> Vec<f32> {
        self.product(amx, false, xs, rows)
    }

    /// The product; with `ahead`, each tile's first row pass asks for the next tile's bytes
    /// block by block. A decoding step's few rows wait on memory otherwise: every tile is
    /// three allocations of its own, so the hardware's stream detection starts over at
    /// each (a step of 6 rows through SmolLM2's 30 layers: 12.3 → 7.1 ms, 1 row 9.0 → 4.4 ms).
    fn product(&self, amx: bool, ahead: bool, xs: &Activations, rows: usize) -> Vec<f32> {
        assert!(
            !amx || crate::cpu::amx_usable(),
            "AMX tiles are not usable here"
        );
        assert!(
            !amx || !self.packed,
            "AMX reads whole code bytes: this weight was laid out packed, for VNNI"
        );
        assert_eq!(xs.q.len(), rows * self.k, "activation size");
        let code_sums = code_sums(self.kind, xs);
        let amx = amx_for(amx, self.kind);
        multiply_tiles(amx, self.n, rows, |t, multiply| {
            let later = self.tiles.get(t + 1).filter(|_| ahead);
            multiply(&self.tiles[t], later, xs, &code_sums)
        })
    }
}

thread_local! {
    /// Each pool thread's tile, reused from call to call (a prefill makes hundreds).
    static TILE_BUFFER: std::cell::RefCell<Tile> = std::cell::RefCell::new(Tile::new(0, false));
}

/// The output matrix, written by every tile's task at its own columns.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: tasks write disjoint columns (one tile of 16 each), and the vector outlives the
// parallel loop that writes it.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The value at `index` (a method, so closures capture the whole wrapper, which is
    /// `Sync`, rather than its raw pointer field).
    fn at(self, index: usize) -> *mut f32 {
        self.0.wrapping_add(index)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Activations, BLOCK, GROUPS, TILE, Tile};

    /// The panel's rows: as many as an AMX pass fills, of which a VNNI pass fills ≤ 8.
    const PANEL: usize = crate::amx::ROWS_PER_PASS;

    /// Rows `first..first + count` (≤ 8) against one tile: `panel[r][j] = w_j · x_r`,
    /// asking for the bytes of `ahead` (the tile multiplied next) on the way.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW, VL and VNNI; the rows must exist in `xs` and the
    /// tile must hold `xs.blocks_per_row` blocks.
    pub unsafe fn panel(
        tile: &Tile,
        ahead: Option<&Tile>,
        xs: &Activations,
        code_sums: &[f32],
        first: usize,
        count: usize,
        panel: &mut [[f32; TILE]; PANEL],
    ) {
        // Only a tile of the same shape: the prefetches address it block by block.
        let ahead = ahead.filter(|later| {
            later.codes.len() == tile.codes.len() && later.scales.len() == tile.scales.len()
        });
        // SAFETY: forwarded from the caller.
        unsafe {
            match (tile.packed, tile.halves) {
                (true, _) => {
                    panel_of::<true, false>(tile, ahead, xs, code_sums, first, count, panel)
                }
                (false, false) => {
                    panel_of::<false, false>(tile, ahead, xs, code_sums, first, count, panel)
                }
                (false, true) => {
                    panel_of::<false, true>(tile, ahead, xs, code_sums, first, count, panel)
                }
            }
        }
    }

    /// [`panel`] for a tile whose codes are `PACKED` or not, with a scale per block or per
    /// `HALVES`.
    ///
    /// # Safety
    /// As [`panel`]; `tile.packed == PACKED`, `tile.halves == HALVES` (never both).
    unsafe fn panel_of<const PACKED: bool, const HALVES: bool>(
        tile: &Tile,
        ahead: Option<&Tile>,
        xs: &Activations,
        code_sums: &[f32],
        first: usize,
        count: usize,
        panel: &mut [[f32; TILE]; PANEL],
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match count {
                8 => rows::<8, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                7 => rows::<7, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                6 => rows::<6, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                5 => rows::<5, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                4 => rows::<4, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                3 => rows::<3, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                2 => rows::<2, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
                _ => rows::<1, PACKED, HALVES>(tile, ahead, xs, code_sums, first, panel),
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn rows<const R: usize, const PACKED: bool, const HALVES: bool>(
        tile: &Tile,
        ahead: Option<&Tile>,
        xs: &Activations,
        code_sums: &[f32],
        first: usize,
        panel: &mut [[f32; TILE]; PANEL],
    ) {
        // SAFETY: every pointer below stays within the tile's `blocks` blocks and the
        // activation rows `first..first + R` (the caller's contract).
        unsafe {
            let per_row = xs.blocks_per_row;
            let codes = tile.codes.as_ptr();
            let q = xs.q.as_ptr();
            let mut sums = [_mm512_setzero_ps(); R];
            for b in 0..per_row {
                // Two integer sums per row, one per half of the block's groups: each chain
                // of dependent `vpdpbusd` is 4 long instead of 8, so the 2R chains in flight
                // keep both ports busy where R chains of 8 waited on the instruction's
                // latency.
                let mut low = [_mm512_setzero_si512(); R];
                let mut high = [_mm512_setzero_si512(); R];
                let block_codes = codes.add(b * tile.block_code_bytes());
                // The same block of the tile ahead, into L2 (into L1 it evicted this
                // tile's lines and ran slower), as much as this block reads.
                if let Some(later) = ahead {
                    let at = later.codes.as_ptr().add(b * tile.block_code_bytes());
                    for line in (0..tile.block_code_bytes()).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T1>(at.add(line).cast());
                    }
                    _mm_prefetch::<_MM_HINT_T1>(later.scales.as_ptr().add(b * TILE).cast());
                    _mm_prefetch::<_MM_HINT_T1>(later.minimums.as_ptr().add(b * TILE).cast());
                }
                let word = |r: usize, g: usize| {
                    let x = q.add(((first + r) * per_row + b) * BLOCK + 4 * g) as *const i32;
                    _mm512_set1_epi32(x.read_unaligned())
                };
                if PACKED {
                    // Word `g` holds group `g` (low nibbles) and `g + 4` (high): split in
                    // registers, on ports the dot products leave free.
                    let low_nibbles = _mm512_set1_epi8(0x0F);
                    for g in 0..GROUPS / 2 {
                        let both = _mm512_loadu_si512(block_codes.add(g * 64) as *const _);
                        let first_half = _mm512_and_si512(both, low_nibbles);
                        let second_half =
                            _mm512_and_si512(_mm512_srli_epi16::<4>(both), low_nibbles);
                        for r in 0..R {
                            low[r] = _mm512_dpbusd_epi32(low[r], first_half, word(r, g));
                            high[r] =
                                _mm512_dpbusd_epi32(high[r], second_half, word(r, g + GROUPS / 2));
                        }
                    }
                } else {
                    for (half, dots) in [(0, &mut low), (1, &mut high)] {
                        for g in half * GROUPS / 2..(half + 1) * GROUPS / 2 {
                            let weights = _mm512_loadu_si512(block_codes.add(g * 64) as *const _);
                            for (r, dot) in dots.iter_mut().enumerate() {
                                *dot = _mm512_dpbusd_epi32(*dot, weights, word(r, g));
                            }
                        }
                    }
                }
                let scales = _mm512_loadu_ps(tile.scales.as_ptr().add(b * TILE));
                let minimums = _mm512_loadu_ps(tile.minimums.as_ptr().add(b * TILE));
                for (r, sum) in sums.iter_mut().enumerate() {
                    let index = (first + r) * per_row + b;
                    if HALVES {
                        // Each half's `Σ q·x − 32·Σ x` (exact integers below 2^24, so exact
                        // as floats too) times its scale, the sum times the block's `d`.
                        let half = |dot: __m512i, at: usize| {
                            _mm512_sub_ps(
                                _mm512_cvtepi32_ps(dot),
                                _mm512_set1_ps(*code_sums.get_unchecked(at)),
                            )
                        };
                        let first_half = _mm512_mul_ps(half(low[r], 2 * index), scales);
                        let both =
                            _mm512_fmadd_ps(half(high[r], 2 * index + 1), minimums, first_half);
                        *sum =
                            _mm512_fmadd_ps(both, _mm512_set1_ps(*xs.d.get_unchecked(index)), *sum);
                        continue;
                    }
                    let dot = _mm512_add_epi32(low[r], high[r]);
                    let scale = _mm512_mul_ps(scales, _mm512_set1_ps(*xs.d.get_unchecked(index)));
                    *sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *sum);
                    *sum = _mm512_fmadd_ps(
                        minimums,
                        _mm512_set1_ps(*code_sums.get_unchecked(index)),
                        *sum,
                    );
                }
            }
            for (values, sum) in panel.iter_mut().zip(sums) {
                _mm512_storeu_ps(values.as_mut_ptr(), sum);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::{Activations, TILE, Tile};

    /// Never called: [`super::available`] is false off x86-64.
    pub unsafe fn panel(
        _: &Tile,
        _: Option<&Tile>,
        _: &Activations,
        _: &[f32],
        _: usize,
        _: usize,
        _: &mut [[f32; TILE]; crate::amx::ROWS_PER_PASS],
    ) {
        unreachable!("AVX-512 panels on a CPU without AVX-512")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    use crate::q4_1::tests::random;

    /// Every block type's panels equal the product of candle's own dequantized weights
    /// with the 8-bit activations (each `d·q`): the integer sums are exact, so what is left
    /// is float order and the f16 rounding of the activations' code sums (bounded below). Partial tiles
    /// (n not a multiple of 16) and partial row passes (rows not a multiple of 8) included.
    #[test]
    fn panels_equal_the_dequantized_product() {
        if !available() {
            eprintln!("this CPU has no AVX-512 VNNI: the panels never run here");
            return;
        }
        for (dtype, kind, n, k, rows) in [
            (GgmlDType::Q4_1, Blocks::Q4_1, 37, 576, 11),
            // More than one 16-row AMX pass, the last one partial.
            (GgmlDType::Q4_1, Blocks::Q4_1, 16, 64, 35),
            (GgmlDType::Q8_0, Blocks::Q8_0, 35, 640, 9),
            (GgmlDType::Q5_0, Blocks::Q5_0, 19, 640, 10),
            (GgmlDType::Q4K, Blocks::Q4K, 21, 512, 13),
            (GgmlDType::Q6K, Blocks::Q6K, 21, 512, 13),
        ] {
            let weight = Tensor::from_vec(random(n, k, 5), (n, k), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&weight, dtype).unwrap();
            let data = q.data().unwrap().to_vec();
            let dense = q
                .dequantize(&Device::Cpu)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let lhs = random(rows, k, 9);
            let xs = Activations::quantize(&lhs, k);
            for amx in [false, true] {
                if amx && !crate::cpu::amx_usable() {
                    eprintln!("no usable AMX tiles here: the VNNI path only");
                    continue;
                }
                let ours = matmul_with(amx, kind, &data, n, k, &xs, rows);
                // Laid out once, the same products to the bit, and for fewer rows too.
                let laid_out = LaidOut::with_packing(kind, &data, n, k, false);
                assert_eq!(
                    laid_out.matmul_with(amx, &xs, rows),
                    ours,
                    "{kind:?} laid out"
                );
                // Asking for the next tile's bytes changes no value.
                assert_eq!(
                    laid_out.matmul_unprefetched(amx, &xs, rows),
                    ours,
                    "{kind:?} laid out, tile by tile"
                );
                // 4-bit codes packed two to a byte (VNNI only): the same integer sums.
                if packs(kind, amx) {
                    let packed = LaidOut::with_packing(kind, &data, n, k, true);
                    assert_eq!(
                        packed.matmul_with(false, &xs, rows),
                        ours,
                        "{kind:?} packed"
                    );
                    let few = Activations::quantize(&lhs[..5 * k], k);
                    assert_eq!(
                        packed.matmul_with(false, &few, 5),
                        ours[..5 * n],
                        "{kind:?} packed, 5 rows"
                    );
                }
                let few = Activations::quantize(&lhs[..3 * k], k);
                assert_eq!(
                    laid_out.matmul_with(amx, &few, 3),
                    ours[..3 * n],
                    "{kind:?} laid out, 3 rows"
                );
                for r in 0..rows {
                    for c in 0..n {
                        let exact: f32 = (0..k)
                            .map(|i| {
                                let x = xs.d[(r * k + i) / BLOCK] * f32::from(xs.q[r * k + i]);
                                x * dense[c * k + i]
                            })
                            .sum();
                        // The offset term meets `s = f16(d·Σq)`: half an f16 ulp (2^-11 of
                        // |s|) per block, times the block's largest weight at most.
                        let rounding: f32 = (0..k / BLOCK)
                            .map(|b| {
                                let block = r * k / BLOCK + b;
                                let largest = dense[c * k + b * BLOCK..c * k + (b + 1) * BLOCK]
                                    .iter()
                                    .fold(0f32, |m, w| m.max(w.abs()));
                                let rounded = if kind == Blocks::Q4_1 {
                                    xs.s[block]
                                } else {
                                    0.0
                                };
                                rounded.abs() * largest / 2048.0
                            })
                            .sum();
                        let got = ours[r * n + c];
                        assert!(
                            (got - exact).abs() <= rounding + 1e-4 * exact.abs().max(1.0),
                            "{kind:?} amx {amx} ({r}, {c}): panel {got} vs {exact} (rounding {rounding})"
                        );
                    }
                }
            }
        }
    }
}
