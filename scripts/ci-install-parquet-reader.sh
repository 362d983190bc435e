#!/usr/bin/env bash
# Installs what tests/shards.rs needs to read `tabcontam cache export` files the way users
# do: Python's duckdb package, in its own small virtual environment
# $TABCONTAM_TEST_ASSETS/py-duckdb (default ~/.cache/tabcontam-test-assets/py-duckdb), from
# PyPI. Idempotent: nothing is installed when the package already imports.
set -euo pipefail

assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
python="${PYTHON:-python3}"
venv="$assets/py-duckdb"
# Pinned: the same DuckDB version as the library the binary links (scripts/ci-install-duckdb.sh).
package="duckdb==1.5.6"

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import duckdb" 2>/dev/null; then
    echo "parquet reader present: $venv ($("$venv/bin/python" -c 'import duckdb; print(duckdb.__version__)'))"
    exit 0
fi
mkdir -p "$assets"
[[ -x "$venv/bin/pip" ]] || "$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$package"
echo "installed $package into $venv"
