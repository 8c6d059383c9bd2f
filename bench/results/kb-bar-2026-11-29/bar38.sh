#!/usr/bin/env bash
# issue 17's bar with baselines prepared together: PART=1 vet L1-L3 then L3's baselines; PART=2 L1's
# and L2's baselines. One machine, back to back (ANVIL_CACHE kept between the calls).
set -uo pipefail
export PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-bar ANVIL_REV=${ANVIL_REV:-unknown}
python3 bench/gpu_sampler.py > $OUT/samples-part$PART.txt 2>/dev/null &
SP=$!
date -u
case "$PART" in
  1) KB=.carry/kernelbench VET_ALL=1 STEPS=baselines LEVELS=3 BASELINE_ARGS="--jobs 16" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
  2) KB=.carry/kernelbench STEPS=baselines LEVELS="1 2" BASELINE_ARGS="--jobs 16" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
esac
date -u
kill $SP
