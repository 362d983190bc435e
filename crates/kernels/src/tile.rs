//! The int8 panels' weight layout, shared by the AVX-512 VNNI kernel ([`crate::vnni`], which
//! fills it) and the AMX one ([`crate::amx`], which reads it as its B operand).

use crate::int8_rows::BLOCK;

/// Output columns laid out together: one 512-bit register of 32-bit lanes.
pub(crate) const TILE: usize = 16;
/// Groups of 4 consecutive values in a block (one `vpdpbusd` each).
pub(crate) const GROUPS: usize = BLOCK / 4;

/// One tile of 16 weight rows in the panel layout: per block, 8 groups of 64 bytes (4
/// codes of each column, column-major within the group), then the 16 scales and 16
/// minimums. Columns past the weight's last row are zero (and never written out).
pub(crate) struct Tile {
    pub(crate) codes: Vec<u8>,
    pub(crate) scales: Vec<f32>,
    pub(crate) minimums: Vec<f32>,
}
