# tabcontam tasks. `pip install rust-just` installs `just` in seconds.

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") + "/.cache/tabcontam-target")

# The main job on the embedded defaults (see README).
demo:
    cargo run --release -- run experiments/demo.toml
    cargo run --release -- report

# The test suite, exactly as CI runs it.
test:
    cargo test

# Benchmarks named in the issues.
bench:
    cargo bench --bench tracker
    cargo bench --bench report
    cargo bench --bench local

# Decision parity with the authors' logged verdicts.
parity:
    cargo run --release -- parity ../shared/parity

fmt:
    cargo fmt --all

lint:
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings
