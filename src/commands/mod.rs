//! Command implementations: each takes its resolved arguments and writes to stdout.

pub mod cache;
pub mod calibrate;
pub mod completions;
pub mod contaminate;
pub mod datasets;
pub mod diff;
pub mod export;
pub mod import_results;
pub mod parity;
pub mod plan;
pub mod prompts;
pub mod report;
pub mod rows;
pub mod run;
pub mod site;
pub mod status;
pub mod text_table;

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs one parsed command line.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Datasets(cmd) => datasets::run(cmd),
        Command::Prompts(args) => prompts::run(args),
        Command::Parity(args) => parity::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Run(args) => run::run(args),
        Command::Status(args) => status::run(args),
        Command::ImportResults(args) => import_results::run(args),
        Command::Report(args) => report::run(args),
        Command::Site(args) => site::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Cache(cmd) => cache::run(cmd),
        Command::Contaminate(args) => contaminate::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Rows(args) => rows::run(args),
        Command::Export(cmd) => export::run(cmd),
    }
}
