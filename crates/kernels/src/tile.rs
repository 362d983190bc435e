//! The int8 panels' weight layout, shared by the AVX-512 VNNI kernel ([`crate::vnni`]) and
//! the AMX one ([`crate::amx`], which reads it as its B operand): the stored block types it
//! reads and how their rows are laid out, 16 columns to a tile.

use crate::int8_rows::BLOCK;

/// Output columns laid out together: one 512-bit register of 32-bit lanes.
pub(crate) const TILE: usize = 16;
/// Groups of 4 consecutive values in a block (one `vpdpbusd` each).
pub(crate) const GROUPS: usize = BLOCK / 4;

/// One tile of 16 weight rows in the panel layout: per block, 8 groups of 64 bytes (4
/// codes of each column, column-major within the group), then the 16 scales and 16
/// minimums. Columns past the weight's last row are zero (and never written out).
///
/// Q6_K's blocks of 32 are two sub-blocks of 16 values with scales of their own and the
/// offset −32 in both: its tiles hold the first half's scales in `scales` and the second
/// half's in `minimums` ([`Blocks::halves`]), and the kernel subtracts 32 × each half's
/// activation code sum from that half's integer dot product.
///
/// 4-bit codes may be `packed`: per block 4 words of 64 bytes, the low nibbles of word `g`
/// group `g` and its high nibbles group `g + 4` (as Q4_1 stores them). Half the bytes to
/// read, which is what a decoding step waits for; the VNNI kernel splits the nibbles in
/// registers, AMX reads whole bytes only.
pub(crate) struct Tile {
    pub(crate) packed: bool,
    /// Whether its blocks have a scale per half ([`Blocks::halves`]), set by [`Tile::fill`].
    pub(crate) halves: bool,
    pub(crate) codes: Vec<u8>,
    pub(crate) scales: Vec<f32>,
    pub(crate) minimums: Vec<f32>,
}

/// Bytes per stored Q4_1 block (f16 scale, f16 minimum, 16 bytes of nibbles).
const Q4_1_BLOCK_BYTES: usize = 20;
/// Bytes per stored Q8_0 block (f16 scale, 32 signed codes).
const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes per stored Q5_0 block (f16 scale, 4 bytes of fifth bits, 16 bytes of nibbles).
const Q5_0_BLOCK_BYTES: usize = 22;
/// Values and bytes per stored Q4_K super block (f16 `d`, f16 `dmin`, 12 bytes of 6-bit
/// sub-block scales and minimums, 128 bytes of nibbles).
const Q4_K_VALUES: usize = 256;
const Q4_K_BLOCK_BYTES: usize = 144;
/// Values and bytes per stored Q6_K super block (128 bytes of low nibbles, 64 of high
/// 2-bit pairs, 16 signed 8-bit sub-block scales, f16 `d`).
const Q6_K_VALUES: usize = 256;
const Q6_K_BLOCK_BYTES: usize = 210;

/// The stored block types the panels multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    Q4_1,
    Q5_0,
    Q8_0,
    Q4K,
    Q6K,
}

impl Blocks {
    /// Bytes of one weight row of `k` values.
    pub(crate) fn row_bytes(self, k: usize) -> usize {
        match self {
            Blocks::Q4_1 => k / BLOCK * Q4_1_BLOCK_BYTES,
            Blocks::Q5_0 => k / BLOCK * Q5_0_BLOCK_BYTES,
            Blocks::Q8_0 => k / BLOCK * Q8_0_BLOCK_BYTES,
            Blocks::Q4K => k / Q4_K_VALUES * Q4_K_BLOCK_BYTES,
            Blocks::Q6K => k / Q6_K_VALUES * Q6_K_BLOCK_BYTES,
        }
    }

    /// Whether each block's two halves of 16 values have scales of their own (Q6_K: see
    /// [`Tile`]).
    pub(crate) fn halves(self) -> bool {
        self == Blocks::Q6K
    }

    /// Whether the codes are 4-bit (two fit a byte of the packed panel layout).
    pub(crate) fn nibbles(self) -> bool {
        matches!(self, Blocks::Q4_1 | Blocks::Q4K)
    }

    /// Whether rows of `k` values are whole stored blocks.
    pub fn fits(self, k: usize) -> bool {
        match self {
            Blocks::Q4_1 | Blocks::Q5_0 | Blocks::Q8_0 => k.is_multiple_of(BLOCK),
            Blocks::Q4K => k.is_multiple_of(Q4_K_VALUES),
            Blocks::Q6K => k.is_multiple_of(Q6_K_VALUES),
        }
    }
}

