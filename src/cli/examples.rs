//! The examples that end each subcommand's `--help`. Every line is a real command that works
//! from the repository root with the shipped files (tests/cli.rs parses all of them and runs
//! the ones that need no model).

pub const CONTAMINATE: &str = "\
Examples:
  tabcontam contaminate --dataset iris --epochs 1 --out checkpoints/iris
  tabcontam contaminate --dataset iris --text raw --rows holdout:0.2 --epochs 3 --out ckpt/iris
  tabcontam contaminate --model models/tiny --dataset wine --lr 1e-3 --seed 1 --out ckpt/tiny";

pub const CALIBRATE: &str = "\
Examples:
  tabcontam calibrate experiments/calibration-smollm2.toml
  tabcontam calibrate study.toml --train-only
  tabcontam calibrate study.toml --card results/calibration.md --json > calibration.json";

pub const ROWS: &str = "\
Examples:
  tabcontam rows study.toml --model smollm2-iris-e4 --dataset iris
  tabcontam rows study.toml --model smollm2-iris-e4 --dataset iris --fdr 0.05 --out seen.csv
  tabcontam rows study.toml --model smollm2-iris-e4 --dataset iris --detector zlib --json";

pub const DATASETS: &str = "\
Examples:
  tabcontam datasets list
  tabcontam datasets show iris --head 3
  tabcontam datasets import datasets/iris.csv --name my-iris --target species";

pub const DATASETS_LIST: &str = "\
Examples:
  tabcontam datasets list
  tabcontam datasets list --json
  tabcontam datasets list --data-dir ../shared/datasets/paper";

pub const DATASETS_SHOW: &str = "\
Examples:
  tabcontam datasets show iris
  tabcontam datasets show titanic --head 3 --json";

pub const DATASETS_IMPORT: &str = "\
Examples:
  tabcontam datasets import datasets/iris.csv --name my-iris --target species
  tabcontam datasets import datasets/wine.csv --name my-wine --target target --force";

pub const DATASETS_CHANCE: &str = "\
Examples:
  tabcontam datasets chance
  tabcontam datasets chance iris synthetic:101:60 --serialization equals
  tabcontam datasets chance --data-dir /data/paper --json";

pub const DATASETS_SYNTH: &str = "\
Examples:
  tabcontam datasets synth --seed 7 --out synthetic-7.csv
  tabcontam datasets synth --seed 7 --rows 500 --out negatives/synthetic-7-500.csv
  tabcontam datasets synth --seed 7 --rows 24 --order grouped --out synthetic-7-24-grouped.csv";
pub const DATASETS_FETCH: &str = "\
Examples:
  tabcontam datasets fetch bank
  tabcontam datasets fetch thyroid --data-dir datasets-extra";

pub const PROMPTS: &str = "\
Examples:
  tabcontam prompts --dataset iris --test membership
  tabcontam prompts --dataset titanic --test feature-completion --serialization colon
  tabcontam prompts --dataset wine --test recognition-examples --variant paper-code --json";

pub const PARITY: &str = "\
Examples:
  tabcontam parity ../shared/parity
  tabcontam parity ../shared/parity --profile hunspell --json";

pub const PLAN: &str = "\
Examples:
  tabcontam plan experiments/demo.toml
  tabcontam plan experiments/mini.toml --model mock-base --json
  tabcontam plan experiments/paper.toml --data-dir ../shared/datasets/paper";

pub const RUN: &str = "\
Examples:
  tabcontam run experiments/demo.toml --offline
  tabcontam run experiments/demo.toml --pin-served --progress-interval 30 > run.log 2>&1
  tabcontam run experiments/demo.toml --shard 1/2 --cache cache/part1.sqlite";

pub const STATUS: &str = "\
Examples:
  tabcontam status
  tabcontam status --cache cache/mini.sqlite --json";

pub const IMPORT_RESULTS: &str = "\
Examples:
  tabcontam import-results ../shared/parity/paper-results
  tabcontam import-results ../shared/parity/paper-results --id-prefix paper- --json";

pub const REPORT: &str = "\
Examples:
  tabcontam report
  tabcontam report --format html,md --out reports/demo --calibration docs/calibration.md
  tabcontam report --format latex,csv --serialization colon --scoring strict";

pub const SITE: &str = "\
Examples:
  tabcontam site --out site
  tabcontam site --out public/results --scoring strict
  tabcontam site --out site --cache cache/mini.sqlite --trials 20";

pub const COMPLETIONS: &str = "\
Examples:
  tabcontam completions bash > ~/.local/share/bash-completion/completions/tabcontam
  tabcontam completions zsh > ~/.zfunc/_tabcontam
  tabcontam completions fish > ~/.config/fish/completions/tabcontam.fish";

pub const CACHE: &str = "\
Examples:
  tabcontam cache merge cache/all.sqlite cache/part1.sqlite cache/part2.sqlite
  tabcontam cache export --format parquet exports/";

pub const EXPORT: &str = "\
Examples:
  tabcontam export mlflow --tracking-uri http://127.0.0.1:5000
  tabcontam export mlflow --experiment contamination --scoring strict";

pub const EXPORT_MLFLOW: &str = "\
Examples:
  tabcontam export mlflow --tracking-uri http://127.0.0.1:5000
  tabcontam export mlflow --experiment contamination --cache cache/mini.sqlite
  tabcontam export mlflow --tracking-uri https://mlflow.example.org --json";

pub const CACHE_MERGE: &str = "\
Examples:
  tabcontam cache merge cache/all.sqlite cache/part1.sqlite cache/part2.sqlite
  tabcontam cache merge cache/all.sqlite cache/laptop.sqlite --json";

pub const CACHE_EXPORT: &str = "\
Examples:
  tabcontam cache export exports/
  tabcontam cache export --format parquet exports/ --cache cache/mini.sqlite";

pub const DIFF: &str = "\
Examples:
  # after `tabcontam import-results ../shared/parity/paper-results`:
  tabcontam diff llama3 llama3.1
  tabcontam diff gpt4 gpt4o --md --only-changed
  # two runs (ids from `tabcontam status`):
  tabcontam diff --runs 3 4 --json";
