#!/usr/bin/env bash
# Installs the MLflow tracking server that tests/mlflow.rs exports to (`tabcontam export
# mlflow`, read back through MLflow's REST API): mlflow from PyPI in a private virtual
# environment,
#   $TABCONTAM_TEST_ASSETS/venv-mlflow   (default ~/.cache/tabcontam-test-assets)
# The test starts `venv-mlflow/bin/mlflow server --serve-artifacts` on loopback with a
# SQLite backend store in a temporary folder; nothing else is needed at run time.
# The full `mlflow` package, not `mlflow-skinny`: the skinny one has no tracking server
# (its `mlflow server` lacks Flask, SQLAlchemy, Alembic and the UI's static files).
# Idempotent: skipped when the venv holds exactly this pinned version (the stamp file).
# Measured on the 2-core machine: about 100 s the first time (wheels only, nothing
# compiled), under 1 s when present.
set -euo pipefail

started=$(date +%s)
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
python="${PYTHON:-python3}"
venv="$assets/venv-mlflow"
# Pinned: tests/mlflow.rs reads back what this version's REST API returns.
packages=(mlflow==3.17.2)

log() { printf 'ci-install-mlflow: %s\n' "$*" >&2; }
mkdir -p "$assets"

stamp="$venv/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "${packages[*]}" && -x "$venv/bin/mlflow" ]]; then
    log "present: $venv"
else
    log "installing ${packages[*]} into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "${packages[@]}"
    # Fails the install when the server cannot even start its command line.
    "$venv/bin/mlflow" server --help > /dev/null
    echo "${packages[*]}" > "$stamp"
fi
log "done in $(( $(date +%s) - started ))s"
