#!/usr/bin/env bash
# `anvil bench` on the GPU host: the bundled examples, then a 100-task suite in KernelBench layout
# (bench/suite/make_suite.py --faults: 100 tasks, two levels, with a few broken, missing, extra and
# unreadable entries), first with nothing cached (builds and baselines measured), then again into a
# new run directory with builds and baselines cached: the measured bar (100 tasks in at most 10
# minutes on one GPU host) and its tasks-per-minute figure. Each stage resumes its run when it was
# cut off (the device tool's 10-minute limit per command), so the stages can go in separate commands:
#   bash bench/gpu_bench_check.sh [examples|cold|builds|warm|compare|all]      (default all)
# Reports (report.md, report.html, results.json) and this log go to $OUT/bench-*-<date>/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
RUNS=${RUNS:-/tmp/anvil-bench-runs}
SUITE=${SUITE:-/tmp/anvil-bench-suite}
LIMIT=${LIMIT:-0}  # seconds a stage may run before it is stopped (0: no limit); --resume continues it
stage=${1:-all}
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-bench-cache}
# A run can span machines (each lent for a while): STATE_IN, a tarball a STATE_OUT wrote, restores the
# run directories and the measured caches (baselines, task vetting, roofline), never builds (those
# are host-bound and are made again: the `builds` stage).
if [ -n "${STATE_IN:-}" ] && [ -f "$STATE_IN" ]; then tar xzf "$STATE_IN" -C / && echo "restored $STATE_IN"; fi
if [ -n "${STATE_OUT:-}" ]; then
  trap 'tar czf "$STATE_OUT" -C / ${RUNS#/} $(cd / && ls -d ${ANVIL_CACHE#/}/baselines ${ANVIL_CACHE#/}/vet ${ANVIL_CACHE#/}/roofline 2>/dev/null) && echo "state saved to $STATE_OUT"' EXIT
fi
mkdir -p "$OUT" "$RUNS"
day=$(date -u +%F)
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
ANVIL=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
"$ANVIL" --version
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
date -u

# run NAME TASKS SOLUTIONS: one benchmark run, resumed when its directory exists; reports to $OUT.
run() {
  local name=$1 tasks=$2 sols=$3 dir=$RUNS/$1 resume=()
  [ -f "$dir/bench.json" ] && resume=(--resume)
  echo "== $name: $tasks against $sols ${resume[*]}"
  local t0=$SECONDS rc=0
  if [ "$LIMIT" -gt 0 ]; then
    timeout -s INT "$LIMIT" "$ANVIL" bench --tasks "$tasks" --solutions "$sols" --out "$dir" "${resume[@]}" || rc=$?
  else
    "$ANVIL" bench --tasks "$tasks" --solutions "$sols" --out "$dir" "${resume[@]}" || rc=$?
  fi
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  if [ -f "$dir/results.json" ]; then
    mkdir -p "$OUT/bench-$name-$day"
    cp "$dir/report.md" "$dir/report.html" "$dir/results.json" "$OUT/bench-$name-$day/"
    tar czf "$OUT/bench-$name-$day/records.tgz" -C "$dir" bench.json tasks  # every number's record
  fi
  return $rc
}

suite() {
  [ -d "$SUITE/tasks" ] || python3 bench/suite/make_suite.py --out "$SUITE" --faults
}

# The warm run against the cold one: the same solutions timed twice (timing stability).
compare() {
  "$ANVIL" bench compare "$RUNS/suite-cold" "$RUNS/suite-warm" --out "$OUT/bench-suite-cold-vs-warm-$day.md" &&
    head -40 "$OUT/bench-suite-cold-vs-warm-$day.md"
}

status=0
case $stage in
  examples) run examples examples/tasks examples/candidates || status=1 ;;
  cold) suite && run suite-cold "$SUITE/tasks" "$SUITE/solutions" || status=1 ;;
  warm) suite && run suite-warm "$SUITE/tasks" "$SUITE/solutions" || status=1 ;;
  compare) compare || status=1 ;;
  builds)  # every CUDA solution into the build cache (in place), so a warm run finds them built
    suite && find "$SUITE/solutions" -mindepth 3 -maxdepth 3 -type d -name cuda -print0 |
      xargs -0 -P 8 -n 1 "$ANVIL" build >/dev/null 2>&1
    echo "== builds: done after $SECONDS s" ;;
  all)
    run examples examples/tasks examples/candidates || status=1
    suite && run suite-cold "$SUITE/tasks" "$SUITE/solutions" || status=1
    run suite-warm "$SUITE/tasks" "$SUITE/solutions" || status=1
    compare || status=1
    ;;
  *) echo "usage: $0 [examples|cold|builds|warm|compare|all]"; exit 2 ;;
esac
exit $status
