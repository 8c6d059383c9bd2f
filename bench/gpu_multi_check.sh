#!/usr/bin/env bash
# Issue 24 on a host of two or more GPUs: `anvil bench` over the 100-task suite on each GPU alone and
# on both at once (throughput per GPU, a candidate's time with the other GPU busy against alone on the
# same GPU), then `anvil serve --gpus 0,1` under 64 concurrent scripted sessions with a kill -9
# part-way (both GPUs held, nothing lost or answered twice).
#   bash bench/gpu_multi_check.sh [prefill|alone0|both|alone1|compare|serve|serve-evals|all]   (default all)
# A stage's name may carry a suffix (alone0-o1, both-o1, compare-o1) to keep runs of other settings
# apart, OVERLAP=N setting bench's --overlap for the runs.
# prefill measures the suite's baselines ahead (level 1 on GPU 0 and level 2 on GPU 1 at once, each
# `anvil baselines --overlap 2`), vets its tasks and builds its solutions, so that every bench run
# after it times candidates only: the runs differ in where they ran and nothing else. Stages go in
# separate commands as the device tool's 10-minute limit needs; each needs the ones before it on the
# same machine (the caches live in $ANVIL_CACHE). Results: $OUT/multi-gpu-<date>/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
RUNS=${RUNS:-/tmp/anvil-multi-runs}
SUITE=${SUITE:-/tmp/anvil-bench-suite}
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-multi-cache}
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
ANVIL=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_BIN=$ANVIL
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
stage=${1:-all}
day=$(date -u +%F)
res=$OUT/multi-gpu-$day
mkdir -p "$res" "$RUNS"
log=$res/$stage.log
exec > >(tee -a "$log") 2>&1
"$ANVIL" --version
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
nproc
date -u
if [ "$ngpu" -lt 2 ]; then echo "this host has $ngpu GPU(s): issue 24 needs two"; exit 2; fi

suite() {
  [ -d "$SUITE/tasks" ] || python3 bench/suite/make_suite.py --out "$SUITE" --faults
}

# bench NAME GPUS: one run over the suite on those GPUs, OVERLAP evaluations at once on each (anvil
# bench's default when unset); its report and records kept as bench-NAME.
bench() {
  local name=$1 gpus=$2 dir=$RUNS/$1
  local overlap=()
  if [ -n "${OVERLAP:-}" ]; then overlap=(--overlap "$OVERLAP"); fi
  echo "== $name: --gpus $gpus ${overlap[*]}"
  local t0=$SECONDS rc=0
  "$ANVIL" bench --tasks "$SUITE/tasks" --solutions "$SUITE/solutions" --out "$dir" --gpus "$gpus" "${overlap[@]}" || rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  if [ -f "$dir/results.json" ]; then
    mkdir -p "$res/bench-$name"
    cp "$dir/report.md" "$dir/results.json" "$res/bench-$name/"
    tar czf "$res/bench-$name/records.tgz" -C "$dir" bench.json tasks
  fi
  return $rc
}

prefill() {
  suite || return 1
  local t0=$SECONDS
  "$ANVIL" baselines "$SUITE/tasks/level1" --gpu 0 --overlap 2 --json > "$res/baselines-level1.json" 2> "$res/baselines-level1.err" &
  local p0=$!
  "$ANVIL" baselines "$SUITE/tasks/level2" --gpu 1 --overlap 2 --json > "$res/baselines-level2.json" 2> "$res/baselines-level2.err" &
  local p1=$!
  wait $p0; local r0=$?
  wait $p1; local r1=$?
  echo "== baselines: exit $r0 (level 1, GPU 0) and $r1 (level 2, GPU 1) after $((SECONDS - t0)) s"
  tail -n 3 "$res/baselines-level1.err" "$res/baselines-level2.err"
  t0=$SECONDS
  find "$SUITE/solutions" -mindepth 3 -maxdepth 3 -type d -name cuda -print0 |
    xargs -0 -P 16 -n 1 "$ANVIL" build >/dev/null 2>&1 &
  local pb=$!
  "$ANVIL" vet "$SUITE/tasks" --jobs 8 > "$res/vet.txt" 2>&1
  echo "== vet: exit $? after $((SECONDS - t0)) s: $(tail -1 "$res/vet.txt")"
  wait $pb
  echo "== builds and vet: done after $((SECONDS - t0)) s"
}

# compare [SUFFIX]: the runs alone0SUFFIX, alone1SUFFIX (where made) and bothSUFFIX.
compare() {
  local x=${1:-} singles=(--single "0=$RUNS/alone0${1:-}")
  if [ -f "$RUNS/alone1$x/bench.json" ]; then singles+=(--single "1=$RUNS/alone1$x"); fi
  python3 bench/multi_gpu_check.py "${singles[@]}" --multi "$RUNS/both$x" --out "$res/compare$x.json" | tail -1
}

serve() {
  # 64 rollout workers' sessions over both GPUs for DURATION s, the server killed at KILL_AT s.
  timeout 580 python3 bench/serve_load.py --device cuda --sessions --server-args "--gpus 0,1" \
    --clients "${CLIENTS:-64}" --duration "${DURATION:-240}" --kill-at "${KILL_AT:-120}" --overhead-runs 0 \
    --no-sequential --out "$res/serve-sessions.json" 2> "$res/serve.err" | tail -c 200
  tail -3 "$res/serve.err"
}

serve_evals() {
  # 64 clients submitting the bundled candidates' evaluations over both GPUs for DURATION s.
  timeout 250 python3 bench/serve_load.py --device cuda --server-args "--gpus 0,1" --clients "${CLIENTS:-64}" \
    --duration "${DURATION:-80}" --overhead-runs 0 --no-sequential --out "$res/serve-evals.json" \
    2> "$res/serve-evals.err" | tail -c 200
  tail -1 "$res/serve-evals.err"
}

status=0
case $stage in
  prefill) prefill || status=1 ;;
  alone0*) suite && bench "$stage" 0 || status=1 ;;
  both*) suite && bench "$stage" 0,1 || status=1 ;;
  alone1*) suite && bench "$stage" 1 || status=1 ;;
  compare*) compare "${stage#compare}" || status=1 ;;
  serve) serve || status=1 ;;
  serve-evals) serve_evals || status=1 ;;
  all)
    prefill || status=1
    bench alone0 0 || status=1
    bench both 0,1 || status=1
    bench alone1 1 || status=1
    compare || status=1
    serve || status=1
    ;;
  *) echo "usage: $0 [prefill|alone0[SUFFIX]|both[SUFFIX]|alone1[SUFFIX]|compare[SUFFIX]|serve|serve-evals|all]"; exit 2 ;;
esac
exit $status
