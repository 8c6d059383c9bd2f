#!/usr/bin/env bash
# Issue 17's bar with lean tasks prepared in waves when the GPU has room (judge.wave_room), and issue
# 24's memory_short. PART=1: the baselines of levels 3 and 2 in one command. PART=2: the GPU tests of
# the wave's memory (runner level), then `anvil vet` of levels 1-3, then level 1's baselines (its 60
# lean tasks). The parts share nothing but the machine. --overlap 8, as kb-bar-2026-11-29b.
set -uo pipefail
export PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-bar ANVIL_REV=${ANVIL_REV:-unknown}
date -u
if [ "$PART" = 2 ]; then
  ANVIL_TEST_DEVICE=cuda timeout 200 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider \
    -k "short_of_memory or lean_measurement_joins or prepared_together_park" 2>&1 | grep -E "^E |passed|failed" | head -20
  date -u
fi
python3 bench/gpu_sampler.py > $OUT/samples-part$PART.txt 2>/dev/null &
SP=$!
case "$PART" in
  1) KB=.carry/kernelbench STEPS=baselines LEVELS="3+2" BASELINE_ARGS="--jobs 16 --overlap 8" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
  2) KB=.carry/kernelbench VET_ALL=1 STEPS=baselines LEVELS=1 BASELINE_ARGS="--jobs 16 --overlap 8" OUT=$OUT \
       bash bench/kernelbench_baselines.sh ;;
esac
date -u
kill $SP
