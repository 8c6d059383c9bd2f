#!/usr/bin/env bash
# One GPU-host run of everything that needs the GPU for the foundation issue:
# the binding-cost benchmark, the demo on the CUDA examples, and the build-speed
# benchmark (with load_inline as the anchor). Results go to $OUT (default
# bench/results). Usage on the GPU host: bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
day=$(date -u +%F)
export ANVIL_REV=${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== binding cost"; python3 bench/binding_bench.py --out "$OUT/binding-$day" 2>&1 | tail -20
echo "== demo"; scripts/demo.sh 2>&1 | tee "$OUT/demo-gpu-$day.log" | tail -30
echo "== build speed"; ANVIL_CACHE=$(mktemp -d) python3 bench/build_bench.py --out "$OUT/build-$day" 2>&1 | tail -25
