//! The process heap of a full fine-tuning run: the buffers each step frees are kept for the
//! next step instead of being handed back to the kernel.
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
//! LoRA keeps glibc's defaults: its buffers are a fraction of these (1.4 M faults an
//! epoch), and kept they raised its peak RSS from 1.29 to 1.74 GB. candle's elementwise
//! worker keeps its default too (25,000 spins before it parks): on the quiet machine an
//! epoch took 80.8 s with it, 86.8 s parked after 100 spins and 86.7 s on one thread; under
//! load the spinning costs more than it saves (`CANDLE_BARRIER_POOL_SPIN_LIMIT` sets it).

/// Keeps freed memory in the process heap for the rest of the run: no block served by
/// `mmap`, no trimming of the heap's top, and the heap grown 256 MB at a time. glibc only
/// (elsewhere the allocator's defaults stay).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes the allocator's parameters (glibc serializes it with
    // allocation).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 256 << 20);
    }
}
