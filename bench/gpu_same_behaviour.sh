#!/usr/bin/env bash
# Issue 22's "behaviour unchanged": two anvils judge the same entries on the same GPU, one after the
# other, and every verdict (outcome, reason, reward) is compared. BEFORE is an older tree as
# `git archive REV` made it, unpacked at $BEFORE (default .carry/before) with its stripped binary at
# $BEFORE/build/anvil; AFTER is this tree with its binary ($ANVIL_BIN, .carry/anvil or build/anvil).
# Each side has a cache of its own, so neither reuses the other's builds or baselines. DEVICE=cpu
# runs the CPU variants on this machine instead (no GPU needed: the CPU's verdicts, rewards up to 1).
#   [DEVICE=cpu] bash bench/gpu_same_behaviour.sh [hack|redteam|bench]...     (default: all three)
# hack: the hack suite on CUDA (bench/hack_suite.py); redteam: the red team's attacks on CUDA
# (bench/redteam_suite.py); bench: `anvil bench` over the bundled examples. Each side's JSON goes to
# $OUT/<step>-{before,after}.json, the comparison to $OUT/same-behaviour-<step>.txt; exit 1 when a
# verdict differs.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/same-behaviour-${DEVICE:-cuda}}
BEFORE=${BEFORE:-$PWD/.carry/before}
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
AFTER_BIN=${ANVIL_BIN:-$PWD/build/anvil}
DEVICE=${DEVICE:-cuda}
cpu_bench=()
[ "$DEVICE" = cpu ] && cpu_bench=(--variant cpu --device cpu --compile-mode none)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
[ -x "$BEFORE/build/anvil" ] || { echo "no BEFORE tree at $BEFORE (its binary at build/anvil)"; exit 2; }
echo "before: $(cat "$BEFORE/REV" 2>/dev/null || echo '?')  after: $(git describe --always --dirty 2>/dev/null || echo '?')"
if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; else nproc; fi
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
date -u
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(hack redteam bench)
status=0

# side NAME TREE BIN STEP: one step run by one anvil, from its own tree, with its own cache.
side() {
  local name=$1 tree=$2 bin=$3 step=$4 out=$OUT/$4-$1.json t0=$SECONDS
  export ANVIL_CACHE=/tmp/anvil-same-$name ANVIL_BIN=$bin
  case $step in
    hack) (cd "$tree" && python3 bench/hack_suite.py --device "$DEVICE" --jobs "$(nproc)" --anvil "$bin" --out "$out" 2>&1 | tail -3) ;;
    redteam) (cd "$tree" && python3 bench/redteam_suite.py --device "$DEVICE" --anvil "$bin" --out "$out" 2>&1 | tail -3) ;;
    bench)
      rm -rf "/tmp/anvil-same-bench-$name"
      (cd "$tree" && "$bin" bench --tasks examples/tasks --solutions examples/candidates "${cpu_bench[@]}" \
         --out "/tmp/anvil-same-bench-$name" > /dev/null 2>&1)
      cp "/tmp/anvil-same-bench-$name/results.json" "$out" 2>/dev/null ;;
  esac
  echo "== $step $name: $((SECONDS - t0)) s"
}

for step in "${steps[@]}"; do
  side before "$BEFORE" "$BEFORE/build/anvil" "$step"
  side after "$PWD" "$AFTER_BIN" "$step"
  python3 bench/same_behaviour.py "$step" "$OUT/$step-before.json" "$OUT/$step-after.json" |
    tee "$OUT/same-behaviour-$step.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit $status
