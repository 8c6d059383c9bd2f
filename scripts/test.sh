#!/usr/bin/env bash
# Builds anvil and runs the whole test suite: C++ (GoogleTest under CTest) and
# Python (pytest). Usage: scripts/test.sh
source "$(dirname "$0")/lib.sh"
anvil_setup -DANVIL_WERROR=ON
say "C++ tests (ctest)"
(cd build && ctest --output-on-failure -j"$(nproc)")
say "Python tests (pytest)"
"$ANVIL_PYTHON" -m pytest python/tests -q
