//! The arithmetic peak of each kernel path's inner instruction, from register-only loops
//! (no memory traffic): the roofline `cargo bench --bench prefill` states prefill rates
//! against. Not used by the engine.

use crate::cpu::Isa;

/// Iterations of one loop: about a quarter second on one core, long enough for the clock
/// to settle.
const ITERATIONS: usize = 10_000_000;
/// Independent accumulators: enough to hide each instruction's latency.
const CHAINS: usize = 12;

/// Multiply-adds per second of the path's inner instruction on every core at once, a
/// thread each: what the cores deliver now (the benches print it beside their wall times,
/// since a shared machine's cores vary).
pub fn on_every_core(isa: Isa) -> f64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = std::time::Instant::now();
    let total: f64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..cores)
            .map(|_| scope.spawn(move || multiply_adds(isa)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("peak loop"))
            .sum()
    });
    total / started.elapsed().as_secs_f64()
}

/// Runs the path's inner instruction on this thread and returns the multiply-adds done:
/// `tdpbsud` on full 16 × 64-byte tiles (16,384 int8 products each) for `amx`, 512-bit
/// `vpdpbusd` (64) for `avx512`, 256-bit FMAs (8 f32 products) for `avx2`, scalar f32
/// multiply-adds for `portable`.
pub fn multiply_adds(isa: Isa) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `cpu::isa` never selects a level the CPU lacks, and callers pass it
        // (`amx` only where `cpu::amx_usable` granted the tiles).
        #[cfg(target_os = "linux")]
        if isa >= Isa::Amx {
            return unsafe { x86::amx() };
        }
        if isa >= Isa::Avx512 {
            return unsafe { x86::vnni512() };
        }
        if isa >= Isa::Avx2 {
            return unsafe { x86::fma256() };
        }
    }
    let _ = isa;
    let mut acc = [0f32; CHAINS];
    for i in 0..ITERATIONS {
        for chain in &mut acc {
            *chain = std::hint::black_box(*chain).mul_add(1.000_001, i as f32);
        }
    }
    std::hint::black_box(acc);
    (ITERATIONS * CHAINS) as f64
}

/// Multiply-adds of 512-bit f32 FMAs (16 products each: the f32 gemm's instruction on
/// AVX-512) on this thread, where the CPU has AVX-512F.
pub fn f32_512_multiply_adds() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the loop runs only where the CPU has its instruction.
    let done = std::is_x86_feature_detected!("avx512f").then(|| unsafe { x86::fma512() });
    #[cfg(not(target_arch = "x86_64"))]
    let done = None;
    done
}

/// Multiply-adds of 512-bit `vdpbf16ps` (32 bf16 products each, [`crate::bf16`]) on this
/// thread, where the CPU has AVX-512 BF16.
pub fn bf16_multiply_adds() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the loop runs only where the CPU has its instruction.
    let done = crate::bf16::native().then(|| unsafe { x86::bf16_512() });
    #[cfg(not(target_arch = "x86_64"))]
    let done = None;
    done
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{CHAINS, ITERATIONS};

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn vnni512() -> f64 {
        let a = _mm512_set1_epi32(0x0101_0101);
        let b = _mm512_set1_epi32(0x0102_0304);
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..ITERATIONS {
            for chain in &mut acc {
                *chain = _mm512_dpbusd_epi32(*chain, a, b);
            }
        }
        std::hint::black_box(acc);
        (ITERATIONS * CHAINS * 64) as f64
    }

    /// Four independent accumulator tiles, each `tmm_c += tmm1 · tmm2` per step.
    #[cfg(target_os = "linux")]
    pub unsafe fn amx() -> f64 {
        #[repr(C, align(64))]
        struct TileConfig([u8; 64]);
        let mut config = TileConfig([0; 64]);
        config.0[0] = 1;
        for tile in 0..6 {
            // 16 rows of 64 bytes each.
            config.0[16 + 2 * tile] = 64;
            config.0[48 + tile] = 16;
        }
        let steps = ITERATIONS / 16;
        // SAFETY: the configuration is valid, and the tiles are only zeroed and multiplied.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly));
            std::arch::asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "tilezero tmm4",
                "tilezero tmm5",
                "2:",
                "tdpbsud tmm0, tmm4, tmm5",
                "tdpbsud tmm1, tmm4, tmm5",
                "tdpbsud tmm2, tmm4, tmm5",
                "tdpbsud tmm3, tmm4, tmm5",
                "dec {steps}",
                "jnz 2b",
                "tilerelease",
                steps = inout(reg) steps => _,
                options(nostack, nomem),
            );
        }
        (steps * 4 * 16 * 16 * 64) as f64
    }

    #[target_feature(enable = "avx512f")]
    pub fn fma512() -> f64 {
        let a = _mm512_set1_ps(1.000_001);
        let b = _mm512_set1_ps(1e-9);
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..ITERATIONS {
            for chain in &mut acc {
                *chain = _mm512_fmadd_ps(*chain, a, b);
            }
        }
        std::hint::black_box(acc);
        (ITERATIONS * CHAINS * 16) as f64
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub fn bf16_512() -> f64 {
        // SAFETY: plain bit patterns reinterpreted (bf16 pairs of 1.0 and 0.5).
        let (a, b): (__m512bh, __m512bh) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(0x3f80_3f80)),
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(0x3f00_3f00)),
            )
        };
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..ITERATIONS {
            for chain in &mut acc {
                *chain = _mm512_dpbf16_ps(*chain, a, b);
            }
        }
        std::hint::black_box(acc);
        (ITERATIONS * CHAINS * 32) as f64
    }

    #[target_feature(enable = "avx2,fma")]
    pub fn fma256() -> f64 {
        let a = _mm256_set1_ps(1.000_001);
        let b = _mm256_set1_ps(1e-9);
        let mut acc = [_mm256_setzero_ps(); CHAINS];
        for _ in 0..ITERATIONS {
            for chain in &mut acc {
                *chain = _mm256_fmadd_ps(*chain, a, b);
            }
        }
        std::hint::black_box(acc);
        (ITERATIONS * CHAINS * 8) as f64
    }
}
