//! What the machine's memory allows the engine: the memory available now, the budget of
//! weights laid out once for the int8 panels (`qmatmul::lay_out`), and handing back what a
//! finished model freed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `MemAvailable` of `/proc/meminfo` in bytes (Linux), else `None`.
pub fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Bytes of laid-out weights so far, process-wide.
static LAID_OUT: AtomicUsize = AtomicUsize::new(0);

/// Takes `bytes` from the layout budget (a quarter of the memory available when first
/// asked, 1 GiB where that is unknown) and says whether they fit; a weight that does not
/// fit multiplies as stored instead.
///
/// Why a budget: a laid-out weight costs 0.75 bytes per Q4_1 weight (codes packed, f32
/// scales; 1.25 for Q8_0 or where AMX reads whole bytes), more than its stored blocks,
/// which a decoder drops once laid out (`Linear::settle_on_panels`) unless a tied
/// embedding shares them: 115 MB for SmolLM2-135M but ~6–10 GB for an 8B model, which
/// must not push a machine into swap for a few percent of speed.
pub fn take_layout_budget(bytes: usize) -> bool {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    let budget = *BUDGET.get_or_init(|| available_memory().map_or(1 << 30, |b| b / 4));
    LAID_OUT
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
            (used + bytes <= budget).then_some(used + bytes)
        })
        .is_ok()
}

/// Hands the memory freed so far back to the system. A model's weights and caches, dropped
/// once its requests ran, go back to the allocator's per-thread arenas, where the next
/// model (laid out as it loads, on other threads) cannot reuse them: on
/// `experiments/demo-compare.toml` (three models one after another) the peak RSS grew by
/// 400 MB that way. glibc only; elsewhere nothing to do.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
