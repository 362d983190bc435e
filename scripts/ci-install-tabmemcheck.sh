#!/usr/bin/env bash
# Installs the peer for benches/vs_tabmemcheck.py and tests/vs_tabmemcheck.rs: tabmemcheck
# 0.1.6 (Bordt et al., "Elephants never forget"; PyPI) in a private virtual environment,
#   $TABCONTAM_TEST_ASSETS/venv-tabmemcheck   (default ~/.cache/tabcontam-test-assets)
# tabmemcheck talks to the same llama-server as tabcontam through its `openai` client
# (base_url = http://127.0.0.1:PORT/v1), so nothing else is needed at run time.
# Idempotent: skipped when the venv holds exactly these pinned versions (the stamp file).
set -euo pipefail

started=$(date +%s)
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
python="${PYTHON:-python3}"
venv="$assets/venv-tabmemcheck"
# Pinned: the side-by-side table in docs/vs-tabmemcheck.md was measured with these.
# tabmemcheck 0.1.6 does not bound pandas, but it tells text columns by `dtype == "object"`,
# which pandas 3 no longer gives them (its first-token test then fails in `df.mean()`):
# pandas 2.3.3 is the last release it works with.
packages=(tabmemcheck==0.1.6 pandas==2.3.3)

log() { printf 'ci-install-tabmemcheck: %s\n' "$*" >&2; }
mkdir -p "$assets"

stamp="$venv/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "${packages[*]}" ]]; then
    log "present: $venv"
else
    log "installing ${packages[*]} into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
    "$venv/bin/python" -c "import tabmemcheck" # fails the install when the import does
    echo "${packages[*]}" > "$stamp"
fi
log "done in $(( $(date +%s) - started ))s"
