#!/usr/bin/env bash
# One GPU call for the judge's memory faults and the protocols (2026-11-26): the red team's
# memory_hog (a cheat that holds the GPU's memory so the judge's batch cannot draw: must be -1,
# gpu_memory), then an honest KernelBench single file (examples/kernelbench) and its renamed twin
# under both protocols, each with every defense on. Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export ANVIL_REV=${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u
echo "anvil $ANVIL_REV"
task=examples/redteam/tasks/small_chain.py
show() {  # file: one line per result
  python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j.get("timing") or {}
print("%-34s %-10s %-15s %-12s reward %2s | %s" % (sys.argv[1].rsplit("/", 1)[-1], (j.get("protocol") or {}).get("name"),
      j.get("outcome"), j.get("reason"), j.get("reward"), (j.get("message") or "").replace("\n", " ")[:150]))
print("    candidate_ms", t.get("candidate_ms"), "eager_ms", t.get("eager_ms"), "seconds", json.dumps(j.get("seconds", {}).get("total")),
      "memory", json.dumps((j.get("defenses") or {}).get("memory")))
PY
}
for protocol in cuda-agent kernelbench; do
  for c in small_chain_inline small_chain_renamed; do
    timeout 240 "$ANVIL_BIN" eval --json --protocol $protocol --compile-mode none --task $task \
      --candidate examples/kernelbench/$c.py > "$OUT/kb-$protocol-$c.json" 2> "$OUT/kb-$protocol-$c.err" || tail -3 "$OUT/kb-$protocol-$c.err"
    show "$OUT/kb-$protocol-$c.json"
  done
done
timeout 240 python3 bench/redteam_suite.py --device cuda --only "${ONLY:-memory_hog,answer_only_checked}" \
  --out "$OUT/redteam-memory-$(date -u +%F).json" 2>&1 | tail -12
