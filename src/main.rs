//! The `tabcontam` binary: parse arguments, dispatch, print the one error and exit.

use clap::Parser;

fn main() -> std::process::ExitCode {
    elementwise_ops_on_one_thread();
    let cli = tabcontam::cli::Cli::parse();
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

/// `tabcontam prompts … | head` must not report an error when the reader goes away.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// candle runs large elementwise ops (adds, activations) on its own barrier pool, whose
/// caller spins until the pool's worker is done: on a machine with more busy threads than
/// cores (2 cores shared with builds) perf showed 6-12 % of local inference spinning there.
/// These ops are memory-bound and a small part of the work, so they run on the calling
/// thread (`CANDLE_NUM_THREADS=1`); matrix products keep all cores (rayon, which sleeps
/// when idle). Results are identical (element by element). An explicit setting wins.
fn elementwise_ops_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: called first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}
