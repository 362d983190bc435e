//! The `tabcontam` binary: parse arguments, dispatch, print the one error and exit.

use clap::Parser;

fn main() -> std::process::ExitCode {
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
