#!/usr/bin/env bash
# Timing stability of `anvil bench` on the GPU host: 8 small level-1 tasks of the generated suite,
# evaluated four times: A with nothing cached, B again (baselines cached), C and D the same with
# torch.compile's compile workers off (TORCHINDUCTOR_COMPILE_THREADS=1), while a sampler records
# what else uses the CPU. Records and the sampler's log go to $OUT/timing-diag/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}/timing-diag
mkdir -p "$OUT"
ANVIL=${ANVIL_BIN:-$PWD/.carry/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
S=/tmp/diag-suite
[ -d $S ] || python3 bench/suite/make_suite.py --out $S >/dev/null
rm -rf /tmp/diag-sub && mkdir -p /tmp/diag-sub/tasks/level1 /tmp/diag-sub/sol/level1
for id in 7 14 16 18 21 33 36 38; do
  f=$(ls $S/tasks/level1/${id}_*.py); stem=$(basename "$f" .py)
  cp "$f" /tmp/diag-sub/tasks/level1/ && cp -r "$S/solutions/level1/$stem" /tmp/diag-sub/sol/level1/
done
( while true; do echo "== $(date +%T.%N)"; ps -eo pid,pgid,pcpu,etimes,comm --sort=-pcpu | head -6;
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; sleep 0.5; done ) > "$OUT/ps.log" 2>&1 &
mon=$!
go() {  # NAME CACHE [env...]
  local name=$1 cache=$2; shift 2
  local t0=$SECONDS
  env ANVIL_CACHE=$cache "$@" "$ANVIL" bench --tasks /tmp/diag-sub/tasks --solutions /tmp/diag-sub/sol \
    --out /tmp/diag-runs/$name 2>&1 | sed "s/^/$name /"
  echo "$name: $((SECONDS - t0)) s"
  mkdir -p "$OUT/$name" && cp -r /tmp/diag-runs/$name/tasks "$OUT/$name/"
}
rm -rf /tmp/diag-runs /tmp/diag-cA /tmp/diag-cC
go A /tmp/diag-cA
go B /tmp/diag-cA
go C /tmp/diag-cC TORCHINDUCTOR_COMPILE_THREADS=1
go D /tmp/diag-cC TORCHINDUCTOR_COMPILE_THREADS=1
kill $mon
