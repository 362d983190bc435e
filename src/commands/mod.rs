//! Command implementations: each takes its resolved arguments and writes to stdout.

pub mod datasets;
pub mod parity;
pub mod prompts;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs one parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Datasets(cmd) => datasets::run(cmd),
        Command::Prompts(args) => prompts::run(args),
        Command::Parity(args) => parity::run(args),
    }
}
