//! The `tabcontam` binary: parse arguments, dispatch, print the one error and exit.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = tabcontam::cli::Cli::parse();
    elementwise_ops_on_one_thread();
    if trains(&cli.command) {
        tabcontam::train::heap::one_arena();
        thread_count_counted_once();
    }
    match tabcontam::commands::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return std::process::ExitCode::SUCCESS;
            }
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Commands that train checkpoints (their allocator and thread count are set for them).
fn trains(command: &tabcontam::cli::Command) -> bool {
    use tabcontam::cli::Command;
    matches!(command, Command::Contaminate(_) | Command::Calibrate(_))
}

/// `tabcontam prompts … | head` must not report an error when the reader goes away.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// candle runs large elementwise ops (adds, activations) on its own barrier pool, whose
/// worker spins 25,000 times after each op before it parks, on a core the matrix products'
/// rayon threads need: perf showed 6-12 % of local inference spinning there on 2 cores
/// shared with builds, and 15 % of a training step's samples (`contaminate` at batch
/// 1 × 128 on a quiet 2-core Zen 4: 58.9 s with the pool, 50.0 s on one thread, 52-54 s
/// with the spinning cut to 1,000; at batch 4 × 256 196 against 193 s, the same
/// checkpoints). These ops are memory-bound and a small part of the work, so they run on
/// the calling thread (`CANDLE_NUM_THREADS=1`); matrix products keep all cores (rayon,
/// which sleeps when idle). Results are identical (element by element). An explicit
/// setting wins.
fn elementwise_ops_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: called right after parsing the arguments, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}

/// candle gives each matrix product `RAYON_NUM_THREADS` threads, and unset it counts the
/// physical cores by parsing `/proc/cpuinfo` on every product (perf: 3-5 % of a training
/// step's main thread); the count is taken once here and set for the run (the rayon pool
/// that runs those products then has as many threads). An explicit setting wins.
fn thread_count_counted_once() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let threads = candle_core::utils::get_num_threads().max(1);
        // SAFETY: called right after parsing the arguments, before any other thread exists.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    }
}
