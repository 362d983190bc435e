//! Command-line definitions (clap types only; doc comments are the help text).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Detect, track and report LLM contamination with tabular data.
#[derive(Debug, Parser)]
#[command(name = "tabcontam", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List, inspect, import and download datasets.
    #[command(subcommand)]
    Datasets(DatasetsCommand),
    /// Print the exact prompts a run would send for one dataset and test.
    Prompts(PromptsArgs),
    /// Judge the conformance records of DIR with our decision code and report agreement.
    Parity(ParityArgs),
}

/// Where dataset files are looked up.
#[derive(Debug, Clone, Args, Default)]
pub struct DataDirArgs {
    /// Directory with dataset files (searched before the user and shipped directories).
    #[arg(long, env = "TABCONTAM_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum DatasetsCommand {
    /// Every known dataset: rows, columns, whether its file is present and its checksum ok.
    List {
        #[command(flatten)]
        data: DataDirArgs,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Schema, column types and the first rows of one dataset.
    Show {
        /// Dataset id or alias.
        name: String,
        #[command(flatten)]
        data: DataDirArgs,
        /// Number of rows to print.
        #[arg(long, default_value_t = 5)]
        head: usize,
        #[arg(long)]
        json: bool,
    },
    /// Turn a CSV file into a dataset with a generated descriptor in the user data directory.
    Import {
        /// The CSV file.
        file: PathBuf,
        /// Dataset id to register it under.
        #[arg(long)]
        name: String,
        /// Target column.
        #[arg(long)]
        target: String,
        #[command(flatten)]
        data: DataDirArgs,
    },
    /// Download a dataset from its descriptor's URL, verify its checksum and store it.
    Fetch {
        /// Dataset id or alias.
        name: String,
        #[command(flatten)]
        data: DataDirArgs,
        /// Download from this URL instead of the descriptor's (the checksum is still verified).
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct PromptsArgs {
    /// Dataset id or alias.
    #[arg(long)]
    pub dataset: String,
    /// Test id (`feature-list-informed`, …, `classify-1shot`).
    #[arg(long)]
    pub test: String,
    /// Serialization template: a built-in id (the-is, equals, colon, is-equal-to) or a .toml file.
    #[arg(long, default_value = "the-is")]
    pub serialization: String,
    /// Experiment seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A prompt pack (TOML) replacing the built-in wording.
    #[arg(long, value_name = "FILE")]
    pub prompt_pack: Option<PathBuf>,
    #[command(flatten)]
    pub data: DataDirArgs,
    /// Print JSON (one array of prompts) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ParityArgs {
    /// Directory holding `algorithm1.jsonl` and `algorithm2.jsonl`.
    pub dir: PathBuf,
    /// Alg1 dictionary profile: `hunspell` (SPEC default) or `paper`.
    #[arg(long, default_value = "hunspell")]
    pub profile: String,
    /// Print `{"algorithm1":{"agree":N,"total":M},"algorithm2":{…}}`.
    #[arg(long)]
    pub json: bool,
}
