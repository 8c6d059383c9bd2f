#!/usr/bin/env bash
# After bar.sh: a lean task's room from the warm-up's measured peak (warm_peak_bytes). The GPU tests of
# the wave's memory (memory_short's runner-level test fixed: a report of status error is read with
# run_runner), then level 1's baselines from a cold cache (its 60 lean tasks), --overlap 8.
set -uo pipefail
export PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-lean ANVIL_REV=${ANVIL_REV:-unknown}
date -u
ANVIL_TEST_DEVICE=cuda timeout 200 python3 -m pytest python/tests/test_judge.py python/tests/test_warm.py -q \
  -p no:cacheprovider -k "short_of_memory" 2>&1 | grep -E "^E |passed|failed" | head -20
date -u
python3 bench/gpu_sampler.py > $OUT/samples-lean.txt 2>/dev/null &
SP=$!
KB=.carry/kernelbench STEPS=baselines LEVELS=1 BASELINE_ARGS="--jobs 16 --overlap 8" OUT=$OUT \
  bash bench/kernelbench_baselines.sh
date -u
kill $SP
