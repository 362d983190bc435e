#!/usr/bin/env bash
# CI's wheel phase (after the tests): builds the wheel from the binary the tests built
# (`scripts/wheel.sh --profile dev`, no second compile), installs it into a fresh virtual
# environment, and with no Rust or cargo on PATH runs the demo's first step (offline: the
# model was put in $TABCONTAM_TEST_ASSETS/models by ci-install-local-models.sh), its report,
# and the decision parity with the authors' verdicts (../shared/parity). Fails on any step;
# prints the wheel's size and each step's time.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
parity="${TABCONTAM_PARITY_DIR:-$repo/../shared/parity}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { printf '== wheel: %s\n' "$*"; }
timed() {
    local started=$(date +%s)
    "$@"
    step "$(( $(date +%s) - started )) s for: ${*: -3}"
}

started=$(date +%s)
wheel=$(TABCONTAM_WHEEL_DIR="$work/dist" bash "$here/wheel.sh" --profile dev | tail -1)
step "built $(basename "$wheel"), $(( $(stat -c %s "$wheel") / 1000000 )) MB, in $(( $(date +%s) - started )) s"

python3 -m venv "$work/venv"
# --no-index: the wheel brings everything; nothing may come from PyPI.
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"

mkdir -p "$work/study/experiments"
cp "$repo/experiments/demo.toml" "$work/study/experiments/"
cd "$work/study"
# A clean environment: the venv's bin and the system's, no cargo, no DuckDB folder hint.
clean=(env -i "HOME=$HOME" "PATH=$work/venv/bin:/usr/bin:/bin" "TABCONTAM_HOME=$assets"
       "TABCONTAM_PROGRESS_INTERVAL=60")
if "${clean[@]}" bash -c 'command -v cargo || command -v rustc' >/dev/null; then
    echo "error: cargo or rustc is on the clean PATH; the wheel check would prove nothing" >&2
    exit 1
fi
"${clean[@]}" tabcontam --version
timed "${clean[@]}" tabcontam run experiments/demo.toml --offline
timed "${clean[@]}" tabcontam report
test -s reports/report.html && test -s reports/scores.json
timed "${clean[@]}" tabcontam parity "$parity"
step "passed in $(( $(date +%s) - started )) s"
