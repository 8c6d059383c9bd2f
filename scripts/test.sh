#!/usr/bin/env bash
# Builds anvil and runs the whole test suite: C++ (GoogleTest under CTest) and
# Python (pytest), after installing the small local model the agent's real-model test
# uses (scripts/local_model.sh; ANVIL_SKIP_LOCAL_MODEL=1 skips both). Usage: scripts/test.sh
source "$(dirname "$0")/lib.sh"
anvil_setup -DANVIL_WERROR=ON
# The small real model the agent's local-model test drives (built once, into .venv-llm).
if [ -z "${ANVIL_SKIP_LOCAL_MODEL:-}" ]; then
  scripts/local_model.sh || { say "the local model could not be installed (above); set ANVIL_SKIP_LOCAL_MODEL=1 to skip its test"; exit 1; }
fi
say "C++ tests (ctest)"
(cd build && ctest --output-on-failure -j"$(nproc)")
say "Python tests (pytest)"
"$ANVIL_PYTHON" -m pytest python/tests -q
say "the README's first kernel (scripts/first_kernel.sh: init, edit, build, eval, no variable set)"
scripts/first_kernel.sh
