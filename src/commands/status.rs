//! `tabcontam status`.

use std::process::ExitCode;

use crate::cli::StatusArgs;

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("`status` is not implemented yet")
}
