//! `tabcontam plan`.

use std::process::ExitCode;

use crate::cli::PlanArgs;

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("`plan` is not implemented yet")
}
