#!/usr/bin/env bash
# Issue 54's checks on the GPU host (a sound oracle: no check the candidate can predict, no verdict of
# its choosing, no false positive of anvil's own making), as steps of one script:
#   bash bench/gpu_issue54_check.sh STEP...        (default: env redteam hacks kbfiles)
# env       the device, driver, torch, CUDA and the date
# before    the attacks that needed a GPU to show, judged by the anvil before the fixes ($BEFORE:
#           `git archive` of d62ad83 with its stripped binary at $BEFORE/build/anvil)
# redteam   examples/redteam on CUDA (bench/redteam_suite.py): every attack caught, every honest entry ok
# hacks     examples/hacks on CUDA (bench/hack_suite.py)
# kbfiles   KernelBench's own files, every defense on (bench/kernelbench_check.py): few-shot,
#           adversarial, the public loss hacks of branch bkal01/fix-level1-hacks and their correct
#           solutions, the fixed Sakana kernel (KB: a KernelBench tree holding those files; .carry/kb)
# models    each problem of KernelBench's levels $LEVELS (default "1 2 3") with its own Model as the
#           candidate (renamed ModelNew) under --protocol kernelbench through `anvil bench`, within
#           $MODELS_S seconds: every one must be ok (issue 54's false-positive bar); $MODELS_EVERY=K
#           takes every K-th problem of each level (by number, from $MODELS_FROM, default 1) instead
# cost      what the stress trials cost: warm `anvil eval` of the first $COST_TASKS problems of
#           level 1 (their own Models), with the default stress trials and with --stress-trials 0,
#           alternated, $COST_RUNS each (the ratio's bar: at most 1.15)
# Results under $OUT (default bench/results/issue54-<date>); anvil: $ANVIL_BIN, .carry/anvil or build/anvil.
set -uo pipefail
cd "$(dirname "$0")/.."
day=$(date -u +%F)
OUT=${OUT:-bench/results/issue54-$day}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
KB=${KB:-$PWD/.carry/kb}
BEFORE=${BEFORE:-$PWD/.carry/before}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-issue54}
export PYTHONUNBUFFERED=1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(env redteam hacks kbfiles)
status=0

# What a step stopped at its limit leaves behind (its anvil and the evaluations' processes on the GPU)
# must not run beside the next step: it once held 69 GiB and made another evaluation run out.
reap() {
  pkill -9 -x anvil 2>/dev/null
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | xargs -r kill -9 2>/dev/null
  sleep 1
}

models() {  # KernelBench levels $1 (e.g. "1 2 3"), each problem with its own Model as the candidate
  local levels=$1 sols=/tmp/anvil-issue54-models tasks=/tmp/anvil-issue54-tasks run=/tmp/anvil-issue54-bench
  rm -rf "$sols" "$tasks" && mkdir -p "$sols" "$tasks"
  for level in $levels; do
    cp -r "$KB/KernelBench/level$level" "$tasks/"
    mkdir -p "$sols/level$level"
    python3 - "$KB/KernelBench/level$level" "$sols/level$level" "$tasks/level$level" "${MODELS_EVERY:-1}" "${MODELS_FROM:-1}" <<'PY'
import os, re, sys
src, dst, tasks, every, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
for name in sorted(os.listdir(src)):
    if not name.endswith(".py"):
        continue
    number = int(name.split("_")[0])
    if number < first or (number - first) % every:
        os.remove(os.path.join(tasks, name))
        continue
    open(os.path.join(dst, name), "w").write(re.sub(r"\bModel\b", "ModelNew", open(os.path.join(src, name)).read()))
PY
  done
  rm -rf "$run"
  # within MODELS_S seconds (the device call's limit): what finished is summed from the per-task records
  timeout "${MODELS_S:-540}" "$ANVIL_BIN" bench --tasks "$tasks" --solutions "$sols" --protocol kernelbench \
      --compile-mode none --no-progress --out "$run" > "$OUT/models.txt" 2>&1
  python3 - "$run" "$OUT/models.json" <<'PY' | tee -a "$OUT/models.txt"
import glob, json, os, sys
run, out = sys.argv[1:]
rows = []
for path in sorted(glob.glob(os.path.join(run, "tasks", "*", "*.json"))):
    r = json.load(open(path))
    res = r.get("eval") or {}
    rows.append({"task": os.path.relpath(path, os.path.join(run, "tasks")), "outcome": r.get("outcome") or res.get("outcome"),
                 "reason": res.get("reason"), "reward": r.get("reward", res.get("reward")),
                 "stress": [s.get("distribution") for s in ((res.get("defenses") or {}).get("stress") or {}).get("planned") or []],
                 "seconds": r.get("seconds"), "message": (r.get("message") or res.get("message") or "")[:400],
                 "first_try": (res.get("isolation") or {}).get("first_try"),
                 "memory": ((res.get("defenses") or {}).get("memory"))})
bad = [r for r in rows if r["outcome"] != "ok"]
json.dump({"rows": rows}, open(out, "w"), indent=1)
print("%d problems judged, %d ok, %d not ok" % (len(rows), len(rows) - len(bad), len(bad)))
for r in bad:
    print("  NOT OK %s: %s/%s %s" % (r["task"], r["outcome"], r["reason"], r["message"].replace("\n", " ")[:300]))
PY
}

