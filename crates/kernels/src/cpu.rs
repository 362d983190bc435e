//! Which instruction set the kernels run: detected once from the CPU at run time, or forced
//! with `TABCONTAM_CPU` so that every path can be tested on one machine (CI runs the
//! parity tests on each path this CPU can take, see `tests/local_inference.rs`).
//!
//! One binary runs on every x86-64 machine: nothing here depends on compile-time target
//! features. What is chosen at run time on x86-64:
//!
//! - These kernels: `amx` (AMX tiles for the prefill's int8 panels, [`crate::amx`], where
//!   the CPU has them and Linux grants them), `avx512` (AVX-512 F/BW/VL with VNNI:
//!   `vpdpbusd`, 64 unsigned×signed byte products into 16 int32 lanes, for the int8 panels
//!   of [`crate::vnni`] and the quantizer), `avx2` (AVX2+FMA+F16C; prefills expand the
//!   weights for an f32 GEMM) or portable loops. `TABCONTAM_CPU` forces one.
//! - Every f32 matmul (candle's, through the `gemm` crate: training's projections and output
//!   head, inference's f32 and dequantized weights): AVX-512F when present, else FMA (AVX2),
//!   else scalar. The root Cargo.toml turns on gemm's `x86-v4` feature, which compiles its
//!   AVX-512 kernels beside the others; gemm picks among them with
//!   `is_x86_feature_detected!` on its first call. `TABCONTAM_CPU` does not reach it.
//! - The training loops of [`crate::train`] and [`crate::adamw`]: plain Rust that the
//!   compiler vectorizes for the baseline target (SSE2); they are a small share of a
//!   training step beside the matmuls.
//! - candle's AVX-512 repacked kernels are reached only through candle's own quantized
//!   matmul, which `src/infer` never calls for the block types it handles.

use std::sync::OnceLock;

/// The environment variable that forces a path: `auto` (the default), `amx`, `avx512`,
/// `avx2` or `portable`.
pub const CPU_ENV: &str = "TABCONTAM_CPU";

/// An instruction-set level of the kernels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust loops (any CPU), on the same integer sums as the SIMD levels.
    Portable,
    /// AVX2 with FMA and F16C integer dot products (x86-64-v3).
    Avx2,
    /// AVX-512 (F, BW, VL) with VNNI byte dot products, on top of AVX2.
    Avx512,
    /// AMX tiles (TILE, INT8) for the prefill panels, on top of AVX-512, where Linux grants
    /// this process the tile registers.
    Amx,
}

impl Isa {
    /// Every level, lowest first.
    pub const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Amx];

    /// The name `TABCONTAM_CPU` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Amx => "amx",
        }
    }

    /// The levels this CPU can run, lowest first (the last one is what `auto` picks).
    pub fn runnable() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|&isa| isa <= detected())
            .collect()
    }
}

/// The best level this CPU supports.
pub fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                if amx_usable() {
                    return Isa::Amx;
                }
                return Isa::Avx512;
            }
            return Isa::Avx2;
        }
        Isa::Portable
    })
}

/// The level named by `TABCONTAM_CPU` (`None` for unset or `auto`), or a one-line error
/// naming the variable and the values it takes.
pub fn forced() -> Result<Option<Isa>, String> {
    let Some(value) = std::env::var_os(CPU_ENV) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    let value = value.trim();
    if value.is_empty() || value.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    let names: Vec<&str> = Isa::ALL.iter().map(|isa| isa.name()).collect();
    let Some(isa) = Isa::ALL
        .into_iter()
        .find(|isa| isa.name().eq_ignore_ascii_case(value))
    else {
        return Err(format!(
            "{CPU_ENV}={value} is not a kernel path: use auto, {}",
            names.join(", ")
        ));
    };
    if isa > detected() {
        return Err(format!(
            "{CPU_ENV}={value}, but this CPU runs at most `{}`: unset {CPU_ENV} or pick one of {}",
            detected().name(),
            Isa::runnable()
                .iter()
                .map(|isa| isa.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(Some(isa))
}

/// The level the kernels use: the forced one when `TABCONTAM_CPU` names a valid level,
/// else the detected one. Callers that load a model check [`forced`] first so that a bad
/// value is an error, not a silent fallback.
pub fn isa() -> Isa {
    static SELECTED: OnceLock<Isa> = OnceLock::new();
    *SELECTED.get_or_init(|| forced().ok().flatten().unwrap_or_else(detected))
}

/// Whether the CPU has AMX-TILE and AMX-INT8, the OS saves their state, and Linux granted
/// this process the tile registers (asked once, on the first call).
pub fn amx_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            // SAFETY: cpuid and xgetbv only read; the syscall changes this process's
            // permissions and nothing else.
            unsafe { tile_permission::cpu_has_amx() && tile_permission::request() }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        false
    })
}

#[cfg(target_arch = "x86_64")]
mod tile_permission {
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// CPUID leaf 7's AMX-TILE and AMX-INT8 bits, and XCR0's tile state bits (17, 18).
    #[target_feature(enable = "xsave")]
    pub unsafe fn cpu_has_amx() -> bool {
        let leaf7 = __cpuid_count(7, 0);
        let tile = leaf7.edx & (1 << 24) != 0;
        let int8 = leaf7.edx & (1 << 25) != 0;
        let osxsave = __cpuid_count(1, 0).ecx & (1 << 27) != 0;
        // SAFETY: OSXSAVE is set, so xgetbv is allowed.
        tile && int8 && osxsave && unsafe { _xgetbv(0) } & (0b11 << 17) == 0b11 << 17
    }

    /// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: true when granted.
    #[cfg(target_os = "linux")]
    pub unsafe fn request() -> bool {
        const ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
        const XFEATURE_XTILEDATA: u64 = 18;
        let status: i64;
        // SAFETY: a plain syscall; the kernel clobbers rcx and r11.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") ARCH_PRCTL => status,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        status == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_named() {
        assert!(Isa::Portable < Isa::Avx2 && Isa::Avx2 < Isa::Avx512 && Isa::Avx512 < Isa::Amx);
        assert_eq!(
            Isa::ALL.map(Isa::name),
            ["portable", "avx2", "avx512", "amx"],
            "TABCONTAM_CPU's values"
        );
        // The portable path runs everywhere; `auto` picks the best runnable level.
        let runnable = Isa::runnable();
        assert_eq!(runnable.first(), Some(&Isa::Portable));
        assert_eq!(runnable.last(), Some(&detected()));
    }
}
