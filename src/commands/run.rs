//! `tabcontam run`.

use std::process::ExitCode;

use crate::cli::RunArgs;

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("`run` is not implemented yet")
}
