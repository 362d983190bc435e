# tabcontam tasks. `pip install rust-just` installs `just` in seconds.

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", env_var("HOME") + "/.cache/tabcontam-target")

# The main job on the embedded defaults (see README).
demo:
    cargo run --release -- parity ../shared/parity

# The test suite, exactly as CI runs it.
test:
    cargo test

# Benchmarks named in the issues.
bench:
    cargo run --release -- --help > /dev/null
    @echo "benchmarks arrive with the tracker (see README § Benchmarks)"

fmt:
    cargo fmt --all

lint:
    cargo fmt --all -- --check
    cargo clippy --all-targets -- -D warnings
