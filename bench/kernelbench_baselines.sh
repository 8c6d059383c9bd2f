#!/usr/bin/env bash
# Issue 17's scale bar on the GPU host: KernelBench's levels vetted and their eager + torch.compile
# baselines measured (`anvil vet DIR`, then `anvil baselines DIR`), with the wall time of each
# command. KB: a checkout of KernelBench (nothing of it is copied into anvil); LEVELS (default
# "1 2 3"; an entry "3+2": those levels' tasks in one command, so their warm-ups share one pool);
# EVERY=N: every Nth problem of each level only (a subset, in a temporary directory); BASELINE_ARGS:
# more options for `anvil baselines`; STEPS (default "vet baselines"). VET_ALL=1: the levels 1-3
# vetted by one `anvil vet` first (a directory of the three levels; with EVERY, its subset), then
# the baselines of LEVELS. Results go to $OUT.
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
summarize() {  # summarize FILE LEVEL STEP EXIT T0
  python3 - "$@" <<'PY'
import json, sys, time
path, level, step, code, t0 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
wall = time.time() - t0
try:
    doc = json.load(open(path))
except Exception as e:  # noqa: BLE001 - killed: no document
    print("level %s %s: exit %d after %.0f s, no document: %s" % (level, step, code, wall, e))
    sys.exit(0)
tasks, s = doc["tasks"], doc["summary"]
p = lambda xs, q: round(xs[min(len(xs) - 1, int(q * len(xs)))], 2) if xs else None
if step == "vet":
    print("level %s vet: %d tasks in %.0f s (exit %d): %d ok, %d flagged, %d errors"
          % (level, len(tasks), wall, code, s["ok"], s["flagged"], s["errors"]))
    walls = sorted(t.get("seconds", 0) for t in tasks)
    inside = sorted((t.get("report") or {}).get("seconds", 0) for t in tasks)
    print("  a vetting's process, launch to end: sum %.0f s, p50 %s, p90 %s, max %s; of it in anvil.vet: sum %.0f s, "
          "p50 %s, p90 %s" % (sum(walls), p(walls, .5), p(walls, .9), walls[-1] if walls else None, sum(inside),
                              p(inside, .5), p(inside, .9)))
    spans = [(t["started_s"], t["ended_s"]) for t in tasks if "started_s" in t and not t["cached"]]
    if spans:
        print("  vettings' windows: the first began %.1f s after the list was read, the last ended at %.1f s; windows "
              "sum %.0f s" % (min(a for a, _ in spans), max(b for _, b in spans), sum(b - a for a, b in spans)))
    sys.exit(0)
secs = sorted(t["seconds"]["total"] for t in tasks if t["status"] != "cached")
w = doc["warm"]
print("level %s baselines: %d tasks in %.0f s (exit %d; warm-up %d tasks, %d at a time, %.0f s, %d failed, %s again alone; "
      "overlap %s, %s measured again): %d measured, %d cached, %d not kept, %d task errors, %d errors; a task p50 %s "
      "p90 %s max %s s" % (level, len(tasks), wall, code, w["tasks"], w["jobs"], w["seconds"], len(w["failed"]),
                           w.get("again"), doc.get("overlap"), doc.get("measured_again"), s["measured"], s["cached"],
                           s["not_kept"], s["task_errors"], s["errors"], p(secs, .5), p(secs, .9),
                           secs[-1] if secs else None))
# Where a measured task's time went: the judge's phases (seconds summed over the tasks, and p50)
phases = {}
for t in tasks:
    for k, v in ((t.get("seconds") or {}).get("judge") or {}).items():
        if not k.startswith("@") and k != "origin" and isinstance(v, (int, float)):
            phases.setdefault(k, []).append(v)
print("  judge's phases, sum / p50 over the tasks: " + ", ".join(
    "%s %.0f / %.2f" % (k, sum(v), p(sorted(v), .5)) for k, v in sorted(phases.items(), key=lambda kv: -sum(kv[1]))))
# Lean tasks (a set of a GiB or more): how many prepared in a wave, and the judge's peak against its room
lean = [t for t in tasks if (t.get("inputs") or {}).get("lean")]
if lean:
    waved = [t for t in lean if "wave_bytes" in t["inputs"]]
    ratios = sorted((t["inputs"].get("prepare_peak_bytes", 0) / t["inputs"]["wave_bytes"], t["task"].get("name", ""))
                    for t in waved)
    print("  lean tasks: %d, %d prepared in a wave (%d with the warm-up's peak); the judge's peak while prepared over its room: "
          "max %s (%s), over 1: %d" % (len(lean), len(waved), sum(1 for t in waved if t["inputs"].get("warm_peak_bytes")),
                                       round(ratios[-1][0], 2) if ratios else None, ratios[-1][1] if ratios else "-",
                                       sum(1 for r, _ in ratios if r > 1)))
for t in tasks:
    if t["status"] not in ("measured", "cached") or not t["compile_ms"]:
        print("  %-50s %-10s %s" % (t["task"].get("name", t["spec"])[:50], t["status"], (t["message"] or "")[:150]))
for f in w["failed"][:5]:
    print("  warm-up failed: %s: %s" % (f["spec"].split("/")[-1], f["why"][:150]))
PY

}
t_all=$(date +%s.%N)
if [ -n "${VET_ALL:-}" ]; then
  all=$(mktemp -d)/kernelbench
  for level in 1 2 3; do
    mkdir -p "$all/level$level"
    ls -v "$KB/KernelBench/level$level"/*.py | { if [ -n "${EVERY:-}" ]; then awk -v n="$EVERY" 'NR % n == 1'; else cat; fi; } \
      | xargs -I{} cp {} "$all/level$level/"
  done
  t_vet=$(date +%s.%N)
  "$ANVIL_BIN" vet --json "$all" > "$OUT/vet-all.json" 2> /tmp/vet-all.err
  summarize "$OUT/vet-all.json" "1-3" vet $? "$t_vet"
fi
for level in ${LEVELS:-1 2 3}; do
  dir="$KB/KernelBench/level$level"
  if [ -n "${EVERY:-}" ] || [[ $level == *+* ]]; then  # a subset, or levels joined: copies in one directory
    dir=$(mktemp -d)/level$level
    for one in ${level//+/ }; do
      mkdir -p "$dir/level$one"
      ls -v "$KB/KernelBench/level$one"/*.py | { if [ -n "${EVERY:-}" ]; then awk -v n="$EVERY" 'NR % n == 1'; else cat; fi; } \
        | xargs -I{} cp {} "$dir/level$one/"
    done
  fi
  name=level${level//+/-}  # "3+2": level3-2 (the device tool returns no file named with "+")
  for step in ${STEPS:-vet baselines}; do
    t0=$(date +%s.%N)
    if [ $step = vet ]; then
      "$ANVIL_BIN" vet --json "$dir" > "$OUT/vet-$name.json" 2> "/tmp/vet-$name.err"
    else
      "$ANVIL_BIN" baselines --json ${BASELINE_ARGS:-} "$dir" > "$OUT/baselines-$name.json" 2> "/tmp/baselines-$name.err"
    fi
    code=$?
    summarize "$OUT/$step-$name.json" "$level" "$step" "$code" "$t0"
  done
done
python3 -c "import sys,time; print('all levels: %.0f s' % (time.time() - float(sys.argv[1])))" "$t_all"
