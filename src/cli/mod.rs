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
    #[command(after_help = examples::DATASETS)]
    Datasets(DatasetsCommand),
    /// Print the exact prompts a run would send for one dataset and test.
    #[command(after_help = examples::PROMPTS)]
    Prompts(PromptsArgs),
    /// Judge the conformance records of DIR with our decision code and report agreement.
    #[command(after_help = examples::PARITY)]
    Parity(ParityArgs),
    /// Requests an experiment needs, already cached, and to send (sends nothing).
    #[command(after_help = examples::PLAN)]
    Plan(PlanArgs),
    /// Send the missing requests of an experiment, then decide every trial.
    #[command(after_help = examples::RUN)]
    Run(RunArgs),
    /// Runs, cache size and hit statistics, failures.
    #[command(after_help = examples::STATUS)]
    Status(StatusArgs),
    /// Import published per-cell results (the paper's CSVs) into the cache, so that reports
    /// show them beside your own models.
    #[command(after_help = examples::IMPORT_RESULTS)]
    ImportResults(ImportResultsArgs),
    /// Render the scores, heatmaps and tables of the cache as JSON, HTML, LaTeX, CSV and
    /// Markdown.
    #[command(after_help = examples::REPORT)]
    Report(ReportArgs),
    /// Write a static results site from the cache: a sortable leaderboard, one page per
    /// model, dataset and model family, and one per cell with its prompts, outputs, verdict,
    /// evidence and how to recompute it. Relative links only: open index.html from disk or
    /// copy the folder to any static host.
    #[command(after_help = examples::SITE)]
    Site(SiteArgs),
    /// Print a completion script for bash, zsh, fish, elvish or PowerShell to stdout.
    #[command(after_help = examples::COMPLETIONS)]
    Completions(CompletionsArgs),
    /// What changed between two models (or, with --runs, two runs) of the cache: cells of
    /// tests 1–9 gained and lost, membership and classification accuracy with 95 % Wilson
    /// intervals.
    #[command(after_help = examples::DIFF)]
    Diff(DiffArgs),
    /// Merge caches from several machines; export a cache as Parquet.
    #[command(subcommand)]
    #[command(after_help = examples::CACHE)]
    Cache(CacheCommand),
    /// Continue training a local llama-family or Gemma 3 model on the text of datasets and write a
    /// checkpoint series (controlled contamination), each a local model folder with a manifest.
    #[command(after_help = examples::CONTAMINATE)]
    Contaminate(ContaminateArgs),
    /// Run the controlled-contamination study of a spec's `[calibration]` table: build
    /// every checkpoint (those already built are reused), run the tests on the base model
    /// and the checkpoints through the cache, and print each test's sensitivity and
    /// false-positive rate with 95 % Wilson intervals.
    #[command(after_help = examples::CALIBRATE)]
    Calibrate(CalibrateArgs),
    /// Which rows of a dataset a checkpoint has seen, with a false-discovery guarantee:
    /// each row's likelihood score gets a conformal p-value against the rows held out of
    /// training, and Benjamini–Hochberg selects the rows called seen at the rate --fdr.
    /// Reads the log-probabilities a run of the likelihood tests cached.
    #[command(after_help = examples::ROWS)]
    Rows(RowsArgs),
    /// Send the report of the cache to a tracker: one MLflow run per model, with params,
    /// metrics, dataset inputs and the report files as artifacts.
    #[command(subcommand)]
    #[command(after_help = examples::EXPORT)]
    Export(ExportCommand),
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// One MLflow run per model of the report: params, metrics, the datasets as inputs (blake3)
    /// and the report files as artifacts (`mlflow server --serve-artifacts`); a second export
    /// updates the same runs. Credentials from MLFLOW_TRACKING_TOKEN, or
    /// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD.
    #[command(after_help = examples::EXPORT_MLFLOW)]
    Mlflow(MlflowArgs),
}

