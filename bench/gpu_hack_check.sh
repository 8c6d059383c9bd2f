#!/usr/bin/env bash
# The anti-hacking checks on the GPU host in one command: the hack suite on
# CUDA (every hack caught with its reason, every honest candidate passes) and,
# with OVERHEAD=1 (RUNS=N evaluations per side, default 3), the defenses' cost
# in wall time. Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
day=$(date -u +%F)
export PYTHONUNBUFFERED=1
export ANVIL_REV=${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
if [ "${OVERHEAD:-0}" = 1 ]; then
  python3 bench/hack_suite.py --device cuda --overhead --runs "${RUNS:-3}" --out "$OUT/hack-overhead-$day.json" ${ONLY:+--only "$ONLY"} 2>&1 | tail -40
else
  python3 bench/hack_suite.py --device cuda --out "$OUT/hack-suite-$day.json" ${ONLY:+--only "$ONLY"} 2>&1 | tail -70
fi