for step in "${steps[@]}"; do
  t0=$SECONDS
  echo "== $step"
  case $step in
    env)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
      echo "anvil $(cat .carry/REV 2>/dev/null || git describe --always --dirty 2>/dev/null)"; date -u ;;
    before)
      [ -x "$BEFORE/build/anvil" ] || { echo "no BEFORE tree at $BEFORE"; status=1; continue; }
      ANVIL_CACHE=/tmp/anvil-issue54-before python3 bench/redteam_suite.py --device cuda --anvil "$BEFORE/build/anvil" \
          --only "${BEFORE_ONLY:-thread_launch}" --out "$OUT/redteam-before.json" 2>&1 | tail -8 ;;
    redteam)
      python3 bench/redteam_suite.py --device cuda --out "$OUT/redteam-cuda.json" 2>&1 | tail -40 || status=1 ;;
    hacks)
      python3 bench/hack_suite.py --device cuda --jobs "${JOBS:-8}" --out "$OUT/hacks-cuda.json" 2>&1 | tail -45 || status=1 ;;
    kbfiles)
      KERNELBENCH_REV=$(cat "$KB/REV" 2>/dev/null) python3 bench/kernelbench_check.py --kernelbench "$KB" \
          --out "$OUT/kb-files.json" 2>&1 | tail -50 || status=1 ;;
    models)
      models "${LEVELS:-1 2 3}" ;;
    cost)
      python3 - "$KB" "$OUT/cost.json" "${COST_TASKS:-12}" "${COST_RUNS:-3}" <<'PY' | tee "$OUT/cost.txt"
import json, os, re, statistics, subprocess, sys, time
kb, out, n, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
anvil = os.environ["ANVIL_BIN"]
level = os.path.join(kb, "KernelBench", "level1")
names = sorted((f for f in os.listdir(level) if f.endswith(".py")), key=lambda f: int(f.split("_")[0]))[:n]
rows = []
for name in names:
    task = os.path.join(level, name)
    cand = "/tmp/anvil-issue54-cost-%s" % name
    open(cand, "w").write(re.sub(r"\bModel\b", "ModelNew", open(task).read()))
    def one(stress):
        t0 = time.perf_counter()
        p = subprocess.run([anvil, "eval", "--json", "--protocol", "kernelbench", "--compile-mode", "none", "--task", task,
                            "--candidate", cand, "--stress-trials", str(stress)], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        try:
            j = json.loads(p.stdout)
        except ValueError:
            j = {}
        clocks = (((j.get("defenses") or {}).get("seconds") or {}))
        clock, mine = clocks.get("judge") or {}, clocks.get("candidate") or {}
        return {"wall_s": wall, "outcome": j.get("outcome"), "stress": ((j.get("defenses") or {}).get("stress") or {}).get("planned"),
                "clock": {k: v for k, v in clock.items() if k.startswith("stress") or k in ("probe_task", "verify", "outputs")},
                "candidate": {k: v for k, v in mine.items() if k.startswith("stress") or k.startswith("verify")}}
    one(2)  # warm: vet, baselines, the zygote
    pairs = [(one(2), one(0)) for _ in range(runs)]
    with_, without = statistics.median(a["wall_s"] for a, _ in pairs), statistics.median(b["wall_s"] for _, b in pairs)
    rows.append({"task": name, "with_s": round(with_, 3), "without_s": round(without, 3), "ratio": round(with_ / without, 3),
                 "outcomes": sorted({a["outcome"] for a, _ in pairs} | {b["outcome"] for _, b in pairs}),
                 "stress": pairs[-1][0]["stress"], "clock_with": pairs[-1][0]["clock"], "clock_without": pairs[-1][1]["clock"],
                 "candidate_with": pairs[-1][0]["candidate"], "candidate_without": pairs[-1][1]["candidate"]})
    print("%-50s with %.2f s  without %.2f s  ratio %.3f  %s  judge: %s  candidate: %s / %s" % (
          name, with_, without, with_ / without, rows[-1]["outcomes"], json.dumps(rows[-1]["clock_with"]),
          json.dumps(rows[-1]["candidate_with"]), json.dumps(rows[-1]["candidate_without"])), flush=True)
ratios = [r["ratio"] for r in rows]
print("median ratio %.3f, max %.3f over %d problems (runs %d each)" % (statistics.median(ratios), max(ratios), len(rows), runs))
json.dump({"rows": rows, "median_ratio": statistics.median(ratios), "max_ratio": max(ratios)}, open(out, "w"), indent=1)
PY
      ;;
    *) echo "unknown step $step"; status=2 ;;
  esac
  reap
  echo "== $step: $((SECONDS - t0)) s"
done
exit $status
