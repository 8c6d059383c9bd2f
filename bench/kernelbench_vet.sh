#!/usr/bin/env bash
# `anvil vet` over KernelBench's levels on the GPU host (issue 17's vet bar: every L1-L3 problem
# vetted, p90 <= 10 s): one `anvil vet LEVEL_DIR --json` per level, its default parallelism, the
# wall time of each. KB: a checkout of KernelBench (nothing of it is copied into anvil); LEVELS
# (default "1 2 3"); PRESET (default strict); JOBS (default: anvil's). Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
KB=${KB:?set KB to a checkout of KernelBench}
mkdir -p "$OUT"
export ANVIL_REV=${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u
echo "anvil $ANVIL_REV"
for level in ${LEVELS:-1 2 3}; do
  t0=$(date +%s.%N)
  "$ANVIL_BIN" vet --json --preset "${PRESET:-strict}" ${JOBS:+--jobs "$JOBS"} --timeout "${TASK_TIMEOUT:-300}" \
    "$KB/KernelBench/level$level" > "$OUT/vet-level$level.json" 2> "/tmp/vet-level$level.err"
  code=$?
  python3 - "$OUT/vet-level$level.json" "$level" "$code" "$t0" <<'PY'
import json, sys, time
path, level, code, t0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
wall = time.time() - t0
try:
    doc = json.load(open(path))
except Exception as e:  # noqa: BLE001 - killed: no document
    print("level %s: exit %d after %.0f s, no report: %s" % (level, code, wall, e))
    sys.exit(0)
tasks = doc["tasks"]
secs = sorted((t["report"] or {}).get("seconds") or 0 for t in tasks if not t["cached"])
p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None
s = doc["summary"]
print("level %s: %d tasks in %.0f s wall (%.2f s a task; exit %d): %d ok, %d flagged, %d errors, %d cached; "
      "vet seconds in the process p50 %s p90 %s max %s" % (level, len(tasks), wall, wall / max(1, len(tasks)), code,
      s["ok"], s["flagged"], s["errors"], s["cached"], p(secs, .5), p(secs, .9), secs[-1] if secs else None))
for t in tasks:
    r = t["report"] or {}
    notes = [n["flag"] for n in r.get("notes") or []]
    if t["status"] != "ok" or notes:
        print("  %-55s %-8s %s%s %s" % (t["name"][:55], t["status"], ",".join(t["flags"]),
                                       (" notes: " + ",".join(notes)) if notes else "", (t["error"] or "")[:120]))
PY
done