impl Tile {
    /// Bytes of one block's codes (8 words of 64 bytes, or 4 when packed).
    pub(crate) fn block_code_bytes(&self) -> usize {
        if self.packed {
            GROUPS / 2 * 64
        } else {
            GROUPS * 64
        }
    }

    pub(crate) fn new(blocks: usize, packed: bool) -> Self {
        let mut tile = Tile {
            packed,
            halves: false,
            codes: Vec::new(),
            scales: Vec::new(),
            minimums: Vec::new(),
        };
        tile.resize(blocks, packed);
        tile
    }

    /// Room for `blocks` blocks, packed or not (every byte is rewritten by [`Tile::fill`]).
    pub(crate) fn resize(&mut self, blocks: usize, packed: bool) {
        self.packed = packed;
        self.codes.resize(blocks * self.block_code_bytes(), 0);
        self.scales.resize(blocks * TILE, 0.0);
        self.minimums.resize(blocks * TILE, 0.0);
    }

    /// Weight rows `first..first + columns` (≤ 16) of `data` in the panel layout.
    pub(crate) fn fill(
        &mut self,
        kind: Blocks,
        data: &[u8],
        k: usize,
        first: usize,
        columns: usize,
    ) {
        let row_bytes = kind.row_bytes(k);
        self.halves = kind.halves();
        match kind {
            // SAFETY: callers hold `available()` (AVX-512 F/BW); the rows exist.
            Blocks::Q4_1 => unsafe { avx512::fill_q4_1(self, data, row_bytes, first, columns) },
            // SAFETY: as above.
            Blocks::Q8_0 => unsafe { avx512::fill_q8_0(self, data, row_bytes, first, columns) },
            // One column at a time: their scales are unpacked per column.
            Blocks::Q5_0 | Blocks::Q4K | Blocks::Q6K => {
                if columns < TILE {
                    self.codes.fill(0);
                    self.scales.fill(0.0);
                    self.minimums.fill(0.0);
                }
                for j in 0..columns {
                    let row = &data[(first + j) * row_bytes..(first + j + 1) * row_bytes];
                    match kind {
                        Blocks::Q5_0 => self.column_q5_0(j, row),
                        Blocks::Q4K => self.column_q4_k(j, row),
                        _ => self.column_q6_k(j, row),
                    }
                }
            }
        }
    }

    /// Column `j` of the tile from its weight `row` of Q5_0 data: codes `q` in 0…31 (the
    /// value is `d·(q − 16)`), offset `−16·d`.
    fn column_q5_0(&mut self, j: usize, row: &[u8]) {
        for (b, block) in row.chunks_exact(Q5_0_BLOCK_BYTES).enumerate() {
            let d = f16(block[0], block[1]);
            let fifth_bits = u32::from_le_bytes(block[2..6].try_into().expect("4 bytes"));
            let nibbles = &block[6..22];
            let mut codes = [0u8; BLOCK];
            for (i, code) in codes.iter_mut().enumerate() {
                // Value `i < 16` is the low nibble of byte `i`, value `16 + i` its high
                // nibble; bit `i` of the 32 fifth bits belongs to value `i`.
                let nibble = if i < 16 {
                    nibbles[i] & 0x0F
                } else {
                    nibbles[i - 16] >> 4
                };
                *code = nibble | (((fifth_bits >> i) & 1) as u8) << 4;
            }
            self.set_block(b, j, d, -16.0 * d, &codes);
        }
    }

    /// Column `j` of the tile from its weight `row` of Q6_K data: codes `q` in 0…63 (the
    /// value is `d·sc·(q − 32)`), the first half's scales `d·sc` in `scales`, the second
    /// half's in `minimums`.
    fn column_q6_k(&mut self, j: usize, row: &[u8]) {
        for (super_block, block) in row.chunks_exact(Q6_K_BLOCK_BYTES).enumerate() {
            let (low, rest) = block.split_at(128);
            let (high, rest) = rest.split_at(64);
            let (sub_scales, d) = rest.split_at(16);
            let d = f16(d[0], d[1]);
            let mut codes = [0u8; Q6_K_VALUES];
            for (i, code) in codes.iter_mut().enumerate() {
                // ggml's order: per 128 values, 4 runs of 32 from the low nibbles of
                // bytes 0..32, of 32..64, the high nibbles of 0..32, of 32..64; the
                // 2-bit pairs of byte `l` of the 32 high bytes at shifts 0, 2, 4, 6.
                let (half, run, l) = (i / 128, i % 128 / 32, i % 32);
                let byte = low[half * 64 + l + 32 * (run % 2)];
                let nibble = if run < 2 { byte & 0x0F } else { byte >> 4 };
                let pair = (high[half * 32 + l] >> (2 * run)) & 3;
                *code = nibble | pair << 4;
            }
            for b in 0..Q6_K_VALUES / BLOCK {
                let scale = |sub: usize| d * f32::from(sub_scales[sub] as i8);
                let block_codes = codes[b * BLOCK..(b + 1) * BLOCK]
                    .try_into()
                    .expect("a block");
                self.set_block(
                    super_block * 8 + b,
                    j,
                    scale(2 * b),
                    scale(2 * b + 1),
                    block_codes,
                );
            }
        }
    }

