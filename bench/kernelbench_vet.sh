#!/usr/bin/env bash
# `anvil vet` over KernelBench's levels on the GPU host, timed per task (issue 17's vet bar: every
# L1-L3 problem vetted, p90 <= 10 s). KB: a checkout of KernelBench (nothing of it is copied into
# anvil); LEVELS (default "1 2 3"); PRESET (default strict). Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
KB=${KB:?set KB to a checkout of KernelBench}
mkdir -p "$OUT"
export ANVIL_REV=${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u
echo "anvil $ANVIL_REV"
# One `anvil vet` per task, a JSON line each as it ends, so a run stopped early keeps what it did.
# ONLY: a regex of task file names (default: all).
for level in ${LEVELS:-1 2 3}; do
  rows="$OUT/vet-level$level.jsonl"
  : > "$rows"
  for f in $(ls "$KB/KernelBench/level$level"/*.py | sort -V | grep -E "${ONLY:-.}"); do
    t0=$(date +%s.%N)
    timeout "${TASK_TIMEOUT:-120}" "$ANVIL_BIN" vet --json --preset "${PRESET:-strict}" --timeout "${TASK_TIMEOUT:-120}" "$f" \
      > "$OUT/vet.one.json" 2> "$OUT/vet.one.err"
    code=$?
    python3 - "$OUT/vet.one.json" "$f" "$code" "$t0" >> "$rows" <<'PY'
import json, sys, time
path, task, code, t0 = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
row = {"task": task.rsplit("/", 2)[-2] + "/" + task.rsplit("/", 1)[-1], "exit": code, "wall_s": round(time.time() - t0, 2)}
try:
    t = json.load(open(path))["tasks"][0]
    r = t.get("report") or {}
    row.update(status=t["status"], seconds=r.get("seconds"), flags=[f["flag"] for f in r.get("flags") or []],
               notes=[f["flag"] for f in r.get("notes") or []], error=(t.get("error") or "")[:200])
except Exception as e:  # noqa: BLE001 - a timeout or a crash: no report
    row.update(status="no_report", error=str(e)[:200])
print(json.dumps(row))
PY
  done
  python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
secs = sorted(r["seconds"] for r in rows if r.get("seconds") is not None)
walls = sorted(r["wall_s"] for r in rows)
p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None
print("%s: %d tasks; vet seconds p50 %s p90 %s max %s; wall per command p50 %s p90 %s, total %.0f s" % (
    sys.argv[1], len(rows), p(secs, .5), p(secs, .9), secs[-1] if secs else None, p(walls, .5), p(walls, .9), sum(walls)))
for r in rows:
    if r.get("status") != "ok" or (r.get("seconds") or 0) > 10:
        print("  %-50s %-9s %6s s %s %s" % (r["task"][:50], r.get("status"), r.get("seconds"), ",".join(r.get("flags") or []),
                                           (r.get("error") or "")[:100]))
PY
done
rm -f "$OUT/vet.one.json" "$OUT/vet.one.err"
