//! The rotary embedding of one head's row on the widest vectors the selected path allows:
//! candle's arithmetic (`x₁·cos − x₂·sin`, `x₁·sin + x₂·cos`, each product rounded before
//! the sum, no fused multiply-add), so every path gives the same bits.
//!
//! Why here: the main crate is built for baseline x86-64, where these loops ran on 128-bit
//! vectors (2.4 % of the demo's samples for the interleaved pairs); compiled for the
//! selected path they take a quarter of the instructions.

use crate::cpu::Isa;

/// `src` rotated into `dst`: its adjacent pairs `(x[2i], x[2i+1])` by angle `i` where
/// `interleaved` (candle's `rope_i`), else its halves' pairs `(x[i], x[i + d/2])` (candle's
/// `rope`); `cos`, `sin` hold one value per pair.
pub fn rotate(
    level: Isa,
    interleaved: bool,
    src: &[f32],
    cos: &[f32],
    sin: &[f32],
    dst: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks.
        if level >= Isa::Avx512 {
            return unsafe { wide::avx512(interleaved, src, cos, sin, dst) };
        }
        if level >= Isa::Avx2 {
            return unsafe { wide::avx2(interleaved, src, cos, sin, dst) };
        }
    }
    let _ = level;
    plain(interleaved, src, cos, sin, dst);
}

#[inline(always)]
fn plain(interleaved: bool, src: &[f32], cos: &[f32], sin: &[f32], dst: &mut [f32]) {
    if interleaved {
        pairs(src, cos, sin, dst);
    } else {
        halves(src, cos, sin, dst);
    }
}

#[inline(always)]
fn pairs(src: &[f32], cos: &[f32], sin: &[f32], dst: &mut [f32]) {
    for (((x, y), &c), &s) in src
        .chunks_exact(2)
        .zip(dst.chunks_exact_mut(2))
        .zip(cos)
        .zip(sin)
    {
        y[0] = x[0] * c - x[1] * s;
        y[1] = x[0] * s + x[1] * c;
    }
}

#[inline(always)]
fn halves(src: &[f32], cos: &[f32], sin: &[f32], dst: &mut [f32]) {
    let half = cos.len();
    let (first, second) = src.split_at(half);
    let (out_first, out_second) = dst.split_at_mut(half);
    for i in 0..half {
        let (x1, x2, c, s) = (first[i], second[i], cos[i], sin[i]);
        out_first[i] = x1 * c - x2 * s;
        out_second[i] = x1 * s + x2 * c;
    }
}

/// The same loops compiled for wider vectors (Rust never fuses a product into a sum, so the
/// results keep their bits).
#[cfg(target_arch = "x86_64")]
mod wide {
    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512(
        interleaved: bool,
        src: &[f32],
        cos: &[f32],
        sin: &[f32],
        dst: &mut [f32],
    ) {
        super::plain(interleaved, src, cos, sin, dst)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn avx2(interleaved: bool, src: &[f32], cos: &[f32], sin: &[f32], dst: &mut [f32]) {
        super::plain(interleaved, src, cos, sin, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path this CPU runs gives the portable loops' bits, on rows of 64 and 256 values
    /// (Gemma 3's head) and one whose pairs do not fill a vector.
    #[test]
    fn every_path_gives_the_same_bits() {
        for head_dim in [6, 64, 256] {
            let half = head_dim / 2;
            let src: Vec<f32> = (0..head_dim)
                .map(|i| ((i * 37 % 11) as f32 - 5.3) * 0.71)
                .collect();
            let cos: Vec<f32> = (0..half).map(|i| (i as f32 * 0.37).cos()).collect();
            let sin: Vec<f32> = (0..half).map(|i| (i as f32 * 0.37).sin()).collect();
            let mut expected = (vec![0f32; head_dim], vec![0f32; head_dim]);
            pairs(&src, &cos, &sin, &mut expected.0);
            halves(&src, &cos, &sin, &mut expected.1);
            for level in Isa::runnable() {
                let mut got = (vec![0f32; head_dim], vec![0f32; head_dim]);
                rotate(level, true, &src, &cos, &sin, &mut got.0);
                rotate(level, false, &src, &cos, &sin, &mut got.1);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got.0),
                    bits(&expected.0),
                    "pairs, {level:?}, {head_dim}"
                );
                assert_eq!(
                    bits(&got.1),
                    bits(&expected.1),
                    "halves, {level:?}, {head_dim}"
                );
            }
        }
    }
}