    /// Column `j` of the tile from its weight `row` of Q4_K data (its 6-bit sub-block scales
    /// unpacked).
    fn column_q4_k(&mut self, j: usize, row: &[u8]) {
        for (super_block, block) in row.chunks_exact(Q4_K_BLOCK_BYTES).enumerate() {
            let d = f16(block[0], block[1]);
            let dmin = f16(block[2], block[3]);
            let scales: &[u8; 12] = block[4..16].try_into().expect("12 bytes");
            for pair in 0..4 {
                let nibbles = &block[16 + 32 * pair..16 + 32 * (pair + 1)];
                for (half, shift) in [(0, 0), (1, 4)] {
                    let sub = 2 * pair + half;
                    let (scale, minimum) = q4_k_scale_min(sub, scales);
                    let mut codes = [0u8; BLOCK];
                    for (code, &byte) in codes.iter_mut().zip(nibbles) {
                        *code = (byte >> shift) & 0x0F;
                    }
                    self.set_block(
                        super_block * 8 + sub,
                        j,
                        d * f32::from(scale),
                        -dmin * f32::from(minimum),
                        &codes,
                    );
                }
            }
        }
    }

    /// Column `j`'s codes of block `b` into their groups (packed: group `g + 4` in the high
    /// nibbles of group `g`), with its scale and offset.
    fn set_block(&mut self, b: usize, j: usize, scale: f32, offset: f32, codes: &[u8; BLOCK]) {
        self.scales[b * TILE + j] = scale;
        self.minimums[b * TILE + j] = offset;
        let bytes = self.block_code_bytes();
        let packed = self.packed;
        let block = &mut self.codes[b * bytes..(b + 1) * bytes];
        for (g, four) in codes.chunks_exact(4).enumerate() {
            let word = &mut block[g % (bytes / 64) * 64 + j * 4..][..4];
            for (byte, &code) in word.iter_mut().zip(four) {
                // Groups 0..4 come first: their write clears what the high nibble joins.
                *byte = if packed && g >= GROUPS / 2 {
                    *byte | code << 4
                } else {
                    code
                };
            }
        }
    }
}

