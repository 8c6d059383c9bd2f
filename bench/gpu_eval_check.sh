#!/usr/bin/env bash
# The evaluation core's GPU-host checks in one command: bench/eval_bench.py
# (examples table, cached-evaluation time, timing stability, isolation, broken
# candidates). Results go to $OUT (default bench/results).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
day=$(date -u +%F)
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 bench/eval_bench.py --out "$OUT/eval-$day" 2>&1 | tail -80
echo "== build speed (fast and CUDA-Agent modes, no anchor)"
ANVIL_CACHE=$(mktemp -d) timeout 150 python3 bench/build_bench.py --no-anchor --out "$OUT/build-modes-$day" 2>&1 | tail -12
