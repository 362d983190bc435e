//! `tabcontam datasets list|show|import|fetch`.

use std::process::ExitCode;

use crate::cli::DatasetsCommand;

pub fn run(cmd: DatasetsCommand) -> anyhow::Result<ExitCode> {
    let _ = cmd;
    todo!("dataset helper")
}