/// Sub-block `j`'s 6-bit scale and minimum of a Q4_K super block (ggml's
/// `get_scale_min_k4`).
fn q4_k_scale_min(j: usize, scales: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

fn f16(low: u8, high: u8) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([low, high])).to_f32()
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{GROUPS, Q4_1_BLOCK_BYTES, Q8_0_BLOCK_BYTES, TILE, Tile};

    /// The gather mask of a tile's first `columns` lanes and each lane's byte offset from
    /// the tile's first weight row (lane `j` at row `j`), shared by the Q4_1 and Q8_0
    /// layouts.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[target_feature(enable = "avx512f")]
    unsafe fn columns_to_gather(columns: usize, row_bytes: usize) -> (__mmask16, __m512i) {
        let lanes: __mmask16 = if columns >= TILE {
            0xFFFF
        } else {
            (1u16 << columns) - 1
        };
        let row_starts = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(row_bytes as i32),
        );
        (lanes, row_starts)
    }

    /// Lays out weight rows `first..first + columns` (≤ 16) of Q4_1 data in `tile`: value
    /// `i` of a block is the low nibble of byte `i`, value `16 + i` its high nibble, so the
    /// 4-byte word `g` of each column's 16 code bytes holds group `g` (low nibbles) and
    /// group `g + 4` (high nibbles): stored as they are in a packed tile, split otherwise.
    /// Columns past `columns` are zero.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW; `data` must hold rows `first..first +
    /// columns` of `row_bytes` bytes, and the tile `row_bytes / 20` blocks.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn fill_q4_1(
        tile: &mut Tile,
        data: &[u8],
        row_bytes: usize,
        first: usize,
        columns: usize,
    ) {
        // SAFETY: the gathers read only the first `columns` lanes (mask), each within
        // row `first + j` of `data`; the stores stay within the tile's blocks.
        unsafe {
            let blocks = row_bytes / Q4_1_BLOCK_BYTES;
            let base = data.as_ptr().add(first * row_bytes) as *const i32;
            let (lanes, row_starts) = columns_to_gather(columns, row_bytes);
            let low_nibbles = _mm512_set1_epi8(0x0F);
            let zero = _mm512_setzero_si512();
            for b in 0..blocks {
                let at =
                    _mm512_add_epi32(row_starts, _mm512_set1_epi32((b * Q4_1_BLOCK_BYTES) as i32));
                // The f16 scale (low half) and minimum (high half) of each column's block.
                let halves = _mm512_mask_i32gather_epi32::<1>(zero, lanes, at, base);
                let scales = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(halves));
                let minimums =
                    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(halves)));
                _mm512_storeu_ps(tile.scales.as_mut_ptr().add(b * TILE), scales);
                _mm512_storeu_ps(tile.minimums.as_mut_ptr().add(b * TILE), minimums);
                let codes = tile.codes.as_mut_ptr().add(b * tile.block_code_bytes());
                for g in 0..GROUPS / 2 {
                    let word = _mm512_add_epi32(at, _mm512_set1_epi32((4 + 4 * g) as i32));
                    let packed = _mm512_mask_i32gather_epi32::<1>(zero, lanes, word, base);
                    if tile.packed {
                        // Q4_1's own nibble order is the packed layout's.
                        _mm512_storeu_si512(codes.add(g * 64) as *mut _, packed);
                        continue;
                    }
                    let low = _mm512_and_si512(packed, low_nibbles);
                    let high = _mm512_and_si512(_mm512_srli_epi32::<4>(packed), low_nibbles);
                    _mm512_storeu_si512(codes.add(g * 64) as *mut _, low);
                    _mm512_storeu_si512(codes.add((g + GROUPS / 2) * 64) as *mut _, high);
                }
            }
        }
    }

    /// Lays out weight rows `first..first + columns` (≤ 16) of Q8_0 data in `tile`: the
    /// 4-byte word `g` of each column's 32 signed codes is group `g`, shifted into unsigned
    /// bytes (`q + 128`, by flipping each byte's top bit), its offset `−128·d`. Columns past
    /// `columns` are zero. One gather per group for all 16 columns, where a column-at-a-time
    /// loop spent a tenth of a checkpoint's prefill here.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and BW; `data` must hold rows `first..first +
    /// columns` of `row_bytes` bytes, and the tile `row_bytes / 34` blocks.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn fill_q8_0(
        tile: &mut Tile,
        data: &[u8],
        row_bytes: usize,
        first: usize,
        columns: usize,
    ) {
        // SAFETY: the gathers read only the first `columns` lanes (mask), each 4 bytes
        // within row `first + j` of `data` (a block's scale word ends inside its codes, its
        // last code word at the block's end); the stores stay within the tile's blocks.
        unsafe {
            let blocks = row_bytes / Q8_0_BLOCK_BYTES;
            let base = data.as_ptr().add(first * row_bytes) as *const i32;
            let (lanes, row_starts) = columns_to_gather(columns, row_bytes);
            let top_bits = _mm512_set1_epi8(0x80u8 as i8);
            let zero = _mm512_setzero_si512();
            let minus_128 = _mm512_set1_ps(-128.0);
            for b in 0..blocks {
                let at =
                    _mm512_add_epi32(row_starts, _mm512_set1_epi32((b * Q8_0_BLOCK_BYTES) as i32));
                // The f16 scale of each column's block (the low half of its first word).
                let halves = _mm512_mask_i32gather_epi32::<1>(zero, lanes, at, base);
                let scales = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(halves));
                _mm512_storeu_ps(tile.scales.as_mut_ptr().add(b * TILE), scales);
                _mm512_storeu_ps(
                    tile.minimums.as_mut_ptr().add(b * TILE),
                    _mm512_mul_ps(scales, minus_128),
                );
                let codes = tile.codes.as_mut_ptr().add(b * GROUPS * 64);
                for g in 0..GROUPS {
                    let word = _mm512_add_epi32(at, _mm512_set1_epi32((2 + 4 * g) as i32));
                    let signed = _mm512_mask_i32gather_epi32::<1>(zero, lanes, word, base);
                    // Lanes past `columns` stay zero (not 0x80): they are never written out.
                    let shifted = _mm512_maskz_xor_epi32(lanes, signed, top_bits);
                    _mm512_storeu_si512(codes.add(g * 64) as *mut _, shifted);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::Tile;

    /// Never called: [`crate::vnni::available`] is false off x86-64.
    pub unsafe fn fill_q4_1(_: &mut Tile, _: &[u8], _: usize, _: usize, _: usize) {
        unreachable!("AVX-512 panels on a CPU without AVX-512")
    }

    /// Never called: [`crate::vnni::available`] is false off x86-64.
    pub unsafe fn fill_q8_0(_: &mut Tile, _: &[u8], _: usize, _: usize, _: usize) {
        unreachable!("AVX-512 panels on a CPU without AVX-512")
    }
}
