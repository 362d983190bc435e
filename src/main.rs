//! The `tabcontam` binary: parse arguments, dispatch, print the one error and exit.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = tabcontam::cli::Cli::parse();
    if !trains(&cli.command) {
        elementwise_ops_on_one_thread();
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

/// Commands that train checkpoints (candle's elementwise ops on every core for them).
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
/// caller spins until the pool's worker is done: on a machine with more busy threads than
/// cores (2 cores shared with builds) perf showed 6-12 % of local inference spinning there.
/// These ops are memory-bound and a small part of the work, so they run on the calling
/// thread (`CANDLE_NUM_THREADS=1`); matrix products keep all cores (rayon, which sleeps
/// when idle). Results are identical (element by element). An explicit setting wins.
/// Training is the exception ([`trains`]): its backward pass adds gradients of whole
/// activations and weights with these ops, and on one thread they held `contaminate`
/// under 150 % CPU on 2 cores.
fn elementwise_ops_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: called right after parsing the arguments, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}
