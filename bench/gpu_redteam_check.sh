#!/usr/bin/env bash
# The red team on the GPU host in one command: every attack of examples/redteam on CUDA (the
# single-file attacks run on the GPU; the workdir attacks are CPU variants), then, unless
# SMOKE=0, the bundled CUDA candidates through `anvil eval` with the judge's clock shown, unless
# AGENT=0 the agent's doors (bench/redteam_agent.py), and with SIGTERM=1 the stop test
# (bench/stop_check.py, STOP_GB GiB of input). Results go to $OUT.
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
if [ "${REDTEAM:-1}" = 1 ]; then
  python3 bench/redteam_suite.py --device cuda --out "$OUT/redteam-cuda-$day.json" ${ONLY:+--only "$ONLY"} 2>&1 | tail -30
fi
if [ "${SMOKE:-1}" = 1 ]; then
  for t in ${SMOKE_TASKS:-01_elementwise_chain 05_conv_bias_relu}; do
    "$ANVIL_BIN" eval --json --task examples/tasks/$t.py --candidate examples/candidates/$t/cuda > "$OUT/smoke-$t.json"
    python3 - "$OUT/smoke-$t.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j.get("timing") or {}
print(j["task"]["name"], j["outcome"], j.get("reason"), "reward", j["reward"], "|", (j.get("message") or "")[:200])
print("  candidate_ms", t.get("candidate_ms"), "eager_ms", t.get("eager_ms"), "compile_ms", t.get("compile_ms"),
      "bound", json.dumps(t.get("bound")))
for k in ("candidate", "eager"):
    print("  %s batch" % k, json.dumps((t.get(k) or {}).get("batch")))
print("  seconds", json.dumps(j.get("seconds")))
PY
  done
fi
if [ "${AGENT:-1}" = 1 ]; then
  python3 bench/redteam_agent.py --device cpu --out "$OUT/redteam-agent" 2>&1 | tail -14
fi
if [ "${SIGTERM:-0}" = 1 ]; then
  python3 bench/stop_check.py --gb "${STOP_GB:-2}" --out "$OUT/stop-$day.json" 2>&1 | tail -20
fi