#[derive(Debug, Args)]
pub struct MlflowArgs {
    /// The tracking server's address (http:// or https://).
    #[arg(long, env = "MLFLOW_TRACKING_URI", value_name = "URI")]
    pub tracking_uri: Option<String>,
    /// The experiment the runs go to (created when missing).
    #[arg(
        long,
        env = "MLFLOW_EXPERIMENT_NAME",
        value_name = "NAME",
        default_value = crate::export::mlflow::DEFAULT_EXPERIMENT
    )]
    pub experiment: String,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// The template whose cells the scores use (default the-is), as for `report`.
    #[arg(long, value_name = "ID")]
    pub serialization: Option<String>,
    /// Scoring profile: `paper` (default), `strict` or `fdr`, as for `report` (kept apart).
    #[arg(long, value_name = "PROFILE")]
    pub scoring: Option<String>,
    /// Trials shown per cell in the uploaded report.html's trial explorer (0 leaves it out).
    #[arg(long, value_name = "N", default_value_t = crate::analyze::explorer::DEFAULT_TRIALS_SHOWN)]
    pub explorer_trials: usize,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Experiment spec (TOML) with a `[calibration]` table.
    pub spec: PathBuf,
    /// Build the checkpoints only (no run, no analysis).
    #[arg(long)]
    pub train_only: bool,
    /// Seconds between progress lines when stderr is not a terminal.
    #[arg(
        long,
        env = "TABCONTAM_PROGRESS_INTERVAL",
        value_name = "SECS",
        default_value_t = 10.0
    )]
    pub progress_interval: f64,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub data: DataDirArgs,
    /// Print the calibration (per test, the matrix, membership seen vs held out) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to write the calibration card (Markdown with a JSON block; `report
    /// --calibration` reads it). Default: the `[calibration]` table's `card` (relative to
    /// the spec), else docs/calibration.md.
    #[arg(long, value_name = "PATH")]
    pub card: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Merge the caches IN… into OUT (created when missing), in one transaction: the same
    /// request key keeps one answer (a conflict, the same key with different text, keeps
    /// OUT's answer, else the earliest IN's, and is counted); runs are appended; a cell in
    /// several caches keeps the decision of the run that started last.
    #[command(after_help = examples::CACHE_MERGE)]
    Merge {
        /// The cache to merge into.
        out: PathBuf,
        /// The caches to merge from (at most 10 per merge).
        #[arg(required = true, num_args = 1..)]
        inputs: Vec<PathBuf>,
        /// Print a JSON summary instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write requests, responses, trials and cells as Parquet files (requests.parquet, …)
    /// into DIR, for pandas, polars, Spark or DuckDB.
    #[command(after_help = examples::CACHE_EXPORT)]
    Export {
        /// The folder to write into (created when missing; files of the same names are
        /// replaced).
        dir: PathBuf,
        #[arg(long, value_enum, default_value = "parquet")]
        format: ExportFormat,
        #[command(flatten)]
        cache: CacheArgs,
        /// Print a JSON summary instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Formats of `cache export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Apache Parquet, one file per table.
    Parquet,
}

#[derive(Debug, Args)]
pub struct ContaminateArgs {
    /// Base model: `smollm2-135m-instruct` (the embedded model), `gemma3-270m`, a .gguf
    /// file, or a folder of config.json + tokenizer.json + *.safetensors.
    #[arg(long, default_value = "smollm2-135m-instruct")]
    pub model: String,
    /// Dataset id or alias to train on; repeatable.
    #[arg(long = "dataset", value_name = "NAME", required = true)]
    pub datasets: Vec<String>,
    /// `raw` (the CSV file as published) or a serialization template (the-is, equals, colon,
    /// is-equal-to): one serialized row per line.
    #[arg(long, default_value = "the-is")]
    pub text: String,
    /// Rows trained on: `all`, a seeded fraction such as `0.5`, `holdout:0.2` (a seeded
    /// 20 % never seen) or `tail:0.2` (the file's last 20 % never seen, its first rows all
    /// trained: the tests that show a file's first rows find them seen).
    #[arg(long, default_value = "all")]
    pub rows: String,
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// A checkpoint every N epochs (the last epoch always gets one).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub checkpoint_every: usize,
    /// AdamW learning rate (with `--lr-schedule cosine`, the rate at the first step).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f64,
    /// Token windows per forward pass.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Forward passes per optimizer step (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    pub grad_accum: usize,
    /// Predicted tokens per window.
    #[arg(long, default_value_t = 256)]
    pub seq_len: usize,
    /// `packed` (consecutive windows over the text), `rows` (a window starting at every
    /// row, running on over the next rows: more tokens per epoch, rows learnt whatever
    /// precedes them) or `mixed` (each epoch the `rows` windows in file order and in a
    /// fresh seeded row order: what the tests' prompts need, twice the tokens of `rows`).
    #[arg(long, default_value = "packed", value_parser = ["packed", "rows", "mixed"])]
    pub windows: String,
    /// Seeds the row selection and the data order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Seconds between saves of the resume state (weights, optimizer moments, position in
    /// the data order); a killed run continues from the last save, and the state at the end
    /// stays so that more epochs of the same inputs continue from it
    #[arg(long, default_value_t = 300.0, value_name = "SECS")]
    pub resume_every: f64,
    /// Clip the gradients' global L2 norm to this before each update (1.0 is usual; off by
    /// default): keeps a constant learning rate from loss spikes.
    #[arg(long, value_name = "NORM")]
    pub max_grad_norm: Option<f64>,
    /// `constant`, or `cosine`: the learning rate decays from --lr to a tenth of it at the
    /// last step, so the last epochs settle instead of climbing out of their minimum (the
    /// epochs then are inputs: a longer series is another series)
    #[arg(long, default_value = "constant", value_name = "SCHEDULE")]
    pub lr_schedule: String,
    /// Train LoRA adapters of this rank with every base weight frozen (a fraction of the
    /// memory; the checkpoint holds the adapters and the weights merged, so it runs as
    /// any local model).
    #[arg(long, value_name = "RANK")]
    pub lora: Option<usize>,
    /// Projections that get adapters: `attention` (q, k, v, o), `mlp` (gate, up, down),
    /// `all`, or ids joined by commas (`q,v`).
    #[arg(
        long,
        default_value = "attention",
        value_name = "LIST",
        requires = "lora"
    )]
    pub lora_targets: String,
    /// The adapters are scaled by alpha / rank (default: alpha = rank, scale 1).
    #[arg(long, value_name = "ALPHA", requires = "lora")]
    pub lora_alpha: Option<f64>,
    /// Arithmetic of the projections and the output head: `f32`, or `bf16` (operands
    /// rounded to bfloat16, sums, weights, gradients and optimizer in f32, as PyTorch's
    /// bf16 autocast; needs AVX-512 BF16). A bf16 series is another series.
    #[arg(long, default_value = "f32", value_name = "PRECISION")]
    pub precision: String,
    /// Series folder: epoch-001/, epoch-002/, … and loss.csv.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[command(flatten)]
    pub data: DataDirArgs,
    /// Print the checkpoints as JSON at the end.
    #[arg(long)]
    pub json: bool,
}

