//! `tabcontam parity DIR`: agreement of our decisions with the authors' logged verdicts.

use std::process::ExitCode;

use crate::cli::ParityArgs;

pub fn run(args: ParityArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    todo!("decide helper")
}
