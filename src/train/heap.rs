//! The process heap of a training run: the buffers each step frees are kept for the next
//! step instead of being handed back to the kernel.
//!
//! Why: a training step allocates and frees the same large activations, gradients and
//! logit chunks every step. glibc serves blocks over its mmap threshold (128 KB, raised at
//! most to 32 MB as blocks are freed) with fresh `mmap`s and trims the top of the heap back
//! to the kernel, so every step faulted its buffers' pages in again: one `contaminate`
//! epoch of SmolLM2-135M (batch 1 × 128 tokens, 40 steps) took 13.2 M page faults, 48–51 s
//! of system time and 134–152 s of wall time on 2 quiet cores. With the heap keeping what
//! it frees: 0.7 M faults (loading the model and the optimizer's moments), 12 s of system
//! time, 88–92 s, the same checkpoint bytes, and 7 % more peak RSS (2.79 → 3.00 GB).
//!
//! LoRA keeps its heap too: at batch 4 × 256 its step spent 20.5 s of a 39 s race in the
//! kernel (faults, and the TLB shootdowns of each `munmap` on the other core) against
//! 3.7 s kept. A checkpoint's write (merged weights serialized tensor by tensor) runs on
//! glibc's defaults instead ([`outside_the_kept_heap`]): kept, its copies piled up in the
//! heap beside the steps' buffers and LoRA's peak RSS rose from 1.36 to 1.68 GB at batch
//! 1 × 256. Training runs with one arena ([`one_arena`]) and candle's elementwise ops on
//! the calling thread (`main.rs`): on an Intel Xeon an epoch once took 80.8 s with candle's
//! spinning pool against 86.7 s on one thread, but on a 2-core Zen 4, after the products
//! split their packing over the cores, 58.9 s against 50.0 s.

/// Makes every thread allocate from the main heap (glibc's `M_ARENA_MAX` = 1), before the
/// process starts any thread. Training runs only (`main` calls it for them).
///
/// Why: a thread that finds the heap's lock taken moves to an arena of its own, whose
/// heaps are mmapped 64 MB at a time: blocks larger than that are mmapped alone and
/// unmapped when freed, and the other arenas are not the heap [`keep_freed_memory`] tunes.
/// `contaminate` at batch 4 × 256 faulted 6.1 M pages in 10 steps (28 s of system time,
/// 100 s); with one arena 1.3 M (11 s, 82 s), the same checkpoint. The big allocations
/// are few per op, so one lock costs nothing measurable.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Keeps freed memory in the process heap for the rest of the run: no block served by
/// `mmap`, no trimming of the heap's top, and the heap grown 256 MB at a time. glibc only
/// (elsewhere the allocator's defaults stay).
///
/// The trim threshold is -1 (glibc reads it as the largest size: never trim), not
/// `i32::MAX`: a 2 GB threshold is crossed when a step frees more than 2 GB at the top of
/// the heap, as Gemma 3's tied 671 MB embedding gradients and their sums do, and the heap
/// then went back to the kernel at the end of every step (a C loop freeing 4 × 700 MB:
/// 651 k page faults per round at `i32::MAX`, none at -1).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes the allocator's parameters (glibc serializes it with
    // allocation).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TRIM_THRESHOLD, -1);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}

/// Runs `write` (a checkpoint's or resume state's write) with the free pages handed back
/// to the kernel first and glibc's defaults for its own buffers (large blocks `mmap`ed and
/// unmapped when freed), then keeps freed memory again: the write's peak does not add to
/// what the steps left in the heap.
pub fn outside_the_kept_heap<T>(write: impl FnOnce() -> T) -> T {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: as in `keep_freed_memory` (128 KB is glibc's default threshold).
    unsafe {
        libc::malloc_trim(0);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
    let written = write();
    keep_freed_memory();
    written
}

/// Hands the pages of every free block back to the kernel (`malloc_trim`; a no-op off
/// glibc): `run` calls it once its dataset tables are dropped (glibc keeps freed blocks in
/// per-thread arenas, so their memory would stay resident for the rest of the run).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free memory to the kernel (glibc locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}
