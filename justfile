# tabcontam tasks. `pip install rust-just` installs `just` in seconds.

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") + "/.cache/tabcontam-target")

# DuckDB's prebuilt library, which the build links (once; instant when present).
duckdb:
    bash scripts/ci-install-duckdb.sh

# The main job on the embedded defaults (see README).
demo: duckdb
    cargo run --release -- run experiments/demo.toml
    cargo run --release -- report

# `tabcontam` into ~/.cargo/bin; it needs no source tree at run time.
install: duckdb
    cargo install --locked --path .

# The Python wheel (binary + libduckdb) into dist/; `pip install dist/tabcontam-*.whl`.
wheel:
    bash scripts/wheel.sh

# The test suite: CI's command. Tests whose inputs are missing are skipped (listed at the end).
test: duckdb
    cargo test --no-fail-fast

# What CI runs: every install script, then `cargo test` with TABCONTAM_CI=1 (no skips).
ci:
    .ci/run

# Benchmarks named in the issues.
bench:
    cargo bench --bench tracker
    cargo bench --bench report
    cargo bench --bench local

# Side by side with tabmemcheck 0.1.6 on one llama-server (docs/vs-tabmemcheck.md); pass
# e.g. `--datasets iris,titanic --trials 10`. Installs the peer's venv and the server first.
vs-tabmemcheck *ARGS: duckdb
    bash scripts/ci-install-tabmemcheck.sh
    bash scripts/ci-install-test-server.sh
    cargo build
    ${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}/venv-tabmemcheck/bin/python benches/vs_tabmemcheck.py --tabcontam {{CARGO_TARGET_DIR}}/debug/tabcontam {{ARGS}}

# Decision parity with the authors' logged verdicts.
parity:
    cargo run --release -- parity ../shared/parity

fmt:
    cargo fmt --all

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
