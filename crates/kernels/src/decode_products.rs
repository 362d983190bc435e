//! The two products of a decoding step's attention, per (sequence, head) and new token: the
//! scores of the query against every cached key, and the values weighed by the softmax of
//! those scores. On AVX2 and above both run in full vector registers with the plain loops'
//! sums in the plain loops' order, so every path gives the same bits ([`crate::attention`]'s
//! tests compare them).

/// `scores[j] = query · key(j)`, 0 where the mask row has −∞: a masked key (the padding
/// before a short prompt, all but itself for a finished row) needs no dot product, the
/// mask's −∞ decides its score. On AVX2, eight keys at a time with the same sums in the
/// same order as [`dot`] (so the same bits): a call per key, 8-lane sums in half-width
/// registers and a horizontal sum each were 5 % of the demo's time.
pub(crate) fn score_keys<'a>(
    level: crate::cpu::Isa,
    query: &[f32],
    key: impl Fn(usize) -> &'a [f32],
    mask_row: Option<&[f32]>,
    scores: &mut [f32],
) {
    let masked = |j: usize| mask_row.is_some_and(|m| m[j] == f32::NEG_INFINITY);
    let mut j = 0;
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx2 && query.len().is_multiple_of(8) {
        while j + 8 <= scores.len() {
            if !(j..j + 8).all(masked) {
                for ahead in (j + AHEAD..j + AHEAD + 8).take_while(|&a| a < scores.len()) {
                    prefetch(key(ahead));
                }
                let keys: [&[f32]; 8] = std::array::from_fn(|i| key(j + i));
                // SAFETY: `cpu::isa` never selects a level the CPU lacks; the keys are
                // `query.len()` long (cache rows of `head_dim`).
                unsafe { avx2::dot8(query, &keys, &mut scores[j..j + 8]) };
            }
            j += 8;
        }
    }
    let _ = level;
    for (j, score) in scores.iter_mut().enumerate().skip(j) {
        if !masked(j) {
            *score = dot(query, key(j));
        }
    }
    for (j, score) in scores.iter_mut().enumerate() {
        if masked(j) {
            *score = 0.0;
        }
    }
}

/// How many keys ahead of the ones multiplied their rows are asked for: each sequence's
/// and head's keys are a run of their own, and the hardware's stream detection starts over
/// at each (and at every 4 KB page). Two calls of `dot8` ahead: 8 was too close to gain,
/// 32 lost again (the demo's long-answer tests: 3–5 % of their CPU time).
const AHEAD: usize = 16;

/// Asks the caches for `row`'s lines.
fn prefetch(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..row.len()).step_by(16) {
        // SAFETY: a prefetch never faults, and `at` is within the row.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                row.as_ptr().add(at).cast(),
            )
        };
    }
}

