//! `tabcontam completions SHELL`: a completion script generated from the clap definitions.

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, CompletionsArgs};

/// The shells `clap_complete` writes scripts for, by the names users type.
const SHELLS: [(&str, Shell); 5] = [
    ("bash", Shell::Bash),
    ("zsh", Shell::Zsh),
    ("fish", Shell::Fish),
    ("elvish", Shell::Elvish),
    ("powershell", Shell::PowerShell),
];

pub fn run(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let wanted = args.shell.to_ascii_lowercase();
    let Some(&(_, shell)) = SHELLS.iter().find(|(name, _)| *name == wanted) else {
        let names: Vec<&str> = SHELLS.iter().map(|(name, _)| *name).collect();
        bail!(
            "unknown shell `{}`: use one of {} (e.g. `tabcontam completions bash`)",
            args.shell,
            names.join(", ")
        );
    };
    // Into a buffer first: clap_complete panics on a write error, and `| head` must not panic.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tabcontam", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
