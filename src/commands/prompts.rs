//! `tabcontam prompts`: the exact prompts a run would send.

use std::process::ExitCode;

use crate::cli::PromptsArgs;

pub fn run(args: PromptsArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    todo!()
}