/// `output += Σⱼ probs[j] · value(j)` over the keys of nonzero probability, each element's
/// terms added in key order (the same bits on every path).
pub(crate) fn weigh_values<'a>(
    level: crate::cpu::Isa,
    probs: &[f32],
    value: impl Fn(usize) -> &'a [f32],
    output: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if level >= crate::cpu::Isa::Avx2 && output.len().is_multiple_of(32) {
        // SAFETY: as in `score_keys`; the value rows are `output.len()` long.
        unsafe { avx2::weigh_values(probs, value, output) };
        return;
    }
    let _ = level;
    for (j, &p) in probs.iter().enumerate() {
        if p == 0.0 {
            continue;
        }
        for (o, &x) in output.iter_mut().zip(value(j)) {
            *o += p * x;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// `out[i] = query · keys[i]` for 8 keys: per key the 8 running sums of [`super::dot`]
    /// (lane `l` sums the products of elements `l`, `l + 8`, …, multiplied then added, in
    /// order), then added lane 0 to 7 in order, the 8 keys at once after a transpose.
    ///
    /// # Safety
    /// The CPU must support AVX2; `query.len()` must be a multiple of 8 and every key at
    /// least as long.
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot8(query: &[f32], keys: &[&[f32]; 8], out: &mut [f32]) {
        // SAFETY: the loads stay within `query` and each key (the caller's contract), the
        // store within `out` (8 values).
        unsafe {
            let mut sums = [_mm256_setzero_ps(); 8];
            for at in (0..query.len()).step_by(8) {
                let q = _mm256_loadu_ps(query.as_ptr().add(at));
                for (sum, key) in sums.iter_mut().zip(keys) {
                    let k = _mm256_loadu_ps(key.as_ptr().add(at));
                    *sum = _mm256_add_ps(*sum, _mm256_mul_ps(q, k));
                }
            }
            // Transpose: lane `i` of `lanes[l]` is lane `l` of key `i`'s sums.
            let [r0, r1, r2, r3, r4, r5, r6, r7] = sums;
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let lanes = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            let mut total = lanes[0];
            for lane in &lanes[1..] {
                total = _mm256_add_ps(total, *lane);
            }
            _mm256_storeu_ps(out.as_mut_ptr(), total);
        }
    }

    /// [`super::weigh_values`] 64 elements at a time (32 where the rows are not whole 64s),
    /// their sums in registers across the keys: 8 independent sums per key keep both adders
    /// busy, where 4 waited on the add's latency.
    ///
    /// # Safety
    /// The CPU must support AVX2; `output.len()` must be a multiple of 32 and every value
    /// row at least as long.
    #[target_feature(enable = "avx2")]
    pub unsafe fn weigh_values<'a>(
        probs: &[f32],
        value: impl Fn(usize) -> &'a [f32],
        output: &mut [f32],
    ) {
        // SAFETY: forwarded (the caller's contract).
        unsafe {
            if output.len().is_multiple_of(64) {
                weigh_values_by::<8>(probs, value, output)
            } else {
                weigh_values_by::<4>(probs, value, output)
            }
        }
    }

    /// [`weigh_values`] with `VECTORS` sums of 8 in registers.
    ///
    /// # Safety
    /// As [`weigh_values`]; `output.len()` a multiple of `8 · VECTORS`.
    #[target_feature(enable = "avx2")]
    unsafe fn weigh_values_by<'a, const VECTORS: usize>(
        probs: &[f32],
        value: impl Fn(usize) -> &'a [f32],
        output: &mut [f32],
    ) {
        // SAFETY: the loads and stores stay within `output` and each value row (the
        // caller's contract).
        unsafe {
            for at in (0..output.len()).step_by(8 * VECTORS) {
                let out = output.as_mut_ptr().add(at);
                let mut sums: [__m256; VECTORS] =
                    std::array::from_fn(|i| _mm256_loadu_ps(out.add(8 * i)));
                for (j, &p) in probs.iter().enumerate() {
                    if p == 0.0 {
                        continue;
                    }
                    if at == 0 && j + super::AHEAD < probs.len() {
                        super::prefetch(value(j + super::AHEAD));
                    }
                    let weight = _mm256_set1_ps(p);
                    let row = value(j).as_ptr().add(at);
                    for (i, sum) in sums.iter_mut().enumerate() {
                        let x = _mm256_loadu_ps(row.add(8 * i));
                        *sum = _mm256_add_ps(*sum, _mm256_mul_ps(weight, x));
                    }
                }
                for (i, sum) in sums.iter().enumerate() {
                    _mm256_storeu_ps(out.add(8 * i), *sum);
                }
            }
        }
    }
}

/// Eight running sums so that the compiler keeps them in one vector register.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; 8];
    let (a_blocks, a_rest) = a.split_at(a.len() / 8 * 8);
    let (b_blocks, b_rest) = b.split_at(a_blocks.len());
    for (x, y) in a_blocks.chunks_exact(8).zip(b_blocks.chunks_exact(8)) {
        for i in 0..8 {
            sums[i] += x[i] * y[i];
        }
    }
    let mut total: f32 = sums.iter().sum();
    for (x, y) in a_rest.iter().zip(b_rest) {
        total += x * y;
    }
    total
}