/// The cache file.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// SQLite cache of prompts, responses, runs and verdicts.
    #[arg(
        long,
        env = "TABCONTAM_CACHE",
        value_name = "FILE",
        default_value = "cache/tabcontam.sqlite"
    )]
    pub cache: PathBuf,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Experiment spec (TOML).
    pub spec: PathBuf,
    /// Only these models (ids from the spec); repeatable.
    #[arg(long = "model", value_name = "ID")]
    pub models: Vec<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub data: DataDirArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment spec (TOML).
    pub spec: PathBuf,
    /// Only these models (ids from the spec); repeatable.
    #[arg(long = "model", value_name = "ID")]
    pub models: Vec<String>,
    /// Answer from the cache only; report what is missing.
    #[arg(long)]
    pub offline: bool,
    /// No progress bars (plain log lines instead, as when stderr is not a terminal).
    #[arg(long)]
    pub quiet: bool,
    /// Seconds between progress lines when stderr is not a terminal (a log file, nohup,
    /// a batch scheduler) or with --quiet: one line per model with done/total, rate, ETA,
    /// tokens and cost so far.
    #[arg(
        long,
        env = "TABCONTAM_PROGRESS_INTERVAL",
        value_name = "SECS",
        default_value_t = 10.0
    )]
    pub progress_interval: f64,
    /// Send only shard I of N of the missing requests (split by request key: machines given
    /// 1/N … N/N send each request exactly once); merge their caches with `cache merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::run::shard::Shard>,
    /// Ask each remote model once which version it serves now; when that differs from the
    /// version its cached answers came from, send the prompts again under a revision naming
    /// the new version (the old answers stay for the old one) instead of reusing them.
    #[arg(long)]
    pub pin_served: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub data: DataDirArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    #[arg(long)]
    pub json: bool,
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
    #[command(after_help = examples::DATASETS_LIST)]
    List {
        #[command(flatten)]
        data: DataDirArgs,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Schema, column types and the first rows of one dataset.
    #[command(after_help = examples::DATASETS_SHOW)]
    Show {
        /// Dataset id or alias.
        name: String,
        #[command(flatten)]
        data: DataDirArgs,
        /// Number of rows to print.
        #[arg(long, default_value_t = 5)]
        head: usize,
        /// Print a JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Turn a CSV file into a dataset with a generated descriptor in the user data directory
    /// (`$TABCONTAM_HOME/datasets`, else `$XDG_DATA_HOME/tabcontam/datasets`, else
    /// `~/.local/share/tabcontam/datasets`).
    #[command(after_help = examples::DATASETS_IMPORT)]
    Import {
        /// The CSV file.
        file: PathBuf,
        /// Dataset id to register it under.
        #[arg(long)]
        name: String,
        /// Target column.
        #[arg(long)]
        target: String,
        /// Replace a dataset imported earlier under the same name (never a built-in one).
        #[arg(long)]
        force: bool,
    },
    /// Generate a synthetic dataset (invented name, columns and values; deterministic per
    /// seed): a negative no pretraining corpus can hold (SPEC §8). Writes the CSV to --out
    /// and its descriptor beside it (same name, `.toml`). A spec can also name it directly
    /// as `synthetic:<seed>`, `synthetic:<seed>:<rows>` or `synthetic:<seed>:<rows>:<order>`.
    #[command(after_help = examples::DATASETS_SYNTH)]
    Synth {
        /// Seed: the same seed and rows give the same bytes.
        #[arg(long)]
        seed: u64,
        /// Rows to generate (10 to 1,000,000).
        #[arg(long, default_value_t = 200)]
        rows: usize,
        /// The rows' order in the file: as drawn (`shuffled`), `sorted` by the integer
        /// column, or `grouped` by the first categorical column (same rows in each).
        #[arg(long, default_value = "shuffled", value_parser = ["shuffled", "sorted", "grouped"])]
        order: String,
        /// The CSV file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Chance levels of the value-guessing tests (7, 8, 9): the probability that a guesser
    /// who knows each column's value frequencies but no row passes the cell as Alg2 judges
    /// it (a value counts anywhere in the judged line), exact or by seeded Monte Carlo with
    /// its standard error; beside it the own-column product (what Alg2 would give if each
    /// value had to be in its own column) and whether `--scoring strict` lets a pass count.
    #[command(after_help = examples::DATASETS_CHANCE)]
    Chance {
        /// Dataset ids, aliases or `synthetic:<seed>[:<rows>[:<order>]]`; every known dataset whose
        /// file is present when none is given.
        names: Vec<String>,
        #[command(flatten)]
        data: DataDirArgs,
        /// Serialization template: a built-in id or a TOML file.
        #[arg(long, default_value = "the-is")]
        serialization: String,
        /// The experiment seed the prompts are drawn with (the spec's `seed`).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Download a dataset from its descriptor's URL, verify its checksum and store it in the
    /// user data directory (or in --data-dir when given).
    #[command(after_help = examples::DATASETS_FETCH)]
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
    /// Test id (`feature-list-informed`, …, `classify-1shot`, `header`, …, `first-token`),
    /// or `row-order`: the texts test 17 scores (each shard in file order, then its
    /// permutations) and why the rows may be permuted as they are.
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
    /// Which description of the method: `paper` (the paper's text) or `paper-code` (the
    /// authors' code: test 4 shows the first 5 rows; test 9 has no example rows and asks
    /// about rows 0–4). The spec key `variant` selects the same for runs.
    #[arg(long, default_value = "paper")]
    pub variant: String,
    #[command(flatten)]
    pub data: DataDirArgs,
    /// Print JSON (one array of prompts) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RowsArgs {
    /// Experiment spec (TOML) naming the model.
    pub spec: PathBuf,
    /// The model (an id of the spec): a checkpoint whose manifest lists the rows it was
    /// trained on.
    #[arg(long, value_name = "ID")]
    pub model: String,
    /// The dataset whose rows are judged.
    #[arg(long, value_name = "NAME")]
    pub dataset: String,
    /// Target false-identification rate: the expected share of rows called seen that were
    /// not.
    #[arg(long, value_name = "Q", default_value_t = 0.1)]
    pub fdr: f64,
    /// The likelihood detector whose score ranks the rows (`likelihood-perplexity`,
    /// `-zlib`, `-min-k`, `-min-k-plus-plus`, or without the prefix). Min-K% by default:
    /// on SmolLM2 checkpoints it separated trained from held-out rows where Min-K%++ did
    /// not (docs/guide/detectors.md).
    #[arg(long, value_name = "TEST", default_value = "min-k")]
    pub detector: String,
    /// The rows known unseen each row is compared with: `held-out` (a checkpoint's rows held
    /// out of training), `matched` (synthetic rows drawn from the file's own columns, which
    /// `run` scores beside the likelihood tests) or `perturbed` (the membership test's
    /// perturbed copies). Default: `held-out` on a checkpoint that has such rows, `matched`
    /// otherwise.
    #[arg(long, value_name = "KIND")]
    pub reference: Option<String>,
    /// The template the rows were scored in (default: the model's first).
    #[arg(long, value_name = "ID")]
    pub serialization: Option<String>,
    /// Also write every judged row (row, score, p, q, selected, trained) to FILE: `.csv` or
    /// `.parquet`.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub data: DataDirArgs,
    /// Print the whole judgement as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ParityArgs {
    /// Directory holding `algorithm1.jsonl` and `algorithm2.jsonl`.
    pub dir: PathBuf,
    /// Alg1 profile. Parity replays the authors' pipeline, so it defaults to `paper`
    /// (Hunspell plus the authors' three removed words, and camel-case dataset names such as
    /// `MathE` matched with their case in recognition); `hunspell` is SPEC §3 as written.
    #[arg(long, default_value = "paper")]
    pub profile: String,
    /// Print `{"algorithm1":{"agree":N,"total":M},"algorithm2":{…}}`.
    #[arg(long)]
    pub json: bool,
}

/// Formats of published results that `import-results` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResultsFormat {
    /// The paper's per-cell CSVs: `{model}.csv`, `{model}_membership.csv`,
    /// `acc_membership_results.csv`, `serializations/`.
    Paper,
}

#[derive(Debug, Args)]
pub struct ImportResultsArgs {
    /// Folder of result files (e.g. ../shared/parity/paper-results).
    pub dir: PathBuf,
    #[arg(long, value_enum, default_value = "paper")]
    pub format: ResultsFormat,
    /// Prefix for the imported model ids (the file names: gpt4o, llama3.1, t0, …); needed
    /// when the cache already has models of your own under those ids.
    #[arg(long, default_value = "", value_name = "PREFIX")]
    pub id_prefix: String,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Output formats of `report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum ReportFormat {
    /// scores.json: scores per model and the per-cell grid.
    Json,
    /// report.html: one self-contained page.
    Html,
    /// report.tex (standalone) plus table2.tex and heatmap-<model>.tex snippets.
    Latex,
    /// grid.csv, scores.csv and accuracy.csv.
    Csv,
    /// report.md: Table 2 and the significance table as Markdown.
    Md,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Comma-separated formats.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "json,html,latex,csv"
    )]
    pub format: Vec<ReportFormat>,
    /// Output folder (created when missing; files of the same names are replaced).
    #[arg(long, default_value = "reports", value_name = "DIR")]
    pub out: PathBuf,
    /// The template whose cells the scores use (default the-is); other templates feed the
    /// serialization study. Must be a template with cells in the cache. Without this flag,
    /// a model with no cell under the-is is scored with its own template, and the report
    /// says which.
    #[arg(long, value_name = "ID")]
    pub serialization: Option<String>,
    /// Scoring profile: `paper` (default: the paper's rule), `strict` (passing trials
    /// that only echo their prompt do not count, and cells a knowledge-free model would
    /// pass with probability ≥ 0.05 do not pass) or `fdr` (a cell of tests 1–9 passes only
    /// with a Benjamini–Hochberg q-value < 0.05 across the report's cells; tests 1–6, which
    /// have no p-value, never pass).
    #[arg(long, value_name = "PROFILE")]
    pub scoring: Option<String>,
    /// Print when the report was made (off by default: the same cache gives byte-identical
    /// reports).
    #[arg(long)]
    pub timestamp: bool,
    /// Trials shown per cell in report.html's trial explorer (the first by sample and
    /// trial; 0 leaves the explorer out). Tests 1–9 have at most 5 per sample, tests 10–12
    /// a hundred; the paper grid's page is about 6 MB with 5.
    #[arg(long, value_name = "N", default_value_t = crate::analyze::explorer::DEFAULT_TRIALS_SHOWN)]
    pub explorer_trials: usize,
    /// A calibration card written by `tabcontam calibrate` (e.g. docs/calibration.md), or
    /// a calibration study's cache: beside every test's verdicts the report shows that
    /// test's measured sensitivity and false-positive rate, and the smallest dose it detects.
    #[arg(long, value_name = "PATH")]
    pub calibration: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SiteArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    /// The site's folder: created, or replaced when it holds a site written by this command
    /// (any other existing folder is refused). Written beside it first and renamed into
    /// place, so a failure leaves no half site.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The template whose cells the scores use (default the-is), as for `report`.
    #[arg(long, value_name = "ID")]
    pub serialization: Option<String>,
    /// Scoring profile: `paper` (default), `strict` or `fdr`, as for `report`.
    #[arg(long, value_name = "PROFILE")]
    pub scoring: Option<String>,
    /// Trials shown per cell page (the first by sample and trial); every trial by default.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub trials: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell. (A plain string, not a value enum, so
    /// that a wrong name gets our one-line error rather than clap's usage block.)
    #[arg(value_name = "SHELL")]
    pub shell: String,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The model compared from (a spec model id, or an imported one such as `gpt4o`); with
    /// --runs, a run id.
    pub a: String,
    /// The model (or run) compared to.
    pub b: String,
    /// A and B are run ids (`tabcontam status` lists them): compares the cells each run
    /// still holds (the cache keeps a cell's latest decision only).
    #[arg(long)]
    pub runs: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Print a JSON object instead of text.
    #[arg(long, conflicts_with = "md")]
    pub json: bool,
    /// Print Markdown instead of text: the same summary, and one table of the cells listed
    /// (gained, lost, accuracy in A and B) to paste into a README or a paper's supplement.
    #[arg(long)]
    pub md: bool,
    /// List only cells whose verdict or accuracy changed: accuracy cells with the same share
    /// of correct answers in A and B are left out (gained and lost cells are changes by
    /// definition; the counts of cells only one side has stay).
    #[arg(long)]
    pub only_changed: bool,
}

pub mod examples;
