#!/usr/bin/env bash
# Issue 17's bar, packed: PART=1 the baselines of levels 3 and 2 in one command (level 2's warm-ups
# fill the slots level 3's longest compile leaves idle); PART=2 `anvil vet` of levels 1-3, then
# level 1's baselines. The parts share nothing but the machine: each may start on a fresh one.
# --overlap 8: waves of 8 measurements prepare together (the default is 4).
set -uo pipefail
export PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-bar ANVIL_REV=${ANVIL_REV:-unknown}
python3 bench/gpu_sampler.py > $OUT/samples-part$PART.txt 2>/dev/null &
SP=$!
date -u
case "$PART" in
  1) KB=.carry/kernelbench STEPS=baselines LEVELS="3+2" BASELINE_ARGS="--jobs 16 --overlap 8" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
  2) KB=.carry/kernelbench VET_ALL=1 STEPS=baselines LEVELS=1 BASELINE_ARGS="--jobs 16 --overlap 8" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
esac
date -u
kill $SP
