#!/usr/bin/env bash
# Builds the Python wheel of the `tabcontam` command (pyproject.toml: maturin,
# `bindings = "bin"`) into dist/ (or $TABCONTAM_WHEEL_DIR):
#   tabcontam-<version>-py3-none-manylinux_<glibc>_x86_64.whl
# holding the binary and DuckDB's libduckdb.so (grafted by maturin's auditwheel repair
# under a hashed name, with an $ORIGIN rpath to it), so `pip install` of it needs no Rust,
# no DuckDB and no network. Datasets, dictionary, prompts, templates and SQL are compiled
# into the binary.
#
#   bash scripts/wheel.sh               release profile (what users install)
#   bash scripts/wheel.sh --profile dev CI: reuses the binary `cargo test` built (the dev
#                                       profile optimizes dependencies and the kernels)
# Prints the wheel's path last.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tabcontam-target}"
out="${TABCONTAM_WHEEL_DIR:-dist}"
profile=(--release)
if [[ "${1:-}" == "--profile" ]]; then
    profile=(--profile "${2:?--profile needs a cargo profile, e.g. dev}")
fi

bash "$here/ci-install-duckdb.sh" >&2
bash "$here/ci-install-wheel-tools.sh"
# A stale wheel of another build must not be picked up below.
rm -f "$out"/tabcontam-*.whl
PATH="$assets/venv-maturin/bin:$PATH" maturin build --locked "${profile[@]}" --out "$out" >&2
wheel=$(ls "$out"/tabcontam-*.whl)
echo "$wheel"
